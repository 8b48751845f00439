"""The first blocked kernel, written with plain autograd -- kept as a second exact reference.

Same arguments and results as :mod:`etc_fairseq.attention.blocked` (whose module docstring
describes the 3-block layout used here): the l2l band is skewed into windows of 3 blocks of
``b = r + 1`` keys (:func:`~etc_fairseq.attention.blocked.band_to_blocked`), local and global
logits go through one :func:`~etc_fairseq.attention.common.masked_joint_softmax`, and autograd
keeps the probabilities (``O(long_len * (3(r+1) + global_len))`` floats per head) for backward.

The production kernel (:mod:`.blocked`) computes the same function chunk by chunk and recomputes
the probabilities in backward; ``benchmarks/kernel_efficiency.py`` times both side by side and the
tests check both against the dense reference.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .blocked import band_key_in_range, band_to_blocked
from .common import (
    dropout_probs,
    gather_relative_logits,
    masked_joint_softmax,
    relative_scores,
    validate_global_local_inputs,
    validate_global_query_inputs,
    validate_long_query_inputs,
)

__all__ = [
    "autograd_global_local_attention",
    "autograd_long_query_attention",
    "autograd_global_query_attention",
]


def _effective_radius(local_radius: int, long_len: int) -> int:
    """``min(r, long_len - 1)`` (at least 0): slots beyond it can never hold a real key."""
    return max(0, min(int(local_radius), long_len - 1))


def autograd_long_query_attention(
    long_q: torch.Tensor,
    l2l_k: torch.Tensor,
    l2l_v: torch.Tensor,
    l2g_k: torch.Tensor,
    l2g_v: torch.Tensor,
    *,
    local_radius: int,
    l2l_mask: torch.Tensor,
    l2g_mask: torch.Tensor,
    l2l_rel: Optional[torch.Tensor] = None,
    l2g_rel: Optional[torch.Tensor] = None,
    rel_emb: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Long queries -> (local long keys + all global keys), one softmax, blocked l2l.

    Args:
        long_q: float ``[batch, heads, long_len, head_dim]``.
        l2l_k, l2l_v: float ``[batch, heads, long_len, head_dim]`` long keys/values seen by long queries.
        l2g_k, l2g_v: float ``[batch, heads, global_len, head_dim]`` global keys/values seen by long queries.
        local_radius: int ``r >= 0``.
        l2l_mask: bool ``[batch, long_len, 2*r+1]``, slot ``w`` = key ``i + w - r``
            (slots pointing outside ``[0, long_len)`` are ignored whatever their value).
        l2g_mask: bool ``[batch, long_len, global_len]``.
        l2l_rel: int64 ``[batch, long_len, 2*r+1]`` label ids or None.
        l2g_rel: int64 ``[batch, long_len, global_len]`` label ids or None.
        rel_emb: float ``[num_labels, heads, head_dim]`` label key vectors or None.
        dropout_p: dropout on the attention probabilities (0 in eval).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    r = int(local_radius)
    validate_long_query_inputs(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, r, l2l_mask, l2g_mask, l2l_rel, l2g_rel, rel_emb
    )
    batch, heads, long_len, head_dim = long_q.shape
    global_len = l2g_k.shape[2]

    if long_len == 0:
        # nothing to attend from; keep the (empty) result attached to the graph
        return long_q * 0.0

    # Radius larger than the sequence: keep only the slots that can be valid.
    r_eff = _effective_radius(r, long_len)
    if r_eff != r:
        l2l_mask = l2l_mask[:, :, r - r_eff : r + r_eff + 1]
        if l2l_rel is not None:
            l2l_rel = l2l_rel[:, :, r - r_eff : r + r_eff + 1]
    b = r_eff + 1
    num_blocks = -(-long_len // b)
    padded_len = num_blocks * b
    pad_rows = padded_len - long_len

    scale = 1.0 / math.sqrt(head_dim)
    q = long_q * scale
    if pad_rows:
        q = F.pad(q, (0, 0, 0, pad_rows))  # [batch, heads, padded_len, head_dim]
    q_blocks = q.view(batch, heads, num_blocks, b, head_dim)

    # keys/values with one zero block on each side (+ the padding rows):
    # [batch, heads, (num_blocks + 2) * b, head_dim]
    k_pad = F.pad(l2l_k, (0, 0, b, b + pad_rows))
    v_pad = F.pad(l2l_v, (0, 0, b, b + pad_rows))
    # windows of 3 consecutive blocks, stepping one block: views, no copy yet
    k_win = k_pad.unfold(2, 3 * b, b)  # [batch, heads, num_blocks, head_dim, 3b]
    v_win = v_pad.unfold(2, 3 * b, b).transpose(-1, -2)  # [batch, heads, num_blocks, 3b, head_dim]

    local_logits = torch.matmul(q_blocks, k_win)  # [batch, heads, num_blocks, b, 3b]
    global_logits = torch.matmul(q, l2g_k.transpose(-1, -2))  # [batch, heads, padded_len, global_len]

    # masks: band form, restricted to real keys, skewed into the window layout
    local_mask = band_to_blocked(
        l2l_mask & band_key_in_range(long_len, r_eff, l2l_mask.device), r_eff
    )  # [batch, num_blocks, b, 3b]
    global_mask = F.pad(l2g_mask, (0, 0, 0, pad_rows))  # [batch, padded_len, global_len]

    use_rel = rel_emb is not None and (l2l_rel is not None or l2g_rel is not None)
    if use_rel:
        scores = relative_scores(q, rel_emb)  # [batch, heads, padded_len, num_labels]
        if l2l_rel is not None:
            local_labels = band_to_blocked(l2l_rel, r_eff)  # [batch, num_blocks, b, 3b]
            scores_blocks = scores.view(batch, heads, num_blocks, b, scores.shape[-1])
            # in place on the fresh matmul output (autograd does not need it)
            local_logits.add_(gather_relative_logits(scores_blocks, local_labels))
        if l2g_rel is not None:
            global_labels = F.pad(l2g_rel, (0, 0, 0, pad_rows))  # [batch, padded_len, global_len]
            global_logits.add_(gather_relative_logits(scores, global_labels))

    global_logits = global_logits.view(batch, heads, num_blocks, b, global_len)
    local_probs, global_probs = masked_joint_softmax(
        (local_logits, global_logits),
        (
            local_mask.unsqueeze(1),  # [batch, 1, num_blocks, b, 3b]
            global_mask.view(batch, 1, num_blocks, b, global_len),
        ),
    )
    local_probs = dropout_probs(local_probs, dropout_p)
    global_probs = dropout_probs(global_probs, dropout_p)

    out = torch.matmul(local_probs, v_win)  # [batch, heads, num_blocks, b, head_dim]
    out = out.view(batch, heads, padded_len, head_dim)
    out = out + torch.matmul(global_probs.view(batch, heads, padded_len, global_len), l2g_v)
    return out[:, :, :long_len]


def autograd_global_query_attention(
    global_q: torch.Tensor,
    g2g_k: torch.Tensor,
    g2g_v: torch.Tensor,
    g2l_k: torch.Tensor,
    g2l_v: torch.Tensor,
    *,
    g2g_mask: torch.Tensor,
    g2l_mask: torch.Tensor,
    g2g_rel: Optional[torch.Tensor] = None,
    g2l_rel: Optional[torch.Tensor] = None,
    rel_emb: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Global queries -> (all global keys + all long keys), one softmax, dense.

    Args:
        global_q: float ``[batch, heads, global_len, head_dim]``.
        g2g_k, g2g_v: float ``[batch, heads, global_len, head_dim]`` global keys/values seen by global queries.
        g2l_k, g2l_v: float ``[batch, heads, long_len, head_dim]`` long keys/values seen by global queries.
        g2g_mask: bool ``[batch, global_len, global_len]``.
        g2l_mask: bool ``[batch, global_len, long_len]``.
        g2g_rel: int64 ``[batch, global_len, global_len]`` label ids or None.
        g2l_rel: int64 ``[batch, global_len, long_len]`` label ids or None.
        rel_emb: float ``[num_labels, heads, head_dim]`` label key vectors or None.
        dropout_p: dropout on the attention probabilities (0 in eval).

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    validate_global_query_inputs(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, g2g_mask, g2l_mask, g2g_rel, g2l_rel, rel_emb
    )
    batch, heads, global_len, head_dim = global_q.shape

    q = global_q * (1.0 / math.sqrt(head_dim))
    gg_logits = torch.matmul(q, g2g_k.transpose(-1, -2))  # [batch, heads, global_len, global_len]
    gl_logits = torch.matmul(q, g2l_k.transpose(-1, -2))  # [batch, heads, global_len, long_len]
    if rel_emb is not None and (g2g_rel is not None or g2l_rel is not None):
        scores = relative_scores(q, rel_emb)  # [batch, heads, global_len, num_labels]
        if g2g_rel is not None:
            gg_logits.add_(gather_relative_logits(scores, g2g_rel))
        if g2l_rel is not None:
            gl_logits.add_(gather_relative_logits(scores, g2l_rel))
    gg_probs, gl_probs = masked_joint_softmax(
        (gg_logits, gl_logits), (g2g_mask.unsqueeze(1), g2l_mask.unsqueeze(1))
    )
    gg_probs = dropout_probs(gg_probs, dropout_p)
    gl_probs = dropout_probs(gl_probs, dropout_p)
    return torch.matmul(gg_probs, g2g_v) + torch.matmul(gl_probs, g2l_v)


def autograd_global_local_attention(
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
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ETC global-local attention with shared keys/values (blocked l2l).

    Args:
        long_q, long_k, long_v: float ``[batch, heads, long_len, head_dim]``.
        global_q, global_k, global_v: float ``[batch, heads, global_len, head_dim]``.
        local_radius: int ``r >= 0``.
        l2l_mask: bool ``[batch, long_len, 2*r+1]`` (slot ``w`` = key ``i + w - r``).
        l2g_mask: bool ``[batch, long_len, global_len]``.
        g2g_mask: bool ``[batch, global_len, global_len]``.
        g2l_mask: bool ``[batch, global_len, long_len]``.
        l2l_rel, l2g_rel, g2g_rel, g2l_rel: int64 label ids, same shapes as the masks, or None.
        long_rel_emb: float ``[num_labels, heads, head_dim]`` label vectors for long queries, or None.
        global_rel_emb: float ``[num_labels, heads, head_dim]`` label vectors for global queries, or None.
        dropout_p: dropout on the attention probabilities (0 in eval).

    Returns:
        ``(long_out, global_out)``: float ``[batch, heads, long_len, head_dim]`` and
        float ``[batch, heads, global_len, head_dim]``.
    """
    validate_global_local_inputs(
        long_q, long_k, long_v, global_q, global_k, global_v, local_radius,
        l2l_mask, l2g_mask, g2g_mask, g2l_mask, l2l_rel, l2g_rel, g2g_rel, g2l_rel,
        long_rel_emb, global_rel_emb,
    )
    long_out = autograd_long_query_attention(
        long_q, long_k, long_v, global_k, global_v,
        local_radius=local_radius, l2l_mask=l2l_mask, l2g_mask=l2g_mask,
        l2l_rel=l2l_rel, l2g_rel=l2g_rel, rel_emb=long_rel_emb, dropout_p=dropout_p,
    )
    global_out = autograd_global_query_attention(
        global_q, global_k, global_v, long_k, long_v,
        g2g_mask=g2g_mask, g2l_mask=g2l_mask,
        g2g_rel=g2g_rel, g2l_rel=g2l_rel, rel_emb=global_rel_emb, dropout_p=dropout_p,
    )
    return long_out, global_out
