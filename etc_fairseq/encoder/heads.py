"""Output heads on the encoder's features (no fairseq).

- :class:`LMHead`: masked-LM logits, output matrix tied to the token embeddings (RoBERTa's head:
  dense -> activation -> LayerNorm -> tied projection + bias; same parameter names).
- :class:`PooledClassifier`: RoBERTa-style classifier on one token's features.
- :class:`ClassificationHead`: the same on the first token of a sequence (``classification_heads``).
- :class:`TokenLogits`: one linear map per token (span starts/ends, one logit per global token).
- :class:`QueryCosineScorer`: one logit per item from its scaled cosine with a query vector
  (:func:`scaled_cosine`; a sentence against the question).

Task-specific heads (OpenKP's n-gram convolutions, visual features) live with their task's code.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layer import get_activation_fn


class LMHead(nn.Module):
    """features float [batch, len, dim] -> logits float [batch, len, vocab] (or [num_masked, vocab]
    given ``masked_tokens`` bool [batch, len]).

    ``weight``: the token embedding table float [vocab, embedding_size] (tied); the dense layer maps
    the model width to ``embedding_size`` (equal to the width unless the embeddings are projected).
    ``layer_norm_eps``: epsilon of its LayerNorm, the encoder's (BERT's head uses 1e-12 like its layers).
    """

    def __init__(self, dim: int, weight: nn.Parameter, activation_fn: str, layer_norm_eps: float = 1e-5):
        super().__init__()
        emb = weight.shape[1]
        self.dense = nn.Linear(dim, emb)
        self.activation_fn = get_activation_fn(activation_fn)
        self.layer_norm = nn.LayerNorm(emb, eps=layer_norm_eps)
        self.weight = weight
        self.bias = nn.Parameter(torch.zeros(weight.shape[0]))

    def forward(self, features: torch.Tensor, masked_tokens: Optional[torch.Tensor] = None) -> torch.Tensor:
        if masked_tokens is not None:
            features = features[masked_tokens, :]  # [num_masked, dim]
        x = self.layer_norm(self.activation_fn(self.dense(features)))
        return F.linear(x, self.weight) + self.bias


class TokenLogits(nn.Module):
    """One linear map per token: features float [B, T, D] -> logits float [B, T, num_outputs]
    (e.g. span start/end on long tokens: 2 outputs; one logit per sentence or candidate global token: 1)."""

    def __init__(self, dim: int, num_outputs: int):
        super().__init__()
        self.proj = nn.Linear(dim, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.proj(features)


def scaled_cosine(items: torch.Tensor, query: torch.Tensor, scale: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Scaled cosine of every item with its example's query.

    Args:
        items: float [B, T, D], e.g. one vector per sentence.
        query: float [B, D], one vector per example.
        scale: float scalar tensor, the multiplier (the softmax's inverse temperature).
        eps: lower bound of each norm (a zero vector scores 0).
    Returns:
        float [B, T], ``scale * cos(items[b, t], query[b])``.
    """
    items = items / items.norm(dim=-1, keepdim=True).clamp(min=eps)
    query = query / query.norm(dim=-1, keepdim=True).clamp(min=eps)
    return scale * torch.einsum("btd,bd->bt", items, query)


class QueryCosineScorer(nn.Module):
    """One logit per item from its similarity to a query: items float [B, T, D], query float [B, D] ->
    logits float [B, T] = ``scale * cos(item_proj(item), query_proj(query))`` (:func:`scaled_cosine`).

    Both projections start at the identity and the scale at ``init_scale``, so before any training the
    head ranks items by the cosine of the encoder's own vectors: the zero-shot comparison a sentence
    encoder is trained for (sentence-transformers trains all-MiniLM-L6-v2 on cosines times 20). The two
    projections are separate because the relation need not be symmetric (the question -> the sentence
    that followed it). The scale is learnt in log space, so it stays positive.
    """

    def __init__(self, dim: int, init_scale: float = 20.0):
        super().__init__()
        if init_scale <= 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale}")
        self.item_proj = nn.Linear(dim, dim)
        self.query_proj = nn.Linear(dim, dim)
        for proj in (self.item_proj, self.query_proj):
            nn.init.eye_(proj.weight)
            nn.init.zeros_(proj.bias)
        self.log_scale = nn.Parameter(torch.tensor(math.log(init_scale)))

    def forward(self, items: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return scaled_cosine(self.item_proj(items), self.query_proj(query), self.log_scale.exp())


class PooledClassifier(nn.Module):
    """RoBERTa-style classifier on one token's features: dropout -> dense -> activation -> dropout -> proj.

    features float [B, D] -> logits float [B, num_classes] (answer type from a CLS token).
    """

    def __init__(self, dim: int, num_classes: int, inner_dim: int = None, activation_fn: str = "tanh",
                 dropout: float = 0.0):
        super().__init__()
        inner_dim = inner_dim or dim
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(dim, inner_dim)
        self.activation_fn = get_activation_fn(activation_fn)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features)
        x = self.activation_fn(self.dense(x))
        return self.out_proj(self.dropout(x))


class ClassificationHead(PooledClassifier):
    """:class:`PooledClassifier` on the first token: features float [B, T, D] -> logits float
    [B, num_classes] (RoBERTa's sentence classification head, same parameter names)."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return super().forward(features[:, 0, :])
