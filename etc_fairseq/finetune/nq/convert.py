"""Natural Questions (Kwiatkowski et al. 2019) -> ETC fine-tuning data (``etc-prepare nq``); paper appendix C.

Input: the official NQ jsonl, gzipped or not, in either form:

- *full*: ``example_id``, ``question_text``, ``document_html``, ``document_tokens`` (``[{token, start_byte,
  end_byte, html_token}]``), ``long_answer_candidates`` (``[{start_token, end_token, top_level, ...}]``),
  ``annotations`` (``[{long_answer: {start_token, end_token, candidate_index, ...}, short_answers:
  [{start_token, end_token, ...}], yes_no_answer: NONE|YES|NO}]``; 5 per example in dev, 1 in train);
- *simplified*: the same but ``document_text`` (tokens joined by single blanks) instead of the HTML and
  token list, and no byte offsets. HTML tokens are recognised by their shape (``<...>``).

Gold indices are document-token (word) indices ``[start_token, end_token)``. Words are tokenized one by one
(:class:`~etc_fairseq.prepare.tokenizer.WordPieceTokenizer`), HTML tokens get no word pieces but keep their
indices, so every word piece knows its word and gold spans map to pieces exactly.

One *window* per fairseq example (sliding over long documents, Alberti et al.'s BERT baseline)::

    long:   CLS  q_1 .. q_m  SEP  d_ws .. d_we-1  SEP          (CLS = <s>, SEP = </s>)
    global: CLS  Q_1 .. Q_m  P_1 .. P_k                        (Q = QUESTION mirror of q_i; P = PARAGRAPH,
                                                                one per top-level candidate in the window)

``long_segment`` ties the long CLS to the global CLS, each question piece to its mirror, each document piece
to the PARAGRAPH token of the top-level candidate covering it (-1 outside candidates and for the SEPs). With
``--fixed-blocks`` the global input is instead one FIXED_BLOCK token per ``--fixed-block-len`` long tokens
(the paper's "fixed blocks" ablation) and nothing else.

Stored fields per window (besides the core ones): ``long_word`` int32 [long_len] (document word of each long
position, -1 for CLS/question/SEP), ``nq_targets`` int64 [5] (long start, long end, short start, short end
as long positions, 0 = CLS = none; answer type, :data:`~etc_fairseq.finetune.nq.schema.ANSWER_TYPES`),
``candidates`` int32 [C, 3] (every long-answer candidate overlapping the window: start_token, end_token, top_level), ``gold`` int64 [n] (all
annotations, :func:`~etc_fairseq.finetune.nq.schema.encode_gold`), ``window_info`` int64 [3] (example index in the split, window index, number of
windows of the example). Side jsonl: ``example_id``, ``window``,
``num_windows``, ``first_word``/``end_word`` (the window's word range).
"""
from __future__ import annotations

import argparse
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.common.convert import (
    PathLike,
    add_output_arguments,
    add_split_arguments,
    check_split_names,
    prepared_directory,
    print_summary,
    splits_from_args,
    write_split,
    write_summary,
)
from etc_fairseq.finetune.nq.schema import (
    ANSWER_TYPES,
    TYPE_LONG,
    TYPE_NO,
    TYPE_NULL,
    TYPE_SHORT,
    TYPE_YES,
    NqAnnotation,
    NqExample,
    encode_gold,
    field_specs,
    read_nq_file,
)
from etc_fairseq.errors import ConfigError, MissingFileError
from etc_fairseq.guards import InputFormatError, positive_int
from etc_fairseq.prepare.tokenizer import piece_span_of_words

logger = logging.getLogger(__name__)

#: the paper's sliding-window strides and global input lengths per long input length (appendix C, sec. 4)
PAPER_STRIDES = {512: 128, 4096: 2048, 8192: 4096}
PAPER_GLOBAL_LENS = {512: 128, 4096: 230, 8192: 460}


# ---------------------------------------------------------------------------------------------------------
# windows
# ---------------------------------------------------------------------------------------------------------


def window_starts(num_pieces: int, window_len: int, stride: int) -> List[int]:
    """Start offsets of the sliding windows over ``num_pieces`` document pieces (BERT/Alberti rule: the
    next window starts ``stride`` pieces later, until a window reaches the end). At least one window
    (``[0]`` for an empty document). Requires ``1 <= stride <= window_len`` (no piece skipped)."""
    if window_len < 1:
        raise ConfigError(f"window length must be >= 1 (long input too short for the question?), got {window_len}")
    if not 1 <= stride <= window_len:
        raise ConfigError(f"--doc-stride must be in [1, window length {window_len}], got {stride}")
    starts = [0]
    while starts[-1] + window_len < num_pieces:
        starts.append(starts[-1] + stride)
    return starts


@dataclass
class EncodedExample:
    """An example's word pieces: question ids; document ids and ``doc_word`` (document word of each piece);
    ``cand_pieces[c]`` the inclusive doc-piece span of candidate ``c`` (None: no pieces)."""

    question_ids: List[int]
    doc_ids: List[int]
    doc_word: List[int]
    cand_pieces: List[Optional[Tuple[int, int]]]
    question_truncated: bool = False


def encode_example(tok, ex: NqExample, max_question_pieces: int) -> EncodedExample:
    """Tokenize question and document word by word (HTML tokens get no pieces but keep their indices)."""
    q_ids, _ = tok.encode_words(ex.question.split())
    truncated = len(q_ids) > max_question_pieces
    q_ids = q_ids[:max_question_pieces]
    doc_ids: List[int] = []
    doc_word: List[int] = []
    for i, (w, html) in enumerate(zip(ex.words, ex.is_html)):
        if html:
            continue
        p = tok.encode_word(w, first=False)
        doc_ids.extend(p)
        doc_word.extend([i] * len(p))
    cand_pieces = [piece_span_of_words(doc_word, s, e - 1) for s, e, _ in ex.candidates]
    return EncodedExample(q_ids, doc_ids, doc_word, cand_pieces, truncated)


def training_annotation(annotations: Sequence[NqAnnotation]) -> Optional[NqAnnotation]:
    """The annotation the training targets follow: the first with a non-null long answer, else the first
    with a short/yes-no answer, else the first (all null), else None."""
    for a in annotations:
        if not a.long_answer.is_null:
            return a
    for a in annotations:
        if a.short_answers or a.yes_no_answer != "NONE":
            return a
    return annotations[0] if annotations else None


def window_targets(
    enc: EncodedExample, ann: Optional[NqAnnotation], ws: int, we: int, doc_offset: int
) -> Tuple[List[int], str]:
    """``[long_start, long_end, short_start, short_end, answer_type]`` of the window ``[ws, we)`` (doc-piece
    offsets), positions in the long input (``doc_offset`` = position of doc piece ``ws``); 0 (= CLS) for
    absent spans. Also a reason string: ``ok``, ``null`` (no gold or not in this window), ``unaligned``
    (gold words without pieces)."""
    null = [0, 0, 0, 0, TYPE_NULL]
    if ann is None or ann.long_answer.is_null:
        return null, "null"
    lp = piece_span_of_words(enc.doc_word, ann.long_answer.start_token, ann.long_answer.end_token - 1)
    if lp is None:
        return null, "unaligned"
    if not (ws <= lp[0] and lp[1] < we):
        return null, "null"
    t = [doc_offset + lp[0] - ws, doc_offset + lp[1] - ws, 0, 0, TYPE_LONG]
    spans = [s for s in ann.short_answers if not s.is_null]
    if spans:
        sp = piece_span_of_words(enc.doc_word, min(s.start_token for s in spans), max(s.end_token for s in spans) - 1)
        if sp is not None and ws <= sp[0] and sp[1] < we:
            t[2], t[3], t[4] = doc_offset + sp[0] - ws, doc_offset + sp[1] - ws, TYPE_SHORT
    elif ann.yes_no_answer in ("YES", "NO"):
        t[4] = TYPE_YES if ann.yes_no_answer == "YES" else TYPE_NO
    return t, "ok"


def build_window(
    enc: EncodedExample,
    candidates: Sequence[Tuple[int, int, bool]],
    ws: int,
    we: int,
    cls_id: int,
    sep_id: int,
    global_ids: Mapping[str, int],
    max_global_len: int,
    fixed_block_len: int = 0,
) -> Tuple[Dict[str, List], int]:
    """The long and global input of the window ``[ws, we)`` of document pieces; ``global_ids``: global token
    type name -> id (:func:`~etc_fairseq.structure.global_tokens.global_token_table`).

    Returns:
        (arrays, dropped): ``long_tokens``/``long_segment``/``long_word`` (lists of length long_len),
        ``global_tokens``/``global_types`` (global_len), ``candidates`` (list of [start, end, top] of every
        candidate overlapping the window); ``dropped`` = top-level candidates that got no PARAGRAPH token
        because the global input was full.
    """
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    q = enc.question_ids
    long_tokens = [cls_id] + q + [sep_id] + enc.doc_ids[ws:we] + [sep_id]
    doc_offset = len(q) + 2
    long_word = [-1] * doc_offset + enc.doc_word[ws:we] + [-1]
    overlapping = [
        c for c, p in enumerate(enc.cand_pieces) if p is not None and p[0] < we and p[1] >= ws
    ]
    window_cands = [[candidates[c][0], candidates[c][1], int(candidates[c][2])] for c in overlapping]
    dropped = 0
    if fixed_block_len:
        n_blocks = -(-len(long_tokens) // fixed_block_len)
        global_tokens = [global_ids["FIXED_BLOCK"]] * n_blocks
        global_types = [int(T.FIXED_BLOCK)] * n_blocks
        long_segment = [i // fixed_block_len for i in range(len(long_tokens))]
        if n_blocks > max_global_len:
            raise ConfigError(
                f"--fixed-blocks: {n_blocks} blocks of {fixed_block_len} > --max-global-len {max_global_len}"
            )
    else:
        global_tokens = [global_ids["CLS"]] + list(q)
        global_types = [int(T.CLS)] + [int(T.QUESTION)] * len(q)
        long_segment = [0] + list(range(1, len(q) + 1)) + [-1] + [-1] * (we - ws) + [-1]
        if len(global_tokens) > max_global_len:
            raise ConfigError(f"question of {len(q)} pieces does not fit --max-global-len {max_global_len}")
        for c in overlapping:
            if not candidates[c][2]:
                continue
            if len(global_tokens) >= max_global_len:
                dropped += 1
                continue
            g = len(global_tokens)
            global_tokens.append(global_ids["PARAGRAPH"])
            global_types.append(int(T.PARAGRAPH))
            a, b = enc.cand_pieces[c]
            for p in range(max(a, ws), min(b, we - 1) + 1):
                long_segment[doc_offset + p - ws] = g
    return (
        dict(
            long_tokens=long_tokens,
            long_segment=long_segment,
            long_word=long_word,
            global_tokens=global_tokens,
            global_types=global_types,
            candidates=window_cands,
        ),
        dropped,
    )


# ---------------------------------------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------------------------------------


@dataclass
class NqSplitStats:
    examples: int = 0
    windows: int = 0
    null_windows_dropped: int = 0
    questions_truncated: int = 0
    paragraph_tokens_dropped: int = 0
    gold_unaligned: int = 0
    gold_not_in_any_window: int = 0
    target_types: Dict[str, int] = field(default_factory=lambda: {t: 0 for t in ANSWER_TYPES})


def split_windows(
    files: Sequence[PathLike],
    tok,
    st: NqSplitStats,
    *,
    max_long_len: int,
    max_global_len: int,
    doc_stride: int,
    max_question_pieces: int,
    fixed_block_len: int,
    null_window_keep: float,
    rng: random.Random,
) -> Iterator[Tuple[Dict[str, object], dict]]:
    """The windows of NQ files as ``(arrays, side record)`` pairs, counting into ``st``."""
    import numpy as np

    from etc_fairseq.structure.global_tokens import global_token_table

    d = tok.dictionary
    global_ids = global_token_table(d, tok.global_ids)
    cls_id, sep_id = global_ids["CLS"], d.eos()
    for path in files:
        for ex in read_nq_file(path):
            enc = encode_example(tok, ex, max_question_pieces)
            st.questions_truncated += enc.question_truncated
            window_len = max_long_len - len(enc.question_ids) - 3
            starts = window_starts(len(enc.doc_ids), window_len, doc_stride)
            ann = training_annotation(ex.annotations)
            gold = encode_gold(ex.annotations)
            found = False
            for k, ws in enumerate(starts):
                we = min(ws + window_len, len(enc.doc_ids))
                targets, why = window_targets(enc, ann, ws, we, len(enc.question_ids) + 2)
                if why == "unaligned" and k == 0:
                    st.gold_unaligned += 1
                found |= why == "ok"
                if targets[4] == TYPE_NULL and null_window_keep < 1.0 and rng.random() >= null_window_keep:
                    st.null_windows_dropped += 1
                    continue
                arrays, dropped = build_window(
                    enc, ex.candidates, ws, we, cls_id, sep_id, global_ids, max_global_len, fixed_block_len
                )
                st.paragraph_tokens_dropped += dropped
                cands = np.asarray(arrays.pop("candidates"), dtype=np.int32).reshape(-1, 3)
                arrays.update(
                    candidates=cands, nq_targets=targets, gold=gold, window_info=[st.examples, k, len(starts)]
                )
                first_word = enc.doc_word[ws] if we > ws else -1
                end_word = enc.doc_word[we - 1] + 1 if we > ws else -1
                st.windows += 1
                st.target_types[ANSWER_TYPES[targets[4]]] += 1
                yield (
                    {k2: np.asarray(v) for k2, v in arrays.items()},
                    dict(example_id=ex.example_id, window=k, num_windows=len(starts),
                         first_word=first_word, end_word=end_word),
                )
            if ann is not None and not ann.long_answer.is_null and not found:
                st.gold_not_in_any_window += 1
            st.examples += 1


def prepare_nq(
    splits: Dict[str, Sequence[PathLike]],
    out_dir: PathLike,
    tok,
    *,
    max_long_len: int = 4096,
    max_global_len: Optional[int] = None,
    doc_stride: Optional[int] = None,
    max_question_pieces: int = 64,
    fixed_block_len: int = 0,
    null_window_keep: float = 1.0,
    seed: int = 1,
    overwrite: bool = False,
    log_every: int = 1000,
) -> Dict[str, NqSplitStats]:
    """Write every split (``{"train": [files], "valid": [files], ...}``) into ``out_dir`` atomically, with a
    copy of the ``dict.txt`` the tokenizer ``tok`` encodes onto.

    ``doc_stride`` / ``max_global_len`` default to the paper's values for long lengths 512/4096/8192
    (:data:`PAPER_STRIDES`, :data:`PAPER_GLOBAL_LENS`); other lengths need them given.
    ``null_window_keep`` (train split only): keep each window without an answer with this probability.
    """
    if doc_stride is None:
        if max_long_len not in PAPER_STRIDES:
            raise ConfigError(f"--doc-stride is required for --max-long-len {max_long_len} (paper values: {PAPER_STRIDES})")
        doc_stride = PAPER_STRIDES[max_long_len]
    if max_global_len is None:
        if max_long_len not in PAPER_GLOBAL_LENS:
            raise ConfigError(f"--max-global-len is required for --max-long-len {max_long_len} (paper: {PAPER_GLOBAL_LENS})")
        max_global_len = PAPER_GLOBAL_LENS[max_long_len]
    if not 0.0 < null_window_keep <= 1.0:
        raise ConfigError(f"--null-window-keep must be in (0, 1], got {null_window_keep}")
    check_split_names(list(splits))
    for files in splits.values():
        for f in files:
            if Path(f).is_dir():
                raise InputFormatError(f"{f}: is a directory, expected an NQ jsonl file")
            if not Path(f).is_file():
                raise MissingFileError(f"{f}: no such NQ file")
    rng = random.Random(seed)
    stats: Dict[str, NqSplitStats] = {}
    config = dict(max_long_len=max_long_len, max_global_len=max_global_len, doc_stride=doc_stride,
                  max_question_pieces=max_question_pieces, fixed_block_len=fixed_block_len)
    with prepared_directory(out_dir, tok, overwrite) as tmp:
        for split, files in splits.items():
            st = NqSplitStats()
            windows = split_windows(
                files, tok, st, null_window_keep=null_window_keep if split == "train" else 1.0, rng=rng, **config
            )
            writer = write_split(tmp, split, field_specs(), windows, log_every)
            counts = {k: v for k, v in vars(st).items()}
            writer.finalize(source_files=[str(f) for f in files], config=config, **counts)
            logger.info(
                f"{split}: {st.examples} examples -> {st.windows} windows; targets {st.target_types}; "
                f"{st.null_windows_dropped} null windows dropped, {st.questions_truncated} questions truncated to "
                f"{max_question_pieces} pieces, {st.paragraph_tokens_dropped} paragraph tokens dropped (global "
                f"input full), {st.gold_unaligned} gold spans without pieces, {st.gold_not_in_any_window} gold "
                f"long answers in no window"
            )
            stats[split] = st
        write_summary(tmp, "nq", tok, {split: vars(st) for split, st in stats.items()}, **config)
    return stats


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    add_split_arguments(p, "input (official NQ jsonl, full or simplified form, .gz or plain)", {
        "train": "training files", "valid": "validation files (the 5-way annotated dev set)", "test": "test files"},
        many=True)
    WordPieceTokenizer.add_arguments(p)
    g = p.add_argument_group("layout")
    g.add_argument("--max-long-len", type=positive_int, default=4096, help="long input length (default 4096)")
    g.add_argument("--max-global-len", type=positive_int, default=None,
                   help="global input length (default: the paper's 128/230/460 for 512/4096/8192)")
    g.add_argument("--doc-stride", type=positive_int, default=None,
                   help="pieces between window starts (default: the paper's 128/2048/4096 for 512/4096/8192)")
    g.add_argument("--max-question-pieces", type=positive_int, default=64, help="truncate longer questions (counted; default 64)")
    g.add_argument("--fixed-blocks", action="store_true",
                   help="global input = one FIXED_BLOCK token per --fixed-block-len long tokens, nothing else")
    g.add_argument("--fixed-block-len", type=positive_int, default=97, help="long tokens per fixed block (paper: 97)")
    g.add_argument("--null-window-keep", type=float, default=1.0,
                   help="train split: keep windows without an answer with this probability (default 1: all)")
    g = add_output_arguments(p)
    g.add_argument("--seed", type=int, default=1, help="seed for --null-window-keep (default 1)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    splits = splits_from_args(args)
    tok = WordPieceTokenizer.from_args(args)
    stats = prepare_nq(
        splits,
        args.out,
        tok,
        max_long_len=args.max_long_len,
        max_global_len=args.max_global_len,
        doc_stride=args.doc_stride,
        max_question_pieces=args.max_question_pieces,
        fixed_block_len=args.fixed_block_len if args.fixed_blocks else 0,
        null_window_keep=args.null_window_keep,
        seed=args.seed,
        overwrite=args.overwrite,
        log_every=args.log_every,
    )
    print_summary(args.out, stats,
                  lambda st: f"{st.examples} examples -> {st.windows} windows, targets {st.target_types}",
                  wrote_note=f"tokenizer: {tok.stats}")
    return 0


PREPARE = Subcommand(
    name="nq",
    help="Natural Questions jsonl (full or simplified, .gz or plain) -> ETC windows (etc_nq task)",
    description=__doc__.split("\n\n", 1)[1] if __doc__ else "",
    add_arguments=_add_arguments,
    run=_run,
)
