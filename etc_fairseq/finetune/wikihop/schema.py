"""WikiHop (QAngaroo) records and the fields ``etc-prepare wikihop`` writes, declared once for the converter,
the task and the metric.

- :class:`WikiHopRecord` / :func:`read_wikihop`: the official JSON (``{"id", "query", "candidates",
  "supports", "answer"}``), validated with errors that name file, record and field.
- :func:`is_correct`: the official answer match (lower-cased, stripped), used to validate records, to flag
  correct candidates at preparation and by the official metric.
- :func:`field_specs`: every stored field; :func:`target_fields`: the task's own (targets), as the task loads
  them: ``answer_index`` [1] (index of the first candidate equal to the answer, -1 without one) and
  ``candidate_correct`` [C] (1 where the candidate matches the answer).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

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


def target_fields():
    """The targets (:class:`~etc_fairseq.data.structured.FieldSpec` list; narrow dtypes: < 2**15 candidates)."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("answer_index", dtype="int16", pad=-1, role="target", length="own", required=True),
        FieldSpec("candidate_correct", dtype="int8", pad=0, role="target", length="own", required=True),
    ]


def field_specs(flat: bool, hard_candidates: bool = True):
    """Every field written per example (narrow dtypes: global indices < 2**15, token ids < 2**31); no
    ``long_links`` with ``flat`` (the flat-structure ablation); ``global_hard_g2l`` (candidates attend only to
    their mentions) unless ``flat`` or not ``hard_candidates``."""
    from etc_fairseq.data.structured import CORE_FIELDS

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
    return [dataclasses.replace(CORE_FIELDS[n], dtype=d) for n, d in names.items()] + target_fields()


@dataclass
class WikiHopRecord:
    """One QAngaroo WikiHop instance (``answer`` is None in test files)."""

    id: str
    query: str
    candidates: List[str]
    supports: List[str]
    answer: Optional[str]


def _check_str_list(path, i, rid, name, value, allow_empty_items: bool) -> List[str]:
    where = f"{path}: record {i} (id {rid!r}): field {name!r}"
    if not isinstance(value, list):
        raise InputFormatError(f"{where}: expected a list of strings, got {type(value).__name__}")
    for j, item in enumerate(value):
        if not isinstance(item, str):
            raise InputFormatError(f"{where}: item {j}: expected a string, got {type(item).__name__}")
        if not allow_empty_items and not item.strip():
            raise InputFormatError(f"{where}: item {j}: expected a non-empty string, got {item!r}")
    return value


def read_wikihop(path: PathLike) -> List[WikiHopRecord]:
    """Read and validate an official WikiHop JSON file.

    Raises:
        FileNotFoundError: no such file.
        InputFormatError: invalid JSON or a bad record; the message names the file, the record (index and
            id) and the field, and says what was expected (e.g. an answer that is not among the candidates).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such WikiHop file")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise InputFormatError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise InputFormatError(f"{path}: not UTF-8 text ({e})") from None
    if not isinstance(data, list):
        raise InputFormatError(f"{path}: expected a JSON list of WikiHop records, got {type(data).__name__}")
    out: List[WikiHopRecord] = []
    seen = set()
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise InputFormatError(f"{path}: record {i}: expected a JSON object, got {type(rec).__name__}")
        rid = rec.get("id")
        if not isinstance(rid, str) or not rid:
            raise InputFormatError(f"{path}: record {i}: field 'id': expected a non-empty string, got {rid!r}")
        if rid in seen:
            raise InputFormatError(f"{path}: record {i} (id {rid!r}): field 'id': duplicate id")
        seen.add(rid)
        query = rec.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InputFormatError(f"{path}: record {i} (id {rid!r}): field 'query': expected a non-empty string, got {query!r}")
        candidates = _check_str_list(path, i, rid, "candidates", rec.get("candidates"), allow_empty_items=False)
        if not candidates:
            raise InputFormatError(f"{path}: record {i} (id {rid!r}): field 'candidates': expected at least one candidate")
        supports = _check_str_list(path, i, rid, "supports", rec.get("supports"), allow_empty_items=True)
        answer = rec.get("answer")
        if answer is not None:
            if not isinstance(answer, str):
                raise InputFormatError(f"{path}: record {i} (id {rid!r}): field 'answer': expected a string, got {type(answer).__name__}")
            if not any(is_correct(c, answer) for c in candidates):
                raise InputFormatError(
                    f"{path}: record {i} (id {rid!r}): field 'answer': {answer!r} is not among the candidates "
                    f"({len(candidates)} candidates, compared lower-cased and stripped)"
                )
        out.append(WikiHopRecord(rid, query, list(candidates), list(supports), answer))
    return out
