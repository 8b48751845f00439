"""What ``etc-prepare`` records about a prepared directory, and how training, validation and prediction take
it up: the one reader of ``prepare.json`` and the rules, as pure functions (the tasks apply them).

``etc-prepare <dataset>`` writes ``DIR/prepare.json`` with the lengths the examples were laid out for
(``max_long_len``, ``max_global_len``), and with ``--arch NAME`` (or ``--from-model DIR``) the model settings
the layout is meant for (:data:`ARCH_FIELDS`); ``etc-prepare pretrain`` writes ``OUT/prepare.json`` next to
``OUT/bin`` (the directory training reads, with ``pretrain.json``). The vocabulary travels as ``dict.txt``
in the directory itself, which every task reads.

The rules (:func:`take_prepared_lengths`, :func:`lengths_for_model`, :func:`check_arch`):

- ``fairseq-train``: a task length left at its dataclass default takes the prepared value; one given
  explicitly below the prepared value is refused in one line naming the flag to pass (a larger one is kept:
  every example fits).
- a loaded checkpoint (``fairseq-validate --path``, ``etc-predict``, ``load_model_ensemble_and_task``): its
  trained lengths are kept when the data fits them; data prepared longer runs at the prepared lengths when
  the model can take them (relative positions only, or absolute tables large enough, and no
  ``--pad-to-fixed-length``: its static shapes are the trained ones), else one line says what to re-prepare.
- the model's radius, relative-position clipping and fixed block length must equal the recorded ones; a
  difference is refused in one line naming the flags (``--arch NAME`` or ``--local-radius N`` ...).

Nothing here imports fairseq; omegaconf only inside :func:`set_task_field`.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

from etc_fairseq.errors import ConfigError, InputFormatError

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: the summary ``etc-prepare`` writes last into its output directory
SUMMARY_FILE = "prepare.json"
#: the model settings ``etc-prepare --arch`` (or the ``--from-model`` checkpoint) records in
#: :data:`SUMMARY_FILE` (``etc-show`` draws with them; training checks the model against them)
ARCH_FIELDS = ("local_radius", "relative_pos_max_distance", "fixed_block_len")
#: the task lengths a prepared fine-tuning directory records (its examples were laid out within them)
LENGTH_FIELDS = ("max_long_len", "max_global_len")


def flag(name: str) -> str:
    """The command-line flag of config field ``name``: ``max_long_len`` -> ``--max-long-len``."""
    return "--" + name.replace("_", "-")


def read_summary(path: PathLike) -> Optional[dict]:
    """The JSON object in ``path`` (a :data:`SUMMARY_FILE`), or None when there is no such file.

    Raises:
        InputFormatError: the file is not a JSON object (names the file).
    """
    from etc_fairseq.guards import load_json_file

    path = Path(path)
    if not path.is_file():
        return None
    info = load_json_file(path, f"the {SUMMARY_FILE} etc-prepare writes")
    if not isinstance(info, dict):
        raise InputFormatError(f"{path}: not a valid {SUMMARY_FILE} of etc-prepare (expected a JSON object)")
    return info


def _summary_candidates(data: PathLike) -> Tuple[Path, ...]:
    """Where the :data:`SUMMARY_FILE` describing prepared directory ``data`` can be: ``data/prepare.json``, and
    for the ``bin/`` of ``etc-prepare pretrain`` / ``mlm`` (where fairseq reads) ``data/../prepare.json``."""
    data = Path(data)
    return (data / SUMMARY_FILE,) + ((data.parent / SUMMARY_FILE,) if data.name == "bin" else ())


def summary_path(data: PathLike) -> Optional[Path]:
    """The :data:`SUMMARY_FILE` describing prepared directory ``data`` (:func:`_summary_candidates`), or None."""
    return next((p for p in _summary_candidates(data) if p.is_file()), None)


def recorded_arch_settings(data: PathLike) -> Optional[Tuple[Path, dict]]:
    """``(file, {"arch"?, **ARCH_FIELDS})`` that ``etc-prepare --arch`` (or ``--from-model``) recorded for
    ``data`` (see :func:`summary_path`), or None when nothing records an architecture."""
    for path in _summary_candidates(data):
        try:
            info = read_summary(path)
        except InputFormatError:
            continue
        if info is not None and all(isinstance(info.get(f), int) for f in ARCH_FIELDS):
            return path, {f: info[f] for f in ("arch",) + ARCH_FIELDS if f in info}
    return None


def recorded_lengths(info: Mapping) -> Dict[str, int]:
    """``{field: value}`` of the :data:`LENGTH_FIELDS` a summary records (integers only)."""
    return {f: info[f] for f in LENGTH_FIELDS if isinstance(info.get(f), int) and not isinstance(info.get(f), bool)}


def take_prepared_lengths(
    values: Mapping[str, int],
    defaults: Mapping[str, int],
    prepared: Mapping[str, int],
    source: PathLike,
    from_checkpoint: bool,
) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Which task lengths the prepared ones replace (the rule of the module docstring).

    Args:
        values: the task's current ``{field: value}`` of :data:`LENGTH_FIELDS`.
        defaults: the task config's dataclass default of each field.
        prepared: what the data records (:func:`recorded_lengths`).
        source: the summary file, for messages.
        from_checkpoint: the config comes from a checkpoint (trained lengths), not from the command line.
    Returns:
        ``(take, longer)``: ``take`` = fields to set to the prepared value now (``fairseq-train``: a field
        left at its default); ``longer`` = fields whose checkpoint value is below the prepared one (a loaded
        checkpoint: :func:`lengths_for_model` decides once the model is known).
    Raises:
        ConfigError: ``fairseq-train`` with a length given below the prepared one (names the flag to pass).
    """
    take, longer = {}, {}
    for name, want in prepared.items():
        have = values.get(name)
        if have is None or have == want:
            continue
        if from_checkpoint:
            if have < want:
                longer[name] = want
        elif have == defaults.get(name):
            take[name] = want
        elif have < want:
            raise ConfigError(
                f"{flag(name)} {have} is below the length the data was prepared with ({want}, recorded in "
                f"{source}): pass {flag(name)} {want} (or leave it out), or prepare the data again with "
                f"{flag(name)} {have}"
            )
    return take, longer


def lengths_for_model(
    longer: Mapping[str, int],
    trained: Mapping[str, int],
    position_limit: Optional[int],
    pad_to_fixed_length: bool,
    source: PathLike,
) -> Dict[str, int]:
    """The prepared lengths a loaded checkpoint runs data with when they exceed its trained ones.

    Args:
        longer: ``{field: prepared value}`` above the trained value (:func:`take_prepared_lengths`).
        trained: the checkpoint's ``{field: value}``.
        position_limit: the longest input the model's absolute position tables take, None for relative
            positions only (:func:`etc_fairseq.encoder.config.absolute_position_limit`).
        pad_to_fixed_length: the task pads to its lengths (static shapes: the trained ones stay).
        source: the summary file, for messages.
    Returns:
        ``longer`` itself when the model can run it.
    Raises:
        InputFormatError: it cannot (names the file and the flag to prepare the data with).
    """
    for name, want in longer.items():
        why = None
        if pad_to_fixed_length:
            why = "it was trained with --pad-to-fixed-length (static shapes)"
        elif position_limit is not None and want > position_limit:
            why = f"its absolute position tables hold {position_limit} positions"
        if why is not None:
            raise InputFormatError(
                f"{source}: the data was prepared with {flag(name)} {want}, longer than the checkpoint's "
                f"{trained.get(name)}, and {why}: prepare the data again with {flag(name)} {trained.get(name)}"
            )
    return dict(longer)


def check_arch(model: Mapping[str, object], recorded: Mapping[str, object], source: PathLike) -> None:
    """Refuse a model whose structure settings differ from those the data was prepared for.

    Args:
        model: the model config's values (fields it lacks are not compared, e.g. a non-ETC baseline).
        recorded: ``{"arch"?, **ARCH_FIELDS}`` (:func:`recorded_arch_settings`).
        source: the summary file, for messages.
    Raises:
        ConfigError: one line naming the file, the differing fields and the flags to pass.
    """
    diff = [f for f in ARCH_FIELDS if f in recorded and model.get(f) is not None and model.get(f) != recorded[f]]
    if not diff:
        return
    arch = recorded.get("arch")
    wanted = ", ".join(f"{f} {recorded[f]}" for f in diff)
    have = ", ".join(f"{f} {model.get(f)}" for f in diff)
    flags = " ".join(f"{flag(f)} {recorded[f]}" for f in diff)
    named = f"--arch {arch} (or {flags})" if arch else flags
    raise ConfigError(
        f"{source}: the data was prepared for {f'--arch {arch}: ' if arch else ''}{wanted}, but the model has "
        f"{have}: pass {named}, or prepare the data again with the model's --arch"
    )


def check_model_fits_data(model_cfg, data: str) -> None:
    """Refuse a built model whose structure settings differ from those recorded for any directory of ``data``
    (fairseq's ``:``-separated data paths; :func:`check_arch`): the one check of the pretraining and the
    fine-tuning tasks. A model config without those fields (a non-ETC baseline) is not compared."""
    from fairseq import utils

    values = {f: getattr(model_cfg, f, None) for f in ARCH_FIELDS}
    for part in utils.split_paths(str(data)):
        recorded = recorded_arch_settings(part)
        if recorded is not None:
            check_arch(values, recorded[1], recorded[0])


def set_task_field(cfg, name: str, value) -> None:
    """Set ``cfg.name = value`` on a task config (a dataclass or an omegaconf node), and on the root
    config's ``task`` node that fairseq merged it from (``fairseq.tasks.setup_task`` hands the task a
    merged copy), so that the checkpoint records the value the model was trained with."""
    from omegaconf import OmegaConf, open_dict

    if not OmegaConf.is_config(cfg):
        setattr(cfg, name, value)
        return
    nodes = [cfg]
    parent = cfg._get_parent()
    root_task = parent.get("task") if OmegaConf.is_config(parent) and not OmegaConf.is_list(parent) else None
    if OmegaConf.is_config(root_task) and root_task is not cfg and name in root_task:
        nodes.append(root_task)
    for node in nodes:
        with open_dict(node):
            node[name] = value


def field_defaults(cfg) -> Dict[str, object]:
    """``{field: dataclass default}`` of a task config (a dataclass instance or a structured omegaconf node
    made from one); ``{}`` when its dataclass is unknown."""
    import dataclasses

    from omegaconf import OmegaConf

    kind = OmegaConf.get_type(cfg) if OmegaConf.is_config(cfg) else type(cfg)
    if kind is None or not dataclasses.is_dataclass(kind):
        return {}
    return {f.name: f.default for f in dataclasses.fields(kind) if f.default is not dataclasses.MISSING}


def summaries(data: str) -> Dict[Path, dict]:
    """``{file: summary}`` of every directory in fairseq's colon-separated ``data`` that has a
    ``prepare.json`` of its own (``DIR/prepare.json``)."""
    out = {}
    for part in str(data).split(":"):
        if part:
            path = Path(part) / SUMMARY_FILE
            info = read_summary(path)
            if info is not None:
                out[path] = info
    return out


def take_up_lengths(cfg, from_checkpoint: bool) -> Tuple[Dict[str, int], Optional[Path]]:
    """Apply :func:`take_prepared_lengths` to a fine-tuning task config ``cfg`` (``cfg.data`` read): fields
    left at their defaults are set to the prepared lengths (logged). Returns ``(longer, source)`` for
    :func:`lengths_for_model` (a loaded checkpoint whose trained lengths are below the prepared ones)."""
    prepared: Dict[str, int] = {}
    source = None
    for path, info in summaries(cfg.data).items():
        for name, value in recorded_lengths(info).items():
            if value > prepared.get(name, 0):
                prepared[name], source = value, path
    if not prepared:
        return {}, None
    values = {name: getattr(cfg, name, None) for name in prepared}
    take, longer = take_prepared_lengths(values, field_defaults(cfg), prepared, source, from_checkpoint)
    for name, value in take.items():
        set_task_field(cfg, name, value)
    if take:
        logger.info("%s: %s from the data (left at the defaults %s)", source,
                    " ".join(f"{flag(n)} {v}" for n, v in take.items()), {n: values[n] for n in take})
    return longer, source
