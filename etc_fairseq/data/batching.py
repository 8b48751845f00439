"""Model inputs without a batch dimension (:data:`EtcInput`), the layout of documents of sentences
(:func:`structured_input`), and the one collater that pads them into a batch (:func:`collate_inputs`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from etc_fairseq.data.packing import Piece, example_structure_ids
from etc_fairseq.errors import InputFormatError
from etc_fairseq.structure.global_tokens import GlobalTokenType

#: One encoded input without a batch dimension: ``src_tokens`` int64 [long_len], and for structured input
#: ``global_tokens``/``global_types`` int64 [global_len] and ``structure`` (compact structure ids:
#: ``long_segment``, ``long_example`` int64 [long_len]; ``global_example`` int64 [global_len]).
EtcInput = Dict[str, Any]


def structured_input(documents: Sequence[Sequence[Sequence[int]]], global_id: int,
                     cls_id: Optional[int] = None) -> EtcInput:
    """The ``etc_pretraining`` layout of documents of sentences (token ids), without masking; with
    ``cls_id``, a CLS first on both sides (the fine-tuning layouts' CLS, what classification heads read).

    Args:
        documents: per document, per sentence, its dictionary ids (non-empty; no special tokens).
        global_id: the dictionary id of a sentence's global token
            (:func:`~etc_fairseq.structure.global_tokens.global_token_id` for ``SENTENCE``: ``<s>``).
        cls_id: None, or the id of a CLS (``<s>``) put first in the long input and first in the global
            input (type ``CLS``); the long CLS belongs to the global CLS; only with one document.
    Returns:
        an :data:`EtcInput`: ``src_tokens`` int64 [L] (the sentences back to back, L = total tokens),
        ``global_tokens`` int64 [G] (``global_id``, G = number of sentences), ``global_types`` int64 [G]
        (``SENTENCE``), ``structure``: ``long_segment`` int64 [L] (sentence index of each long token),
        ``long_example`` int64 [L] and ``global_example`` int64 [G] (document index).
        With ``cls_id``, L and G count the CLS too (position 0 on each side; ``long_segment`` 0 there, the
        sentences' indices shifted by one).
    Raises:
        InputFormatError: no documents, an empty document or an empty sentence (named by index), or ``cls_id``
            with several documents.
    """
    if len(documents) == 0:
        raise InputFormatError("structured input needs at least one document")
    if cls_id is not None and len(documents) != 1:
        raise InputFormatError("a CLS token is for one document per example; pack several without it")
    lengths: List[List[int]] = []
    for d, doc in enumerate(documents):
        if len(doc) == 0:
            raise InputFormatError(f"document {d} has no sentences")
        for s, sent in enumerate(doc):
            if len(sent) == 0:
                raise InputFormatError(f"document {d}, sentence {s}: no tokens")
        lengths.append([len(sent) for sent in doc])
    example = [Piece(d, 0, len(doc)) for d, doc in enumerate(documents)]  # every document is one piece
    ids = example_structure_ids(example, lengths)
    src = np.concatenate([np.asarray(sent, dtype=np.int64) for doc in documents for sent in doc])
    g = len(ids["global_example"])
    out = {
        "src_tokens": torch.from_numpy(src),
        "global_tokens": torch.full((g,), int(global_id), dtype=torch.long),
        "global_types": torch.full((g,), int(GlobalTokenType.SENTENCE), dtype=torch.long),
        "structure": {k: torch.from_numpy(v) for k, v in ids.items()},
    }
    if cls_id is None:
        return out
    one = torch.zeros(1, dtype=torch.long)
    st = out["structure"]
    return {
        "src_tokens": torch.cat([one + int(cls_id), out["src_tokens"]]),
        "global_tokens": torch.cat([one + int(cls_id), out["global_tokens"]]),
        "global_types": torch.cat([one + int(GlobalTokenType.CLS), out["global_types"]]),
        "structure": {
            "long_segment": torch.cat([one, st["long_segment"] + 1]),
            "long_example": torch.cat([one, st["long_example"]]),
            "global_example": torch.cat([one, st["global_example"]]),
        },
    }


def pad_stack(arrays: Sequence[Any], length: int, pad_value, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Stack 1-D (or ``[n, *trailing]``) arrays or tensors of at most ``length`` rows, padded at the end.

    Returns:
        ``dtype`` [len(arrays), length, *trailing], ``pad_value`` after each array's own rows.
    """
    tensors = [a if torch.is_tensor(a) else torch.as_tensor(np.asarray(a)) for a in arrays]
    trailing = tuple(tensors[0].shape[1:]) if tensors else ()
    out = torch.full((len(tensors), length) + trailing, pad_value, dtype=dtype)
    for i, a in enumerate(tensors):
        out[i, : len(a)] = a
    return out


#: padding value of each structure id in a batch (values at padding positions are ignored by
#: :func:`~etc_fairseq.structure.builders.build_structure`; -1 keeps a padded long token out of every segment)
STRUCTURE_PAD = {"long_segment": -1}


def collate_inputs(items: Sequence[EtcInput], pad: int, long_len: Optional[int] = None,
                   global_len: Optional[int] = None) -> Dict[str, Any]:
    """Batch :data:`EtcInput` items into the model's ``net_input`` (the one collater of model inputs: the
    hub's and the pretraining dataset's batches are made here).

    Args:
        items: all plain (``src_tokens`` only) or all structured.
        pad: the dictionary's pad id.
        long_len / global_len: pad to these lengths (static shapes); default the longest item.
    Returns:
        ``{"src_tokens": int64 [B, L]}`` (pad-padded), plus for structured items ``global_tokens`` int64
        [B, G] (pad-padded), ``global_types`` int64 [B, G] (0-padded) and ``structure`` with each of the items'
        structure ids (``long_*`` int64 [B, L], ``global_*`` int64 [B, G]; 0 at padding, ``long_segment`` -1).
    Raises:
        InputFormatError: no items, or plain and structured items mixed.
    """
    if len(items) == 0:
        raise InputFormatError("nothing to collate")
    structured = ["global_tokens" in it for it in items]
    if any(structured) and not all(structured):
        raise InputFormatError("cannot batch plain token inputs with structured (document) inputs")
    L = long_len if long_len is not None else max(max(len(it["src_tokens"]) for it in items), 1)
    net = {"src_tokens": pad_stack([it["src_tokens"] for it in items], L, pad)}
    if not structured[0]:
        return net
    G = global_len if global_len is not None else max(max(len(it["global_tokens"]) for it in items), 1)
    net["global_tokens"] = pad_stack([it["global_tokens"] for it in items], G, pad)
    net["global_types"] = pad_stack([it["global_types"] for it in items], G, 0)
    net["structure"] = {
        key: pad_stack([it["structure"][key] for it in items], L if key.startswith("long_") else G,
                       STRUCTURE_PAD.get(key, 0))
        for key in items[0]["structure"]
    }
    return net
