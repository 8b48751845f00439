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

:mod:`.autograd_blocked` holds the previous plain-autograd 3-block version of the same
function, kept as a second exact reference and as a benchmark baseline.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .common import (
    validate_global_local_inputs,
    validate_global_query_inputs,
    validate_long_query_inputs,
)

__all__ = [
    "global_local_attention",
    "long_query_attention",
    "global_query_attention",
    "band_to_blocked",
    "blocked_to_band",
    "band_key_in_range",
    "band_to_windows",
    "chunk_codes",
    "LONG_CHUNK",
    "GLOBAL_CHUNK",
    "IMPLEMENTATION",
]

#: Long queries per chunk (``Q``).  Larger chunks waste more local work (``Q + 2r`` keys per query
#: for ``2r + 1`` needed) but run fewer, larger matrix products; ``benchmarks/kernel_efficiency.py
#: --chunks`` measures the trade-off.
LONG_CHUNK = 128
#: Global queries per chunk.
GLOBAL_CHUNK = 64
#: Which implementation :func:`long_query_attention` / :func:`global_query_attention` run:
#: ``"chunked"`` (this module's kernel, default) or ``"autograd"`` (the previous plain-autograd
#: 3-block kernel of :mod:`.autograd_blocked`: same results, ~6x more attention memory; on a loaded
#: 2-core machine it was faster with 2 threads, the chunked one with 1 thread -- see
#: ``benchmarks/README.md``).
IMPLEMENTATION = "chunked"
#: Copies of each code's gradient entry that backward's ``scatter_add_`` spreads the key columns
#: over (column ``k`` -> copy ``k % SPREAD``).  Real codes come in long runs (a clipped relative
#: distance, "masked", "not in this segment"), so with one copy consecutive adds hit the same
#: address and wait for each other; with 4 copies consecutive columns go to different addresses
#: (2.5x faster at 4096: ``benchmarks/kernel_alternatives.py``).
_SCATTER_SPREAD = 4


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


def band_key_in_range(long_len: int, local_radius: int, device=None) -> torch.Tensor:
    """Which band slots point at a real key: ``0 <= i + w - r < long_len``.

    Returns:
        bool ``[long_len, 2*r+1]``.
    """
    r = int(local_radius)
    i = torch.arange(long_len, device=device).unsqueeze(1)
    w = torch.arange(2 * r + 1, device=device).unsqueeze(0)
    j = i + w - r
    return (j >= 0) & (j < long_len)


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


def _effective_radius(local_radius: int, long_len: int) -> int:
    """``min(r, long_len - 1)`` (at least 0): slots beyond it can never hold a real key."""
    return max(0, min(int(local_radius), long_len - 1))


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


def _softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 / bfloat16 softmaxes are computed in float32; float32 / float64 in themselves."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _bias_table(q_scaled: torch.Tensor, rel_emb: Optional[torch.Tensor], comp: torch.dtype) -> torch.Tensor:
    """Per query: its score for every label, then 0 ("allowed, no label"), then a very negative
    number ("masked").

    Args:
        q_scaled: float ``[batch, heads, q_len, head_dim]`` (already multiplied by 1/sqrt(head_dim)).
        rel_emb: float ``[num_labels, heads, head_dim]`` or None (``num_labels = 0``).
        comp: the softmax dtype.

    Returns:
        comp ``[batch, heads, q_len, num_labels + 2]``.
    """
    b, h, n, _ = q_scaled.shape
    parts = []
    if rel_emb is not None:
        parts.append(torch.einsum("bhid,nhd->bhin", q_scaled, rel_emb).to(comp))
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

    forward(q, ka, va, kb, vb, rel_emb, codes, row_live, keep, chunk, radius, dropout_p):
        q: float ``[B, H, n, D]`` (unscaled); ka/va: float ``[B, H, na, D]``; kb/vb: float
        ``[B, H, nb, D]``; rel_emb: float ``[N, H, D]`` or None; codes: uint8/int32
        ``[B, num_chunks, Q, ka_cols + nb]`` indices into the bias table (``ka_cols`` = ``Q + 2r``
        or ``na``); row_live: bool ``[B, n]``; keep: bool ``[B, H, num_chunks * Q, ka_cols + nb]``
        dropout keep-mask or None.
    Returns float ``[B, H, n, D]``.
    """

    @staticmethod
    def forward(ctx, q, ka, va, kb, vb, rel_emb, codes, row_live, keep,
                chunk: int, radius: int, dropout_p: float):  # type: ignore[override]
        ctx.chunk, ctx.radius, ctx.dropout_p = chunk, radius, dropout_p
        ctx.save_for_backward(q, ka, va, kb, vb, rel_emb, codes, row_live, keep)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        for s, e, probs, qc, kc, vc, index in _iter_chunks(q, ka, va, kb, vb, rel_emb, codes, chunk, radius):
            p = _apply_keep(probs, keep, s, dropout_p).to(q.dtype)
            out[:, :, s:e] = torch.matmul(p, vc)[:, :, : e - s]  # [B, H, Q, D]
        return out * row_live[:, None, :, None].to(out.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, ka, va, kb, vb, rel_emb, codes, row_live, keep = ctx.saved_tensors
        chunk, radius, dropout_p = ctx.chunk, ctx.radius, ctx.dropout_p
        B, H, n, D = q.shape
        scale = 1.0 / math.sqrt(D)
        dtype = q.dtype
        comp = _softmax_dtype(dtype)
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
        for s, e, probs, qc, kc, vc, index in _iter_chunks(q, ka, va, kb, vb, rel_emb, codes, chunk, radius):
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
        d_rel = None
        if dtable is not None:
            dtable = dtable.permute(1, 2, 0, 3, 4).reshape(B, H, n_pad, n_codes)
            dscores = dtable[:, :, :n, :n_labels].to(dtype)  # [B, H, n, N]
            dq += torch.einsum("bhin,nhd->bhid", dscores, rel_emb)
            d_rel = torch.einsum("bhin,bhid->nhd", dscores, q * scale)
        if window:
            dka = dka[:, :, radius:radius + ka.shape[2]]
            dva = dva[:, :, radius:radius + va.shape[2]]
        return dq * scale, dka, dva, dkb, dvb, d_rel, None, None, None, None, None, None


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


def _iter_chunks(q, ka, va, kb, vb, rel_emb, codes, chunk, radius):
    """Yield ``(start, end, probs, q_chunk, k_chunk, v_chunk, index)`` for every query chunk.

    ``probs``: comp ``[B, H, Q, ka_cols + nb]`` (``Q = chunk``; queries past ``end`` are zero rows);
    ``q_chunk``: the scaled queries ``[B, H, Q, D]``; ``k_chunk``/``v_chunk``: the keys/values the
    chunk sees, part a then part b, ``[B, H, ka_cols + nb, D]``; ``index``: the int64 codes expanded
    over the heads ``[B, H, Q, ka_cols + nb]`` (what the bias gather used).
    """
    B, H, n, D = q.shape
    comp = _softmax_dtype(q.dtype)
    n_chunks = codes.shape[1]
    n_pad = n_chunks * chunk
    qs = F.pad(q * (1.0 / math.sqrt(D)), (0, 0, 0, n_pad - n))  # [B, H, n_pad, D]
    table = _bias_table(qs, rel_emb, comp)  # [B, H, n_pad, N + 2]
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


def _chunked_attention(q, ka, va, kb, vb, rel_emb, codes_a, codes_b, row_live, chunk, radius, dropout_p):
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
        q, ka, va, kb, vb, rel_emb, codes, row_live, keep, chunk, radius, float(dropout_p)
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
        dropout_p: dropout on the attention probabilities (0 in eval).
        chunk: long queries per chunk (default :data:`LONG_CHUNK`, capped at ``long_len``).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    if IMPLEMENTATION == "autograd":
        from .autograd_blocked import autograd_long_query_attention

        return autograd_long_query_attention(
            long_q, l2l_k, l2l_v, l2g_k, l2g_v, local_radius=local_radius, l2l_mask=l2l_mask,
            l2g_mask=l2g_mask, l2l_rel=l2l_rel, l2g_rel=l2g_rel, rel_emb=rel_emb, dropout_p=dropout_p,
        )
    r = int(local_radius)
    validate_long_query_inputs(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, r, l2l_mask, l2g_mask, l2l_rel, l2g_rel, rel_emb
    )
    batch, heads, long_len, head_dim = long_q.shape
    if long_len == 0:
        # nothing to attend from; keep the (empty) result attached to the graph
        return long_q * 0.0
    # Radius larger than the sequence: keep only the slots that can be valid.
    r_eff = _effective_radius(r, long_len)
    if r_eff != r:
        l2l_mask = l2l_mask[:, :, r - r_eff : r + r_eff + 1]
        if l2l_rel is not None:
            l2l_rel = l2l_rel[:, :, r - r_eff : r + r_eff + 1]
    n_labels = rel_emb.shape[0] if rel_emb is not None else 0
    local_mask = l2l_mask & band_key_in_range(long_len, r_eff, l2l_mask.device)  # [B, L, 2r+1]
    codes_local = pair_codes(local_mask, l2l_rel, n_labels, rel_emb is not None)  # [B, L, 2r+1]
    codes_global = pair_codes(l2g_mask, l2g_rel, n_labels, rel_emb is not None)  # [B, L, G]
    row_live = local_mask.any(-1) | l2g_mask.any(-1)  # [B, L]
    q_chunk = max(1, min(int(chunk or LONG_CHUNK), long_len))
    return _chunked_attention(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, rel_emb if n_labels else None,
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
        dropout_p: dropout on the attention probabilities (0 in eval).
        chunk: global queries per chunk (default :data:`GLOBAL_CHUNK`, capped at ``global_len``).

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    if IMPLEMENTATION == "autograd":
        from .autograd_blocked import autograd_global_query_attention

        return autograd_global_query_attention(
            global_q, g2g_k, g2g_v, g2l_k, g2l_v, g2g_mask=g2g_mask, g2l_mask=g2l_mask,
            g2g_rel=g2g_rel, g2l_rel=g2l_rel, rel_emb=rel_emb, dropout_p=dropout_p,
        )
    validate_global_query_inputs(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, g2g_mask, g2l_mask, g2g_rel, g2l_rel, rel_emb
    )
    global_len = global_q.shape[2]
    if global_len == 0:
        return global_q * 0.0
    n_labels = rel_emb.shape[0] if rel_emb is not None else 0
    codes_gg = pair_codes(g2g_mask, g2g_rel, n_labels, rel_emb is not None)  # [B, G, G]
    codes_gl = pair_codes(g2l_mask, g2l_rel, n_labels, rel_emb is not None)  # [B, G, L]
    row_live = g2g_mask.any(-1) | g2l_mask.any(-1)  # [B, G]
    g_chunk = max(1, min(int(chunk or GLOBAL_CHUNK), global_len))
    return _chunked_attention(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, rel_emb if n_labels else None,
        codes_gg, codes_gl, row_live, g_chunk, -1, dropout_p,
    )


def global_local_attention(
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
    """ETC global-local attention with shared keys/values (chunked l2l).

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
    long_out = long_query_attention(
        long_q, long_k, long_v, global_k, global_v,
        local_radius=local_radius, l2l_mask=l2l_mask, l2g_mask=l2g_mask,
        l2l_rel=l2l_rel, l2g_rel=l2g_rel, rel_emb=long_rel_emb, dropout_p=dropout_p,
    )
    global_out = global_query_attention(
        global_q, global_k, global_v, long_k, long_v,
        g2g_mask=g2g_mask, g2l_mask=g2l_mask,
        g2g_rel=g2g_rel, g2l_rel=g2l_rel, rel_emb=global_rel_emb, dropout_p=dropout_p,
    )
    return long_out, global_out
