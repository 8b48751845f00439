"""Structure ids -> the four attention masks and four relative-label tensors.

The global-local attention kernel (``etc_fairseq.attention``) consumes, per batch:

============  ===========================  ===========================================
piece         shape                        meaning of ``[b, q, k]``
============  ===========================  ===========================================
``l2l``       ``[batch, long_len, 2r+1]``  long query ``i``, slot ``w``: long key
                                           ``j = i + w - r``
``l2g``       ``[batch, long_len, G]``     long query ``i``, global key ``g``
``g2g``       ``[batch, G, G]``            global query ``g``, global key ``h``
``g2l``       ``[batch, G, long_len]``     global query ``g``, long key ``i``
============  ===========================  ===========================================

each as a bool mask (True = may attend) and an int64 label-id tensor indexing a
:class:`~etc_fairseq.structure.labels.RelativeLabelVocab`.  Where a mask is False
the label id is 0 (always a valid id).  ``G`` is ``global_len``.

The structure is described by small per-token int64 id tensors (see
:func:`build_structure`): the segment (global token) each long token belongs to,
the parent of each global token (a forest: sentence -> context), unordered
context ids, packed example ids, optional extra links (e.g. a candidate answer
and its mentions) and optional per-global-token hard g2l.  Everything is
vectorised torch and runs on the device of the inputs; the only Python loop is
over the ancestor depth (at most :data:`MAX_HIERARCHY_DEPTH`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from etc_fairseq.attention.common import GlobalLocalStructure, read
from etc_fairseq.errors import ConfigError, InputFormatError

from .labels import DEFAULT_STRUCTURE_LABELS, RelativeLabelVocab
from ..tracing import static_graph

__all__ = [
    "STRUCTURE_KEYS",
    "MAX_HIERARCHY_DEPTH",
    "REQUIRED_STRUCTURE_LABELS",
    "GlobalLocalStructure",
    "StructureIds",
    "structure_ids",
    "build_structure",
    "dense_structure",
    "fixed_block_ids",
    "segment_ids_from_lengths",
]

#: longest allowed ``global_parent`` chain (number of ancestors of one global token).
MAX_HIERARCHY_DEPTH = 8

#: The structure labels :func:`build_structure` assigns (all must be in its vocabulary; a vocabulary
#: may append more for task-specific use).
#: the compact per-token structure ids :func:`build_structure` accepts (the keys of a batch's
#: ``net_input["structure"]`` dict).
STRUCTURE_KEYS = (
    "long_segment",
    "global_parent",
    "long_context",
    "global_context",
    "long_example",
    "global_example",
    "long_links",
    "global_hard_g2l",
)

REQUIRED_STRUCTURE_LABELS = DEFAULT_STRUCTURE_LABELS



# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------
def _check_mask(name: str, t) -> None:
    """bool 2-D tensor ``[batch, len]``."""
    if not isinstance(t, torch.Tensor):
        raise InputFormatError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bool:
        raise InputFormatError(f"{name} must have dtype torch.bool, got {t.dtype}")
    if t.dim() != 2:
        raise InputFormatError(f"{name} must be 2-D [batch, len], got shape {tuple(t.shape)}")


def _check_ids(
    name: str,
    t,
    shape: Tuple[int, ...],
    device: torch.device,
    *,
    trailing_free: bool = False,
) -> None:
    """dtype int64, expected shape (last dim free when ``trailing_free``), same device."""
    if not isinstance(t, torch.Tensor):
        raise InputFormatError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.long:
        raise InputFormatError(f"{name} must have dtype torch.int64, got {t.dtype}")
    got = tuple(t.shape)
    if trailing_free:
        ok = t.dim() == len(shape) + 1 and got[:-1] == shape
        want = f"{shape[:] + ('max_links',)}"
    else:
        ok = got == shape
        want = f"{shape}"
    if not ok:
        raise InputFormatError(f"{name} must have shape {want}, got {got}")
    if t.device != device:
        raise InputFormatError(f"{name} must be on device {device}, got {t.device}")


def _validating(t: torch.Tensor) -> bool:
    """Value checks need a host synchronisation; they run in eager mode and are skipped in a static graph
    (``torch.compile`` tracing, or ``t`` on an XLA device: :func:`etc_fairseq.tracing.static_graph`)."""
    return not static_graph(t)


def _check_index_range(name: str, t: torch.Tensor, valid: torch.Tensor, global_len: int) -> None:
    """Entries of ``t`` where ``valid`` must be -1 or in ``[0, global_len)`` (eager mode only)."""
    if not _validating(t):
        return
    bad = valid & ((t < -1) | (t >= global_len))
    if bool(bad.any()):
        pos = tuple(int(x) for x in bad.nonzero()[0].tolist())
        raise InputFormatError(
            f"{name} values must be -1 or in [0, global_len={global_len}), "
            f"got {int(t[pos])} at index {pos}"
        )


def _check_not_padded_target(
    name: str, t: torch.Tensor, valid: torch.Tensor, global_padding_mask: torch.Tensor
) -> None:
    """Entries of ``t`` (global indices) where ``valid`` must not point at padded globals (eager mode only)."""
    if global_padding_mask.shape[1] == 0 or not _validating(t):  # range check already forced all -1
        return
    B = t.shape[0]
    flat = t.reshape(B, -1)  # [B, N]
    target_pad = torch.gather(global_padding_mask, 1, flat.clamp(min=0)).reshape(t.shape)
    bad = valid & (t >= 0) & target_pad
    if bool(bad.any()):
        pos = tuple(int(x) for x in bad.nonzero()[0].tolist())
        raise InputFormatError(
            f"{name} must point at non-padding global tokens, got {int(t[pos])} at index {pos} "
            f"which is padding in global_padding_mask"
        )


# ---------------------------------------------------------------------------
# hierarchy
# ---------------------------------------------------------------------------
def _ancestors(global_parent: torch.Tensor) -> torch.Tensor:
    """Strict-ancestor relation of a parent forest.

    Args:
        global_parent: int64 ``[B, G]``, parent index or -1 (already range-checked).
    Returns:
        bool ``[B, G, G]``: ``[b, g, h]`` True iff ``h`` is a strict ancestor of ``g``.
    Raises:
        ValueError on a cycle or a chain longer than :data:`MAX_HIERARCHY_DEPTH`.
    """
    B, G = global_parent.shape
    # one extra column G absorbs the "-1 = none" entries of scatter_
    anc = torch.zeros(B, G, G + 1, dtype=torch.bool, device=global_parent.device)
    cur = global_parent  # [B, G]: the depth-d ancestor of each g, or -1
    for _ in range(MAX_HIERARCHY_DEPTH):
        # early exit (eager only): once every chain has ended, further steps change nothing
        if _validating(cur) and not bool((cur >= 0).any()):
            break
        anc.scatter_(2, torch.where(cur >= 0, cur, G).unsqueeze(-1), True)
        nxt = torch.gather(global_parent, 1, cur.clamp(min=0))  # [B, G]
        cur = torch.where(cur >= 0, nxt, torch.full_like(cur, -1))
    anc = anc[:, :, :G]  # [B, G, G]
    if _validating(cur) and bool((cur >= 0).any()):
        diag = anc.diagonal(dim1=1, dim2=2)  # [B, G]
        if bool(diag.any()):
            b, g = (int(x) for x in diag.nonzero()[0].tolist())
            raise InputFormatError(
                f"global_parent must be a forest (acyclic), got a cycle through global "
                f"index {g} in batch row {b}"
            )
        b, g = (int(x) for x in (cur >= 0).nonzero()[0].tolist())
        raise InputFormatError(
            f"global_parent chains must have at most {MAX_HIERARCHY_DEPTH} ancestors, "
            f"got a longer chain (or a longer cycle) from global index {g} in batch row {b}"
        )
    return anc


# ---------------------------------------------------------------------------
# validated ids
# ---------------------------------------------------------------------------
@dataclass
class StructureIds:
    """One batch's per-token structure ids, validated, padding cleared: what the attention rules read.

    Shapes (``B`` batch, ``L`` long_len, ``G`` global_len, ``K`` max_links): long_valid bool ``[B, L]`` and
    global_valid bool ``[B, G]`` (True = a real token); long_segment int64 ``[B, L]`` (-1 = none);
    long_context / long_example int64 ``[B, L]``; long_links int64 ``[B, L, K]`` (-1 = none);
    global_context / global_example int64 ``[B, G]``; hard_g2l_rows bool ``[B, G]`` (global tokens whose g2l
    is hard); ancestors bool ``[B, G, G]`` (``[b, g, h]``: ``h`` is a strict ancestor of ``g``);
    ancestors_or_self bool ``[B, G, G]``; hard_l2g, local_radius and the label vocabulary.
    """

    long_valid: torch.Tensor
    global_valid: torch.Tensor
    long_segment: torch.Tensor
    long_context: torch.Tensor
    long_example: torch.Tensor
    long_links: torch.Tensor
    global_context: torch.Tensor
    global_example: torch.Tensor
    hard_g2l_rows: torch.Tensor
    ancestors: torch.Tensor
    ancestors_or_self: torch.Tensor
    hard_l2g: bool
    local_radius: int
    vocab: RelativeLabelVocab

    @property
    def long_len(self) -> int:
        return self.long_valid.shape[1]

    @property
    def global_len(self) -> int:
        return self.global_valid.shape[1]

    def map_tensors(self, fn) -> "StructureIds":
        """The same ids with ``fn`` applied to every tensor field."""
        return StructureIds(**{f.name: fn(v) if isinstance(v, torch.Tensor) else v
                               for f in fields(self) for v in (getattr(self, f.name),)})

    def padded(self, long_len: int, global_len: int) -> "StructureIds":
        """The same ids with the long side padded to ``long_len`` and the global side to ``global_len``
        tokens (not valid, no segment, no link, no ancestor)."""
        dl, dg = long_len - self.long_len, global_len - self.global_len
        if dl < 0 or dg < 0:
            raise ValueError(f"padded({long_len}, {global_len}): shorter than the ids ({self.long_len}, {self.global_len})")

        def pad(t, d, fill, dims=1):
            return F.pad(t, (0, 0) * (dims - 1) + (0, d), value=fill) if d else t

        def pad_square(t):
            return F.pad(t, (0, dg, 0, dg), value=False) if dg else t

        return StructureIds(
            long_valid=pad(self.long_valid, dl, False), global_valid=pad(self.global_valid, dg, False),
            long_segment=pad(self.long_segment, dl, -1), long_context=pad(self.long_context, dl, 0),
            long_example=pad(self.long_example, dl, 0), long_links=pad(self.long_links, dl, -1, dims=2),
            global_context=pad(self.global_context, dg, 0), global_example=pad(self.global_example, dg, 0),
            hard_g2l_rows=pad(self.hard_g2l_rows, dg, False), ancestors=pad_square(self.ancestors),
            ancestors_or_self=pad_square(self.ancestors_or_self), hard_l2g=self.hard_l2g,
            local_radius=self.local_radius, vocab=self.vocab,
        )


def structure_ids(
    *,
    long_padding_mask: torch.Tensor,
    global_padding_mask: torch.Tensor,
    vocab: RelativeLabelVocab,
    local_radius: int,
    long_segment: Optional[torch.Tensor] = None,
    global_parent: Optional[torch.Tensor] = None,
    long_context: Optional[torch.Tensor] = None,
    global_context: Optional[torch.Tensor] = None,
    long_example: Optional[torch.Tensor] = None,
    global_example: Optional[torch.Tensor] = None,
    long_links: Optional[torch.Tensor] = None,
    global_hard_g2l: Optional[torch.Tensor] = None,
    hard_g2l: bool = False,
    hard_l2g: bool = False,
) -> StructureIds:
    """Validate the per-token structure ids and fill in the defaults (arguments: :func:`build_structure`).

    Raises:
        ValueError: bad shapes / dtypes / devices / index ranges, parent cycles.
        KeyError: the vocabulary lacks a required structure label.
    """
    _check_mask("long_padding_mask", long_padding_mask)
    _check_mask("global_padding_mask", global_padding_mask)
    B, L = long_padding_mask.shape
    Bg, G = global_padding_mask.shape
    if Bg != B:
        raise InputFormatError(
            f"global_padding_mask must have batch size {B} (from long_padding_mask), got {Bg}"
        )
    device = long_padding_mask.device
    if global_padding_mask.device != device:
        raise InputFormatError(
            f"global_padding_mask must be on device {device}, got {global_padding_mask.device}"
        )
    if not isinstance(vocab, RelativeLabelVocab):
        raise ConfigError(f"vocab must be a RelativeLabelVocab, got {type(vocab).__name__}")
    r = local_radius
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        raise ConfigError(f"local_radius must be an int >= 0, got {r!r}")
    for name in REQUIRED_STRUCTURE_LABELS:
        vocab.label(name)  # KeyError naming the missing label

    long_valid = ~long_padding_mask  # [B, L]
    global_valid = ~global_padding_mask  # [B, G]

    def ids_or(name, t, shape, fill):
        if t is None:
            return torch.full(shape, fill, dtype=torch.long, device=device)
        _check_ids(name, t, shape, device)
        return t

    long_segment = ids_or("long_segment", long_segment, (B, L), -1)
    global_parent = ids_or("global_parent", global_parent, (B, G), -1)
    long_context = ids_or("long_context", long_context, (B, L), 0)
    global_context = ids_or("global_context", global_context, (B, G), 0)
    long_example = ids_or("long_example", long_example, (B, L), 0)
    global_example = ids_or("global_example", global_example, (B, G), 0)
    if long_links is None:
        long_links = torch.full((B, L, 0), -1, dtype=torch.long, device=device)
    else:
        _check_ids("long_links", long_links, (B, L), device, trailing_free=True)
    global_hard_g2l = ids_or("global_hard_g2l", global_hard_g2l, (B, G), 0)

    _check_index_range("long_segment", long_segment, long_valid, G)
    _check_index_range("global_parent", global_parent, global_valid, G)
    _check_index_range("long_links", long_links, long_valid.unsqueeze(-1), G)
    # ignore whatever the padding positions hold
    long_segment = torch.where(long_valid, long_segment, torch.full_like(long_segment, -1))
    global_parent = torch.where(global_valid, global_parent, torch.full_like(global_parent, -1))
    long_links = torch.where(long_valid.unsqueeze(-1), long_links, torch.full_like(long_links, -1))
    _check_not_padded_target("long_segment", long_segment, long_valid, global_padding_mask)
    _check_not_padded_target("global_parent", global_parent, global_valid, global_padding_mask)
    _check_not_padded_target(
        "long_links", long_links, long_valid.unsqueeze(-1), global_padding_mask
    )
    anc = _ancestors(global_parent)  # [B, G, G]: h strict ancestor of g
    hard_rows = global_hard_g2l.ne(0) | hard_g2l  # [B, G]
    return StructureIds(
        long_valid=long_valid, global_valid=global_valid, long_segment=long_segment,
        long_context=long_context, long_example=long_example, long_links=long_links,
        global_context=global_context, global_example=global_example, hard_g2l_rows=hard_rows,
        ancestors=anc, ancestors_or_self=anc | torch.eye(G, dtype=torch.bool, device=device),
        hard_l2g=bool(hard_l2g), local_radius=r, vocab=vocab,
    )


# ---------------------------------------------------------------------------
# the rules, elementwise
# ---------------------------------------------------------------------------
def l2l_allowed(ids: StructureIds, b, i, j) -> torch.Tensor:
    """Long query ``i`` may see long key ``j`` (given ``0 <= j < L`` and ``|j - i| <= r``): both real, same
    example, same context. Index tensors broadcastable; returns bool."""
    return (read(ids.long_valid, b, i) & read(ids.long_valid, b, j)
            & (read(ids.long_example, b, i) == read(ids.long_example, b, j))
            & (read(ids.long_context, b, i) == read(ids.long_context, b, j)))


def l2l_label(ids: StructureIds, b, i, j) -> torch.Tensor:
    """The relative position label of long key ``j`` seen from long query ``i`` (int64)."""
    return ids.vocab.position_ids(j.to(torch.int64) - i.to(torch.int64))


def belongs(ids: StructureIds, b, i, g) -> torch.Tensor:
    """Long token ``i`` belongs to global token ``g``: ``g`` is its segment token, an ancestor of it, or a
    global token it links to (bool)."""
    seg = read(ids.long_segment, b, i)
    out = (seg >= 0) & read(ids.ancestors_or_self, b, seg.clamp(min=0), g)
    for k in range(ids.long_links.shape[2]):
        out = out | (read(ids.long_links, b, i, torch.full_like(seg, k)) == g.to(torch.int64))
    return out


def _long_global_allowed(ids: StructureIds, b, i, g) -> torch.Tensor:
    """Long token ``i`` and global token ``g`` are both real and of the same example (bool)."""
    return (read(ids.long_valid, b, i) & read(ids.global_valid, b, g)
            & (read(ids.long_example, b, i) == read(ids.global_example, b, g)))


def long_global_label(ids: StructureIds, b, i, g, strong=None) -> torch.Tensor:
    """The label between long token ``i`` and global token ``g`` (l2g and g2l alike): "belongs" or
    "not_belongs" (int64). ``strong``: :func:`belongs` of the same pairs, if already computed."""
    strong = belongs(ids, b, i, g) if strong is None else strong
    return torch.where(strong, ids.vocab.label("belongs"), ids.vocab.label("not_belongs"))


def l2g_allowed(ids: StructureIds, b, i, g, strong=None) -> torch.Tensor:
    """Long query ``i`` may see global key ``g`` (with hard l2g: only the global tokens it belongs to)."""
    allowed = _long_global_allowed(ids, b, i, g)
    if not ids.hard_l2g:
        return allowed
    return allowed & (belongs(ids, b, i, g) if strong is None else strong)


def g2l_allowed(ids: StructureIds, b, g, i, strong=None) -> torch.Tensor:
    """Global query ``g`` may see long key ``i`` (a hard-g2l row: only the long tokens that belong to it).
    ``strong``: :func:`belongs` of ``(i, g)``, if already computed."""
    strong = belongs(ids, b, i, g) if strong is None else strong
    return _long_global_allowed(ids, b, i, g) & (strong | ~read(ids.hard_g2l_rows, b, g))


def g2g_allowed(ids: StructureIds, b, g, h) -> torch.Tensor:
    """Global query ``g`` may see global key ``h``: both real, same example (bool)."""
    return (read(ids.global_valid, b, g) & read(ids.global_valid, b, h)
            & (read(ids.global_example, b, g) == read(ids.global_example, b, h)))


def g2g_label(ids: StructureIds, b, g, h) -> torch.Tensor:
    """"parent" if ``h`` is an ancestor of ``g``, "child" if ``g`` is one of ``h``, else the relative position
    ``h - g`` within one context, else "other_context" (int64)."""
    v = ids.vocab
    same_ctx = read(ids.global_context, b, g) == read(ids.global_context, b, h)
    return torch.where(
        read(ids.ancestors, b, g, h), v.label("parent"),
        torch.where(read(ids.ancestors, b, h, g), v.label("child"),
                    torch.where(same_ctx, v.position_ids(h.to(torch.int64) - g.to(torch.int64)),
                                v.label("other_context"))))


# ---------------------------------------------------------------------------
# main builder
# ---------------------------------------------------------------------------
def build_structure(**kwargs) -> GlobalLocalStructure:
    """Build the 4 masks and 4 label tensors from per-token structure ids.

    Shapes: ``B`` batch, ``L`` long_len, ``G`` global_len, ``K`` max_links.

    Keyword args:
        long_padding_mask: bool ``[B, L]``, True = padding.
        global_padding_mask: bool ``[B, G]``, True = padding.
        vocab: the label vocabulary; must contain :data:`REQUIRED_STRUCTURE_LABELS`.
        local_radius: ``r >= 0``; l2l covers offsets ``-r .. r``.
        long_segment: int64 ``[B, L]``: global index of the segment token (e.g.
            sentence) each long token belongs to, -1 = none.  Default all -1.
        global_parent: int64 ``[B, G]``: global index of each global token's
            parent (e.g. sentence -> its context token), -1 = root.  Default all -1.
            Must be acyclic with at most :data:`MAX_HIERARCHY_DEPTH` ancestors.
        long_context: int64 ``[B, L]``: context id (unordered groups; l2l never
            crosses contexts).  Default all 0.
        global_context: int64 ``[B, G]``: context id of each global token (g2g
            relative order only inside one context).  Default all 0.
        long_example: int64 ``[B, L]``: packed-example id.  Default all 0.
        global_example: int64 ``[B, G]``: packed-example id.  Default all 0.
            No attention crosses example ids, in any piece.
        long_links: int64 ``[B, L, K]``: extra global indices each long token
            belongs to besides its segment's chain (e.g. the candidate answers it
            mentions, paper appendix C), -1 = none.  Default none.
        global_hard_g2l: int64 ``[B, G]``, 1 = this global token attends (g2l)
            only to the long tokens that belong to it, whatever ``hard_g2l`` says
            (e.g. a candidate answer reads its mentions, not thousands of other
            tokens); 0 = follow ``hard_g2l``.  Default all 0.
        hard_g2l: g2l only for "belongs" pairs (paper Sec. 3.3), for every
            global token.
        hard_l2g: l2g only for "belongs" pairs.

    Values at padding positions are ignored.  Non-padding ``long_segment``,
    ``global_parent`` and ``long_links`` entries must be -1 or the index of a
    non-padding global token.

    Rules (all pieces also need both tokens non-padding and the same example id; one definition each,
    :func:`l2l_allowed` ... :func:`g2g_label`, which the FlexAttention path evaluates inside its kernel):
        l2l ``[b, i, w]`` (key ``j = i + w - r``): ``0 <= j < L`` and same
            context; label ``vocab.position_ids(j - i)``.
        l2g ``[b, i, g]`` / g2l ``[b, g, i]``: label "belongs" if ``g`` is
            ``long_segment[i]`` or one of its ancestors or is in ``long_links[i]``
            (the same label that pre-training teaches sentence tokens, as in the
            official WikiHop layout), else "not_belongs".  Contexts do not cut it.
        g2g ``[b, g, h]``: "parent" if ``h`` is an ancestor of ``g``, "child" if
            ``g`` is an ancestor of ``h``, else ``vocab.position_ids(h - g)`` in the
            same context, else "other_context".

    Returns:
        :class:`GlobalLocalStructure` on the inputs' device; labels are 0 where
        masks are False.
    Raises:
        ValueError: bad shapes / dtypes / devices / index ranges, parent cycles.
        KeyError: the vocabulary lacks a required structure label.
    """
    return dense_structure(structure_ids(**kwargs))


def dense_structure(ids: StructureIds) -> GlobalLocalStructure:
    """The kernel's 4 masks and 4 label tensors (:class:`GlobalLocalStructure`) of validated ids: the rules
    evaluated on every band slot and every long/global pair."""
    B, L, G, r = ids.long_valid.shape[0], ids.long_len, ids.global_len, ids.local_radius
    device = ids.long_valid.device
    zero = torch.zeros((), dtype=torch.long, device=device)
    b = torch.arange(B, device=device).view(B, 1, 1)
    i = torch.arange(L, device=device).view(1, L, 1)
    g = torch.arange(G, device=device).view(1, 1, G)
    # l2l, band form: slot w of row i is key j = i + w - r
    offsets = torch.arange(-r, r + 1, device=device).view(1, 1, 2 * r + 1)  # [1, 1, W]
    j = i + offsets  # [1, L, W]
    in_range = (j >= 0) & (j < L)
    l2l_mask = in_range & l2l_allowed(ids, b, i, j.clamp(0, max(L - 1, 0)))  # [B, L, W]
    l2l_rel = torch.where(l2l_mask, ids.vocab.position_ids(offsets).expand(B, L, 2 * r + 1), zero)
    # l2g / g2l, computed on [B, L, G] (g2l transposed)
    strong = belongs(ids, b, i, g)  # [B, L, G]
    label = long_global_label(ids, b, i, g, strong)
    l2g_mask = l2g_allowed(ids, b, i, g, strong).expand(B, L, G)
    g2l_mask = g2l_allowed(ids, b, g, i, strong).expand(B, L, G).transpose(1, 2)  # [B, G, L]
    # g2g
    gq, gk = g.view(1, G, 1), g.view(1, 1, G)
    g2g_mask = g2g_allowed(ids, b, gq, gk).expand(B, G, G)
    g2g_rel = torch.where(g2g_mask, g2g_label(ids, b, gq, gk), zero)
    return GlobalLocalStructure(
        l2l_mask=l2l_mask,
        l2g_mask=l2g_mask.contiguous(),
        g2g_mask=g2g_mask.contiguous(),
        g2l_mask=g2l_mask.contiguous(),
        l2l_rel=l2l_rel.contiguous(),
        l2g_rel=torch.where(l2g_mask, label, zero),
        g2g_rel=g2g_rel,
        g2l_rel=torch.where(g2l_mask, label.transpose(1, 2), zero).contiguous(),
        local_radius=r,
    )


# ---------------------------------------------------------------------------
# small id helpers
# ---------------------------------------------------------------------------
def fixed_block_ids(
    long_padding_mask: torch.Tensor, block_len: int
) -> Tuple[torch.Tensor, int, torch.Tensor]:
    """The paper's "fixed blocks": one global token per ``block_len`` long tokens.

    Blocks are counted over non-padding tokens only (cumsum), so left, right or
    interior padding all give block ``n // block_len`` to the ``n``-th real token.

    Args:
        long_padding_mask: bool ``[B, L]``, True = padding.
        block_len: int ``>= 1``.
    Returns:
        long_segment: int64 ``[B, L]``, block index, -1 at padding.
        global_len: int, the most blocks of any row (``ceil(n_real / block_len)``; while
            ``torch.compile`` traces, the static ``ceil(L / block_len)``), at least 1 when ``L > 0`` (so all-padding batches still have one
            fully padded global slot), 0 when ``L == 0``.
        global_padding_mask: bool ``[B, global_len]``, True past each row's block count.
    """
    _check_mask("long_padding_mask", long_padding_mask)
    if isinstance(block_len, bool) or not isinstance(block_len, int) or block_len < 1:
        raise ConfigError(f"block_len must be an int >= 1, got {block_len!r}")
    B, L = long_padding_mask.shape
    device = long_padding_mask.device
    real = (~long_padding_mask).long()  # [B, L]
    rank = real.cumsum(dim=1) - 1  # [B, L]: 0-based index among real tokens
    segment = torch.where(real.bool(), rank // block_len, torch.full_like(rank, -1))
    n_blocks = (real.sum(dim=1) + block_len - 1) // block_len  # [B]
    if L == 0:
        global_len = 0
    elif not _validating(long_padding_mask):
        # in a static graph (torch.compile, XLA): a static length (every row's block count fits in it), no
        # host sync; the extra slots are padding (masked everywhere)
        global_len = max(-(-L // block_len), 1)
    else:
        global_len = max(int(n_blocks.max()) if B > 0 else 0, 1)
    global_padding_mask = torch.arange(global_len, device=device).unsqueeze(0) >= n_blocks.unsqueeze(1)
    return segment, global_len, global_padding_mask  # [B, L], int, [B, global_len]


def segment_ids_from_lengths(lengths: Sequence[int], *, start: int = 0) -> torch.Tensor:
    """Segment ids for consecutive segments: ``[2, 3] -> [0, 0, 1, 1, 1]``.

    Args:
        lengths: non-negative segment lengths.
        start: id of the first segment (e.g. 1 when global index 0 is a CLS token).
    Returns:
        int64 ``[sum(lengths)]``.
    """
    lengths_t = torch.as_tensor(list(lengths), dtype=torch.long)
    if bool((lengths_t < 0).any()):
        raise InputFormatError(f"lengths must be >= 0, got {list(lengths)}")
    return torch.repeat_interleave(torch.arange(len(lengths_t), dtype=torch.long) + start, lengths_t)
