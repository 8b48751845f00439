"""Answer-span decoding as pure functions (numpy), shared by ``etc-predict`` and the criterions' metrics.

HotpotQA's rules (paper appendix C, "Inference"): the start and end of a span lie in the same unit (a
sentence or a title), the unit belongs to a predicted supporting fact, start <= end, the span has at most
``max_len`` tokens, and among the spans satisfying all that the one with the highest
``start_prob * end_prob`` wins (equivalently the highest ``start_logprob + end_logprob``).
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
from etc_fairseq.errors import ConfigError

__all__ = ["log_softmax", "best_span_in_range", "best_span", "select_above_threshold"]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float [n] -> float64 [n]: log of the softmax over all entries (``-inf`` entries stay ``-inf``)."""
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x) if x.size else 0.0
    if not np.isfinite(m):
        return np.full_like(x, -np.inf)
    return x - m - np.log(np.sum(np.exp(x - m)))


def best_span_in_range(
    start_scores: np.ndarray, end_scores: np.ndarray, lo: int, hi: int, max_len: int
) -> Optional[Tuple[float, int, int]]:
    """The best span inside ``[lo, hi)``.

    Args:
        start_scores, end_scores: float [n] log-probabilities of each position being the start / end.
        lo, hi: the unit's positions ``lo <= i < hi``.
        max_len: most tokens in a span (``end - start + 1 <= max_len``), >= 1.
    Returns:
        ``(start_scores[s] + end_scores[e], s, e)`` with the highest score (ties: smallest ``s``, then ``e``),
        or None if the range is empty.
    """
    if max_len < 1:
        raise ConfigError(f"max_len must be >= 1, got {max_len}")
    if hi <= lo:
        return None
    s = np.asarray(start_scores[lo:hi], dtype=np.float64)  # [n]
    e = np.asarray(end_scores[lo:hi], dtype=np.float64)  # [n]
    n = hi - lo
    total = s[:, None] + e[None, :]  # [n, n]: start i, end j
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = (j >= i) & (j - i < max_len)  # [n, n]
    total = np.where(allowed, total, -np.inf)
    flat = int(np.argmax(total))  # first maximum in row-major order: smallest start, then end
    bi, bj = divmod(flat, n)
    return float(total[bi, bj]), lo + bi, lo + bj


def best_span(
    start_scores: np.ndarray, end_scores: np.ndarray, ranges: Iterable[Tuple[int, int]], max_len: int
) -> Optional[Tuple[float, int, int]]:
    """The best :func:`best_span_in_range` over several units ``[(lo, hi), ...]`` (ties: the earlier unit).

    Returns None if every range is empty.
    """
    best = None
    for lo, hi in ranges:
        cand = best_span_in_range(start_scores, end_scores, lo, hi, max_len)
        if cand is not None and (best is None or cand[0] > best[0]):
            best = cand
    return best


def select_above_threshold(probs: Sequence[float], threshold: float) -> List[int]:
    """Indices ``i`` with ``probs[i] >= threshold``, in order (supporting-fact selection)."""
    return [i for i, p in enumerate(probs) if p >= threshold]
