"""Reading a per-global-token head at the global tokens of one type (WikiHop's candidates, the next-sentence
task's sentences): :func:`gather_by_type`; one vector from the global tokens of one type (WikiHop's question):
:func:`mean_by_type`."""
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
