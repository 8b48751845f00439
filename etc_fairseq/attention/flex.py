"""Global-local attention through ``torch.nn.attention.flex_attention`` (the GPU path).

The way FlexAttention's authors use it (``meta-pytorch/attention-gym``, torchtune's ``attention_utils``):
``flex_attention`` compiled once at module scope, one ``BlockMask`` per batch, ``mask_mod`` / ``score_mod``
as closures over small per-token tables. For ETC that means:

**One joint layout.** Queries are the global tokens then the long tokens, each side padded to a multiple
of :data:`BLOCK_SIZE` (``S = global_pad + long_pad`` rows), so both softmaxes of the paper are ONE flex call
per layer. Keys/values are laid out the same way; when the two query sides read different key/value
projections (ETC's per-piece or per-side projections) the key sequence holds both sets,
``[global side's keys (S) | long side's keys (S)]`` (``split_kv``), and a query only sees its side's half.
Padding the lengths to the block size keeps every block of the mask whole: no partial last block, so the
NaN gradients that FlexAttention gives with a ``block_mask`` plus a ``score_mod`` at lengths that are not a
multiple of 128 (pytorch issue 153799) cannot arise. The padding rows and keys are masked; outputs are cut
back by the caller.

**One BlockMask per batch**, shared by every layer: a :class:`FlexPlan`. It is built from the structure's
``mask_mod`` evaluated only on the tiles that can hold an allowed pair (global query rows x every key
block of their side; long query rows x the global key blocks + the band blocks within the radius), never
on the full ``S x S`` grid: ``O(long_len * (radius + global_len))`` work and memory, like the attention
itself (``create_block_mask`` evaluates every pair, ``S^2``). Tiles where every pair is allowed become
"full" blocks (the kernel skips ``mask_mod`` there).

**mask_mod and score_mod** come from four piece functions (l2l, l2g, g2g, g2l), each ``(b, query_pos,
key_pos) -> allowed`` and ``-> label id``: :mod:`etc_fairseq.structure.flex_plan` writes them over the
compact per-token structure ids (segments, examples, contexts, hard-g2l owners, padding: relative positions
computed arithmetically, the g2g labels and the segment ancestry read from small ``[G, G]`` tables);
:func:`flex_plan_from_structure` writes them over a built :class:`~.common.GlobalLocalStructure` (any
masks, e.g. official ETC's). Every table is read at an int64 flat offset (:func:`read`): inside the
kernel the indices are int32, and ``b * L * G`` or ``((b * H + h) * S + q) * labels`` passes 2^31 at long
lengths (NVIDIA NeMo Automodel PR 3802: a mask read through int32 offsets is silently wrong past ~46k
tokens and crashes at 64k).

**The relative term** is a ``score_mod`` reading ``table[b, h, q, label(b, q, k)]``, where the table holds
every query's score for every label (``(q . e_n + bias_n) / sqrt(head_dim)``, float32, computed once per
layer as an ordinary autograd tensor; a piece without labels reads :data:`NO_LABEL`, which adds 0). Its
gradient is
computed by FlexAttention for the captured table: correct, accumulated with atomic adds in the Triton
backend (not bitwise deterministic); the FA4 backend (``kernel_options={"BACKEND": "FLASH"}``) has no
backward for captured tensors that need gradients, so it is not used.

**No attention dropout**: FlexAttention has none (pytorch issue 141784), so this path applies none: the
default on CUDA, where :func:`attention_backend` picks it (training without attention dropout, as
ModernBERT's configuration does, was measured not to hurt: ``docs/gpu.md``); the blocked kernel applies
``attention_dropout`` (``attention_backend="blocked"``). On CPU, torch's flex attention has a compiled
forward and no backward (torch 2.13): usable for inference there, and ``tests/test_flex.py`` checks it
against the dense reference on CPU.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.guards import parse_json

from .common import GlobalLocalStructure, softmax_dtype

__all__ = [
    "BLOCK_SIZE",
    "SIDES",
    "NO_LABEL",
    "flex_available",
    "attention_backend",
    "padded_len",
    "materialized",
    "FlexLayout",
    "FlexPlan",
    "build_flex_plan",
    "flex_plan_from_structure",
    "pair_code_table",
    "flex_kernel_options",
    "set_flex_kernel_options",
    "relative_table",
    "flex_joint_attention",
    "flex_global_local_attention",
    "flex_long_query_attention",
    "flex_global_query_attention",
]

#: Query/key block of the BlockMask and the length every side is padded to a multiple of.
BLOCK_SIZE = 128
#: The query sides, in joint-layout order.
SIDES = ("global", "long")
#: The label id of a piece without relative term (past every table: adds nothing).
NO_LABEL = 1 << 30
#: Mask elements evaluated at once while a plan finds its blocks (bounds the eager memory: int64
#: temporaries of this many elements).
_EVAL_ELEMENTS = 1 << 22

#: One piece's rule: ``(b, query_pos, key_pos) -> bool allowed`` or ``-> int64 label``, elementwise over
#: broadcastable integer tensors (None: never allowed / no relative term).
PieceFn = Optional[Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]


def flex_available() -> bool:
    """Whether this torch has ``torch.nn.attention.flex_attention``."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def attention_backend(device: torch.device) -> str:
    """What ``"auto"`` means on ``device``: ``"flex"`` on CUDA when flex attention exists, else ``"blocked"``
    (the CPU path: torch's flex attention has no CPU backward). The flex path applies no attention dropout."""
    if device.type == "cuda" and flex_available():
        return "flex"
    return "blocked"


if flex_available():
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
else:  # pragma: no cover - torch without flex attention
    BlockMask = flex_attention = None


@torch.library.custom_op("etc_fairseq::materialized", mutates_args=())
def _materialized(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_materialized.register_fake
def _(x):
    return torch.empty_like(x)


_materialized.register_autograd(lambda ctx, grad: grad)


def materialized(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a buffer of its own in a graph that inductor compiles for CPU (elsewhere ``t`` itself).

    torch 2.13's CPU FlexAttention lowering cannot read a tensor captured by ``score_mod`` that the same
    graph computes elementwise (``NoValidChoicesError``: it asks the unrealised node for a buffer name); an
    opaque copy (a custom op) gives it one. The tables are per-token ids: the copy is small.
    """
    if torch.compiler.is_compiling() and t.device.type == "cpu":
        return _materialized(t)
    return t


def padded_len(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`BLOCK_SIZE`, at least one block (an empty side becomes one
    fully masked block, so that every table the kernel reads has rows)."""
    return max(1, -(-int(n) // BLOCK_SIZE)) * BLOCK_SIZE


# ----------------------------------------------------------------------------
# the joint layout
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FlexLayout:
    """Sizes of one batch's joint layout (see the module docstring).

    batch; long_len / global_len: the real lengths; long_pad / global_pad: padded to :data:`BLOCK_SIZE`;
    split_kv: keys hold each query side's own set (``2 * S`` keys) instead of one shared set (``S``);
    local_radius: ``r``.
    """

    batch: int
    long_len: int
    global_len: int
    long_pad: int
    global_pad: int
    split_kv: bool
    local_radius: int

    @staticmethod
    def of(batch: int, long_len: int, global_len: int, split_kv: bool, local_radius: int) -> "FlexLayout":
        return FlexLayout(batch, long_len, global_len, padded_len(long_len), padded_len(global_len),
                          bool(split_kv), int(local_radius))

    @property
    def rows(self) -> int:
        """``S``: query rows of both sides (and keys of one side)."""
        return self.global_pad + self.long_pad

    @property
    def kv_len(self) -> int:
        return 2 * self.rows if self.split_kv else self.rows

    def side_rows(self, sides: Sequence[str]) -> Tuple[int, int]:
        """``(first, count)`` of the query rows of ``sides`` (a non-empty ordered subset of :data:`SIDES`)."""
        if tuple(sides) == SIDES:
            return 0, self.rows
        if tuple(sides) == ("global",):
            return 0, self.global_pad
        if tuple(sides) == ("long",):
            return self.global_pad, self.long_pad
        raise ValueError(f"sides: expected a non-empty ordered subset of {SIDES}, got {tuple(sides)}")

    def side_keys(self, sides: Sequence[str]) -> Tuple[int, int]:
        """``(first, count)`` of the keys the queries of ``sides`` read."""
        if not self.split_kv:
            return 0, self.rows
        if tuple(sides) == ("long",):
            return self.rows, self.rows
        return 0, self.kv_len if tuple(sides) == SIDES else self.rows


def _decode(layout: FlexLayout, q: torch.Tensor, kv: torch.Tensor):
    """Joint indices -> (query is global, its global / long position, key is global, its global / long
    position, key side matches the query side). Positions are clamped into range (the other branch)."""
    gp, lp, s = layout.global_pad, layout.long_pad, layout.rows
    q_global = q < gp
    if layout.split_kv:
        key_long_side = kv >= s
        kv = torch.where(key_long_side, kv - s, kv)
        side_ok = key_long_side != q_global
    else:
        side_ok = None
    k_global = kv < gp
    return (q_global, q.clamp(max=gp - 1), (q - gp).clamp(0, lp - 1),
            k_global, kv.clamp(max=gp - 1), (kv - gp).clamp(0, lp - 1), side_ok)


def joint_mask_mod(layout: FlexLayout, allowed: Dict[str, PieceFn]):
    """The ``mask_mod(b, h, q, kv)`` of the joint layout from the four pieces' ``allowed`` rules (l2l also
    needs ``|k - q| <= r`` and a real key position)."""
    r, long_len = layout.local_radius, layout.long_len

    def piece(name, b, qp, kp):
        fn = allowed.get(name)
        return fn(b, qp, kp) if fn is not None else torch.zeros_like(qp + kp, dtype=torch.bool)

    def mask_mod(b, h, q, kv):
        qg, qgp, qlp, kg, kgp, klp, side_ok = _decode(layout, q, kv)
        band = ((klp - qlp).abs() <= r) & (klp < long_len)
        out = torch.where(
            qg, torch.where(kg, piece("g2g", b, qgp, kgp), piece("g2l", b, qgp, klp)),
            torch.where(kg, piece("l2g", b, qlp, kgp), band & piece("l2l", b, qlp, klp)))
        return out if side_ok is None else out & side_ok

    return mask_mod


def joint_label(layout: FlexLayout, labels: Dict[str, PieceFn]):
    """``label(b, q, kv) -> int64`` of the joint layout from the four pieces' label rules (a piece without
    labels gets :data:`NO_LABEL`)."""

    def piece(name, b, qp, kp):
        fn = labels.get(name)
        return fn(b, qp, kp).to(torch.int64) if fn is not None else torch.full_like(qp + kp, NO_LABEL,
                                                                                    dtype=torch.int64)

    def label(b, q, kv):
        qg, qgp, qlp, kg, kgp, klp, _ = _decode(layout, q, kv)
        return torch.where(
            qg, torch.where(kg, piece("g2g", b, qgp, kgp), piece("g2l", b, qgp, klp)),
            torch.where(kg, piece("l2g", b, qlp, kgp), piece("l2l", b, qlp, klp)))

    return label


# ----------------------------------------------------------------------------
# the plan: one BlockMask per batch
# ----------------------------------------------------------------------------


def _candidate_tiles(layout: FlexLayout, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The (query block, key block) tiles that can hold an allowed pair: int64 ``[P]`` rows and ``[P]`` key
    blocks, the key block ``-1`` for a band tile beyond either end (skipped). Global query rows x every key
    block of the global side; long query rows x the long side's global blocks and its band blocks."""
    bs = BLOCK_SIZE
    n_g, n_l = layout.global_pad // bs, layout.long_pad // bs
    n_s = n_g + n_l
    long_side = n_s if layout.split_kv else 0  # first key block of the long queries' keys
    width = -(-min(layout.local_radius, layout.long_pad) // bs)  # band blocks on each side
    g_rows = torch.arange(n_g, device=device).repeat_interleave(n_s)
    g_cols = torch.arange(n_s, device=device).repeat(n_g)
    i = torch.arange(n_l, device=device).view(n_l, 1)
    band = i + torch.arange(-width, width + 1, device=device).view(1, -1)  # [n_l, 2w+1] long blocks
    band_cols = torch.where((band >= 0) & (band < n_l), long_side + n_g + band, torch.full_like(band, -1))
    l_cols = torch.cat([(long_side + torch.arange(n_g, device=device)).view(1, n_g).expand(n_l, n_g), band_cols], 1)
    l_rows = (n_g + i).expand_as(l_cols)
    return torch.cat([g_rows, l_rows.reshape(-1)]), torch.cat([g_cols, l_cols.reshape(-1)])


def _block_matrices(layout: FlexLayout, mask_mod, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Which tiles hold some allowed pair ("partial") and which only allowed pairs ("full").

    Returns:
        bool ``[B, n_rows, n_key_blocks]`` twice (partial excludes full), from ``mask_mod`` evaluated on
        the candidate tiles only, :data:`_EVAL_ELEMENTS` mask elements at a time.
    """
    bs, B = BLOCK_SIZE, layout.batch
    n_rows, n_cols = layout.rows // bs, layout.kv_len // bs
    rows, cols = _candidate_tiles(layout, device)
    ar = torch.arange(bs, device=device)
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.zeros((), dtype=torch.int64, device=device)
    anys, alls = [], []
    step = max(1, _EVAL_ELEMENTS // (B * bs * bs))
    for s in range(0, rows.shape[0], step):
        r, c = rows[s:s + step], cols[s:s + step]
        q = (r * bs).view(-1, 1, 1) + ar.view(1, bs, 1)  # [P, bs, 1]
        kv = (c.clamp(min=0) * bs).view(-1, 1, 1) + ar.view(1, 1, bs)  # [P, 1, bs]
        m = mask_mod(b, h, q, kv) & (c >= 0).view(1, -1, 1, 1)  # [B, P, bs, bs]
        anys.append(m.any(-1).any(-1))
        alls.append(m.all(-1).all(-1))
    any_, all_ = torch.cat(anys, 1), torch.cat(alls, 1)  # [B, P]
    # scatter into [B, rows, cols + 1]; skipped tiles land in the extra column
    flat = (rows * (n_cols + 1) + torch.where(cols >= 0, cols, torch.full_like(cols, n_cols))).expand(B, -1)

    def matrix(values):
        m = torch.zeros(B, n_rows * (n_cols + 1), dtype=torch.bool, device=device)
        return m.scatter(1, flat, values).view(B, n_rows, n_cols + 1)[:, :, :n_cols]

    return matrix(any_ & ~all_), matrix(all_)


def _ordered(dense: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """bool ``[B, rows, cols]`` -> BlockMask's (num_blocks int32 ``[B, 1, rows]``, indices int32
    ``[B, 1, rows, cols]``: the listed blocks first, in order)."""
    d = dense.to(torch.int32).unsqueeze(1)
    return d.sum(-1, dtype=torch.int32), torch.argsort(d, dim=-1, descending=True, stable=True).to(torch.int32)


@dataclass
class FlexPlan:
    """One batch's attention structure for FlexAttention, shared by every layer and both halves.

    layout: the sizes; mask_mod: over the joint layout; label: ``(b, q, kv) -> int64`` label id over the
    joint layout (:data:`NO_LABEL` where a piece has none), or None (no relative term anywhere); partial /
    full: bool ``[B, rows/128, keys/128]``
    block matrices. :meth:`block_mask` gives the BlockMask of some query sides (built once each).
    """

    layout: FlexLayout
    mask_mod: Callable
    label: Optional[Callable]
    partial: torch.Tensor
    full: torch.Tensor
    _block_masks: Dict[Tuple[str, ...], "BlockMask"] = field(default_factory=dict, repr=False)

    def block_mask(self, sides: Sequence[str] = SIDES) -> "BlockMask":
        """The BlockMask of the queries of ``sides`` against the keys they read (one per plan and sides)."""
        sides = tuple(sides)
        if sides not in self._block_masks:
            bs = BLOCK_SIZE
            q0, nq = self.layout.side_rows(sides)
            k0, nk = self.layout.side_keys(sides)
            rows, cols = slice(q0 // bs, (q0 + nq) // bs), slice(k0 // bs, (k0 + nk) // bs)
            num, idx = _ordered(self.partial[:, rows, cols])
            full_num, full_idx = _ordered(self.full[:, rows, cols])
            self._block_masks[sides] = BlockMask.from_kv_blocks(
                num, idx, full_num, full_idx, BLOCK_SIZE=bs, mask_mod=_shifted(self.mask_mod, q0, k0),
                seq_lengths=(nq, nk))
        return self._block_masks[sides]


def _shifted(fn, q0: int, k0: int):
    """``fn(b, h, q + q0, kv + k0)`` (the mask of a block of the joint layout's rows and keys)."""
    if q0 == 0 and k0 == 0:
        return fn

    def shifted(b, h, q, kv):
        return fn(b, h, q + q0, kv + k0)

    return shifted


def build_flex_plan(layout: FlexLayout, allowed: Dict[str, PieceFn], labels: Dict[str, PieceFn],
                    device) -> FlexPlan:
    """A :class:`FlexPlan` from the four pieces' rules (``allowed`` / ``labels``: piece name -> rule, see
    :data:`PieceFn`; an empty ``labels``: no relative term)."""
    mask_mod = joint_mask_mod(layout, allowed)
    label = joint_label(layout, labels) if labels else None
    partial, full = _block_matrices(layout, mask_mod, device)
    return FlexPlan(layout, mask_mod, label, partial, full)


def flex_plan_from_structure(structure: GlobalLocalStructure, split_kv: bool) -> FlexPlan:
    """A :class:`FlexPlan` reading the masks and labels of a built structure (any masks: random ones,
    official ETC's); a None mask or label tensor: that piece is never allowed / has no relative term.

    Each piece's mask and labels are packed into one int32 code per pair (the label where allowed, -1
    where not; :func:`pair_code_table`), and the four pieces' codes into one flat table, so the kernel reads
    ONE table entry per (query, key) for both the mask and the label, at an offset computed from the
    pair's piece: reading each piece's mask and label tables separately takes eight reads per pair, which
    the GPU kernel holds in shared memory per tile (torch's default tiles then need more than an H200 has:
    ``docs/gpu.md``). The compact-id plan of :mod:`etc_fairseq.structure.flex_plan` is the model's path.
    """
    s = structure
    B, L, G, r = s.batch_size, s.long_len, s.global_len, s.local_radius
    lay = FlexLayout.of(B, L, G, split_kv, r)
    dl, dg = lay.long_pad - L, lay.global_pad - G
    pieces = {  # name: (mask, labels, padded rows, padded columns)
        "l2l": (s.l2l_mask, s.l2l_rel, dl, 0), "l2g": (s.l2g_mask, s.l2g_rel, dl, dg),
        "g2g": (s.g2g_mask, s.g2g_rel, dg, dg), "g2l": (s.g2l_mask, s.g2l_rel, dg, dl),
    }
    has_labels = any(lab is not None for _, lab, _, _ in pieces.values())
    tables, starts, shapes, start = [], {}, {}, 0
    for name, (mask, labels, rows, cols) in pieces.items():
        if mask is None:
            continue
        code = F.pad(pair_code_table(mask, labels if has_labels else None), (0, cols, 0, rows), value=-1)
        tables.append(code.reshape(-1))
        starts[name], shapes[name], start = start, code.shape[1:], start + code.numel()
    codes = materialized(torch.cat(tables)) if tables else None

    def piece_offset(name, b, qp, kp):
        """int64 flat offset of (b, qp, kp) in ``name``'s codes (l2l: the band slot ``kp - qp + r``)."""
        rows, cols = shapes[name]
        col = (kp - qp + r).clamp(0, 2 * r) if name == "l2l" else kp
        return starts[name] + (b.to(torch.int64) * rows + qp.to(torch.int64)) * cols + col.to(torch.int64)

    def code(b, q, kv):
        """int32 code of joint pair (q, kv) (:func:`pair_code_table`): its label where allowed, -1 where not."""
        qg, qgp, qlp, kg, kgp, klp, _ = _decode(lay, q, kv)
        dead = torch.full_like(qgp + kgp, -1, dtype=torch.int64)
        off = {name: (piece_offset(name, b, qp, kp) if name in starts else dead)
               for name, qp, kp in (("g2g", qgp, kgp), ("g2l", qgp, klp), ("l2g", qlp, kgp), ("l2l", qlp, klp))}
        off = torch.where(qg, torch.where(kg, off["g2g"], off["g2l"]), torch.where(kg, off["l2g"], off["l2l"]))
        return torch.where(off >= 0, codes[off.clamp(min=0)], -1)

    def mask_mod(b, h, q, kv):
        if codes is None:
            return torch.zeros_like(q + kv, dtype=torch.bool)
        qg, _, qlp, kg, _, klp, side_ok = _decode(lay, q, kv)
        band = qg | kg | (((klp - qlp).abs() <= r) & (klp < L))
        out = (code(b, q, kv) >= 0) & band
        return out if side_ok is None else out & side_ok

    def label(b, q, kv):
        return code(b, q, kv).to(torch.int64).clamp(min=0)

    partial, full = _block_matrices(lay, mask_mod, s.device)
    return FlexPlan(lay, mask_mod, label if has_labels and codes is not None else None, partial, full)


def pair_code_table(mask: torch.Tensor, labels: Optional[torch.Tensor]) -> torch.Tensor:
    """One piece's mask and labels as one code per pair.

    Args:
        mask: bool ``[B, n, m]`` (l2l: ``[B, L, 2r+1]`` band slots).
        labels: int ``[B, n, m]`` label ids, or None (no relative term on this piece).
    Returns:
        int32 ``[B, n, m]``: the label where allowed (:data:`NO_LABEL` where the piece has no labels), -1
        where not.
    """
    value = labels.to(torch.int32) if labels is not None else torch.full_like(mask, NO_LABEL, dtype=torch.int32)
    return torch.where(mask, value, torch.full_like(value, -1))


# ----------------------------------------------------------------------------
# the attention
# ----------------------------------------------------------------------------


def relative_table(q: torch.Tensor, rel_emb: torch.Tensor, rel_bias: Optional[torch.Tensor]) -> torch.Tensor:
    """Every query's score for every label, scaled like the dot products.

    One product of ``[q / sqrt(D), 1 / sqrt(D)]`` with ``[rel_emb, rel_bias]``, so that the table is the
    output of a matrix product: torch 2.13's CPU FlexAttention lowering cannot read a captured tensor
    that is the output of an elementwise op (NoValidChoicesError).

    Args:
        q: float ``[B, H, n, D]``.
        rel_emb: float ``[N, H, D]``; rel_bias: float ``[N, H]`` or None.
    Returns:
        float32 (float64 for float64 ``q``) ``[B, H, n, N]``: ``(q . rel_emb[l, h] + rel_bias[l, h]) / sqrt(D)``.
    """
    comp = softmax_dtype(q.dtype)
    scale = 1.0 / math.sqrt(q.shape[-1])
    q = q.to(comp) * scale
    emb = rel_emb.to(comp)
    if rel_bias is not None:
        q = torch.cat([q, torch.full_like(q[..., :1], scale)], dim=-1)  # [B, H, n, D + 1]
        emb = torch.cat([emb, rel_bias.to(comp).unsqueeze(-1)], dim=-1)  # [N, H, D + 1]
    return torch.einsum("bhid,nhd->bhin", q, emb)


def flex_joint_attention(
    plan: FlexPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    tables: Optional[Sequence[Optional[torch.Tensor]]] = None, sides: Sequence[str] = SIDES,
    compile: Optional[bool] = None,
) -> torch.Tensor:
    """ONE flex-attention call: the queries of ``sides`` against the keys they read, in the joint layout.

    Args:
        plan: the batch's :class:`FlexPlan`.
        q: float ``[B, H, rows, D]``: the rows of ``sides`` (:meth:`FlexLayout.side_rows`), global first.
        k, v: float ``[B, H, keys, D]`` (:meth:`FlexLayout.side_keys`).
        tables: per side of ``sides``, float ``[B, H, side_rows, N]`` (:func:`relative_table` of its padded
            queries; label ids from ``N`` on add nothing) or None (no relative term on that side).
        compile: use the module's compiled ``flex_attention`` (default: on CUDA). Inside ``torch.compile``
            the plain one is traced into the caller's graph.
    Returns:
        float ``[B, H, rows, D]``; rows with no allowed key are 0.
    """
    sides = tuple(sides)
    q0, _ = plan.layout.side_rows(sides)
    k0, _ = plan.layout.side_keys(sides)
    score_mod = None
    if tables is not None and plan.label is not None and any(t is not None for t in tables):
        score_mod = _relative_score_mod(plan, sides, tables, q0, k0)
    if compile is None:
        compile = q.is_cuda
    attend = _compiled_flex() if compile and not torch.compiler.is_compiling() else flex_attention
    return attend(q, k, v, score_mod=score_mod, block_mask=plan.block_mask(sides), scale=1.0 / math.sqrt(q.shape[-1]),
                  kernel_options=flex_kernel_options())


def _relative_score_mod(plan: FlexPlan, sides, tables, q0: int, k0: int):
    """``score + table[side][b, h, row, label(b, q, kv)]``, the side and its row from the query's row; 0 for a
    label past the table (:data:`NO_LABEL`) or a side without table."""
    label = plan.label
    starts = {"global": 0, "long": plan.layout.global_pad if len(sides) == 2 else 0}
    parts = [(starts[s], t.shape[1], t.shape[2], t.shape[3], materialized(t.reshape(-1)))
             for s, t in zip(sides, tables) if t is not None]
    long_start = starts["long"] if len(sides) == 2 else None  # rows from here on are long queries

    def side_value(b, h, qi, lab, start, heads, rows, n, flat):
        row = (qi.to(torch.int64) - start).clamp(0, rows - 1)
        off = ((b.to(torch.int64) * heads + h.to(torch.int64)) * rows + row) * n + lab.clamp(0, n - 1)
        return torch.where(lab < n, flat[off], 0.0)

    def score_mod(score, b, h, qi, kv):
        lab = label(b, qi + q0, kv + k0)
        values = [(start, side_value(b, h, qi, lab, start, *rest)) for start, *rest in parts]
        if long_start is None:
            return score + values[0][1]
        if len(values) == 2:
            return score + torch.where(qi < long_start, values[0][1], values[1][1])
        start, value = values[0]  # both sides present, one of them without table
        return score + torch.where((qi >= long_start) == (start == long_start), value, 0.0)

    return score_mod


#: environment variable holding the process's :func:`flex_kernel_options` as a JSON object
KERNEL_OPTIONS_ENV = "ETC_FLEX_KERNEL_OPTIONS"


def _options_from_env() -> Tuple[Optional[Dict], Optional[str]]:
    """(options, None) from ``ETC_FLEX_KERNEL_OPTIONS``, or (None, the error) when it is not a JSON object."""
    text = os.environ.get(KERNEL_OPTIONS_ENV, "").strip()
    if not text:
        return None, None
    expected = 'a JSON object such as {"num_stages": 1}'
    try:
        options = parse_json(text, KERNEL_OPTIONS_ENV, expected)
    except InputFormatError as e:
        return None, str(e)
    if not isinstance(options, dict):
        return None, f"{KERNEL_OPTIONS_ENV}={text!r}: {expected} expected"
    return options or None, None


# read at import, not at the first call: that call may be inside torch.compile's tracing
_kernel_options, _kernel_options_error = _options_from_env()


def set_flex_kernel_options(options: Optional[Dict]) -> None:
    """Set the ``kernel_options`` every ``flex_attention`` call of this process passes (torch's
    ``FlexKernelOptions``: ``BLOCK_M``, ``BLOCK_N``, ``num_stages``, ``num_warps``, ``fwd_``/``bwd_``
    prefixed variants); None: torch's defaults for the GPU. A tile configuration is a property of the GPU
    and the kernel, not of a model, so it is set per process (as ``torch.backends`` flags are); the
    environment variable ``ETC_FLEX_KERNEL_OPTIONS`` (a JSON object, read when this module is imported)
    sets it for a command such as ``fairseq-train``."""
    global _kernel_options, _kernel_options_error
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"flex kernel options must be a dict (torch's FlexKernelOptions) or None, got {options!r}")
    _kernel_options, _kernel_options_error = (dict(options) if options else None), None


def flex_kernel_options() -> Optional[Dict]:
    """The ``kernel_options`` of this process's ``flex_attention`` calls (:func:`set_flex_kernel_options`)."""
    if _kernel_options_error is not None:
        raise ConfigError(_kernel_options_error)
    return _kernel_options


@functools.lru_cache(maxsize=None)
def _compiled_flex():
    """``flex_attention`` compiled once per process (created on first use: ``torch.compile`` imports
    dynamo, seconds). Shapes are automatic-dynamic: the first padded shape compiles a static kernel, the
    first different one a kernel with symbolic lengths that serves every later length. With
    ``dynamic=False`` each padded length (a multiple of 128) would compile its own, and past dynamo's
    recompile limit (8) flex attention falls back to its unfused reference, which materialises the full
    ``[B, H, rows, keys]`` score matrix: a variable-length training run would slow down and run out of
    memory (``tests/test_flex.py::test_compiled_flex_serves_many_lengths``)."""
    return torch.compile(flex_attention)


def _pad_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """float ``[B, H, m, D]`` -> ``[B, H, n, D]`` (zero rows appended)."""
    return F.pad(x, (0, 0, 0, n - x.shape[2])) if n != x.shape[2] else x


def flex_global_local_attention(
    long_q, long_k, long_v, global_q, global_k, global_v, structure: GlobalLocalStructure, *,
    long_rel_emb=None, global_rel_emb=None, long_rel_bias=None, global_rel_bias=None, l2g_kv=None, g2l_kv=None,
    dropout_p: float = 0.0, compile: Optional[bool] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`etc_fairseq.attention.global_local_attention` through FlexAttention (arguments and results
    as there; inputs trusted): a plan from the structure's masks (:func:`flex_plan_from_structure`), the
    queries and keys laid out jointly, one flex call. ``dropout_p`` must be 0.
    """
    if dropout_p > 0.0:
        raise ConfigError("dropout_p: flex attention has no attention dropout; use the blocked kernel")
    l2g_k, l2g_v = l2g_kv if l2g_kv is not None else (global_k, global_v)
    g2l_k, g2l_v = g2l_kv if g2l_kv is not None else (long_k, long_v)
    plan = flex_plan_from_structure(structure, split_kv=l2g_kv is not None or g2l_kv is not None)
    lay = plan.layout
    gp, lp = lay.global_pad, lay.long_pad
    q = torch.cat([_pad_rows(global_q, gp), _pad_rows(long_q, lp)], 2)
    parts_k = [_pad_rows(global_k, gp), _pad_rows(g2l_k, lp)]
    parts_v = [_pad_rows(global_v, gp), _pad_rows(g2l_v, lp)]
    if lay.split_kv:
        parts_k += [_pad_rows(l2g_k, gp), _pad_rows(long_k, lp)]
        parts_v += [_pad_rows(l2g_v, gp), _pad_rows(long_v, lp)]
    rel = [(global_rel_emb, global_rel_bias, q[:, :, :gp]), (long_rel_emb, long_rel_bias, q[:, :, gp:])]
    side_tables = [None if e is None else relative_table(x, e, bias) for e, bias, x in rel]
    out = flex_joint_attention(plan, q, torch.cat(parts_k, 2), torch.cat(parts_v, 2), side_tables, SIDES, compile)
    return out[:, :, gp:gp + long_q.shape[2]], out[:, :, :global_q.shape[2]]


def _one_side(side, q, k_global_tokens, v_global_tokens, k_long_tokens, v_long_tokens, structure,
              rel_emb, rel_bias, dropout_p, compile):
    """One query side through the joint layout (the halves of the registry): its rows only, its keys only."""
    if dropout_p > 0.0:
        raise ConfigError("dropout_p: flex attention has no attention dropout; use the blocked kernel")
    plan = flex_plan_from_structure(structure, split_kv=False)
    lay = plan.layout
    k = torch.cat([_pad_rows(k_global_tokens, lay.global_pad), _pad_rows(k_long_tokens, lay.long_pad)], 2)
    v = torch.cat([_pad_rows(v_global_tokens, lay.global_pad), _pad_rows(v_long_tokens, lay.long_pad)], 2)
    n = lay.side_rows((side,))[1]
    qp = _pad_rows(q, n)
    table = None if rel_emb is None else relative_table(qp, rel_emb, rel_bias)
    return flex_joint_attention(plan, qp, k, v, [table], (side,), compile)[:, :, :q.shape[2]]


def flex_long_query_attention(
    long_q, l2l_k, l2l_v, l2g_k, l2g_v, *, local_radius, l2l_mask, l2g_mask, l2l_rel=None, l2g_rel=None,
    rel_emb=None, rel_bias=None, dropout_p=0.0, compile: Optional[bool] = None,
) -> torch.Tensor:
    """The long-query half through FlexAttention (arguments and result as
    :func:`etc_fairseq.attention.blocked.long_query_attention`; inputs trusted; ``dropout_p`` must be 0).

    Returns:
        float ``[batch, heads, long_len, head_dim]``; rows with no allowed key are 0.
    """
    B, L, G = long_q.shape[0], long_q.shape[2], l2g_k.shape[2]
    none = torch.zeros((B, G, G), dtype=torch.bool, device=long_q.device)
    structure = GlobalLocalStructure(l2l_mask, l2g_mask, none, none.new_zeros((B, G, L)), int(local_radius),
                                     l2l_rel=l2l_rel, l2g_rel=l2g_rel)
    return _one_side("long", long_q, l2g_k, l2g_v, l2l_k, l2l_v, structure, rel_emb, rel_bias, dropout_p, compile)


def flex_global_query_attention(
    global_q, g2g_k, g2g_v, g2l_k, g2l_v, *, g2g_mask, g2l_mask, g2g_rel=None, g2l_rel=None,
    rel_emb=None, rel_bias=None, dropout_p=0.0, compile: Optional[bool] = None,
) -> torch.Tensor:
    """The global-query half through FlexAttention (arguments and result as
    :func:`etc_fairseq.attention.blocked.global_query_attention`; inputs trusted; ``dropout_p`` must be 0).

    Returns:
        float ``[batch, heads, global_len, head_dim]``; rows with no allowed key are 0.
    """
    B, G, L = global_q.shape[0], global_q.shape[2], g2l_k.shape[2]
    structure = GlobalLocalStructure(
        torch.zeros((B, L, 1), dtype=torch.bool, device=global_q.device), torch.zeros((B, L, G), dtype=torch.bool,
                                                                                    device=global_q.device),
        g2g_mask, g2l_mask, 0, g2g_rel=g2g_rel, g2l_rel=g2l_rel)
    return _one_side("global", global_q, g2g_k, g2g_v, g2l_k, g2l_v, structure, rel_emb, rel_bias, dropout_p,
                     compile)
