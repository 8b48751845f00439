"""One ETC transformer layer: projections (shared or per side / per attention piece) -> global-local
attention -> residual + LayerNorm -> feed-forward -> residual + LayerNorm. Post-LayerNorm (BERT/RoBERTa
order, so RoBERTa weights can be lifted into it) by default; pre-LayerNorm with ``pre_layer_norm``.

Sharing switches (paper section 3.2 and appendix E; the parameter counts in the tests pin their meaning):

- ``shared_q``: one W^Q for both sides, else one for global queries (g2g, g2l) and one for long queries
  (l2g, l2l).
- ``shared_kv``: one W^K and one W^V for all four pieces; else ``shared_kv_per_side``: one per query
  side (l2l = l2g, g2g = g2l); else one per piece (l2l, l2g, g2g, g2l).
- ``shared_out_proj``: one output projection for both sides (and one post-attention LayerNorm, unless
  ``separate_attention_layer_norm``), else one per side.
- ``shared_ffn``: one feed-forward block (and its LayerNorm) for both sides, else one per side.
- ``shared_relative_embeddings``: one relative-label table (and bias table) for long and global queries.

Every switchable group is an ``nn.ModuleDict`` keyed by side ("long"/"global") or by piece
("l2l"/"l2g"/"g2g"/"g2l"), or holding the single key "shared"; lifting code copies into every entry.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from etc_fairseq.attention import GlobalLocalStructure
from etc_fairseq.errors import ConfigError
from etc_fairseq.attention.flex import (
    FlexPlan,
    attention_backend,
    flex_joint_attention,
    flex_plan_from_structure,
    relative_table,
)
from etc_fairseq.attention.global_local import implementation

from .config import ACTIVATIONS, EtcEncoderConfig

SIDES = ("long", "global")
PIECES = ("l2l", "l2g", "g2g", "g2l")
SHARED = "shared"
#: The query side of each attention piece.
QUERY_SIDE = {"l2l": "long", "l2g": "long", "g2g": "global", "g2l": "global"}
#: The pieces of each query side whose keys are (global tokens, long tokens).
KEY_PIECES = {"global": ("g2g", "g2l"), "long": ("l2g", "l2l")}
#: The query sides in FlexAttention's joint layout order (global rows first).
FLEX_SIDES = ("global", "long")


def gelu_accurate(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation (BERT's and official ETC's ``gelu``): float [...] -> float [...]."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU, computed in float32 for half-precision inputs: float [...] -> float [...]."""
    return F.gelu(x.float()).type_as(x)


def get_activation_fn(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation called ``name`` (one of :data:`~etc_fairseq.encoder.config.ACTIVATIONS`)."""
    table = {"relu": F.relu, "gelu": gelu, "gelu_accurate": gelu_accurate, "tanh": torch.tanh,
             "linear": lambda x: x, "swish": F.silu}
    if name not in table:
        raise ConfigError(f"activation {name!r}: expected one of {list(ACTIVATIONS)}")
    return table[name]


def switchable(keys: Sequence[str], shared: bool, factory: Callable[[], nn.Module]) -> nn.ModuleDict:
    """One module per key, or a single ``"shared"`` module when ``shared``."""
    return nn.ModuleDict({SHARED: factory()} if shared else {k: factory() for k in keys})


def pick(modules: nn.ModuleDict, key: str) -> nn.Module:
    """The module used for ``key`` (a side or piece name), whatever the sharing: the shared one, the
    key's own, or (for a piece in a per-side group) its query side's."""
    if SHARED in modules:
        return modules[SHARED]
    if key in modules:
        return modules[key]
    return modules[QUERY_SIDE[key]]


class EtcSelfAttention(nn.Module):
    """Q/K/V/output projections around :func:`etc_fairseq.attention.long_query_attention` and
    :func:`~etc_fairseq.attention.global_query_attention` (the two softmaxes of the paper)."""

    def __init__(self, cfg: EtcEncoderConfig, num_relative_labels: int):
        super().__init__()
        embed_dim, num_heads = cfg.encoder_embed_dim, cfg.encoder_attention_heads
        if embed_dim % num_heads != 0:
            raise ConfigError(
                f"encoder_embed_dim ({embed_dim}) must be divisible by encoder_attention_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.attention_dropout = cfg.attention_dropout
        #: the sides whose queries are computed (both unless :meth:`drop_side` removed one)
        self.outputs: Tuple[str, ...] = SIDES

        def linear() -> nn.Module:
            return nn.Linear(embed_dim, embed_dim)

        self.q_proj = switchable(SIDES, cfg.shared_q, linear)
        kv_keys = SIDES if cfg.shared_kv_per_side else PIECES
        self.k_proj = switchable(kv_keys, cfg.shared_kv, linear)
        self.v_proj = switchable(kv_keys, cfg.shared_kv, linear)
        self.out_proj = switchable(SIDES, cfg.shared_out_proj, linear)
        #: The attention when :meth:`forward` is given a built structure and no ``impl`` (a layer used on its
        #: own; :class:`~etc_fairseq.encoder.EtcEncoder` decides for its layers): "auto" (FlexAttention on
        #: CUDA, without attention dropout; the blocked kernel elsewhere), or any ``impl`` of
        #: :func:`etc_fairseq.attention.global_local_attention` ("blocked", "flex", ...).
        self.backend = "auto"
        # Relative-label key vectors a^K_l, one per label and head (paper eq. for e_ij): float
        # [num_labels, heads, head_dim]; optional per-label biases float [num_labels, heads] (official
        # ETC, zeros at start). A ParameterDict mirrors the ModuleDict sharing convention.
        rel_keys = (SHARED,) if cfg.shared_relative_embeddings else SIDES
        self.rel_emb = nn.ParameterDict(
            {
                k: nn.Parameter(torch.randn(num_relative_labels, num_heads, self.head_dim) * 0.02)
                for k in rel_keys
            }
        )
        self.rel_bias = (
            nn.ParameterDict({k: nn.Parameter(torch.zeros(num_relative_labels, num_heads)) for k in rel_keys})
            if cfg.relative_bias
            else None
        )

    def _rel(self, side: str, dtype: torch.dtype):
        """(label vectors float [num_labels, heads, head_dim], biases float [num_labels, heads] or None)
        of ``side``'s queries, cast to ``dtype`` (autocast: q is bf16/fp16)."""
        key = SHARED if SHARED in self.rel_emb else side
        bias = self.rel_bias[key].to(dtype) if self.rel_bias is not None else None
        return self.rel_emb[key].to(dtype), bias

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """float [batch, len, embed_dim] -> float [batch, heads, len, head_dim]."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """float [batch, heads, len, head_dim] -> float [batch, len, embed_dim]."""
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.embed_dim)

    def _project(self, proj: nn.ModuleDict, inputs: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Apply ``pick(proj, key)`` to ``inputs[key]`` for every key, computing each distinct
        (module, input) pair once (so shared K/V are projected once per side, not once per piece).

        inputs: key -> float [batch, len, embed_dim]; returns key -> float [batch, heads, len, head_dim].
        """
        cache: Dict[Tuple[int, int], torch.Tensor] = {}
        out = {}
        for key, x in inputs.items():
            module = pick(proj, key)
            ck = (id(module), id(x))
            if ck not in cache:
                cache[ck] = self._split_heads(module(x))
            out[key] = cache[ck]
        return out

    def drop_side(self, side: str) -> None:
        """Remove the modules only ``side``'s queries use (its Q and output projections, the K/V of its
        two pieces, its relative-label table); shared modules stay. :meth:`forward` then returns None for
        that side. See :meth:`EtcLayer.keep_outputs`."""
        self.outputs = tuple(x for x in self.outputs if x != side)
        for group in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            for key in [k for k in group if k == side or QUERY_SIDE.get(k) == side]:
                del group[key]
        for group in (self.rel_emb, self.rel_bias):
            if group is not None and side in group:
                del group[side]

    @property
    def split_kv(self) -> bool:
        """Whether the two query sides read different key/value projections (FlexAttention's joint
        layout then holds both sets: :class:`etc_fairseq.attention.flex.FlexLayout`); True with one side
        (its own key set either way)."""
        if len(self.outputs) < 2:
            return True
        return any(pick(proj, a) is not pick(proj, b) for proj in (self.k_proj, self.v_proj)
                   for a, b in (("g2g", "l2g"), ("g2l", "l2l")))

    def forward(
        self, x_long: torch.Tensor, x_global: torch.Tensor, structure: Union[GlobalLocalStructure, FlexPlan],
        impl: Optional[str] = None,
    ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """x_long: float [batch, long_len, embed_dim]; x_global: float [batch, global_len, embed_dim].

        ``structure``: a batch's :class:`~etc_fairseq.attention.flex.FlexPlan` (FlexAttention), or its
        built masks and labels, run by ``impl`` (default :attr:`backend`). Inputs are trusted (the encoder
        validates them once per batch).

        Returns the attention outputs after the output projections, same shapes as the inputs (None for
        a side not in :attr:`outputs`).
        """
        if isinstance(structure, FlexPlan):
            return self._flex_forward(x_long, x_global, structure)
        impl = impl or self.backend
        if impl == "auto":
            impl = attention_backend(x_long.device)
        if impl == "flex":  # a layer on its own: a plan of this call's masks
            return self._flex_forward(x_long, x_global, flex_plan_from_structure(structure, self.split_kv))
        p = self.attention_dropout if self.training else 0.0
        want_long, want_global = "long" in self.outputs, "global" in self.outputs
        q = self._project(self.q_proj, {k: x for k, x in (("long", x_long), ("global", x_global))
                                         if k in self.outputs})
        # Which side provides the keys/values of each piece: l2l and g2l attend to long tokens,
        # l2g and g2g to global tokens. Only the pieces of the computed query sides.
        kv_inputs = {k: x for k, x in (("l2l", x_long), ("g2l", x_long), ("l2g", x_global), ("g2g", x_global))
                     if QUERY_SIDE[k] in self.outputs}
        k = self._project(self.k_proj, kv_inputs)
        v = self._project(self.v_proj, kv_inputs)
        long_half, global_half, extra = implementation(impl)
        s = structure
        out_long = out_global = None
        if want_long:
            long_emb, long_bias = self._rel("long", q["long"].dtype)
            long_ctx = long_half(
                q["long"], k["l2l"], v["l2l"], k["l2g"], v["l2g"], local_radius=s.local_radius,
                l2l_mask=s.l2l_mask, l2g_mask=s.l2g_mask, l2l_rel=s.l2l_rel, l2g_rel=s.l2g_rel,
                rel_emb=long_emb, rel_bias=long_bias, dropout_p=p, **extra,
            )  # [batch, heads, long_len, head_dim]
            out_long = pick(self.out_proj, "long")(self._merge_heads(long_ctx))
        if want_global:
            global_emb, global_bias = self._rel("global", q["global"].dtype)
            global_ctx = global_half(
                q["global"], k["g2g"], v["g2g"], k["g2l"], v["g2l"],
                g2g_mask=s.g2g_mask, g2l_mask=s.g2l_mask, g2g_rel=s.g2g_rel, g2l_rel=s.g2l_rel,
                rel_emb=global_emb, rel_bias=global_bias, dropout_p=p, **extra,
            )  # [batch, heads, global_len, head_dim]
            out_global = pick(self.out_proj, "global")(self._merge_heads(global_ctx))
        return out_long, out_global

    def _flex_forward(
        self, x_long: torch.Tensor, x_global: torch.Tensor, plan: FlexPlan
    ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Both sides in ONE FlexAttention call (the joint layout of ``plan``; no attention dropout: flex
        attention has none); inputs as :meth:`forward`, padded here to the layout's lengths if they are
        shorter, outputs at the inputs' lengths."""
        lay = plan.layout
        sides = tuple(s for s in FLEX_SIDES if s in self.outputs)
        if len(sides) == 2 and lay.split_kv != self.split_kv:
            raise ValueError(f"the plan's split_kv={lay.split_kv} does not fit this layer's key/value "
                             f"projections (split_kv={self.split_kv})")
        lengths = {"global": x_global.shape[1], "long": x_long.shape[1]}
        x = {"global": pad_tokens(x_global, lay.global_pad), "long": pad_tokens(x_long, lay.long_pad)}
        key_sides = sides if lay.split_kv else sides[:1]  # one shared key set: any side's pieces
        pieces = [piece for s in key_sides for piece in KEY_PIECES[s]]
        shared = {pick(proj, p) for proj in (self.k_proj, self.v_proj) for p in pieces}
        x_joint = None
        if len(shared) == 2 or (len(sides) == 2 and pick(self.q_proj, "global") is pick(self.q_proj, "long")):
            # one projection reads both sides' tokens: project the joint sequence once, no output copies
            x_joint = torch.cat([x["global"], x["long"]], dim=1)  # [B, S, dim]
        if x_joint is not None and len(sides) == 2 and pick(self.q_proj, "global") is pick(self.q_proj, "long"):
            queries = self._split_heads(pick(self.q_proj, "global")(x_joint))  # [B, H, S, D]
            q = {"global": queries[:, :, :lay.global_pad], "long": queries[:, :, lay.global_pad:]}
        else:
            q = self._project(self.q_proj, {s: x[s] for s in sides})
            queries = torch.cat([q[s] for s in sides], dim=2)
        if len(shared) == 2:  # one key and one value projection for every piece
            keys = self._split_heads(pick(self.k_proj, pieces[0])(x_joint))  # [B, H, S, D]
            values = self._split_heads(pick(self.v_proj, pieces[0])(x_joint))
        else:  # per side or per piece: the sides' key sets laid end to end
            kv_inputs = {piece: x[token_side] for s in key_sides for piece, token_side in zip(KEY_PIECES[s], FLEX_SIDES)}
            k = self._project(self.k_proj, kv_inputs)
            v = self._project(self.v_proj, kv_inputs)
            keys = torch.cat([k[piece] for piece in pieces], dim=2)  # [B, H, keys, D]
            values = torch.cat([v[piece] for piece in pieces], dim=2)
        tables = [relative_table(q[s], *self._rel(s, q[s].dtype)) for s in sides]
        out = flex_joint_attention(plan, queries, keys, values, tables, sides)
        outs: Dict[str, torch.Tensor] = {}
        start = 0
        for s in sides:
            n = x[s].shape[1]
            ctx = out[:, :, start:start + n]  # [B, H, n, D]
            outs[s] = pick(self.out_proj, s)(self._merge_heads(ctx))[:, :lengths[s]]
            start += n
        return outs.get("long"), outs.get("global")


def pad_tokens(x: torch.Tensor, n: int) -> torch.Tensor:
    """float [batch, len, dim] -> [batch, n, dim] (zero rows appended; ``n >= len``)."""
    return F.pad(x, (0, 0, 0, n - x.shape[1])) if n != x.shape[1] else x


class FeedForward(nn.Module):
    """fc1 -> activation -> dropout -> fc2 (names as in fairseq's TransformerEncoderLayer)."""

    def __init__(self, embed_dim: int, ffn_dim: int, activation_fn: str, activation_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.activation_fn = get_activation_fn(activation_fn)
        self.activation_dropout = nn.Dropout(activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """float [..., embed_dim] -> float [..., embed_dim]."""
        return self.fc2(self.activation_dropout(self.activation_fn(self.fc1(x))))


class EtcLayer(nn.Module):
    """One ETC layer applied to the long and the global sequence together (see the module docstring)."""

    def __init__(self, cfg: EtcEncoderConfig, num_relative_labels: int):
        super().__init__()
        dim = cfg.encoder_embed_dim
        self.pre_layer_norm = cfg.pre_layer_norm
        self.self_attn = EtcSelfAttention(cfg, num_relative_labels)

        def layer_norm() -> nn.Module:
            return nn.LayerNorm(dim, eps=cfg.layer_norm_eps)

        # The attention LayerNorm follows the output projection's sharing (unless asked to be per
        # side), the final LayerNorm the FFN's.
        shared_attn_ln = cfg.shared_out_proj and not cfg.separate_attention_layer_norm
        self.self_attn_layer_norm = switchable(SIDES, shared_attn_ln, layer_norm)
        shared_ffn = not cfg.separate_ffn
        self.ffn = switchable(
            SIDES, shared_ffn,
            lambda: FeedForward(dim, cfg.encoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout),
        )
        self.final_layer_norm = switchable(SIDES, shared_ffn, layer_norm)
        self.dropout = nn.Dropout(cfg.dropout)

    @property
    def outputs(self) -> Tuple[str, ...]:
        """The sides this layer computes: both, unless :meth:`keep_outputs` was called."""
        return self.self_attn.outputs

    def keep_outputs(self, sides: Sequence[str]) -> None:
        """Compute only ``sides`` ("long" and/or "global") and remove the modules only the other side
        uses (:meth:`EtcSelfAttention.drop_side`, its FFN and LayerNorms when not shared; with
        ``pre_layer_norm`` its attention LayerNorm stays: it normalises the keys/values the other side's
        queries read). For the last
        layer of a model whose task reads only one side's outputs (WikiHop: the global tokens; NQ and
        OpenKP: the long tokens): the other side's last-layer outputs influence nothing, so its
        parameters would never get a gradient (PyTorch's DistributedDataParallel stops on such
        parameters) and its attention would be computed for nothing."""
        unknown = set(sides) - set(SIDES)
        if unknown or not sides:
            raise ValueError(f"outputs must be a non-empty subset of {SIDES}, got {tuple(sides)}")
        for side in SIDES:
            if side in sides or side not in self.outputs:
                continue
            self.self_attn.drop_side(side)
            groups = (self.ffn, self.final_layer_norm) + (() if self.pre_layer_norm else (self.self_attn_layer_norm,))
            for group in groups:
                if side in group:
                    del group[side]

    def forward(
        self, x_long: torch.Tensor, x_global: torch.Tensor, structure: Union[GlobalLocalStructure, FlexPlan],
        impl: Optional[str] = None,
    ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """x_long: float [batch, long_len, embed_dim]; x_global: float [batch, global_len, embed_dim];
        ``structure`` and ``impl``: see :meth:`EtcSelfAttention.forward`. Returns both, same shapes (None for
        a side not in :attr:`outputs`)."""
        sides = ("long", "global")
        if self.pre_layer_norm:
            # both sides normalised: a side's keys/values feed the other side's queries
            normed = [pick(self.self_attn_layer_norm, s)(x) for s, x in zip(sides, (x_long, x_global))]
            attn = self.self_attn(normed[0], normed[1], structure, impl)
            outs = []
            for side, x, a in zip(sides, (x_long, x_global), attn):
                if a is None:
                    outs.append(None)
                    continue
                x = x + self.dropout(a)
                x = x + self.dropout(pick(self.ffn, side)(pick(self.final_layer_norm, side)(x)))
                outs.append(x)
            return outs[0], outs[1]
        attn = self.self_attn(x_long, x_global, structure, impl)
        outs = []
        for side, x, a in zip(sides, (x_long, x_global), attn):
            if a is None:
                outs.append(None)
                continue
            x = pick(self.self_attn_layer_norm, side)(x + self.dropout(a))
            x = pick(self.final_layer_norm, side)(x + self.dropout(pick(self.ffn, side)(x)))
            outs.append(x)
        return outs[0], outs[1]
