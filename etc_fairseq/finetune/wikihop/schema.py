"""WikiHop (QAngaroo) records and the fields ``etc-prepare wikihop`` writes, declared once for the converter,
the task and the metric.

- :class:`WikiHopRecord` / :func:`read_wikihop`: the official JSON (``{"id", "query", "candidates",
  "supports", "answer"}``), validated with errors that name file, record and field.
- :func:`query_words`, :func:`candidate_pattern`: the query's words and a candidate's mention pattern (the
  pattern is read by the converter's links and by the word-overlap baseline alike).
- :func:`is_correct`: the official answer match (lower-cased, stripped), used to validate records, to flag
  correct candidates at preparation and by the official metric.
- :func:`field_specs`: every stored field; :func:`target_fields`: the task's own (targets), as the task loads
  them: ``answer_index`` [1] (index of the first candidate equal to the answer, -1 without one) and
  ``candidate_correct`` [C] (1 where the candidate matches the answer).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from etc_fairseq.finetune.common.fields import RecordFields
from etc_fairseq.prepare.documents import InputFormatError

PathLike = Union[str, Path]


def normalize_answer(text: str) -> str:
    """The official normalisation: lower-case, strip surrounding whitespace."""
    return text.lower().strip()


def is_correct(prediction: Optional[str], answer: str) -> bool:
    """Whether one prediction (``None`` = missing) matches the gold answer after :func:`normalize_answer`."""
    if prediction is None:
        return False
    return normalize_answer(prediction) == normalize_answer(answer)


def query_words(query: str) -> List[str]:
    """Words of a WikiHop query ``"relation subject"``: the relation's underscores become spaces.

    ``"country_of_citizenship john smith"`` -> ``["country", "of", "citizenship", "john", "smith"]``.
    """
    words = query.split()
    if not words:
        return []
    return words[0].replace("_", " ").split() + words[1:]


def candidate_pattern(candidate: str) -> "re.Pattern[str]":
    """Case-insensitive regex of one candidate on word boundaries (its words separated by any whitespace)."""
    body = r"\s+".join(re.escape(w) for w in candidate.split())
    return re.compile(r"(?<!\w)" + body + r"(?!\w)", re.IGNORECASE)


def target_fields():
    """The targets (:class:`~etc_fairseq.data.structured.FieldSpec` list; narrow dtypes: < 2**15 candidates):
    ``answer_index`` [1], ``candidate_correct`` [C], and in data prepared with ``--no-globals`` (not required
    otherwise) ``long_candidate`` [long_len] (each long token's candidate index, -1 outside the candidate list)
    and ``question_len`` [1] (the query pieces, at long positions ``1 .. question_len``)."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("answer_index", dtype="int16", pad=-1, role="target", length="own", required=True),
        FieldSpec("candidate_correct", dtype="int8", pad=0, role="target", length="own", required=True),
        FieldSpec("long_candidate", dtype="int16", pad=-1, role="target", length="long", required=False),
        FieldSpec("question_len", dtype="int16", pad=0, role="target", length="own", required=False),
    ]


def field_specs(flat: bool, hard_candidates: bool = True, no_globals: bool = False):
    """Every field written per example (narrow dtypes: global indices < 2**15, token ids < 2**31); no
    ``long_links`` with ``flat`` (the flat-structure ablation); ``global_hard_g2l`` (candidates attend only to
    their mentions) unless ``flat`` or not ``hard_candidates``. ``no_globals``: only a CLS global token and no
    structure ids; the candidates' long pieces (``long_candidate``) and ``question_len`` instead."""
    from etc_fairseq.data.structured import CORE_FIELDS

    if no_globals:
        names = {"long_tokens": "int32", "global_tokens": "int32", "global_types": "int8", "long_segment": "int16",
                 "long_context": "int16"}
        return [dataclasses.replace(CORE_FIELDS[n], dtype=d) for n, d in names.items()] + target_fields()
    targets = [f for f in target_fields() if f.required]
    names = {
        "long_tokens": "int32",
        "global_tokens": "int32",
        "global_types": "int8",
        "long_segment": "int16",
        "global_parent": "int16",
        "long_context": "int16",
        "global_context": "int16",
    }
    if not flat:
        names["long_links"] = "int16"
        if hard_candidates:
            names["global_hard_g2l"] = "int8"
    return [dataclasses.replace(CORE_FIELDS[n], dtype=d) for n, d in names.items()] + targets


@dataclass
class WikiHopRecord:
    """One QAngaroo WikiHop instance (``answer`` is None in test files)."""

    id: str
    query: str
    candidates: List[str]
    supports: List[str]
    answer: Optional[str]


def read_wikihop(path: PathLike) -> List[WikiHopRecord]:
    """Read and validate an official WikiHop JSON file.

    Raises:
        FileNotFoundError: no such file.
        InputFormatError: invalid JSON or a bad record; the message names the file, the record (index and
            id) and the field, and says what was expected (e.g. an answer that is not among the candidates).
    """
    from etc_fairseq.guards import UniqueIds, load_json_file

    path = Path(path)
    data = load_json_file(path, "an official WikiHop JSON file")
    if not isinstance(data, list):
        raise InputFormatError(f"{path}: expected a JSON list of WikiHop records, got {type(data).__name__}")
    if not data:
        raise InputFormatError(f"{path}: an empty list: no WikiHop records")
    out: List[WikiHopRecord] = []
    ids = UniqueIds("id")
    for i, rec in enumerate(data):
        r = RecordFields(f"{path}: record {i}")
        r.record(rec)
        rid = r.get(rec, "id", str, "a non-empty string", check=bool)
        ids.add(rid, r.where)
        r.identify("id", repr(rid))
        query = r.get(rec, "query", str, "a non-empty string", check=str.strip)
        candidates = r.str_list(rec, "candidates", non_empty_items=True)
        if not candidates:
            raise r.fail("candidates", "at least one candidate", candidates)
        first_at = {}
        for k, c in enumerate(candidates):
            key = normalize_answer(c)
            if key in first_at:
                raise InputFormatError(
                    f"{r.where}: field 'candidates': candidate {k} {c!r} repeats candidate {first_at[key]} "
                    "(compared lower-cased and stripped); each candidate must occur once"
                )
            first_at[key] = k
        supports = r.str_list(rec, "supports")
        answer = r.get(rec, "answer", str, "a string", default=None)
        if answer is not None and not any(is_correct(c, answer) for c in candidates):
            raise r.fail("answer", f"one of the {len(candidates)} candidates (compared lower-cased and stripped)", answer)
        out.append(WikiHopRecord(rid, query, list(candidates), list(supports), answer))
    return out
