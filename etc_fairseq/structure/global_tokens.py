"""Global token roles and the dictionary id they use: defined once, here.

A global token is embedded as::

    token_embedding(global_token_id) + global_type_embedding(GlobalTokenType)

so the *role* of a global token (sentence summary, paragraph summary, fixed
block, ...) lives entirely in :class:`GlobalTokenType`, whose embedding table has
:data:`NUM_GLOBAL_TOKEN_TYPES` rows.  The token id part follows one rule
(:func:`global_token_id`):

* **special** global tokens (every type except the mirror types) use the
  dictionary's beginning-of-sentence symbol ``<s>`` (RoBERTa's CLS).  No new
  symbols are added, so a RoBERTa/BERT vocabulary and its embedding matrix can
  be lifted unchanged (paper Sec. 3.6, appendix D): the summary tokens start
  from the CLS embedding and the type embedding tells them apart.
* **mirror** global tokens (:data:`MIRROR_TYPES`, i.e. ``QUESTION``: one global
  token per question word piece in NQ / HotpotQA / WikiHop, appendix C) use the
  word piece's own dictionary id.
* a model converted from a source that was *pretrained* with its own global
  tokens (Google's official ETC: every sentence global token is ``[unused0]``,
  its id 1) names them per **role** (:data:`PRETRAINED_ROLES`: ``cls``, ``sentence``,
  ``cpc_mask``, ``paragraph``, ``candidate``; the keys of ``global_token_pieces``
  in the ``etc_tokenizer.json`` that ``etc-lift`` writes).  Given those ids
  (``role_ids``), :func:`global_token_id` uses them instead of ``<s>``, so
  fine-tuning feeds the converted model the tokens it was pretrained with.
"""

from __future__ import annotations

import enum
from typing import Dict, Mapping, Optional

__all__ = [
    "GlobalTokenType",
    "NUM_GLOBAL_TOKEN_TYPES",
    "MIRROR_TYPES",
    "PRETRAINED_ROLES",
    "global_token_table",
    "special_global_token_id",
    "global_token_id",
]


class GlobalTokenType(enum.IntEnum):
    """Role of a global token; the value is the row of the global type embedding."""

    #: one summary token per ``block_len`` long tokens, ignoring sentences
    #: (the paper's "fixed blocks"; see ``builders.fixed_block_ids``).
    FIXED_BLOCK = 0
    #: the global CLS token (answer type in NQ, output type in HotpotQA).
    CLS = 1
    #: mirror of one question word piece (NQ, HotpotQA, WikiHop).
    QUESTION = 2
    #: summary token of one sentence (pre-training, HotpotQA sentences).
    SENTENCE = 3
    #: summary token of one paragraph / long-answer candidate (NQ).
    PARAGRAPH = 4
    #: summary token of a whole context (HotpotQA / WikiHop document; parent of
    #: its sentence and title tokens).
    CONTEXT = 5
    #: summary token of a context's title.
    TITLE = 6
    #: one candidate answer (WikiHop); linked to its mentions in the long input.
    CANDIDATE = 7
    #: summary token of a sentence whose long tokens are masked for the CPC loss.
    CPC_MASK = 8
    #: one VDOM node (OpenKP).
    VDOM_NODE = 9


#: rows of the global type embedding table.
NUM_GLOBAL_TOKEN_TYPES: int = len(GlobalTokenType)

#: types whose global token id is the mirrored word piece's own id.
MIRROR_TYPES = frozenset({GlobalTokenType.QUESTION})

#: type -> the role whose pretrained token a converted source model uses for it (see the module
#: docstring). The official ETC code gives titles, fixed blocks and NQ's long-answer candidates the
#: sentence token, HotpotQA/WikiHop documents the paragraph token, WikiHop candidates the candidate
#: token and OpenKP's VDOM nodes the sentence token (its converter fills global_token_ids with 1). CLS is BERT's ``[CLS]`` (the dictionary's ``<s>``) but ``<unused_39>`` in official ETC's
#: SentencePiece vocabulary, whose ``<s>`` is the CPC mask token; the long CLS uses the same id.
PRETRAINED_ROLES: Dict[GlobalTokenType, str] = {
    GlobalTokenType.CLS: "cls",
    GlobalTokenType.SENTENCE: "sentence",
    GlobalTokenType.TITLE: "sentence",
    GlobalTokenType.FIXED_BLOCK: "sentence",
    GlobalTokenType.PARAGRAPH: "sentence",
    GlobalTokenType.CPC_MASK: "cpc_mask",
    GlobalTokenType.CONTEXT: "paragraph",
    GlobalTokenType.CANDIDATE: "candidate",
    GlobalTokenType.VDOM_NODE: "sentence",
}


def special_global_token_id(dictionary) -> int:
    """Dictionary id used by every special (non-mirror) global token.

    This is the dictionary's beginning-of-sentence symbol ``<s>``
    (``dictionary.bos()`` for a fairseq ``Dictionary``; RoBERTa's CLS).  The
    role is carried by the :class:`GlobalTokenType` embedding, so no dictionary
    surgery is needed and pretrained vocabularies are lifted unchanged.

    Args:
        dictionary: a fairseq ``Dictionary`` (anything with ``bos()`` or ``bos_index``).
    Returns:
        int: the id.
    """
    if hasattr(dictionary, "bos"):
        return int(dictionary.bos())
    if hasattr(dictionary, "bos_index"):
        return int(dictionary.bos_index)
    raise TypeError(
        f"dictionary must provide bos() or bos_index, got {type(dictionary).__name__}"
    )


def global_token_id(
    dictionary,
    token_type: GlobalTokenType,
    piece_id: Optional[int] = None,
    role_ids: Optional[Mapping[str, int]] = None,
) -> int:
    """Dictionary id of one global token of ``token_type``.

    Args:
        dictionary: a fairseq ``Dictionary``.
        token_type: the global token's role.
        piece_id: the mirrored word piece id; required for :data:`MIRROR_TYPES`,
            must be ``None`` otherwise.
        role_ids: pretrained role -> dictionary id of the source model (see
            :data:`PRETRAINED_ROLES`); None or a missing role: ``<s>``.
    Returns:
        int: ``piece_id`` for mirror types, else the pretrained role's id, else
        :func:`special_global_token_id`.
    """
    token_type = GlobalTokenType(token_type)
    if token_type in MIRROR_TYPES:
        if piece_id is None:
            raise ValueError(f"{token_type.name} global tokens need the mirrored piece_id")
        return int(piece_id)
    if piece_id is not None:
        raise ValueError(
            f"{token_type.name} global tokens use the special <s> id; got piece_id={piece_id}"
        )
    role = PRETRAINED_ROLES.get(token_type)
    if role_ids and role in role_ids:
        return int(role_ids[role])
    return special_global_token_id(dictionary)


def global_token_table(dictionary, role_ids: Optional[Mapping[str, int]] = None) -> Dict[str, int]:
    """Type name -> id of every non-mirror global token type (what ``prepare.json`` records as
    ``global_token_ids``, so a prepared directory says which ids its global tokens carry)."""
    return {
        t.name: global_token_id(dictionary, t, role_ids=role_ids)
        for t in GlobalTokenType
        if t not in MIRROR_TYPES
    }
