"""Seeing an example's attention structure: label grids and their picture (what ``etc-show`` draws).

ETC's attention is split into four pieces (paper Sec. 3, figures 2-3); every (query, key) pair has a
mask bit and a relative label (:mod:`etc_fairseq.structure.labels`). This module turns one example
(long tokens, global tokens and its compact structure ids) into four *label grids*, built with the
model's own :func:`~etc_fairseq.structure.builders.build_structure`, so the picture shows exactly what
the model is given:

============  ============================  ===========================================
grid          shape                         meaning of ``grid[q, c]``
============  ============================  ===========================================
``g2g``       ``[G, G]``                    global query ``q``, global key ``c``
``g2l``       ``[G, L]``                    global query ``q``, long key ``c``
``l2g``       ``[L, G]``                    long query ``q``, global key ``c``
``l2l``       ``[L, 2r+1]``                 long query ``q``, long key ``q + c - r`` (the band)
============  ============================  ===========================================

Each cell holds the label id (int64), or :data:`MASKED` (-1) where the mask forbids attention. Long
inputs are therefore drawn as the banded l2l window next to the three other blocks (paper figure 2c),
never as an ``n x n`` image.

:func:`render_structure` draws the grids with matplotlib (Agg backend) into a PNG: global queries on
top, long queries below; global keys left, long keys (g2l) or relative offsets (l2l) right; masked cells
white; every label name in the legend with its colour; token text on the axes where the cells are big
enough for it. It returns the pixel layout of the panels, so a cell's pixel can be located exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from etc_fairseq.errors import ConfigError
from etc_fairseq.structure.builders import STRUCTURE_KEYS, build_structure
from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.structure.labels import RelativeLabelVocab

__all__ = [
    "MASKED",
    "PIECES",
    "STRUCTURE_KEYS",
    "LabelGrids",
    "PanelBox",
    "RenderLayout",
    "crop_grids",
    "global_token_texts",
    "gpt2_token_texts",
    "grid_rgb",
    "label_grids",
    "label_palette",
    "render_structure",
]

#: label-grid value of a masked (forbidden) cell.
MASKED = -1

#: the four attention pieces, in drawing order.
PIECES = ("g2g", "g2l", "l2g", "l2l")


_WHITE = (1.0, 1.0, 1.0)


# ---------------------------------------------------------------------------------------------------------
# example -> label grids
# ---------------------------------------------------------------------------------------------------------
@dataclass
class LabelGrids:
    """The four label grids of one example (see the module docstring).

    Attributes:
        g2g: int64 ``[G, G]``; g2l: int64 ``[G, L]``; l2g: int64 ``[L, G]``; l2l: int64 ``[L, 2r+1]``:
            label ids, :data:`MASKED` where attention is masked.
        radius: the l2l radius ``r``.
        vocab: the label vocabulary the ids index.
        long_len / global_len: the example's full lengths (before any crop).
        long_shown / global_shown: how many long / global tokens the grids keep (:func:`crop_grids`).
    """

    g2g: np.ndarray
    g2l: np.ndarray
    l2g: np.ndarray
    l2l: np.ndarray
    radius: int
    vocab: RelativeLabelVocab
    long_len: int
    global_len: int
    long_shown: int
    global_shown: int

    @property
    def cropped(self) -> bool:
        return self.long_shown < self.long_len or self.global_shown < self.global_len

    def piece(self, name: str) -> np.ndarray:
        """One grid by piece name (``g2g``, ``g2l``, ``l2g``, ``l2l``)."""
        if name not in PIECES:
            raise KeyError(f"unknown attention piece {name!r}; expected one of {PIECES}")
        return getattr(self, name)


def _as_long_tensor(name: str, value, shape_prefix: Tuple[int, ...]) -> torch.Tensor:
    """int64 tensor ``[1, *shape]`` from a 1-D (or 2-D for ``long_links``) array; checks the first dim."""
    t = torch.as_tensor(np.asarray(value), dtype=torch.long)
    if tuple(t.shape[: len(shape_prefix)]) != shape_prefix:
        raise ValueError(f"structure id {name!r} must start with shape {shape_prefix}, got {tuple(t.shape)}")
    return t.unsqueeze(0)


def label_grids(
    long_len: int,
    global_len: int,
    structure: Mapping[str, object],
    vocab: RelativeLabelVocab,
    radius: int,
    hard_g2l: bool = False,
    hard_l2g: bool = False,
) -> LabelGrids:
    """Label grids of one (unpadded) example, through :func:`build_structure`.

    Args:
        long_len / global_len: the example's lengths ``L`` and ``G``.
        structure: compact ids of one example, unbatched (numpy arrays / tensors / lists):
            ``long_segment`` int ``[L]``, ``global_parent`` int ``[G]``, ``long_context`` int ``[L]``,
            ``global_context`` int ``[G]``, ``long_example`` int ``[L]``, ``global_example`` int ``[G]``,
            ``long_links`` int ``[L, K]``; any may be missing (the builder's defaults apply).
        vocab: the relative-label vocabulary.
        radius: l2l radius ``r``.
        hard_g2l / hard_l2g: the hard masks (paper Sec. 3.3).
    Returns:
        :class:`LabelGrids` with int64 grids, :data:`MASKED` where the mask is False.
    Raises:
        ValueError: unknown structure keys, wrong shapes, or what :func:`build_structure` rejects.
    """
    unknown = set(structure) - set(STRUCTURE_KEYS)
    if unknown:
        raise ValueError(f"unknown structure ids {sorted(unknown)}; expected a subset of {STRUCTURE_KEYS}")
    L, G = int(long_len), int(global_len)
    ids = {}
    for name, value in structure.items():
        if value is None:
            continue
        ids[name] = _as_long_tensor(name, value, (L,) if name.startswith("long_") else (G,))
    built = build_structure(
        long_padding_mask=torch.zeros(1, L, dtype=torch.bool),
        global_padding_mask=torch.zeros(1, G, dtype=torch.bool),
        vocab=vocab,
        local_radius=int(radius),
        hard_g2l=hard_g2l,
        hard_l2g=hard_l2g,
        **ids,
    )

    def grid(mask: torch.Tensor, rel: torch.Tensor) -> np.ndarray:
        # mask bool [1, rows, cols], rel int64 [1, rows, cols] -> int64 [rows, cols]
        return torch.where(mask[0], rel[0], torch.full_like(rel[0], MASKED)).numpy().astype(np.int64)

    return LabelGrids(
        g2g=grid(built.g2g_mask, built.g2g_rel),
        g2l=grid(built.g2l_mask, built.g2l_rel),
        l2g=grid(built.l2g_mask, built.l2g_rel),
        l2l=grid(built.l2l_mask, built.l2l_rel),
        radius=int(radius),
        vocab=vocab,
        long_len=L,
        global_len=G,
        long_shown=L,
        global_shown=G,
    )


def crop_grids(grids: LabelGrids, max_long: Optional[int] = None, max_global: Optional[int] = None) -> LabelGrids:
    """Keep the first ``max_long`` long and ``max_global`` global tokens (None = all).

    The labels are those of the full example (a crop never changes a cell, it only leaves rows/columns
    out). Returns a new :class:`LabelGrids`; ``long_shown`` / ``global_shown`` say what was kept.
    """
    for name, v in (("max_long", max_long), ("max_global", max_global)):
        if v is not None and v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    nl = grids.long_shown if max_long is None else min(grids.long_shown, int(max_long))
    ng = grids.global_shown if max_global is None else min(grids.global_shown, int(max_global))
    return replace(
        grids,
        g2g=grids.g2g[:ng, :ng],
        g2l=grids.g2l[:ng, :nl],
        l2g=grids.l2g[:nl, :ng],
        l2l=grids.l2l[:nl],
        long_shown=nl,
        global_shown=ng,
    )


# ---------------------------------------------------------------------------------------------------------
# token text
# ---------------------------------------------------------------------------------------------------------
_GLOBAL_TYPE_TEXT = {
    GlobalTokenType.FIXED_BLOCK: "block",
    GlobalTokenType.CLS: "CLS",
    GlobalTokenType.QUESTION: "q",
    GlobalTokenType.SENTENCE: "sent",
    GlobalTokenType.PARAGRAPH: "para",
    GlobalTokenType.CONTEXT: "ctx",
    GlobalTokenType.TITLE: "title",
    GlobalTokenType.CANDIDATE: "cand",
    GlobalTokenType.CPC_MASK: "sent(cpc)",
    GlobalTokenType.VDOM_NODE: "node",
}


def global_token_texts(global_types: Sequence[int], mirrored_texts: Sequence[str]) -> List[str]:
    """Axis text of each global token: its role, plus the mirrored piece for question tokens.

    Args:
        global_types: int ``[G]`` :class:`GlobalTokenType` values.
        mirrored_texts: ``[G]`` decoded text of each global token id (used for mirror types only).
    Returns:
        ``[G]`` strings such as ``"sent"``, ``"ctx"``, ``"q:▁who"``; unknown types as ``"type7"``.
    """
    out = []
    for t, text in zip(global_types, mirrored_texts):
        try:
            gt = GlobalTokenType(int(t))
        except ValueError:
            out.append(f"type{int(t)}")
            continue
        name = _GLOBAL_TYPE_TEXT[gt]
        out.append(f"{name}:{text}" if gt == GlobalTokenType.QUESTION else name)
    return out


def gpt2_token_texts(symbols: Sequence[str], decoder: Mapping[int, str]) -> List[str]:
    """Readable text of GPT-2 dictionary symbols (decimal GPT-2 ids, as in RoBERTa's ``dict.txt``).

    Args:
        symbols: dictionary symbols; those that are not GPT-2 ids known to ``decoder`` are kept as they are.
        decoder: GPT-2 id -> token in GPT-2's byte-to-unicode alphabet (``load_gpt2_decoder``).
    Returns:
        the decoded texts; a leading space is shown as "▁" (as sentencepiece pieces show it), bytes
        that are not whole UTF-8 characters as U+FFFD.
    """
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    byte_of = {u: b for b, u in bytes_to_unicode().items()}
    out = []
    for s in symbols:
        if s.isdigit() and int(s) in decoder:
            tok = decoder[int(s)]
            text = bytes(byte_of[c] for c in tok if c in byte_of).decode("utf-8", errors="replace")
            if text.startswith(" "):
                text = "▁" + text[1:]
            out.append(text)
        else:
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------------------
# colours
# ---------------------------------------------------------------------------------------------------------
_STRUCTURE_COLOURS = {
    "belongs": "#2ca02c",  # green
    "not_belongs": "#b0b0b0",  # grey
    "other_context": "#9467bd",  # purple
    "parent": "#c7a000",  # gold
    "child": "#17becf",  # cyan
}
_EXTRA_COLOURS = ("#8c564b", "#7f7f7f", "#bcbd22", "#1f3f5f", "#ff9896", "#98df8a", "#aec7e8", "#c49c94")


def _hex_rgb(h: str) -> Tuple[float, float, float]:
    h = h.lstrip("#")
    return tuple(int(h[i : i + 2], 16) / 255.0 for i in (0, 2, 4))  # type: ignore[return-value]


def label_palette(vocab: RelativeLabelVocab) -> np.ndarray:
    """One RGB colour per label id.

    Position labels: ``pos+0`` black, ``pos+d`` blues and ``pos-d`` oranges, darker with distance;
    the default structure labels fixed distinct colours; other structure labels a fixed list. No colour
    is white (white means masked).

    Returns:
        float64 ``[vocab.size, 3]`` in ``[0, 1]``, all rows distinct.
    """
    from matplotlib import colormaps

    k = vocab.max_distance
    colours: List[Tuple[float, float, float]] = [(0.12, 0.12, 0.12)]
    for cmap_name in ("Blues", "Oranges"):
        cmap = colormaps[cmap_name]
        for d in range(1, k + 1):
            frac = 0.35 + 0.6 * ((d - 1) / (k - 1) if k > 1 else 0.5)
            colours.append(tuple(float(x) for x in cmap(frac)[:3]))
    # colours above are in id order: pos+0, pos+1..+k, pos-1..-k
    extra = iter(_EXTRA_COLOURS)
    for name in vocab.structure_labels:
        if name in _STRUCTURE_COLOURS:
            colours.append(_hex_rgb(_STRUCTURE_COLOURS[name]))
        else:
            try:
                colours.append(_hex_rgb(next(extra)))
            except StopIteration:
                raise ConfigError(f"no colour left for structure label {name!r}") from None
    palette = np.asarray(colours, dtype=np.float64)  # [num_labels, 3]
    assert palette.shape == (vocab.size, 3)
    return palette


def grid_rgb(grid: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """Colour a label grid.

    Args:
        grid: int64 ``[rows, cols]`` label ids, :data:`MASKED` for masked cells.
        palette: float ``[num_labels, 3]`` (:func:`label_palette`).
    Returns:
        uint8 ``[rows, cols, 3]``: the label's colour, white where masked.
    """
    grid = np.asarray(grid)
    if grid.size and (grid.max() >= len(palette) or grid.min() < MASKED):
        raise ValueError(f"label ids must be in [{MASKED}, {len(palette)}), got {grid.min()}..{grid.max()}")
    table = np.vstack([palette, np.asarray(_WHITE)[None]])  # [num_labels + 1, 3]; last row = masked
    idx = np.where(grid == MASKED, len(palette), grid)
    return np.round(table[idx] * 255).astype(np.uint8)  # [rows, cols, 3]


# ---------------------------------------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PanelBox:
    """Where a panel's cells lie in the PNG, in pixels (origin top-left, x to the right, y down)."""

    x0: int
    y0: int
    rows: int
    cols: int
    cell: int

    def cell_center(self, row: int, col: int) -> Tuple[int, int]:
        """(x, y) pixel at the centre of cell (row, col)."""
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            raise IndexError(f"cell ({row}, {col}) outside a {self.rows} x {self.cols} panel")
        return (self.x0 + col * self.cell + self.cell // 2, self.y0 + row * self.cell + self.cell // 2)


@dataclass
class RenderLayout:
    """What :func:`render_structure` drew: image size, panel boxes, legend entries."""

    width: int
    height: int
    cell: int
    panels: Dict[str, PanelBox]
    show_text: bool
    legend: List[Tuple[str, Tuple[float, float, float]]] = field(default_factory=list)
    #: legend swatch centre (x, y) in pixels per entry name (label names and "masked (no attention)")
    legend_swatches: Dict[str, Tuple[int, int]] = field(default_factory=dict)


_DPI = 100
_LEGEND_HEADER = (
    "rows: queries, columns: keys",
    "g2g, l2g columns: global tokens",
    "g2l columns: long tokens",
    "l2l columns: offset (key = query + offset)",
)
_MAX_LABEL_CHARS = 14


def _clip_text(s: str) -> str:
    s = s.replace("\n", " ").replace("$", r"\$")
    return s if len(s) <= _MAX_LABEL_CHARS else s[: _MAX_LABEL_CHARS - 1] + "…"


def _nice_step(at_least: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= ``at_least`` (tick spacing in cells)."""
    step = 1
    while step < at_least:
        step = step * 5 // 2 if str(step).startswith("2") else step * 2
    return step


def _choose_cell(rows: int, cols: int, max_px: int) -> int:
    """Cell size in pixels: as large as fits ``max_px`` for the whole grid area, between 1 and 16."""
    return int(max(1, min(16, max_px // max(rows, cols, 1))))


#: the largest grid side :func:`render_structure` draws, in pixels (a 10000 x 10000 RGBA canvas is 400 MB)
MAX_PICTURE_PX = 10000


def render_structure(
    grids: LabelGrids,
    out_png: Union[str, Path, BinaryIO],
    long_text: Sequence[str],
    global_text: Sequence[str],
    title: str = "",
    cell: Optional[int] = None,
    max_px: int = 3000,
) -> RenderLayout:
    """Draw the four label grids into a PNG.

    Layout (rows = queries, columns = keys; paper figure 2c)::

        [ g2g  G x G ] [ g2l  G x L     ]
        [ l2g  L x G ] [ l2l  L x (2r+1) ]   (columns: relative offsets -r..r)

    plus a legend (every label name with its colour, and white = masked) and a title; the title says
    when the grids were cropped and how many tokens were left out.

    Args:
        grids: the (possibly cropped) label grids.
        out_png: output path or binary file object (written directly; the CLI passes an atomic file).
        long_text / global_text: axis text of the shown long / global tokens (at least
            ``grids.long_shown`` / ``grids.global_shown`` entries).
        title: first title line (what the example is).
        cell: cell size in pixels (default: the largest in 1..16 that keeps the grid area within
            ``max_px``). Token text is written when a cell is at least 8 pixels.
        max_px: the grid area's largest side in pixels when ``cell`` is not given.
    Returns:
        the :class:`RenderLayout` (pixel boxes of the panels).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    G, L = grids.global_shown, grids.long_shown
    W = 2 * grids.radius + 1
    if len(long_text) < L or len(global_text) < G:
        raise ValueError(f"need text for {L} long and {G} global tokens, got {len(long_text)} and {len(global_text)}")
    palette = label_palette(grids.vocab)
    names = grids.vocab.names()

    right_cols = max(L, W)
    c = int(cell) if cell is not None else _choose_cell(G + L, G + right_cols, max_px)
    if c < 1:
        raise ConfigError(f"cell must be >= 1 pixel, got {c}")
    side = max(G + L, G + right_cols) * c
    if side > MAX_PICTURE_PX:
        fit = max(1, MAX_PICTURE_PX // max(G + L, G + right_cols))
        raise ConfigError(
            f"cell size {c} px gives a grid of {side} px a side for {G} global and {L} long tokens, more than "
            f"{MAX_PICTURE_PX} px: use a cell size of at most {fit} (--cell-size) or show fewer tokens (--max-tokens)"
        )
    show_text = c >= 8
    font_px = min(c - 1, 11) if show_text else 9
    font_pt = font_px * 72.0 / _DPI
    char_px = 0.62 * font_px

    # -- margins in pixels -------------------------------------------------------------------------------
    if show_text:
        row_label_px = int(char_px * max([len(_clip_text(s)) for s in list(long_text[:L]) + list(global_text[:G])] + [3])) + 10
    else:
        row_label_px = 44
    col_label_px = row_label_px
    gap = 34  # between panels: room for the panel names
    title_lines = [ln for ln in title.split("\n") if ln]
    info = (
        f"long {grids.long_len} tokens, global {grids.global_len} tokens; l2l radius r={grids.radius}, "
        f"relative positions clipped at k={grids.vocab.max_distance}"
    )
    title_lines.append(info)
    if grids.cropped:
        title_lines.append(
            f"CROPPED: showing long tokens 0..{L - 1} of {grids.long_len} ({grids.long_len - L} left out), "
            f"global tokens 0..{G - 1} of {grids.global_len} ({grids.global_len - G} left out)"
        )
    title_px = 18 * len(title_lines) + 12
    margin = 12

    # -- legend size -------------------------------------------------------------------------------------
    legend = [(n, tuple(float(x) for x in palette[i])) for i, n in enumerate(names)]
    legend_entries = legend + [("masked (no attention)", _WHITE)]
    entry_px = 18
    grid_h = G * c + gap + L * c
    per_col = max(8, min(len(legend_entries), (max(grid_h, 300)) // entry_px))
    ncols = -(-len(legend_entries) // per_col)
    legend_col_px = 170
    legend_w = ncols * legend_col_px + 10
    legend_head_px = 14 * len(_LEGEND_HEADER) + 26
    legend_w = max(legend_w, 260)
    legend_h = min(len(legend_entries), per_col) * entry_px + legend_head_px + 6

    x_left = margin + row_label_px
    y_top = margin + title_px + col_label_px
    x_right_col = x_left + G * c + gap
    y_low_row = y_top + G * c + gap
    boxes = {
        "g2g": PanelBox(x_left, y_top, G, G, c),
        "g2l": PanelBox(x_right_col, y_top, G, L, c),
        "l2g": PanelBox(x_left, y_low_row, L, G, c),
        "l2l": PanelBox(x_right_col, y_low_row, L, W, c),
    }
    bottom_labels_px = 70  # offsets, panel names
    # legend: in the free space right of the l2l band when it fits, else right of everything
    free_x = x_right_col + W * c + gap
    right_end = x_right_col + right_cols * c
    if right_end - free_x >= legend_w and L * c + bottom_labels_px >= legend_h:
        legend_x, legend_y = free_x, y_low_row
        width = right_end + margin
    else:
        legend_x, legend_y = right_end + gap, y_top
        width = legend_x + legend_w + margin
    height = max(y_low_row + L * c + bottom_labels_px, legend_y + legend_h) + margin
    min_title_w = int(9.5 * max(len(t) for t in title_lines)) + 2 * margin
    width = max(width, min_title_w)

    fig = plt.figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
    fig.patch.set_facecolor("white")

    def axes_at(x0: int, y0: int, w: int, h: int):
        return fig.add_axes([x0 / width, 1 - (y0 + h) / height, w / width, h / height])

    long_labels = [_clip_text(f"{i} {t}") for i, t in enumerate(long_text[:L])]
    global_labels = [_clip_text(f"{i} {t}") for i, t in enumerate(global_text[:G])]
    offsets = list(range(-grids.radius, grids.radius + 1))

    def draw(piece: str, xlabels, ylabels, xlabel_top: bool, name: str):
        box = boxes[piece]
        grid = grids.piece(piece)
        ax = axes_at(box.x0, box.y0, box.cols * c, box.rows * c)
        if box.rows == 0 or box.cols == 0:
            ax.set_axis_off()
            return ax
        ax.imshow(grid_rgb(grid, palette), interpolation="nearest", aspect="auto",
                  extent=(0, box.cols, box.rows, 0))
        ax.set_xlim(0, box.cols)
        ax.set_ylim(box.rows, 0)
        if c >= 8:  # cell borders (below 8 px they would hide the colours)
            ax.set_xticks(np.arange(box.cols + 1), minor=True)
            ax.set_yticks(np.arange(box.rows + 1), minor=True)
            ax.grid(which="minor", color="#d0d0d0", linewidth=0.4)
            ax.tick_params(which="minor", length=0)
        for spine in ax.spines.values():
            spine.set_linewidth(0.6)
        # tick labels
        for axis, labels, count in ((ax.xaxis, xlabels, box.cols), (ax.yaxis, ylabels, box.rows)):
            if labels is None:
                axis.set_ticks([])
                continue
            if show_text:
                axis.set_ticks(np.arange(count) + 0.5)
                axis.set_ticklabels(labels, fontsize=font_pt, family="DejaVu Sans")
            else:
                step = _nice_step(40.0 / c)
                pos = np.arange(0, count, step)
                axis.set_ticks(pos + 0.5)
                axis.set_ticklabels([str(p) for p in pos], fontsize=7)
        ax.tick_params(axis="both", which="major", length=2, pad=1)
        if xlabels is not None and xlabel_top:
            ax.xaxis.tick_top()
            for lab in ax.get_xticklabels():
                lab.set_rotation(90)
        elif show_text and xlabels is not None:
            for lab in ax.get_xticklabels():
                lab.set_rotation(90)
        ax.set_xlabel(name, fontsize=9, labelpad=2, weight="bold")
        return ax

    draw("g2g", global_labels, global_labels, True, "g2g")
    draw("g2l", long_labels, None, True, "g2l")
    draw("l2g", None, long_labels, False, "l2g")
    ax_l2l = draw("l2l", [str(o) for o in offsets], None, False, "l2l")
    if not show_text and W > 0 and L > 0:
        # numeric offsets every few columns when cells are small
        step = _nice_step(30.0 / c)
        pos = [i for i in range(W) if (offsets[i] % step == 0)]
        ax_l2l.set_xticks(np.asarray(pos) + 0.5)
        ax_l2l.set_xticklabels([str(offsets[i]) for i in pos], fontsize=7)

    # -- title -------------------------------------------------------------------------------------------
    for i, line in enumerate(title_lines):
        fig.text(margin / width, 1 - (margin + 14 + 18 * i) / height, line.replace("$", r"\$"), fontsize=10 if i else 11,
                 weight="bold" if i == 0 else "normal", color="#b00000" if line.startswith("CROPPED") else "black",
                 ha="left", va="baseline")

    # -- legend ------------------------------------------------------------------------------------------
    lax = axes_at(legend_x, legend_y, legend_w, legend_h)
    lax.set_xlim(0, legend_w)
    lax.set_ylim(legend_h, 0)
    lax.set_axis_off()
    swatches: Dict[str, Tuple[int, int]] = {}
    for i, line in enumerate(_LEGEND_HEADER):
        lax.text(4, 14 + 14 * i, line, fontsize=8, va="baseline")
    lax.text(4, legend_head_px - 6, "relative labels", fontsize=9, weight="bold", va="baseline")
    for i, (n, rgb) in enumerate(legend_entries):
        col, row = divmod(i, per_col)
        x = 4 + col * legend_col_px
        y = legend_head_px + row * entry_px
        lax.add_patch(Rectangle((x, y), 14, 12, facecolor=rgb, edgecolor="#606060", linewidth=0.6))
        swatches[n] = (legend_x + x + 7, legend_y + y + 6)
        lax.text(x + 20, y + 10, n, fontsize=8, va="baseline")

    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())  # uint8 [height, width, 4]
    plt.close(fig)
    if rgba.shape[:2] != (height, width):
        raise RuntimeError(f"matplotlib drew {rgba.shape[1]} x {rgba.shape[0]} pixels, expected {width} x {height}")
    from PIL import Image

    # RGB (no alpha), zlib-optimised: about 15% smaller than matplotlib's RGBA PNG
    Image.fromarray(np.ascontiguousarray(rgba[..., :3])).save(
        out_png if hasattr(out_png, "write") else str(out_png), format="PNG", optimize=True
    )
    return RenderLayout(width=int(round(width)), height=int(round(height)), cell=c, panels=boxes,
                        show_text=show_text, legend=legend, legend_swatches=swatches)
