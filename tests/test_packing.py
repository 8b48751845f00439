"""Tests for etc_fairseq.data.packing: splitting/packing plans (exact), structure ids, and that a packed
example's masks from etc_fairseq.structure.build_structure block every cross-document pair in all four pieces."""
import logging
import random

import numpy as np
import pytest
import torch

from etc_fairseq.data.packing import (
    PackingStats,
    Piece,
    example_lengths,
    example_structure_ids,
    greedy_pack,
    plan_examples,
)
from etc_fairseq.structure import RelativeLabelVocab, build_structure

SHORT_DOCS = [[3, 4], [2], [5, 1, 1], [6]]


def test_pack_consecutive_short_documents():
    stats = PackingStats()
    ex = plan_examples(SHORT_DOCS, max_long_len=10, max_global_len=8, stats=stats)
    assert ex == [[(0, 0, 2), (1, 0, 1)], [(2, 0, 3)], [(3, 0, 1)]]
    assert isinstance(ex[0][0], Piece) and ex[0][0].doc == 0 and ex[0][0].end == 2
    assert stats == PackingStats(docs=4, split_docs=0, chunks=4, examples=3, long_tokens=22)


def test_no_packing_gives_one_example_per_document():
    assert plan_examples(SHORT_DOCS, 10, 8, pack=False) == [[(0, 0, 2)], [(1, 0, 1)], [(2, 0, 3)], [(3, 0, 1)]]


def test_reserve_long_shrinks_the_budget():
    # budget 10 - 2 = 8: documents 0 and 1 (7 + 2 tokens) no longer fit together
    assert plan_examples(SHORT_DOCS, 10, 8, reserve_long=2) == [[(0, 0, 2)], [(1, 0, 1)], [(2, 0, 3)], [(3, 0, 1)]]
    # budget 9: they do
    assert plan_examples(SHORT_DOCS, 10, 8, reserve_long=1) == [[(0, 0, 2), (1, 0, 1)], [(2, 0, 3)], [(3, 0, 1)]]


def test_long_document_is_split_at_sentence_boundaries_and_the_rest_packs_on():
    stats = PackingStats()
    ex = plan_examples([[4, 4, 4, 4, 4], [2]], max_long_len=10, max_global_len=8, stats=stats)
    # chunks of document 0: 4+4 | 4+4 | 4 ; the last chunk shares an example with document 1
    assert ex == [[(0, 0, 2)], [(0, 2, 4)], [(0, 4, 5), (1, 0, 1)]]
    assert (stats.split_docs, stats.chunks, stats.examples, stats.truncated_sentences) == (1, 4, 3, 0)


def test_too_many_sentences_for_the_global_input():
    stats = PackingStats()
    ex = plan_examples([[1, 1, 1, 1, 1], [1, 1]], max_long_len=100, max_global_len=2, stats=stats)
    assert ex == [[(0, 0, 2)], [(0, 2, 4)], [(0, 4, 5)], [(1, 0, 2)]]
    assert stats.split_docs == 1


def test_over_long_sentence_is_alone_truncated_and_counted(caplog):
    stats = PackingStats()
    lengths = [[2, 15, 3], [1]]
    with caplog.at_level(logging.WARNING, logger="etc_fairseq.data.packing"):
        ex = plan_examples(lengths, max_long_len=10, max_global_len=8, stats=stats)
    assert ex == [[(0, 0, 1)], [(0, 1, 2)], [(0, 2, 3), (1, 0, 1)]]
    assert (stats.truncated_sentences, stats.truncated_tokens, stats.long_tokens) == (1, 5, 16)
    assert "1 sentence(s) longer than the long budget of 10 tokens" in caplog.text and "dropping 5 tokens" in caplog.text
    assert example_lengths(ex[1], lengths, max_sentence_len=10) == [10]
    assert example_lengths(ex[1], lengths) == [15]
    # with a reserved slot the budget is 9, and both long sentences are counted
    stats = PackingStats()
    plan_examples([[9, 12]], max_long_len=10, max_global_len=8, reserve_long=1, stats=stats)
    assert (stats.truncated_sentences, stats.truncated_tokens) == (1, 3)


def test_empty_documents_are_skipped_and_counted():
    stats = PackingStats()
    assert plan_examples([[], [3], []], 10, 4, stats=stats) == [[(1, 0, 1)]]
    assert (stats.docs, stats.empty_docs) == (1, 2)
    assert plan_examples([], 10, 4) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_long_len=10, max_global_len=0),
        dict(max_long_len=10, max_global_len=4, reserve_long=10),
        dict(max_long_len=10, max_global_len=4, reserve_long=-1),
        dict(max_long_len=10.0, max_global_len=4),
    ],
)
def test_sizes_that_leave_no_room_are_rejected(kwargs):
    with pytest.raises(ValueError):
        plan_examples(SHORT_DOCS, **kwargs)


@pytest.mark.parametrize("pack", [True, False])
def test_plan_covers_every_sentence_once_within_limits(pack):
    rng = random.Random(0)
    docs = [[rng.randint(1, 40) for _ in range(rng.randint(0, 30))] for _ in range(200)]
    L, G, reserve = 128, 16, 1
    ex = plan_examples(docs, L, G, pack=pack, reserve_long=reserve)
    assert ex == plan_examples(docs, L, G, pack=pack, reserve_long=reserve)  # deterministic
    flat = [p for e in ex for p in e]
    covered = [(d, j) for d, a, b in flat for j in range(a, b)]
    assert covered == [(d, j) for d, doc in enumerate(docs) for j in range(len(doc))]  # in order, once each
    for e in ex:
        lens = example_lengths(e, docs, max_sentence_len=L - reserve)
        assert sum(lens) <= L - reserve and 1 <= len(lens) <= G
        assert len({p.doc for p in e}) == len(e)  # two chunks of one document never share an example
        if not pack:
            assert len(e) == 1


def test_example_structure_ids_exact():
    ids = example_structure_ids([Piece(0, 0, 2), Piece(1, 0, 1)], [[2, 3], [1]])
    assert set(ids) == {"long_segment", "long_example", "global_example"}
    assert ids["long_segment"].tolist() == [0, 0, 1, 1, 1, 2]
    assert ids["long_example"].tolist() == [0, 0, 0, 0, 0, 1]
    assert ids["global_example"].tolist() == [0, 0, 1]
    assert all(v.dtype == np.int64 for v in ids.values())
    # a chunk in the middle of a document, and truncation of an over-long sentence
    ids = example_structure_ids([(0, 1, 3), (2, 0, 1)], [[9, 2, 1], [], [12]], max_sentence_len=4)
    assert ids["long_segment"].tolist() == [0, 0, 1, 2, 2, 2, 2]
    assert ids["long_example"].tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert ids["global_example"].tolist() == [0, 0, 1]


def _pad(arrays, value):
    n = max(len(a) for a in arrays)
    out = torch.full((len(arrays), n), value, dtype=torch.long)
    pad = torch.ones(len(arrays), n, dtype=torch.bool)
    for b, a in enumerate(arrays):
        out[b, : len(a)] = torch.from_numpy(a)
        pad[b, : len(a)] = False
    return out, pad


def test_packed_documents_cannot_see_each_other_in_any_piece():
    # 5 short documents packed into 2 examples of at most 24 long tokens / 6 sentences, radius 3 so that
    # the l2l window always straddles document boundaries.
    docs = [[3, 5], [2, 2, 4], [6], [1, 1, 1], [7, 2]]
    L, G, r = 24, 6, 3
    examples = plan_examples(docs, L, G)
    assert examples == [[(0, 0, 2), (1, 0, 3), (2, 0, 1)], [(3, 0, 3), (4, 0, 2)]]
    rows = [example_structure_ids(e, docs) for e in examples]
    long_segment, long_pad = _pad([x["long_segment"] for x in rows], 0)
    long_example, _ = _pad([x["long_example"] for x in rows], 0)
    global_example, global_pad = _pad([x["global_example"] for x in rows], 0)
    vocab = RelativeLabelVocab(4)
    s = build_structure(
        long_padding_mask=long_pad,
        global_padding_mask=global_pad,
        vocab=vocab,
        local_radius=r,
        long_segment=long_segment,
        long_example=long_example,
        global_example=global_example,
    )
    B, Ln = long_example.shape
    Gn = global_example.shape[1]
    # example id of every l2l key slot (-1 outside the row or at padding)
    key = torch.arange(Ln)[:, None] + torch.arange(2 * r + 1)[None, :] - r  # [L, 2r+1]
    inside = (key >= 0) & (key < Ln)
    key_ex = torch.where(inside, long_example[:, key.clamp(0, Ln - 1)], torch.tensor(-1))
    key_pad = torch.where(inside, long_pad[:, key.clamp(0, Ln - 1)], torch.tensor(True))
    same_l2l = (key_ex == long_example[:, :, None]) & ~key_pad & ~long_pad[:, :, None]
    same_l2g = (long_example[:, :, None] == global_example[:, None, :]) & ~long_pad[:, :, None] & ~global_pad[:, None, :]
    same_g2g = (global_example[:, :, None] == global_example[:, None, :]) & ~global_pad[:, :, None] & ~global_pad[:, None, :]
    same_g2l = same_l2g.transpose(1, 2)
    # no edge between different documents (or padding), in any of the four pieces ...
    assert not (s.l2l_mask & ~same_l2l).any()
    assert not (s.l2g_mask & ~same_l2g).any()
    assert not (s.g2g_mask & ~same_g2g).any()
    assert not (s.g2l_mask & ~same_g2l).any()
    # ... and every in-document pair is still there (full masks, no hard g2l/l2g)
    assert torch.equal(s.l2l_mask, same_l2l)
    assert torch.equal(s.l2g_mask, same_l2g)
    assert torch.equal(s.g2g_mask, same_g2g)
    assert torch.equal(s.g2l_mask, same_g2l)
    # the boundary pairs exist in the window: the check above is not vacuous
    assert (inside & (key_ex != long_example[:, :, None]) & ~long_pad[:, :, None] & (key_ex >= 0)).any()
    # each long token "belongs" to its own sentence's global token
    belongs = vocab.label("belongs")
    for b, row in enumerate(rows):
        for i, g in enumerate(row["long_segment"].tolist()):
            assert int(s.l2g_rel[b, i, g]) == belongs
    assert Gn == G and B == 2


def test_greedy_pack_exact_groups():
    costs = [(3, 1), (4, 1), (2, 2), (6, 1), (1, 1), (1, 1)]
    # limits 7 long / 3 global: (3+4) fits; +2 long exceeds 7 -> new group; (2,2)+(6,..) exceeds 7;
    # (6,1)+(1,1)=7 long fits, +(1,1) exceeds -> new group.
    assert greedy_pack(costs, 7, 3) == [[0, 1], [2], [3, 4], [5]]
    # the global limit binds: 2 globals + 2 globals > 3
    assert greedy_pack([(1, 2), (1, 2), (1, 1)], 100, 3) == [[0], [1, 2]]
    # an item alone may exceed the limits (callers truncate it); no packing = one group each
    assert greedy_pack([(9, 1), (1, 1)], 5, 5) == [[0], [1]]
    assert greedy_pack(costs, 100, 100, pack=False) == [[i] for i in range(6)]
    assert greedy_pack([], 7, 3) == []
