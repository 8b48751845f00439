"""Starting values for the global side of a lifted model (``etc-lift --g2g-bias``, ``--global-token-piece``).

A BERT or RoBERTa source was pretrained without global tokens, so by default every special global token of the
lifted model starts from the ``<s>`` row (BERT's ``[CLS]``; :mod:`etc_fairseq.structure.global_tokens`) plus a
fresh type embedding. In a source whose ``[CLS]`` barely reads its input (measured in all-MiniLM-L6-v2: the
``[CLS]`` output of its first three layers differs almost not at all from one sentence to the next,
``examples/lifted_minilm/README.md``), such tokens stay alike and read each other instead of their text. Two
starts that make them read their text, both chosen at lift time and stored with the model:

- ``global_token_pieces`` (``--global-token-piece``): the pieces the summary global tokens start from (written
  to ``etc_tokenizer.json``, which ``etc-prepare --from-model`` and ``EtcModel.from_pretrained`` read), e.g.
  BERT's ``[SEP]``, a token the source model trained to read its sentence;
- a negative bias on every global -> global label of the global queries' relative table
  (:func:`g2g_bias_table`; the model's ``relative_bias`` field, learnable), so that a global query starts by
  reading the long tokens it may see (its own, under hard g2l) rather than the other global tokens.

Tensors only; ``etc-lift``'s intake (:mod:`etc_fairseq.models.lifting`) applies them.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Mapping, MutableMapping, Sequence

import torch

from etc_fairseq.structure.global_tokens import PRETRAINED_ROLES

from .fairseq_roberta import SENTENCE_ENCODER, LiftError

#: the roles ``--global-token-piece PIECE`` (no ``ROLE=``) sets: every special global token's but ``cls``
SUMMARY_ROLES = tuple(sorted(set(PRETRAINED_ROLES.values()) - {"cls"}))
#: every role a piece may be given for
ROLES = tuple(sorted(set(PRETRAINED_ROLES.values())))
#: the key of a layer's global-query relative bias table in a lifted state dict
_G2G_BIAS_KEY = re.compile(re.escape(SENTENCE_ENCODER) + r"layers\.(\d+)\.self_attn\.rel_bias\.global$")


def g2g_bias_table(g2g_ids: Sequence[int], num_labels: int, heads: int, head_dim: int, logit: float) -> torch.Tensor:
    """The global queries' relative bias table that adds ``logit`` to the attention score of every g2g edge.

    The attention kernels add ``bias / sqrt(head_dim)`` to a score (the bias is scaled like ``q . e``), so the
    rows of ``g2g_ids`` hold ``logit * sqrt(head_dim)``; every other row (the long <-> global labels) 0.

    Args:
        g2g_ids: the label ids of g2g edges (:meth:`RelativeLabelVocab.g2g_ids`).
        num_labels: rows of the table; heads, head_dim: the layer's.
        logit: the shift of a g2g score, in the softmax's units (negative: read the long tokens more).
    Returns:
        float32 ``[num_labels, heads]``.
    """
    table = torch.zeros(num_labels, heads)
    table[list(g2g_ids)] = logit * math.sqrt(head_dim)
    return table


def set_g2g_bias(state: MutableMapping[str, torch.Tensor], g2g_ids: Sequence[int], heads: int, head_dim: int,
                 logit: float, where: str) -> List[str]:
    """Write :func:`g2g_bias_table` into every layer's global-query bias table of a lifted ``state`` (in place).

    Returns the keys written. Raises :class:`LiftError` (naming ``where``) when the state has no such table
    (the model needs ``relative_bias`` and one relative table per query side)."""
    keys = sorted((k for k in state if _G2G_BIAS_KEY.search(k)), key=lambda k: int(_G2G_BIAS_KEY.search(k).group(1)))
    if not keys:
        raise LiftError(f"{where}: --g2g-bias needs a relative bias table per query side (relative_bias, "
                        "not shared_relative_embeddings)")
    for k in keys:
        state[k] = g2g_bias_table(g2g_ids, state[k].shape[0], heads, head_dim, logit).to(state[k].dtype)
    return keys


def parse_global_token_pieces(specs: Sequence[str]) -> Dict[str, str]:
    """``--global-token-piece`` values -> role -> piece. ``PIECE`` sets every role of :data:`SUMMARY_ROLES`;
    ``ROLE=PIECE`` one role (:data:`ROLES`); later values win.

    Raises:
        LiftError: an unknown role or an empty piece (one line).
    """
    out: Dict[str, str] = {}
    for spec in specs:
        role, sep, piece = spec.partition("=")
        if not sep:
            role, piece = "", spec
        if not piece:
            raise LiftError(f"--global-token-piece {spec!r}: expected PIECE or ROLE=PIECE")
        if role and role not in ROLES:
            raise LiftError(f"--global-token-piece {spec!r}: unknown role {role!r} (known: {', '.join(ROLES)})")
        out.update({role: piece} if role else {r: piece for r in SUMMARY_ROLES})
    return out


def check_pieces(pieces: Mapping[str, str], symbols: Sequence[str], specials: Mapping[str, str], where: str) -> None:
    """Every piece (in the source vocabulary's spelling; ``specials`` maps the source's special pieces to the
    dictionary's) must be in the lifted dictionary ``symbols``. Raises :class:`LiftError` naming ``where``."""
    known = set(symbols)
    for role, piece in sorted(pieces.items()):
        if specials.get(piece, piece) not in known:
            raise LiftError(f"--global-token-piece {role}={piece}: not in the vocabulary of {where}")
