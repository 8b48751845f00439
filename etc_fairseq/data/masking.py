"""Masking for ETC pre-training (paper Sec. 3.5, appendices B and C) as pure numpy functions.

Order per example (what :class:`~etc_fairseq.data.pretraining_dataset.PretrainingDataset` does):

1. :func:`choose_cpc_sentences`: pick ``cpc_sentence_prob`` of the sentences for CPC; ALL their long tokens
   become ``<mask>`` and their global token gets type ``CPC_MASK``.
2. :func:`whole_word_mask`: pick ``mask_prob`` of the remaining (eligible) tokens for MLM, whole words only.
3. :func:`apply_80_10_10`: of the MLM-picked tokens, 80% become ``<mask>``, 10% a random token, 10% stay.

Every function takes a ``numpy.random.Generator`` and uses no global random state.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from etc_fairseq.errors import ConfigError

__all__ = ["word_ids", "whole_word_mask", "choose_cpc_sentences", "apply_80_10_10"]


def _check_prob(name: str, p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {p}")
    return p


def word_ids(word_starts: np.ndarray, eligible: Optional[np.ndarray] = None) -> np.ndarray:
    """Word index of every token, -1 for tokens that are not eligible.

    A word begins at a token with ``word_starts`` True, and also at an eligible token that follows an
    ineligible one (so a word never spans an ineligible token).

    Args:
        word_starts: bool ``[n]``.
        eligible: bool ``[n]`` (default all True).
    Returns:
        int64 ``[n]``: word ids ``0 .. num_words-1`` in order, -1 at ineligible tokens.
    """
    word_starts = np.asarray(word_starts, dtype=bool)
    n = len(word_starts)
    eligible = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if eligible.shape != word_starts.shape:
        raise ValueError(f"eligible {eligible.shape} and word_starts {word_starts.shape} differ in shape")
    prev_eligible = np.concatenate([[False], eligible[:-1]]) if n else eligible
    starts = eligible & (word_starts | ~prev_eligible)
    ids = np.cumsum(starts) - 1
    return np.where(eligible, ids, -1).astype(np.int64)


def whole_word_mask(
    word_starts: np.ndarray,
    eligible: Optional[np.ndarray],
    mask_prob: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Pick whole words for MLM: if one piece of a word is picked, all its pieces are.

    ``floor(mask_prob * num_words + u)`` words (``u`` uniform in [0, 1)) are drawn without replacement
    among the eligible words, so the expected fraction of picked words is exactly ``mask_prob`` and, as
    the words are drawn uniformly, so is the expected fraction of picked eligible tokens.

    Args:
        word_starts: bool ``[n]``, True where a token begins a word.
        eligible: bool ``[n]`` tokens that may be picked (None = all); see :func:`word_ids`.
        mask_prob: fraction to pick.
        rng: the random generator.
    Returns:
        bool ``[n]``, True at picked tokens (never at ineligible ones).
    """
    mask_prob = _check_prob("mask_prob", mask_prob)
    ids = word_ids(word_starts, eligible)
    num_words = int(ids.max()) + 1 if len(ids) else 0
    if num_words == 0:
        return np.zeros(len(ids), dtype=bool)
    k = min(num_words, int(np.floor(mask_prob * num_words + rng.random())))
    chosen = np.zeros(num_words + 1, dtype=bool)  # last slot: the -1 (ineligible) id
    chosen[rng.choice(num_words, size=k, replace=False)] = True
    return chosen[ids]


def choose_cpc_sentences(
    sentence_groups: Sequence[int],
    cpc_prob: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Pick sentences whose long tokens are masked for CPC.

    Sentences are grouped (a group = one document / packed piece of an example). In every group of
    ``n >= 2`` sentences, ``min(n - 1, floor(cpc_prob * n + u))`` sentences are drawn without replacement
    (expected fraction ``cpc_prob`` when ``cpc_prob * n <= n - 1``): a group always keeps at least one
    visible sentence, so the masked ones can be predicted from context. Groups of one sentence are skipped
    (nothing to predict it from).

    Args:
        sentence_groups: int ``[num_sentences]``, group id of each sentence (any ints).
        cpc_prob: fraction of sentences to pick.
        rng: the random generator.
    Returns:
        bool ``[num_sentences]``.
    """
    cpc_prob = _check_prob("cpc_prob", cpc_prob)
    groups = np.asarray(sentence_groups, dtype=np.int64)
    out = np.zeros(len(groups), dtype=bool)
    if cpc_prob == 0.0 or len(groups) == 0:
        return out
    for g in np.unique(groups):  # sorted: deterministic draw order
        members = np.flatnonzero(groups == g)
        n = len(members)
        if n < 2:
            continue
        k = min(n - 1, int(np.floor(cpc_prob * n + rng.random())))
        if k > 0:
            out[rng.choice(members, size=k, replace=False)] = True
    return out


def apply_80_10_10(
    tokens: np.ndarray,
    picked: np.ndarray,
    mask_idx: int,
    random_choices: np.ndarray,
    rng: np.random.Generator,
    leave_unmasked_prob: float = 0.1,
    random_token_prob: float = 0.1,
) -> np.ndarray:
    """BERT's corruption of MLM-picked tokens: ``<mask>`` / random token / unchanged.

    Each picked token independently stays unchanged with probability ``leave_unmasked_prob``, becomes a
    token drawn uniformly from ``random_choices`` with probability ``random_token_prob``, and becomes
    ``mask_idx`` otherwise.

    Args:
        tokens: int ``[n]``, the tokens (not modified).
        picked: bool ``[n]``, the MLM-picked positions.
        mask_idx: the ``<mask>`` id.
        random_choices: int ``[m]``, the ids a random replacement is drawn from (``m >= 1`` if used).
        rng: the random generator.
        leave_unmasked_prob, random_token_prob: the two minority fractions.
    Returns:
        int64 ``[n]``, the corrupted tokens (equal to ``tokens`` outside ``picked``).
    """
    leave = _check_prob("leave_unmasked_prob", leave_unmasked_prob)
    rand = _check_prob("random_token_prob", random_token_prob)
    if leave + rand > 1.0:
        raise ConfigError(f"leave_unmasked_prob + random_token_prob must be <= 1, got {leave + rand}")
    tokens = np.asarray(tokens, dtype=np.int64)
    picked = np.asarray(picked, dtype=bool)
    out = tokens.copy()
    u = rng.random(len(tokens))
    to_random = picked & (u >= leave) & (u < leave + rand)
    to_mask = picked & (u >= leave + rand)
    out[to_mask] = mask_idx
    n_random = int(to_random.sum())
    if n_random:
        random_choices = np.asarray(random_choices, dtype=np.int64)
        if len(random_choices) == 0:
            raise ValueError("random_choices is empty but random_token_prob > 0 picked tokens")
        out[to_random] = random_choices[rng.integers(0, len(random_choices), size=n_random)]
    return out
