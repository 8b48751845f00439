"""Every variable of an official ETC checkpoint (Google's TensorFlow ``EtcModel``) and what it is.

The names below are those ``tf.compat.v1.train.Saver`` gives the official model's variables (the released
checkpoints and ``tests/fixtures/official/`` use them); ``S = etc_document_bert`` is the model's scope,
``T = S/global_local_transformer_layers``, ``A = T/fused_att_layer_{i}/fused_global_local_att``, ``i`` the layer.
H = hidden_size, E = embedding_size (H when unset), N = num_attention_heads, d = att_size_per_head
(H / N when unset), I = intermediate_size, V = relative_vocab_size.

Dense kernels are stored ``[in, out]`` (``y = x @ kernel + bias``; a ``torch.nn.Linear`` weight is the
transpose). Attention projections produce ``N * d`` features, head-major: output feature ``h * d + j`` is
dimension ``j`` of head ``h``.

Embeddings (long and global tokens share the token and segment tables):

=====================================================  =============  ============================================
``S/token_emb_lookup/embedding_table``                  [vocab, E]     token embeddings (long and global tokens)
``S/token_emb_lookup/projection/{kernel,bias}``         [E, H], [H]    only when E != H: projects token
                                                                       embeddings up to H (ALBERT style)
``S/segment_emb_lookup/embedding_table``                [segvocab, H]  segment embeddings, added on both sides
                                                                       (official default ids: long 1, global 0)
``position_emb_lookup_long/embedding_table``            [P, H]         only when max_absolute_position_embeddings
``position_emb_lookup_global/embedding_table``          [P, H]         = P > 0: absolute positions, one table per
                                                                       side; created at construction, outside
                                                                       the ``S/`` scope, hence no prefix
``S/long_emb_layer_norm/{gamma,beta}``                  [H]            long-side embedding LayerNorm (eps 1e-12)
``S/global_emb_layer_norm/{gamma,beta}``                [H]            global-side embedding LayerNorm
=====================================================  =============  ============================================

Attention, per layer ``i`` (queries, keys and values per attention piece l2l, l2g, g2g, g2l; long queries
serve l2l and l2g in one softmax, global queries g2g and g2l in another):

=====================================================  =============  ============================================
``A/long_query_projection/linear/{kernel,bias}``        [H, N*d]       long queries (l2l and l2g); with
                                                                       share_qkv_projections: all four pieces
``A/global_query_projection/linear/...``                [H, N*d]       global queries (g2g and g2l); absent with
                                                                       share_qkv_projections
``A/l2l_key_projection/linear/...``,                    [H, N*d]       keys / values of long tokens seen by long
``A/l2l_value_projection/linear/...``                                  queries; with share_qkv_projections used
                                                                       by all four pieces, with
                                                                       share_kv_projections also by l2g
``A/l2g_key_projection``, ``A/l2g_value_projection``    [H, N*d]       global tokens seen by long queries; absent
                                                                       when sharing qkv or kv
``A/g2g_key_projection``, ``A/g2g_value_projection``    [H, N*d]       global tokens seen by global queries; with
                                                                       share_kv_projections also g2l; absent
                                                                       with share_qkv_projections
``A/g2l_key_projection``, ``A/g2l_value_projection``    [H, N*d]       long tokens seen by global queries; absent
                                                                       when sharing qkv or kv
``A/long_output_projection/{kernel,bias}``              [N*d, H]       long attention output; with
                                                                       share_att_output_projection also global
``A/global_output_projection/{kernel,bias}``            [N*d, H]       global attention output; absent with
                                                                       share_att_output_projection
``A/long_qkv_attention/qkv_relative_attention/``        [V, N, d]      long attention (l2l + l2g) relative-label
``relative_emb_table``                                                 key embeddings: score += q . table[label]
``A/long_qkv_attention/qkv_relative_attention/``        [V, N]         long attention per-label, per-head score
``relative_bias_table``                                                bias (added before the 1/sqrt(d) scaling)
``A/global_qkv_attention/relative_emb_table``           [V, N, d]      the same for the global attention (g2g +
``A/global_qkv_attention/relative_bias_table``          [V, N]         g2l); never shared with the long tables
``T/fused_att_layer_{i}/layer_norm_0/{gamma,beta}``     [H]            long-side attention residual LayerNorm
``T/fused_att_layer_{i}/layer_norm_1/{gamma,beta}``     [H]            global-side attention residual LayerNorm
=====================================================  =============  ============================================

The relative tables exist only when relative_vocab_size is set (not null). Relative labels: 0 the token
itself, 1..D a key k positions to the right (clipped at D = relative_pos_max_distance), D+1..2D a key to
the left, then 2D+1 "long token not in this global token's sentence" and 2D+2 "in it" (l2g/g2l), and one
more id used by the official multi-hop converters for g2g across contexts.

Feed-forward, per layer ``i`` (a residual block: LayerNorm(x + fc2(gelu(fc1(x)))) in post-LayerNorm
order, x + fc2(gelu(fc1(LayerNorm(x)))) with use_pre_activation_order):

=====================================================  =============  ============================================
``T/feed_forward_layer_{i}/dense_layers/layer_0/...``   [H, I], [I]    fc1 (gelu, tanh approximation, after it)
``T/feed_forward_layer_{i}/dense_layers/layer_1/...``   [I, H], [H]    fc2
``T/feed_forward_layer_{i}/layer_norm/{gamma,beta}``    [H]            its LayerNorm; with
                                                                       share_feed_forward_params (the default)
                                                                       this one block, LayerNorm included,
                                                                       serves both the long and global sides
``T/long_feed_forward_layer_{i}/...``,                  as above       without share_feed_forward_params: one
``T/global_feed_forward_layer_{i}/...``                                block per side, same inner names
=====================================================  =============  ============================================

There is no final LayerNorm after the last layer, also with use_pre_activation_order (the official outputs
are then the un-normalised residual stream), and no pooler. LayerNorm epsilon is 1e-12 everywhere.
Optimizer slots (``.../adam_m``, ``.../adam_v``) and ``global_step`` can also appear in training
checkpoints; :func:`official_variables` lists the model's own variables only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Tuple

__all__ = ["OFFICIAL_CONFIG_DEFAULTS", "OFFICIAL_SCOPE", "OfficialVariable", "official_variables", "official_variable_shapes", "with_official_defaults"]

OFFICIAL_SCOPE = "etc_document_bert"

# The official EtcConfig fields and their defaults (vocab_size has none and must be given).
OFFICIAL_CONFIG_DEFAULTS: Dict[str, Any] = {
    "segment_vocab_size": 16,
    "embedding_size": None,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "local_radius": 84,
    "att_size_per_head": None,
    "relative_pos_max_distance": 12,
    "relative_vocab_size": 32,
    "max_absolute_position_embeddings": 0,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
    "share_feed_forward_params": True,
    "share_kv_projections": False,
    "share_qkv_projections": True,
    "share_att_output_projection": False,
    "use_pre_activation_order": False,
    "use_hard_g2l_mask": False,
    "use_hard_l2g_mask": False,
    "grad_checkpointing_period": 0,
}


@dataclass(frozen=True)
class OfficialVariable:
    """One official variable: its shape for a given config and what it is in ETC terms."""

    name: str
    shape: Tuple[int, ...]
    meaning: str


def with_official_defaults(config: Mapping[str, Any]) -> Dict[str, Any]:
    """``config`` (an ``etc_config.json`` dict) with every missing official field at its default.

    Raises:
        ValueError: ``vocab_size`` missing.
    """
    if config.get("vocab_size") is None:
        raise ValueError("official ETC config: vocab_size is required")
    full = dict(OFFICIAL_CONFIG_DEFAULTS)
    full.update(config)
    return full


def official_variables(config: Mapping[str, Any]) -> Dict[str, OfficialVariable]:
    """The variables an official ``EtcModel`` with ``config`` holds, by checkpoint name (see the module doc)."""
    c = with_official_defaults(config)
    h, n, inter = c["hidden_size"], c["num_attention_heads"], c["intermediate_size"]
    e = c["embedding_size"] or h
    d = c["att_size_per_head"] or h // n
    v = c["relative_vocab_size"]
    share_qkv, share_kv = c["share_qkv_projections"], c["share_kv_projections"]
    out: Dict[str, OfficialVariable] = {}

    def add(name: str, shape: Tuple[int, ...], meaning: str) -> None:
        out[name] = OfficialVariable(name, tuple(shape), meaning)

    def dense(scope: str, n_in: int, n_out: int, meaning: str) -> None:
        add(f"{scope}/kernel", (n_in, n_out), f"{meaning} kernel [in, out]")
        add(f"{scope}/bias", (n_out,), f"{meaning} bias")

    def layer_norm(scope: str, meaning: str) -> None:
        add(f"{scope}/gamma", (h,), f"{meaning} LayerNorm scale")
        add(f"{scope}/beta", (h,), f"{meaning} LayerNorm shift")

    s = OFFICIAL_SCOPE
    add(f"{s}/token_emb_lookup/embedding_table", (c["vocab_size"], e), "token embeddings (long and global)")
    if e != h:
        dense(f"{s}/token_emb_lookup/projection", e, h, "token embedding projection E -> H")
    add(f"{s}/segment_emb_lookup/embedding_table", (c["segment_vocab_size"], h), "segment embeddings (long and global)")
    if c["max_absolute_position_embeddings"]:
        p = c["max_absolute_position_embeddings"]
        add("position_emb_lookup_long/embedding_table", (p, h), "long absolute position embeddings")
        add("position_emb_lookup_global/embedding_table", (p, h), "global absolute position embeddings")
    layer_norm(f"{s}/long_emb_layer_norm", "long embedding")
    layer_norm(f"{s}/global_emb_layer_norm", "global embedding")

    t = f"{s}/global_local_transformer_layers"
    for i in range(c["num_hidden_layers"]):
        a = f"{t}/fused_att_layer_{i}/fused_global_local_att"
        projections = {"long_query": "long queries" + (" (all pieces)" if share_qkv else "")}
        projections["l2l_key"] = "l2l keys" + (" (all pieces)" if share_qkv else " (and l2g)" if share_kv else "")
        projections["l2l_value"] = "l2l values" + (" (all pieces)" if share_qkv else " (and l2g)" if share_kv else "")
        if not share_qkv:
            projections["global_query"] = "global queries"
            projections["g2g_key"] = "g2g keys" + (" (and g2l)" if share_kv else "")
            projections["g2g_value"] = "g2g values" + (" (and g2l)" if share_kv else "")
            if not share_kv:
                projections.update(l2g_key="l2g keys", l2g_value="l2g values", g2l_key="g2l keys", g2l_value="g2l values")
        for piece, meaning in projections.items():
            dense(f"{a}/{piece}_projection/linear", h, n * d, f"layer {i} {meaning} projection")
        dense(f"{a}/long_output_projection", n * d, h, f"layer {i} long attention output" + (" (and global)" if c["share_att_output_projection"] else ""))
        if not c["share_att_output_projection"]:
            dense(f"{a}/global_output_projection", n * d, h, f"layer {i} global attention output")
        if v is not None:
            for side, scope in (("long", f"{a}/long_qkv_attention/qkv_relative_attention"), ("global", f"{a}/global_qkv_attention")):
                add(f"{scope}/relative_emb_table", (v, n, d), f"layer {i} {side} attention relative-label key embeddings")
                add(f"{scope}/relative_bias_table", (v, n), f"layer {i} {side} attention relative-label score bias")
        layer_norm(f"{t}/fused_att_layer_{i}/layer_norm_0", f"layer {i} long attention residual")
        layer_norm(f"{t}/fused_att_layer_{i}/layer_norm_1", f"layer {i} global attention residual")
        blocks = ["feed_forward"] if c["share_feed_forward_params"] else ["long_feed_forward", "global_feed_forward"]
        for block in blocks:
            f = f"{t}/{block}_layer_{i}"
            side = "shared long+global" if block == "feed_forward" else block.split("_")[0]
            dense(f"{f}/dense_layers/layer_0", h, inter, f"layer {i} {side} feed-forward fc1")
            dense(f"{f}/dense_layers/layer_1", inter, h, f"layer {i} {side} feed-forward fc2")
            layer_norm(f"{f}/layer_norm", f"layer {i} {side} feed-forward residual")
    return out


def official_variable_shapes(config: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """``{checkpoint name: shape}`` of every variable an official ``EtcModel`` with ``config`` holds."""
    return {name: var.shape for name, var in official_variables(config).items()}
