"""The FlexAttention path (etc_fairseq.attention.flex, etc_fairseq.structure.flex_plan): its forward equals the
dense reference / the blocked kernel on CPU in float32 (torch has no CPU backward for flex attention) on every
structure, at lengths that are and are not multiples of the 128-position block; the plan's BlockMask equals
what ``create_block_mask`` computes from the same ``mask_mod`` on the full grid; a whole-model
``torch.compile(fullgraph=True)`` has no graph break and compiles once per shape; and a compiled forward at
more than 65,536 long tokens (index arithmetic past 2^31) equals the blocked kernel (``--run-slow``)."""
import pytest
import torch
import torch.nn.functional as F

from etc_fairseq.attention import dense_global_local_attention, flex_global_local_attention
from etc_fairseq.attention.flex import BLOCK_SIZE, attention_backend, flex_available
from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig, LMHead
from etc_fairseq.structure.builders import dense_structure, segment_ids_from_lengths, structure_ids
from etc_fairseq.structure.flex_plan import flex_plan
from etc_fairseq.structure.labels import RelativeLabelVocab
from test_structure import _random_structure

pytestmark = [pytest.mark.skipif(not flex_available(), reason="this torch has no flex_attention"),
              pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")]

TOL = 1e-5
NAMES = ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")


def _inputs(seed, B, H, L, G, r, D=8, N=5, density=0.7, with_rel=True, bias=False, split=False):
    gen = torch.Generator().manual_seed(seed)
    t = {n: torch.randn(B, H, L if n.startswith("long") else G, D, generator=gen) for n in NAMES}
    kw = dict(
        local_radius=r,
        l2l_mask=torch.rand(B, L, 2 * r + 1, generator=gen) < density,
        l2g_mask=torch.rand(B, L, G, generator=gen) < density,
        g2g_mask=torch.rand(B, G, G, generator=gen) < density,
        g2l_mask=torch.rand(B, G, L, generator=gen) < density,
    )
    kw["l2l_mask"][0, 0] = False  # a long row with no local key ...
    kw["l2g_mask"][0, 0] = False  # ... and no global key: output must be 0
    if G:
        kw["g2g_mask"][-1, -1] = False  # a global row with nothing allowed
        kw["g2l_mask"][-1, -1] = False
    if with_rel:
        kw.update(
            l2l_rel=torch.randint(0, N, (B, L, 2 * r + 1), generator=gen),
            l2g_rel=torch.randint(0, N, (B, L, G), generator=gen),
            g2g_rel=torch.randint(0, N, (B, G, G), generator=gen),
            g2l_rel=torch.randint(0, N, (B, G, L), generator=gen),
        )
        t["long_rel_emb"] = torch.randn(N, H, D, generator=gen)
        t["global_rel_emb"] = torch.randn(N, H, D, generator=gen)
        if bias:
            t["long_rel_bias"] = torch.randn(N, H, generator=gen)
            t["global_rel_bias"] = torch.randn(N, H, generator=gen)
    if split:  # l2g and g2l with their own keys/values: the joint layout holds both sides' keys
        t["l2g_kv"] = (torch.randn(B, H, G, D, generator=gen), torch.randn(B, H, G, D, generator=gen))
        t["g2l_kv"] = (torch.randn(B, H, L, D, generator=gen), torch.randn(B, H, L, D, generator=gen))
    return t, kw


def _run(fn, t, kw):
    rest = {k: v for k, v in t.items() if k not in NAMES}
    return fn(*[t[n] for n in NAMES], **rest, **kw)


def _maxdiff(a, b):
    assert a.shape == b.shape
    return (a - b).abs().max().item() if a.numel() else 0.0


# long_len 200 and 37 are not multiples of 128 (padded), 256 is; global 0: one fully masked block
@pytest.mark.parametrize("B,H,L,G,r,with_rel,bias,split", [
    (2, 2, 200, 6, 5, True, False, False), (1, 3, 37, 4, 3, True, True, True), (2, 2, 50, 3, 2, False, False, False),
    (1, 2, 256, 130, 7, True, True, False), (2, 1, 40, 0, 3, True, False, True), (1, 2, 20, 3, 40, True, False, False),
])
def test_flex_forward_matches_dense_fp32(B, H, L, G, r, with_rel, bias, split):
    t, kw = _inputs(0, B, H, L, G, r, with_rel=with_rel, bias=bias, split=split)
    with torch.no_grad():
        flex = _run(flex_global_local_attention, t, kw)
        dense = _run(dense_global_local_attention, t, kw)
    for a, d in zip(flex, dense):
        assert _maxdiff(a, d) < TOL
    assert torch.all(flex[0][0, :, 0] == 0)  # the long row with nothing allowed
    if G:
        assert torch.all(flex[1][-1, :, -1] == 0)


def test_flex_relative_term_on_some_pieces_only():
    t, kw = _inputs(1, 1, 2, 40, 3, 2)
    kw["l2g_rel"] = None
    kw["g2g_rel"] = None
    t["global_rel_emb"] = None  # the global side has labels on g2l but no table: no relative term there
    with torch.no_grad():
        for a, d in zip(_run(flex_global_local_attention, t, kw), _run(dense_global_local_attention, t, kw)):
            assert _maxdiff(a, d) < TOL


def test_flex_halves_match_dense():
    from etc_fairseq.attention import global_query_attention, long_query_attention

    t, kw = _inputs(2, 2, 2, 60, 5, 4, bias=True)
    long_kw = {k: kw[k] for k in ("local_radius", "l2l_mask", "l2g_mask", "l2l_rel", "l2g_rel")}
    global_kw = {k: kw[k] for k in ("g2g_mask", "g2l_mask", "g2g_rel", "g2l_rel")}
    with torch.no_grad():
        for impl_kw in ({"impl": "flex"}, {"impl": "dense"}):
            out = (long_query_attention(t["long_q"], t["long_k"], t["long_v"], t["global_k"], t["global_v"],
                                        rel_emb=t["long_rel_emb"], rel_bias=t["long_rel_bias"], **long_kw, **impl_kw),
                   global_query_attention(t["global_q"], t["global_k"], t["global_v"], t["long_k"], t["long_v"],
                                          rel_emb=t["global_rel_emb"], rel_bias=t["global_rel_bias"], **global_kw,
                                          **impl_kw))
            if impl_kw["impl"] == "flex":
                flex = out
    for a, d in zip(flex, out):
        assert _maxdiff(a, d) < TOL


def test_backend_choice_and_dropout(caplog):
    """"auto" is FlexAttention on CUDA (where it is compiled and fused) and the blocked kernel on CPU; the flex
    path applies no attention dropout (it has none): the encoder says so once, the function refuses it."""
    assert attention_backend(torch.device("cpu")) == "blocked"
    assert attention_backend(torch.device("cuda")) == "flex"
    t, kw = _inputs(2, 1, 1, 10, 2, 1)
    with pytest.raises(ValueError, match="dropout"):
        _run(flex_global_local_attention, t, dict(kw, dropout_p=0.1))
    cfg = EtcEncoderConfig(encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=16, encoder_attention_heads=2,
                           local_radius=2, attention_backend="flex")
    enc = EtcEncoder(cfg, 20, 1, 0).train()
    import etc_fairseq.encoder.model as model_module

    model_module._logged.clear()  # said once per process: make this test's call the first
    assert enc.backend == "flex" and enc.attention_impl(torch.device("cpu")) == "flex"
    assert "attention_dropout=0.1 is not applied: FlexAttention has no attention dropout" in caplog.text
    with pytest.raises(ValueError, match="attention_backend='fast': expected one of"):
        EtcEncoderConfig(attention_backend="fast")


# ---------------------------------------------------------------------------------------------------------
# the plan: its BlockMask is the one create_block_mask computes on the full grid
# ---------------------------------------------------------------------------------------------------------


def _random_ids(seed, B, L, G, K=2, r=3, hard_g2l=False, hard_l2g=False):
    gen = torch.Generator().manual_seed(seed)
    return structure_ids(vocab=RelativeLabelVocab(2), local_radius=r, hard_g2l=hard_g2l, hard_l2g=hard_l2g,
                         **_random_structure(gen, B, L, G, K))


@pytest.mark.parametrize("split", [False, True])
def test_plan_block_mask_equals_create_block_mask(split):
    from torch.nn.attention.flex_attention import create_block_mask

    ids = _random_ids(3, 2, 300, 9, r=200)
    # the second row: every long token real, one example, one context: its band tiles are "full"
    ids.long_valid[1], ids.long_example[1], ids.long_context[1] = True, 0, 0
    plan = flex_plan(ids, split_kv=split)
    lay = plan.layout
    assert (lay.long_pad, lay.global_pad) == (384, 128) and plan.full.any() and plan.partial.any()
    for sides in (("global", "long"), ("global",), ("long",)):
        ours = plan.block_mask(sides)
        q0, nq = lay.side_rows(sides)
        k0, nk = lay.side_keys(sides)
        ref = create_block_mask(lambda b, h, q, kv: plan.mask_mod(b, h, q + q0, kv + k0), lay.batch, None, nq, nk,
                                device="cpu", BLOCK_SIZE=BLOCK_SIZE)
        assert torch.equal(ours.to_dense(), ref.to_dense()), sides
        assert torch.equal(ours.full_kv_num_blocks, ref.full_kv_num_blocks), sides
        assert torch.equal(ours.kv_num_blocks, ref.kv_num_blocks), sides


# ---------------------------------------------------------------------------------------------------------
# the encoder: one plan per batch from the compact ids, equal to the blocked kernel on every structure
# ---------------------------------------------------------------------------------------------------------


def _encoder(seed, **cfg):
    torch.manual_seed(seed)
    base = dict(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=48, encoder_attention_heads=4,
                local_radius=5, relative_pos_max_distance=3, dropout=0.0, attention_dropout=0.0, relative_bias=True)
    enc = EtcEncoder(EtcEncoderConfig(**{**base, **cfg}), 50, 1, 3).eval()
    for layer in enc.layers:  # official-style bias tables, non-zero
        for table in layer.self_attn.rel_bias.values():
            torch.nn.init.normal_(table)
    return enc


def _encoder_inputs(seed, B, L, G, K=2):
    gen = torch.Generator().manual_seed(seed)
    ids = _random_structure(gen, B, L, G, K)
    long_pad, global_pad = ids.pop("long_padding_mask"), ids.pop("global_padding_mask")
    tokens = torch.randint(4, 50, (B, L), generator=gen).masked_fill(long_pad, 1)
    global_tokens = torch.randint(4, 50, (B, G), generator=gen).masked_fill(global_pad, 1)
    return tokens, global_tokens, torch.zeros_like(global_tokens), ids


def _both(enc, *inputs, **kw):
    with torch.no_grad():
        enc.backend = "blocked"
        ref = enc(*inputs, **kw)
        enc.backend = "flex"
        got = enc(*inputs, **kw)
    return ref, got


@pytest.mark.parametrize("L,G,cfg", [
    (200, 9, {}), (256, 12, {"hard_g2l": True}), (140, 7, {"hard_l2g": True, "shared_kv": True, "shared_q": True}),
    (90, 5, {"shared_kv_per_side": True, "pre_layer_norm": True, "local_radius": 130}),
])
def test_encoder_flex_equals_blocked_on_random_structures(L, G, cfg):
    """Padding (left, right, inside), forests of global tokens, contexts, packed examples, links, per-token hard
    g2l, the hard g2l/l2g switches, shared (one projection of the joint sequence) / per-side / per-piece
    query and key projections, radius beyond a block."""
    enc = _encoder(L, **cfg)
    ref, got = _both(enc, *_encoder_inputs(L, 2, L, G))
    assert got.long_features.shape == ref.long_features.shape == (2, L, 32)
    assert got.global_features.shape == ref.global_features.shape == (2, G, 32)
    real_long, real_global = ~ref.long_padding_mask, ~ref.global_padding_mask
    assert _maxdiff(got.long_features[real_long], ref.long_features[real_long]) < TOL
    assert _maxdiff(got.global_features[real_global], ref.global_features[real_global]) < TOL
    from etc_fairseq.attention.flex import FlexPlan
    assert isinstance(got.structure, FlexPlan) and got.structure.layout.split_kv == (not cfg.get("shared_kv"))


def test_encoder_flex_fixed_blocks_one_side_and_given_structure():
    enc = _encoder(7)
    tokens = torch.randint(4, 50, (2, 300))
    tokens[1, 260:] = 1
    ref, got = _both(enc, tokens, return_all_hiddens=True)  # fixed-block global tokens, 300 = not a block multiple
    assert _maxdiff(got.long_features, ref.long_features) < TOL
    assert all(_maxdiff(a, b) < TOL for ga, ra in zip(got.inner_states, ref.inner_states) for a, b in zip(ga, ra))
    # a built structure given as is (e.g. official ETC's masks): its plan reads the dense masks
    _, gt, gty, ids = _encoder_inputs(8, 2, 150, 6)
    built = dense_structure(structure_ids(long_padding_mask=torch.zeros(2, 150, dtype=torch.bool),
                                          global_padding_mask=gt.eq(1), vocab=enc.label_vocab, local_radius=5,
                                          **{k: v for k, v in ids.items() if k.startswith("global_") or k == "long_example"}))
    ref, got = _both(enc, torch.randint(4, 50, (2, 150)), gt, gty, built)
    assert _maxdiff(got.long_features, ref.long_features) < TOL
    # the last layer keeps one side only (WikiHop keeps the global tokens, NQ the long ones)
    for side in ("global", "long"):
        enc = _encoder(9, encoder_layers=1)
        enc.keep_final_outputs([side])
        ref, got = _both(enc, *_encoder_inputs(9, 2, 180, 8))
        keep = ref.global_features if side == "global" else ref.long_features
        mine = got.global_features if side == "global" else got.long_features
        other = got.long_features if side == "global" else got.global_features
        assert other is None and _maxdiff(mine, keep) < TOL


def test_layer_flex_backend_matches_blocked_on_a_built_structure():
    # an EtcLayer with separate projections per piece, on a CONSTRUCTED sentence structure built by
    # build_structure: backend "flex" (a plan of the given masks) == backend "blocked", forward, eval mode
    from etc_fairseq.encoder import EtcLayer
    from etc_fairseq.structure.builders import build_structure

    torch.manual_seed(0)
    vocab = RelativeLabelVocab(3)
    cfg = EtcEncoderConfig(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
                           dropout=0.0, attention_dropout=0.0, relative_bias=True)
    layer = EtcLayer(cfg, vocab.size).eval()
    for table in layer.self_attn.rel_bias.values():
        torch.nn.init.normal_(table)
    L, G = 45, 5
    long_pad = torch.zeros(1, L, dtype=torch.bool)
    long_pad[0, 40:] = True
    segment = torch.full((1, L), -1)
    segment[0, :40] = segment_ids_from_lengths([9, 7, 12, 5, 7])
    structure = build_structure(long_padding_mask=long_pad, global_padding_mask=torch.zeros(1, G, dtype=torch.bool),
                                vocab=vocab, local_radius=4, long_segment=segment)
    x_long, x_global = torch.randn(1, L, 32), torch.randn(1, G, 32)
    with torch.no_grad():
        ref = layer(x_long, x_global, structure, "blocked")
        got = layer(x_long, x_global, structure, "flex")
    for a, b in zip(got, ref):
        assert _maxdiff(a, b) < TOL


# ---------------------------------------------------------------------------------------------------------
# torch.compile: one graph, no graph break, one compilation per shape
# ---------------------------------------------------------------------------------------------------------


def test_compile_fullgraph_one_graph_per_shape():
    """etc_base's layers (768 wide, 12 heads of 64, r = 84, separate projections per piece; 2 of its 12 layers:
    the property is per layer, and the GPU suite compiles all 12) with the flex path, forward + MLM loss, through
    ``torch.compile(fullgraph=True)``: no graph break (fullgraph raises on one), ONE compilation for 5 batches of
    different content (padding, masked positions) at one shape, one more for a new length. Counted with
    dynamo's CompileCounter backend and its counters (no code generation: the counts are dynamo's)."""
    from torch._dynamo.testing import CompileCounter
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    enc = EtcEncoder(EtcEncoderConfig.preset("etc_base", encoder_layers=2, dropout=0.0, attention_dropout=0.0),
                     1000, 1, 0)
    enc.backend = "flex"
    head = LMHead(768, enc.embed_tokens.weight, "gelu")

    def step(tokens, targets):
        logits = head(enc(tokens).long_features)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def batch(seed, L=100):
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.randint(4, 1000, (1, L), generator=gen)
        tokens[0, L - 10 - 7 * seed:] = 1  # a different amount of padding in every batch
        targets = torch.where(torch.rand(1, L, generator=gen) < 0.15, tokens, torch.full_like(tokens, -100))
        return tokens, targets

    torch._dynamo.reset()
    counters.clear()
    cnt = CompileCounter()
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend=cnt)
    with torch.no_grad():  # CPU flex attention has no backward
        tokens, targets = batch(0)
        assert torch.allclose(compiled(tokens, targets), step(tokens, targets), atol=1e-5)
        for seed in range(1, 5):
            compiled(*batch(seed))
        assert cnt.frame_count == 1 and not counters["graph_break"]
        compiled(*batch(9, L=200))  # a new padded length (256 instead of 128)
    assert cnt.frame_count == 2 and not counters["graph_break"]
    torch._dynamo.reset()


def test_compiled_flex_serves_many_lengths():
    """The module's compiled ``flex_attention`` (what the GPU path calls outside ``torch.compile``) at more
    padded lengths than dynamo's recompile limit (lowered from 8 to 2 here, so that 4 lengths show it): at most
    two compilations (the first shape, then one with symbolic lengths), every result equal to the dense
    reference. Compiled per shape, the length past the limit would fall back to flex attention's unfused
    reference (the full score matrix in memory)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=2):
        for i, L in enumerate(range(100, 100 + 4 * BLOCK_SIZE, BLOCK_SIZE)):
            t, kw = _inputs(i, 1, 2, L, 6, 4, bias=True)
            with torch.no_grad():
                got = _run(lambda *a, **k: flex_global_local_attention(*a, **k, compile=True), t, kw)
                ref = _run(dense_global_local_attention, t, kw)
            assert max(_maxdiff(g, r) for g, r in zip(got, ref)) < TOL, L
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
    assert counters["frames"]["total"] == counters["frames"]["ok"], dict(counters["unimplemented"])  # no fallback
    torch._dynamo.reset()


def test_pair_code_table_packs_mask_and_label():
    """One code per pair: the label where allowed, -1 where not; NO_LABEL where the piece has no labels."""
    from etc_fairseq.attention.flex import NO_LABEL, pair_code_table

    mask = torch.tensor([[[True, False, True], [False, True, True]]])
    labels = torch.tensor([[[3, 4, 0], [1, 2, 5]]])
    assert pair_code_table(mask, labels).tolist() == [[[3, -1, 0], [-1, 2, 5]]]
    assert pair_code_table(mask, None).tolist() == [[[NO_LABEL, -1, NO_LABEL], [-1, NO_LABEL, NO_LABEL]]]
    assert pair_code_table(mask, labels).dtype == torch.int32


def test_kernel_options_reach_every_call_and_bad_ones_fail_in_one_line(monkeypatch):
    """``set_flex_kernel_options`` (or ``ETC_FLEX_KERNEL_OPTIONS``) is passed to flex attention as its
    ``kernel_options`` (the tile sizes and pipeline stages a GPU needs; the result is the same); a value
    that is not a JSON object is a ConfigError naming the variable."""
    import etc_fairseq.attention.flex as flex_module
    from etc_fairseq.errors import ConfigError

    seen = []
    real = flex_module.flex_attention

    def recording(*args, **kwargs):
        seen.append(kwargs.get("kernel_options"))
        return real(*args, **kwargs)

    monkeypatch.setattr(flex_module, "flex_attention", recording)
    t, kw = _inputs(0, 1, 2, 150, 6, 4)
    ref = _run(dense_global_local_attention, t, kw)
    def from_env(value):  # what importing the module with this environment gives
        monkeypatch.setenv(flex_module.KERNEL_OPTIONS_ENV, value)
        options, error = flex_module._options_from_env()
        monkeypatch.setattr(flex_module, "_kernel_options", options)
        monkeypatch.setattr(flex_module, "_kernel_options_error", error)

    try:
        from_env('{"num_stages": 1, "BLOCK_M": 64}')
        with torch.no_grad():
            got = _run(lambda *a, **k: flex_global_local_attention(*a, **k, compile=False), t, kw)
        assert seen and all(o == {"num_stages": 1, "BLOCK_M": 64} for o in seen)
        assert max(_maxdiff(g, r) for g, r in zip(got, ref)) < TOL
        for bad in ("{bad", "[1, 2]"):
            from_env(bad)
            with pytest.raises(ConfigError, match="ETC_FLEX_KERNEL_OPTIONS.*JSON object"):
                flex_module.flex_kernel_options()
    finally:
        flex_module.set_flex_kernel_options(None)


@pytest.mark.slow
def test_compiled_forward_past_65536_long_tokens_equals_blocked():
    """A compiled (inductor) CPU forward at 70,000 long tokens, 2 packed examples, fixed-block global tokens:
    every table read inside the kernel is at an int64 offset (``b * L * ...`` and the relative table's
    ``((b * H + h) * S + q) * labels`` pass 2^31 only at larger batches; the layout's own indices pass 65,536),
    and the result equals the blocked kernel. Tiny width, 1 layer, 2 heads. Minutes of compilation on one CPU
    core: opt-in (``pytest --run-slow``)."""
    torch.manual_seed(0)
    enc = EtcEncoder(EtcEncoderConfig(encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=16,
                                      encoder_attention_heads=2, local_radius=8, fixed_block_len=512, dropout=0.0,
                                      attention_dropout=0.0, relative_bias=True), 50, 1, 3).eval()
    torch.nn.init.normal_(enc.layers[0].self_attn.rel_bias["long"])
    L = 70_000
    tokens = torch.randint(4, 50, (1, L))
    tokens[0, L - 77:] = 1
    long_example = (torch.arange(L) >= 40_000).long().unsqueeze(0)
    global_len = -(-L // 512)
    structure = {"long_example": long_example,
                 "global_example": (torch.arange(global_len) * 512 >= 40_000).long().unsqueeze(0)}
    with torch.no_grad():
        enc.backend = "blocked"
        ref = enc(tokens, structure=structure)
        enc.backend = "flex"
        torch._dynamo.reset()
        got = torch.compile(enc, fullgraph=True, dynamic=False)(tokens, structure=structure)
    assert got.long_features.shape == (1, L, 16)
    diffs = _maxdiff(got.long_features, ref.long_features), _maxdiff(got.global_features, ref.global_features)
    print(f"max |compiled flex - blocked| at {L} long tokens: long {diffs[0]:.2e}, global {diffs[1]:.2e}")
    assert max(diffs) < TOL
