"""The JSONL record of the generic structured dataset: defined and documented here, once. ``etc-prepare
structured`` reads it (:func:`read_records`), :class:`~etc_fairseq.finetune.structured.builder.Document`
writes it (:func:`record_to_json`), ``etc-evaluate structured`` reads its labels as gold.

One record per line (blank lines are skipped)::

    {"id": "Anarchism",                              required, unique in the file
     "words": ["Anarchism", "is", "a", ...],          the text as words (each tokenized on its own), or
     "pieces": ["▁An", "archism", ...] | [52, 7, ...],  already-tokenized pieces: dictionary symbols or ids
     "globals": [                                     the global tokens, in global order (at least one)
        {"type": "PARAGRAPH", "span": [0, 57]},
        {"type": "SENTENCE", "span": [0, 20], "parent": 0, "label": "lead"},
        {"type": "CANDIDATE", "links": [[0, 0], [31, 32]], "hard_g2l": true}
     ],
     "cuts": [58],                                    optional: l2l segment cuts (word indices)
     "label": "politics",                             record level: a class name
     "answer": [3, 5],                                span level: first and last word
     "meta": {...}}                                   optional, anything; not read

Positions (``span``, ``spans``, ``links``, ``cuts``, ``answer``) are indices into ``words`` (or into ``pieces``
when the text is given as pieces), and every span ``[first, last]`` includes both ends.

A global token (an object of ``globals``):

``type``      a :class:`~etc_fairseq.structure.global_tokens.GlobalTokenType` name (``CLS``, ``SENTENCE``,
              ``PARAGRAPH``, ``CONTEXT``, ``TITLE``, ``CANDIDATE``, ``QUESTION``, ``VDOM_NODE``, ``FIXED_BLOCK``,
              ``CPC_MASK``), or a user-defined name declared at preparation with ``--global-type NAME=BASE``
              (e.g. ``--global-type entity=CANDIDATE``): the model embeds it with the built-in type ``BASE``'s
              type embedding (the model's type table has one row per built-in type; two user types with the
              same base differ only by their structure), and ``etc-show`` and the predictions use its name.
              Any other name is an error that lists the known ones.
``span`` / ``spans``  ``[first, last]`` / a list of them: the words this token summarises (its long tokens,
              paper Sec. 3.3: they get the ``belongs`` label with it). A word in the spans of several tokens
              belongs to the deepest one (a sentence inside its paragraph's span); the spans of two tokens
              that are not ancestor and descendant must not overlap (use ``links``). A word also belongs to
              every ancestor of its token (``parent`` chain).
``parent``    index (into ``globals``) of this token's parent: the hierarchy (paragraph -> sentence), labelled
              ``parent`` / ``child`` between global tokens, at any depth (at most 8); no cycles.
``links``     a list of ``[first, last]``: words linked to this token besides its own (an entity and its
              mentions, WikiHop's candidates): ``belongs`` too. At most ``--max-links-per-token`` links per
              word (the rest are dropped and counted).
``hard_g2l``  true: this token attends (g2l) only to the words that belong to it (its span and links).
``label``     global level: a class name, or null / absent for a token without a label (ignored by the loss).
``QUESTION``  (a mirror type) tokens carry the id of the one piece their span covers: their span must
              cover exactly one piece.

``cuts``: strictly increasing word indices ``0 < c < len(words)``; each starts a new l2l context (long tokens
never attend across a cut, paper appendix C). A global token is in the context of the first word of its
span; one without a span in its parent's; one with neither (a CLS, an entity) in a context of its own
(unordered with every other token: label ``other_context``). Relative positions between global tokens are
given only inside one context.

Labels, at the level chosen with ``etc-prepare structured --label-level`` (recorded in ``prepare.json`` with
the class names; read by the task):

``record``  ``label``: one class for the record, predicted from the first CLS global token (``etc-prepare``
            adds a CLS token at global index 0 to a record that has none).
``global``  ``globals[i].label``: one class per global token; null / absent = not labelled.
``span``    ``answer``: ``[first, last]`` words, predicted from start/end logits over the long tokens.

A missing label (no ``label`` / ``answer``) makes an unlabelled example (counted; ignored by the loss and
the metrics; ``etc-predict`` still predicts it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.finetune.common.fields import RecordFields, is_kind

PathLike = Union[str, Path]

__all__ = [
    "LABEL_LEVELS",
    "IGNORE",
    "RECORD_KEYS",
    "GLOBAL_KEYS",
    "GlobalSpec",
    "StructuredRecord",
    "parse_type_map",
    "type_names",
    "record_from_json",
    "ancestors",
    "word_owners",
    "record_to_json",
    "read_records",
    "class_names",
    "target_fields",
    "field_specs",
]

#: the label levels ``--label-level`` offers
LABEL_LEVELS = ("record", "global", "span")
#: the stored target of an unlabelled record, global token or span end
IGNORE = -1
#: the keys a record may have
RECORD_KEYS = ("id", "words", "pieces", "globals", "cuts", "label", "answer", "meta")
#: the keys a global token may have
GLOBAL_KEYS = ("type", "span", "spans", "parent", "links", "hard_g2l", "label")

Span = Tuple[int, int]


@dataclass
class GlobalSpec:
    """One global token of a record (see the module docstring).

    Attributes:
        type: its type name as written (a built-in name or a declared user type).
        spans: inclusive ``(first, last)`` word spans it summarises.
        parent: index of its parent in the record's ``globals``, or None.
        links: inclusive word spans linked to it.
        hard_g2l: it attends only to its own words.
        label: its class name (global level), or None.
    """

    type: str
    spans: List[Span] = field(default_factory=list)
    parent: Optional[int] = None
    links: List[Span] = field(default_factory=list)
    hard_g2l: bool = False
    label: Optional[str] = None


@dataclass
class StructuredRecord:
    """One record (see the module docstring). Exactly one of ``words`` / ``pieces`` is set."""

    id: str
    globals: List[GlobalSpec]
    words: Optional[List[str]] = None
    pieces: Optional[List[Union[str, int]]] = None
    cuts: List[int] = field(default_factory=list)
    label: Optional[str] = None
    answer: Optional[Span] = None
    #: where it was read (``file:line (id ...)``), for messages; not part of the JSON
    where: str = field(default="record", compare=False)

    @property
    def num_units(self) -> int:
        """Number of words (or pieces, for a record given as pieces): the range of every position."""
        return len(self.words if self.words is not None else self.pieces)


# ---------------------------------------------------------------------------------------------------------
# global token types
# ---------------------------------------------------------------------------------------------------------
def parse_type_map(declarations: Sequence[str]) -> Dict[str, str]:
    """``--global-type NAME=BASE`` declarations -> ``{NAME: BASE}`` (BASE a built-in type name).

    Raises:
        ValueError: a malformed declaration, an unknown base, a name that is a built-in type, a repeat.
    """
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    builtin = [t.name for t in GlobalTokenType]
    out: Dict[str, str] = {}
    for text in declarations:
        name, sep, base = text.partition("=")
        name, base = name.strip(), base.strip()
        if not sep or not name or not base:
            raise ConfigError(f"--global-type {text!r}: expected NAME=BASE, e.g. entity=CANDIDATE")
        if base not in builtin:
            raise ConfigError(f"--global-type {text!r}: BASE must be a built-in global token type, one of {builtin}")
        if name in builtin:
            raise ConfigError(f"--global-type {text!r}: {name} is a built-in type already (use it as it is)")
        if name in out:
            raise ConfigError(f"--global-type {text!r}: {name} is declared twice")
        out[name] = base
    return out


def type_names(type_map: Mapping[str, str]) -> Dict[str, str]:
    """Every usable type name -> the built-in type it is embedded as (built-in names map to themselves)."""
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    return {**{t.name: t.name for t in GlobalTokenType}, **dict(type_map)}


# ---------------------------------------------------------------------------------------------------------
# reading one record
# ---------------------------------------------------------------------------------------------------------
def _span(r: RecordFields, value, name: str, n: int, what: str) -> Span:
    """``[first, last]`` with ``0 <= first <= last < n``."""
    ok = (isinstance(value, list) and len(value) == 2 and all(is_kind(v, int) for v in value)
          and 0 <= value[0] <= value[1] < n)
    if not ok:
        raise r.fail(name, f"[first, last] {what} with 0 <= first <= last < {n}", value)
    return int(value[0]), int(value[1])


def _span_list(r: RecordFields, value, name: str, n: int, what: str) -> List[Span]:
    if not isinstance(value, list):
        raise r.fail(name, f"a list of [first, last] {what}", value)
    return [_span(r, v, f"{name}[{j}]", n, what) for j, v in enumerate(value)]


def _check_keys(r: RecordFields, obj: dict, allowed: Sequence[str], prefix: str = "") -> None:
    for key in obj:
        if key not in allowed:
            raise InputFormatError(f"{r.where}: field {prefix + key!r}: not a field of the schema (known: "
                                   f"{', '.join(allowed)}); put your own data under 'meta'")


def record_from_json(
    obj,
    where: str,
    type_map: Optional[Mapping[str, str]] = None,
    label_level: Optional[str] = None,
    check_types: bool = True,
) -> StructuredRecord:
    """Check one decoded record and return it.

    Args:
        obj: the decoded JSON value.
        where: what errors start with (``file:line``).
        type_map: declared user types ``{NAME: BASE}`` (:func:`parse_type_map`).
        label_level: checked to be a label level when given (the labels of every level are read and checked;
            the converter uses the chosen one's).
        check_types: refuse type names that are neither built-in nor in ``type_map`` (off where only the
            labels are read, as gold by ``etc-evaluate``).
    Raises:
        InputFormatError: one line naming ``where``, the record id, the field, what was expected and what
            was found.
    """
    if label_level is not None and label_level not in LABEL_LEVELS:
        raise ValueError(f"label_level must be one of {LABEL_LEVELS}, got {label_level!r}")
    known_types = type_names(type_map or {})
    r = RecordFields(where)
    r.record(obj)
    rid = r.get(obj, "id", str, "a non-empty string", check=bool)
    r.identify("id", repr(rid))
    _check_keys(r, obj, RECORD_KEYS)
    words = pieces = None
    if ("words" in obj) == ("pieces" in obj):
        raise InputFormatError(
            f"{r.where}: field 'words' / 'pieces': expected exactly one of them (the text as a list of words, or "
            f"as a list of pieces or dictionary ids), got {'both' if 'words' in obj else 'neither'}")
    if "words" in obj:
        words = r.str_list(obj, "words", non_empty_items=True)
        for j, w in enumerate(words):
            if any(c.isspace() for c in w):
                raise r.fail(f"words[{j}]", "a word without whitespace (split the text into words)", w)
        n = len(words)
    else:
        pieces = r.get(obj, "pieces", list, "a list of piece strings or of dictionary ids")
        for j, p in enumerate(pieces):
            if not ((isinstance(p, str) and p) or (is_kind(p, int) and p >= 0)):
                raise r.fail(f"pieces[{j}]", "a non-empty piece string or a dictionary id >= 0", p)
        kinds = {isinstance(p, str) for p in pieces}
        if len(kinds) > 1:
            raise r.fail("pieces", "all strings or all ids, not a mix", pieces)
        n = len(pieces)
    if n == 0:
        raise r.fail("words" if words is not None else "pieces", "at least one", [])

    raw_globals = r.get(obj, "globals", list, "a list of global tokens (objects with a 'type')")
    if not raw_globals:
        raise r.fail("globals", "at least one global token", raw_globals)
    globals_: List[GlobalSpec] = []
    for i, g in enumerate(raw_globals):
        name = f"globals[{i}]"
        if not isinstance(g, dict):
            raise r.fail(name, "an object with a 'type'", g)
        _check_keys(r, g, GLOBAL_KEYS, prefix=f"{name}.")
        gtype = r.get(g, "type", str, "a global token type name", name=f"{name}.type")
        if check_types and gtype not in known_types:
            raise r.fail(f"{name}.type", "a built-in global token type or one declared with --global-type "
                         f"NAME=BASE (known: {', '.join(known_types)})", gtype)
        if "span" in g and "spans" in g:
            raise r.fail(f"{name}.spans", "either 'span' or 'spans', not both", g["spans"])
        spans: List[Span] = []
        if g.get("span") is not None:
            spans = [_span(r, g["span"], f"{name}.span", n, "words")]
        elif g.get("spans") is not None:
            spans = _span_list(r, g["spans"], f"{name}.spans", n, "words")
        parent = r.get(g, "parent", int, f"the index of another global token (0..{len(raw_globals) - 1})",
                       name=f"{name}.parent", default=None,
                       check=lambda p, i=i: 0 <= p < len(raw_globals) and p != i)
        links = _span_list(r, g["links"], f"{name}.links", n, "words") if g.get("links") is not None else []
        hard = r.get(g, "hard_g2l", bool, "true or false", name=f"{name}.hard_g2l", default=None)
        label = r.get(g, "label", str, "a class name (a non-empty string) or null", name=f"{name}.label",
                      default=None, check=bool)
        globals_.append(GlobalSpec(gtype, spans, parent, links, bool(hard), label))
    # the hierarchy is a forest of depth <= MAX_HIERARCHY_DEPTH
    from etc_fairseq.structure.builders import MAX_HIERARCHY_DEPTH

    for i in range(len(globals_)):
        seen, p = {i}, globals_[i].parent
        while p is not None:
            if p in seen:
                raise r.fail(f"globals[{i}].parent", "a parent chain without cycles", globals_[i].parent)
            seen.add(p)
            if len(seen) - 1 > MAX_HIERARCHY_DEPTH:
                raise r.fail(f"globals[{i}].parent", f"at most {MAX_HIERARCHY_DEPTH} ancestors",
                             globals_[i].parent)
            p = globals_[p].parent

    word_owners(globals_, n, r)  # overlapping spans of unrelated tokens: an error now, naming them

    cuts = r.get(obj, "cuts", list, f"strictly increasing word indices in 1..{n - 1}", default=None) or []
    for j, c in enumerate(cuts):
        if not is_kind(c, int) or not 0 < c < n or (j and c <= cuts[j - 1]):
            raise r.fail(f"cuts[{j}]", f"a word index in 1..{n - 1}, greater than the previous cut", c)
    label = r.get(obj, "label", str, "a class name (a non-empty string)", default=None, check=bool)
    answer = _span(r, obj["answer"], "answer", n, "words") if obj.get("answer") is not None else None
    return StructuredRecord(id=rid, globals=globals_, words=words, pieces=pieces, cuts=[int(c) for c in cuts],
                            label=label, answer=answer, where=r.where)


def ancestors(globals_: Sequence[GlobalSpec], i: int) -> List[int]:
    """The ancestors of global token ``i``, nearest first (the ``parent`` chain; assumed acyclic)."""
    out, p = [], globals_[i].parent
    while p is not None:
        out.append(p)
        p = globals_[p].parent
    return out


def word_owners(globals_: Sequence[GlobalSpec], n: int, r: Optional[RecordFields] = None) -> List[int]:
    """The global token each word belongs to (its segment token), -1 for none: of the tokens whose spans
    hold the word, the deepest; they must form one ancestor chain.

    Args:
        globals_: the record's global tokens (parents checked acyclic).
        n: the number of words.
        r: names the record in errors.
    Returns:
        ``[n]`` global indices (into ``globals_``) or -1.
    Raises:
        InputFormatError: a word is in the spans of two tokens neither of which is an ancestor of the other.
    """
    owner = [-1] * n
    depth = [len(ancestors(globals_, i)) for i in range(len(globals_))]
    for i in sorted(range(len(globals_)), key=lambda i: (depth[i], i)):  # shallow first: deeper ones win
        chain = set(ancestors(globals_, i))
        for first, last in globals_[i].spans:
            for w in range(first, last + 1):
                o = owner[w]
                if o != -1 and o != i and o not in chain:
                    where = r.where if r is not None else "record"
                    raise InputFormatError(
                        f"{where}: field 'globals[{i}].span': expected words that no unrelated global token "
                        f"owns, got word {w}, also in the span of globals[{o}], which is not an ancestor of "
                        f"globals[{i}] (set 'parent', or use 'links' for extra membership)")
                owner[w] = i
    return owner


def record_to_json(rec: StructuredRecord) -> dict:
    """The record as one JSONL object (what :func:`record_from_json` reads back): optional fields only when
    set, a single span as ``span``."""
    out: dict = {"id": rec.id}
    if rec.words is not None:
        out["words"] = list(rec.words)
    else:
        out["pieces"] = list(rec.pieces)
    gs = []
    for g in rec.globals:
        d: dict = {"type": g.type}
        if len(g.spans) == 1:
            d["span"] = list(g.spans[0])
        elif g.spans:
            d["spans"] = [list(s) for s in g.spans]
        if g.parent is not None:
            d["parent"] = g.parent
        if g.links:
            d["links"] = [list(s) for s in g.links]
        if g.hard_g2l:
            d["hard_g2l"] = True
        if g.label is not None:
            d["label"] = g.label
        gs.append(d)
    out["globals"] = gs
    if rec.cuts:
        out["cuts"] = list(rec.cuts)
    if rec.label is not None:
        out["label"] = rec.label
    if rec.answer is not None:
        out["answer"] = list(rec.answer)
    return out


def read_records(
    path: PathLike, type_map: Optional[Mapping[str, str]] = None, label_level: Optional[str] = None,
    check_types: bool = True,
) -> List[StructuredRecord]:
    """Every record of a JSONL file, checked (:func:`record_from_json`; ids unique within the file).

    Raises:
        InputFormatError: a missing or unreadable file, a line that is not JSON, a bad record (the message
            names the file, line, record id and field), or a file without records.
    """
    from etc_fairseq.guards import UniqueIds, iter_json_lines
    from etc_fairseq.progress import progress

    path = Path(path)
    out: List[StructuredRecord] = []
    ids = UniqueIds("id")
    lines = iter_json_lines(path, "a JSONL file of structured records")
    for where, obj in progress(lines, desc=f"reading {path.name}", unit="line"):
        rec = record_from_json(obj, where, type_map, label_level, check_types)
        ids.add(rec.id, where)
        out.append(rec)
    if not out:
        raise InputFormatError(f"{path}: no records (one JSON object per line expected)")
    return out


def class_names(records_by_split: Mapping[str, Sequence[StructuredRecord]], label_level: str,
                given: Optional[Sequence[str]] = None) -> List[str]:
    """The class names of a record / global level: ``given`` (``--classes``, checked unique), else the sorted
    names found in the records of every split. Span level: ``[]``."""
    if label_level == "span":
        if given:
            raise ConfigError("--classes is for --label-level record or global (span labels have no classes)")
        return []
    if given:
        if len(set(given)) != len(given):
            raise ConfigError(f"--classes must be unique, got {list(given)}")
        return list(given)
    found = set()
    for recs in records_by_split.values():
        for rec in recs:
            if label_level == "record" and rec.label is not None:
                found.add(rec.label)
            elif label_level == "global":
                found.update(g.label for g in rec.globals if g.label is not None)
    if not found:
        raise InputFormatError(f"no {label_level} labels in any split: give at least one labelled record "
                         f"({'label' if label_level == 'record' else 'globals[i].label'})")
    return sorted(found)


# ---------------------------------------------------------------------------------------------------------
# stored fields
# ---------------------------------------------------------------------------------------------------------
def target_fields(label_level: str):
    """The task's own fields per label level (:class:`~etc_fairseq.data.structured.FieldSpec` list):

    - ``record``: ``record_label`` int16 [1] (class index, -1 = unlabelled);
    - ``global``: ``global_labels`` int16 [global_len] (class index per global token, -1 = unlabelled) and
      ``labels_cut`` int16 [1] (labelled global tokens the converter cut: they count as wrong, as in
      ``etc-evaluate structured``);
    - ``span``: ``span`` int32 [2] (first and last long token of the answer, -1 = unlabelled or cut),
      ``answer_words`` int32 [2] (first and last word) and ``long_word`` int32 [long_len] (the word of each
      long token): predicted spans are scored on words, as ``etc-evaluate structured`` scores them.
    """
    from etc_fairseq.data.structured import FieldSpec

    if label_level == "record":
        return [FieldSpec("record_label", dtype="int16", pad=IGNORE, role="target", length="own", required=True)]
    if label_level == "global":
        return [
            FieldSpec("global_labels", dtype="int16", pad=IGNORE, role="target", length="global", required=True),
            FieldSpec("labels_cut", dtype="int16", pad=0, role="target", length="own", required=True),
        ]
    if label_level == "span":
        return [
            FieldSpec("span", dtype="int32", pad=IGNORE, role="target", length="own", required=True),
            FieldSpec("answer_words", dtype="int32", pad=IGNORE, role="target", length="own", required=True),
            FieldSpec("long_word", dtype="int32", pad=IGNORE, role="target", length="long", required=True),
        ]
    raise ValueError(f"label level must be one of {LABEL_LEVELS}, got {label_level!r}")


def field_specs(label_level: str, links: bool, hard_g2l: bool):
    """Every field ``etc-prepare structured`` writes: the core fields (``long_links`` when some record has
    links, ``global_hard_g2l`` when some global token has ``hard_g2l``) and :func:`target_fields`."""
    from etc_fairseq.data.structured import CORE_FIELDS

    names = {
        "long_tokens": "int32",
        "global_tokens": "int32",
        "global_types": "int8",
        "long_segment": "int32",
        "global_parent": "int32",
        "long_context": "int32",
        "global_context": "int32",
    }
    if links:
        names["long_links"] = "int32"
    if hard_g2l:
        names["global_hard_g2l"] = "int8"
    return [dataclasses.replace(CORE_FIELDS[n], dtype=d) for n, d in names.items()] + target_fields(label_level)
