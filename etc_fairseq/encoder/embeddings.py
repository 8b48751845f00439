"""Input embedding pieces of the ETC encoder and its weight initialisation (no fairseq).

- :class:`PaddingAwarePositions`: RoBERTa-compatible learned absolute positions (row =
  ``position + padding_idx + 1``, padding tokens get the all-zero padding row), so RoBERTa's
  position table lifts row for row.
- :func:`init_bert_params`: BERT's initialisation (normal(0, 0.02) weights, zero biases, zero
  padding rows), drawn on the CPU so that the values do not depend on the device.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def padding_aware_positions(tokens: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """int64 [batch, len] tokens -> int64 [batch, len] position rows: ``padding_idx + 1 + i`` for the
    ``i``-th non-padding token of the row, ``padding_idx`` for padding."""
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class PaddingAwarePositions(nn.Embedding):
    """Learned absolute positions of the long input (see the module docstring).

    forward: tokens int64 [batch, len] -> float [batch, len, dim].
    """

    def __init__(self, max_positions: int, dim: int, padding_idx: int):
        super().__init__(max_positions + padding_idx + 1, dim, padding_idx)
        self.max_positions = max_positions

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.embedding(padding_aware_positions(tokens, self.padding_idx), self.weight, self.padding_idx)


def init_bert_params(module: nn.Module) -> None:
    """BERT initialisation of one module (use with ``model.apply``): ``nn.Linear`` weights and
    ``nn.Embedding`` tables ~ normal(0, 0.02) (drawn on the CPU), biases and padding rows 0."""

    def normal_(data: torch.Tensor) -> None:
        data.copy_(data.cpu().normal_(mean=0.0, std=0.02).to(data.device))

    if isinstance(module, nn.Linear):
        normal_(module.weight.data)
        if module.bias is not None:
            module.bias.data.zero_()
    if isinstance(module, nn.Embedding):
        normal_(module.weight.data)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
