"""The FlexAttention path (etc_fairseq.attention.flex): forward equal to the dense reference on CPU in
float32 (torch has no CPU backward for flex attention), and the automatic backend choice."""
import pytest
import torch

from etc_fairseq.attention import dense_global_local_attention, flex_global_local_attention
from etc_fairseq.attention.flex import attention_backend, flex_available

pytestmark = pytest.mark.skipif(not flex_available(), reason="this torch has no flex_attention")


def _inputs(seed, B, H, L, G, r, D=8, N=5, density=0.7, with_rel=True):
    gen = torch.Generator().manual_seed(seed)
    t = {n: torch.randn(B, H, L if n.startswith("long") else G, D, generator=gen)
         for n in ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")}
    kw = dict(
        local_radius=r,
        l2l_mask=torch.rand(B, L, 2 * r + 1, generator=gen) < density,
        l2g_mask=torch.rand(B, L, G, generator=gen) < density,
        g2g_mask=torch.rand(B, G, G, generator=gen) < density,
        g2l_mask=torch.rand(B, G, L, generator=gen) < density,
    )
    kw["l2l_mask"][0, 0] = False  # a long row with no local key ...
    kw["l2g_mask"][0, 0] = False  # ... and no global key: output must be 0
    if with_rel:
        kw.update(
            l2l_rel=torch.randint(0, N, (B, L, 2 * r + 1), generator=gen),
            l2g_rel=torch.randint(0, N, (B, L, G), generator=gen),
            g2g_rel=torch.randint(0, N, (B, G, G), generator=gen),
            g2l_rel=torch.randint(0, N, (B, G, L), generator=gen),
        )
        t["long_rel_emb"] = torch.randn(N, H, D, generator=gen)
        t["global_rel_emb"] = torch.randn(N, H, D, generator=gen)
    return t, kw


def _run(fn, t, kw):
    names = ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")
    rest = {k: v for k, v in t.items() if k not in names}
    return fn(*[t[n] for n in names], **rest, **kw)


# long_len 200 > flex's 128-position blocks: several query/key blocks, some fully masked
@pytest.mark.parametrize("B,H,L,G,r,with_rel", [(2, 2, 200, 6, 5, True), (1, 3, 37, 4, 3, True),
                                                (2, 2, 50, 3, 2, False)])
def test_flex_forward_matches_dense_fp32(B, H, L, G, r, with_rel):
    t, kw = _inputs(0, B, H, L, G, r, with_rel=with_rel)
    with torch.no_grad():
        flex = _run(flex_global_local_attention, t, kw)
        dense = _run(dense_global_local_attention, t, kw)
    for a, d in zip(flex, dense):
        assert a.shape == d.shape
        assert (a - d).abs().max().item() < 1e-4
    assert torch.all(flex[0][0, :, 0] == 0)  # the row with nothing allowed


def test_flex_relative_term_on_some_pieces_only():
    t, kw = _inputs(1, 1, 2, 40, 3, 2)
    kw["l2g_rel"] = None
    kw["g2g_rel"] = None
    with torch.no_grad():
        for a, d in zip(_run(flex_global_local_attention, t, kw), _run(dense_global_local_attention, t, kw)):
            assert (a - d).abs().max().item() < 1e-4


def test_backend_choice():
    assert attention_backend(torch.device("cpu"), 0.0) == "blocked"
    assert attention_backend(torch.device("cuda"), 0.0) == "flex"
    assert attention_backend(torch.device("cuda"), 0.1) == "blocked"  # flex attention has no dropout
    t, kw = _inputs(2, 1, 1, 10, 2, 1)
    with pytest.raises(ValueError, match="dropout"):
        _run(flex_global_local_attention, t, dict(kw, dropout_p=0.1))


def test_layer_flex_backend_matches_blocked_on_a_built_structure():
    # an EtcLayer with separate projections per piece, on a CONSTRUCTED sentence structure built by
    # build_structure: backend "flex" (two flex calls) == backend "blocked", forward, eval mode
    from etc_fairseq.encoder import EtcEncoderConfig, EtcLayer
    from etc_fairseq.structure.builders import build_structure, segment_ids_from_lengths
    from etc_fairseq.structure.labels import RelativeLabelVocab

    torch.manual_seed(0)
    vocab = RelativeLabelVocab(3)
    cfg = EtcEncoderConfig(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
                           dropout=0.0, attention_dropout=0.0, relative_bias=True)
    layer = EtcLayer(cfg, vocab.size).eval()
    for table in layer.self_attn.rel_bias.values():  # official-style bias tables, non-zero
        torch.nn.init.normal_(table)
    L, G = 45, 5
    long_pad = torch.zeros(1, L, dtype=torch.bool)
    long_pad[0, 40:] = True
    global_pad = torch.zeros(1, G, dtype=torch.bool)
    segment = torch.full((1, L), -1)
    segment[0, :40] = segment_ids_from_lengths([9, 7, 12, 5, 7])
    structure = build_structure(long_padding_mask=long_pad, global_padding_mask=global_pad, vocab=vocab,
                                local_radius=4, long_segment=segment)
    x_long, x_global = torch.randn(1, L, 32), torch.randn(1, G, 32)
    with torch.no_grad():
        layer.self_attn.backend = "blocked"
        ref = layer(x_long, x_global, structure)
        layer.self_attn.backend = "flex"
        got = layer(x_long, x_global, structure)
    for a, b in zip(got, ref):
        assert (a - b).abs().max().item() < 1e-4
