"""Property-based tests (hypothesis) of build_structure and the blocked global-local attention.

Random packings (several examples per row, each with its own long and global lengths, then padding),
random segment/parent/context/link ids, radii, label vocabularies and extra random masks (so that fully
masked rows occur). Properties:

- no piece of :func:`build_structure` lets a token attend across packed examples or to/from padding;
- the blocked kernel equals the dense reference in float64, outputs and gradients;
- nothing is NaN/inf, also for rows with every key masked.

Inputs are CONSTRUCTED (random); example counts are modest so the file runs in seconds."""
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etc_fairseq.attention import dense_global_local_attention, global_local_attention
from etc_fairseq.structure.builders import build_structure
from etc_fairseq.structure.labels import RelativeLabelVocab

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@dataclass
class Packed:
    """One batch of packed examples. Tensors: int64 ``[B, L]`` / ``[B, G]`` (``-1`` = padding example)."""

    long_example: torch.Tensor
    global_example: torch.Tensor
    long_segment: torch.Tensor
    global_parent: torch.Tensor
    long_context: torch.Tensor
    global_context: torch.Tensor
    long_links: torch.Tensor


@st.composite
def packings(draw):
    B = draw(st.integers(1, 2))
    rows = []
    for _ in range(B):
        n_ex = draw(st.integers(1, 3))
        rows.append([(draw(st.integers(1, 9)), draw(st.integers(1, 3))) for _ in range(n_ex)])
    L = max(sum(l for l, _ in r) for r in rows) + draw(st.integers(0, 3))
    G = max(sum(g for _, g in r) for r in rows) + draw(st.integers(0, 2))
    K = 2
    t = lambda shape, fill: torch.full(shape, fill, dtype=torch.long)  # noqa: E731
    p = Packed(t((B, L), -1), t((B, G), -1), t((B, L), -1), t((B, G), -1), t((B, L), 0), t((B, G), 0),
               t((B, L, K), -1))
    for b, row in enumerate(rows):
        li = gi = 0
        for e, (ln, gn) in enumerate(row):
            gs = list(range(gi, gi + gn))
            p.global_example[b, gi:gi + gn] = e
            for h in gs:
                # parent: -1 or an earlier global token of the same example (acyclic)
                earlier = [x for x in gs if x < h]
                p.global_parent[b, h] = draw(st.sampled_from([-1] + earlier))
                p.global_context[b, h] = draw(st.integers(0, 1))
            for i in range(li, li + ln):
                p.long_example[b, i] = e
                p.long_segment[b, i] = draw(st.sampled_from([-1] + gs))
                p.long_context[b, i] = draw(st.integers(0, 1))
                p.long_links[b, i, 0] = draw(st.sampled_from([-1] + gs))
            li += ln
            gi += gn
    return p


def build(p: Packed, radius: int, vocab: RelativeLabelVocab, hard: bool):
    long_pad, global_pad = p.long_example.lt(0), p.global_example.lt(0)
    return build_structure(
        long_padding_mask=long_pad, global_padding_mask=global_pad, vocab=vocab, local_radius=radius,
        long_segment=p.long_segment, global_parent=p.global_parent, long_context=p.long_context,
        global_context=p.global_context, long_example=p.long_example.clamp(min=0),
        global_example=p.global_example.clamp(min=0), long_links=p.long_links, hard_g2l=hard, hard_l2g=hard,
    )


def l2l_keys(L: int, r: int) -> torch.Tensor:
    """int64 ``[L, 2r+1]``: key index of each band slot (may be out of range)."""
    return torch.arange(L)[:, None] + torch.arange(2 * r + 1)[None, :] - r


@SETTINGS
@given(p=packings(), radius=st.integers(0, 5), k=st.integers(0, 3), hard=st.booleans())
def test_no_attention_across_examples_or_padding(p, radius, k, hard):
    s = build(p, radius, RelativeLabelVocab(k), hard)
    le, ge = p.long_example, p.global_example  # -1 = padding
    B, L = le.shape
    keys = l2l_keys(L, radius)
    valid = (keys >= 0) & (keys < L)
    key_ex = torch.where(valid, le[:, keys.clamp(0, L - 1)], torch.full_like(keys, -2).expand(B, -1, -1))
    same = (le[:, :, None] == key_ex) & (le[:, :, None] >= 0)
    assert not (s.l2l_mask & ~same).any()
    assert not (s.l2g_mask & ~((le[:, :, None] == ge[:, None, :]) & (le[:, :, None] >= 0))).any()
    assert not (s.g2l_mask & ~((ge[:, :, None] == le[:, None, :]) & (ge[:, :, None] >= 0))).any()
    assert not (s.g2g_mask & ~((ge[:, :, None] == ge[:, None, :]) & (ge[:, :, None] >= 0))).any()
    # and tokens of one example do see each other: every real long token sees itself (slot r)
    assert torch.equal(s.l2l_mask[:, :, radius], le >= 0)
    for m, rel in ((s.l2l_mask, s.l2l_rel), (s.l2g_mask, s.l2g_rel), (s.g2g_mask, s.g2g_rel), (s.g2l_mask, s.g2l_rel)):
        assert not rel[~m].any()  # labels are 0 where masked
        assert rel.min() >= 0 and rel.max() < RelativeLabelVocab(k).size


@SETTINGS
@given(p=packings(), radius=st.integers(0, 5), heads=st.integers(1, 2), dim=st.integers(1, 4),
       drop_fraction=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**16), use_rel=st.booleans())
def test_blocked_equals_dense_and_is_finite(p, radius, heads, dim, drop_fraction, seed, use_rel):
    vocab = RelativeLabelVocab(2)
    s = build(p, radius, vocab, hard=False)
    g = torch.Generator().manual_seed(seed)
    B, L = p.long_example.shape
    G = p.global_example.size(1)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    def keep(m):  # extra random masking; drop_fraction 1.0 masks every key of every row
        return m & (torch.rand(m.shape, generator=g) >= drop_fraction)

    masks = dict(l2l_mask=keep(s.l2l_mask), l2g_mask=keep(s.l2g_mask), g2g_mask=keep(s.g2g_mask),
                 g2l_mask=keep(s.g2l_mask))
    ins = [rnd(B, heads, n, dim) for n in (L, L, L, G, G, G)]
    rel = {}
    if use_rel:
        rel = dict(l2l_rel=s.l2l_rel, l2g_rel=s.l2g_rel, g2g_rel=s.g2g_rel, g2l_rel=s.g2l_rel,
                   long_rel_emb=rnd(vocab.size, heads, dim), global_rel_emb=rnd(vocab.size, heads, dim))
    leaves = ins + ([rel["long_rel_emb"], rel["global_rel_emb"]] if use_rel else [])

    outs, grads = [], []
    for fn in (global_local_attention, dense_global_local_attention):
        lo, go = fn(*ins, local_radius=radius, **masks, **rel)
        assert lo.dtype == torch.float64 and torch.isfinite(lo).all() and torch.isfinite(go).all()
        w = torch.linspace(-1, 1, lo.numel() + go.numel(), dtype=torch.float64)
        loss = (torch.cat([lo.reshape(-1), go.reshape(-1)]) * w).sum()
        gr = torch.autograd.grad(loss, leaves, allow_unused=True)
        gr = [torch.zeros_like(x) if d is None else d for x, d in zip(leaves, gr)]
        assert all(torch.isfinite(d).all() for d in gr)
        outs.append((lo, go))
        grads.append(gr)
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-10, atol=1e-10)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    if drop_fraction == 1.0:
        # no key allowed anywhere: rows attend to nothing and give zeros (not NaN from 0/0)
        assert not outs[0][0].any() and not outs[0][1].any()
