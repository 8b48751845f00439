"""Helpers shared by the blocked kernel and the dense reference.

Everything here is a pure function of tensors (no ``nn.Module``):

- input validation that raises ``ValueError`` naming the offending argument and
  giving the expected and the actual shape (run once, by the public entries of :mod:`.global_local`;
  the implementations trust their inputs);
- the relative-logit gather of paper Appendix A ("Efficient Relative Attention"):
  dot every query with every label vector once, then gather the scalar for each
  query-key pair by its label id;
- a masked softmax taken *jointly* over several key groups whose last dimensions
  differ (e.g. local keys and global keys), without concatenating the groups;
- :class:`GlobalLocalStructure`, the 4 masks + 4 label-id tensors of one batch travelling as one
  object, and the band helpers every implementation needs (:func:`band_key_in_range`,
  :func:`effective_radius`, :func:`effective_band`).

Shape names used in the docstrings: ``batch``, ``heads``, ``q_len`` (number of
queries), ``k_len`` (number of keys of one group), ``head_dim``, ``num_labels``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from etc_fairseq.errors import ConfigError, InputFormatError

__all__ = [
    "GlobalLocalStructure",
    "MASK_FIELDS",
    "REL_FIELDS",
    "band_key_in_range",
    "read",
    "effective_radius",
    "effective_band",
    "check_local_radius",
    "piece_shapes",
    "validate_side",
    "check_tensor",
    "check_same_float",
    "validate_long_query_inputs",
    "validate_global_query_inputs",
    "validate_global_local_inputs",
    "check_rel_bias",
    "relative_scores",
    "gather_relative_logits",
    "masked_joint_softmax",
    "softmax_dtype",
    "dropout_probs",
]

#: The mask and label-id field names of :class:`GlobalLocalStructure`, in piece order.
MASK_FIELDS = ("l2l_mask", "l2g_mask", "g2g_mask", "g2l_mask")
REL_FIELDS = ("l2l_rel", "l2g_rel", "g2g_rel", "g2l_rel")


# ----------------------------------------------------------------------------
# the masks and labels of one batch
# ----------------------------------------------------------------------------


@dataclass
class GlobalLocalStructure:
    """The kernel's 4 masks + 4 label-id tensors for one batch.

    Fields (``B`` = batch, ``L`` = long_len, ``G`` = global_len, ``r`` = local_radius):
        l2l_mask: bool ``[B, L, 2r+1]`` (slot ``w`` of row ``i`` = long key ``i + w - r``);
        l2g_mask: bool ``[B, L, G]``; g2g_mask: bool ``[B, G, G]``; g2l_mask: bool ``[B, G, L]``;
        local_radius: int ``r``;
        l2l_rel / l2g_rel / g2g_rel / g2l_rel: int64 label ids, same shapes as the masks, or None
        (no relative term on that piece).
    Shapes and dtypes are validated on construction (ValueError).
    """

    l2l_mask: torch.Tensor
    l2g_mask: torch.Tensor
    g2g_mask: torch.Tensor
    g2l_mask: torch.Tensor
    local_radius: int
    l2l_rel: Optional[torch.Tensor] = None
    l2g_rel: Optional[torch.Tensor] = None
    g2g_rel: Optional[torch.Tensor] = None
    g2l_rel: Optional[torch.Tensor] = None

    def validate(self, batch: Optional[int] = None, long_len: Optional[int] = None,
                 global_len: Optional[int] = None) -> None:
        """Raise ``ValueError`` naming the field unless the shapes and dtypes fit together (see the class
        docstring) and the sizes are the given ones (default: those of ``l2l_mask`` and ``g2g_mask``). The
        public attention entries and the encoder call it once per call; nothing else does."""
        r = check_local_radius(self.local_radius)
        check_tensor("l2l_mask", self.l2l_mask, (batch, long_len, 2 * r + 1), "bool", required=True)
        B, L, _ = self.l2l_mask.shape
        check_tensor("g2g_mask", self.g2g_mask, (B, global_len, global_len), "bool", required=True)
        G = self.g2g_mask.shape[1]
        for piece, shape in piece_shapes(B, L, G, r).items():
            check_tensor(f"{piece}_mask", getattr(self, f"{piece}_mask"), shape, "bool", required=True)
            check_tensor(f"{piece}_rel", getattr(self, f"{piece}_rel"), shape, "int")

    @property
    def batch_size(self) -> int:
        return self.l2l_mask.shape[0]

    @property
    def long_len(self) -> int:
        return self.l2l_mask.shape[1]

    @property
    def global_len(self) -> int:
        return self.g2g_mask.shape[1]

    @property
    def device(self) -> torch.device:
        return self.l2l_mask.device

    def to(self, device) -> "GlobalLocalStructure":
        """A copy with every tensor moved to ``device``."""
        moved = {}
        for f in fields(self):
            v = getattr(self, f.name)
            moved[f.name] = v.to(device) if isinstance(v, torch.Tensor) else v
        return GlobalLocalStructure(**moved)

    def as_kernel_kwargs(self) -> Dict[str, Optional[torch.Tensor]]:
        """``{l2l_mask, l2g_mask, g2g_mask, g2l_mask, l2l_rel, l2g_rel, g2g_rel, g2l_rel}``.

        The kernel's keyword names; ``local_radius`` is implied by ``l2l_mask``'s
        last dim and is not included.
        """
        return {name: getattr(self, name) for name in MASK_FIELDS + REL_FIELDS}


def band_key_in_range(long_len: int, local_radius: int, device=None) -> torch.Tensor:
    """Which band slots point at a real key: ``0 <= i + w - r < long_len``.

    Returns:
        bool ``[long_len, 2*r+1]``.
    """
    r = int(local_radius)
    i = torch.arange(long_len, device=device).unsqueeze(1)
    w = torch.arange(2 * r + 1, device=device).unsqueeze(0)
    j = i + w - r
    return (j >= 0) & (j < long_len)


def effective_radius(local_radius: int, long_len: int) -> int:
    """``min(r, long_len - 1)`` (at least 0): band slots beyond it can never hold a real key."""
    return max(0, min(int(local_radius), long_len - 1))


def effective_band(
    l2l_mask: torch.Tensor, l2l_rel: Optional[torch.Tensor], local_radius: int
) -> Tuple[int, torch.Tensor, Optional[torch.Tensor]]:
    """The l2l band cut to the slots that can hold a real key: the radius :func:`effective_radius`, and the
    mask False wherever a slot points outside the sequence (:func:`band_key_in_range`).

    Args:
        l2l_mask: bool ``[batch, long_len, 2*r+1]``.
        l2l_rel: int64 ``[batch, long_len, 2*r+1]`` label ids, or None.
        local_radius: ``r >= 0``.
    Returns:
        ``(r_eff, mask, rel)``: int ``r_eff``; bool ``[batch, long_len, 2*r_eff+1]``; int64 of the same shape
        (only cut, not masked) or None.
    """
    r = int(local_radius)
    long_len = l2l_mask.shape[1]
    r_eff = effective_radius(r, long_len)
    if r_eff != r:
        l2l_mask = l2l_mask[:, :, r - r_eff : r + r_eff + 1]
        if l2l_rel is not None:
            l2l_rel = l2l_rel[:, :, r - r_eff : r + r_eff + 1]
    return r_eff, l2l_mask & band_key_in_range(long_len, r_eff, l2l_mask.device), l2l_rel


def read(table: torch.Tensor, b: torch.Tensor, *index: torch.Tensor) -> torch.Tensor:
    """``table[b, *index]`` for broadcastable integer index tensors, read at int64 flat offsets.

    The offset is computed in int64 whatever the index dtype: inside a FlexAttention kernel the indices
    are int32, and offsets such as ``b * L * G`` pass 2^31 at long lengths. Used by the structure rules
    (:mod:`etc_fairseq.structure.builders`) and the FlexAttention path.

    Args:
        table: any dtype ``[B, n_1, ..., n_k]`` (``b`` indexes the first dim, ``index`` the others).
        b, index: integer tensors, broadcastable to one shape ``[*]``, each in range.
    Returns:
        ``table``'s dtype ``[*]``.
    """
    off = b.to(torch.int64)
    for i, n in zip(index, table.shape[1:]):
        off = off * n + i.to(torch.int64)
    return table.reshape(-1)[off]


# ----------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------


def check_tensor(
    name: str,
    tensor: Optional[torch.Tensor],
    shape: Sequence[Optional[int]],
    kind: str,
    required: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``tensor`` has the given rank, shape and dtype kind.

    Args:
        name: argument name used in the message, e.g. ``"l2l_mask"``.
        tensor: the tensor to check (``None`` is accepted and ignored unless ``required``).
        shape: expected shape; ``None`` entries match any size.
        kind: ``"float"`` (any floating dtype), ``"bool"`` or ``"int"`` (int64/int32).
    """
    if tensor is None:
        if required:
            raise InputFormatError(f"{name}: expected a tensor, got None")
        return
    if not isinstance(tensor, torch.Tensor):
        raise InputFormatError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    expected = tuple("*" if s is None else int(s) for s in shape)
    actual = tuple(tensor.shape)
    ok = len(actual) == len(expected) and all(
        e == "*" or e == a for e, a in zip(expected, actual)
    )
    if not ok:
        exp_str = "[" + ", ".join(str(e) for e in expected) + "]"
        raise InputFormatError(f"{name}: expected shape {exp_str}, got {list(actual)}")
    if kind == "float" and not tensor.is_floating_point():
        raise InputFormatError(f"{name}: expected a floating-point tensor, got dtype {tensor.dtype}")
    if kind == "bool" and tensor.dtype != torch.bool:
        raise InputFormatError(f"{name}: expected dtype torch.bool, got {tensor.dtype}")
    if kind == "int" and tensor.dtype not in (torch.int64, torch.int32):
        raise InputFormatError(f"{name}: expected dtype torch.int64, got {tensor.dtype}")


def check_same_float(reference_name: str, reference: torch.Tensor, **others: Optional[torch.Tensor]) -> None:
    """Raise ``ValueError`` if any of ``others`` has a different dtype or device than ``reference``."""
    for name, t in others.items():
        if t is None:
            continue
        if t.dtype != reference.dtype:
            raise InputFormatError(
                f"{name}: expected dtype {reference.dtype} (same as {reference_name}), got {t.dtype}"
            )
        if t.device != reference.device:
            raise InputFormatError(
                f"{name}: expected device {reference.device} (same as {reference_name}), got {t.device}"
            )


def check_rel_bias(name: str, rel_bias: Optional[torch.Tensor], emb_name: str,
                   rel_emb: Optional[torch.Tensor], heads: int, reference: torch.Tensor) -> None:
    """Check a relative bias table: float ``[num_labels, heads]`` with the rows of ``rel_emb``
    (which must be given: the bias is a per-label term next to the label vectors)."""
    if rel_bias is None:
        return
    if rel_emb is None:
        raise InputFormatError(f"{name}: a relative bias table needs {emb_name} (the label vectors) too")
    check_tensor(name, rel_bias, (rel_emb.shape[0], heads), "float")
    check_same_float(emb_name, reference, **{name: rel_bias})


def check_local_radius(local_radius) -> int:
    """``local_radius`` as an int; ValueError unless it is a whole number >= 0 (a bool is refused)."""
    if isinstance(local_radius, bool) or int(local_radius) != local_radius or local_radius < 0:
        raise ConfigError(f"local_radius: expected an int >= 0, got {local_radius!r}")
    return int(local_radius)


def piece_shapes(batch: int, long_len: int, global_len: int, local_radius: int) -> Dict[str, Tuple[int, int, int]]:
    """The shape of each piece's mask and labels: l2l ``[B, L, 2r+1]``, l2g ``[B, L, G]``, g2g ``[B, G, G]``,
    g2l ``[B, G, L]``."""
    B, L, G, r = batch, long_len, global_len, local_radius
    return {"l2l": (B, L, 2 * r + 1), "l2g": (B, L, G), "g2g": (B, G, G), "g2l": (B, G, L)}


def validate_side(names: Sequence[str], q, own_k, own_v, other_k, other_v, rel_emb, rel_bias) -> Tuple[int, ...]:
    """Check one query side's tensors: ``q`` float ``[B, H, n, D]``, the keys/values of its own side's tokens
    ``[B, H, n, D]``, those of the other side's tokens ``[B, H, m, D]`` (any ``m``), the label vectors float
    ``[N, H, D]`` and biases float ``[N, H]`` (or None); one dtype and device.

    Args:
        names: the argument names of ``q, own_k, own_v, other_k, other_v, rel_emb, rel_bias`` (for messages).
    Returns:
        ``(B, H, n, D, m)``.
    """
    qn, okn, ovn, xkn, xvn, en, bn = names
    check_tensor(qn, q, (None, None, None, None), "float")
    B, H, n, D = q.shape
    check_tensor(okn, own_k, (B, H, n, D), "float")
    check_tensor(ovn, own_v, (B, H, n, D), "float")
    check_tensor(xkn, other_k, (B, H, None, D), "float")
    m = other_k.shape[2]
    check_tensor(xvn, other_v, (B, H, m, D), "float")
    check_tensor(en, rel_emb, (None, H, D), "float")
    check_same_float(qn, q, **{okn: own_k, ovn: own_v, xkn: other_k, xvn: other_v, en: rel_emb})
    check_rel_bias(bn, rel_bias, en, rel_emb, H, q)
    return B, H, n, D, m


def validate_long_query_inputs(
    long_q, l2l_k, l2l_v, l2g_k, l2g_v, local_radius, l2l_mask, l2g_mask, l2l_rel, l2g_rel, rel_emb,
    rel_bias=None,
) -> None:
    """Check the arguments of ``long_query_attention`` (shapes as documented there)."""
    r = check_local_radius(local_radius)
    B, _, L, _, G = validate_side(("long_q", "l2l_k", "l2l_v", "l2g_k", "l2g_v", "rel_emb", "rel_bias"),
                                  long_q, l2l_k, l2l_v, l2g_k, l2g_v, rel_emb, rel_bias)
    shapes = piece_shapes(B, L, G, r)
    for piece, mask, rel in (("l2l", l2l_mask, l2l_rel), ("l2g", l2g_mask, l2g_rel)):
        check_tensor(f"{piece}_mask", mask, shapes[piece], "bool", required=True)
        check_tensor(f"{piece}_rel", rel, shapes[piece], "int")


def validate_global_query_inputs(
    global_q, g2g_k, g2g_v, g2l_k, g2l_v, g2g_mask, g2l_mask, g2g_rel, g2l_rel, rel_emb, rel_bias=None
) -> None:
    """Check the arguments of ``global_query_attention`` (shapes as documented there)."""
    B, _, G, _, L = validate_side(("global_q", "g2g_k", "g2g_v", "g2l_k", "g2l_v", "rel_emb", "rel_bias"),
                                  global_q, g2g_k, g2g_v, g2l_k, g2l_v, rel_emb, rel_bias)
    shapes = piece_shapes(B, L, G, 0)
    for piece, mask, rel in (("g2g", g2g_mask, g2g_rel), ("g2l", g2l_mask, g2l_rel)):
        check_tensor(f"{piece}_mask", mask, shapes[piece], "bool", required=True)
        check_tensor(f"{piece}_rel", rel, shapes[piece], "int")


def validate_global_local_inputs(
    structure: GlobalLocalStructure, long_q, long_k, long_v, global_q, global_k, global_v,
    long_rel_emb=None, global_rel_emb=None, long_rel_bias=None, global_rel_bias=None, l2g_kv=None, g2l_kv=None,
) -> None:
    """Check the arguments of ``global_local_attention`` using its own argument names: each query side's
    tensors (:func:`validate_side`), then the structure at the tensors' sizes
    (:meth:`GlobalLocalStructure.validate`)."""
    l2g_k, l2g_v = l2g_kv if l2g_kv is not None else (global_k, global_v)
    g2l_k, g2l_v = g2l_kv if g2l_kv is not None else (long_k, long_v)
    l2g_names = ("l2g_kv[0]", "l2g_kv[1]") if l2g_kv is not None else ("global_k", "global_v")
    g2l_names = ("g2l_kv[0]", "g2l_kv[1]") if g2l_kv is not None else ("long_k", "long_v")
    B, H, L, D, _ = validate_side(("long_q", "long_k", "long_v") + l2g_names + ("long_rel_emb", "long_rel_bias"),
                                  long_q, long_k, long_v, l2g_k, l2g_v, long_rel_emb, long_rel_bias)
    check_tensor("global_q", global_q, (B, H, None, D), "float")
    validate_side(("global_q", "global_k", "global_v") + g2l_names + ("global_rel_emb", "global_rel_bias"),
                  global_q, global_k, global_v, g2l_k, g2l_v, global_rel_emb, global_rel_bias)
    check_same_float("long_q", long_q, global_q=global_q)
    structure.validate(B, L, global_q.shape[2])


# ----------------------------------------------------------------------------
# relative logits
# ----------------------------------------------------------------------------


def relative_scores(
    q: torch.Tensor, rel_emb: torch.Tensor, rel_bias: Optional[torch.Tensor] = None, bias_scale: float = 1.0
) -> torch.Tensor:
    """Dot every query with every label vector of its head (computed once per label), plus the
    label's bias.

    Args:
        q: float ``[batch, heads, q_len, head_dim]``.
        rel_emb: float ``[num_labels, heads, head_dim]``.
        rel_bias: float ``[num_labels, heads]`` or None.
        bias_scale: factor applied to ``rel_bias`` (``1/sqrt(head_dim)`` when ``q`` is already scaled,
            so that the bias is scaled like the dot products).

    Returns:
        float ``[batch, heads, q_len, num_labels]``:
        ``out[b, h, i, n] = q[b, h, i] . rel_emb[n, h] + bias_scale * rel_bias[n, h]``.
    """
    scores = torch.einsum("bhid,nhd->bhin", q, rel_emb)
    if rel_bias is not None:
        # [num_labels, heads] -> [1, heads, 1, num_labels]
        scores = scores + bias_scale * rel_bias.t()[None, :, None, :]
    return scores


def gather_relative_logits(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Pick, for every query-key pair, the query's score for the pair's label.

    The label ids are shared by all heads; they are broadcast over the head
    dimension with ``expand`` (a view, no int64 copy per head).

    Args:
        scores: float ``[batch, heads, *query_dims, num_labels]`` from :func:`relative_scores`
            (``query_dims`` may be e.g. ``(q_len,)`` or ``(num_blocks, block_len)``).
        labels: int64 ``[batch, *query_dims, k_len]``, values in ``[0, num_labels)``.

    Returns:
        float ``[batch, heads, *query_dims, k_len]``: ``out[..., i, j] = scores[..., i, labels[i, j]]``.
    """
    batch, heads = scores.shape[0], scores.shape[1]
    index = labels.long().unsqueeze(1).expand(batch, heads, *labels.shape[1:])
    return torch.gather(scores, -1, index)


# ----------------------------------------------------------------------------
# masked joint softmax
# ----------------------------------------------------------------------------


def softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 / bfloat16 softmaxes are computed in float32; float32 / float64 in themselves."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class _MaskedJointSoftmax(torch.autograd.Function):
    """Softmax over the concatenation of several key groups, without concatenating them.

    Forward: ``p_g = exp(x_g - m) * mask_g / sum_g' sum_k exp(x_g' - m) * mask_g'`` with the
    row max ``m`` taken over the allowed entries only (0 for rows with nothing allowed),
    and ``p = 0`` for rows with nothing allowed.  Backward uses the closed form
    ``dx_g = p_g * (dp_g - sum_g' sum_k dp_g' * p_g')`` so only the probabilities are saved
    (one tensor per group) and masked / empty rows get exactly zero gradient.
    """

    @staticmethod
    def forward(ctx, n_groups: int, out_dtype: torch.dtype, *args):  # type: ignore[override]
        logits = args[:n_groups]
        masks = args[n_groups:]
        comp = softmax_dtype(logits[0].dtype)
        neg_inf = float("-inf")
        scores: List[torch.Tensor] = []
        row_max: Optional[torch.Tensor] = None
        for x, m in zip(logits, masks):
            # fresh tensor in the compute dtype; masked entries -> -inf
            s = x.to(comp).masked_fill(~m, neg_inf)
            scores.append(s)
            if s.shape[-1] == 0:
                continue
            mx = s.amax(dim=-1, keepdim=True)  # [..., 1]
            row_max = mx if row_max is None else torch.maximum(row_max, mx)
        denom: Optional[torch.Tensor] = None
        if row_max is not None:
            # rows with no allowed key have max -inf: shift by 0 instead (all exps are 0 anyway)
            row_max = row_max.masked_fill(row_max == neg_inf, 0.0)
        for s in scores:
            if s.shape[-1] == 0:
                continue
            s.sub_(row_max).exp_()
            part = s.sum(dim=-1, keepdim=True)
            denom = part if denom is None else denom + part
        probs = []
        for s in scores:
            if s.shape[-1] != 0:
                # empty rows: numerator 0, denominator replaced by 1 -> probability 0
                s.div_(torch.where(denom > 0, denom, torch.ones_like(denom)))
            probs.append(s.to(out_dtype) if s.dtype != out_dtype else s)
        ctx.save_for_backward(*probs)
        ctx.n_groups = n_groups
        return tuple(probs)

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        probs = ctx.saved_tensors
        n = ctx.n_groups
        comp = softmax_dtype(probs[0].dtype)
        prods: List[Optional[torch.Tensor]] = []
        dot: Optional[torch.Tensor] = None
        for p, g in zip(probs, grads):
            if g is None or p.shape[-1] == 0:
                prods.append(None)
                continue
            t = g.to(comp) * p.to(comp)  # [..., k_len]
            prods.append(t)
            part = t.sum(dim=-1, keepdim=True)
            dot = part if dot is None else dot + part
        out_grads: List[Optional[torch.Tensor]] = []
        for p, t in zip(probs, prods):
            if p.shape[-1] == 0:
                out_grads.append(torch.zeros_like(p))
            elif t is None:
                # this group's output was unused: dx = -p * dot
                out_grads.append(None if dot is None else (p.to(comp) * (-dot)).to(p.dtype))
            else:
                t.addcmul_(p.to(comp), dot, value=-1.0)
                out_grads.append(t.to(p.dtype) if t.dtype != p.dtype else t)
        return (None, None, *out_grads, *([None] * n))


def masked_joint_softmax(
    logits: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]
) -> Tuple[torch.Tensor, ...]:
    """One softmax over several key groups (e.g. local keys and global keys) at once.

    The groups share all leading (query) dimensions and may differ in their last
    (key) dimension; the result is the same as concatenating them along the last
    dimension, taking one masked softmax and splitting again, but nothing is
    concatenated.  A query whose keys are all masked gets probability 0 everywhere
    (output zeros), with finite (zero) gradients.  float16 / bfloat16 logits are
    normalised in float32 and the probabilities cast back to the input dtype.

    Args:
        logits: ``G`` float tensors, group ``g`` of shape ``[*query_dims, k_len_g]``
            (all with the same dtype).
        masks: ``G`` bool tensors broadcastable to the matching logits
            (e.g. ``[batch, 1, *rest]`` against ``[batch, heads, *rest]``); True = may attend.

    Returns:
        ``G`` float tensors, the probabilities, same shapes and dtype as ``logits``.
    """
    if len(logits) != len(masks) or len(logits) == 0:
        raise ValueError("masked_joint_softmax: need one mask per logits group (and at least one group)")
    dtype = logits[0].dtype
    for i, x in enumerate(logits):
        if x.dtype != dtype:
            raise ValueError(f"logits[{i}]: expected dtype {dtype}, got {x.dtype}")
        if x.shape[:-1] != logits[0].shape[:-1]:
            raise ValueError(
                f"logits[{i}]: expected query dims {list(logits[0].shape[:-1])}, got {list(x.shape[:-1])}"
            )
    return _MaskedJointSoftmax.apply(len(logits), dtype, *logits, *masks)


def dropout_probs(probs: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """Attention dropout: ``F.dropout(probs, dropout_p, training=True)`` when ``dropout_p > 0``.

    Args:
        probs: float ``[...]``.
    Returns:
        float ``[...]``, same shape (``probs`` itself when ``dropout_p == 0``).
    """
    if dropout_p > 0.0:
        return F.dropout(probs, p=dropout_p, training=True)
    return probs
