"""Small output heads the fine-tuning tasks share (registered with ``EtcModel.register_task_head``).

Task-specific heads (OpenKP's n-gram convolutions, visual features) live with their task's code.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from fairseq import utils


class TokenLogits(nn.Module):
    """One linear map per token: features float [B, T, D] -> logits float [B, T, num_outputs]
    (e.g. span start/end on long tokens: 2 outputs; one logit per sentence or candidate global token: 1)."""

    def __init__(self, dim: int, num_outputs: int):
        super().__init__()
        self.proj = nn.Linear(dim, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.proj(features)


class PooledClassifier(nn.Module):
    """RoBERTa-style classifier on one token's features: dropout -> dense -> activation -> dropout -> proj.

    features float [B, D] -> logits float [B, num_classes] (answer type from a CLS token).
    """

    def __init__(self, dim: int, num_classes: int, inner_dim: int = None, activation_fn: str = "tanh", dropout: float = 0.0):
        super().__init__()
        inner_dim = inner_dim or dim
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(dim, inner_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features)
        x = self.activation_fn(self.dense(x))
        return self.out_proj(self.dropout(x))
