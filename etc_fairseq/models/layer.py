"""One ETC transformer layer: projections (shared or per side / per attention piece) -> global-local
attention -> post-LayerNorm residual -> feed-forward -> post-LayerNorm residual (BERT/RoBERTa order, so
RoBERTa weights can be lifted into it).

Sharing switches (paper section 3.2 and appendix E; the parameter counts in the tests pin their meaning):

- ``shared_q``: one W^Q for both sides, else one for global queries (g2g, g2l) and one for long queries
  (l2g, l2l).
- ``shared_kv``: one W^K and one W^V for all four pieces, else one per piece (l2l, l2g, g2g, g2l).
- ``shared_out_proj``: one output projection (and its LayerNorm) for both sides, else one per side.
- ``shared_ffn``: one feed-forward block (and its LayerNorm) for both sides, else one per side.
- ``shared_relative_embeddings``: one table of relative-label key vectors for long and global queries.

Every switchable group is an ``nn.ModuleDict`` keyed by side ("long"/"global") or by piece
("l2l"/"l2g"/"g2g"/"g2l"), or holding the single key "shared"; lifting code copies into every entry.
"""

from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import LayerNorm

from etc_fairseq.attention import global_query_attention, long_query_attention
from etc_fairseq.attention.flex import attention_backend, flex_global_local_attention
from etc_fairseq.structure.builders import GlobalLocalStructure

SIDES = ("long", "global")
PIECES = ("l2l", "l2g", "g2g", "g2l")
SHARED = "shared"


def switchable(keys: Sequence[str], shared: bool, factory: Callable[[], nn.Module]) -> nn.ModuleDict:
    """One module per key, or a single ``"shared"`` module when ``shared``."""
    return nn.ModuleDict({SHARED: factory()} if shared else {k: factory() for k in keys})


def pick(modules: nn.ModuleDict, key: str) -> nn.Module:
    """The module used for ``key`` (a side or piece name), whatever the sharing."""
    return modules[SHARED] if SHARED in modules else modules[key]


class EtcSelfAttention(nn.Module):
    """Q/K/V/output projections around :func:`etc_fairseq.attention.long_query_attention` and
    :func:`~etc_fairseq.attention.global_query_attention` (the two softmaxes of the paper)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_relative_labels: int,
        attention_dropout: float,
        shared_q: bool,
        shared_kv: bool,
        shared_out_proj: bool,
        shared_relative_embeddings: bool,
    ):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"encoder_embed_dim ({embed_dim}) must be divisible by encoder_attention_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.attention_dropout = attention_dropout

        def linear() -> nn.Module:
            return nn.Linear(embed_dim, embed_dim)

        self.q_proj = switchable(SIDES, shared_q, linear)
        self.k_proj = switchable(PIECES, shared_kv, linear)
        self.v_proj = switchable(PIECES, shared_kv, linear)
        self.out_proj = switchable(SIDES, shared_out_proj, linear)
        # Relative-label key vectors a^K_l, one per label and head (paper eq. for e_ij): float
        # [num_labels, heads, head_dim]. A ParameterDict mirrors the ModuleDict sharing convention.
        rel_keys = (SHARED,) if shared_relative_embeddings else SIDES
        #: "auto" (FlexAttention on CUDA without attention dropout, else the blocked kernel),
        #: "blocked" or "flex" (the latter has no backward on CPU).
        self.backend = "auto"
        self.rel_emb = nn.ParameterDict(
            {
                k: nn.Parameter(torch.randn(num_relative_labels, num_heads, self.head_dim) * 0.02)
                for k in rel_keys
            }
        )

    def _rel(self, side: str) -> torch.Tensor:
        return self.rel_emb[SHARED] if SHARED in self.rel_emb else self.rel_emb[side]

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

    def forward(
        self, x_long: torch.Tensor, x_global: torch.Tensor, structure: GlobalLocalStructure
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x_long: float [batch, long_len, embed_dim]; x_global: float [batch, global_len, embed_dim].

        Returns the attention outputs after the output projections, same shapes as the inputs.
        """
        q = self._project(self.q_proj, {"long": x_long, "global": x_global})
        # Which side provides the keys/values of each piece: l2l and g2l attend to long tokens,
        # l2g and g2g to global tokens.
        kv_inputs = {"l2l": x_long, "g2l": x_long, "l2g": x_global, "g2g": x_global}
        k = self._project(self.k_proj, kv_inputs)
        v = self._project(self.v_proj, kv_inputs)
        p = self.attention_dropout if self.training else 0.0
        backend = attention_backend(x_long.device, p) if self.backend == "auto" else self.backend
        if backend == "flex":
            long_ctx, global_ctx = self._flex(q, k, v, structure)
        else:
            long_ctx, global_ctx = self._blocked(q, k, v, structure, p)
        out_long = pick(self.out_proj, "long")(self._merge_heads(long_ctx))
        out_global = pick(self.out_proj, "global")(self._merge_heads(global_ctx))
        return out_long, out_global

    def _blocked(self, q, k, v, structure: GlobalLocalStructure, p: float):
        """The blocked kernel; q/k/v: side/piece -> float [batch, heads, len, head_dim]."""
        long_ctx = long_query_attention(
            q["long"], k["l2l"], v["l2l"], k["l2g"], v["l2g"],
            local_radius=structure.local_radius,
            l2l_mask=structure.l2l_mask, l2g_mask=structure.l2g_mask,
            l2l_rel=structure.l2l_rel, l2g_rel=structure.l2g_rel,
            rel_emb=self._rel("long").to(q["long"].dtype), dropout_p=p,  # autocast: q is bf16/fp16
        )  # [batch, heads, long_len, head_dim]
        global_ctx = global_query_attention(
            q["global"], k["g2g"], v["g2g"], k["g2l"], v["g2l"],
            g2g_mask=structure.g2g_mask, g2l_mask=structure.g2l_mask,
            g2g_rel=structure.g2g_rel, g2l_rel=structure.g2l_rel,
            rel_emb=self._rel("global").to(q["global"].dtype), dropout_p=p,  # autocast: q is bf16/fp16
        )  # [batch, heads, global_len, head_dim]
        return long_ctx, global_ctx

    def _flex(self, q, k, v, structure: GlobalLocalStructure):
        """FlexAttention (CUDA, no attention dropout): one call for the long queries (keys l2l + l2g)
        and one for the global queries (keys g2l + g2g); in each call the other side's query rows
        are fully masked, so flex attention skips their blocks."""
        s = structure
        none_l = torch.zeros_like(s.l2l_mask)
        none_lg = torch.zeros_like(s.l2g_mask)
        none_g = torch.zeros_like(s.g2g_mask)
        none_gl = torch.zeros_like(s.g2l_mask)
        long_ctx, _ = flex_global_local_attention(
            q["long"], k["l2l"], v["l2l"], q["global"], k["l2g"], v["l2g"], local_radius=s.local_radius,
            l2l_mask=s.l2l_mask, l2g_mask=s.l2g_mask, g2g_mask=none_g, g2l_mask=none_gl,
            l2l_rel=s.l2l_rel, l2g_rel=s.l2g_rel, long_rel_emb=self._rel("long").to(q["long"].dtype),
            compile=q["long"].is_cuda,
        )
        _, global_ctx = flex_global_local_attention(
            q["long"], k["g2l"], v["g2l"], q["global"], k["g2g"], v["g2g"], local_radius=s.local_radius,
            l2l_mask=none_l, l2g_mask=none_lg, g2g_mask=s.g2g_mask, g2l_mask=s.g2l_mask,
            g2g_rel=s.g2g_rel, g2l_rel=s.g2l_rel, global_rel_emb=self._rel("global").to(q["global"].dtype),
            compile=q["long"].is_cuda,
        )
        return long_ctx, global_ctx


class FeedForward(nn.Module):
    """fc1 -> activation -> dropout -> fc2 (names as in fairseq's TransformerEncoderLayer)."""

    def __init__(self, embed_dim: int, ffn_dim: int, activation_fn: str, activation_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.activation_dropout = nn.Dropout(activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """float [..., embed_dim] -> float [..., embed_dim]."""
        return self.fc2(self.activation_dropout(self.activation_fn(self.fc1(x))))


class EtcLayer(nn.Module):
    """Post-LayerNorm ETC layer applied to the long and the global sequence together."""

    def __init__(
        self,
        embed_dim: int,
        ffn_dim: int,
        num_heads: int,
        num_relative_labels: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation_fn: str,
        shared_q: bool,
        shared_kv: bool,
        shared_out_proj: bool,
        shared_ffn: bool,
        shared_relative_embeddings: bool,
    ):
        super().__init__()
        self.self_attn = EtcSelfAttention(
            embed_dim, num_heads, num_relative_labels, attention_dropout,
            shared_q=shared_q, shared_kv=shared_kv, shared_out_proj=shared_out_proj,
            shared_relative_embeddings=shared_relative_embeddings,
        )
        # The attention LayerNorm follows the output projection's sharing, the final LayerNorm the FFN's.
        self.self_attn_layer_norm = switchable(SIDES, shared_out_proj, lambda: LayerNorm(embed_dim))
        self.ffn = switchable(
            SIDES, shared_ffn, lambda: FeedForward(embed_dim, ffn_dim, activation_fn, activation_dropout)
        )
        self.final_layer_norm = switchable(SIDES, shared_ffn, lambda: LayerNorm(embed_dim))
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x_long: torch.Tensor, x_global: torch.Tensor, structure: GlobalLocalStructure
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """x_long: float [batch, long_len, embed_dim]; x_global: float [batch, global_len, embed_dim];
        returns both, same shapes."""
        a_long, a_global = self.self_attn(x_long, x_global, structure)
        outs = []
        for side, x, a in (("long", x_long, a_long), ("global", x_global, a_global)):
            x = pick(self.self_attn_layer_norm, side)(x + self.dropout(a))
            x = pick(self.final_layer_norm, side)(x + self.dropout(pick(self.ffn, side)(x)))
            outs.append(x)
        return outs[0], outs[1]
