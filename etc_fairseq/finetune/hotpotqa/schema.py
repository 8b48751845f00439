"""HotpotQA's record schema, declared once for the converter, the task, decoding and the metric.

- :class:`AnswerType`: span / yes / no (the answer-type head's classes and the ``answer_type`` target).
- :class:`HotpotRecord` / :func:`read_hotpotqa`: the official JSON, validated with errors that name file,
  record and field.
- :func:`target_fields`: the stored targets: ``sp_label`` int8 [global_len] (1 = gold supporting sentence,
  0 = other sentence, -1 = not a sentence token or no gold), ``answer_type`` int8 [1] (:class:`AnswerType`,
  -1 unknown), ``answer_span`` int32 [2] (first / last long position of the gold answer, -1 if none).
- :class:`SideUnit`: the positions of one entry of a side record's ``units`` list.
- :class:`Gold` / :func:`read_gold`: what the official metric compares against, one definition whether it
  comes from an official file (:func:`read_gold`, through :func:`read_hotpotqa`) or from a prepared split's
  side records (:meth:`Gold.from_side`: the converter stores the gold answer and supporting facts there, and
  only there).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple

from etc_fairseq.finetune.common.fields import RecordFields, is_kind
from etc_fairseq.prepare.documents import InputFormatError


class AnswerType(enum.IntEnum):
    """The answer types, in the order of the answer-type head's outputs."""

    SPAN = 0
    YES = 1
    NO = 2

    @property
    def label(self) -> str:
        """``span`` / ``yes`` / ``no``; for YES and NO also the answer text."""
        return self.name.lower()


def answer_type_of(answer: Optional[str]) -> int:
    """The :class:`AnswerType` of a gold answer ("yes" / "no", case-insensitive, else SPAN); -1 when no
    answer is given (test files)."""
    if answer is None:
        return -1
    a = answer.strip().lower()
    return int(AnswerType.YES if a == AnswerType.YES.label else AnswerType.NO if a == AnswerType.NO.label else AnswerType.SPAN)


def target_fields():
    """The task fields written besides the core ones (:class:`~etc_fairseq.data.structured.FieldSpec` list)."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("sp_label", dtype="int8", pad=-1, role="target", length="global", required=True),
        FieldSpec("answer_type", dtype="int8", pad=-1, role="target", length="own", required=True),
        FieldSpec("answer_span", dtype="int32", pad=-1, role="target", length="own", required=True),
    ]


class SideUnit:
    """Positions in one entry of a side record's ``units``: ``[paragraph, sentence (-1 = title),
    global_index, long_start, long_end]`` (the title or sentence's long tokens are ``[long_start, long_end)``)."""

    PARAGRAPH, SENTENCE, GLOBAL_INDEX, LONG_START, LONG_END = range(5)


@dataclass
class HotpotRecord:
    """One official record, validated. ``answer`` / ``supporting_facts`` / ``type`` are None in test files."""

    id: str
    question: str
    context: List[Tuple[str, List[str]]]
    answer: Optional[str] = None
    supporting_facts: Optional[List[Tuple[str, int]]] = None
    type: Optional[str] = None


def _is_pair(value, first, second) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and is_kind(value[0], first) and is_kind(value[1], second)


def parse_record(rec, index: int, path) -> HotpotRecord:
    """Validate one JSON record; InputFormatError names the file, the record (``_id`` or index) and field."""
    r = RecordFields(f"{path}: record {index}")
    r.record(rec)
    _id = r.get(rec, "_id", str, "a non-empty string", check=bool)
    r.identify("_id", _id)
    question = r.get(rec, "question", str, "a string")
    ctx = r.get(rec, "context", list, "a list of [title, [sentences]]")
    context = []
    for p, par in enumerate(ctx):
        if not _is_pair(par, str, list) or not all(isinstance(s, str) for s in par[1]):
            raise r.fail(f"context[{p}]", "[title, [sentence strings]]", par)
        context.append((par[0], list(par[1])))
    answer = r.get(rec, "answer", str, "a string", default=None)
    sf = r.get(rec, "supporting_facts", list, "a list of [title, sentence_index]", default=None,
               check=lambda facts: all(_is_pair(f, str, int) for f in facts))
    facts = None if sf is None else [(f[0], int(f[1])) for f in sf]
    rtype = r.get(rec, "type", str, "a string", default=None)
    return HotpotRecord(_id, question, context, answer, facts, rtype)


def read_hotpotqa(path) -> List[HotpotRecord]:
    """Read and validate an official HotpotQA JSON file (a list of records)."""
    from etc_fairseq.guards import UniqueIds, load_json_file

    path = Path(path)
    data = load_json_file(path, "an official HotpotQA JSON file")
    if not isinstance(data, list):
        raise InputFormatError(f"{path}: expected a JSON list of HotpotQA records, got {type(data).__name__}")
    records = [parse_record(rec, i, path) for i, rec in enumerate(data)]
    ids = UniqueIds("_id")
    for i, rec in enumerate(records):
        ids.add(rec.id, f"{path}: record {i}")
    return records


class Gold(NamedTuple):
    """One gold example of the official metric: its id, answer text and supporting facts ``(title, index)``."""

    id: str
    answer: str
    supporting_facts: Sequence[Tuple[str, int]]

    @classmethod
    def from_side(cls, side: dict) -> Optional["Gold"]:
        """The gold of a side record (``{split}.side.jsonl``); None for a test split (no answer stored)."""
        if side.get("answer") is None or side.get("supporting_facts") is None:
            return None
        return cls(side["id"], side["answer"], [(t, int(i)) for t, i in side["supporting_facts"]])


def read_gold(path) -> List[Gold]:
    """The gold examples of an official HotpotQA file (read and validated by :func:`read_hotpotqa`).

    Raises:
        InputFormatError: a record without ``answer`` or ``supporting_facts`` (a test file), or no records at
            all (the metric would average over nothing); one line naming the file (and record and field).
    """
    records = read_hotpotqa(path)
    if not records:
        raise InputFormatError(f"{path}: no gold records (an empty list); expected HotpotQA records with answers")
    out = []
    for i, rec in enumerate(records):
        for name in ("answer", "supporting_facts"):
            if getattr(rec, name) is None:
                raise InputFormatError(f"{path}: record {i} (_id {rec.id}): field {name!r} is missing (gold files need answers "
                                       "and supporting facts)")
        out.append(Gold(rec.id, rec.answer, rec.supporting_facts))
    return out
