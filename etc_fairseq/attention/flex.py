"""Global-local attention through ``torch.nn.attention.flex_attention`` (the GPU path).

Each half is ONE flex-attention call whose keys are two parts laid end to end:

* long queries (``L``) against ``[l2l keys (L) | l2g keys (G)]``;
* global queries (``G``) against ``[g2g keys (G) | g2l keys (L)]``.

The **block mask** comes from the half's two masks: long query ``q`` may see key ``k < L`` iff
``|k - q| <= r`` and ``l2l_mask[b, q, k - q + r]``, and key ``k >= L`` iff ``l2g_mask[b, q, k - L]``
(global queries: ``g2g_mask`` then ``g2l_mask``).  Flex attention skips the key blocks with nothing
allowed, so the l2l band costs ``O(L * r)``, not ``O(L^2)``.  The **relative label term** is a
``score_mod``: every query is dotted once with every label vector (plus the label's bias, if any;
the tables stay ordinary autograd tensors), and the score of pair ``(q, k)`` gets
``table[b, h, q, label(b, q, k)]`` added.

Same arguments and results as :func:`etc_fairseq.attention.blocked.long_query_attention` /
:func:`~etc_fairseq.attention.blocked.global_query_attention`; :func:`attention_backend` picks
this path automatically on CUDA (no attention dropout: flex attention has none) and the blocked
kernel everywhere else.  On CPU, torch's flex attention has no backward pass (torch 2.13), so there
this path is usable for inference only; ``tests/test_flex.py`` checks its forward against the dense
reference on CPU.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

import torch

from .common import (
    band_key_in_range,
    effective_radius,
    validate_global_query_inputs,
    validate_long_query_inputs,
)

__all__ = [
    "flex_long_query_attention",
    "flex_global_query_attention",
    "flex_available",
    "attention_backend",
    "two_part_mask_and_labels",
]


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


def two_part_mask_and_labels(
    n_queries: int, len_a: int, len_b: int, radius: int, mask_a, mask_b, rel_a, rel_b, none_label: int
) -> Tuple[Callable, Callable]:
    """The ``mask_mod`` and the label lookup of one half, as closures over index tensors.

    Keys ``0 .. len_a - 1`` are part a: a band (``radius >= 0``; ``mask_a`` bool
    ``[B, n_queries, 2r+1]``, slot ``k - q + r``) or a full block (``radius < 0``; ``mask_a`` bool
    ``[B, n_queries, len_a]``); keys ``len_a .. len_a + len_b - 1`` are part b (``mask_b`` bool
    ``[B, n_queries, len_b]``).  ``rel_a`` / ``rel_b``: int64 label ids shaped like the masks, or None
    (then ``none_label``).

    Returns:
        ``(allowed, label)``: ``allowed(b, q, k)`` -> bool and ``label(b, q, k)`` -> int64,
        elementwise over integer index tensors.
    """
    band = radius >= 0
    width_a = 2 * radius + 1 if band else len_a

    def parts(q, k):
        in_a = k < len_a
        qi = q.clamp(0, max(n_queries - 1, 0))
        if band:
            col_a = (k - q + radius).clamp(0, width_a - 1)
            ok_a = (k - q).abs() <= radius
        else:
            col_a = k.clamp(0, max(len_a - 1, 0))
            ok_a = k >= 0
        col_b = (k - len_a).clamp(0, max(len_b - 1, 0))
        return in_a, qi, col_a, ok_a, col_b

    def allowed(b, q, k):
        in_a, qi, col_a, ok_a, col_b = parts(q, k)
        a = in_a & ok_a & mask_a[b, qi, col_a] if width_a else in_a & False
        bb = ~in_a & mask_b[b, qi, col_b] if len_b else in_a & False
        return a | bb

    def label(b, q, k):
        in_a, qi, col_a, _, col_b = parts(q, k)
        none = torch.full_like(q, none_label)
        la = rel_a[b, qi, col_a] if (rel_a is not None and width_a) else none
        lb = rel_b[b, qi, col_b] if (rel_b is not None and len_b) else none
        return torch.where(in_a, la, lb)

    return allowed, label


def _flex_two_parts(q, ka, va, kb, vb, radius, mask_a, mask_b, rel_a, rel_b, rel_emb, rel_bias, row_live, compile):
    """One flex-attention call: queries ``q`` float ``[B, H, n, D]`` against keys/values
    ``[ka | kb]`` (float ``[B, H, na, D]`` and ``[B, H, nb, D]``); masks/labels as in
    :func:`two_part_mask_and_labels`; ``row_live`` bool ``[B, n]``.  Returns float ``[B, H, n, D]``."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, n, D = q.shape
    na, nb = ka.shape[2], kb.shape[2]
    if n == 0:
        return q * 0.0
    k = torch.cat([ka, kb], dim=2)  # [B, H, na + nb, D]
    v = torch.cat([va, vb], dim=2)
    n_labels = rel_emb.shape[0] if rel_emb is not None else 0
    # label id n_labels = "no relative term" (a zero column of the table)
    allowed, label = two_part_mask_and_labels(n, na, nb, radius, mask_a, mask_b, rel_a, rel_b, n_labels)

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed(b, q_idx, kv_idx)

    block_mask = create_block_mask(mask_mod, B, None, n, na + nb, device=q.device, _compile=compile)
    scale = 1.0 / math.sqrt(D)
    score_mod = None
    if rel_emb is not None and (rel_a is not None or rel_b is not None):
        t = torch.einsum("bhid,nhd->bhin", q * scale, rel_emb)
        if rel_bias is not None:
            t = t + rel_bias.t()[None, :, None, :] * scale  # [num_labels, H] -> [1, H, 1, num_labels]
        table = torch.cat([t, t.new_zeros((B, H, n, 1))], dim=-1)  # [B, H, n, n_labels + 1]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[b, h, q_idx, label(b, q_idx, kv_idx)]

    attend = torch.compile(flex_attention, dynamic=False) if compile else flex_attention
    out = attend(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)  # [B, H, n, D]
    # rows with nothing allowed: flex attention leaves them 0 already; make it explicit
    return out * row_live[:, None, :, None].to(out.dtype)


def flex_long_query_attention(
    long_q, l2l_k, l2l_v, l2g_k, l2g_v, *, local_radius, l2l_mask, l2g_mask,
    l2l_rel=None, l2g_rel=None, rel_emb=None, rel_bias=None, dropout_p=0.0, compile: bool = False,
) -> torch.Tensor:
    """Flex-attention version of :func:`etc_fairseq.attention.blocked.long_query_attention` (same
    arguments, shapes and result); ``dropout_p`` must be 0; ``compile``: run ``flex_attention``
    through ``torch.compile`` (what makes it fast on GPU; the eager version is a slow reference).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    r = int(local_radius)
    validate_long_query_inputs(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, r, l2l_mask, l2g_mask, l2l_rel, l2g_rel, rel_emb, rel_bias
    )
    if dropout_p > 0.0:
        raise ValueError("flex attention has no dropout; use the blocked kernel")
    L = long_q.shape[2]
    r_eff = effective_radius(r, L)
    if r_eff != r:  # radius beyond the sequence: keep only the slots that can be valid
        l2l_mask = l2l_mask[:, :, r - r_eff: r + r_eff + 1]
        l2l_rel = None if l2l_rel is None else l2l_rel[:, :, r - r_eff: r + r_eff + 1]
    local = l2l_mask & band_key_in_range(L, r_eff, l2l_mask.device)  # [B, L, 2r+1]
    row_live = local.any(-1) | l2g_mask.any(-1)  # [B, L]
    return _flex_two_parts(long_q, l2l_k, l2l_v, l2g_k, l2g_v, r_eff, local, l2g_mask, l2l_rel, l2g_rel,
                           rel_emb, rel_bias, row_live, compile)


def flex_global_query_attention(
    global_q, g2g_k, g2g_v, g2l_k, g2l_v, *, g2g_mask, g2l_mask,
    g2g_rel=None, g2l_rel=None, rel_emb=None, rel_bias=None, dropout_p=0.0, compile: bool = False,
) -> torch.Tensor:
    """Flex-attention version of :func:`etc_fairseq.attention.blocked.global_query_attention`
    (same arguments, shapes and result); ``dropout_p`` must be 0; ``compile`` as in
    :func:`flex_long_query_attention`.

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    validate_global_query_inputs(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, g2g_mask, g2l_mask, g2g_rel, g2l_rel, rel_emb, rel_bias
    )
    if dropout_p > 0.0:
        raise ValueError("flex attention has no dropout; use the blocked kernel")
    row_live = g2g_mask.any(-1) | g2l_mask.any(-1)  # [B, G]
    return _flex_two_parts(global_q, g2g_k, g2g_v, g2l_k, g2l_v, -1, g2g_mask, g2l_mask, g2g_rel, g2l_rel,
                           rel_emb, rel_bias, row_live, compile)
