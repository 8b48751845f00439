"""Dense reference for global-local attention -- for tests and benchmarks only.

Written to be obviously correct, not fast: the band-form l2l mask/labels are expanded
to full ``[batch, long_len, long_len]`` matrices, long and global keys are concatenated,
the full logits are computed and each query side gets one plain masked softmax.
Memory is ``O(long_len^2)``.

Inputs are trusted (the public entries of :mod:`.global_local` validate them once).

The relative term uses the same "dot with every label once, then gather" scheme as the
blocked kernel (so this is a fair "dense with the same relative bias" baseline); the test
suite checks it separately against a naive per-pair computation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .common import gather_relative_logits, relative_scores

__all__ = [
    "dense_long_query_attention",
    "dense_global_query_attention",
    "band_to_full",
    "plain_masked_softmax",
]


def band_to_full(band: torch.Tensor, local_radius: int, fill) -> torch.Tensor:
    """Expand a band-form tensor to the full long x long matrix.

    Args:
        band: any dtype ``[batch, long_len, 2*r+1]``; slot ``w`` of row ``i`` is key ``i + w - r``.
        local_radius: ``r >= 0``.
        fill: value for pairs with ``|j - i| > r`` (False for masks, 0 for labels).

    Returns:
        same dtype ``[batch, long_len, long_len]``: ``full[b, i, j] = band[b, i, j - i + r]``
        when ``|j - i| <= r``, else ``fill``.
    """
    batch, long_len, width = band.shape
    r = int(local_radius)
    i = torch.arange(long_len, device=band.device).view(long_len, 1)
    j = torch.arange(long_len, device=band.device).view(1, long_len)
    slot = j - i + r  # [long_len, long_len]
    in_band = (slot >= 0) & (slot <= 2 * r)
    index = slot.clamp(0, width - 1).expand(batch, long_len, long_len)
    full = torch.gather(band, 2, index)
    return torch.where(in_band, full, torch.full_like(full, fill))


def plain_masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked softmax over the last dim; rows with no allowed key give all zeros.

    Args:
        logits: float ``[..., k_len]`` (float16/bfloat16 are computed in float32).
        mask: bool, broadcastable to ``logits``; True = may attend.

    Returns:
        float ``[..., k_len]`` in the dtype of ``logits``.
    """
    in_dtype = logits.dtype
    if logits.shape[-1] == 0:  # no keys at all
        return logits
    x = logits.float() if in_dtype in (torch.float16, torch.bfloat16) else logits
    x = x.masked_fill(~mask, float("-inf"))
    row_max = x.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(x - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    return (e / denom).to(in_dtype)


def _dense_attend(q, k, v, rel_logits, mask, dropout_p):
    """softmax(mask((q k^T + rel) / sqrt(d))) v.

    Args:
        q: float ``[batch, heads, q_len, head_dim]``; k, v: float ``[batch, heads, k_len, head_dim]``.
        rel_logits: float ``[batch, heads, q_len, k_len]`` (unscaled q . e + bias) or None.
        mask: bool ``[batch, q_len, k_len]``.

    Returns:
        float ``[batch, heads, q_len, head_dim]``.
    """
    logits = torch.matmul(q, k.transpose(-1, -2))
    if rel_logits is not None:
        logits = logits + rel_logits
    logits = logits / math.sqrt(q.shape[-1])
    probs = plain_masked_softmax(logits, mask.unsqueeze(1))
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return torch.matmul(probs, v)


def _rel_logits(q, rel_emb, rel_bias, labels_a, labels_b, len_a, len_b):
    """Relative logits for keys [group a | group b]; a group without labels contributes 0.

    Returns float ``[batch, heads, q_len, len_a + len_b]`` or None when there is no relative term.
    """
    if rel_emb is None or (labels_a is None and labels_b is None):
        return None
    scores = relative_scores(q, rel_emb, rel_bias)  # [batch, heads, q_len, num_labels]
    batch, heads, q_len, _ = scores.shape
    parts = []
    for labels, n in ((labels_a, len_a), (labels_b, len_b)):
        if labels is None:
            parts.append(scores.new_zeros(batch, heads, q_len, n))
        else:
            parts.append(gather_relative_logits(scores, labels))
    return torch.cat(parts, dim=-1)


def dense_long_query_attention(
    long_q, l2l_k, l2l_v, l2g_k, l2g_v, *, local_radius, l2l_mask, l2g_mask,
    l2l_rel=None, l2g_rel=None, rel_emb=None, rel_bias=None, dropout_p=0.0,
) -> torch.Tensor:
    """Dense reference of :func:`etc_fairseq.attention.blocked.long_query_attention` (same arguments but
    ``chunk``, same shapes and result).

    Returns:
        float ``[batch, heads, long_len, head_dim]``.
    """
    long_len, global_len = long_q.shape[2], l2g_k.shape[2]
    full_mask = band_to_full(l2l_mask, local_radius, False)  # [batch, long_len, long_len]
    full_rel = None if l2l_rel is None else band_to_full(l2l_rel, local_radius, 0)
    k = torch.cat([l2l_k, l2g_k], dim=2)  # [batch, heads, long_len + global_len, head_dim]
    v = torch.cat([l2l_v, l2g_v], dim=2)
    mask = torch.cat([full_mask, l2g_mask], dim=2)  # [batch, long_len, long_len + global_len]
    rel = _rel_logits(long_q, rel_emb, rel_bias, full_rel, l2g_rel, long_len, global_len)
    return _dense_attend(long_q, k, v, rel, mask, dropout_p)


def dense_global_query_attention(
    global_q, g2g_k, g2g_v, g2l_k, g2l_v, *, g2g_mask, g2l_mask,
    g2g_rel=None, g2l_rel=None, rel_emb=None, rel_bias=None, dropout_p=0.0,
) -> torch.Tensor:
    """Dense reference of :func:`etc_fairseq.attention.blocked.global_query_attention` (same arguments but
    ``chunk``, same shapes and result).

    Returns:
        float ``[batch, heads, global_len, head_dim]``.
    """
    global_len, long_len = global_q.shape[2], g2l_k.shape[2]
    k = torch.cat([g2g_k, g2l_k], dim=2)  # [batch, heads, global_len + long_len, head_dim]
    v = torch.cat([g2g_v, g2l_v], dim=2)
    mask = torch.cat([g2g_mask, g2l_mask], dim=2)  # [batch, global_len, global_len + long_len]
    rel = _rel_logits(global_q, rel_emb, rel_bias, g2g_rel, g2l_rel, global_len, long_len)
    return _dense_attend(global_q, k, v, rel, mask, dropout_p)
