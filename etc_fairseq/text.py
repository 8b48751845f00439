"""SQuAD-style answer normalisation and token-level precision / recall / F1, shared by the QA metrics.

These are the definitions of the SQuAD v1.1 evaluation script, which the HotpotQA official script reuses:

- :func:`normalize_answer`: lower-case, drop ASCII punctuation (``string.punctuation``), drop the articles
  ``a``, ``an``, ``the`` (as whole words), collapse whitespace. Applied in that order.
- :func:`token_prf`: bag-of-tokens overlap of the two normalised strings (whitespace tokens, multiset
  intersection). No overlap (including an empty side) gives ``(0, 0, 0)``.
- :func:`exact_match`: the normalised strings are equal.

And the content words the lexical baselines of ``nextsent`` and ``wikihop`` compare (:func:`content_words`).
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Tuple

__all__ = ["normalize_answer", "exact_match", "token_prf", "STOPWORDS", "content_words"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """``"The  Eiffel-Tower!"`` -> ``"eiffeltower"``: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 if the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_prf(prediction: str, gold: str) -> Tuple[float, float, float]:
    """(precision, recall, F1) of the normalised whitespace tokens (multiset overlap); zeros if none shared."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return precision, recall, 2 * precision * recall / (precision + recall)


_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)

#: frequent English function words the word-overlap baselines ignore
STOPWORDS = frozenset(
    "the and for are was were with that this from which his her its their they them has have had not but "
    "also been one two who whom into than then there these those such when where while would could should "
    "about after before other more most some over only being all any may can will both each between during "
    "under what him she our out".split()
)


def content_words(text: str) -> set:
    """Lower-cased words of at least 3 letters, minus :data:`STOPWORDS`."""
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS}
