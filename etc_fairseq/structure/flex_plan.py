"""Structure ids -> the FlexAttention plan of one batch (:class:`etc_fairseq.attention.flex.FlexPlan`).

The plan's ``mask_mod`` and labels are the structure rules of :mod:`.builders` (``l2l_allowed`` ...
``g2g_label``: the same functions that build the dense masks), evaluated inside the kernel over the compact
per-token ids padded to the joint layout: no dense ``[B, L, 2r+1]`` / ``[B, L, G]`` mask or label tensor is
ever built. Relative positions are computed from the positions; the segment ancestry and the g2g labels'
parent/child relation are read from the ``[B, G, G]`` ancestor table.
"""
from __future__ import annotations

from functools import partial

from etc_fairseq.attention.flex import FlexLayout, FlexPlan, build_flex_plan, materialized

from .builders import (
    StructureIds,
    g2g_allowed,
    g2g_label,
    g2l_allowed,
    l2g_allowed,
    l2l_allowed,
    l2l_label,
    long_global_label,
)

__all__ = ["flex_plan"]


def _global_long_label(ids, b, g, i):
    """g2l's label: the long/global label with the pair's roles swapped (int64)."""
    return long_global_label(ids, b, i, g)


def flex_plan(ids: StructureIds, split_kv: bool) -> FlexPlan:
    """The :class:`FlexPlan` of one batch.

    Args:
        ids: the batch's validated structure ids (:func:`.builders.structure_ids`).
        split_kv: the two query sides read different key/value projections (see :class:`FlexLayout`).
    """
    lay = FlexLayout.of(ids.long_valid.shape[0], ids.long_len, ids.global_len, split_kv, ids.local_radius)
    p = ids.padded(lay.long_pad, lay.global_pad).map_tensors(materialized)
    allowed = {"l2l": partial(l2l_allowed, p), "l2g": partial(l2g_allowed, p), "g2g": partial(g2g_allowed, p),
               "g2l": partial(g2l_allowed, p)}
    labels = {"l2l": partial(l2l_label, p), "l2g": partial(long_global_label, p), "g2g": partial(g2g_label, p),
              "g2l": partial(_global_long_label, p)}
    return build_flex_plan(lay, allowed, labels, ids.long_valid.device)
