"""The one safe way etc-fairseq reads a checkpoint file: checkpoints are data, never code.

Two independent gates, both before anything of the file is used:

1. **The pickle** (:func:`load_checkpoint`, :func:`unsafe_globals`, here): zip-format files are scanned
   statically for pickle globals outside torch's weights-only allowlist (nothing is unpickled); legacy
   (pre-1.6) files cannot be scanned and are read with an explicit ``torch.load(weights_only=True)``.
   Extra globals are allowed only on request (``legacy_configs=True``: ``argparse.Namespace`` and numpy's
   scalar/dtype reconstructors, which argparse-era fairseq checkpoints such as released RoBERTa models
   hold; ``etc-lift`` reads those). ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is ignored (:func:`force_weights_only`).
2. **The config**: a weights-only pickle can still name any fairseq model, and fairseq builds whatever
   ``cfg.model._name`` names. What a config may name needs fairseq's registries, so that gate is
   :func:`etc_fairseq.models.checkpoint_config.validate_checkpoint_config`; the field checks it applies to
   each section are here (:func:`check_config_fields`, :func:`check_no_resolvers`).

Every failure is one :class:`CheckpointLoadError` whose message names the file and what is wrong
(the refused global; the config field, its value and what was expected; or, for a truncated file,
the other checkpoints in the same directory to fall back on).

A leaf: imports only torch (and omegaconf, to read fairseq's config nodes, when given one).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import logging
import os
import pickle
import re
import typing
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from etc_fairseq.errors import CheckpointLoadError  # re-exported: the one loading error

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]



# -------------------------------------------------------------------------------------------------------
# gate 1: the pickle
# -------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def force_weights_only() -> Iterator[None]:
    """Within the block, every ``torch.load`` that does not pass ``weights_only`` explicitly is weights-only
    (``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``; a ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` in the environment is
    ignored with a warning). The environment is restored afterwards."""
    saved = {k: os.environ.get(k) for k in ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")}
    if saved["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] is not None:
        logger.warning("ignoring TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: etc-fairseq reads checkpoints weights-only")
        del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def newest_intact_checkpoint(directory: Path, exclude: Optional[Path] = None) -> Optional[Path]:
    """The newest ``*.pt`` in ``directory`` (other than ``exclude``) whose zip archive and pickle are
    complete and hold nothing unsafe (the static scan of :func:`unsafe_globals`; tensors are not read),
    or None. What a resume after a broken ``checkpoint_last.pt`` should restore from."""
    try:
        candidates = [p for p in Path(directory).glob("*.pt") if exclude is None or p.resolve() != exclude.resolve()]
        candidates.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for p in candidates:
        try:
            if zipfile.is_zipfile(p) and not torch.serialization.get_unsafe_globals_in_checkpoint(str(p)):
                return p
        except Exception:  # noqa: BLE001 -- unreadable: not intact
            continue
    return None


def corrupt_message(path: Path, detail: str) -> str:
    """The one-line message for a checkpoint that cannot be read (``detail``: what torch said), naming the
    newest intact checkpoint next to it to resume from."""
    intact = newest_intact_checkpoint(path.parent, exclude=path)
    hint = (
        f"; the newest intact checkpoint next to it is {intact.name}: resume from it with "
        f"--restore-file {intact}"
        if intact is not None
        else f"; no intact checkpoint next to it in {path.parent}"
    )
    return (
        f"{path}: truncated or corrupt checkpoint, not loaded ({detail}); it was probably not written "
        f"completely (disk full, or copied/killed while being written){hint}"
    )


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _numpy_safe_globals() -> List[Any]:
    """numpy's scalar reconstructor (under its numpy 1 and numpy 2 pickle names), ``numpy.dtype`` and the
    concrete dtype classes: what a pickled numpy scalar (e.g. a ``val_loss`` in old fairseq checkpoints)
    needs. None of them can run arbitrary code."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    scalar = core.multiarray.scalar
    allowed: List[Any] = [
        (scalar, "numpy.core.multiarray.scalar"),
        (scalar, "numpy._core.multiarray.scalar"),
        np.dtype,
    ]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        for name in dir(dtypes):
            obj = getattr(dtypes, name)
            if isinstance(obj, type) and issubclass(obj, np.dtype):
                allowed.append(obj)
    return allowed


def _is_numpy_global(name: str) -> bool:
    return name in ("numpy.dtype", "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar") or (
        name.startswith("numpy.dtypes.")
    )


def _legacy_allowed(name: str) -> bool:
    return name == "argparse.Namespace" or _is_numpy_global(name)


_REJECTED_GLOBAL = re.compile(r"GLOBAL (\S+)")
_REJECTED_BUILD = re.compile(r"but got <class '([^']+)'>")


def _rejected_global(message: str) -> Optional[str]:
    """The global named in a weights-only ``UnpicklingError`` message, if any."""
    m = _REJECTED_GLOBAL.search(message) or _REJECTED_BUILD.search(message)
    return m.group(1) if m else None


def _refused(path: Path, names: Sequence[str], legacy_configs: bool) -> CheckpointLoadError:
    allowed = "torch's weights-only allowlist" + (" plus argparse.Namespace and numpy scalars" if legacy_configs else "")
    return CheckpointLoadError(
        f"{path}: refusing to load checkpoint: its pickle references {', '.join(sorted(names))}, outside "
        f"{allowed}; loading it could run arbitrary code. etc-fairseq checkpoints contain only tensors and "
        "plain Python containers"
    )


def unsafe_globals(path: PathLike) -> List[str]:
    """Pickle globals of a zip-format checkpoint outside torch's weights-only allowlist (and any
    ``torch.serialization.safe_globals`` in effect), found by a static scan of the pickle: nothing is
    executed, no tensor is read.

    Raises:
        CheckpointLoadError: the archive is unreadable (truncated, no ``data.pkl``).
    """
    path = Path(path)
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception as e:  # noqa: BLE001 -- truncated archive, missing data.pkl, torchscript file ...
        raise CheckpointLoadError(corrupt_message(path, f"{type(e).__name__}: {_first_line(e)}")) from None


def checkpoint_allowlist(path: PathLike, legacy_configs: bool = False) -> List[Any]:
    """The globals ``torch.load(weights_only=True)`` needs for ``path`` beyond torch's own allowlist,
    after checking that the file references nothing else (zip format: static scan; legacy format: a
    trial weights-only load).

    Args:
        path: the checkpoint file.
        legacy_configs: allow ``argparse.Namespace`` and numpy scalars/dtypes (argparse-era fairseq
            checkpoints); otherwise nothing beyond torch's allowlist.
    Returns:
        the objects for ``torch.serialization.safe_globals`` (empty for every etc-fairseq checkpoint).
    Raises:
        CheckpointLoadError: missing, unreadable, or a refused global (named in the message).
    """
    return _read(Path(path), legacy_configs, mmap=True, keep=False)[1]


def load_checkpoint(path: PathLike, *, legacy_configs: bool = False, mmap: bool = False) -> Dict[str, Any]:
    """Read a checkpoint safely on CPU (gate 1 only; gate 2 is
    :func:`etc_fairseq.models.checkpoint_config.validate_checkpoint_config`).

    Args:
        path: the checkpoint file.
        legacy_configs: see :func:`checkpoint_allowlist`.
        mmap: map the tensors' storage instead of reading it (zip format only; legacy files are read):
            cheap when only the config is needed.
    Returns:
        the unpickled checkpoint (a dict).
    Raises:
        CheckpointLoadError: missing, unreadable or not a dict, or a refused global (named in the message);
            nothing of a refused file is executed.
    """
    state, _ = _read(Path(path), legacy_configs, mmap=mmap, keep=True)
    if not isinstance(state, dict):
        raise CheckpointLoadError(f"{path}: expected a fairseq checkpoint (a dict), got {type(state).__name__}")
    return state


def _read(path: Path, legacy_configs: bool, mmap: bool, keep: bool) -> Tuple[Any, List[Any]]:
    """Gate 1; returns (the object or None when ``keep`` is False and nothing had to be loaded, allowlist)."""
    if not path.is_file():
        raise CheckpointLoadError(f"{path}: no such checkpoint file")
    allowed: List[Any] = []
    is_zip = zipfile.is_zipfile(path)
    if is_zip:
        unsafe = unsafe_globals(path)
        refused = [g for g in unsafe if not (legacy_configs and _legacy_allowed(g))]
        if refused:
            raise _refused(path, refused, legacy_configs)
        if "argparse.Namespace" in unsafe:
            allowed.append(argparse.Namespace)
        if any(_is_numpy_global(g) for g in unsafe):
            allowed += _numpy_safe_globals()
        if not keep:
            return None, allowed
    else:
        with open(path, "rb") as f:
            if f.read(2) == b"PK":  # a zip archive whose end (central directory) is missing: truncated
                raise CheckpointLoadError(corrupt_message(path, "zip archive without its central directory"))
        if legacy_configs:
            allowed.append(argparse.Namespace)
    # legacy format (or a scanned zip): a weights-only load. torch's legacy reader fails on arbitrary bytes
    # with anything from KeyError to struct errors: every such failure means "not a readable checkpoint".
    for attempt in range(2):
        try:
            with force_weights_only(), torch.serialization.safe_globals(allowed):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and is_zip), allowed
        except pickle.UnpicklingError as e:
            name = _rejected_global(str(e))
            if name is None:  # not a pickle of anything we know: damaged or not a checkpoint
                raise CheckpointLoadError(corrupt_message(path, f"UnpicklingError: {_first_line(e)}")) from None
            if attempt == 0 and legacy_configs and _is_numpy_global(name):
                allowed = allowed + _numpy_safe_globals()
                continue
            raise _refused(path, [name], legacy_configs) from None
        except Exception as e:  # noqa: BLE001
            raise CheckpointLoadError(corrupt_message(path, f"{type(e).__name__}: {_first_line(e)}")) from None
    raise AssertionError("unreachable")


# -------------------------------------------------------------------------------------------------------
# the field checks of gate 2 (etc_fairseq.models.checkpoint_config names what a config may hold)
# -------------------------------------------------------------------------------------------------------

_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_.]*\}")  # what II("task.max_positions") stores
_RESOLVER = re.compile(r"\$\{[^}]*:")  # ${oc.env:HOME}, ${oc.decode:...}: a resolver call


def plain_config(value: Any) -> Any:
    """A dict / Namespace / omegaconf node -> plain dict (others unchanged)."""
    if isinstance(value, argparse.Namespace):
        return dict(vars(value))
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=False)
    except ImportError:  # pragma: no cover
        pass
    return value


def _type_ok(value: Any, tp: Any) -> bool:
    """Whether a config value is of the dataclass field type ``tp`` (plain data only)."""
    if isinstance(value, str) and _REFERENCE.fullmatch(value):
        return True  # resolved by omegaconf from another field, which is checked where it lives
    if tp is Any:
        return value is None or isinstance(value, (bool, int, float, str))
    origin = typing.get_origin(tp)
    if origin is Union:
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin in (list, tuple, List, Tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return not args or all(_type_ok(v, args[0]) for v in value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # fairseq's ChoiceEnum: stored as its value
        choices = {m.value for m in tp} | {m.name for m in tp}
        return isinstance(value, (str, tp)) and (value.value if isinstance(value, tp) else value) in choices
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return False  # any other type: not something an etc-fairseq config stores


def _expected(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_config_fields(path: Path, section: str, values: Mapping[str, Any], dataclass: type) -> None:
    """Every key of ``values`` (except ``_name``) is a field of ``dataclass`` with a value of its type."""
    try:
        hints = typing.get_type_hints(dataclass)
    except Exception:  # noqa: BLE001 -- unresolvable annotation: fall back to the raw field types
        hints = {}
    fields = {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(dataclass)}
    for key, value in values.items():
        if key == "_name":
            continue
        if key not in fields:
            raise CheckpointLoadError(
                f"checkpoint {path}: cfg.{section}.{key} is not a field of {dataclass.__name__} "
                f"(unknown config field; refusing to build from it)"
            )
        if not _type_ok(value, fields[key]):
            raise CheckpointLoadError(
                f"checkpoint {path}: cfg.{section}.{key}={value!r:.80} is not of the field's type "
                f"(expected {_expected(fields[key])})"
            )


def check_no_resolvers(path: Path, obj: Any, where: str) -> None:
    if isinstance(obj, str):
        if _RESOLVER.search(obj):
            raise CheckpointLoadError(
                f"checkpoint {path}: {where}={obj!r:.80} is an omegaconf resolver call; checkpoint configs "
                "may only reference other fields (${section.field})"
            )
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            check_no_resolvers(path, v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_no_resolvers(path, v, f"{where}[{i}]")


__all__ = [
    "CheckpointLoadError",
    "check_config_fields",
    "check_no_resolvers",
    "checkpoint_allowlist",
    "corrupt_message",
    "force_weights_only",
    "newest_intact_checkpoint",
    "load_checkpoint",
    "plain_config",
    "unsafe_globals",
]
