"""The encoder options that reproduce Google's official ETC (etcmodel): each on exact small inputs.

relative bias table, official relative-id layout and table size, sharing modes, pre-LayerNorm order,
embedding projection, segment embeddings, per-side embedding LayerNorm and its epsilon, the tanh GELU,
and the -10000 masking of the official code (equal on every row with an allowed key)."""

import math

import pytest
import torch

from etc_fairseq.attention import (
    autograd_global_local_attention,
    dense_global_local_attention,
    flex_global_local_attention,
    global_local_attention,
)
from etc_fairseq.attention.flex import flex_available
from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig, EtcLayer
from etc_fairseq.encoder.layer import gelu_accurate, get_activation_fn
from etc_fairseq.structure import OFFICIAL_STRUCTURE_LABELS, RelativeLabelVocab, build_structure
from etc_fairseq.structure.global_tokens import GlobalTokenType

F64 = torch.float64


# ----------------------------------------------------------------------------- relative bias table
def test_relative_bias_hand_computed():
    # one head, head_dim 1, long_len 2, radius 1, no global keys: query 0 sees keys 0 and 1 with
    # labels 0 and 1; score = (q*k + q*e_label + bias_label) / sqrt(1)
    q = torch.tensor([2.0], dtype=F64).view(1, 1, 1, 1).expand(1, 1, 2, 1).clone()
    k = torch.tensor([0.5, -1.0], dtype=F64).view(1, 1, 2, 1)
    v = torch.tensor([3.0, 7.0], dtype=F64).view(1, 1, 2, 1)
    e = torch.tensor([0.25, 1.5], dtype=F64).view(2, 1, 1)
    bias = torch.tensor([0.75, -2.0], dtype=F64).view(2, 1)
    empty = torch.zeros(1, 1, 0, 1, dtype=F64)
    l2l_mask = torch.tensor([[[False, True, True], [True, True, False]]])
    l2l_rel = torch.tensor([[[0, 0, 1], [0, 0, 0]]])
    kw = dict(local_radius=1, l2l_mask=l2l_mask, l2g_mask=torch.zeros(1, 2, 0, dtype=torch.bool),
              g2g_mask=torch.zeros(1, 0, 0, dtype=torch.bool), g2l_mask=torch.zeros(1, 0, 2, dtype=torch.bool),
              l2l_rel=l2l_rel)
    s0 = 2 * 0.5 + 2 * 0.25 + 0.75  # key 0, label 0
    s1 = 2 * -1.0 + 2 * 1.5 - 2.0  # key 1, label 1
    expected = (math.exp(s0) * 3 + math.exp(s1) * 7) / (math.exp(s0) + math.exp(s1))
    for fn in (global_local_attention, dense_global_local_attention, autograd_global_local_attention):
        long_out, _ = fn(q, k, v, empty, empty, empty, long_rel_emb=e, global_rel_emb=e,
                         long_rel_bias=bias, global_rel_bias=bias, **kw)
        assert abs(long_out[0, 0, 0, 0].item() - expected) < 1e-12, fn.__name__


def _random_inputs(seed, B=2, H=2, L=11, G=3, r=2, D=3, N=6):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(True)

    t = dict(long_q=rand(B, H, L, D), long_k=rand(B, H, L, D), long_v=rand(B, H, L, D),
             global_q=rand(B, H, G, D), global_k=rand(B, H, G, D), global_v=rand(B, H, G, D),
             long_rel_emb=rand(N, H, D), global_rel_emb=rand(N, H, D),
             long_rel_bias=rand(N, H), global_rel_bias=rand(N, H))
    kw = dict(local_radius=r, l2l_mask=torch.rand(B, L, 2 * r + 1, generator=g) < 0.7,
              l2g_mask=torch.rand(B, L, G, generator=g) < 0.7, g2g_mask=torch.rand(B, G, G, generator=g) < 0.7,
              g2l_mask=torch.rand(B, G, L, generator=g) < 0.7,
              l2l_rel=torch.randint(0, N, (B, L, 2 * r + 1), generator=g),
              l2g_rel=torch.randint(0, N, (B, L, G), generator=g),
              g2g_rel=torch.randint(0, N, (B, G, G), generator=g),
              g2l_rel=torch.randint(0, N, (B, G, L), generator=g))
    return t, kw


def _run(fn, t, kw, **extra):
    names = ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")
    rest = {k: v for k, v in t.items() if k not in names}
    return fn(*[t[n] for n in names], **rest, **kw, **extra)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relative_bias_kernels_match_dense_with_exact_gradients_fp64(seed):
    t, kw = _random_inputs(seed)
    ref = _run(dense_global_local_attention, t, kw)
    gen = torch.Generator().manual_seed(50 + seed)
    grad_out = [torch.randn(o.shape, generator=gen, dtype=F64) for o in ref]
    inputs = list(t.values())
    g_ref = torch.autograd.grad(ref, inputs, grad_out, allow_unused=True, materialize_grads=True)
    assert g_ref[-1].abs().sum() > 0 and g_ref[-2].abs().sum() > 0  # the bias tables get gradients
    for fn in (global_local_attention, autograd_global_local_attention):
        out = _run(fn, t, kw)
        for a, b in zip(out, ref):
            assert (a - b).abs().max().item() < 1e-12, fn.__name__
        grads = torch.autograd.grad(out, inputs, grad_out, allow_unused=True, materialize_grads=True)
        for name, ga, gb in zip(t, grads, g_ref):
            assert (ga - gb).abs().max().item() < 1e-12, (fn.__name__, name)


def test_relative_bias_blocked_kernel_gradcheck():
    t, kw = _random_inputs(3, B=1, H=2, L=7, G=2, r=1, D=2, N=4)
    names = list(t)

    def f(*xs):
        return _run(global_local_attention, dict(zip(names, xs)), kw)

    assert torch.autograd.gradcheck(f, tuple(t.values()), eps=1e-6, atol=1e-8)


def test_relative_bias_zero_equals_no_bias_and_bias_needs_the_table():
    t, kw = _random_inputs(4)
    zero = dict(t, long_rel_bias=torch.zeros_like(t["long_rel_bias"]),
                global_rel_bias=torch.zeros_like(t["global_rel_bias"]))
    none = dict(t, long_rel_bias=None, global_rel_bias=None)
    for a, b in zip(_run(global_local_attention, zero, kw), _run(global_local_attention, none, kw)):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="long_rel_bias: a relative bias table needs long_rel_emb"):
        _run(global_local_attention, dict(t, long_rel_emb=None), kw)
    with pytest.raises(ValueError, match=r"global_rel_bias: expected shape \[6, 2\]"):
        _run(global_local_attention, dict(t, global_rel_bias=t["global_rel_bias"][:5]), kw)


@pytest.mark.skipif(not flex_available(), reason="this torch has no flex_attention")
def test_relative_bias_flex_forward_matches_dense():
    t, kw = _random_inputs(5)
    t = {k: v.detach().float() for k, v in t.items()}
    with torch.no_grad():
        for a, b in zip(_run(flex_global_local_attention, t, kw), _run(dense_global_local_attention, t, kw)):
            assert (a - b).abs().max().item() < 1e-5


# ----------------------------------------------------------------------------- relative-id layout
def test_official_relative_id_layout():
    vocab = RelativeLabelVocab(3, OFFICIAL_STRUCTURE_LABELS)
    # official RelativePositionGenerator(3): row 1 of a length-6 sequence, and a radius-5 local row
    assert vocab.position_ids(torch.arange(6) - 1).tolist() == [4, 0, 1, 2, 3, 3]
    assert vocab.position_ids(torch.arange(-5, 6)).tolist() == [6, 6, 6, 5, 4, 0, 1, 2, 3, 3, 3]
    assert [vocab.label(n) for n in ("not_belongs", "belongs", "other_context")] == [7, 8, 9]
    # official side inputs with D=1: l2g id 3 = "not", 4 = "belongs"
    v1 = RelativeLabelVocab(1, OFFICIAL_STRUCTURE_LABELS)
    s = build_structure(long_padding_mask=torch.zeros(1, 4, dtype=torch.bool),
                        global_padding_mask=torch.zeros(1, 2, dtype=torch.bool), vocab=v1, local_radius=2,
                        long_segment=torch.tensor([[0, 0, 1, 1]]))
    assert s.l2g_rel.tolist() == [[[4, 3], [4, 3], [3, 4], [3, 4]]]
    assert s.g2l_rel.tolist() == [[[4, 4, 3, 3], [3, 3, 4, 4]]]
    one = build_structure(long_padding_mask=torch.zeros(1, 5, dtype=torch.bool),
                          global_padding_mask=torch.zeros(1, 1, dtype=torch.bool), vocab=v1, local_radius=2,
                          long_segment=torch.zeros(1, 5, dtype=torch.long))
    assert one.l2l_rel[0, 2].tolist() == [2, 2, 0, 1, 1]  # official local ids, D=1, r=2


def test_official_relative_table_size_is_representable():
    cfg = dict(encoder_layers=1, encoder_embed_dim=8, encoder_ffn_embed_dim=16, encoder_attention_heads=2,
               relative_pos_max_distance=12, relative_structure_labels=",".join(OFFICIAL_STRUCTURE_LABELS))
    enc = EtcEncoder(EtcEncoderConfig(relative_vocab_size=32, relative_bias=True, **cfg), 10, 1, 0)
    attn = enc.layers[0].self_attn
    assert {k: tuple(p.shape) for k, p in attn.rel_emb.items()} == {"long": (32, 2, 4), "global": (32, 2, 4)}
    assert {k: tuple(p.shape) for k, p in attn.rel_bias.items()} == {"long": (32, 2), "global": (32, 2)}
    assert enc.label_vocab.label("belongs") == 26  # 2D+2, as in the official table
    with pytest.raises(ValueError, match="relative_vocab_size=29 is smaller than the 30 relative labels"):
        EtcEncoder(EtcEncoderConfig(relative_vocab_size=29, **cfg), 10, 1, 0)


# ----------------------------------------------------------------------------- sharing modes
def _layer_cfg(**kw):
    base = dict(encoder_embed_dim=8, encoder_ffn_embed_dim=16, encoder_attention_heads=2, dropout=0.0,
                attention_dropout=0.0)
    return EtcEncoderConfig(**dict(base, **kw))


def _layer_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = RelativeLabelVocab(2)
    s = build_structure(long_padding_mask=torch.tensor([[False] * 6 + [True]]),
                        global_padding_mask=torch.zeros(1, 2, dtype=torch.bool), vocab=vocab, local_radius=2,
                        long_segment=torch.tensor([[0, 0, 0, 1, 1, 1, -1]]))
    return vocab, torch.randn(1, 7, 8, generator=g), torch.randn(1, 2, 8, generator=g), s


def test_kv_per_query_side_equals_per_piece_with_tied_weights():
    vocab, xl, xg, s = _layer_inputs()
    torch.manual_seed(0)
    side = EtcLayer(_layer_cfg(shared_kv_per_side=True), vocab.size).eval()
    piece = EtcLayer(_layer_cfg(), vocab.size).eval()
    assert set(side.self_attn.k_proj) == {"long", "global"} and set(piece.self_attn.k_proj) == set(
        ("l2l", "l2g", "g2g", "g2l"))
    state = {}
    for k, v in side.state_dict().items():
        for proj in ("k_proj", "v_proj"):
            for s_name, pieces in (("long", ("l2l", "l2g")), ("global", ("g2g", "g2l"))):
                if f"self_attn.{proj}.{s_name}." in k:
                    for p in pieces:
                        state[k.replace(f".{s_name}.", f".{p}.")] = v
                    break
            else:
                continue
            break
        else:
            state[k] = v
    piece.load_state_dict(state)
    with torch.no_grad():
        for a, b in zip(side(xl, xg, s), piece(xl, xg, s)):
            assert torch.equal(a, b)
    n = sum(p.numel() for p in side.self_attn.k_proj.parameters())
    assert n == 2 * (8 * 8 + 8)  # two key projections per layer instead of four
    both = EtcLayer(_layer_cfg(shared_kv=True, shared_kv_per_side=True), vocab.size)
    assert set(both.self_attn.k_proj) == {"shared"}  # shared_kv wins, as official share_qkv does


def test_shared_output_projection_with_attention_layer_norm_per_side():
    vocab = RelativeLabelVocab(2)
    layer = EtcLayer(_layer_cfg(shared_out_proj=True, separate_attention_layer_norm=True), vocab.size)
    assert set(layer.self_attn.out_proj) == {"shared"} and set(layer.self_attn_layer_norm) == {"long", "global"}
    layer = EtcLayer(_layer_cfg(shared_out_proj=True), vocab.size)
    assert set(layer.self_attn_layer_norm) == {"shared"}


# ----------------------------------------------------------------------------- pre-LayerNorm order
def test_pre_layer_norm_order_exact():
    vocab, xl, xg, s = _layer_inputs(1)
    torch.manual_seed(0)
    layer = EtcLayer(_layer_cfg(pre_layer_norm=True, separate_ffn=True), vocab.size).eval()
    with torch.no_grad():
        for p in layer.parameters():  # LayerNorm weights away from 1/0 so that the order matters
            p.add_(0.1 * torch.randn_like(p))
        got = layer(xl, xg, s)
        ln = layer.self_attn_layer_norm
        al, ag = layer.self_attn(ln["long"](xl), ln["global"](xg), s)
        exp = []
        for side, x, a in (("long", xl, al), ("global", xg, ag)):
            x = x + a
            exp.append(x + layer.ffn[side](layer.final_layer_norm[side](x)))
        post = EtcLayer(_layer_cfg(separate_ffn=True), vocab.size).eval()
        post.load_state_dict(layer.state_dict())
        post_out = post(xl, xg, s)
    for a, b, c in zip(got, exp, post_out):
        assert torch.equal(a, b)
        assert not torch.allclose(a, c)


# ----------------------------------------------------------------------------- embeddings
def _encoder(**kw):
    cfg = EtcEncoderConfig(encoder_layers=1, encoder_embed_dim=8, encoder_ffn_embed_dim=16,
                           encoder_attention_heads=2, local_radius=2, relative_pos_max_distance=2, dropout=0.0,
                           attention_dropout=0.0, **kw)
    torch.manual_seed(0)
    return EtcEncoder(cfg, vocab_size=12, padding_idx=1, fixed_block_token_id=0).eval()


def _official_inputs():
    tokens = torch.tensor([[5, 6, 7, 8]])
    gtok = torch.tensor([[0, 0]])
    gtyp = torch.full((1, 2), int(GlobalTokenType.SENTENCE))
    return tokens, gtok, gtyp


def test_embedding_projection_segments_and_per_side_layer_norm_exact():
    enc = _encoder(embedding_size=4, segment_vocab_size=16, separate_embedding_layer_norm=True,
                   no_global_type_embeddings=True, layer_norm_eps=1e-12)
    assert tuple(enc.embed_tokens.weight.shape) == (12, 4)
    assert tuple(enc.embed_tokens_proj.weight.shape) == (8, 4)
    assert enc.embed_global_types is None
    with torch.no_grad():
        enc.layernorm_embedding_global.weight.fill_(2.0)
        tokens, gtok, gtyp = _official_inputs()
        xl, xg = enc.embed(tokens, gtok, gtyp)
        seg = enc.embed_segments.weight
        want_l = enc.embed_tokens_proj(enc.embed_tokens.weight[tokens]) + seg[1]  # long segment id 1
        want_g = enc.embed_tokens_proj(enc.embed_tokens.weight[gtok]) + seg[0]  # global segment id 0
        want_l = torch.nn.functional.layer_norm(want_l, (8,), enc.layernorm_embedding.weight,
                                                enc.layernorm_embedding.bias, 1e-12)
        want_g = torch.nn.functional.layer_norm(want_g, (8,), enc.layernorm_embedding_global.weight,
                                                enc.layernorm_embedding_global.bias, 1e-12)
        assert torch.equal(xl, want_l) and torch.equal(xg, want_g)
        # explicit segment ids pick other rows
        xl2, _ = enc.embed(tokens, gtok, gtyp, segment_ids=torch.tensor([[3, 3, 3, 3]]))
        assert not torch.allclose(xl2, xl)
    assert all(m.eps == 1e-12 for m in enc.modules() if isinstance(m, torch.nn.LayerNorm))


def test_lm_head_follows_a_narrow_embedding_table():
    from etc_fairseq.encoder import LMHead

    enc = _encoder(embedding_size=4)
    head = LMHead(8, enc.embed_tokens.weight, "gelu_accurate")
    out = head(torch.randn(1, 3, 8))
    assert out.shape == (1, 3, 12) and head.weight is enc.embed_tokens.weight


def test_segment_ids_without_a_segment_table_are_refused():
    enc = _encoder()
    tokens, gtok, gtyp = _official_inputs()
    with pytest.raises(ValueError, match="segment_vocab_size=0"):
        enc.embed(tokens, gtok, gtyp, segment_ids=torch.ones_like(tokens))
    with pytest.raises(ValueError, match="long_segment_id=16: expected 0 <= id < segment_vocab_size=16"):
        EtcEncoderConfig(segment_vocab_size=16, long_segment_id=16)


# ----------------------------------------------------------------------------- activation
def test_gelu_tanh_approximation_exact():
    x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], dtype=F64)
    want = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x.tolist()]
    got = get_activation_fn("gelu_accurate")(x)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), rtol=0, atol=1e-15)
    assert abs(gelu_accurate(torch.tensor(1.0, dtype=F64)).item() - 0.8411919906082768) < 1e-15
    # the exact (erf) GELU, computed in float32 as fairseq's: 0.5 * (1 + erf(1 / sqrt(2)))
    assert abs(get_activation_fn("gelu")(torch.tensor(1.0, dtype=F64)).item() - 0.8413447460685429) < 1e-7
    with pytest.raises(ValueError, match="activation_fn='gelu_tanh': expected one of"):
        EtcEncoderConfig(activation_fn="gelu_tanh")


# ----------------------------------------------------------------------------- masking
def test_minus_10000_masking_equals_ours_on_rows_with_an_allowed_key():
    # official: scores - 10000 * (1 - mask), then a plain softmax over all keys
    t, kw = _random_inputs(6, L=9, G=2, r=2)
    t = {k: v.detach() for k, v in t.items()}
    kw["l2l_mask"][0, 3] = False
    kw["l2g_mask"][0, 3] = False  # long row 3 has no allowed key
    ours = _run(dense_global_local_attention, t, kw)[0]
    ours_blocked = _run(global_local_attention, t, kw)[0]
    # dense -10000 version of the long half
    from etc_fairseq.attention.dense import band_to_full

    q, k, v = t["long_q"], torch.cat([t["long_k"], t["global_k"]], 2), torch.cat([t["long_v"], t["global_v"]], 2)
    full_mask = torch.cat([band_to_full(kw["l2l_mask"], 2, False), kw["l2g_mask"]], 2)  # [B, L, L+G]
    labels = torch.cat([band_to_full(kw["l2l_rel"], 2, 0), kw["l2g_rel"]], 2)
    rel = torch.einsum("bhid,nhd->bhin", q, t["long_rel_emb"]) + t["long_rel_bias"].t()[None, :, None, :]
    rel = torch.gather(rel, 3, labels.unsqueeze(1).expand(-1, q.shape[1], -1, -1))
    scores = (q @ k.transpose(-1, -2) + rel) / math.sqrt(q.shape[-1])
    scores = scores - 10000.0 * (1.0 - full_mask.unsqueeze(1).to(F64))
    official = torch.softmax(scores, -1) @ v
    live = full_mask.any(-1)  # [B, L]
    diff = (ours - official).abs().amax(dim=(1, 3))  # [B, L]
    assert diff[live].max().item() < 1e-12
    assert torch.equal(ours_blocked.permute(0, 2, 1, 3)[~live], torch.zeros_like(ours_blocked.permute(0, 2, 1, 3)[~live]))
    # the one observable difference: a row with nothing allowed is 0 here, an average there
    assert diff[0, 3] > 1e-3


def test_index_position_embeddings_one_table_per_side_exact():
    enc = _encoder(index_position_embeddings=6)
    tokens, gtok, gtyp = _official_inputs()
    base = _encoder()
    base.load_state_dict({k: v for k, v in enc.state_dict().items() if "index_positions" not in k})
    with torch.no_grad():
        xl, xg = enc.embed(tokens, gtok, gtyp)
        ln = enc.layernorm_embedding
        raw_l = enc.embed_tokens.weight[tokens] + enc.embed_long_index_positions.weight[:4]
        raw_g = (enc.embed_tokens.weight[gtok] + enc.embed_global_types.weight[gtyp]
                 + enc.embed_global_index_positions.weight[:2])
        assert torch.equal(xl, ln(raw_l)) and torch.equal(xg, ln(raw_g))
        assert not torch.allclose(xl, base.embed(tokens, gtok, gtyp)[0])
    with pytest.raises(ValueError, match="long input of length 7 exceeds index_position_embeddings=6"):
        enc.embed(torch.full((1, 7), 5), gtok, gtyp)


def test_lm_head_layer_norm_uses_the_encoder_epsilon():
    from etc_fairseq.models import config_for_arch
    from etc_fairseq.lift import placeholder_dictionary
    from etc_fairseq.models.lifting import build_etc_model

    model = build_etc_model(config_for_arch("etc_tiny", layer_norm_eps=1e-12), placeholder_dictionary(16))
    assert model.encoder.lm_head.layer_norm.eps == 1e-12
    assert build_etc_model(config_for_arch("etc_tiny"), placeholder_dictionary(16)).encoder.lm_head.layer_norm.eps == 1e-5
