"""The files of an :class:`~etc_fairseq.encoder.model.EtcEncoder` directory, without fairseq or pickle
(:meth:`EtcEncoder.save_pretrained <etc_fairseq.encoder.model.EtcEncoder.save_pretrained>` /
:meth:`~etc_fairseq.encoder.model.EtcEncoder.from_pretrained` use them).

A model directory holds two files:

- ``model.safetensors``: the encoder's state dict (parameter names as in ``EtcEncoder.state_dict()``),
  read with the ``safetensors`` library;
- ``config.json``: ``{"format": "etc-encoder", "format_version": 1, "vocab_size", "padding_idx",
  "fixed_block_token_id", "config": {every EtcEncoderConfig field}}``. Unknown keys or config fields
  are refused with a one-line :class:`~etc_fairseq.errors.CheckpointLoadError` (the project's one loading
  error) naming the file; missing config fields take their defaults.

Files are written under temporary names and renamed into place, so a failed save leaves no
half-written model behind.
"""

from __future__ import annotations

import enum
import json
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, Union

import torch

from etc_fairseq.errors import CheckpointLoadError, ConfigError

from .config import EtcEncoderConfig, encoder_config_fields

FORMAT = "etc-encoder"
FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_TOP_LEVEL_KEYS = ("format", "format_version", "vocab_size", "padding_idx", "fixed_block_token_id", "config")


def config_to_dict(cfg) -> Dict[str, Any]:
    """The :class:`EtcEncoderConfig` fields of ``cfg`` (an EtcEncoderConfig, fairseq's EtcConfig or an
    omegaconf node with those fields) as a plain JSON-able dict."""
    return {name: _plain(getattr(cfg, name)) for name in encoder_config_fields()}


def _plain(v):
    return v.value if isinstance(v, enum.Enum) else v


def encoder_config_from_dict(values: Dict[str, Any], source: str = "config") -> EtcEncoderConfig:
    """Build an :class:`EtcEncoderConfig`, refusing unknown fields with a one-line error."""
    known = set(encoder_config_fields())
    unknown = sorted(set(values) - known)
    if unknown:
        raise CheckpointLoadError(f"{source}: unknown config field(s) {unknown}; known: {sorted(known)}")
    types = {f.name: f.type for f in fields(EtcEncoderConfig)}
    for name, v in values.items():
        want = types[name]
        if isinstance(want, type) and issubclass(want, enum.Enum):
            want = str  # a choice field: the string, checked against the choices by EtcEncoderConfig
        ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            ok = True
        if not ok:
            raise CheckpointLoadError(f"{source}: config field {name!r} = {v!r}: expected {want.__name__}")
    try:
        return EtcEncoderConfig(**values)
    except ValueError as e:
        raise CheckpointLoadError(f"{source}: {e}") from None


def save_pretrained(encoder, directory: Union[str, os.PathLike]) -> None:
    """Write ``encoder`` (an :class:`~etc_fairseq.encoder.model.EtcEncoder`) as ``model.safetensors`` +
    ``config.json`` into ``directory`` (created if needed; existing files of these names are replaced)."""
    from safetensors.torch import save_file

    if tuple(encoder.final_outputs) != ("long", "global"):
        raise ConfigError(f"this encoder computes only the {'/'.join(encoder.final_outputs)} features in its last "
                         "layer (built for a fine-tuning task); save_pretrained writes complete encoders only")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "vocab_size": encoder.vocab_size,
        "padding_idx": encoder.padding_idx,
        "fixed_block_token_id": encoder.fixed_block_token_id,
        "config": config_to_dict(encoder.cfg),
    }
    state = {k: v.detach().to("cpu").contiguous() for k, v in encoder.state_dict().items()}
    tmp_weights = directory / (WEIGHTS_NAME + ".tmp")
    tmp_config = directory / (CONFIG_NAME + ".tmp")
    try:
        save_file(state, str(tmp_weights), metadata={"format": FORMAT})
        tmp_config.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(tmp_weights, directory / WEIGHTS_NAME)
        os.replace(tmp_config, directory / CONFIG_NAME)
    finally:
        for t in (tmp_weights, tmp_config):
            if t.exists():
                t.unlink()


def read_config(directory: Union[str, os.PathLike]) -> Dict[str, Any]:
    """``config.json`` of a model directory, checked: top-level keys, format, and the config fields
    (returned under ``"config"`` as an :class:`EtcEncoderConfig`)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise CheckpointLoadError(f"{path}: missing (a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME})")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointLoadError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(meta, dict):
        raise CheckpointLoadError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    unknown = sorted(set(meta) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise CheckpointLoadError(f"{path}: unknown key(s) {unknown}; expected {list(_TOP_LEVEL_KEYS)}")
    missing = [k for k in _TOP_LEVEL_KEYS if k not in meta]
    if missing:
        raise CheckpointLoadError(f"{path}: missing key(s) {missing}")
    if meta["format"] != FORMAT:
        raise CheckpointLoadError(f"{path}: format {meta['format']!r}, expected {FORMAT!r}")
    if meta["format_version"] != FORMAT_VERSION:
        raise CheckpointLoadError(
            f"{path}: format_version {meta['format_version']!r}; this installation reads {FORMAT_VERSION}"
        )
    for key in ("vocab_size", "padding_idx", "fixed_block_token_id"):
        if not isinstance(meta[key], int) or isinstance(meta[key], bool) or meta[key] < 0:
            raise CheckpointLoadError(f"{path}: {key} = {meta[key]!r}: expected an int >= 0")
    if not isinstance(meta["config"], dict):
        raise CheckpointLoadError(f"{path}: config must be a JSON object")
    meta = dict(meta, config=encoder_config_from_dict(meta["config"], source=str(path)))
    _check_declared_size(meta["config"], meta["vocab_size"], Path(directory), path)
    return meta


def _check_declared_size(cfg: EtcEncoderConfig, vocab_size: int, directory: Path, path: Path) -> None:
    """Refuse, before anything is built, a config.json whose sizes the weights file cannot hold (their
    shapes are read from its header) or this machine's memory cannot
    (:func:`~etc_fairseq.encoder.size.check_fits_in_memory`): 100,000 layers are refused at once."""
    from safetensors import SafetensorError, safe_open

    from .size import check_fits_in_memory, minimum_parameter_count

    weights = directory / WEIGHTS_NAME
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt") as f:
                stored = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
        except (SafetensorError, OSError) as e:
            raise CheckpointLoadError(f"{weights}: unreadable safetensors file ({e})") from None
        declared = minimum_parameter_count(cfg, vocab_size)
        if declared > stored:
            raise CheckpointLoadError(
                f"{path}: encoder_layers={cfg.encoder_layers}, encoder_embed_dim={cfg.encoder_embed_dim}, "
                f"encoder_ffn_embed_dim={cfg.encoder_ffn_embed_dim} and vocab_size={vocab_size} declare at least "
                f"{declared:,} parameters, but {WEIGHTS_NAME} holds {stored:,}: the config does not describe these weights"
            )
    try:
        check_fits_in_memory(cfg, vocab_size, str(path))
    except ConfigError as e:
        raise CheckpointLoadError(str(e)) from None


def load_weights(directory: Union[str, os.PathLike], expected: Dict[str, torch.Tensor],
                 map_location: str = "cpu") -> Dict[str, torch.Tensor]:
    """The tensors of ``directory``'s ``model.safetensors`` (read with ``safetensors``, no pickle), checked
    against ``expected`` (the state dict of the encoder that ``config.json`` describes, e.g. built on the
    meta device): the same names and shapes.

    Raises:
        CheckpointLoadError: a missing or unreadable file, missing or unexpected tensors, a shape that
            differs from what ``config.json`` implies (one line naming the file and the tensor).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = Path(directory) / WEIGHTS_NAME
    if not weights.is_file():
        raise CheckpointLoadError(f"{weights}: missing")
    try:
        state = load_file(str(weights), device=str(map_location))
    except (SafetensorError, OSError) as e:
        raise CheckpointLoadError(f"{weights}: unreadable safetensors file ({e})") from None
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointLoadError(
            f"{weights}: tensors do not match config.json: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, t in expected.items():
        if tuple(state[name].shape) != tuple(t.shape):
            raise CheckpointLoadError(
                f"{weights}: tensor {name!r} has shape {tuple(state[name].shape)}, config.json implies "
                f"{tuple(t.shape)}"
            )
        if state[name].is_floating_point() and not bool(torch.isfinite(state[name]).all()):
            raise CheckpointLoadError(f"{weights}: tensor {name!r} holds NaN or infinite values; every output "
                                      "computed from it would be NaN")
    return state
