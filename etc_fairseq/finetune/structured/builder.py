"""Build structured records from Python: documents -> paragraphs -> sentences, entities linked to their
mentions, any other global token, l2l cuts and labels. Plain Python (no fairseq, no torch needed to build):
a :class:`Document` produces exactly the JSONL record ``etc-prepare structured`` reads
(:func:`~etc_fairseq.finetune.structured.schema.record_to_json`; the schema is defined once, in
:mod:`.schema`), checked by the converter's own reader when it is made.

Example (CONSTRUCTED labels)::

    doc = Document("Anarchism")                      # a CLS global token at index 0 (record-level labels)
    para = doc.paragraph()                           # a PARAGRAPH global token
    s0 = para.sentence("Anarchism is a political philosophy.", label="lead")   # SENTENCE, child of para
    s1 = para.sentence("It rejects hierarchy.")
    ent = doc.entity("anarchism")                    # a CANDIDATE global token...
    ent.link_mentions()                              # ...linked to every mention of "anarchism" so far
    doc.label = "politics"
    write_jsonl([doc], "train.jsonl")

:func:`~etc_fairseq.finetune.structured.convert.model_inputs` turns documents into the model's tensors
(for the hub's ``extract_features``). Words are the text split on whitespace; positions are word indices of the whole document, spans include
both ends (as in the schema).
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.structured.schema import GlobalSpec, StructuredRecord, record_from_json, record_to_json

__all__ = ["Document", "Token", "Paragraph", "normalize_word", "find_mentions", "write_jsonl"]

Span = Tuple[int, int]


def normalize_word(word: str) -> str:
    """How mentions are matched: lower-cased, surrounding punctuation stripped (``"Anarchism,"`` ->
    ``"anarchism"``)."""
    return word.strip(string.punctuation).lower()


def find_mentions(words: Sequence[str], phrase: str) -> List[Span]:
    """Inclusive word spans where the words of ``phrase`` occur in ``words`` (compared by
    :func:`normalize_word`), non-overlapping, left to right."""
    target = [normalize_word(w) for w in phrase.split()]
    target = [w for w in target if w]
    if not target:
        raise InputFormatError(f"phrase {phrase!r} has no words to match")
    norm = [normalize_word(w) for w in words]
    out, i, n = [], 0, len(target)
    while i + n <= len(norm):
        if norm[i:i + n] == target:
            out.append((i, i + n - 1))
            i += n
        else:
            i += 1
    return out


class Token:
    """One global token of a :class:`Document` (a handle: ``index`` is its place in the record's ``globals``)."""

    def __init__(self, doc: "Document", index: int):
        self.doc = doc
        self.index = index

    @property
    def spec(self) -> GlobalSpec:
        return self.doc._globals[self.index]

    def link(self, first: int, last: int) -> "Token":
        """Link words ``first..last`` (inclusive) to this token (label ``belongs``; e.g. a mention)."""
        self.doc._check_span((first, last))
        self.spec.links.append((first, last))
        return self

    def link_mentions(self, phrase: Optional[str] = None) -> List[Span]:
        """Link every mention of ``phrase`` (default: the token's name) in the document's words so far
        (:func:`find_mentions`); returns the linked spans."""
        phrase = phrase if phrase is not None else self.doc._names.get(self.index)
        if phrase is None:
            raise InputFormatError(f"global token {self.index} has no name: give the phrase to link")
        spans = find_mentions(self.doc.words, phrase)
        for s in spans:
            self.link(*s)
        return spans

    def __repr__(self) -> str:
        return f"Token({self.index}, {self.spec.type})"


class Paragraph(Token):
    """A paragraph's global token; :meth:`sentence` adds its sentences (their words and SENTENCE tokens)."""

    def sentence(self, text: str, label: Optional[str] = None, type: str = "SENTENCE") -> Token:
        """Append ``text``'s words to the document, with a global token of ``type`` summarising them (a child
        of this paragraph, whose span grows to cover it). Returns the sentence's token."""
        first, last = self.doc.add_text(text)
        spans = self.spec.spans
        self.spec.spans = [(spans[0][0] if spans else first, last)]
        return self.doc.token(type, span=(first, last), parent=self, label=label)


class Document:
    """One record being built (see the module docstring).

    Args:
        id: the record id (unique in its file).
        cls: start with a CLS global token (``self.cls``), which the record level reads.
    Attributes:
        words: the text so far; label: the record's class (record level); answer: ``(first, last)`` words
        (span level); cuts: word indices where a new l2l context starts.
    """

    def __init__(self, id: str, cls: bool = True):
        self.id = id
        self.words: List[str] = []
        self._globals: List[GlobalSpec] = []
        self._names = {}
        self.cuts: List[int] = []
        self.label: Optional[str] = None
        self.answer: Optional[Span] = None
        self.cls = self.token("CLS") if cls else None

    # -- text ------------------------------------------------------------------------------------------
    def add_text(self, text: str) -> Span:
        """Append the words of ``text`` (split on whitespace); returns their inclusive word span."""
        words = text.split()
        if not words:
            raise InputFormatError(f"document {self.id!r}: text {text!r} has no words")
        first = len(self.words)
        self.words.extend(words)
        return first, len(self.words) - 1

    def cut(self) -> None:
        """Start a new l2l context at the next word (long tokens never attend across it)."""
        n = len(self.words)
        if n == 0 or (self.cuts and self.cuts[-1] == n):
            return
        self.cuts.append(n)

    def _check_span(self, span: Span) -> None:
        first, last = span
        if not 0 <= first <= last < len(self.words):
            raise InputFormatError(f"document {self.id!r}: span {span} outside the {len(self.words)} words so far")

    # -- global tokens ---------------------------------------------------------------------------------
    def token(self, type: str, span: Optional[Span] = None, parent: Optional[Token] = None,
              label: Optional[str] = None, hard_g2l: bool = False, name: Optional[str] = None) -> Token:
        """Add a global token of ``type`` (a built-in name, or a user type declared with ``etc-prepare
        structured --global-type``) summarising ``span`` (inclusive words; None: none), under ``parent``."""
        if span is not None:
            self._check_span(span)
        if parent is not None and parent.doc is not self:
            raise InputFormatError("parent belongs to another document")
        self._globals.append(GlobalSpec(type, [tuple(span)] if span is not None else [],
                                        None if parent is None else parent.index, [], hard_g2l, label))
        index = len(self._globals) - 1
        if name is not None:
            self._names[index] = name
        return (Paragraph if type == "PARAGRAPH" else Token)(self, index)

    def paragraph(self, sentences: Iterable[str] = (), cut: bool = False, label: Optional[str] = None) -> Paragraph:
        """Add a PARAGRAPH token (and its ``sentences``, more with :meth:`Paragraph.sentence`); ``cut``: it
        starts a new l2l context (unordered paragraphs, e.g. separate documents)."""
        if cut:
            self.cut()
        para = self.token("PARAGRAPH", label=label)
        for text in sentences:
            para.sentence(text)
        return para

    def entity(self, name: str, type: str = "CANDIDATE", label: Optional[str] = None, hard_g2l: bool = False) -> Token:
        """Add an entity's global token (no span of its own; link its mentions with :meth:`Token.link` or
        :meth:`Token.link_mentions`, which matches ``name`` by default)."""
        return self.token(type, label=label, hard_g2l=hard_g2l, name=name)

    # -- output ----------------------------------------------------------------------------------------
    def to_record(self) -> StructuredRecord:
        """The record, checked by the converter's reader (:func:`.schema.record_from_json`)."""
        return record_from_json(self.to_json(), f"Document {self.id!r}", check_types=False)

    def to_json(self) -> dict:
        """The JSONL object of this document (labels included where set)."""
        for i, g in enumerate(self._globals):
            if g.type == "PARAGRAPH" and not g.spans:
                raise InputFormatError(f"document {self.id!r}: paragraph token {i} has no sentences")
        rec = StructuredRecord(self.id, self._globals, words=list(self.words), cuts=list(self.cuts),
                               label=self.label, answer=None if self.answer is None else tuple(self.answer))
        out = record_to_json(rec)
        level = "span" if self.answer is not None else "record" if self.label is not None else None
        record_from_json(out, f"Document {self.id!r}", label_level=level, check_types=False)
        return out


def write_jsonl(documents: Iterable[Union[Document, StructuredRecord, dict]], path) -> int:
    """Write documents (or records, or JSON objects) as JSONL, atomically; returns the number written."""
    import json

    from etc_fairseq.prepare.atomic import atomic_file

    n = 0
    with atomic_file(Path(path)) as f:
        for d in documents:
            obj = d.to_json() if isinstance(d, Document) else record_to_json(d) if isinstance(d, StructuredRecord) else d
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n
