"""Planning ETC pre-training examples from documents of sentences: splitting and packing (pure functions).

The paper (appendix C) splits documents longer than the long input and, for efficiency, concatenates as
many shorter documents as fit into one 512/4096/8192 window, with attention masked so that they cannot
influence each other (about 3x faster pre-training at 4096). Here:

- an **example** is a list of :class:`Piece` ``(doc, first, end)``: sentences ``first .. end-1`` of
  document ``doc``; every piece is one document or one consecutive chunk of a document. Pieces in one example
  are independent texts: :func:`example_structure_ids` gives each its own example id, and
  :func:`etc_fairseq.structure.build_structure` then blocks every attention edge between them, in all four
  pieces (l2l, l2g, g2g, g2l).
- the long input holds the example's tokens, the global input one token per sentence.

:func:`plan_examples` works on sentence lengths only (tokens per sentence, without any eos), so a task can
plan an epoch from the corpus index without reading token data.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "Piece", "Example", "PackingStats", "greedy_pack", "plan_examples", "example_lengths", "example_structure_ids",
]


class Piece(NamedTuple):
    """Sentences ``first .. end-1`` (end exclusive) of document ``doc``. Compares equal to a plain tuple."""

    doc: int
    first: int
    end: int


Example = List[Piece]


@dataclass
class PackingStats:
    """What :func:`plan_examples` did.

    Attributes:
        docs: documents planned (empty documents are skipped and counted in ``empty_docs``).
        split_docs: documents cut into more than one chunk (too many tokens or too many sentences).
        chunks: pieces over all examples (documents + extra chunks).
        examples: examples returned.
        truncated_sentences: sentences longer than the long budget (``max_long_len - reserve_long``); each is
            an example of its own and must be cut to the budget (see :func:`example_lengths`).
        truncated_tokens: tokens those cuts drop.
        long_tokens: long tokens over all examples (after truncation), for the fill rate.
        empty_docs: documents without sentences.
    """

    docs: int = 0
    split_docs: int = 0
    chunks: int = 0
    examples: int = 0
    truncated_sentences: int = 0
    truncated_tokens: int = 0
    long_tokens: int = 0
    empty_docs: int = 0


def _check_sizes(max_long_len: int, max_global_len: int, reserve_long: int) -> int:
    for name, v in (("max_long_len", max_long_len), ("max_global_len", max_global_len), ("reserve_long", reserve_long)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {v!r}")
    if max_global_len < 1:
        raise ConfigError(f"max_global_len must be >= 1, got {max_global_len}")
    if reserve_long < 0 or reserve_long >= max_long_len:
        raise ConfigError(f"reserve_long must be in [0, max_long_len={max_long_len}), got {reserve_long}")
    return int(max_long_len - reserve_long)


def _chunk_document(doc: int, lengths: Sequence[int], budget: int, max_global_len: int) -> List[Piece]:
    """Greedy consecutive chunks of one document: each as many sentences as fit (a too-long sentence alone)."""
    chunks: List[Piece] = []
    first, total = 0, 0
    for j, n in enumerate(lengths):
        n = min(int(n), budget)
        if j > first and (total + n > budget or j - first >= max_global_len):
            chunks.append(Piece(doc, first, j))
            first, total = j, 0
        total += n
    chunks.append(Piece(doc, first, len(lengths)))
    return chunks


def greedy_pack(
    costs: Sequence[Tuple[int, int]], max_long: int, max_global: int, pack: bool = True
) -> List[List[int]]:
    """Group consecutive items greedily: an item joins the current group unless packing is off or it
    would push the group's long cost past ``max_long`` or its global cost past ``max_global``.

    Args:
        costs: per item, (long tokens, global tokens) it takes.
        max_long, max_global: the limits of one group (an item alone may exceed them; callers truncate).
        pack: False puts every item in a group of its own.
    Returns:
        the groups, as lists of item indices, in order.
    """
    groups: List[List[int]] = []
    cur: List[int] = []
    cur_long = cur_global = 0
    for i, (n_long, n_global) in enumerate(costs):
        if cur and (not pack or cur_long + n_long > max_long or cur_global + n_global > max_global):
            groups.append(cur)
            cur, cur_long, cur_global = [], 0, 0
        cur.append(i)
        cur_long += n_long
        cur_global += n_global
    if cur:
        groups.append(cur)
    return groups


def plan_examples(
    doc_sentence_lengths: Sequence[Sequence[int]],
    max_long_len: int,
    max_global_len: int,
    pack: bool = True,
    reserve_long: int = 0,
    stats: Optional[PackingStats] = None,
) -> List[Example]:
    """Split long documents and pack short ones into examples of at most ``max_long_len`` long tokens.

    1. Each document is cut, at sentence boundaries, into consecutive chunks: a chunk takes sentences while
       its tokens stay within the budget ``max_long_len - reserve_long`` and its sentences within
       ``max_global_len`` (one global token per sentence). A document that fits is one chunk.
    2. A sentence longer than the budget becomes a chunk of its own, to be truncated to the budget (counted
       in ``stats.truncated_*`` and logged as a warning; never silent).
    3. With ``pack``, consecutive chunks (corpus order, so the plan is deterministic) are greedily
       concatenated into one example while the example's tokens stay within the budget and its sentences
       within ``max_global_len``; otherwise every chunk is an example. Two chunks of one document never
       share an example (the second did not fit with the first).

    Args:
        doc_sentence_lengths: per document, the token count of each sentence (no eos).
        max_long_len: long input length.
        max_global_len: global input length (sentences per example).
        pack: concatenate short documents/chunks.
        reserve_long: long slots kept free in every example (e.g. a CLS token the task adds).
        stats: a :class:`PackingStats` to fill in (optional).
    Returns:
        the examples, in corpus order; empty documents are skipped.
    Raises:
        ValueError: sizes that leave no room (``max_global_len < 1``, ``reserve_long >= max_long_len``).
    """
    budget = _check_sizes(max_long_len, max_global_len, reserve_long)
    stats = stats if stats is not None else PackingStats()
    pieces: List[Piece] = []
    costs: List[Tuple[int, int]] = []  # (long tokens, sentences) of each chunk
    for d, lengths in enumerate(doc_sentence_lengths):
        if len(lengths) == 0:
            stats.empty_docs += 1
            continue
        stats.docs += 1
        chunks = _chunk_document(d, lengths, budget, max_global_len)
        stats.split_docs += len(chunks) > 1
        for n in lengths:
            if n > budget:
                stats.truncated_sentences += 1
                stats.truncated_tokens += int(n) - budget
        for c in chunks:
            tokens = sum(min(int(n), budget) for n in lengths[c.first : c.end])
            stats.chunks += 1
            stats.long_tokens += tokens
            pieces.append(c)
            costs.append((tokens, c.end - c.first))
    examples = [[pieces[i] for i in group] for group in greedy_pack(costs, budget, max_global_len, pack)]
    stats.examples = len(examples)
    if stats.truncated_sentences:
        logger.warning(
            "%d sentence(s) longer than the long budget of %d tokens (max_long_len %d - reserve_long %d) "
            "will be truncated, dropping %d tokens",
            stats.truncated_sentences,
            budget,
            max_long_len,
            reserve_long,
            stats.truncated_tokens,
        )
    return examples


def example_lengths(
    example: Example, doc_sentence_lengths: Sequence[Sequence[int]], max_sentence_len: Optional[int] = None
) -> List[int]:
    """The token count of each sentence of an example, in order (what its global tokens stand for).

    Args:
        example: pieces from :func:`plan_examples`.
        doc_sentence_lengths: the lengths given to :func:`plan_examples`.
        max_sentence_len: cut longer sentences to this (pass ``max_long_len - reserve_long``, the budget
            :func:`plan_examples` truncates to); ``None`` = no cut.
    Returns:
        one length per sentence of the example.
    """
    out = []
    for doc, first, end in example:
        for n in doc_sentence_lengths[doc][first:end]:
            n = int(n)
            out.append(n if max_sentence_len is None else min(n, max_sentence_len))
    return out


def example_structure_ids(
    example: Example,
    doc_sentence_lengths: Sequence[Sequence[int]],
    max_sentence_len: Optional[int] = None,
) -> Dict[str, np.ndarray]:
    """Compact structure ids of one (packed) example, as :func:`etc_fairseq.structure.build_structure` takes them.

    Layout: the long input is the example's sentences' tokens back to back (piece after piece); the global
    input is one token per sentence, in the same order. Piece ``p`` of the example has example id ``p``.

    Args:
        example: pieces from :func:`plan_examples`.
        doc_sentence_lengths: the lengths given to :func:`plan_examples`.
        max_sentence_len: as in :func:`example_lengths`.
    Returns:
        int64 1-D arrays (add a batch dimension for ``build_structure``):
        ``long_segment`` [long_len]: global index of each long token's sentence;
        ``long_example`` [long_len]: piece (packed example) id of each long token;
        ``global_example`` [global_len]: piece id of each global token.
    """
    seg_lengths: List[int] = []
    piece_of_sentence: List[int] = []
    for p, (doc, first, end) in enumerate(example):
        for n in doc_sentence_lengths[doc][first:end]:
            n = int(n)
            seg_lengths.append(n if max_sentence_len is None else min(n, max_sentence_len))
            piece_of_sentence.append(p)
    lengths = np.asarray(seg_lengths, dtype=np.int64)
    global_example = np.asarray(piece_of_sentence, dtype=np.int64)
    long_segment = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return {
        "long_segment": long_segment,
        "long_example": global_example[long_segment],
        "global_example": global_example,
    }
