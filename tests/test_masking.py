"""Exact and statistical tests of the pre-training masking functions (etc_fairseq.data.masking)."""
import numpy as np
import pytest

from etc_fairseq.data.masking import apply_80_10_10, choose_cpc_sentences, whole_word_mask, word_ids


def random_word_starts(n, rng, p_start=0.6):
    ws = rng.random(n) < p_start
    ws[0] = True
    return ws


def test_word_ids_exact():
    ws = np.array([1, 0, 0, 1, 1, 0, 1, 0], dtype=bool)
    assert word_ids(ws).tolist() == [0, 0, 0, 1, 2, 2, 3, 3]
    eligible = np.array([1, 1, 0, 0, 1, 1, 0, 1], dtype=bool)
    # an ineligible token cuts a word: position 7 starts a new word although word_starts[7] is False
    assert word_ids(ws, eligible).tolist() == [0, 0, -1, -1, 1, 1, -1, 2]
    assert word_ids(np.zeros(0, dtype=bool)).tolist() == []


def test_whole_word_mask_never_splits_a_word_and_respects_eligibility():
    for seed in range(300):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 80))
        ws = random_word_starts(n, rng)
        eligible = rng.random(n) < 0.8
        picked = whole_word_mask(ws, eligible, 0.3, rng)
        assert not (picked & ~eligible).any()
        ids = word_ids(ws, eligible)
        for w in np.unique(ids[ids >= 0]):
            vals = picked[ids == w]
            assert vals.all() or not vals.any(), (seed, w)


def test_whole_word_mask_word_count_and_rate():
    rng = np.random.default_rng(0)
    ws = random_word_starts(20, rng)
    num_words = int(word_ids(ws).max()) + 1
    for seed in range(50):
        picked = whole_word_mask(ws, None, 0.15, np.random.default_rng(seed))
        k = len(np.unique(word_ids(ws)[picked]))
        assert k in (int(np.floor(0.15 * num_words)), int(np.ceil(0.15 * num_words)))
    # over a large input the picked fraction of eligible tokens is 15%
    n = 400_000
    ws = random_word_starts(n, rng, p_start=0.5)
    eligible = rng.random(n) < 0.9
    picked = whole_word_mask(ws, eligible, 0.15, rng)
    assert abs(picked.sum() / eligible.sum() - 0.15) < 0.004
    assert not whole_word_mask(ws, np.zeros(n, dtype=bool), 0.15, rng).any()
    assert whole_word_mask(ws, None, 1.0, rng).all()


def test_apply_80_10_10_proportions():
    rng = np.random.default_rng(1)
    n = 200_000
    tokens = np.full(n, 5, dtype=np.int64)
    picked = rng.random(n) < 0.5
    choices = np.arange(10, 1000)
    out = apply_80_10_10(tokens, picked, 4, choices, rng, 0.1, 0.1)
    assert (out[~picked] == 5).all()
    p = out[picked]
    assert abs((p == 4).mean() - 0.8) < 0.006
    assert abs(np.isin(p, choices).mean() - 0.1) < 0.004
    assert abs((p == 5).mean() - 0.1) < 0.004
    assert ((p == 4) | (p == 5) | np.isin(p, choices)).all()
    # all to <mask>
    out = apply_80_10_10(tokens, picked, 4, choices, rng, 0.0, 0.0)
    assert (out[picked] == 4).all() and (out[~picked] == 5).all()
    with pytest.raises(ValueError):
        apply_80_10_10(tokens, picked, 4, choices, rng, 0.6, 0.6)


def test_choose_cpc_sentences():
    rng = np.random.default_rng(2)
    # single-sentence groups are skipped; a group never loses all its sentences
    for seed in range(200):
        groups = np.repeat(np.arange(6), np.random.default_rng(seed).integers(1, 6, size=6))
        cpc = choose_cpc_sentences(groups, 0.5, np.random.default_rng(seed))
        for g in np.unique(groups):
            m = groups == g
            if m.sum() == 1:
                assert not cpc[m].any()
            else:
                assert cpc[m].sum() <= m.sum() - 1
    # rate over many groups of 20 sentences
    groups = np.repeat(np.arange(5000), 20)
    cpc = choose_cpc_sentences(groups, 0.1, rng)
    assert abs(cpc.mean() - 0.1) < 0.003
    assert not choose_cpc_sentences(groups, 0.0, rng).any()
    # determinism
    a = choose_cpc_sentences(groups[:200], 0.1, np.random.default_rng(7))
    b = choose_cpc_sentences(groups[:200], 0.1, np.random.default_rng(7))
    assert (a == b).all()
    with pytest.raises(ValueError):
        choose_cpc_sentences(groups, 1.5, rng)
