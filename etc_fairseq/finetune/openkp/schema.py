"""OpenKP records and stored fields, declared once for the converter, the task and the metric.

- :class:`OpenKPRecord` / :func:`iter_records`: the official jsonl (``url``, ``text``, ``VDOM``,
  ``KeyPhrases``), validated with errors that name file, line, url and field; :func:`parse_keyphrases`
  reads the ``KeyPhrases`` field (gold files and prediction files alike).
- :func:`target_fields` (what the task loads: ``word_of_piece``, ``ngram_ids``, ``gold_phrases``,
  ``node_features``) and :func:`field_specs` (everything written: also ``long_segment``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.prepare.documents import InputFormatError, open_text

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
    if not isinstance(item, dict):
        raise InputFormatError(f"{where}: expected a JSON object, got {type(item).__name__}")
    url = item.get("url")
    if not isinstance(url, str) or not url:
        raise InputFormatError(f"{where}: field 'url' missing or not a non-empty string")
    where = f"{where} (url {url!r})"
    text = item.get("text")
    if not isinstance(text, str):
        raise InputFormatError(f"{where}: field 'text' missing or not a string")
    words = text.split()
    if "VDOM" not in item:
        raise InputFormatError(f"{where}: field 'VDOM' missing")
    vdom = item["VDOM"]
    if isinstance(vdom, str):
        try:
            vdom = json.loads(vdom)
        except json.JSONDecodeError as e:
            raise InputFormatError(f"{where}: field 'VDOM' is not a valid JSON string ({e})") from None
    if not isinstance(vdom, list):
        raise InputFormatError(f"{where}: field 'VDOM' must be a JSON list of nodes, got {type(vdom).__name__}")
    nodes = []
    for i, node in enumerate(vdom):
        nw = f"{where}: field 'VDOM' node {i}"
        if not isinstance(node, dict):
            raise InputFormatError(f"{nw}: expected an object, got {type(node).__name__}")
        for key in ("start_idx", "end_idx", "feature"):
            if key not in node:
                raise InputFormatError(f"{nw}: field '{key}' missing")
        start, end = node["start_idx"], node["end_idx"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise InputFormatError(f"{nw}: 'start_idx'/'end_idx' must be integers, got {start!r}, {end!r}")
        if not 0 <= start <= end <= len(words):
            raise InputFormatError(
                f"{nw}: word range start_idx={start}, end_idx={end} out of bounds (need 0 <= start_idx <= "
                f"end_idx <= {len(words)}, the number of words in 'text')"
            )
        feats = node["feature"]
        if (
            not isinstance(feats, list)
            or len(feats) != NUM_VISUAL_FEATURES
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in feats)
        ):
            got = f"{len(feats)} values" if isinstance(feats, list) else type(feats).__name__
            raise InputFormatError(f"{nw}: field 'feature' must be a list of {NUM_VISUAL_FEATURES} numbers, got {got}")
        if not all(np.isfinite(feats)):
            raise InputFormatError(f"{nw}: field 'feature' has a non-finite value")
        nodes.append(VdomNode(start, end, [float(v) for v in feats]))
    keyphrases = None
    if "KeyPhrases" in item:
        keyphrases = parse_keyphrases(item["KeyPhrases"], where)
    elif require_keyphrases:
        raise InputFormatError(f"{where}: field 'KeyPhrases' missing (needed for training and validation files)")
    return OpenKPRecord(url, words, nodes, keyphrases)


def iter_records(path: Path, require_keyphrases: bool) -> Iterator[Tuple[str, OpenKPRecord]]:
    """Yield (``file:line``, record) for every non-blank line of an OpenKP jsonl (gzip/bz2 allowed)."""
    path = Path(path)
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputFormatError(f"{where}: not valid JSON ({e})") from None
            yield where, parse_record(item, where, require_keyphrases)


def parse_keyphrases(value, where: str) -> List[Phrase]:
    """The ``KeyPhrases`` field: a list of word lists; the whole field is also accepted as a JSON string holding
    such a list (as in the OpenKP README's example). ``where`` names file/line/url for errors.

    A phrase given as one string (``"doctor appointment"`` instead of ``["doctor", "appointment"]``) is
    refused: the official evaluator joins a string's characters (``"d o c t o r ..."``) and scores it 0, so
    splitting it at whitespace would score differently from the leaderboard, silently.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InputFormatError(f"{where}: field 'KeyPhrases' is a string but not JSON ({e})") from None
    if not isinstance(value, list):
        raise InputFormatError(f"{where}: field 'KeyPhrases' must be a list of word lists, got {type(value).__name__}")
    for i, p in enumerate(value):
        if isinstance(p, str):
            raise InputFormatError(
                f"{where}: field 'KeyPhrases' element {i} is a string {p[:60]!r}; expected a list of words "
                f"such as {p.split()[:5]!r} (the official evaluator scores a string phrase 0)"
            )
        if not isinstance(p, list) or not all(isinstance(w, str) for w in p):
            raise InputFormatError(f"{where}: field 'KeyPhrases' must be a list of word lists, got element {p!r}")
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
