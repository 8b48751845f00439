"""An official ETC checkpoint directory, read and checked against its own ``etc_config.json``.

A released ETC directory (``etc_base_2x_pretrain``, ``etc_large``, ...) holds ``etc_config.json`` (the official
``EtcConfig`` fields), ``model.ckpt.index`` / ``model.ckpt.data-*`` and a vocabulary file.
:func:`read_official_checkpoint` reads the config (missing fields take the official defaults), compares the
checkpoint's variable names and shapes with those the config implies (:mod:`etc_fairseq.official.variables`)
before reading any tensor, and returns the model's weights as numpy arrays under their official names.
Training-only variables (``global_step``, optimizer slots such as ``.../adam_m``, ``.../adam_v``) are left out
and counted in the log; any other variable the config does not explain, a missing variable or a shape
mismatch is a one-line :class:`~etc_fairseq.official.tf_checkpoint.TFCheckpointError` naming the file and
the variable, so nothing is silently dropped or half-converted. The one opt-in exception: with
``drop_unknown`` (``etc-lift --drop-unknown``), variables outside the model's own ``etc_document_bert/`` scope
(e.g. pretraining heads saved next to the model; the official release publishes no code that names them)
are left out and returned by name in :attr:`OfficialCheckpoint.dropped`; unknown variables inside the
scope are refused all the same.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np

from etc_fairseq.official.tf_checkpoint import TFCheckpointError, TFCheckpointReader
from etc_fairseq.official.variables import (
    OFFICIAL_CONFIG_DEFAULTS,
    OFFICIAL_SCOPE,
    official_variables,
    with_official_defaults,
)

logger = logging.getLogger(__name__)

CONFIG_FILE = "etc_config.json"

# Relative ids beyond the 2D + 1 position labels that the official EtcModel reserves (l2g/g2l "belongs" and
# "does not belong", and one for cross-context g2g in the multi-hop converters).
NUM_OTHER_RELATIVE_IDS = 3

# Variables a training checkpoint carries besides the model: step counter and optimizer slots.
_TRAINING_ONLY = re.compile(r"(^|/)(global_step|beta[12]_power|adam_[mv]|lamb_[mv]|Adam(_\d+)?|Momentum|accum\w*)$")

_INT_FIELDS = ("vocab_size", "segment_vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "local_radius", "relative_pos_max_distance", "max_absolute_position_embeddings", "intermediate_size")


@dataclass
class OfficialCheckpoint:
    """The weights of an official ETC checkpoint and the config they belong to."""

    directory: Path
    config: Dict[str, Any]  # every official EtcConfig field (defaults filled in)
    weights: Dict[str, np.ndarray]  # official variable name -> array, model variables only
    skipped: List[str] = field(default_factory=list)  # training-only variables not returned
    dropped: List[str] = field(default_factory=list)  # variables outside the model's scope (drop_unknown)


def load_official_config(path: Union[str, Path]) -> Dict[str, Any]:
    """Read an official ``etc_config.json``: every ``EtcConfig`` field, missing ones at the official default.

    Raises:
        TFCheckpointError: file missing, not JSON, ``vocab_size`` missing, a size field that is not a
            non-negative integer, or ``relative_vocab_size`` too small for ``relative_pos_max_distance``.
    """
    path = Path(path)
    if not path.is_file():
        raise TFCheckpointError(f"{path}: not found (an official ETC checkpoint directory holds {CONFIG_FILE} next to model.ckpt.*)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TFCheckpointError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise TFCheckpointError(f"{path}: expected a JSON object of EtcConfig fields, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(OFFICIAL_CONFIG_DEFAULTS) - {"vocab_size"})
    if unknown:
        logger.warning("%s: ignoring fields the official EtcConfig does not have: %s", path, ", ".join(unknown))
    try:
        config = with_official_defaults({k: v for k, v in raw.items() if k not in unknown})
    except ValueError as e:
        raise TFCheckpointError(f"{path}: {e}") from None
    for name in _INT_FIELDS + ("embedding_size", "att_size_per_head", "relative_vocab_size"):
        value = config[name]
        if value is None and name in ("embedding_size", "att_size_per_head", "relative_vocab_size"):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TFCheckpointError(f"{path}: field {name!r} must be a non-negative integer, got {value!r}")
    positions = 2 * config["relative_pos_max_distance"] + 1
    if config["relative_vocab_size"] is None:
        if config["relative_pos_max_distance"] != 0:
            raise TFCheckpointError(f"{path}: relative_pos_max_distance must be 0 when relative_vocab_size is null")
    elif config["relative_vocab_size"] < positions + NUM_OTHER_RELATIVE_IDS:
        raise TFCheckpointError(
            f"{path}: relative_vocab_size {config['relative_vocab_size']} is too small for relative_pos_max_distance "
            f"{config['relative_pos_max_distance']} (needs at least {positions + NUM_OTHER_RELATIVE_IDS})"
        )
    return config


def read_official_checkpoint(directory: Union[str, Path], checkpoint: Optional[Union[str, Path]] = None,
                             drop_unknown: bool = False) -> OfficialCheckpoint:
    """Read an official ETC checkpoint directory, checked variable by variable against its config.

    Args:
        directory: holds ``etc_config.json`` and (unless ``checkpoint`` is given) one TensorFlow checkpoint.
        checkpoint: checkpoint prefix, ``.index`` file or directory, when not the one in ``directory``.
        drop_unknown: leave out (and name in ``dropped``) variables outside the ``etc_document_bert/`` scope
            instead of refusing them.

    Raises:
        TFCheckpointError: bad config (see :func:`load_official_config`), unreadable checkpoint, a variable the
            config does not explain, a variable the config needs that is missing, a shape mismatch.
    """
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    config = load_official_config(config_path)
    reader = TFCheckpointReader(checkpoint if checkpoint is not None else directory)
    expected = official_variables(config)
    skipped = sorted(n for n in reader.variables if n not in expected and _TRAINING_ONLY.search(n))
    unknown = sorted(n for n in reader.variables if n not in expected and n not in skipped)
    dropped = [n for n in unknown if not _in_model_scope(n)] if drop_unknown else []
    unknown = [n for n in unknown if n not in dropped]
    if unknown:
        var = reader.variables[unknown[0]]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        hint = ("" if _in_model_scope(var.name) else
                f"; it is outside the model's {OFFICIAL_SCOPE}/ scope (a head?): --drop-unknown leaves such "
                "variables out, naming them")
        raise TFCheckpointError(
            f"{reader.index_path}: variable {var.name!r} {list(var.shape)} is not part of an official EtcModel "
            f"configured by {config_path}{more}{hint}"
        )
    missing = sorted(n for n in expected if n not in reader.variables)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        want = expected[missing[0]]
        raise TFCheckpointError(
            f"{reader.index_path}: variable {want.name!r} missing: {config_path} implies {want.meaning} of shape {list(want.shape)}{more}"
        )
    for name, want in expected.items():
        var = reader.variables[name]
        if var.shape != want.shape:
            raise TFCheckpointError(
                f"{reader.index_path}: variable {name!r} has shape {list(var.shape)} but {config_path} implies "
                f"{list(want.shape)} ({want.meaning})"
            )
        if var.dtype not in ("float32", "bfloat16", "float16"):
            raise TFCheckpointError(f"{reader.index_path}: variable {name!r} has dtype {var.dtype}; expected floating point")
    if skipped:
        logger.info("%s: left out %d training-only variables (step counter, optimizer slots)", reader.index_path, len(skipped))
    if dropped:
        logger.warning("%s: left out %d variables outside the model (--drop-unknown): %s", reader.index_path,
                       len(dropped), ", ".join(dropped))
    weights = {name: reader.read(name).astype(np.float32, copy=False) for name in expected}
    return OfficialCheckpoint(directory=directory, config=config, weights=weights, skipped=skipped, dropped=dropped)


def _in_model_scope(name: str) -> bool:
    """A variable of the official EtcModel's own scope, where every name is known (the absolute position
    tables, outside it, are known names too)."""
    return name.startswith(OFFICIAL_SCOPE + "/")
