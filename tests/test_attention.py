"""Tests for etc_fairseq.attention: blocked kernel vs dense reference, hand-checked cases,
skew/unskew layouts, relative-term gather, numerics (empty rows, bf16), memory shape and
input validation."""

from __future__ import annotations

import math

import pytest
import torch

from etc_fairseq.attention import (
    band_to_blocked,
    blocked_to_band,
    dense_global_local_attention,
    dense_global_query_attention,
    dense_long_query_attention,
    global_local_attention,
    global_query_attention,
    long_query_attention,
)
from etc_fairseq.attention.common import masked_joint_softmax

TOL = 1e-10


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def _rand(gen, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(True)


def _make_inputs(seed, batch, heads, long_len, global_len, radius, head_dim=3, num_labels=5,
                 with_rel=True, density=0.7, empty_rows=True, dtype=torch.float64):
    """Random inputs for global_local_attention; returns (tensors, kwargs, empty_long, empty_global)."""
    gen = torch.Generator().manual_seed(seed)
    b, h, L, G, r, d = batch, heads, long_len, global_len, radius, head_dim
    tensors = dict(
        long_q=_rand(gen, b, h, L, d, dtype=dtype), long_k=_rand(gen, b, h, L, d, dtype=dtype),
        long_v=_rand(gen, b, h, L, d, dtype=dtype), global_q=_rand(gen, b, h, G, d, dtype=dtype),
        global_k=_rand(gen, b, h, G, d, dtype=dtype), global_v=_rand(gen, b, h, G, d, dtype=dtype),
    )

    def mask(*shape):
        return torch.rand(*shape, generator=gen) < density

    kw = dict(
        local_radius=r, l2l_mask=mask(b, L, 2 * r + 1), l2g_mask=mask(b, L, G),
        g2g_mask=mask(b, G, G), g2l_mask=mask(b, G, L),
    )
    empty_long = torch.zeros(b, L, dtype=torch.bool)
    empty_global = torch.zeros(b, G, dtype=torch.bool)
    if empty_rows:
        if L > 0:
            empty_long = torch.rand(b, L, generator=gen) < 0.25
            empty_long[0, 0] = True
            kw["l2l_mask"] = kw["l2l_mask"] & ~empty_long[:, :, None]
            kw["l2g_mask"] = kw["l2g_mask"] & ~empty_long[:, :, None]
        if G > 0:
            empty_global = torch.rand(b, G, generator=gen) < 0.25
            empty_global[-1, -1] = True
            kw["g2g_mask"] = kw["g2g_mask"] & ~empty_global[:, :, None]
            kw["g2l_mask"] = kw["g2l_mask"] & ~empty_global[:, :, None]
    if with_rel:
        def labels(*shape):
            return torch.randint(0, num_labels, shape, generator=gen)

        kw.update(
            l2l_rel=labels(b, L, 2 * r + 1), l2g_rel=labels(b, L, G),
            g2g_rel=labels(b, G, G), g2l_rel=labels(b, G, L),
        )
        tensors["long_rel_emb"] = _rand(gen, num_labels, h, d, dtype=dtype)
        tensors["global_rel_emb"] = _rand(gen, num_labels, h, d, dtype=dtype)
    return tensors, kw, empty_long, empty_global


def _call(fn, tensors, kw):
    t = dict(tensors)
    args = [t.pop(n) for n in ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")]
    return fn(*args, **t, **kw)


def _grads(outputs, inputs, grad_outputs):
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(x) for x in inputs]
    return torch.autograd.grad(
        [o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True, materialize_grads=True
    )


def _maxdiff(a, b):
    """Max abs difference (0 for empty tensors)."""
    return (a - b).abs().max().item() if a.numel() else 0.0


def _softmax_out(pairs):
    """Expected attention output from explicit (logit, value) pairs, with math.exp."""
    if not pairs:
        return 0.0
    weights = [math.exp(z) for z, _ in pairs]
    return sum(w * v for w, (_, v) in zip(weights, pairs)) / sum(weights)


def _t(values, *shape):
    return torch.tensor(values, dtype=torch.float64).reshape(*shape)


# ----------------------------------------------------------------------------
# skew / unskew
# ----------------------------------------------------------------------------


def test_band_to_blocked_exact_r1():
    band = torch.arange(1, 13).reshape(1, 4, 3)  # rows 1..4, slots w=0,1,2
    expected = torch.tensor([[
        [[0, 1, 2, 3, 0, 0],
         [0, 0, 4, 5, 6, 0]],
        [[0, 7, 8, 9, 0, 0],
         [0, 0, 10, 11, 12, 0]],
    ]])
    assert torch.equal(band_to_blocked(band, 1), expected)
    assert torch.equal(blocked_to_band(expected, 1, 4), band)


def test_band_to_blocked_exact_padding_and_bool():
    band = torch.tensor([[[True, False, True], [True, True, False], [False, True, True]]])
    expected = torch.tensor([[
        [[False, True, False, True, False, False],
         [False, False, True, True, False, False]],
        [[False, False, True, True, False, False],
         [False, False, False, False, False, False]],  # padding row (long_len 3 -> 4)
    ]])
    out = band_to_blocked(band, 1)
    assert out.dtype == torch.bool
    assert torch.equal(out, expected)
    assert torch.equal(blocked_to_band(expected, 1, 3), band)


def test_band_to_blocked_exact_r0_and_r2():
    band0 = torch.tensor([[[5], [6]]])
    assert torch.equal(band_to_blocked(band0, 0), torch.tensor([[[[0, 5, 0]], [[0, 6, 0]]]]))
    band2 = torch.arange(1, 16).reshape(1, 3, 5)
    expected2 = torch.tensor([[[
        [0, 1, 2, 3, 4, 5, 0, 0, 0],
        [0, 0, 6, 7, 8, 9, 10, 0, 0],
        [0, 0, 0, 11, 12, 13, 14, 15, 0],
    ]]])
    assert torch.equal(band_to_blocked(band2, 2), expected2)


def test_unskew_ignores_out_of_band_columns():
    blocked = torch.full((1, 2, 2, 6), -1)
    band = torch.arange(1, 13).reshape(1, 4, 3)
    mask = band_to_blocked(torch.ones(1, 4, 3, dtype=torch.bool), 1)
    blocked = torch.where(mask, band_to_blocked(band, 1), blocked)
    assert torch.equal(blocked_to_band(blocked, 1, 4), band)


@pytest.mark.parametrize("r", [0, 1, 2, 5])
@pytest.mark.parametrize("long_len", [1, 4, 7, 13])
def test_skew_roundtrip(r, long_len):
    band = torch.randint(1, 1000, (2, long_len, 2 * r + 1))
    assert torch.equal(blocked_to_band(band_to_blocked(band, r), r, long_len), band)


# ----------------------------------------------------------------------------
# blocked == dense (outputs and all gradients), float64
# ----------------------------------------------------------------------------

CONFIGS = [
    # (batch, heads, long_len, global_len, radius, with_rel)
    (2, 2, 7, 3, 0, True),
    (2, 2, 7, 3, 1, True),
    (1, 3, 10, 2, 2, True),    # long_len not a multiple of r+1
    (2, 2, 12, 2, 3, False),   # r+1 divides long_len
    (2, 1, 11, 1, 4, True),    # r does not divide long_len
    (2, 2, 5, 2, 5, True),     # r == long_len
    (2, 2, 4, 3, 9, True),     # r >> long_len
    (1, 2, 1, 2, 3, True),     # long_len 1
    (2, 2, 9, 0, 2, True),     # global_len 0
    (2, 2, 0, 3, 2, True),     # long_len 0
    (2, 2, 0, 0, 1, False),    # both empty
    (3, 2, 16, 4, 2, False),
    (2, 4, 17, 5, 3, True),
]


@pytest.mark.parametrize("batch,heads,long_len,global_len,radius,with_rel", CONFIGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_blocked_matches_dense(batch, heads, long_len, global_len, radius, with_rel, seed):
    tensors, kw, empty_long, empty_global = _make_inputs(
        seed, batch, heads, long_len, global_len, radius, with_rel=with_rel
    )
    blocked = _call(global_local_attention, tensors, kw)
    dense = _call(dense_global_local_attention, tensors, kw)
    for a, d in zip(blocked, dense):
        assert a.shape == d.shape and a.dtype == torch.float64
        if a.numel():
            assert (a - d).abs().max().item() <= TOL
    # rows with nothing to attend to are exactly zero
    assert torch.all(blocked[0].permute(0, 2, 1, 3)[empty_long] == 0)
    assert torch.all(blocked[1].permute(0, 2, 1, 3)[empty_global] == 0)

    inputs = list(tensors.values())
    gen = torch.Generator().manual_seed(100 + seed)
    grad_out = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in blocked]
    g_blocked = _grads(blocked, inputs, grad_out)
    g_dense = _grads(dense, inputs, grad_out)
    for name, ga, gd in zip(tensors, g_blocked, g_dense):
        assert torch.isfinite(ga).all(), name
        if ga.numel():
            assert _maxdiff(ga, gd) <= TOL, name


def test_blocked_matches_dense_all_true_masks_many_seeds():
    for seed in range(6):
        gen = torch.Generator().manual_seed(seed)
        L = int(torch.randint(1, 30, (1,), generator=gen))
        G = int(torch.randint(0, 5, (1,), generator=gen))
        r = int(torch.randint(0, 8, (1,), generator=gen))
        tensors, kw, _, _ = _make_inputs(seed, 2, 2, L, G, r, density=1.0, empty_rows=False)
        blocked = _call(global_local_attention, tensors, kw)
        dense = _call(dense_global_local_attention, tensors, kw)
        for a, d in zip(blocked, dense):
            if a.numel():
                assert (a - d).abs().max().item() <= TOL, (L, G, r)


def test_relative_only_on_some_pieces():
    tensors, kw, _, _ = _make_inputs(3, 2, 2, 9, 3, 2)
    kw["l2g_rel"] = None
    kw["g2l_rel"] = None
    for fn_a, fn_d in ((global_local_attention, dense_global_local_attention),):
        a = _call(fn_a, tensors, kw)
        d = _call(fn_d, tensors, kw)
        for x, y in zip(a, d):
            assert (x - y).abs().max().item() <= TOL
    # rel ids given but no embedding -> no relative term at all
    t2 = dict(tensors, long_rel_emb=None, global_rel_emb=None)
    kw_none = {k: (None if k.endswith("_rel") else v) for k, v in kw.items()}
    for x, y in zip(_call(global_local_attention, t2, kw), _call(global_local_attention, t2, kw_none)):
        assert torch.equal(x, y)


@pytest.mark.parametrize("long_len,global_len,radius", [(9, 3, 1), (10, 2, 3), (4, 2, 7), (6, 0, 2)])
def test_halves_with_separate_keys(long_len, global_len, radius):
    gen = torch.Generator().manual_seed(7)
    B, H, D, N = 2, 2, 3, 6
    L, G, r = long_len, global_len, radius
    long_in = dict(
        long_q=_rand(gen, B, H, L, D), l2l_k=_rand(gen, B, H, L, D), l2l_v=_rand(gen, B, H, L, D),
        l2g_k=_rand(gen, B, H, G, D), l2g_v=_rand(gen, B, H, G, D), rel_emb=_rand(gen, N, H, D),
    )
    long_kw = dict(
        local_radius=r, l2l_mask=torch.rand(B, L, 2 * r + 1, generator=gen) < 0.7,
        l2g_mask=torch.rand(B, L, G, generator=gen) < 0.7,
        l2l_rel=torch.randint(0, N, (B, L, 2 * r + 1), generator=gen),
        l2g_rel=torch.randint(0, N, (B, L, G), generator=gen),
    )
    glob_in = dict(
        global_q=_rand(gen, B, H, G, D), g2g_k=_rand(gen, B, H, G, D), g2g_v=_rand(gen, B, H, G, D),
        g2l_k=_rand(gen, B, H, L, D), g2l_v=_rand(gen, B, H, L, D), rel_emb=_rand(gen, N, H, D),
    )
    glob_kw = dict(
        g2g_mask=torch.rand(B, G, G, generator=gen) < 0.7, g2l_mask=torch.rand(B, G, L, generator=gen) < 0.7,
        g2g_rel=torch.randint(0, N, (B, G, G), generator=gen),
        g2l_rel=torch.randint(0, N, (B, G, L), generator=gen),
    )
    for fa, fd, ins, kw in (
        (long_query_attention, dense_long_query_attention, long_in, long_kw),
        (global_query_attention, dense_global_query_attention, glob_in, glob_kw),
    ):
        a = fa(*list(ins.values())[:5], rel_emb=ins["rel_emb"], **kw)
        d = fd(*list(ins.values())[:5], rel_emb=ins["rel_emb"], **kw)
        if a.numel() == 0:
            continue
        assert (a - d).abs().max().item() <= TOL
        go = torch.randn(a.shape, generator=gen, dtype=a.dtype)
        for name, ga, gd in zip(ins, _grads([a], list(ins.values()), [go]), _grads([d], list(ins.values()), [go])):
            assert _maxdiff(ga, gd) <= TOL, name


def test_non_contiguous_inputs():
    # projections usually give [batch, len, heads, head_dim] transposed to [batch, heads, len, head_dim];
    # callers may also pass expanded (stride-0) masks and label ids
    tensors, kw, _, _ = _make_inputs(13, 2, 3, 10, 3, 2, density=1.0, empty_rows=False)
    strided = {}
    for name, t in tensors.items():
        if t.dim() == 4:
            t = t.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(True)
            assert not t.is_contiguous()
        strided[name] = t
    kw = dict(kw, l2l_mask=kw["l2l_mask"][:1].expand(2, -1, -1), l2l_rel=kw["l2l_rel"][:1].expand(2, -1, -1),
              l2g_mask=kw["l2g_mask"][:, :1].expand(-1, 10, -1))
    for a, d in zip(_call(global_local_attention, strided, kw), _call(dense_global_local_attention, tensors, kw)):
        assert _maxdiff(a, d) <= TOL


def test_public_function_is_the_two_halves():
    tensors, kw, _, _ = _make_inputs(5, 2, 2, 8, 2, 2)
    t = tensors
    long_out, global_out = _call(global_local_attention, tensors, kw)
    lo = long_query_attention(
        t["long_q"], t["long_k"], t["long_v"], t["global_k"], t["global_v"], local_radius=2,
        l2l_mask=kw["l2l_mask"], l2g_mask=kw["l2g_mask"], l2l_rel=kw["l2l_rel"], l2g_rel=kw["l2g_rel"],
        rel_emb=t["long_rel_emb"],
    )
    go = global_query_attention(
        t["global_q"], t["global_k"], t["global_v"], t["long_k"], t["long_v"],
        g2g_mask=kw["g2g_mask"], g2l_mask=kw["g2l_mask"], g2g_rel=kw["g2g_rel"], g2l_rel=kw["g2l_rel"],
        rel_emb=t["global_rel_emb"],
    )
    assert torch.equal(long_out, lo) and torch.equal(global_out, go)


# ----------------------------------------------------------------------------
# hand-checked small cases
# ----------------------------------------------------------------------------


def _small_case(**overrides):
    """long_len 3, r = 1, one global token, head_dim 1, batch 1, heads 1, all masks true."""
    ones = lambda *s: torch.ones(*s, dtype=torch.bool)  # noqa: E731
    kw = dict(local_radius=1, l2l_mask=ones(1, 3, 3), l2g_mask=ones(1, 3, 1),
              g2g_mask=ones(1, 1, 1), g2l_mask=ones(1, 1, 3))
    args = dict(
        long_q=_t([1.0, 0.0, 2.0], 1, 1, 3, 1), long_k=_t([0.0, 1.0, 2.0], 1, 1, 3, 1),
        long_v=_t([10.0, 20.0, 30.0], 1, 1, 3, 1), global_q=_t([1.0], 1, 1, 1, 1),
        global_k=_t([1.0], 1, 1, 1, 1), global_v=_t([100.0], 1, 1, 1, 1),
    )
    kw.update(overrides)
    return args, kw


@pytest.mark.parametrize("fn", [global_local_attention, dense_global_local_attention])
def test_hand_checked_all_true(fn):
    args, kw = _small_case()
    long_out, global_out = _call(fn, args, kw)
    expected_long = [
        _softmax_out([(0.0, 10.0), (1.0, 20.0), (1.0, 100.0)]),         # q=1: keys 0,1 + global
        _softmax_out([(0.0, 10.0), (0.0, 20.0), (0.0, 30.0), (0.0, 100.0)]),  # q=0: uniform
        _softmax_out([(2.0, 20.0), (4.0, 30.0), (2.0, 100.0)]),         # q=2: keys 1,2 + global
    ]
    expected_global = _softmax_out([(1.0, 100.0), (0.0, 10.0), (1.0, 20.0), (2.0, 30.0)])
    assert long_out.flatten().tolist() == pytest.approx(expected_long, abs=1e-12)
    assert expected_long[1] == pytest.approx(40.0)
    assert global_out.item() == pytest.approx(expected_global, abs=1e-12)


@pytest.mark.parametrize("fn", [global_local_attention, dense_global_local_attention])
def test_hand_checked_masks_and_empty_rows(fn):
    l2l = torch.ones(1, 3, 3, dtype=torch.bool)
    l2l[0, 2, 1] = False            # long 2 may not see itself (slot w=1 is offset 0)
    l2l[0, 1, :] = False            # long 1: no local keys ...
    l2g = torch.ones(1, 3, 1, dtype=torch.bool)
    l2g[0, 1, 0] = False            # ... and no global key -> zero output
    l2g[0, 0, 0] = False            # long 0: local only
    g2l = torch.tensor([[[False, True, False]]])
    args, kw = _small_case(l2l_mask=l2l, l2g_mask=l2g, g2l_mask=g2l)
    long_out, global_out = _call(fn, args, kw)
    expected_long = [
        _softmax_out([(0.0, 10.0), (1.0, 20.0)]),
        0.0,
        _softmax_out([(2.0, 20.0), (2.0, 100.0)]),  # == 60
    ]
    assert long_out.flatten().tolist() == pytest.approx(expected_long, abs=1e-12)
    assert expected_long[2] == pytest.approx(60.0)
    assert global_out.item() == pytest.approx(_softmax_out([(1.0, 100.0), (1.0, 20.0)]), abs=1e-12)


@pytest.mark.parametrize("fn", [global_local_attention, dense_global_local_attention])
def test_hand_checked_head_dim_2_scaling(fn):
    # head_dim 2: logits are divided by sqrt(2); long_len 2, r = 1, one global token
    ones = lambda *s: torch.ones(*s, dtype=torch.bool)  # noqa: E731
    args = dict(
        long_q=_t([1.0, 1.0, 0.0, 2.0], 1, 1, 2, 2), long_k=_t([1.0, 0.0, 0.0, 1.0], 1, 1, 2, 2),
        long_v=_t([1.0, 2.0, 3.0, 4.0], 1, 1, 2, 2), global_q=_t([0.0, 0.0], 1, 1, 1, 2),
        global_k=_t([2.0, 2.0], 1, 1, 1, 2), global_v=_t([-1.0, 5.0], 1, 1, 1, 2),
    )
    kw = dict(local_radius=1, l2l_mask=ones(1, 2, 3), l2g_mask=ones(1, 2, 1),
              g2g_mask=ones(1, 1, 1), g2l_mask=ones(1, 1, 2))
    long_out, global_out = _call(fn, args, kw)
    s = math.sqrt(2.0)
    # long 0: q=(1,1): k0 -> 1, k1 -> 1, global -> 4
    # long 1: q=(0,2): k0 -> 0, k1 -> 2, global -> 4
    for i, logits in enumerate(([1 / s, 1 / s, 4 / s], [0.0, 2 / s, 4 / s])):
        for c in range(2):
            values = [args["long_v"][0, 0, 0, c].item(), args["long_v"][0, 0, 1, c].item(),
                      args["global_v"][0, 0, 0, c].item()]
            expected = _softmax_out(list(zip(logits, values)))
            assert long_out[0, 0, i, c].item() == pytest.approx(expected, abs=1e-12)
    # global query is zero: uniform over global + 2 long keys
    assert global_out.flatten().tolist() == pytest.approx([(1 + 3 - 1) / 3, (2 + 4 + 5) / 3], abs=1e-12)


@pytest.mark.parametrize("fn", [global_local_attention, dense_global_local_attention])
def test_hand_checked_relative_term(fn):
    # all q = 1 and all k = 0, so q.k = 0 and the logits are exactly q . e[label]
    args, kw = _small_case()
    args["long_q"] = _t([1.0, 1.0, 1.0], 1, 1, 3, 1)
    args["long_k"] = _t([0.0, 0.0, 0.0], 1, 1, 3, 1)
    args["global_k"] = _t([0.0], 1, 1, 1, 1)
    args["long_rel_emb"] = _t([0.0, 1.0, 2.0], 3, 1, 1)     # label n -> e = n for long queries
    args["global_rel_emb"] = _t([0.0, -1.0, 3.0], 3, 1, 1)  # different table for global queries
    band_labels = torch.tensor([1, 0, 2]).expand(1, 3, 3)    # offset -1 -> 1, 0 -> 0, +1 -> 2
    kw.update(
        l2l_rel=band_labels, l2g_rel=torch.zeros(1, 3, 1, dtype=torch.long),
        g2g_rel=torch.zeros(1, 1, 1, dtype=torch.long), g2l_rel=torch.tensor([[[1, 2, 0]]]),
    )
    long_out, global_out = _call(fn, args, kw)
    expected_long = [
        _softmax_out([(0.0, 10.0), (2.0, 20.0), (0.0, 100.0)]),
        _softmax_out([(1.0, 10.0), (0.0, 20.0), (2.0, 30.0), (0.0, 100.0)]),
        _softmax_out([(1.0, 20.0), (0.0, 30.0), (0.0, 100.0)]),
    ]
    expected_global = _softmax_out([(0.0, 100.0), (-1.0, 10.0), (3.0, 20.0), (0.0, 30.0)])
    assert long_out.flatten().tolist() == pytest.approx(expected_long, abs=1e-12)
    assert global_out.item() == pytest.approx(expected_global, abs=1e-12)
    # and without the relative term every long query would be uniform
    plain_long, _ = _call(fn, dict(args, long_rel_emb=None, global_rel_emb=None), kw)
    assert plain_long[0, 0, 1, 0].item() == pytest.approx(40.0)


def test_dense_relative_term_matches_naive_per_pair_vectors():
    gen = torch.Generator().manual_seed(11)
    B, H, L, G, r, D, N = 2, 2, 5, 2, 1, 3, 4
    tensors, kw, _, _ = _make_inputs(11, B, H, L, G, r, head_dim=D, num_labels=N,
                                     density=1.0, empty_rows=False)
    # every query keeps at least one allowed key
    kw["l2l_mask"] = torch.rand(B, L, 2 * r + 1, generator=gen) < 0.6
    kw["l2l_mask"][:, :, r] = True
    kw["g2g_mask"] = torch.rand(B, G, G, generator=gen) < 0.6
    kw["g2g_mask"][:, :, 0] = True
    long_out, global_out = _call(dense_global_local_attention, tensors, kw)

    t = {k: v.detach() for k, v in tensors.items()}
    exp_long = torch.zeros(B, H, L, D, dtype=torch.float64)
    exp_global = torch.zeros(B, H, G, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(L):
                keys, vals, allowed = [], [], []
                for j in range(L):
                    w = j - i + r
                    ok = 0 <= w <= 2 * r and bool(kw["l2l_mask"][b, i, w])
                    lab = int(kw["l2l_rel"][b, i, w]) if 0 <= w <= 2 * r else 0
                    keys.append(t["long_k"][b, h, j] + t["long_rel_emb"][lab, h])  # per-pair vector
                    vals.append(t["long_v"][b, h, j])
                    allowed.append(ok)
                for g in range(G):
                    lab = int(kw["l2g_rel"][b, i, g])
                    keys.append(t["global_k"][b, h, g] + t["long_rel_emb"][lab, h])
                    vals.append(t["global_v"][b, h, g])
                    allowed.append(bool(kw["l2g_mask"][b, i, g]))
                logits = torch.stack([t["long_q"][b, h, i] @ k for k in keys]) / math.sqrt(D)
                logits[~torch.tensor(allowed)] = float("-inf")
                exp_long[b, h, i] = torch.softmax(logits, 0) @ torch.stack(vals)
            for i in range(G):
                keys, vals, allowed = [], [], []
                for g in range(G):
                    keys.append(t["global_k"][b, h, g] + t["global_rel_emb"][int(kw["g2g_rel"][b, i, g]), h])
                    vals.append(t["global_v"][b, h, g])
                    allowed.append(bool(kw["g2g_mask"][b, i, g]))
                for j in range(L):
                    keys.append(t["long_k"][b, h, j] + t["global_rel_emb"][int(kw["g2l_rel"][b, i, j]), h])
                    vals.append(t["long_v"][b, h, j])
                    allowed.append(bool(kw["g2l_mask"][b, i, j]))
                logits = torch.stack([t["global_q"][b, h, i] @ k for k in keys]) / math.sqrt(D)
                logits[~torch.tensor(allowed)] = float("-inf")
                exp_global[b, h, i] = torch.softmax(logits, 0) @ torch.stack(vals)
    assert (long_out - exp_long).abs().max().item() <= TOL
    assert (global_out - exp_global).abs().max().item() <= TOL


# ----------------------------------------------------------------------------
# numerics
# ----------------------------------------------------------------------------


def test_joint_softmax_matches_concatenated_softmax():
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    x2 = torch.randn(2, 3, 4, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    m1 = torch.rand(2, 1, 4, 5, generator=gen) < 0.6
    m2 = torch.rand(2, 1, 4, 2, generator=gen) < 0.6
    m1[0, 0, 1] = False
    m2[0, 0, 1] = False  # a fully masked row
    p1, p2 = masked_joint_softmax((x1, x2), (m1, m2))
    x = torch.cat([x1, x2], -1).masked_fill(~torch.cat([m1, m2], -1), float("-inf"))
    ref = torch.softmax(x, -1).nan_to_num(0.0)
    assert torch.allclose(torch.cat([p1, p2], -1), ref, atol=1e-14, rtol=0)
    assert torch.all(p1[0, :, 1] == 0) and torch.all(p2[0, :, 1] == 0)
    assert torch.autograd.gradcheck(
        lambda a, b: masked_joint_softmax((a, b), (m1, m2)), (x1, x2), eps=1e-6, atol=1e-8
    )


def test_all_masked_gives_zeros_and_finite_grads():
    tensors, kw, _, _ = _make_inputs(4, 2, 2, 6, 2, 1, density=0.0, empty_rows=False)
    out = _call(global_local_attention, tensors, kw)
    assert all(torch.all(o == 0) for o in out)
    grads = _grads(out, list(tensors.values()), [torch.ones_like(o) for o in out])
    assert all(torch.isfinite(g).all() and torch.all(g == 0) for g in grads)


def test_large_logits_stay_finite():
    tensors, kw, _, _ = _make_inputs(6, 1, 2, 9, 2, 2)
    with torch.no_grad():
        tensors["long_q"].mul_(1e3)
        tensors["global_q"].mul_(1e3)
    out = _call(global_local_attention, tensors, kw)
    ref = _call(dense_global_local_attention, tensors, kw)
    grads = _grads(out, list(tensors.values()), [torch.ones_like(o) for o in out])
    assert all(torch.isfinite(o).all() for o in out)
    assert all(torch.isfinite(g).all() for g in grads)
    for a, d in zip(out, ref):
        assert torch.allclose(a, d, atol=1e-8, rtol=0)


def test_bf16_forward_backward_close_to_fp32():
    t64, kw, _, _ = _make_inputs(8, 2, 2, 20, 3, 4, head_dim=8)
    t32 = {k: v.detach().float().requires_grad_(True) for k, v in t64.items()}
    t16 = {k: v.detach().bfloat16().requires_grad_(True) for k, v in t64.items()}
    out32 = _call(global_local_attention, t32, kw)
    out16 = _call(global_local_attention, t16, kw)
    assert all(o.dtype == torch.bfloat16 for o in out16)
    go = [torch.ones_like(o) for o in out32]
    g32 = _grads(out32, list(t32.values()), go)
    g16 = _grads(out16, list(t16.values()), [g.bfloat16() for g in go])
    for a, b in zip(out32, out16):
        assert torch.isfinite(b).all()
        assert (a - b.float()).abs().max().item() < 0.1
    for name, a, b in zip(t32, g32, g16):
        assert b.dtype == torch.bfloat16 and torch.isfinite(b).all(), name
        assert (a - b.float()).abs().max().item() < 0.1 * max(1.0, a.abs().max().item()), name


def test_dropout_applies_to_probabilities():
    tensors, kw, _, _ = _make_inputs(9, 1, 2, 8, 2, 2)
    out = _call(global_local_attention, tensors, dict(kw, dropout_p=1.0))
    assert all(torch.all(o == 0) for o in out)  # every probability dropped
    torch.manual_seed(0)
    a = _call(global_local_attention, tensors, dict(kw, dropout_p=0.5))
    torch.manual_seed(0)
    b = _call(global_local_attention, tensors, dict(kw, dropout_p=0.5))
    base = _call(global_local_attention, tensors, kw)
    assert torch.equal(a[0], b[0]) and not torch.allclose(a[0], base[0])


# ----------------------------------------------------------------------------
# memory: nothing quadratic in long_len is kept for backward
# ----------------------------------------------------------------------------


def _max_saved_numel(fn):
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return max(sizes), out


def test_saved_tensors_are_linear_in_long_len():
    B, H, D, G, r, N = 1, 2, 8, 16, 8, 10
    L = 2048
    bound = 2 * L * (3 * (r + 1) + G) * H
    assert bound < L * L / 4
    peaks = []
    for long_len in (L // 2, L):
        gen = torch.Generator().manual_seed(0)
        mk = lambda *s: torch.randn(*s, generator=gen).requires_grad_(True)  # noqa: E731
        lq, lk, lv = mk(B, H, long_len, D), mk(B, H, long_len, D), mk(B, H, long_len, D)
        gq, gk, gv = mk(B, H, G, D), mk(B, H, G, D), mk(B, H, G, D)
        kw = dict(
            local_radius=r, l2l_mask=torch.ones(B, long_len, 2 * r + 1, dtype=torch.bool),
            l2g_mask=torch.ones(B, long_len, G, dtype=torch.bool), g2g_mask=torch.ones(B, G, G, dtype=torch.bool),
            g2l_mask=torch.ones(B, G, long_len, dtype=torch.bool),
            l2l_rel=torch.randint(0, N, (B, long_len, 2 * r + 1), generator=gen),
            l2g_rel=torch.randint(0, N, (B, long_len, G), generator=gen),
            g2g_rel=torch.randint(0, N, (B, G, G), generator=gen),
            g2l_rel=torch.randint(0, N, (B, G, long_len), generator=gen),
            long_rel_emb=mk(N, H, D), global_rel_emb=mk(N, H, D),
        )
        peak, out = _max_saved_numel(lambda: global_local_attention(lq, lk, lv, gq, gk, gv, **kw))
        (out[0].sum() + out[1].sum()).backward()
        peaks.append(peak)
    assert peaks[1] < L * L / 4
    assert peaks[1] <= bound
    assert peaks[1] <= 2.2 * peaks[0]  # linear, not quadratic, growth


def test_huge_radius_is_sliced():
    B, H, D, L, G, r = 1, 1, 4, 5, 1, 5000
    tensors, kw, _, _ = _make_inputs(12, B, H, L, G, r, head_dim=D)
    peak, out = _max_saved_numel(lambda: _call(global_local_attention, tensors, kw))
    assert peak < 1000  # O(long_len^2)-ish at most, nothing O(r^2) or O(r * long_len)
    ref = _call(dense_global_local_attention, tensors, kw)
    for a, d in zip(out, ref):
        assert (a - d).abs().max().item() <= TOL


# ----------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------


def test_wrong_mask_shape_names_the_argument():
    tensors, kw, _, _ = _make_inputs(0, 2, 2, 6, 2, 1)
    bad = dict(kw, l2l_mask=torch.ones(2, 6, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"l2l_mask: expected shape \[2, 6, 3\], got \[2, 6, 5\]"):
        _call(global_local_attention, tensors, bad)
    with pytest.raises(ValueError, match="g2l_mask"):
        _call(global_local_attention, tensors, dict(kw, g2l_mask=torch.ones(2, 6, 2, dtype=torch.bool)))
    with pytest.raises(ValueError, match="l2g_rel"):
        _call(global_local_attention, tensors, dict(kw, l2g_rel=torch.zeros(2, 6, 3, dtype=torch.long)))
    with pytest.raises(ValueError, match="l2g_mask.*torch.bool"):
        _call(global_local_attention, tensors, dict(kw, l2g_mask=torch.ones(2, 6, 2)))
    with pytest.raises(ValueError, match="local_radius"):
        _call(global_local_attention, tensors, dict(kw, local_radius=-1))
    with pytest.raises(ValueError, match="long_rel_emb|rel_emb"):
        _call(dense_global_local_attention, dict(tensors, long_rel_emb=torch.zeros(5, 3, 3)), kw)
    with pytest.raises(ValueError, match="global_v"):
        _call(global_local_attention, dict(tensors, global_v=tensors["global_v"][:, :, :1]), kw)


# ----------------------------------------------------------------------------
# chunked kernel: chunk layout, several chunks, the plain-autograd 3-block version
# ----------------------------------------------------------------------------

from etc_fairseq.attention import autograd_global_local_attention  # noqa: E402
from etc_fairseq.attention.blocked import band_to_windows  # noqa: E402


def test_band_to_windows_exact_r1_chunk2():
    # long_len 3, r = 1, chunk 2: chunk 0 = queries 0,1 with window keys -1..2 (columns 0..3),
    # chunk 1 = query 2 (+1 padded row) with window keys 1..4
    band = torch.tensor([[[1, 2, 3], [4, 5, 6], [7, 8, 9]]])
    out = band_to_windows(band, 1, 2, fill=0)
    expected = torch.tensor([[
        [[1, 2, 3, 0], [0, 4, 5, 6]],
        [[7, 8, 9, 0], [0, 0, 0, 0]],
    ]])
    assert out.shape == (1, 2, 2, 4)
    assert torch.equal(out, expected)
    # fill value outside the band (e.g. the "masked" code)
    out9 = band_to_windows(band.to(torch.uint8), 1, 2, fill=99)
    assert out9.dtype == torch.uint8 and out9[0, 0, 0, 3] == 99 and out9[0, 1, 1].tolist() == [99] * 4


@pytest.mark.parametrize("r,chunk,long_len", [(0, 1, 4), (2, 3, 10), (3, 1, 7), (1, 5, 5), (4, 2, 9)])
def test_band_to_windows_matches_loop(r, chunk, long_len):
    gen = torch.Generator().manual_seed(r * 10 + chunk)
    band = torch.randint(1, 100, (2, long_len, 2 * r + 1), generator=gen)
    out = band_to_windows(band, r, chunk, fill=-1)
    n_chunks = -(-long_len // chunk)
    assert out.shape == (2, n_chunks, chunk, chunk + 2 * r)
    expected = torch.full_like(out, -1)
    for i in range(long_len):
        c, p = divmod(i, chunk)
        for w in range(2 * r + 1):
            expected[:, c, p, p + w] = band[:, i, w]  # key i + w - r = window column p + w
    assert torch.equal(out, expected)


@pytest.mark.parametrize("long_chunk,global_chunk", [(1, 1), (2, 3), (5, 2), (7, 100)])
@pytest.mark.parametrize("seed", [0, 1])
def test_several_chunks_match_dense(long_chunk, global_chunk, seed):
    B, H, L, G, r = 2, 2, 17, 5, 3
    tensors, kw, empty_long, empty_global = _make_inputs(seed, B, H, L, G, r)
    t = tensors
    lo = long_query_attention(
        t["long_q"], t["long_k"], t["long_v"], t["global_k"], t["global_v"], local_radius=r,
        l2l_mask=kw["l2l_mask"], l2g_mask=kw["l2g_mask"], l2l_rel=kw["l2l_rel"], l2g_rel=kw["l2g_rel"],
        rel_emb=t["long_rel_emb"], chunk=long_chunk,
    )
    go = global_query_attention(
        t["global_q"], t["global_k"], t["global_v"], t["long_k"], t["long_v"],
        g2g_mask=kw["g2g_mask"], g2l_mask=kw["g2l_mask"], g2g_rel=kw["g2g_rel"], g2l_rel=kw["g2l_rel"],
        rel_emb=t["global_rel_emb"], chunk=global_chunk,
    )
    dense = _call(dense_global_local_attention, tensors, kw)
    assert _maxdiff(lo, dense[0]) <= TOL and _maxdiff(go, dense[1]) <= TOL
    assert torch.all(lo.permute(0, 2, 1, 3)[empty_long] == 0)
    gen = torch.Generator().manual_seed(7 + seed)
    grad_out = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in dense]
    inputs = list(tensors.values())
    for name, a, d in zip(tensors, _grads([lo, go], inputs, grad_out), _grads(dense, inputs, grad_out)):
        assert torch.isfinite(a).all() and _maxdiff(a, d) <= TOL, name


@pytest.mark.parametrize("batch,heads,long_len,global_len,radius,with_rel", CONFIGS[:6])
def test_autograd_blocked_reference_matches_dense(batch, heads, long_len, global_len, radius, with_rel):
    tensors, kw, _, _ = _make_inputs(3, batch, heads, long_len, global_len, radius, with_rel=with_rel)
    old = _call(autograd_global_local_attention, tensors, kw)
    dense = _call(dense_global_local_attention, tensors, kw)
    for a, d in zip(old, dense):
        assert a.shape == d.shape and _maxdiff(a, d) <= TOL
    go = [torch.ones_like(o) for o in dense]
    for name, a, d in zip(tensors, _grads(old, list(tensors.values()), go),
                          _grads(dense, list(tensors.values()), go)):
        assert _maxdiff(a, d) <= TOL, name


def test_dropout_gradient_uses_the_same_mask():
    # The backward pass recomputes the probabilities; it must reuse the forward's dropout mask.
    # For fixed (dropped) probabilities the output is linear in the values, so the gradient w.r.t.
    # the values must predict exactly how the output moves when the values move (same seed = same
    # mask); a different mask in backward would break the identity.
    tensors, kw, _, _ = _make_inputs(11, 1, 2, 12, 3, 2, with_rel=True)
    t = tensors

    def run(long_v, global_v):
        torch.manual_seed(3)
        return long_query_attention(
            t["long_q"], t["long_k"], long_v, t["global_k"], global_v, local_radius=2,
            l2l_mask=kw["l2l_mask"], l2g_mask=kw["l2g_mask"], l2l_rel=kw["l2l_rel"], l2g_rel=kw["l2g_rel"],
            rel_emb=t["long_rel_emb"], dropout_p=0.4, chunk=5,
        )

    out = run(t["long_v"], t["global_v"])
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    gv, ggv = torch.autograd.grad((out * w).sum(), [t["long_v"], t["global_v"]])
    dv = torch.randn(t["long_v"].shape, generator=gen, dtype=out.dtype)
    dgv = torch.randn(t["global_v"].shape, generator=gen, dtype=out.dtype)
    with torch.no_grad():
        moved = run(t["long_v"] + dv, t["global_v"] + dgv)
        no_drop = long_query_attention(
            t["long_q"], t["long_k"], t["long_v"], t["global_k"], t["global_v"], local_radius=2,
            l2l_mask=kw["l2l_mask"], l2g_mask=kw["l2g_mask"], l2l_rel=kw["l2l_rel"], l2g_rel=kw["l2g_rel"],
            rel_emb=t["long_rel_emb"], chunk=5,
        )
    predicted = (gv * dv).sum() + (ggv * dgv).sum()
    actual = ((moved - out) * w).sum()
    assert abs(predicted.item() - actual.item()) <= 1e-9
    assert not torch.allclose(out, no_drop)  # dropout did change the output


def test_pair_codes_exact():
    from etc_fairseq.attention.blocked import pair_codes

    mask = torch.tensor([[[True, False, True]]])
    labels = torch.tensor([[[2, 1, 0]]])
    # 3 labels: allowed pairs keep their label, masked pairs get 3 + 1 = 4
    assert pair_codes(mask, labels, 3, True).tolist() == [[[2, 4, 0]]]
    # no relative term: allowed pairs point at the zero column (id = num_labels)
    assert pair_codes(mask, labels, 3, False).tolist() == [[[3, 4, 3]]]
    assert pair_codes(mask, None, 0, False).tolist() == [[[0, 1, 0]]]
    assert pair_codes(mask, labels, 3, True).dtype == torch.uint8
    assert pair_codes(mask, labels, 300, True).dtype == torch.int32


def test_effective_band_exact():
    """The band both blocked kernels start from: cut to radius min(r, long_len - 1), slots outside the
    sequence masked off, label ids only cut."""
    from etc_fairseq.attention.common import effective_band

    # long_len 2, r 2 -> r_eff 1: keep slots 1..3 of 5; row 0's slot 0 (key -1) and row 1's slot 2 (key 2) go
    mask = torch.ones(1, 2, 5, dtype=torch.bool)
    rel = torch.arange(10).view(1, 2, 5)
    r_eff, band, cut = effective_band(mask, rel, 2)
    assert r_eff == 1
    assert band.tolist() == [[[False, True, True], [True, True, False]]]
    assert cut.tolist() == [[[1, 2, 3], [6, 7, 8]]]
    # a radius that fits keeps every slot; the caller's False entries stay False; no labels stay None
    mask = torch.tensor([[[True, False, True], [True, True, True], [True, True, True]]])
    r_eff, band, cut = effective_band(mask, None, 1)
    assert r_eff == 1 and cut is None
    assert band.tolist() == [[[False, False, True], [True, True, True], [True, True, False]]]


def test_implementation_switch_gives_the_same_results(monkeypatch):
    import etc_fairseq.attention.global_local as global_local

    tensors, kw, _, _ = _make_inputs(21, 2, 2, 13, 3, 2)
    chunked = _call(global_local_attention, tensors, kw)
    monkeypatch.setattr(global_local, "IMPLEMENTATION", "autograd")
    old = _call(global_local_attention, tensors, kw)
    for a, b in zip(chunked, old):
        assert _maxdiff(a, b) <= TOL


def test_check_local_radius():
    """One rule for the radius, used by every validator: a whole number >= 0, never a bool."""
    from etc_fairseq.attention.common import GlobalLocalStructure, check_local_radius, validate_long_query_inputs

    assert check_local_radius(3) == 3 and check_local_radius(0) == 0 and check_local_radius(2.0) == 2
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=r"local_radius: expected an int >= 0, got"):
            check_local_radius(bad)
    # both validators that take a radius check it before anything else (the tensors are never looked at)
    with pytest.raises(ValueError, match="local_radius"):
        validate_long_query_inputs(*[None] * 5, -1, *[None] * 5)
    with pytest.raises(ValueError, match="local_radius"):
        GlobalLocalStructure(None, None, None, None, 1.5).validate()
