"""Global-local attention through ``torch.nn.attention.flex_attention`` (the GPU path).

The long and the global sequence are laid end to end (``S = long_len + global_len`` positions:
long ``0 .. L-1``, global ``L .. L+G-1``) and ONE flex-attention call covers the four pieces:

* the **block mask** comes from the four masks: query ``q`` may see key ``k`` iff
  l2l (``q, k < L``, ``|k - q| <= r`` and ``l2l_mask[b, q, k - q + r]``), l2g (``q < L <= k``,
  ``l2g_mask[b, q, k - L]``), g2l (``k < L <= q``, ``g2l_mask[b, q - L, k]``) or g2g
  (``q, k >= L``, ``g2g_mask[b, q - L, k - L]``).  Flex attention skips the key blocks with
  nothing allowed, so the l2l band costs ``O(L * r)``, not ``O(L^2)``.
* the **relative label term** is a ``score_mod``: every query is dotted once with every label
  vector (long queries with ``long_rel_emb``, global ones with ``global_rel_emb``; the label
  vectors stay learnable: the table is an ordinary autograd tensor), and the score of pair
  ``(q, k)`` gets ``table[b, h, q, label(b, q, k)]`` added.

Same arguments and results as :func:`etc_fairseq.attention.blocked.global_local_attention`.
:func:`attention_backend` picks this path automatically on CUDA (no attention dropout: flex
attention has none) and the blocked kernel everywhere else.  On CPU, torch's flex attention has no
backward pass (torch 2.13), so there this path is usable for inference only;
``tests/test_flex.py`` checks its forward against the dense reference on CPU.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from .common import validate_global_local_inputs

__all__ = ["flex_global_local_attention", "flex_available", "attention_backend", "piece_labels_and_masks"]


def flex_available() -> bool:
    """Whether this torch has ``torch.nn.attention.flex_attention``."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def attention_backend(device: torch.device, dropout_p: float) -> str:
    """``"flex"`` on CUDA when flex attention exists and no attention dropout is asked for, else
    ``"blocked"`` (the CPU path, and the fallback)."""
    if device.type == "cuda" and dropout_p == 0.0 and flex_available():
        return "flex"
    return "blocked"


def piece_labels_and_masks(long_len: int, global_len: int, r: int, l2l_mask, l2g_mask, g2g_mask, g2l_mask,
                           l2l_rel, l2g_rel, g2g_rel, g2l_rel, none_label: int = 0):
    """The ``mask_mod`` and the label lookup over the concatenated sequence, as closures.

    Args: the kernel's masks (bool) and label ids (int64 or None), shapes as in
    :func:`~etc_fairseq.attention.blocked.global_local_attention`.

    Returns:
        ``(allowed, label)``: ``allowed(b, q, k)`` -> bool and ``label(b, q, k)`` -> int64
        (``none_label`` for pieces without labels), both elementwise over integer index tensors.
    """
    L, G = long_len, global_len
    width = 2 * r + 1

    def parts(b, q, k):
        q_long, k_long = q < L, k < L
        ql, kl = q.clamp(max=max(L - 1, 0)), k.clamp(max=max(L - 1, 0))
        qg, kg = (q - L).clamp(0, max(G - 1, 0)), (k - L).clamp(0, max(G - 1, 0))
        slot = (k - q + r).clamp(0, width - 1)
        in_band = (k - q).abs() <= r
        return q_long, k_long, ql, kl, qg, kg, slot, in_band

    def allowed(b, q, k):
        q_long, k_long, ql, kl, qg, kg, slot, in_band = parts(b, q, k)
        ll = q_long & k_long & in_band & l2l_mask[b, ql, slot] if L else q_long & False
        lg = q_long & ~k_long & l2g_mask[b, ql, kg] if (L and G) else q_long & False
        gl = ~q_long & k_long & g2l_mask[b, qg, kl] if (L and G) else q_long & False
        gg = ~q_long & ~k_long & g2g_mask[b, qg, kg] if G else q_long & False
        return ll | lg | gl | gg

    def label(b, q, k):
        q_long, k_long, ql, kl, qg, kg, slot, in_band = parts(b, q, k)
        zero = torch.full_like(q, none_label)
        ll = l2l_rel[b, ql, slot] if (l2l_rel is not None and L) else zero
        lg = l2g_rel[b, ql, kg] if (l2g_rel is not None and L and G) else zero
        gl = g2l_rel[b, qg, kl] if (g2l_rel is not None and L and G) else zero
        gg = g2g_rel[b, qg, kg] if (g2g_rel is not None and G) else zero
        return torch.where(q_long, torch.where(k_long, ll, lg), torch.where(k_long, gl, gg))

    return allowed, label


def flex_global_local_attention(
    long_q: torch.Tensor,
    long_k: torch.Tensor,
    long_v: torch.Tensor,
    global_q: torch.Tensor,
    global_k: torch.Tensor,
    global_v: torch.Tensor,
    *,
    local_radius: int,
    l2l_mask: torch.Tensor,
    l2g_mask: torch.Tensor,
    g2g_mask: torch.Tensor,
    g2l_mask: torch.Tensor,
    l2l_rel: Optional[torch.Tensor] = None,
    l2g_rel: Optional[torch.Tensor] = None,
    g2g_rel: Optional[torch.Tensor] = None,
    g2l_rel: Optional[torch.Tensor] = None,
    long_rel_emb: Optional[torch.Tensor] = None,
    global_rel_emb: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    compile: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ETC global-local attention as one flex-attention call (see the module docstring).

    Args: as :func:`etc_fairseq.attention.blocked.global_local_attention` (float
    ``[batch, heads, long_len/global_len, head_dim]`` queries/keys/values, bool masks, int64 labels,
    float ``[num_labels, heads, head_dim]`` label vectors); ``dropout_p`` must be 0 (flex attention
    has no dropout); ``compile``: run ``flex_attention`` through ``torch.compile`` (what makes it
    fast on GPU; the eager version is a slow reference).

    Returns:
        ``(long_out, global_out)``: float ``[batch, heads, long_len, head_dim]`` and
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    validate_global_local_inputs(
        long_q, long_k, long_v, global_q, global_k, global_v, local_radius,
        l2l_mask, l2g_mask, g2g_mask, g2l_mask, l2l_rel, l2g_rel, g2g_rel, g2l_rel,
        long_rel_emb, global_rel_emb,
    )
    if dropout_p > 0.0:
        raise ValueError("flex_global_local_attention: flex attention has no dropout; use the blocked kernel")
    B, H, L, D = long_q.shape
    G = global_q.shape[2]
    r = int(local_radius)
    S = L + G
    q = torch.cat([long_q, global_q], dim=2)  # [B, H, S, D]
    k = torch.cat([long_k, global_k], dim=2)
    v = torch.cat([long_v, global_v], dim=2)
    if S == 0:
        return long_q * 0.0, global_q * 0.0
    rel_on = long_rel_emb is not None or global_rel_emb is not None
    n_labels = (long_rel_emb if long_rel_emb is not None else global_rel_emb).shape[0] if rel_on else 0
    # label id n_labels = "no relative term" (a zero column of the table)
    allowed, label = piece_labels_and_masks(
        L, G, r, l2l_mask, l2g_mask, g2g_mask, g2l_mask, l2l_rel, l2g_rel, g2g_rel, g2l_rel,
        none_label=n_labels,
    )

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed(b, q_idx, kv_idx)

    block_mask = create_block_mask(mask_mod, B, None, S, S, device=q.device, _compile=compile)
    scale = 1.0 / math.sqrt(D)
    score_mod = None
    if rel_on:
        def side_table(x, emb, n):
            """float [B, H, n, n_labels + 1]: scaled query . label vector, then the zero column."""
            if emb is None:
                return x.new_zeros((B, H, n, n_labels + 1))
            t = torch.einsum("bhid,nhd->bhin", x * scale, emb)
            return torch.cat([t, t.new_zeros((B, H, n, 1))], dim=-1)

        table = torch.cat([side_table(long_q, long_rel_emb, L), side_table(global_q, global_rel_emb, G)],
                          dim=2)  # [B, H, S, n_labels + 1]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[b, h, q_idx, label(b, q_idx, kv_idx)]

    attend = torch.compile(flex_attention, dynamic=False) if compile else flex_attention
    out = attend(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)  # [B, H, S, D]
    # rows with nothing allowed: flex attention leaves them 0 already; make it explicit
    live = torch.cat([
        (l2l_mask & _band_in_range(L, r, l2l_mask.device)).any(-1) | l2g_mask.any(-1),
        g2g_mask.any(-1) | g2l_mask.any(-1),
    ], dim=1)  # [B, S]
    out = out * live[:, None, :, None].to(out.dtype)
    return out[:, :, :L], out[:, :, L:]


def _band_in_range(long_len: int, r: int, device) -> torch.Tensor:
    """bool ``[long_len, 2r+1]``: band slot ``w`` of row ``i`` points at a real key ``0 <= i + w - r < L``."""
    i = torch.arange(long_len, device=device).unsqueeze(1)
    j = i + torch.arange(2 * r + 1, device=device).unsqueeze(0) - r
    return (j >= 0) & (j < long_len)
