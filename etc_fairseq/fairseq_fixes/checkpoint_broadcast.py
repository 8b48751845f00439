"""Fix for ``fairseq.distributed.utils._broadcast_object_slow`` (fairseq 0.12): on a multi-process resume,
rank 0 reads the checkpoint and broadcasts it to the other ranks, which ``torch.load`` the pickled state.

The weights-only loader (torch >= 2.6's default) rejects that state: it holds omegaconf ``DictConfig`` objects
and fairseq's ``_TensorPlaceholder``, so every rank but 0 fails. The replacement encodes exactly those two
types as plain tagged containers before pickling, receives with ``torch.load(weights_only=True)`` and decodes
them again; anything else unsafe is still refused.
"""
import io
import pickle
from typing import Any

import torch

from etc_fairseq.errors import CheckpointLoadError

from .patching import Patch

_OMEGACONF_TAG = "__etc_fairseq_omegaconf__"
_PLACEHOLDER_TAG = "__etc_fairseq_tensor_placeholder__"


def encode_for_broadcast(obj: Any) -> Any:
    """Replace omegaconf containers and fairseq ``_TensorPlaceholder`` by tagged plain dicts (recursively
    through dict/list/tuple), so the object survives ``torch.load(weights_only=True)``."""
    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(obj, (DictConfig, ListConfig)):
        return {_OMEGACONF_TAG: OmegaConf.to_container(obj, resolve=False)}
    if isinstance(obj, _TensorPlaceholder):
        return {_PLACEHOLDER_TAG: obj.index}
    if isinstance(obj, dict):
        return type(obj)((k, encode_for_broadcast(v)) for k, v in obj.items())
    if type(obj) is list:
        return [encode_for_broadcast(v) for v in obj]
    if type(obj) is tuple:  # exact tuples only: torch.Size and named tuples pass through unchanged
        return tuple(encode_for_broadcast(v) for v in obj)
    return obj


def decode_after_broadcast(obj: Any) -> Any:
    """Inverse of :func:`encode_for_broadcast`."""
    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf import OmegaConf

    if isinstance(obj, dict):
        if len(obj) == 1 and _OMEGACONF_TAG in obj:
            return OmegaConf.create(obj[_OMEGACONF_TAG])
        if len(obj) == 1 and _PLACEHOLDER_TAG in obj:
            return _TensorPlaceholder(index=obj[_PLACEHOLDER_TAG])
        return type(obj)((k, decode_after_broadcast(v)) for k, v in obj.items())
    if type(obj) is list:
        return [decode_after_broadcast(v) for v in obj]
    if type(obj) is tuple:
        return tuple(decode_after_broadcast(v) for v in obj)
    return obj


def _broadcast_object_slow(obj: Any, src_rank: int, group: object, dist_device: torch.device) -> Any:
    """fairseq's ``_broadcast_object_slow`` with a weights-only receive (see the module docstring)."""
    from fairseq.distributed.utils import broadcast, get_rank

    if get_rank(group) == src_rank:
        buffer = io.BytesIO()
        torch.save(encode_for_broadcast(obj), buffer)
        data = torch.ByteTensor(bytearray(buffer.getbuffer())).to(dist_device)
        length = torch.LongTensor([len(data)]).to(dist_device)
        broadcast(length, src=src_rank, group=group)
        broadcast(data, src=src_rank, group=group)
        return obj
    length = torch.LongTensor([0]).to(dist_device)
    broadcast(length, src=src_rank, group=group)
    data = torch.ByteTensor(int(length.item())).to(dist_device)
    broadcast(data, src=src_rank, group=group)
    try:
        received = torch.load(io.BytesIO(data.cpu().numpy().tobytes()), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointLoadError(
            f"refusing an object broadcast from rank {src_rank}: {str(e).strip().splitlines()[-1]}"
        ) from None
    return decode_after_broadcast(received)


PATCHES = (Patch("fairseq.distributed.utils", "_broadcast_object_slow", lambda original: _broadcast_object_slow),)
