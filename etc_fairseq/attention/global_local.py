"""The one entry point to global-local attention, whatever the implementation.

:func:`global_local_attention` (and its two halves, :func:`long_query_attention` /
:func:`global_query_attention`) validates its inputs once and dispatches to one of the implementations of
the same function, which trust them (as Hugging Face's ``modeling_modernbert.py`` validates in the model
and dispatches to attention functions that do not check again):

=============  ==================================================================================
``impl``       implementation
=============  ==================================================================================
``"blocked"``  :mod:`.blocked`, the production kernel (chunked, probabilities recomputed in backward)
``"autograd"`` :mod:`.autograd_blocked`, the plain-autograd 3-block kernel (second exact reference)
``"dense"``    :mod:`.dense`, the O(long_len^2) reference (tests, benchmarks)
``"flex"``     :mod:`.flex`, torch's flex attention (GPU; compiled on CUDA, eager elsewhere): both halves
               in one call
=============  ==================================================================================

The masks and label ids travel as one :class:`~etc_fairseq.attention.common.GlobalLocalStructure`
(``structure=``) or as its fields given as keywords (``local_radius=, l2l_mask=, ...``). A model calls the
implementations directly (:func:`implementation`), having validated its structure once per batch.

Masked keys are left out of the softmax exactly. Official ETC adds -10000 to masked scores instead:
the same result on every query row with at least one allowed key (``exp(-10000)`` is 0 in float32);
a row with no allowed key is 0 here and an unmasked average there (official inputs give padding its
own segment, so such rows do not occur in them). ``tests/test_official_options.py`` checks both.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from etc_fairseq.errors import ConfigError

from . import autograd_blocked, blocked, dense, flex
from .common import (
    MASK_FIELDS,
    REL_FIELDS,
    GlobalLocalStructure,
    validate_global_local_inputs,
    validate_global_query_inputs,
    validate_long_query_inputs,
)

__all__ = [
    "IMPLEMENTATION",
    "IMPLEMENTATIONS",
    "implementation",
    "global_local_attention",
    "long_query_attention",
    "global_query_attention",
    "dense_global_local_attention",
    "autograd_global_local_attention",
    "flex_global_local_attention",
]

#: The implementation used when ``impl`` is not given (the model's CPU path, and tests).
IMPLEMENTATION = "blocked"

#: impl name -> (long-query half, global-query half), both with the argument names of
#: :func:`etc_fairseq.attention.blocked.long_query_attention` / ``global_query_attention``; they trust
#: their inputs.
IMPLEMENTATIONS = {
    "blocked": (blocked.long_query_attention, blocked.global_query_attention),
    "autograd": (autograd_blocked.autograd_long_query_attention, autograd_blocked.autograd_global_query_attention),
    "dense": (dense.dense_long_query_attention, dense.dense_global_query_attention),
    "flex": (flex.flex_long_query_attention, flex.flex_global_query_attention),
}


def implementation(impl: Optional[str], flex_compile: Optional[bool] = None):
    """``(long half, global half, extra keyword arguments)`` of ``impl`` (default :data:`IMPLEMENTATION`);
    the halves trust their inputs. ``flex_compile``: with ``"flex"``, whether to use the compiled
    ``flex_attention`` (default: on CUDA)."""
    name = IMPLEMENTATION if impl is None else impl
    if name not in IMPLEMENTATIONS:
        raise ConfigError(f"impl: expected one of {sorted(IMPLEMENTATIONS)}, got {name!r}")
    long_half, global_half = IMPLEMENTATIONS[name]
    extra: Dict[str, Optional[bool]] = {"compile": flex_compile} if name == "flex" else {}
    return long_half, global_half, extra


def long_query_attention(long_q, l2l_k, l2l_v, l2g_k, l2g_v, *, impl: Optional[str] = None,
                         flex_compile: Optional[bool] = None, **kwargs) -> torch.Tensor:
    """Long queries -> (local long keys + all global keys), one softmax, by ``impl`` (see the module
    docstring). Arguments and result as :func:`etc_fairseq.attention.blocked.long_query_attention`."""
    validate_long_query_inputs(
        long_q, l2l_k, l2l_v, l2g_k, l2g_v, kwargs.get("local_radius"), kwargs.get("l2l_mask"),
        kwargs.get("l2g_mask"), kwargs.get("l2l_rel"), kwargs.get("l2g_rel"), kwargs.get("rel_emb"),
        kwargs.get("rel_bias"),
    )
    long_half, _, extra = implementation(impl, flex_compile)
    return long_half(long_q, l2l_k, l2l_v, l2g_k, l2g_v, **kwargs, **extra)


def global_query_attention(global_q, g2g_k, g2g_v, g2l_k, g2l_v, *, impl: Optional[str] = None,
                           flex_compile: Optional[bool] = None, **kwargs) -> torch.Tensor:
    """Global queries -> (all global keys + all long keys), one softmax, by ``impl``. Arguments and
    result as :func:`etc_fairseq.attention.blocked.global_query_attention`."""
    validate_global_query_inputs(
        global_q, g2g_k, g2g_v, g2l_k, g2l_v, kwargs.get("g2g_mask"), kwargs.get("g2l_mask"),
        kwargs.get("g2g_rel"), kwargs.get("g2l_rel"), kwargs.get("rel_emb"), kwargs.get("rel_bias"),
    )
    _, global_half, extra = implementation(impl, flex_compile)
    return global_half(global_q, g2g_k, g2g_v, g2l_k, g2l_v, **kwargs, **extra)


def global_local_attention(
    long_q: torch.Tensor,
    long_k: torch.Tensor,
    long_v: torch.Tensor,
    global_q: torch.Tensor,
    global_k: torch.Tensor,
    global_v: torch.Tensor,
    structure: Optional[GlobalLocalStructure] = None,
    *,
    long_rel_emb: Optional[torch.Tensor] = None,
    global_rel_emb: Optional[torch.Tensor] = None,
    long_rel_bias: Optional[torch.Tensor] = None,
    global_rel_bias: Optional[torch.Tensor] = None,
    l2g_kv: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    g2l_kv: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    dropout_p: float = 0.0,
    impl: Optional[str] = None,
    flex_compile: Optional[bool] = None,
    **structure_fields,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ETC global-local attention.

    Args:
        long_q, long_k, long_v: float ``[batch, heads, long_len, head_dim]``; ``long_k``/``long_v``
            are the long keys/values of l2l (and of g2l unless ``g2l_kv`` is given).
        global_q, global_k, global_v: float ``[batch, heads, global_len, head_dim]``; ``global_k``/
            ``global_v`` are the global keys/values of g2g (and of l2g unless ``l2g_kv`` is given).
        structure: the 4 masks + 4 label-id tensors (:class:`GlobalLocalStructure`); or give its
            fields as keywords instead: ``local_radius`` (int ``r``), ``l2l_mask`` bool
            ``[batch, long_len, 2*r+1]`` (slot ``w`` = key ``i + w - r``), ``l2g_mask`` bool
            ``[batch, long_len, global_len]``, ``g2g_mask`` bool ``[batch, global_len, global_len]``,
            ``g2l_mask`` bool ``[batch, global_len, long_len]``, and optional int64 label ids
            ``l2l_rel``/``l2g_rel``/``g2g_rel``/``g2l_rel`` shaped like the masks.
        long_rel_emb / global_rel_emb: float ``[num_labels, heads, head_dim]`` label vectors of the
            long / global queries, or None (no relative term).
        long_rel_bias / global_rel_bias: float ``[num_labels, heads]`` per-label biases (added to
            ``q . e`` before the ``1/sqrt(head_dim)`` scaling), or None.
        l2g_kv / g2l_kv: ``(keys, values)`` of that piece when it has its own projections (float
            ``[batch, heads, global_len / long_len, head_dim]``).
        dropout_p: dropout on the attention probabilities (0 in eval).
        impl: ``"blocked"``, ``"autograd"``, ``"dense"`` or ``"flex"`` (default :data:`IMPLEMENTATION`).
        flex_compile: with ``impl="flex"``, use the compiled ``flex_attention`` (default: on CUDA only).

    Returns:
        ``(long_out, global_out)``: float ``[batch, heads, long_len, head_dim]`` and
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    if structure is None:
        unknown = set(structure_fields) - set(MASK_FIELDS + REL_FIELDS + ("local_radius",))
        if unknown:
            raise TypeError(f"global_local_attention: unexpected keyword arguments {sorted(unknown)}")
        if "local_radius" not in structure_fields:
            raise TypeError("global_local_attention: give structure= or local_radius= and the masks")
        structure = GlobalLocalStructure(**{"l2l_mask": None, "l2g_mask": None, "g2g_mask": None,
                                            "g2l_mask": None, **structure_fields})
    elif structure_fields:
        raise TypeError("global_local_attention: give either structure= or its fields, not both")
    rel = dict(long_rel_emb=long_rel_emb, global_rel_emb=global_rel_emb, long_rel_bias=long_rel_bias,
               global_rel_bias=global_rel_bias)
    validate_global_local_inputs(structure, long_q, long_k, long_v, global_q, global_k, global_v,
                                 l2g_kv=l2g_kv, g2l_kv=g2l_kv, **rel)
    if impl == "flex":  # both halves in one call
        return flex.flex_global_local_attention(long_q, long_k, long_v, global_q, global_k, global_v, structure,
                                                l2g_kv=l2g_kv, g2l_kv=g2l_kv, dropout_p=dropout_p,
                                                compile=flex_compile, **rel)
    s = structure
    l2g_k, l2g_v = l2g_kv if l2g_kv is not None else (global_k, global_v)
    g2l_k, g2l_v = g2l_kv if g2l_kv is not None else (long_k, long_v)
    long_half, global_half, extra = implementation(impl, flex_compile)
    long_out = long_half(
        long_q, long_k, long_v, l2g_k, l2g_v, local_radius=s.local_radius,
        l2l_mask=s.l2l_mask, l2g_mask=s.l2g_mask, l2l_rel=s.l2l_rel, l2g_rel=s.l2g_rel,
        rel_emb=long_rel_emb, rel_bias=long_rel_bias, dropout_p=dropout_p, **extra,
    )  # [batch, heads, long_len, head_dim]
    global_out = global_half(
        global_q, global_k, global_v, g2l_k, g2l_v, g2g_mask=s.g2g_mask, g2l_mask=s.g2l_mask,
        g2g_rel=s.g2g_rel, g2l_rel=s.g2l_rel, rel_emb=global_rel_emb, rel_bias=global_rel_bias,
        dropout_p=dropout_p, **extra,
    )  # [batch, heads, global_len, head_dim]
    return long_out, global_out


def dense_global_local_attention(*args, **kwargs) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`global_local_attention` with ``impl="dense"`` (the O(long_len^2) reference)."""
    return global_local_attention(*args, impl="dense", **kwargs)


def autograd_global_local_attention(*args, **kwargs) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`global_local_attention` with ``impl="autograd"`` (the plain-autograd 3-block kernel)."""
    return global_local_attention(*args, impl="autograd", **kwargs)


def flex_global_local_attention(*args, compile: Optional[bool] = None, **kwargs) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`global_local_attention` with ``impl="flex"``; ``compile``: the compiled ``flex_attention``
    (default: on CUDA)."""
    return global_local_attention(*args, impl="flex", flex_compile=compile, **kwargs)
