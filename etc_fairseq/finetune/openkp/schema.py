"""OpenKP records and stored fields, declared once for the converter, the task and the metric.

- :class:`OpenKPRecord` / :func:`iter_records`: the official jsonl (``url``, ``text``, ``VDOM``,
  ``KeyPhrases``), validated with errors that name file, line, url and field; :func:`parse_keyphrases`
  reads the ``KeyPhrases`` field (gold files and prediction files alike).
- :func:`target_fields` (what the task loads: ``word_of_piece``, ``ngram_ids``, ``gold_phrases``,
  ``node_features``) and :func:`field_specs` (everything written: also ``long_segment``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.finetune.common.fields import RecordFields, is_kind
from etc_fairseq.guards import UniqueIds, iter_json_lines, parse_json
from etc_fairseq.prepare.documents import InputFormatError

#: a keyphrase: its words (a phrase given as one string is refused, see :func:`parse_keyphrases`)
Phrase = Sequence[str]

#: floats per VDOM node (10 for the node, 10 for its parent)
NUM_VISUAL_FEATURES = 20
#: longest keyphrase candidate (n-grams of 1..5 words)
MAX_NGRAM = 5
#: gold_phrases value of a gold keyphrase that does not occur in the kept words
GOLD_NOT_IN_DOCUMENT = -2

DEFAULT_MAX_LONG_LEN = 4096
DEFAULT_MAX_GLOBAL_LEN = 512


@dataclass
class VdomNode:
    """One VDOM node: words ``[start, end)`` of the page text and its 20 raw features."""

    start: int
    end: int
    features: List[float]


@dataclass
class OpenKPRecord:
    url: str
    words: List[str]
    nodes: List[VdomNode]
    keyphrases: Optional[list]  # None when the file has no KeyPhrases


def parse_record(item: object, where: str, require_keyphrases: bool) -> OpenKPRecord:
    """Validate one decoded jsonl object.

    Args:
        item: the decoded JSON value of one line.
        where: ``file:line`` for messages (the url is appended once known).
        require_keyphrases: the ``KeyPhrases`` field must be present (train/valid files).
    Raises:
        InputFormatError: naming file, line, url and field, and what was expected.
    """
    r = RecordFields(where)
    r.record(item)
    url = r.get(item, "url", str, "a non-empty string", check=bool)
    r.identify("url", repr(url))
    words = r.get(item, "text", str, "a string").split()
    vdom = r.get(item, "VDOM", (str, list), "a JSON list of nodes (or a string holding one)")
    if isinstance(vdom, str):
        vdom = parse_json(vdom, f"{r.where}: field 'VDOM' (a string holding JSON)")
        if not isinstance(vdom, list):
            raise r.fail("VDOM", "a JSON list of nodes", vdom)
    nodes = []
    for i, node in enumerate(vdom):
        name = f"VDOM[{i}]"
        if not isinstance(node, dict):
            raise r.fail(name, "an object {start_idx, end_idx, feature}", node)
        start = r.get(node, "start_idx", int, "an integer", name=f"{name}.start_idx")
        end = r.get(node, "end_idx", int, "an integer", name=f"{name}.end_idx")
        if not 0 <= start <= end <= len(words):
            raise r.fail(f"{name}.start_idx/end_idx", f"a word range 0 <= start_idx <= end_idx <= {len(words)} (the "
                         "number of words in 'text')", [start, end])
        feats = r.get(node, "feature", list, f"a list of {NUM_VISUAL_FEATURES} finite numbers", name=f"{name}.feature",
                      check=lambda f: len(f) == NUM_VISUAL_FEATURES and all(is_kind(v, float) for v in f)
                      and bool(np.isfinite(f).all()))
        nodes.append(VdomNode(start, end, [float(v) for v in feats]))
    keyphrases = None
    if "KeyPhrases" in item:
        keyphrases = parse_keyphrases(item["KeyPhrases"], r.where)
    elif require_keyphrases:
        raise r.fail("KeyPhrases", "a list of word lists (training and validation files need it)")
    return OpenKPRecord(url, words, nodes, keyphrases)


def iter_records(path: Path, require_keyphrases: bool) -> Iterator[Tuple[str, OpenKPRecord]]:
    """Yield (``file:line``, record) for every non-blank line of an OpenKP jsonl (gzip/bz2 allowed)."""
    path = Path(path)
    urls = UniqueIds("url")
    for where, item in iter_json_lines(path, "an OpenKP jsonl file"):
        record = parse_record(item, where, require_keyphrases)
        urls.add(record.url, where)
        yield where, record


def parse_keyphrases(value, where: str) -> List[Phrase]:
    """The ``KeyPhrases`` field: a list of word lists; the whole field is also accepted as a JSON string holding
    such a list (as in the OpenKP README's example). ``where`` names file/line/url for errors.

    A phrase given as one string (``"doctor appointment"`` instead of ``["doctor", "appointment"]``) is
    refused: the official evaluator joins a string's characters (``"d o c t o r ..."``) and scores it 0, so
    splitting it at whitespace would score differently from the leaderboard, silently.
    """
    if isinstance(value, str):
        value = parse_json(value, f"{where}: field 'KeyPhrases' (a string holding JSON)")
    r = RecordFields(where)
    if not isinstance(value, list):
        raise r.fail("KeyPhrases", "a list of word lists", value)
    for i, p in enumerate(value):
        if isinstance(p, str):
            raise InputFormatError(
                f"{where}: field 'KeyPhrases' element {i} is a string {p[:60]!r}; expected a list of words "
                f"such as {p.split()[:5]!r} (the official evaluator scores a string phrase 0)"
            )
        if not isinstance(p, list) or not all(isinstance(w, str) for w in p):
            raise r.fail(f"KeyPhrases[{i}]", "a list of words (strings)", p)
    return value


def target_fields():
    """The task's stored fields (:class:`~etc_fairseq.data.structured.FieldSpec` list)."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("word_of_piece", dtype="int32", pad=-1, role="target", length="long", required=True),
        FieldSpec("ngram_ids", dtype="int32", pad=-1, role="target", length="own", required=True),
        FieldSpec("gold_phrases", dtype="int32", pad=-1, role="target", length="own", required=True),
        FieldSpec("node_features", dtype="float64", pad=0.0, role="net_input", length="global", required=True),
    ]


def field_specs():
    """Every stored field besides the always-present core ones: ``long_segment`` and :func:`target_fields`."""
    from etc_fairseq.data.structured import CORE_FIELDS

    return [CORE_FIELDS["long_segment"]] + target_fields()
