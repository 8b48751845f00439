"""``etc-prepare wikihop``: QAngaroo WikiHop JSON -> ETC's structured input (paper appendix C).

Input: the official files as distributed (``train.json``, ``dev.json``; test files without ``answer``
work too): a JSON list of ``{"id", "query", "candidates", "supports", "answer"}``. The query is
``"relation subject"`` (e.g. ``"country_of_citizenship john smith"``); the relation's underscores are
turned into spaces before tokenization.

Layout of one example (``C`` candidates, ``Q`` query pieces, supports ``s = 0..S-1`` with sentences)::

    long   = query pieces | support 0: sentence 0 pieces, sentence 1 pieces, ... | support 1: ... | ...
    global = C candidate tokens (CANDIDATE) | Q query tokens (QUESTION, mirroring the query pieces)
             | per support: one CONTEXT token, then one SENTENCE token per sentence

So candidate ``k`` is global token ``k``. All candidates share one token id (``<s>``) and the CANDIDATE
type, as in the official layout (id 4, type 6 for every candidate): only their mentions tell them apart.
Structure ids (meaning as in :func:`etc_fairseq.structure.builders.build_structure`):

- ``long_segment``: query piece ``i`` -> its QUESTION token; sentence pieces -> their SENTENCE token.
- ``global_parent``: SENTENCE -> its support's CONTEXT token ("parent"/"child" g2g labels; long tokens
  "belong" to both their sentence and its context).
- ``long_context`` / ``global_context``: 0 for the query, ``s + 1`` for support ``s``: l2l attention is cut
  at support boundaries and different supports are unordered ("other_context"). Every candidate is its own
  context (``S + 1 + k``, as the official layout gives each candidate its own segment): candidates are
  unordered, so no relative position tells them apart or ranks the first or last one differently.
- ``long_links`` ``[L, K]``: each long token's linked candidates (global indices, -1 = none): a candidate
  is linked (label "belongs", the one that links sentence tokens to their pieces, as the paper and the
  official layout do) to every mention of it in the supports, found by
  case-insensitive string match on word boundaries (:func:`find_mentions`); the whole words overlapping a
  match are linked. At most ``K = --max-links-per-token`` links per token (the rest are counted).

- ``global_hard_g2l``: 1 for the candidates (``--candidate-attention mentions``, the default): a candidate
  attends (g2l) only to its mentions, and to every global token. With ``--candidate-attention all`` (the
  official setting) it attends to every long token; then, in a model whose attention is not yet trained
  (fine-tuning from scratch or from a short pre-training), its few mentions are drowned among thousands of
  long tokens: measured on CONSTRUCTED records with a fresh ``etc_tiny``, the candidates' features differ by
  ~4e-6 at initialisation (2e-2 with ``mentions``), the head's gradient nearly cancels and the loss stays at
  log C (tests/test_wikihop_learns.py).

``--flat-structure`` (the paper's ablation): same tokens, but no context cut (``long_context`` and
``global_context`` all 0), no parent links (long tokens relate to their sentence token only) and no
candidate links.

``--no-globals`` (the local-only and flat-encoder arms): the candidates are written into the long input, as a
flat encoder reads WikiHop (query, candidate list, supports), and the global input is one CLS token::

    long   = CLS | query pieces | candidate 0 pieces | ... | candidate C-1 pieces | supports' sentences
    global = CLS

with no structure (``long_segment`` and ``long_context`` all 0: local attention only) and two more fields
for the head: ``long_candidate`` ``[L]`` (the candidate index of each piece of the candidate list, -1
elsewhere: a candidate is scored from the mean of its pieces' outputs) and ``question_len`` ``[1]`` (the
query pieces, at long positions ``1 .. question_len``).

``--candidate-strings`` (ETC with the information the flat arms have): the ETC layout above, with each
candidate's pieces also written into the long input after the query::

    long   = query pieces | candidate 0 pieces | ... | candidate C-1 pieces | supports' sentences
    global = as above

Candidate ``k``'s pieces have ``long_segment`` ``k`` (they "belong" to its CANDIDATE token, which reads them
with hard g2l as it reads its mentions) and ``long_context`` ``S + 1 + k`` (its own context: l2l is cut around
each string). The CANDIDATE tokens stay identical tokens; what tells them apart is now their string as well as
their mentions, as a flat encoder reading the candidate list sees them.

Too long instances (long > ``--max-long-len`` or global > ``--max-global-len``) are cropped with the
paper's max-heap rule (:func:`max_heap_truncation`): repeatedly drop the last sentence of the support that
currently has the most sentences (a support left without sentences loses its CONTEXT token too). All
drops are counted, logged and written into ``{split}.meta.json``, as are candidates never mentioned in the
kept text.

Output (atomically): ``DIR/dict.txt`` and, per split, the fields of
:mod:`etc_fairseq.data.structured` plus the targets ``answer_index`` (index of the first candidate equal to
the answer, -1 without an answer) and ``candidate_correct`` (``[C]``, 1 where the candidate matches the
answer under the official definition, :func:`etc_fairseq.finetune.wikihop.schema.is_correct`), and the side
file ``{split}.side.jsonl`` (``id``, ``candidates``, ``answer``) for ``etc-predict wikihop``.
"""
from __future__ import annotations

import argparse
import dataclasses
import heapq
import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.commands import Subcommand
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
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.finetune.wikihop.metrics import baselines
from etc_fairseq.finetune.wikihop.schema import (
    WikiHopRecord,
    candidate_pattern,
    field_specs,
    is_correct,
    query_words,
    read_wikihop,
)
from etc_fairseq.guards import positive_int

logger = logging.getLogger(__name__)

DEFAULT_MAX_LONG_LEN = 4096
DEFAULT_MAX_GLOBAL_LEN = 430
DEFAULT_MAX_LINKS_PER_TOKEN = 4


# ---------------------------------------------------------------------------------------------------------
# pure pieces: query words, mentions, truncation
# ---------------------------------------------------------------------------------------------------------
def find_mentions(words: Sequence[str], pattern: "re.Pattern[str]") -> List[Tuple[int, int]]:
    """Word spans of the non-overlapping matches of ``pattern`` in the text ``" ".join(words)``.

    Args:
        words: whitespace-free words of one text (a support; matches may cross its sentence boundaries).
        pattern: from :func:`candidate_pattern`.
    Returns:
        inclusive ``(first_word, last_word)`` spans of the words that overlap each match, in text order.
    """
    starts = []
    pos = 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    text = " ".join(words)
    spans = []
    import bisect

    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        first = bisect.bisect_right(starts, m.start()) - 1
        last = bisect.bisect_right(starts, m.end() - 1) - 1
        spans.append((first, last))
    return spans


@dataclass
class Truncation:
    """Result of :func:`max_heap_truncation`.

    Attributes:
        kept: number of sentences kept per context (the first ``kept[c]`` sentences of context ``c``).
        dropped: ``(context, sentence)`` of every dropped sentence, in drop order.
    """

    kept: List[int]
    dropped: List[Tuple[int, int]]

    @property
    def dropped_contexts(self) -> int:
        """Contexts that had sentences and lost all of them."""
        return sum(1 for c, k in enumerate(self.kept) if k == 0 and any(d[0] == c for d in self.dropped))


def max_heap_truncation(
    sentence_lengths: Sequence[Sequence[int]], long_budget: int, global_budget: int
) -> Truncation:
    """The paper's cropping rule for WikiHop: while the contexts do not fit, drop the last sentence of the
    context that currently has the most sentences (ties: the later context first).

    Cost of the kept text: long = the kept sentences' lengths (pieces); global = one token per kept
    sentence plus one per context that keeps at least one sentence.

    Args:
        sentence_lengths: pieces of every sentence, per context.
        long_budget: long tokens available to the contexts (>= 0).
        global_budget: global tokens available to the contexts (>= 0).
    Returns:
        :class:`Truncation`.
    """
    if long_budget < 0 or global_budget < 0:
        raise ValueError(f"budgets must be >= 0, got long {long_budget}, global {global_budget}")
    kept = [len(s) for s in sentence_lengths]
    long_used = sum(sum(s) for s in sentence_lengths)
    global_used = sum(k + 1 for k in kept if k > 0)
    heap = [(-k, -c) for c, k in enumerate(kept) if k > 0]
    heapq.heapify(heap)
    dropped: List[Tuple[int, int]] = []
    while (long_used > long_budget or global_used > global_budget) and heap:
        _, neg_c = heapq.heappop(heap)
        c = -neg_c
        kept[c] -= 1
        dropped.append((c, kept[c]))
        long_used -= sentence_lengths[c][kept[c]]
        global_used -= 1 + (kept[c] == 0)  # the sentence token (+ the context token when emptied)
        if kept[c] > 0:
            heapq.heappush(heap, (-kept[c], -c))
    return Truncation(kept, dropped)


# ---------------------------------------------------------------------------------------------------------
# one example
# ---------------------------------------------------------------------------------------------------------
#: the choices of ``--candidate-attention``
CANDIDATE_ATTENTION = ("mentions", "all")


@dataclass
class LayoutOptions:
    max_long_len: int = DEFAULT_MAX_LONG_LEN
    max_global_len: int = DEFAULT_MAX_GLOBAL_LEN
    max_links_per_token: int = DEFAULT_MAX_LINKS_PER_TOKEN
    flat_structure: bool = False
    #: ``mentions``: candidates attend (g2l) only to their mentions; ``all``: to every long token
    candidate_attention: str = "mentions"
    #: candidates in the long input, one CLS global token, no structure (see the module docstring)
    no_globals: bool = False
    #: the ETC layout with each candidate's pieces also in the long input, read by its CANDIDATE token
    candidate_strings: bool = False

    def __post_init__(self):
        if self.candidate_attention not in CANDIDATE_ATTENTION:
            raise ConfigError(f"candidate_attention must be one of {CANDIDATE_ATTENTION}, got {self.candidate_attention!r}")
        if self.no_globals and self.flat_structure:
            raise ConfigError("--no-globals and --flat-structure exclude each other: --no-globals has no structure")
        if self.no_globals and self.candidate_strings:
            raise ConfigError("--no-globals and --candidate-strings exclude each other: --no-globals already writes "
                              "the candidate strings into the long input")


def build_example(
    rec: WikiHopRecord, tokenizer, opts: LayoutOptions, counts: Optional[Counter] = None
) -> Dict[str, np.ndarray]:
    """Lay out one record (see the module docstring).

    Args:
        rec: the record.
        tokenizer: a :class:`~etc_fairseq.prepare.tokenizer.WordPieceTokenizer`.
        opts: lengths and switches.
        counts: a Counter to add the truncation / mention statistics to.
    Returns:
        arrays: ``long_tokens`` int [L]; ``global_tokens``, ``global_types``, ``global_parent``,
        ``global_context`` int [G]; ``long_segment``, ``long_context`` int [L]; ``long_links`` int [L, K]
        (not with ``flat_structure``); ``answer_index`` int [1]; ``candidate_correct`` int [C]. With
        ``no_globals``: ``long_tokens``, ``long_segment``, ``long_context`` (zeros), ``long_candidate`` int [L],
        ``global_tokens``, ``global_types`` int [1] (the CLS), ``question_len`` int [1] and the two targets.
    Raises:
        InputFormatError: the candidates alone do not fit into ``max_global_len`` (into ``max_long_len``
            with ``no_globals``, with the CLS); names the record.
    """
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.structure.global_tokens import GlobalTokenType, global_token_id

    counts = counts if counts is not None else Counter()
    d = tokenizer.dictionary
    C = len(rec.candidates)
    # -- the candidate strings in the long input: after a CLS and the query without global tokens, after the
    # query with them
    head_len = 0
    if opts.no_globals or opts.candidate_strings:
        c_ids = [tokenizer.encode_words(c.split(), first_is_start=True)[0] for c in rec.candidates]
        head_len = int(opts.no_globals) + sum(len(c) for c in c_ids)
        if head_len > opts.max_long_len:
            what = f"the CLS and the {C} candidates'" if opts.no_globals else f"the {C} candidates'"
            raise InputFormatError(f"record id {rec.id!r}: {what} {head_len - int(opts.no_globals)} pieces do "
                                   f"not fit into --max-long-len {opts.max_long_len}")
    if not opts.no_globals and C > opts.max_global_len:
        raise InputFormatError(
            f"record id {rec.id!r}: {C} candidates do not fit into --max-global-len {opts.max_global_len}"
        )

    # -- tokenize: query, then each support's sentences
    q_ids, _ = tokenizer.encode_words(query_words(rec.query), first_is_start=True)
    q_keep = min(len(q_ids), opts.max_long_len - head_len,
                 opts.max_global_len - C if not opts.no_globals else len(q_ids))
    if q_keep < len(q_ids):
        counts["query_pieces_dropped"] += len(q_ids) - q_keep
        q_ids = q_ids[:q_keep]
    contexts = []  # per kept support: list of (words, ids, word_of_piece)
    for support in rec.supports:
        sents = []
        for s_i, sent in enumerate(split_sentences(support)):
            words = sent.split()
            ids, wop = tokenizer.encode_words(words, first_is_start=s_i == 0)
            if not ids:
                counts["empty_sentences"] += 1
                continue
            sents.append((words, ids, wop))
        if not sents:
            counts["empty_supports"] += 1
            continue
        contexts.append(sents)

    # -- crop (max-heap rule)
    trunc = max_heap_truncation(
        [[len(s[1]) for s in ctx] for ctx in contexts],
        long_budget=opts.max_long_len - head_len - len(q_ids),
        global_budget=opts.max_global_len - C - len(q_ids) if not opts.no_globals else 1 << 30,
    )
    if trunc.dropped:
        counts["truncated_examples"] += 1
        counts["dropped_sentences"] += len(trunc.dropped)
        counts["dropped_contexts"] += trunc.dropped_contexts
    contexts = [ctx[:k] for ctx, k in zip(contexts, trunc.kept) if k > 0]

    # -- global tokens
    # one id per type: <s> for all three unless the source model was pretrained with its own global tokens
    # (official ETC: candidate [unused3], document [unused4], sentence [unused0], as its WikiHop converter)
    candidate_id, context_id, sentence_id = (
        global_token_id(d, t, role_ids=tokenizer.global_ids)
        for t in (GlobalTokenType.CANDIDATE, GlobalTokenType.CONTEXT, GlobalTokenType.SENTENCE))
    g_tokens = [candidate_id] * C + [global_token_id(d, GlobalTokenType.QUESTION, i) for i in q_ids]
    g_types = [int(GlobalTokenType.CANDIDATE)] * C + [int(GlobalTokenType.QUESTION)] * len(q_ids)
    g_parent = [-1] * (C + len(q_ids))
    g_context = [0] * (C + len(q_ids))
    # -- long tokens
    l_tokens = list(q_ids)
    l_segment = list(range(C, C + len(q_ids)))
    l_context = [0] * len(q_ids)
    l_candidate = [-1] * len(q_ids)
    if opts.no_globals:  # segments and contexts are dropped below; only the tokens' order matters here
        cls_id = global_token_id(d, GlobalTokenType.CLS, role_ids=tokenizer.global_ids)
        l_tokens = [cls_id] + l_tokens + [i for c in c_ids for i in c]
        l_candidate = [-1] + l_candidate + [k for k, c in enumerate(c_ids) for _ in c]
        l_segment, l_context = [0] * len(l_tokens), [0] * len(l_tokens)
    elif opts.candidate_strings:  # candidate k's pieces belong to its CANDIDATE token, in its context
        l_tokens += [i for c in c_ids for i in c]
        l_segment += [k for k, c in enumerate(c_ids) for _ in c]
        l_context += [len(contexts) + 1 + k for k, c in enumerate(c_ids) for _ in c]
    # per kept support, for mentions: its words and the long positions [first, last] of each word's pieces
    support_words: List[Tuple[List[str], List[Optional[Tuple[int, int]]]]] = []
    for s, ctx in enumerate(contexts, start=1):
        ctx_words: List[str] = []
        ctx_word_pieces: List[Optional[Tuple[int, int]]] = []
        support_words.append((ctx_words, ctx_word_pieces))
        ctx_index = len(g_tokens)
        g_tokens.append(context_id)
        g_types.append(int(GlobalTokenType.CONTEXT))
        g_parent.append(-1)
        g_context.append(s)
        for words, ids, wop in ctx:
            sent_index = len(g_tokens)
            g_tokens.append(sentence_id)
            g_types.append(int(GlobalTokenType.SENTENCE))
            g_parent.append(ctx_index)
            g_context.append(s)
            word_pieces: List[Optional[Tuple[int, int]]] = [None] * len(words)
            for p, w in enumerate(wop):
                first = word_pieces[w][0] if word_pieces[w] is not None else len(l_tokens) + p
                word_pieces[w] = (first, len(l_tokens) + p)
            ctx_words.extend(words)
            ctx_word_pieces.extend(word_pieces)
            l_tokens.extend(ids)
            l_segment.extend([sent_index] * len(ids))
            l_context.extend([s] * len(ids))
    L, G = len(l_tokens), len(g_tokens)
    assert L <= opts.max_long_len and (opts.no_globals or G <= opts.max_global_len), (L, G)

    # -- candidate mentions -> links (matched over each kept support's text; a quick substring test first)
    K = opts.max_links_per_token
    links = np.full((L, K), -1, dtype=np.int64)  # [L, K]
    n_links = np.zeros(L, dtype=np.int64)  # [L]
    mentioned = [False] * C
    lowered = [" ".join(words).lower() for words, _ in support_words]
    for k, cand in enumerate(rec.candidates):
        needle = " ".join(cand.split()).lower()
        pattern = None
        for (words, word_pieces), text in zip(support_words, lowered):
            if needle not in text:
                continue
            pattern = pattern or candidate_pattern(cand)
            for first, last in find_mentions(words, pattern):
                positions = [p for w in range(first, last + 1) if word_pieces[w] is not None
                             for p in range(word_pieces[w][0], word_pieces[w][1] + 1)]
                if not positions:
                    continue
                mentioned[k] = True
                counts["mentions"] += 1
                for p in positions:
                    if n_links[p] < K:
                        links[p, n_links[p]] = k
                        n_links[p] += 1
                    else:
                        counts["links_dropped"] += 1
    counts["candidates"] += C
    counts["candidates_unmentioned"] += C - sum(mentioned)
    correct = [int(is_correct(c, rec.answer)) if rec.answer is not None else 0 for c in rec.candidates]
    answer_index = correct.index(1) if any(correct) else -1
    if rec.answer is not None and not mentioned[answer_index]:
        counts["answers_unmentioned"] += 1
    counts["long_tokens"] += L
    counts["global_tokens"] += G

    for k in range(C):  # every candidate its own context
        g_context[k] = len(contexts) + 1 + k
    if opts.flat_structure:
        g_parent = [-1] * G
        g_context = [0] * G
        l_context = [0] * L
    if opts.no_globals:
        l_candidate += [-1] * (L - len(l_candidate))
        return {
            "long_tokens": np.asarray(l_tokens, dtype=np.int64),
            "global_tokens": np.asarray([cls_id], dtype=np.int64),
            "global_types": np.asarray([int(GlobalTokenType.CLS)], dtype=np.int64),
            "long_segment": np.zeros(L, dtype=np.int64),
            "long_context": np.zeros(L, dtype=np.int64),
            "answer_index": np.asarray([answer_index], dtype=np.int64),
            "candidate_correct": np.asarray(correct, dtype=np.int64),
            "long_candidate": np.asarray(l_candidate, dtype=np.int64),
            "question_len": np.asarray([len(q_ids)], dtype=np.int64),
        }
    arrays = {
        "long_tokens": np.asarray(l_tokens, dtype=np.int64),
        "global_tokens": np.asarray(g_tokens, dtype=np.int64),
        "global_types": np.asarray(g_types, dtype=np.int64),
        "long_segment": np.asarray(l_segment, dtype=np.int64),
        "global_parent": np.asarray(g_parent, dtype=np.int64),
        "long_context": np.asarray(l_context, dtype=np.int64),
        "global_context": np.asarray(g_context, dtype=np.int64),
        "answer_index": np.asarray([answer_index], dtype=np.int64),
        "candidate_correct": np.asarray(correct, dtype=np.int64),
    }
    if not opts.flat_structure:
        arrays["long_links"] = links
        if opts.candidate_attention == "mentions":
            arrays["global_hard_g2l"] = np.asarray([1] * C + [0] * (G - C), dtype=np.int64)
    return arrays


# ---------------------------------------------------------------------------------------------------------
# whole files
# ---------------------------------------------------------------------------------------------------------
COUNT_KEYS = (
    "records", "truncated_examples", "dropped_sentences", "dropped_contexts", "query_pieces_dropped",
    "empty_supports", "empty_sentences", "candidates", "candidates_unmentioned", "answers_unmentioned",
    "mentions", "links_dropped", "long_tokens", "global_tokens",
)


def prepare_wikihop(
    splits: Dict[str, PathLike],
    out_dir: PathLike,
    tokenizer,
    opts: LayoutOptions,
    overwrite: bool = False,
    log_every: int = 1000,
) -> Dict[str, Dict[str, float]]:
    """Prepare every split (``{split name: WikiHop JSON}``) into ``out_dir`` atomically.

    Returns:
        ``{split: counts}`` (also in each ``{split}.meta.json`` and the summary, and logged), with the
        split's baselines where it has answers (:func:`~etc_fairseq.finetune.wikihop.metrics.baselines`).
    """
    check_split_names(list(splits))
    if opts.max_links_per_token < 1:
        raise ConfigError(f"--max-links-per-token must be >= 1, got {opts.max_links_per_token}")
    records = {name: read_wikihop(path) for name, path in splits.items()}  # validate everything first
    summary: Dict[str, Dict[str, float]] = {}
    layout = {**dataclasses.asdict(opts), "tokenizer": tokenizer.kind}
    with prepared_directory(out_dir, tokenizer, overwrite) as tmp:
        for name, recs in records.items():
            counts: Counter = Counter()

            def examples():
                for rec in recs:
                    arrays = build_example(rec, tokenizer, opts, counts)
                    counts["records"] += 1
                    yield arrays, {"id": rec.id, "candidates": rec.candidates, "answer": rec.answer}

            specs = field_specs(opts.flat_structure, opts.candidate_attention == "mentions", opts.no_globals)
            writer = write_split(tmp, name, specs, examples(), log_every, total=len(recs))
            result = {k: int(counts[k]) for k in COUNT_KEYS}
            result.update(baselines(recs))
            writer.finalize(source=str(splits[name]), counts=result, layout=layout)
            logger.info(f"{name}: {format_counts(result)}")
            summary[name] = result
        write_summary(tmp, "wikihop", tokenizer, summary, **dataclasses.asdict(opts))
    return summary


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    add_split_arguments(p, "input (official QAngaroo WikiHop JSON)", {
        "train": "train.json", "valid": "dev.json", "test": "a test file (answers may be absent)"})
    add_output_arguments(p)
    g = p.add_argument_group("layout")
    g.add_argument("--max-long-len", type=positive_int, default=DEFAULT_MAX_LONG_LEN, help=f"long input length (default {DEFAULT_MAX_LONG_LEN})")
    g.add_argument("--max-global-len", type=positive_int, default=DEFAULT_MAX_GLOBAL_LEN, help=f"global input length (default {DEFAULT_MAX_GLOBAL_LEN})")
    g.add_argument(
        "--max-links-per-token", type=positive_int, default=DEFAULT_MAX_LINKS_PER_TOKEN, metavar="K",
        help=f"most candidates one long token is linked to (extra links are counted; default {DEFAULT_MAX_LINKS_PER_TOKEN})",
    )
    g.add_argument(
        "--flat-structure", action="store_true",
        help="the paper's ablation: no l2l cut at support boundaries, only sentence-level long/global labels "
        "(no context parents, no candidate-mention links)",
    )
    g.add_argument(
        "--candidate-attention", choices=CANDIDATE_ATTENTION, default="mentions",
        help="mentions (default): a candidate's global token attends only to its mentions among the long tokens; "
        "all: to every long token (the official setting; its few mentions are then drowned until attention is "
        "trained)",
    )
    g.add_argument(
        "--no-globals", action="store_true",
        help="the local-only and flat-encoder arms: the candidates written into the long input after the query "
        "(each scored from the mean of its pieces' outputs), one CLS global token, no structure",
    )
    g.add_argument(
        "--candidate-strings", action="store_true",
        help="the ETC layout with each candidate's pieces also in the long input after the query, read by its "
        "CANDIDATE token (the same information as --no-globals, with ETC's structure)",
    )
    WordPieceTokenizer.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    splits = splits_from_args(args)
    tokenizer = WordPieceTokenizer.from_args(args)
    opts = LayoutOptions(args.max_long_len, args.max_global_len, args.max_links_per_token, args.flat_structure,
                         args.candidate_attention, args.no_globals, args.candidate_strings)
    summary = prepare_wikihop(splits, args.out, tokenizer, opts, overwrite=args.overwrite, log_every=args.log_every)
    print_summary(args.out, summary, notes=[f"tokenizer: {tokenizer.stats}"])
    return 0


PREPARE = Subcommand(
    name="wikihop",
    help="QAngaroo WikiHop JSON -> ETC structured data (candidates linked to their mentions)",
    description="Prepare WikiHop for the etc_wikihop task (paper appendix C). Long input: the query pieces, "
    "then every support's sentences. Global input: one CANDIDATE token per candidate answer, one QUESTION "
    "token per query piece, and per support a CONTEXT token and one SENTENCE token per sentence. l2l is cut "
    "at support boundaries, supports are unordered, candidates are linked to their string-matched mentions. "
    "Too long instances lose the last sentence of the support with the most sentences, repeatedly (counted). "
    "Writes DIR/dict.txt, DIR/{split}.* (see etc_fairseq/data/structured.py) and DIR/prepare.json.",
    add_arguments=_add_arguments,
    run=_run,
)
