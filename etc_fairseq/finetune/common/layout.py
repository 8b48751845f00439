"""The question + paragraphs layout that HotpotQA-shaped datasets share (HotpotQA, the CONSTRUCTED
next-sentence task): :func:`layout_example` places a tokenized question and ``(title, [sentence, ...])``
paragraphs into ETC's long and global inputs (paper appendix C)::

    long   = CLS, question pieces, then per paragraph: its title pieces, then its sentences' pieces
    global = CLS, one QUESTION token per question piece (mirrors the piece id), then per paragraph:
             a CONTEXT token (the whole paragraph), a TITLE token, one SENTENCE token per sentence

with the long CLS belonging to the global CLS, question piece ``j`` to question token ``j``, title / sentence
pieces to their TITLE / SENTENCE token, TITLE and SENTENCE tokens children of their paragraph's CONTEXT token,
and paragraph ``p`` in context ``p + 1`` (l2l cut at paragraph boundaries, paragraphs unordered in g2g).
``flat``: no CONTEXT tokens, no parents, one context (the paper's flat-structure ablation). What does not fit
is dropped and counted (see :func:`layout_example`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.errors import ConfigError
from etc_fairseq.structure.global_tokens import GlobalTokenType, global_token_id

#: the structure ids a layout fills (the keys of :func:`etc_fairseq.structure.builders.build_structure`)
STRUCTURE_FIELD_NAMES = ("long_segment", "global_parent", "long_context", "global_context")


@dataclass
class Unit:
    """One title or sentence placed in the long input.

    Attributes:
        paragraph: index of the paragraph in the record's ``context``.
        sentence: sentence index in that paragraph, -1 for the title.
        global_index: its TITLE / SENTENCE global token.
        long_start, long_end: its long positions ``[long_start, long_end)``.
    """

    paragraph: int
    sentence: int
    global_index: int
    long_start: int
    long_end: int


@dataclass
class Layout:
    """One example's token ids and structure ids (numpy int64 arrays) plus what truncation dropped.

    Arrays: ``long_tokens``, ``long_segment``, ``long_context`` [long_len]; ``global_tokens``,
    ``global_types``, ``global_parent``, ``global_context`` [global_len].
    """

    long_tokens: np.ndarray
    long_segment: np.ndarray
    long_context: np.ndarray
    global_tokens: np.ndarray
    global_types: np.ndarray
    global_parent: np.ndarray
    global_context: np.ndarray
    units: List[Unit]
    question_pieces_cut: int = 0
    sentences_dropped: int = 0
    paragraphs_dropped: int = 0

    @property
    def truncated(self) -> bool:
        return bool(self.question_pieces_cut or self.sentences_dropped or self.paragraphs_dropped)

    def arrays(self) -> Dict[str, np.ndarray]:
        return {
            name: getattr(self, name)
            for name in ("long_tokens", "global_tokens", "global_types") + STRUCTURE_FIELD_NAMES
        }


def layout_example(
    question: Sequence[int],
    paragraphs: Sequence[Tuple[Sequence[int], Sequence[Sequence[int]]]],
    dictionary,
    max_long_len: int = 4096,
    max_global_len: int = 256,
    flat: bool = False,
    role_ids: Optional[Mapping[str, int]] = None,
) -> Layout:
    """Place one tokenized example (see the module docstring for the layout).

    Args:
        question: the question's piece ids.
        paragraphs: ``[(title piece ids, [sentence piece ids, ...]), ...]``.
        dictionary: the fairseq Dictionary (``bos()`` is the CLS / special global token id unless ``role_ids``
            names others).
        max_long_len, max_global_len: budgets (>= 1 each; CLS takes one of each).
        flat: the flat-structure ablation (no CONTEXT tokens, no parents, one context).
        role_ids: the source model's pretrained global token ids (``WordPieceTokenizer.global_ids``; see
            :func:`~etc_fairseq.structure.global_tokens.global_token_id`); None: ``<s>``.
    Returns:
        a :class:`Layout`.
    """
    if max_long_len < 1 or max_global_len < 1:
        raise ConfigError(f"max_long_len and max_global_len must be >= 1, got {max_long_len}, {max_global_len}")
    cls_id = global_token_id(dictionary, GlobalTokenType.CLS, role_ids=role_ids)
    long_tokens, long_segment, long_context = [cls_id], [0], [0]
    g_tokens, g_types, g_parent, g_context = [cls_id], [int(GlobalTokenType.CLS)], [-1], [0]

    def add_global(token_type: GlobalTokenType, parent: int, ctx: int, piece: Optional[int] = None) -> int:
        g_tokens.append(global_token_id(dictionary, token_type, piece, role_ids))
        g_types.append(int(token_type))
        g_parent.append(parent)
        g_context.append(ctx)
        return len(g_tokens) - 1

    def add_long(ids: Sequence[int], segment: int, ctx: int) -> Tuple[int, int]:
        start = len(long_tokens)
        long_tokens.extend(int(i) for i in ids)
        long_segment.extend([segment] * len(ids))
        long_context.extend([ctx] * len(ids))
        return start, len(long_tokens)

    q_fit = max(0, min(len(question), max_long_len - 1, max_global_len - 1))
    for piece in question[:q_fit]:
        g = add_global(GlobalTokenType.QUESTION, -1, 0, int(piece))
        add_long([piece], g, 0)

    units: List[Unit] = []
    sentences_dropped = paragraphs_dropped = 0
    for p, (title, sentences) in enumerate(paragraphs):
        ctx = 0 if flat else p + 1
        header_globals = 1 if flat else 2  # (CONTEXT +) TITLE
        if len(g_tokens) + header_globals > max_global_len or len(long_tokens) + len(title) > max_long_len:
            paragraphs_dropped += 1
            sentences_dropped += len(sentences)
            continue
        parent = -1 if flat else add_global(GlobalTokenType.CONTEXT, -1, ctx)
        t = add_global(GlobalTokenType.TITLE, parent, ctx)
        units.append(Unit(p, -1, t, *add_long(title, t, ctx)))
        for k, sent in enumerate(sentences):
            if len(g_tokens) + 1 > max_global_len or len(long_tokens) + len(sent) > max_long_len:
                sentences_dropped += 1
                continue
            g = add_global(GlobalTokenType.SENTENCE, parent, ctx)
            units.append(Unit(p, k, g, *add_long(sent, g, ctx)))

    as_array = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return Layout(
        long_tokens=as_array(long_tokens),
        long_segment=as_array(long_segment),
        long_context=as_array(long_context),
        global_tokens=as_array(g_tokens),
        global_types=as_array(g_types),
        global_parent=as_array(g_parent),
        global_context=as_array(g_context),
        units=units,
        question_pieces_cut=len(question) - q_fit,
        sentences_dropped=sentences_dropped,
        paragraphs_dropped=paragraphs_dropped,
    )
