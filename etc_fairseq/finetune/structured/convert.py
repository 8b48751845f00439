"""``etc-prepare structured``: JSONL records (:mod:`.schema`) -> ETC structured fine-tuning data.

Every record is laid out as it says, with no dataset-specific layout:

- long input: the record's words, each tokenized on its own (word <-> piece alignment; a record given as
  ``pieces`` is used as it is: symbols looked up in the dictionary, ids checked against it);
- global input: the record's ``globals`` in order (a CLS token first for ``--label-level record`` when the
  record has none); each token's id is the one rule's
  (:func:`~etc_fairseq.structure.global_tokens.global_token_id`: ``<s>``, or the pretrained role's id of a
  ``--from-model`` source; a QUESTION token mirrors its one piece) and its type the built-in type its name
  maps to;
- structure ids (meaning as in :func:`etc_fairseq.structure.builders.build_structure`), computed by
  :func:`layout_record`: ``long_segment`` (each piece's word's owner, :func:`.schema.word_owners`),
  ``global_parent``, ``long_context`` / ``global_context`` (from ``cuts``), ``long_links`` ``[L, K]`` and
  ``global_hard_g2l``.

Too long records are cut, never silently: pieces past ``--max-long-len`` are dropped (a global token whose
spans and links lose all their pieces is dropped with them), then global tokens past ``--max-global-len``
(their words then belong to their nearest kept ancestor); a parent that was dropped leaves its children roots, links past ``--max-links-per-token`` per piece are
dropped, an answer that loses its pieces cannot be learnt. Every such drop is counted, logged and written
into ``{split}.meta.json`` and ``prepare.json``.

Output (atomically): ``DIR/dict.txt``, per split the fields of :func:`.schema.field_specs` and the side
file ``{split}.side.jsonl`` (``id``, ``num_globals`` in the record, ``globals``: the record index of each kept global token, -1 for an
added CLS, and ``type_names``: each kept global token's type name as the record gives it), and
``DIR/prepare.json`` with ``label_level``, ``classes`` and ``global_types`` (every type name -> the
built-in type it is embedded as), which the ``etc_structured`` task reads.
"""
from __future__ import annotations

import argparse
import bisect
import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.finetune.common.convert import (
    PathLike,
    add_output_arguments,
    add_split_arguments,
    check_split_names,
    format_counts,
    prepared_directory,
    print_summary,
    splits_from_args,
    write_split,
    write_summary,
)
from etc_fairseq.finetune.structured.schema import (
    IGNORE,
    LABEL_LEVELS,
    GlobalSpec,
    StructuredRecord,
    class_names,
    field_specs,
    parse_type_map,
    read_records,
    type_names,
    word_owners,
)
from etc_fairseq.guards import positive_int

logger = logging.getLogger(__name__)

DEFAULT_MAX_LONG_LEN = 4096
DEFAULT_MAX_GLOBAL_LEN = 256
DEFAULT_MAX_LINKS_PER_TOKEN = 4

#: the counts every split reports (``{split}.meta.json``, ``prepare.json``, the log)
COUNT_KEYS = (
    "records", "labels", "unlabelled", "truncated_examples", "long_pieces_dropped", "globals_dropped",
    "parents_dropped", "links_dropped", "labels_cut", "answers_cut", "cls_added", "words_without_pieces", "unknown_pieces",
    "long_tokens", "global_tokens",
)


@dataclass
class StructuredOptions:
    """What ``etc-prepare structured`` lays records out with (recorded in ``prepare.json``)."""

    label_level: str
    classes: List[str] = field(default_factory=list)
    global_types: Dict[str, str] = field(default_factory=dict)  # user type NAME -> built-in BASE
    max_long_len: int = DEFAULT_MAX_LONG_LEN
    max_global_len: int = DEFAULT_MAX_GLOBAL_LEN
    max_links_per_token: int = DEFAULT_MAX_LINKS_PER_TOKEN

    def __post_init__(self):
        if self.label_level not in LABEL_LEVELS:
            raise ConfigError(f"--label-level must be one of {LABEL_LEVELS}, got {self.label_level!r}")
        for name, value in (("--max-long-len", self.max_long_len), ("--max-global-len", self.max_global_len),
                            ("--max-links-per-token", self.max_links_per_token)):
            if value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")


# ---------------------------------------------------------------------------------------------------------
# pure pieces: text -> pieces, record -> structure ids
# ---------------------------------------------------------------------------------------------------------
def encode_record_text(rec: StructuredRecord, tokenizer, counts: Counter) -> Tuple[List[int], List[int]]:
    """(piece ids, word_of_piece) of the record's text: its words tokenized one by one, or its pieces looked
    up (symbols; missing ones become ``<unk>``, counted) or checked (ids must be in the dictionary)."""
    d = tokenizer.dictionary
    if rec.words is not None:
        ids, wop = tokenizer.encode_words(rec.words, first_is_start=True)
        counts["words_without_pieces"] += len(rec.words) - len(set(wop))
        return ids, wop
    ids = []
    for j, p in enumerate(rec.pieces):
        if isinstance(p, str):
            i = d.index(p)
            counts["unknown_pieces"] += int(i == d.unk())
        else:
            if p >= len(d):
                raise InputFormatError(f"{rec.where}: field 'pieces[{j}]': expected a dictionary id below "
                                       f"{len(d)} (the size of dict.txt), got {p}")
            i = int(p)
        ids.append(i)
    return ids, list(range(len(ids)))


def word_piece_ranges(word_of_piece: Sequence[int], n_words: int) -> List[Optional[Tuple[int, int]]]:
    """``[n_words]``: the inclusive piece range of each word, None for a word without pieces."""
    out: List[Optional[Tuple[int, int]]] = [None] * n_words
    for p, w in enumerate(word_of_piece):
        out[w] = (out[w][0], p) if out[w] is not None else (p, p)
    return out


def span_pieces(span: Tuple[int, int], ranges: Sequence[Optional[Tuple[int, int]]], keep: int) -> Optional[Tuple[int, int]]:
    """The inclusive piece span of the words ``span`` (inclusive), cut to the first ``keep`` pieces; None
    when no piece of those words is kept."""
    first = next((ranges[w][0] for w in range(span[0], span[1] + 1) if ranges[w] is not None), None)
    last = next((ranges[w][1] for w in range(span[1], span[0] - 1, -1) if ranges[w] is not None), None)
    if first is None or first >= keep:
        return None
    return first, min(last, keep - 1)


@dataclass
class RecordLayout:
    """:func:`layout_record`'s result: the example's arrays (int64 numpy) and what it kept.

    Attributes:
        arrays: ``long_tokens`` [L], ``global_tokens`` / ``global_types`` / ``global_parent`` /
            ``global_context`` / ``global_hard_g2l`` [G], ``long_segment`` / ``long_context`` / ``long_word``
            [L], ``long_links`` [L, K].
        kept_globals: ``[G]`` the index in ``rec.globals`` of each kept global token.
        piece_ranges: ``[n_words]`` the kept inclusive piece range of each word (None: none kept).
    """

    arrays: Dict[str, np.ndarray]
    kept_globals: List[int]
    piece_ranges: List[Optional[Tuple[int, int]]]


def layout_record(
    rec: StructuredRecord,
    piece_ids: Sequence[int],
    word_of_piece: Sequence[int],
    global_ids: Sequence[int],
    global_types: Sequence[int],
    opts: StructuredOptions,
    counts: Optional[Counter] = None,
) -> RecordLayout:
    """Lay out one record whose text is already cut into pieces (see the module docstring).

    Args:
        rec: the record (checked by :func:`.schema.record_from_json`; with the CLS already added where
            ``--label-level record`` needs it).
        piece_ids: ``[P]`` dictionary ids of the whole text; word_of_piece: ``[P]`` each piece's word.
        global_ids / global_types: ``[len(rec.globals)]`` each global token's dictionary id and type value.
        opts: lengths.
        counts: gets the drop counts.
    Returns:
        :class:`RecordLayout`.
    """
    counts = counts if counts is not None else Counter()
    n = rec.num_units
    P = len(piece_ids)
    keep = min(P, opts.max_long_len)
    if keep < P:
        counts["truncated_examples"] += 1
        counts["long_pieces_dropped"] += P - keep
    ranges_full = word_piece_ranges(word_of_piece, n)

    # -- which global tokens stay: those with words keep some piece; then the budget
    kept: List[int] = []
    for i, g in enumerate(rec.globals):
        owned = g.spans + g.links
        if owned and all(span_pieces(s, ranges_full, keep) is None for s in owned):
            counts["globals_dropped"] += 1
            continue
        kept.append(i)
    if len(kept) > opts.max_global_len:
        counts["globals_dropped"] += len(kept) - opts.max_global_len
        kept = kept[: opts.max_global_len]
    if len(kept) < len(rec.globals) and keep == P:
        counts["truncated_examples"] += 1
    new_index = {old: new for new, old in enumerate(kept)}
    G = len(kept)

    # -- global side
    g_parent = []
    for i in kept:
        p = rec.globals[i].parent
        if p is not None and p not in new_index:
            counts["parents_dropped"] += 1
        g_parent.append(new_index.get(p, -1) if p is not None else -1)
    n_contexts = len(rec.cuts) + 1

    def context_of_word(w: int) -> int:
        return bisect.bisect_right(rec.cuts, w)

    own_context = n_contexts
    g_context = []
    for i in kept:
        j = i
        while not rec.globals[j].spans and rec.globals[j].parent is not None:
            j = rec.globals[j].parent
        if rec.globals[j].spans:
            g_context.append(context_of_word(min(s[0] for s in rec.globals[j].spans)))
        else:  # no span on the chain: a context of its own
            g_context.append(own_context)
            own_context += 1

    # -- long side
    wop = list(word_of_piece[:keep])
    owners = word_owners(rec.globals, n)

    def kept_owner(g: int) -> int:  # a dropped owner hands its words to its nearest kept ancestor
        while g != -1 and g not in new_index:
            g = -1 if rec.globals[g].parent is None else rec.globals[g].parent
        return new_index.get(g, -1)

    l_segment = [kept_owner(owners[w]) for w in wop]
    l_context = [context_of_word(w) for w in wop]
    K = opts.max_links_per_token
    links = np.full((keep, K), -1, dtype=np.int64)  # [L, K]
    n_links = np.zeros(keep, dtype=np.int64)  # [L]
    for i in kept:
        for s in rec.globals[i].links:
            sp = span_pieces(s, ranges_full, keep)
            if sp is None:
                continue
            for p in range(sp[0], sp[1] + 1):
                if new_index[i] in links[p, : n_links[p]]:
                    continue
                if n_links[p] < K:
                    links[p, n_links[p]] = new_index[i]
                    n_links[p] += 1
                else:
                    counts["links_dropped"] += 1
    arrays = {
        "long_tokens": np.asarray(piece_ids[:keep], dtype=np.int64),
        "global_tokens": np.asarray([global_ids[i] for i in kept], dtype=np.int64),
        "global_types": np.asarray([global_types[i] for i in kept], dtype=np.int64),
        "long_segment": np.asarray(l_segment, dtype=np.int64),
        "global_parent": np.asarray(g_parent, dtype=np.int64),
        "long_context": np.asarray(l_context, dtype=np.int64),
        "global_context": np.asarray(g_context, dtype=np.int64),
        "long_links": links,
        "global_hard_g2l": np.asarray([int(rec.globals[i].hard_g2l) for i in kept], dtype=np.int64),
        "long_word": np.asarray(wop, dtype=np.int64),
    }
    counts["long_tokens"] += keep
    counts["global_tokens"] += G
    ranges = [r if r is not None and r[0] < keep else None for r in ranges_full]
    ranges = [(r[0], min(r[1], keep - 1)) if r is not None else None for r in ranges]
    return RecordLayout(arrays, kept, ranges)


# ---------------------------------------------------------------------------------------------------------
# one example
# ---------------------------------------------------------------------------------------------------------
def with_cls(rec: StructuredRecord, type_map: Mapping[str, str], counts: Counter) -> Tuple[StructuredRecord, bool]:
    """``rec`` with a CLS global token at index 0 when none of its tokens is (or maps to) CLS (the record
    level reads the first CLS); returns (record, whether one was added). Parents are shifted."""
    names = type_names(type_map)
    if any(names[g.type] == "CLS" for g in rec.globals):
        return rec, False
    counts["cls_added"] += 1
    shifted = [GlobalSpec(g.type, g.spans, None if g.parent is None else g.parent + 1, g.links, g.hard_g2l, g.label)
               for g in rec.globals]
    return StructuredRecord(rec.id, [GlobalSpec("CLS")] + shifted, rec.words, rec.pieces, rec.cuts, rec.label,
                            rec.answer, rec.where), True


def build_example(rec: StructuredRecord, tokenizer, opts: StructuredOptions, counts: Optional[Counter] = None
                  ) -> Tuple[Dict[str, np.ndarray], dict]:
    """One record -> (arrays of every field :func:`.schema.field_specs` names, with ``long_links`` and
    ``global_hard_g2l`` always present: the caller drops those its split does not store; side record).

    Raises:
        InputFormatError: a QUESTION token whose span is not one piece, an id outside the dictionary, a class
            outside ``opts.classes`` (each naming the record and field).
    """
    from etc_fairseq.structure.global_tokens import MIRROR_TYPES, GlobalTokenType, global_token_id

    counts = counts if counts is not None else Counter()
    names = type_names(opts.global_types)
    added = False
    if opts.label_level == "record":
        rec, added = with_cls(rec, opts.global_types, counts)
    piece_ids, wop = encode_record_text(rec, tokenizer, counts)
    ranges = word_piece_ranges(wop, rec.num_units)
    g_ids, g_types = [], []
    for i, g in enumerate(rec.globals):
        base = GlobalTokenType[names[g.type]]
        g_types.append(int(base))
        if base in MIRROR_TYPES:
            sp = span_pieces(g.spans[0], ranges, len(piece_ids)) if len(g.spans) == 1 else None
            n_pieces = 0 if sp is None else sp[1] - sp[0] + 1
            if n_pieces != 1:
                raise InputFormatError(
                    f"{rec.where}: field 'globals[{i - added}].span': expected the one piece a {g.type} (mirror) "
                    f"token mirrors, got {n_pieces} pieces")
            g_ids.append(global_token_id(tokenizer.dictionary, base, piece_ids[sp[0]]))
        else:
            g_ids.append(global_token_id(tokenizer.dictionary, base, role_ids=tokenizer.global_ids))
    lay = layout_record(rec, piece_ids, wop, g_ids, g_types, opts, counts)
    arrays = dict(lay.arrays)
    index = {c: k for k, c in enumerate(opts.classes)}

    def class_index(label: Optional[str], field_name: str) -> int:
        if label is None:
            counts["unlabelled"] += 1
            return IGNORE
        if label not in index:
            raise InputFormatError(f"{rec.where}: field {field_name!r}: expected one of the classes "
                                   f"{opts.classes} (--classes), got {label!r}")
        counts["labels"] += 1
        return index[label]

    long_word = arrays.pop("long_word")
    if opts.label_level == "record":
        arrays["record_label"] = np.asarray([class_index(rec.label, "label")], dtype=np.int64)
    elif opts.label_level == "global":
        arrays["global_labels"] = np.asarray(
            [class_index(rec.globals[i].label, f"globals[{i - added}].label") for i in lay.kept_globals],
            dtype=np.int64)
        kept = set(lay.kept_globals)
        cut = [i for i, g in enumerate(rec.globals) if i not in kept and g.label is not None]
        for i in cut:
            class_index(rec.globals[i].label, f"globals[{i - added}].label")  # checked, counted as a label
        counts["labels_cut"] += len(cut)
        arrays["labels_cut"] = np.asarray([len(cut)], dtype=np.int64)
    else:
        span, words = [IGNORE, IGNORE], [IGNORE, IGNORE]
        if rec.answer is None:
            counts["unlabelled"] += 1
        else:
            counts["labels"] += 1
            words = list(rec.answer)
            full = span_pieces(rec.answer, ranges, len(piece_ids))  # in the whole text
            if full is None or full[1] >= len(long_word):  # no piece, or pieces past --max-long-len
                counts["answers_cut"] += 1
            else:
                span = list(full)
        arrays["span"] = np.asarray(span, dtype=np.int64)
        arrays["answer_words"] = np.asarray(words, dtype=np.int64)
        arrays["long_word"] = long_word
    kept_record_index = [i - added if not (added and i == 0) else -1 for i in lay.kept_globals]
    side = {"id": rec.id, "num_globals": len(rec.globals) - added, "globals": kept_record_index,
            "type_names": [rec.globals[i].type for i in lay.kept_globals]}
    return arrays, side


#: the model-input fields of :func:`model_inputs`, in ``net_input`` order
INPUT_FIELDS = ("long_tokens", "global_tokens", "global_types", "long_segment", "global_parent", "long_context",
                "global_context", "long_links", "global_hard_g2l")


def model_inputs(records, tokenizer, global_types: Optional[Mapping[str, str]] = None,
                 max_long_len: int = DEFAULT_MAX_LONG_LEN, max_global_len: int = DEFAULT_MAX_GLOBAL_LEN,
                 max_links_per_token: int = DEFAULT_MAX_LINKS_PER_TOKEN) -> Dict[str, object]:
    """The model's batched ``net_input`` for records, laid out as ``etc-prepare structured`` lays them out and
    padded as the ``etc_structured`` task batches them (labels are not read; no CLS is added): what
    ``EtcModel(**net_input, features_only=True)`` and the hub's ``extract_features`` take.

    Args:
        records: :class:`~etc_fairseq.finetune.structured.builder.Document` s, :class:`.schema.StructuredRecord`
            s or JSON objects of the schema.
        tokenizer: a :class:`~etc_fairseq.prepare.tokenizer.WordPieceTokenizer` (the model's dictionary).
        global_types: declared user types ``{NAME: BASE}``; the lengths: as ``etc-prepare structured``'s.
    Returns:
        ``{"src_tokens": int64 [B, L], "global_tokens": int64 [B, G], "global_types": int64 [B, G],
        "structure": {"long_segment", "long_context": int64 [B, L], "global_parent", "global_context",
        "global_hard_g2l": int64 [B, G], "long_links": int64 [B, L, K]}}``, padded with the pad id / the
        values of :data:`etc_fairseq.data.structured.CORE_FIELDS`.
    """
    import dataclasses

    import torch

    from etc_fairseq.data.structured import CORE_FIELDS
    from etc_fairseq.finetune.structured.schema import record_from_json, record_to_json

    opts = StructuredOptions("global", [], dict(global_types or {}), max_long_len, max_global_len, max_links_per_token)
    examples = []
    for k, r in enumerate(records):
        obj = r.to_json() if hasattr(r, "to_json") else record_to_json(r) if isinstance(r, StructuredRecord) else r
        rec = record_from_json(obj, f"records[{k}]", opts.global_types)
        rec = dataclasses.replace(rec, label=None, answer=None,  # inputs only: no label is read
                                  globals=[dataclasses.replace(g, label=None) for g in rec.globals])
        arrays, _ = build_example(rec, tokenizer, opts)
        examples.append(arrays)
    if not examples:
        raise InputFormatError("model_inputs needs at least one record")
    pad = tokenizer.dictionary.pad()
    B = len(examples)
    L = max(max(len(e["long_tokens"]) for e in examples), 1)
    G = max(max(len(e["global_tokens"]) for e in examples), 1)
    out: Dict[str, object] = {"structure": {}}
    for name in INPUT_FIELDS:
        spec = CORE_FIELDS[name]
        n = L if spec.length == "long" else G
        trailing = examples[0][name].shape[1:]
        t = torch.full((B, n) + tuple(trailing), pad if spec.pad == "pad" else spec.pad, dtype=torch.long)
        for i, e in enumerate(examples):
            t[i, : len(e[name])] = torch.from_numpy(e[name])
        key = "src_tokens" if name == "long_tokens" else name
        if spec.role == "structure":
            out["structure"][key] = t
        else:
            out[key] = t
    return out


# ---------------------------------------------------------------------------------------------------------
# whole files
# ---------------------------------------------------------------------------------------------------------
def prepare_structured(
    splits: Mapping[str, PathLike],
    out_dir: PathLike,
    tokenizer,
    opts: StructuredOptions,
    overwrite: bool = False,
    log_every: int = 1000,
) -> Dict[str, Dict[str, int]]:
    """Prepare every split (``{split name: JSONL file}``) into ``out_dir`` atomically. Every file is read and
    checked before anything is written; the class names are ``opts.classes`` or, when empty, every name the
    records use (sorted).

    Returns:
        ``{split: counts}`` (also in each ``{split}.meta.json`` and ``prepare.json``, and logged).
    """
    check_split_names(list(splits))
    records = {name: read_records(path, opts.global_types, opts.label_level) for name, path in splits.items()}
    opts.classes = class_names(records, opts.label_level, opts.classes or None)
    has_links = any(g.links for recs in records.values() for r in recs for g in r.globals)
    has_hard = any(g.hard_g2l for recs in records.values() for r in recs for g in r.globals)
    specs = field_specs(opts.label_level, has_links, has_hard)
    stored = {s.name for s in specs}
    summary: Dict[str, Dict[str, int]] = {}
    with prepared_directory(out_dir, tokenizer, overwrite) as tmp:
        for name, recs in records.items():
            counts: Counter = Counter()

            def examples():
                for rec in recs:
                    arrays, side = build_example(rec, tokenizer, opts, counts)
                    counts["records"] += 1
                    yield {k: v for k, v in arrays.items() if k in stored}, side

            writer = write_split(tmp, name, specs, examples(), log_every, total=len(recs))
            result = {k: int(counts[k]) for k in COUNT_KEYS}
            writer.finalize(source=str(splits[name]), counts=result, dataset="structured")
            logger.info(f"{name}: {format_counts(result)}")
            summary[name] = result
        write_summary(tmp, "structured", tokenizer, summary, **asdict(opts),
                      global_type_bases=type_names(opts.global_types))
    return summary


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    add_split_arguments(p, "input (JSONL records, one per line; schema: etc_fairseq/finetune/structured/schema.py, "
                        "docs/structured.md)", {"train": "training records", "valid": "validation records",
                                                "test": "test records (labels may be absent)"})
    add_output_arguments(p)
    g = p.add_argument_group("labels and types")
    g.add_argument("--label-level", choices=LABEL_LEVELS, required=True,
                   help="record: one class per record (label), from the global CLS token; global: one class per "
                   "global token (globals[i].label, null = unlabelled); span: an answer [first, last] of words")
    g.add_argument("--classes", nargs="+", default=None, metavar="NAME",
                   help="the class names, in class-index order (default: every name the records use, sorted)")
    g.add_argument("--global-type", action="append", default=[], metavar="NAME=BASE",
                   help="declare a user-defined global token type NAME, embedded as the built-in type BASE (e.g. "
                   "entity=CANDIDATE); repeat for several")
    g = p.add_argument_group("layout")
    g.add_argument("--max-long-len", type=positive_int, default=DEFAULT_MAX_LONG_LEN,
                   help=f"long input length; longer texts are cut (counted; default {DEFAULT_MAX_LONG_LEN})")
    g.add_argument("--max-global-len", type=positive_int, default=DEFAULT_MAX_GLOBAL_LEN,
                   help=f"global input length; further global tokens are dropped (counted; default {DEFAULT_MAX_GLOBAL_LEN})")
    g.add_argument("--max-links-per-token", type=positive_int, default=DEFAULT_MAX_LINKS_PER_TOKEN, metavar="K",
                   help=f"most global tokens one long token is linked to (counted; default {DEFAULT_MAX_LINKS_PER_TOKEN})")
    WordPieceTokenizer.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    splits = splits_from_args(args)
    opts = StructuredOptions(args.label_level, list(args.classes or []), parse_type_map(args.global_type),
                             args.max_long_len, args.max_global_len, args.max_links_per_token)
    tokenizer = WordPieceTokenizer.from_args(args)
    summary = prepare_structured(splits, args.out, tokenizer, opts, overwrite=args.overwrite, log_every=args.log_every)
    print_summary(args.out, summary, notes=[f"classes: {opts.classes}" if opts.classes else "labels: answer spans",
                                            f"tokenizer: {tokenizer.stats}"])
    return 0


PREPARE = Subcommand(
    name="structured",
    help="your own structure: JSONL records (text, global tokens with spans, parents, links, cuts, labels) -> ETC data",
    description="Prepare JSONL records for the etc_structured task. Each record gives its text (words or pieces), "
    "its global tokens (a type, the words each summarises, an optional parent and links), optional l2l cuts and a "
    "label at the level chosen with --label-level (a class per record, a class per global token, or an answer "
    "span). The record schema: docs/structured.md and etc_fairseq/finetune/structured/schema.py. Writes "
    "DIR/dict.txt, DIR/{split}.* (see etc_fairseq/data/structured.py) and DIR/prepare.json (label level, classes, "
    "type names, counts).",
    add_arguments=_add_arguments,
    run=_run,
)
