"""The relative-label vocabulary: the single definition of every label id.

ETC (Sec. 3.1 and 3.4 of the paper) gives every attention edge (query -> key) a
*label*; each label id selects a learnable vector ``a^K`` that is added to the key
before the dot product.  The kernel holds these vectors in a table
``[num_labels, heads, head_dim]`` and receives int64 label ids that index it.
This module is the only place where the id layout is defined; everything else
(builders, model embeddings, checkpoints) asks a :class:`RelativeLabelVocab`.

Id layout for a clipping distance ``k = max_distance`` (offset = key - query)::

    0              offset 0 (the token itself)
    1 .. k         offsets +1 .. +k   (key to the right; offsets >= k share id k)
    k+1 .. 2k      offsets -1 .. -k   (key to the left;  offsets <= -k share id 2k)
    2k+1 ..        the named structure labels, in the order given

Default structure labels (:data:`DEFAULT_STRUCTURE_LABELS`), in id order:

``belongs``
    long <-> global (used by both l2g and g2l): the global token is the long
    token's own segment token (e.g. its sentence), an ancestor of that segment
    token (e.g. the context/paragraph the sentence is part of), or a global token
    the long token is explicitly linked to (e.g. the candidate answer a WikiHop
    mention names: the paper links candidates to mentions with the label that
    links sentence tokens to their word pieces, so a pre-trained model already
    knows how to read it).
``not_belongs``
    long <-> global: every other long/global pair.
``other_context``
    g2g between two global tokens of *different* contexts that are not
    ancestor/descendant of each other.  Contexts are unordered (e.g. the
    paragraphs of multi-document QA), so no relative position is given.
``parent``
    g2g from a global token (query) to one of its ancestors (key), e.g.
    sentence -> its context token.  Any depth (grandparents too).
``child``
    g2g from a global token (query) to one of its descendants (key), e.g.
    context token -> its sentences.

Official ETC's layout (Google's ``etcmodel``) has the same position ids and then ``2k+1`` = long
token does *not* belong to the global token, ``2k+2`` = belongs, ``2k+3`` = different contexts (g2g);
:data:`OFFICIAL_STRUCTURE_LABELS` orders the structure labels that way, so an official relative
table (e.g. 32 rows for ``k = 12``, ``relative_vocab_size``) is used row for row.

Global tokens of the *same* context that are not ancestor/descendant of each other
get the clipped relative position of their global indices (order of sentences
within a context), exactly like long tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch
from etc_fairseq.errors import ConfigError

__all__ = ["DEFAULT_STRUCTURE_LABELS", "G2G_STRUCTURE_LABELS", "OFFICIAL_STRUCTURE_LABELS", "STRUCTURE_LABEL_MEANINGS",
           "RelativeLabelVocab"]

DEFAULT_STRUCTURE_LABELS: Tuple[str, ...] = (
    "belongs",
    "not_belongs",
    "other_context",
    "parent",
    "child",
)

#: The structure labels only global -> global edges carry (g2g also carries the position labels:
#: :meth:`RelativeLabelVocab.g2g_ids`).
G2G_STRUCTURE_LABELS: Tuple[str, ...] = ("other_context", "parent", "child")

#: The same labels in official ETC's id order (``not_belongs`` = 2k+1, ``belongs`` = 2k+2,
#: ``other_context`` = 2k+3, then the labels official ETC does not have).
OFFICIAL_STRUCTURE_LABELS: Tuple[str, ...] = (
    "not_belongs",
    "belongs",
    "other_context",
    "parent",
    "child",
)


#: what each structure label means (as :func:`~etc_fairseq.structure.builders.build_structure` assigns it);
#: :meth:`RelativeLabelVocab.describe` prints these next to the ids
STRUCTURE_LABEL_MEANINGS = {
    "belongs": "long <-> global: the global token is the long token's own (segment) token, an ancestor of it, "
    "or linked to it",
    "not_belongs": "long <-> global: every other pair",
    "other_context": "global -> global in different contexts, neither an ancestor of the other (unordered)",
    "parent": "global -> global: the key is an ancestor of the query (parent, grandparent, ...)",
    "child": "global -> global: the key is a descendant of the query",
}


@dataclass(frozen=True)
class RelativeLabelVocab:
    """Relative position labels clipped at ``max_distance`` plus named structure labels.

    Args:
        max_distance: clipping distance ``k >= 0`` (``k = 0`` gives a single
            position id, 0, for every offset).
        structure_labels: names of the extra labels; ids start at ``2k+1`` in
            this order.  Names must be unique, non-empty and must not look like a
            position name (``"pos..."``).
    """

    max_distance: int
    structure_labels: Sequence[str] = DEFAULT_STRUCTURE_LABELS  # stored as a tuple

    def __post_init__(self) -> None:
        k = self.max_distance
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"max_distance must be an int >= 0, got {k!r}")
        if isinstance(self.structure_labels, str):
            raise ConfigError(
                "structure_labels must be a sequence of names, got the single string "
                f"{self.structure_labels!r}"
            )
        labels = tuple(self.structure_labels)
        for name in labels:
            if not isinstance(name, str) or not name:
                raise ConfigError(f"structure label names must be non-empty str, got {name!r}")
            if name.startswith("pos"):
                raise ConfigError(
                    f"structure label {name!r} collides with the position label names 'pos...'"
                )
        if len(set(labels)) != len(labels):
            raise ConfigError(f"structure_labels must be unique, got {labels}")
        object.__setattr__(self, "structure_labels", labels)

    # ------------------------------------------------------------------ sizes
    @property
    def num_position_labels(self) -> int:
        """Number of relative-position ids: ``2k + 1``."""
        return 2 * self.max_distance + 1

    @property
    def size(self) -> int:
        """Total number of label ids (rows of the label table)."""
        return self.num_position_labels + len(self.structure_labels)

    def __len__(self) -> int:
        return self.size

    # ------------------------------------------------------------------ ids
    def position_id(self, offset: int) -> int:
        """Id of one integer offset ``key - query`` (clipped at ``k``)."""
        return int(self.position_ids(torch.tensor(int(offset))).item())

    def position_ids(self, offsets: torch.Tensor) -> torch.Tensor:
        """Map offsets ``key - query`` to position label ids, elementwise.

        Args:
            offsets: int64 (any integer dtype) tensor of any shape ``[*]``.
        Returns:
            int64 ``[*]`` (same shape and device): 0 for offset 0, ``o`` for
            ``0 < o``, ``k + |o|`` for ``o < 0``, with ``|o|`` clipped at ``k``.
        """
        if offsets.dtype.is_floating_point or offsets.dtype == torch.bool:
            raise ValueError(f"offsets must be an integer tensor, got dtype {offsets.dtype}")
        k = self.max_distance
        o = offsets.to(torch.long).clamp(-k, k)
        return torch.where(o < 0, k - o, o)

    def label(self, name: str) -> int:
        """Id of a structure label (e.g. ``"belongs"``) or a position name (``"pos-3"``)."""
        try:
            return self.num_position_labels + self.structure_labels.index(name)
        except ValueError:
            pass
        names = self.names()
        if name in names:  # position names, e.g. "pos+1"
            return names.index(name)
        k = self.max_distance
        positions = f"'pos+0', 'pos+1'..'pos+{k}', 'pos-1'..'pos-{k}'" if k else "'pos+0'"
        raise KeyError(
            f"unknown relative label {name!r}; known structure labels: "
            f"{list(self.structure_labels)}; position labels: {positions}"
        )

    def g2g_ids(self) -> List[int]:
        """Every id a global query can give a global key (:func:`~etc_fairseq.structure.builders.g2g_label`):
        the ``2k+1`` position labels, then ``other_context``, ``parent``, ``child`` (those of them this
        vocabulary has). No long <-> global label is among them."""
        return list(range(self.num_position_labels)) + [
            self.label(n) for n in G2G_STRUCTURE_LABELS if self.has_label(n)
        ]

    def has_label(self, name: str) -> bool:
        """Whether ``name`` is a structure label of this vocabulary."""
        return name in self.structure_labels

    def names(self) -> List[str]:
        """All label names in id order, e.g. ``["pos+0", "pos+1", "pos-1", "belongs", ...]``.

        A clipped id is named by its smallest offset (``"pos+k"`` also covers
        offsets beyond ``k``).
        """
        k = self.max_distance
        return (
            ["pos+0"]
            + [f"pos+{d}" for d in range(1, k + 1)]
            + [f"pos-{d}" for d in range(1, k + 1)]
            + list(self.structure_labels)
        )

    # ------------------------------------------------------------------ printing
    def describe(self) -> List[Tuple[int, str, str]]:
        """``(id, name, meaning)`` of every label, in id order (what ``print(vocab)`` shows).

        Position labels are used between long tokens (l2l, offsets in the long input) and between global
        tokens of one context (g2g, offsets in the global input)."""
        k = self.max_distance
        out = [(0, "pos+0", "the token itself (offset 0)")]
        for side, sign, first in (("right", "+", 1), ("left", "-", k + 1)):
            for d in range(1, k + 1):
                what = f"{d} or more tokens" if d == k else f"{d} token{'s' if d > 1 else ''}"
                out.append((first + d - 1, f"pos{sign}{d}", f"key {what} to the {side} of the query"))
        for name in self.structure_labels:
            out.append((self.label(name), name, STRUCTURE_LABEL_MEANINGS.get(name, "(a task-defined label)")))
        return out

    def __str__(self) -> str:
        """A table of every label id, name and meaning (see :meth:`describe`)."""
        rows = self.describe()
        width = max(len(name) for _, name, _ in rows)
        head = (f"RelativeLabelVocab(max_distance={self.max_distance}): {self.size} labels "
                f"(ids 0..{2 * self.max_distance} relative positions clipped at {self.max_distance}, then structure labels)")
        return "\n".join([head] + [f"{i:>4}  {name:<{width}}  {meaning}" for i, name, meaning in rows])
