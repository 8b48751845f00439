"""The first blocked kernel, written with plain autograd -- kept as a second exact reference.

Same arguments and results as :mod:`etc_fairseq.attention.blocked` (whose module docstring
describes the attention): the l2l band is skewed into windows of 3 blocks of
``b = r + 1`` keys (:func:`band_to_blocked`), local and global
logits go through one :func:`~etc_fairseq.attention.common.masked_joint_softmax`, and autograd
keeps the probabilities (``O(long_len * (3(r+1) + global_len))`` floats per head) for backward.

The production kernel (:mod:`.blocked`) computes the same function chunk by chunk and recomputes
the probabilities in backward; inputs are trusted (validated once by the public entries of
:mod:`.global_local`); ``benchmarks/kernel_efficiency.py`` times both side by side and the
tests check both against the dense reference.  :func:`band_to_blocked` / :func:`blocked_to_band`
(the 3-block skew) live here because only this kernel uses that layout.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .common import (
    dropout_probs,
    effective_band,
    gather_relative_logits,
    masked_joint_softmax,
    relative_scores,
)

__all__ = [
    "autograd_long_query_attention",
    "autograd_global_query_attention",
    "band_to_blocked",
    "blocked_to_band",
]


# ----------------------------------------------------------------------------
# band form <-> blocked form (pure reshapes, no python loop over positions)
# ----------------------------------------------------------------------------


def band_to_blocked(band: torch.Tensor, local_radius: int) -> torch.Tensor:
    """Skew a band-form tensor into the 3-block window layout.

    Row ``i = n*b + p`` (``b = r + 1``), slot ``w`` of ``band`` lands in block ``n``,
    row ``p``, column ``p + 1 + w`` of the output; all other columns are 0 / False.
    ``long_len`` is padded up to ``num_blocks * b`` with rows of 0 / False.

    Trick: pad every row with 1 zero on the left and zeros on the right to width
    ``3b + 1``, flatten the ``b`` rows of a block, drop the last ``b`` entries and
    re-read the result with rows of width ``3b``: row ``p`` is shifted right by ``p``.

    Args:
        band: any dtype (bool mask or int64 labels) ``[batch, long_len, 2*r+1]``.
        local_radius: ``r >= 0``.

    Returns:
        same dtype ``[batch, num_blocks, b, 3*b]`` with ``num_blocks = ceil(long_len / b)``.
    """
    r = int(local_radius)
    b = r + 1
    width = 2 * r + 1
    batch, long_len, w_in = band.shape
    if w_in != width:
        raise ValueError(f"band: expected shape [batch, long_len, {width}], got {list(band.shape)}")
    num_blocks = -(-long_len // b)
    padded_len = num_blocks * b
    # [batch, padded_len, 3b+1]: 1 zero column left, zeros right, padded rows of zeros
    x = F.pad(band, (1, 3 * b - width, 0, padded_len - long_len))
    x = x.reshape(batch, num_blocks, b * (3 * b + 1))  # rows of one block, flattened
    x = x[:, :, : b * 3 * b]  # drop the last b entries (all padding)
    return x.reshape(batch, num_blocks, b, 3 * b)  # row p now shifted right by p


def blocked_to_band(blocked: torch.Tensor, local_radius: int, long_len: int) -> torch.Tensor:
    """Inverse of :func:`band_to_blocked` ("unskew").

    Args:
        blocked: any dtype ``[batch, num_blocks, b, 3*b]`` with ``b = r + 1``.
        local_radius: ``r >= 0``.
        long_len: number of real rows to keep (``<= num_blocks * b``).

    Returns:
        same dtype ``[batch, long_len, 2*r+1]``: slot ``w`` of row ``n*b + p`` is
        ``blocked[:, n, p, p + 1 + w]``.
    """
    r = int(local_radius)
    b = r + 1
    width = 2 * r + 1
    batch, num_blocks, rows, cols = blocked.shape
    if rows != b or cols != 3 * b:
        raise ValueError(
            f"blocked: expected shape [batch, num_blocks, {b}, {3 * b}], got {list(blocked.shape)}"
        )
    x = blocked.reshape(batch, num_blocks, b * 3 * b)
    x = F.pad(x, (0, b))  # [batch, num_blocks, b*(3b+1)]
    x = x.reshape(batch, num_blocks, b, 3 * b + 1)  # row p now shifted left by p
    x = x[:, :, :, 1 : width + 1]  # [batch, num_blocks, b, 2r+1]
    return x.reshape(batch, num_blocks * b, width)[:, :long_len]


# ----------------------------------------------------------------------------
# the two halves
# ----------------------------------------------------------------------------


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
    rel_bias: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Long queries -> (local long keys + all global keys), one softmax, blocked l2l (arguments and result
    as :func:`etc_fairseq.attention.blocked.long_query_attention`, which also takes ``chunk``; inputs trusted).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    batch, heads, long_len, head_dim = long_q.shape
    global_len = l2g_k.shape[2]

    if long_len == 0:
        # nothing to attend from; keep the (empty) result attached to the graph
        return long_q * 0.0

    # Radius larger than the sequence: keep only the slots that can be valid.
    r_eff, local_band, l2l_rel = effective_band(l2l_mask, l2l_rel, local_radius)  # [batch, long_len, 2r+1]
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
    local_mask = band_to_blocked(local_band, r_eff)  # [batch, num_blocks, b, 3b]
    global_mask = F.pad(l2g_mask, (0, 0, 0, pad_rows))  # [batch, padded_len, global_len]

    use_rel = rel_emb is not None and (l2l_rel is not None or l2g_rel is not None)
    if use_rel:
        scores = relative_scores(q, rel_emb, rel_bias, scale)  # [batch, heads, padded_len, num_labels]
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
    rel_bias: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Global queries -> (all global keys + all long keys), one softmax, dense (arguments and result as
    :func:`etc_fairseq.attention.blocked.global_query_attention`, which also takes ``chunk``; inputs trusted).

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    batch, heads, global_len, head_dim = global_q.shape

    scale = 1.0 / math.sqrt(head_dim)
    q = global_q * scale
    gg_logits = torch.matmul(q, g2g_k.transpose(-1, -2))  # [batch, heads, global_len, global_len]
    gl_logits = torch.matmul(q, g2l_k.transpose(-1, -2))  # [batch, heads, global_len, long_len]
    if rel_emb is not None and (g2g_rel is not None or g2l_rel is not None):
        scores = relative_scores(q, rel_emb, rel_bias, scale)  # [batch, heads, global_len, num_labels]
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
