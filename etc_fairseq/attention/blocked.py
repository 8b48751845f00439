"""Blocked global-local attention (paper Sec. 3.2 and Appendix A) -- the production kernel.

Layout
------
Long-to-long (l2l) attention is restricted to a radius ``r``: long query ``i`` may see
long keys ``j`` with ``|j - i| <= r``.  Callers describe it in *band form*: a tensor
``[batch, long_len, 2r+1]`` whose slot ``w`` of row ``i`` is the key ``j = i + w - r``.

The long queries are processed in *chunks* of ``Q`` consecutive positions (the last chunk
padded).  Chunk ``c`` (queries ``s = c*Q .. s+Q-1``) sees the contiguous key window
``s - r .. s + Q - 1 + r`` (``W = Q + 2r`` keys, zero keys beyond the ends), which is a
plain slice of the zero-padded keys: no key is copied.  Query ``p`` of the chunk sees band
slot ``w`` in window column ``p + w`` (:func:`band_to_windows` "skews" band-form
masks/labels into that layout).  The global keys are side keys of every long query, so the
chunk's logits are ``[batch, heads, Q, W + global_len]`` and ONE softmax covers them.

Global queries attend to all global and all long keys; they are processed in chunks of
global queries (logits ``[batch, heads, chunk, global_len + long_len]``).

Masks and relative labels (Appendix A, "Efficient Relative Attention") are applied by one
gather per chunk: every query is dotted with every label vector once, the result is
extended by a 0 column ("allowed, no label") and a very negative column ("masked"), and
each query-key pair picks its entry by a small integer *code* (its label id, or one of
the two extra columns).  A query whose keys are all masked gets an all-zero output and
zero gradients (its row is multiplied by 0 at the end).

Memory: the forward pass keeps only its inputs (q, k, v, the codes as uint8) for backward;
the backward pass recomputes each chunk's probabilities (flash-attention style), so nothing
of size ``long_len * (r + global_len) * heads`` is ever kept, and the transient per-chunk
tensors are ``O(Q * (Q + 2r + global_len) * heads)``.  Attention dropout keeps its bool
keep-mask (1 byte per probability) instead.

Inputs are trusted: the public entries of :mod:`.global_local` validate them once per call.

:mod:`.autograd_blocked` holds the previous plain-autograd 3-block version of the same
function, kept as a second exact reference and as a benchmark baseline.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .common import effective_band, softmax_dtype

__all__ = [
    "long_query_attention",
    "global_query_attention",
    "band_to_windows",
    "chunk_codes",
    "LONG_CHUNK",
    "GLOBAL_CHUNK",
]

#: Long queries per chunk (``Q``).  Larger chunks waste more local work (``Q + 2r`` keys per query
#: for ``2r + 1`` needed) but run fewer, larger matrix products; ``benchmarks/kernel_efficiency.py
#: --chunks`` measures the trade-off.
LONG_CHUNK = 128
#: Global queries per chunk.
GLOBAL_CHUNK = 64
#: Copies of each code's gradient entry that backward's ``scatter_add_`` spreads the key columns
#: over (column ``k`` -> copy ``k % SPREAD``).  Real codes come in long runs (a clipped relative
#: distance, "masked", "not in this segment"), so with one copy consecutive adds hit the same
#: address and wait for each other; with 4 copies consecutive columns go to different addresses
#: (2.5x faster at 4096: ``benchmarks/kernel_alternatives.py``).
_SCATTER_SPREAD = 4


# ----------------------------------------------------------------------------
# band form -> chunk windows (a pure reshape, no python loop over positions)
# ----------------------------------------------------------------------------


def band_to_windows(band: torch.Tensor, local_radius: int, chunk: int, fill) -> torch.Tensor:
    """Skew a band-form tensor into the chunk-window layout.

    Row ``i = c*Q + p`` (``Q = chunk``), slot ``w`` of ``band`` lands in chunk ``c``, row ``p``,
    column ``p + w`` of the output (the key ``i + w - r`` is column ``p + w`` of the window
    ``c*Q - r .. c*Q + Q - 1 + r``); all other columns, and the rows past ``long_len`` (up to
    ``num_chunks * Q``), are ``fill``.

    Trick: pad every row on the right with ``fill`` to width ``Q + 2r + 1``, flatten the ``Q``
    rows of a chunk and re-read the first ``Q * (Q + 2r)`` entries as rows of width ``Q + 2r``:
    row ``p`` is shifted right by ``p`` (the dropped tail is ``fill`` only).

    Args:
        band: any dtype ``[batch, long_len, 2*r+1]``.
        local_radius: ``r >= 0``.
        chunk: ``Q >= 1``.
        fill: value of the columns outside the band (e.g. False, or the "masked" code).

    Returns:
        same dtype ``[batch, num_chunks, Q, Q + 2r]`` with ``num_chunks = ceil(long_len / Q)``.
    """
    r, q = int(local_radius), int(chunk)
    width = 2 * r + 1
    batch, long_len, w_in = band.shape
    if w_in != width:
        raise ValueError(f"band: expected shape [batch, long_len, {width}], got {list(band.shape)}")
    if q < 1:
        raise ValueError(f"chunk: expected an int >= 1, got {chunk!r}")
    num_chunks = -(-long_len // q)
    x = F.pad(band, (0, q, 0, num_chunks * q - long_len), value=fill)  # [batch, num_chunks*Q, Q+2r+1]
    x = x.reshape(batch, num_chunks, q * (q + 2 * r + 1))[:, :, : q * (q + 2 * r)]
    return x.reshape(batch, num_chunks, q, q + 2 * r)  # row p shifted right by p


# ----------------------------------------------------------------------------
# codes: label ids + "allowed, no label" + "masked", as one small integer per pair
# ----------------------------------------------------------------------------


def _code_dtype(num_labels: int) -> torch.dtype:
    """uint8 while the codes ``0 .. num_labels + 1`` fit, else int32."""
    return torch.uint8 if num_labels + 1 <= 255 else torch.int32


def pair_codes(
    mask: torch.Tensor, labels: Optional[torch.Tensor], num_labels: int, use_labels: bool
) -> torch.Tensor:
    """One code per query-key pair: the label id where allowed (``num_labels`` when there is no
    relative term), ``num_labels + 1`` where masked.

    Args:
        mask: bool ``[batch, q_len, k_len]`` (True = may attend).
        labels: int64 ``[batch, q_len, k_len]`` label ids in ``[0, num_labels)``, or None.
        num_labels: size of the label table (0 without relative term).
        use_labels: whether ``labels`` contribute (False: every allowed pair gets ``num_labels``).

    Returns:
        uint8 (int32 beyond 254 labels) ``[batch, q_len, k_len]``.
    """
    dtype = _code_dtype(num_labels)
    masked = torch.full((), num_labels + 1, dtype=dtype, device=mask.device)
    if use_labels and labels is not None:
        allowed = labels.to(dtype)
    else:
        allowed = torch.full((), num_labels, dtype=dtype, device=mask.device)
    return torch.where(mask, allowed, masked)


def _bias_table(
    q_scaled: torch.Tensor, rel_emb: Optional[torch.Tensor], rel_bias: Optional[torch.Tensor], comp: torch.dtype
) -> torch.Tensor:
    """Per query: its score for every label (``(q . e_n + bias_n) / sqrt(head_dim)``), then 0
    ("allowed, no label"), then a very negative number ("masked").

    Args:
        q_scaled: float ``[batch, heads, q_len, head_dim]`` (already multiplied by 1/sqrt(head_dim)).
        rel_emb: float ``[num_labels, heads, head_dim]`` or None (``num_labels = 0``).
        rel_bias: float ``[num_labels, heads]`` or None (only with ``rel_emb``).
        comp: the softmax dtype.

    Returns:
        comp ``[batch, heads, q_len, num_labels + 2]``.
    """
    b, h, n, _ = q_scaled.shape
    parts = []
    if rel_emb is not None:
        scores = torch.einsum("bhid,nhd->bhin", q_scaled, rel_emb)
        if rel_bias is not None:
            # [num_labels, heads] -> [1, heads, 1, num_labels], scaled like the dot products
            scores = scores + rel_bias.t()[None, :, None, :] * (1.0 / math.sqrt(q_scaled.shape[-1]))
        parts.append(scores.to(comp))
    extra = q_scaled.new_zeros((b, h, n, 2), dtype=comp)
    extra[..., 1] = torch.finfo(comp).min
    parts.append(extra)
    return torch.cat(parts, dim=-1) if len(parts) > 1 else extra


# ----------------------------------------------------------------------------
# chunked attention with recomputation
# ----------------------------------------------------------------------------


class _ChunkedAttention(torch.autograd.Function):
    """Queries in chunks against keys ``[part a | part b]``, probabilities recomputed in backward.

    Part a is either a sliding window (long queries, ``radius >= 0``: chunk ``c`` sees rows
    ``c*Q - r .. c*Q + Q - 1 + r`` of the long keys, zero keys beyond the ends) or the whole tensor
    (global queries, ``radius < 0``: all global keys); part b is always the whole tensor (global
    keys for long queries, long keys for global queries).

    forward(q, ka, va, kb, vb, rel_emb, rel_bias, codes, row_live, keep, chunk, radius, dropout_p):
        q: float ``[B, H, n, D]`` (unscaled); ka/va: float ``[B, H, na, D]``; kb/vb: float
        ``[B, H, nb, D]``; rel_emb: float ``[N, H, D]`` or None; rel_bias: float ``[N, H]`` or None; codes: uint8/int32
        ``[B, num_chunks, Q, ka_cols + nb]`` indices into the bias table (``ka_cols`` = ``Q + 2r``
        or ``na``); row_live: bool ``[B, n]``; keep: bool ``[B, H, num_chunks * Q, ka_cols + nb]``
        dropout keep-mask or None.
    Returns float ``[B, H, n, D]``.
    """

    @staticmethod
    def forward(ctx, q, ka, va, kb, vb, rel_emb, rel_bias, codes, row_live, keep,
                chunk: int, radius: int, dropout_p: float):  # type: ignore[override]
        ctx.chunk, ctx.radius, ctx.dropout_p = chunk, radius, dropout_p
        ctx.save_for_backward(q, ka, va, kb, vb, rel_emb, rel_bias, codes, row_live, keep)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        chunks = _iter_chunks(q, ka, va, kb, vb, rel_emb, rel_bias, codes, chunk, radius)
        for s, e, probs, qc, kc, vc, index in chunks:
            p = _apply_keep(probs, keep, s, dropout_p).to(q.dtype)
            out[:, :, s:e] = torch.matmul(p, vc)[:, :, : e - s]  # [B, H, Q, D]
        return out * row_live[:, None, :, None].to(out.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, ka, va, kb, vb, rel_emb, rel_bias, codes, row_live, keep = ctx.saved_tensors
        chunk, radius, dropout_p = ctx.chunk, ctx.radius, ctx.dropout_p
        B, H, n, D = q.shape
        scale = 1.0 / math.sqrt(D)
        dtype = q.dtype
        comp = softmax_dtype(dtype)
        n_pad = codes.shape[1] * chunk
        # rows with no allowed key had their output zeroed: no gradient flows through them
        g = (grad_out * row_live[:, None, :, None].to(grad_out.dtype)).to(dtype)
        g = F.pad(g, (0, 0, 0, n_pad - n))  # [B, H, n_pad, D]
        window = radius >= 0
        dq = q.new_empty((B, H, n_pad, D))  # grad w.r.t. the scaled queries
        if window:
            dka = q.new_zeros((B, H, n_pad + 2 * radius, D))  # like the zero-padded forward keys
            dva = torch.zeros_like(dka)
        else:
            dka = torch.zeros_like(ka, memory_format=torch.contiguous_format)
            dva = torch.zeros_like(va, memory_format=torch.contiguous_format)
        dkb = torch.zeros_like(kb, memory_format=torch.contiguous_format)
        dvb = torch.zeros_like(vb, memory_format=torch.contiguous_format)
        n_labels = rel_emb.shape[0] if rel_emb is not None else 0
        # bias-table gradient, one contiguous [B, H, Q, N + 2] slab per chunk; each chunk scatters
        # into a reused [B, H, Q, SPREAD * (N + 2)] scratch first (see _SCATTER_SPREAD): key column
        # k accumulates into copy k % SPREAD of its code's entry, then the copies are summed
        n_codes = n_labels + 2
        dtable = spread = scratch = None
        if rel_emb is not None:
            dtable = q.new_empty((codes.shape[1], B, H, chunk, n_codes), dtype=comp)
            scratch = q.new_empty((B, H, chunk, _SCATTER_SPREAD * n_codes), dtype=comp)
            spread = (torch.arange(codes.shape[-1], device=q.device) % _SCATTER_SPREAD) * n_codes  # [K]
        chunks = _iter_chunks(q, ka, va, kb, vb, rel_emb, rel_bias, codes, chunk, radius)
        for s, e, probs, qc, kc, vc, index in chunks:
            gc = g[:, :, s:s + chunk]  # [B, H, Q, D]
            wa = kc.shape[2] - kb.shape[2]
            a0 = s if window else 0
            p = _apply_keep(probs, keep, s, dropout_p).to(dtype)
            dvc = torch.matmul(p.transpose(-1, -2), gc)  # [B, H, ka_cols + nb, D]
            dva[:, :, a0:a0 + wa] += dvc[:, :, :wa]
            dvb += dvc[:, :, wa:]
            dp = _apply_keep(torch.matmul(gc, vc.transpose(-1, -2)).to(comp), keep, s, dropout_p)
            # softmax backward, fused: probs * (dp - sum(dp * probs))
            dlogits = torch._softmax_backward_data(dp, probs, -1, comp)  # [B, H, Q, ka_cols + nb]
            if dtable is not None:
                spread_index = (index[:, :1] + spread).expand(index.shape)  # the gather's codes, spread
                scratch.zero_().scatter_add_(-1, spread_index, dlogits)
                # [B, H, Q, SPREAD, N + 2] -> [B, H, Q, N + 2]
                torch.sum(scratch.view(B, H, chunk, _SCATTER_SPREAD, n_codes), dim=3, out=dtable[s // chunk])
            dl = dlogits.to(dtype)
            dq[:, :, s:s + chunk] = torch.matmul(dl, kc)
            dkc = torch.matmul(dl.transpose(-1, -2), qc)  # [B, H, ka_cols + nb, D]
            dka[:, :, a0:a0 + wa] += dkc[:, :, :wa]
            dkb += dkc[:, :, wa:]
        dq = dq[:, :, :n]
        d_rel = d_bias = None
        if dtable is not None:
            dtable = dtable.permute(1, 2, 0, 3, 4).reshape(B, H, n_pad, n_codes)
            dscores = dtable[:, :, :n, :n_labels].to(dtype)  # [B, H, n, N]
            dq += torch.einsum("bhin,nhd->bhid", dscores, rel_emb)
            d_rel = torch.einsum("bhin,bhid->nhd", dscores, q * scale)
            if rel_bias is not None:
                d_bias = dscores.sum(dim=(0, 2)).t() * scale  # [H, N] -> [N, H]
        if window:
            dka = dka[:, :, radius:radius + ka.shape[2]]
            dva = dva[:, :, radius:radius + va.shape[2]]
        return dq * scale, dka, dva, dkb, dvb, d_rel, d_bias, None, None, None, None, None, None


def _apply_keep(x: torch.Tensor, keep: Optional[torch.Tensor], s: int, p: float) -> torch.Tensor:
    """Attention dropout on one chunk: ``x * keep / (1 - p)`` (all zeros for ``p >= 1``).

    x: float ``[B, H, Q, K]``; keep: bool ``[B, H, n_pad, K]`` or None.
    """
    if keep is None or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    k = keep[:, :, s:s + x.shape[2]]
    return x * k.to(x.dtype) * (1.0 / (1.0 - p))


def _iter_chunks(q, ka, va, kb, vb, rel_emb, rel_bias, codes, chunk, radius):
    """Yield ``(start, end, probs, q_chunk, k_chunk, v_chunk, index)`` for every query chunk.

    ``probs``: comp ``[B, H, Q, ka_cols + nb]`` (``Q = chunk``; queries past ``end`` are zero rows);
    ``q_chunk``: the scaled queries ``[B, H, Q, D]``; ``k_chunk``/``v_chunk``: the keys/values the
    chunk sees, part a then part b, ``[B, H, ka_cols + nb, D]``; ``index``: the int64 codes expanded
    over the heads ``[B, H, Q, ka_cols + nb]`` (what the bias gather used).
    """
    B, H, n, D = q.shape
    comp = softmax_dtype(q.dtype)
    n_chunks = codes.shape[1]
    n_pad = n_chunks * chunk
    qs = F.pad(q * (1.0 / math.sqrt(D)), (0, 0, 0, n_pad - n))  # [B, H, n_pad, D]
    table = _bias_table(qs, rel_emb, rel_bias, comp)  # [B, H, n_pad, N + 2]
    window = radius >= 0
    if window:
        # zero keys: r before the start, r (+ the query padding) after the end
        ka = F.pad(ka, (0, 0, radius, radius + n_pad - n))  # [B, H, n_pad + 2r, D]
        va = F.pad(va, (0, 0, radius, radius + n_pad - n))
    else:
        kc, vc = torch.cat([ka, kb], dim=2), torch.cat([va, vb], dim=2)  # [B, H, na + nb, D]
    w = chunk + 2 * radius
    for c in range(n_chunks):
        s = c * chunk
        qc = qs[:, :, s:s + chunk]
        if window:
            kc = torch.cat([ka[:, :, s:s + w], kb], dim=2)  # [B, H, Q + 2r + nb, D]
            vc = torch.cat([va[:, :, s:s + w], vb], dim=2)
        cols = codes.shape[-1]
        index = codes[:, c].long().unsqueeze(1).expand(B, H, chunk, cols)
        bias = torch.gather(table[:, :, s:s + chunk], -1, index)  # comp [B, H, Q, ka_cols + nb]
        if q.dtype == comp:
            # logits = bias + q.k^T in one GEMM pass (beta = 1 accumulates into the bias)
            logits = bias
            logits.view(B * H, chunk, cols).baddbmm_(
                qc.reshape(B * H, chunk, D), kc.reshape(B * H, cols, D).transpose(1, 2)
            )
        else:  # half precision: the product in q's dtype, the softmax in float32
            logits = torch.matmul(qc, kc.transpose(-1, -2)).to(comp).add_(bias)
        probs = torch.softmax(logits, dim=-1)
        yield s, min(s + chunk, n), probs, qc, kc, vc, index


def chunk_codes(codes_a: torch.Tensor, codes_b: torch.Tensor, radius: int, chunk: int, masked: int) -> torch.Tensor:
    """The per-chunk code layout the kernel indexes its bias table with.

    Args:
        codes_a: uint8/int32 ``[B, n, 2r+1]`` band codes (``radius >= 0``) or ``[B, n, na]`` (``radius < 0``).
        codes_b: same dtype ``[B, n, nb]``.
        radius: ``r`` of the sliding window, or ``-1`` for a plain (non-window) part a.
        chunk: queries per chunk ``Q``.
        masked: the "masked" code (``num_labels + 1``), used for padding rows and out-of-band columns.

    Returns:
        same dtype ``[B, n_chunks, Q, ka_cols + nb]`` (``ka_cols`` = ``Q + 2r`` or ``na``).
    """
    B, n = codes_b.shape[:2]
    n_chunks = -(-n // chunk)
    n_pad = n_chunks * chunk
    if radius >= 0:
        ca = band_to_windows(codes_a, radius, chunk, masked)  # [B, n_chunks, Q, Q + 2r]
    else:
        ca = F.pad(codes_a, (0, 0, 0, n_pad - n), value=masked).view(B, n_chunks, chunk, -1)
    cb = F.pad(codes_b, (0, 0, 0, n_pad - n), value=masked).view(B, n_chunks, chunk, -1)
    return torch.cat([ca, cb], dim=-1)


def _chunked_attention(q, ka, va, kb, vb, rel_emb, rel_bias, codes_a, codes_b, row_live, chunk, radius,
                       dropout_p):
    """Lay the codes out by chunk and run :class:`_ChunkedAttention` (sampling the dropout mask).

    codes_a: ``[B, n, 2r+1]`` band codes (``radius >= 0``) or ``[B, n, na]``; codes_b: ``[B, n, nb]``.
    """
    B, H, n, D = q.shape
    n_pad = -(-n // chunk) * chunk
    masked = (rel_emb.shape[0] if rel_emb is not None else 0) + 1
    codes = chunk_codes(codes_a, codes_b, radius, chunk, masked)  # [B, n_chunks, Q, ka_cols + nb]
    keep = None
    if dropout_p > 0.0:
        keep = torch.rand((B, H, n_pad, codes.shape[-1]), device=q.device) >= dropout_p
    return _ChunkedAttention.apply(
        q, ka, va, kb, vb, rel_emb, rel_bias, codes, row_live, keep, chunk, radius, float(dropout_p)
    )


# ----------------------------------------------------------------------------
# the two halves
# ----------------------------------------------------------------------------


def long_query_attention(
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
    chunk: Optional[int] = None,
) -> torch.Tensor:
    """Long queries -> (local long keys + all global keys), one softmax, chunked l2l.

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
        rel_bias: float ``[num_labels, heads]`` per-label bias or None (needs ``rel_emb``); added to
            ``q . e`` before the ``1/sqrt(head_dim)`` scaling.
        dropout_p: dropout on the attention probabilities (0 in eval).
        chunk: long queries per chunk (default :data:`LONG_CHUNK`, capped at ``long_len``).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    long_len = long_q.shape[2]
    if long_len == 0:
        # nothing to attend from; keep the (empty) result attached to the graph
        return long_q * 0.0
    # Radius larger than the sequence: keep only the slots that can be valid.
    r_eff, local_mask, l2l_rel = effective_band(l2l_mask, l2l_rel, local_radius)  # [B, L, 2r+1]
    n_labels = rel_emb.shape[0] if rel_emb is not None else 0
    codes_local = pair_codes(local_mask, l2l_rel, n_labels, rel_emb is not None)  # [B, L, 2r+1]
    codes_global = pair_codes(l2g_mask, l2g_rel, n_labels, rel_emb is not None)  # [B, L, G]
    row_live = local_mask.any(-1) | l2g_mask.any(-1)  # [B, L]
    q_chunk = max(1, min(int(chunk or LONG_CHUNK), long_len))
    return _chunked_attention(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, rel_emb if n_labels else None, rel_bias if n_labels else None,
        codes_local, codes_global, row_live, q_chunk, r_eff, dropout_p,
    )


def global_query_attention(
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
    chunk: Optional[int] = None,
) -> torch.Tensor:
    """Global queries -> (all global keys + all long keys), one softmax, chunked over the queries.

    Args:
        global_q: float ``[batch, heads, global_len, head_dim]``.
        g2g_k, g2g_v: float ``[batch, heads, global_len, head_dim]`` global keys/values seen by global queries.
        g2l_k, g2l_v: float ``[batch, heads, long_len, head_dim]`` long keys/values seen by global queries.
        g2g_mask: bool ``[batch, global_len, global_len]``.
        g2l_mask: bool ``[batch, global_len, long_len]``.
        g2g_rel: int64 ``[batch, global_len, global_len]`` label ids or None.
        g2l_rel: int64 ``[batch, global_len, long_len]`` label ids or None.
        rel_emb: float ``[num_labels, heads, head_dim]`` label key vectors or None.
        rel_bias: float ``[num_labels, heads]`` per-label bias or None (needs ``rel_emb``).
        dropout_p: dropout on the attention probabilities (0 in eval).
        chunk: global queries per chunk (default :data:`GLOBAL_CHUNK`, capped at ``global_len``).

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    global_len = global_q.shape[2]
    if global_len == 0:
        return global_q * 0.0
    n_labels = rel_emb.shape[0] if rel_emb is not None else 0
    codes_gg = pair_codes(g2g_mask, g2g_rel, n_labels, rel_emb is not None)  # [B, G, G]
    codes_gl = pair_codes(g2l_mask, g2l_rel, n_labels, rel_emb is not None)  # [B, G, L]
    row_live = g2g_mask.any(-1) | g2l_mask.any(-1)  # [B, G]
    g_chunk = max(1, min(int(chunk or GLOBAL_CHUNK), global_len))
    return _chunked_attention(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, rel_emb if n_labels else None, rel_bias if n_labels else None,
        codes_gg, codes_gl, row_live, g_chunk, -1, dropout_p,
    )
