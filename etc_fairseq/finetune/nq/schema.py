"""Natural Questions records, the answer-type classes and the stored fields, declared once for the converter,
the task, decoding, the criterion's official metric and ``etc-evaluate nq``.

- :data:`ANSWER_TYPES` (``TYPE_*``): the classes of the answer-type head, in the paper's order.
- :class:`NqExample` / :func:`read_nq_file`: the official jsonl (full or simplified, gzipped or not),
  validated with errors that name file, line and field; :class:`NqAnnotation`, :class:`NqSpan`.
- :func:`encode_gold` / :func:`decode_gold`: all annotations of an example as the flat ``gold`` field.
- :func:`target_fields` (what the task loads) and :func:`field_specs` (everything written).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from etc_fairseq.finetune.common.fields import RecordFields
from etc_fairseq.prepare.documents import InputFormatError

PathLike = Union[str, Path]

#: answer type classes predicted from the long CLS token (paper appendix C order)
ANSWER_TYPES = ("null", "yes", "no", "short", "long")
TYPE_NULL, TYPE_YES, TYPE_NO, TYPE_SHORT, TYPE_LONG = range(5)
#: yes_no_answer values, as stored in the ``gold`` field
YES_NO_VALUES = ("NONE", "YES", "NO")


# ---------------------------------------------------------------------------------------------------------
# reading the official files
# ---------------------------------------------------------------------------------------------------------


@dataclass
class NqSpan:
    """``[start_token, end_token)`` plus byte offsets (-1 where absent); all -1 = null."""

    start_token: int = -1
    end_token: int = -1
    start_byte: int = -1
    end_byte: int = -1

    @property
    def is_null(self) -> bool:
        return self.start_token < 0 and self.end_token < 0 and self.start_byte < 0 and self.end_byte < 0


@dataclass
class NqAnnotation:
    """One annotator's answer: a long span (null or a candidate), short spans, yes/no (NONE/YES/NO)."""

    long_answer: NqSpan
    short_answers: List[NqSpan]
    yes_no_answer: str = "NONE"
    candidate_index: int = -1


@dataclass
class NqExample:
    """One NQ record. ``words`` are the document tokens (HTML included), ``is_html`` their flags;
    ``candidates`` ``(start_token, end_token, top_level)``; ``source`` is ``file:line`` for messages."""

    example_id: Any
    question: str
    words: List[str]
    is_html: List[bool]
    candidates: List[Tuple[int, int, bool]]
    annotations: List[NqAnnotation]
    source: str = ""


def is_html_token_text(token: str) -> bool:
    """The simplified form has no HTML flags: a token is HTML iff it looks like a tag ``<...>``."""
    return len(token) >= 3 and token[0] == "<" and token[-1] == ">"


def _span(r: RecordFields, d: Any, path: str, num_words: Optional[int]) -> NqSpan:
    """One ``{start_token, end_token[, start_byte, end_byte]}`` object, checked (-1/-1 = null)."""
    if not isinstance(d, dict):
        raise r.fail(path, "an object with start_token/end_token", d)
    s = r.get(d, "start_token", int, "an integer", name=f"{path}.start_token")
    e = r.get(d, "end_token", int, "an integer", name=f"{path}.end_token")
    sb = r.get(d, "start_byte", int, "an integer", name=f"{path}.start_byte", default=-1)
    eb = r.get(d, "end_byte", int, "an integer", name=f"{path}.end_byte", default=-1)
    if (s < 0) != (e < 0):
        raise r.fail(path, "start_token and end_token both -1 (null) or both >= 0", d)
    if s >= 0 and (s >= e or (num_words is not None and e > num_words)):
        raise r.fail(path, f"0 <= start_token < end_token <= {num_words} document tokens", d)
    return NqSpan(s, e, sb, eb)


def parse_nq_record(obj: Any, where: str, with_document: bool = True) -> NqExample:
    """One parsed JSON object -> :class:`NqExample` (either form), validating every field used.

    Args:
        obj: the decoded JSON line.
        where: ``file:line`` for error messages.
        with_document: also read the document tokens (False: annotations only, for evaluation).
    Raises:
        InputFormatError naming ``where`` and the field.
    """
    r = RecordFields(where)
    r.record(obj)
    r.identify("example_id", r.get(obj, "example_id", (int, str), "an integer or string"))
    words: List[str] = []
    is_html: List[bool] = []
    num_words: Optional[int] = None
    if with_document:
        question = r.get(obj, "question_text", str, "a string")
        if "document_tokens" in obj:
            toks = r.get(obj, "document_tokens", list, "a list of token objects")
            for i, t in enumerate(toks):
                if not isinstance(t, dict):
                    raise r.fail(f"document_tokens[{i}]", "an object {token, html_token, ...}", t)
                words.append(r.get(t, "token", str, "a string", name=f"document_tokens[{i}].token"))
                is_html.append(bool(r.get(t, "html_token", bool, "true or false", name=f"document_tokens[{i}].html_token")))
        elif "document_text" in obj:
            text = r.get(obj, "document_text", str, "a string")
            words = text.split(" ") if text else []
            is_html = [is_html_token_text(w) for w in words]
        else:
            raise r.fail("document_tokens", "document_tokens (full form) or document_text (simplified form)")
        num_words = len(words)
    else:
        question = obj.get("question_text", "")
    candidates: List[Tuple[int, int, bool]] = []
    if with_document:
        cands = r.get(obj, "long_answer_candidates", list, "a list of spans")
        for i, c in enumerate(cands):
            sp = _span(r, c, f"long_answer_candidates[{i}]", num_words)
            if sp.is_null:
                raise r.fail(f"long_answer_candidates[{i}]", "a non-null span", c)
            top = r.get(c, "top_level", bool, "true or false", name=f"long_answer_candidates[{i}].top_level", default=True)
            candidates.append((sp.start_token, sp.end_token, bool(top)))
    annotations: List[NqAnnotation] = []
    anns = r.get(obj, "annotations", list, "a list of annotations")
    for i, a in enumerate(anns):
        if not isinstance(a, dict):
            raise r.fail(f"annotations[{i}]", "an object", a)
        la = r.get(a, "long_answer", dict, "an object", name=f"annotations[{i}].long_answer")
        long_span = _span(r, la, f"annotations[{i}].long_answer", num_words)
        cand = r.get(la, "candidate_index", int, "an integer", name=f"annotations[{i}].long_answer.candidate_index", default=-1)
        if with_document and not long_span.is_null and not (0 <= cand < len(candidates)):
            raise r.fail(f"annotations[{i}].long_answer.candidate_index", f"an index into the {len(candidates)} candidates", cand)
        sa = r.get(a, "short_answers", list, "a list of spans", name=f"annotations[{i}].short_answers")
        shorts = [_span(r, s, f"annotations[{i}].short_answers[{j}]", num_words) for j, s in enumerate(sa)]
        yn = r.get(a, "yes_no_answer", str, "NONE, YES or NO", name=f"annotations[{i}].yes_no_answer", default="NONE")
        if yn.upper() not in YES_NO_VALUES:
            raise r.fail(f"annotations[{i}].yes_no_answer", "NONE, YES or NO", yn)
        annotations.append(NqAnnotation(long_span, shorts, yn.upper(), cand))
    return NqExample(obj["example_id"], question, words, is_html, candidates, annotations, where)


def read_nq_file(path: PathLike, with_document: bool = True) -> Iterator[NqExample]:
    """Yield the examples of one NQ jsonl file (gzipped or not, full or simplified form).

    Raises:
        FileNotFoundError / InputFormatError naming the file, line and field.
    """
    from etc_fairseq.guards import UniqueIds, iter_json_lines

    n_records = 0
    ids = UniqueIds("example_id")
    for where, obj in iter_json_lines(path, "an NQ jsonl file (.jsonl or .jsonl.gz)"):
        example = parse_nq_record(obj, where, with_document=with_document)
        ids.add(example.example_id, where)
        yield example
        n_records += 1
    if n_records == 0:
        raise InputFormatError(f"{path}: no NQ records (the file is empty or has only blank lines)")


# ---------------------------------------------------------------------------------------------------------
# gold encoding (the ``gold`` field, decoded by the criterion's official metric)
# ---------------------------------------------------------------------------------------------------------


def encode_gold(annotations: Sequence[NqAnnotation]) -> List[int]:
    """Annotations -> flat ints: ``[n_ann, then per annotation: long_start, long_end, yes_no (index in
    YES_NO_VALUES), n_short, s_1, e_1, ...]`` (token offsets; -1 = null)."""
    out = [len(annotations)]
    for a in annotations:
        out += [a.long_answer.start_token, a.long_answer.end_token, YES_NO_VALUES.index(a.yes_no_answer), len(a.short_answers)]
        for s in a.short_answers:
            out += [s.start_token, s.end_token]
    return out


def decode_gold(values: Sequence[int]) -> List[NqAnnotation]:
    """Inverse of :func:`encode_gold` (trailing padding, if any, is ignored)."""
    values = [int(v) for v in values]
    n, k, out = values[0], 1, []
    for _ in range(n):
        ls, le, yn, ns = values[k : k + 4]
        k += 4
        shorts = [NqSpan(values[k + 2 * j], values[k + 2 * j + 1]) for j in range(ns)]
        k += 2 * ns
        out.append(NqAnnotation(NqSpan(ls, le), shorts, YES_NO_VALUES[yn]))
    return out


# ---------------------------------------------------------------------------------------------------------
# stored fields
# ---------------------------------------------------------------------------------------------------------


def target_fields():
    """The task's stored fields besides the core ones (see the module docstring); ``etc_nq`` declares these."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("long_word", dtype="int32", pad=-1, role="target", length="long", required=True),
        FieldSpec("nq_targets", dtype="int64", pad=0, role="target", length="own", required=True),
        FieldSpec("candidates", dtype="int32", pad=-1, role="target", length="own", required=True),
        FieldSpec("gold", dtype="int64", pad=-1, role="target", length="own", required=True),
        FieldSpec("window_info", dtype="int64", pad=-1, role="target", length="own", required=True),
    ]


def field_specs():
    """Every stored field: core long/global tokens, types, ``long_segment``, and :func:`target_fields`."""
    from etc_fairseq.data.structured import CORE_FIELDS

    return [CORE_FIELDS[k] for k in ("long_tokens", "global_tokens", "global_types", "long_segment")] + target_fields()
