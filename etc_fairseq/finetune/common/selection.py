"""Reading a per-global-token head at the global tokens of one type (WikiHop's candidates, the next-sentence
task's sentences): :func:`gather_by_type`; one vector from the global tokens of one type (WikiHop's question):
:func:`mean_by_type`; the same from the long side, for layouts without those global tokens: one vector per
item from its long tokens, :func:`mean_by_index`, and the question's vector, :func:`question_mean`."""
from __future__ import annotations

from typing import Tuple

import torch

from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.tracing import static_graph


def gather_by_type(head_logits: torch.Tensor, global_types: torch.Tensor, token_type: GlobalTokenType) -> Tuple[torch.Tensor, torch.Tensor]:
    """The logits of the global tokens of ``token_type``, in their order.

    Args:
        head_logits: float [B, G], one logit per global token.
        global_types: int64 [B, G] (:class:`GlobalTokenType`; padding must not hold ``token_type``).
        token_type: the type to read.
    Returns:
        (logits float32 [B, N_max] with -inf past each example's N tokens of the type, mask bool [B, N_max]);
        column ``k`` is the example's ``k``-th global token of the type, whatever its position. ``N_max`` is
        the most such tokens in the batch, or ``G`` in a static graph (:func:`etc_fairseq.tracing.static_graph`).
    """
    is_type = global_types.eq(int(token_type))  # [B, G]
    n = is_type.sum(dim=1)  # [B]
    if static_graph(global_types):  # no host read: N_max = G (the extra columns are masked)
        n_max = max(global_types.size(1), 1)
    else:
        n_max = max(int(n.max()) if n.numel() else 0, 1)
    # a stable sort puts the positions of the type first, in order
    order = torch.sort((~is_type).to(torch.int8), dim=1, stable=True).indices[:, :n_max]  # [B, N_max]
    mask = torch.arange(n_max, device=global_types.device).unsqueeze(0) < n.unsqueeze(1)  # [B, N_max]
    logits = torch.gather(head_logits.float(), 1, order)  # [B, N_max]
    return logits.masked_fill(~mask, float("-inf")), mask


def mean_by_type(features: torch.Tensor, global_types: torch.Tensor, token_type: GlobalTokenType) -> torch.Tensor:
    """The mean of the global tokens of ``token_type``.

    Args:
        features: float [B, G, D], the global tokens' outputs.
        global_types: int64 [B, G] (:class:`GlobalTokenType`; padding must not hold ``token_type``).
        token_type: the type to average.
    Returns:
        float [B, D]; zeros for an example without a token of the type.
    """
    weights = global_types.eq(int(token_type)).to(features.dtype)  # [B, G]
    return torch.einsum("bg,bgd->bd", weights, features) / weights.sum(dim=1, keepdim=True).clamp(min=1)


def mean_by_index(features: torch.Tensor, index: torch.Tensor, num_items: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean of the long tokens' features per item (the next-sentence task's sentences, the WikiHop-format
    candidates written into the long input).

    Args:
        features: float [B, W, D], the features of the first W long tokens (W = L for ETC; a windowed
            model such as ``roberta_window`` reads only a prefix).
        index: int64 [B, L] with L >= W, the item index of each long token (-1 = none); only its first W
            columns are used.
        num_items: N, the number of columns to return.
    Returns:
        (means float [B, N, D], zeros for an item without tokens among the W;
        present bool [B, N], whether the item has at least one token among the W).
    """
    B, W, D = features.shape
    index = index[:, :W]  # [B, W]
    idx = torch.where(index >= 0, index, num_items)  # [B, W]; N absorbs "none"
    sums = features.new_zeros(B, num_items + 1, D).scatter_add_(1, idx.unsqueeze(-1).expand(B, W, D), features)
    counts = features.new_zeros(B, num_items + 1).scatter_add_(1, idx, torch.ones_like(idx, dtype=features.dtype))
    means = (sums / counts.clamp(min=1).unsqueeze(-1))[:, :num_items]  # [B, N, D]
    return means, counts[:, :num_items].gt(0)


def question_mean(features: torch.Tensor, question_len: torch.Tensor) -> torch.Tensor:
    """Mean of the question pieces' features (long positions ``1 .. question_len``, after the CLS).

    Args:
        features: float [B, W, D], the features of the first W long tokens.
        question_len: int [B], the question's pieces in the long input.
    Returns:
        float [B, D]; zeros for an example whose question has no piece among the W.
    """
    pos = torch.arange(features.size(1), device=features.device).unsqueeze(0)  # [1, W]
    in_question = (pos >= 1) & (pos < 1 + question_len.unsqueeze(1))  # [B, W]
    weights = in_question.to(features.dtype)
    return torch.einsum("bw,bwd->bd", weights, features) / weights.sum(dim=1, keepdim=True).clamp(min=1)
