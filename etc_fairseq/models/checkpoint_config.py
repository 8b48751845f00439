"""Gate 2 of the safe checkpoint loader (:mod:`etc_fairseq.checkpoint_io` is gate 1): what a checkpoint's
config may name before anything is built from it.

A weights-only pickle can still name any fairseq model, and fairseq builds whatever ``cfg.model._name`` names;
several fairseq models ``eval()`` config strings (wav2vec2's ``conv_feature_layers``, fconv's
``encoder_layers``, ...). So a config must name an ETC model (``etc`` or one of its registered architectures),
every model field must be a field of that model's dataclass with a value of the field's type (int, float,
bool, str, one of the choices, a list of those; a ``${section.field}`` reference where fairseq's ``II(...)``
put one), and the task and criterion must be ones our loaders are meant to build (etc-fairseq's own, plus
fairseq's ``masked_lm`` and ``sentence_prediction``), with the same field and type rules. Argparse-era
``args`` namespaces are refused: no ETC checkpoint has one. A resolver interpolation (``${oc.env:...}``)
anywhere in the config is refused too.

Then what the checkpoint holds (:func:`validate_checkpoint_contents`), before fairseq reads or builds
anything: the layout fairseq expects (``model`` tensors, ``optimizer_history``, ``extra_state``), model values
that can build a working model (:func:`~etc_fairseq.encoder.config.validate_encoder_config`: no NaN dropout,
no 0 heads, no negative radius), a declared size that the stored tensors and this machine's memory can hold
(100,000 layers are refused at once, not built for minutes), a format version this installation reads, and
finite weights (a NaN or infinite value is refused naming the tensor).

Used by fairseq's checkpoint loading (:mod:`etc_fairseq.fairseq_fixes.checkpoint_load`),
``EtcModel.from_pretrained`` and ``--finetune-from-model`` (:mod:`etc_fairseq.models.architectures`).
"""
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Mapping

import torch

from etc_fairseq.checkpoint_io import (
    PathLike,
    check_config_fields,
    check_no_resolvers,
    load_checkpoint,
    plain_config,
)
from etc_fairseq.encoder.config import validate_encoder_config
from etc_fairseq.encoder.size import check_fits_in_memory, minimum_parameter_count
from etc_fairseq.errors import CheckpointLoadError, ConfigError

from .registration import register_components

#: fairseq tasks and criterions (besides etc-fairseq's own) that ETC checkpoints are trained with and our
#: loaders build: the masked-LM quick start and sentence classification.
FAIRSEQ_TASKS = ("masked_lm", "sentence_prediction")
FAIRSEQ_CRITERIONS = ("masked_lm", "sentence_prediction")


def _ours(cls: Any) -> bool:
    return getattr(cls, "__module__", "").split(".")[0] == "etc_fairseq"


def allowed_components() -> Dict[str, Dict[str, type]]:
    """What a checkpoint may name, with the dataclass its fields are checked against:
    ``{"model": {name or architecture: dataclass}, "task": {...}, "criterion": {...}}``. Models: every
    model and architecture etc-fairseq registers; tasks and criterions: etc-fairseq's plus
    :data:`FAIRSEQ_TASKS` / :data:`FAIRSEQ_CRITERIONS`. Only dataclass-configured components qualify."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY, MODEL_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    register_components()
    models: Dict[str, type] = {}
    for name, cls in MODEL_REGISTRY.items():
        if _ours(cls) and name in MODEL_DATACLASS_REGISTRY:
            models[name] = MODEL_DATACLASS_REGISTRY[name]
    by_class = {MODEL_REGISTRY[n]: dc for n, dc in models.items()}
    for arch, cls in ARCH_MODEL_REGISTRY.items():
        if cls in by_class:
            models[arch] = by_class[cls]
    tasks = {n: TASK_DATACLASS_REGISTRY[n] for n, c in TASK_REGISTRY.items()
             if (_ours(c) or n in FAIRSEQ_TASKS) and n in TASK_DATACLASS_REGISTRY}
    criterions = {n: CRITERION_DATACLASS_REGISTRY[n] for n, c in CRITERION_REGISTRY.items()
                  if (_ours(c) or n in FAIRSEQ_CRITERIONS) and n in CRITERION_DATACLASS_REGISTRY}
    return {"model": models, "task": tasks, "criterion": criterions}


def validate_checkpoint_config(state: Mapping[str, Any], path: PathLike) -> None:
    """Gate 2: refuse a checkpoint whose config would make fairseq build anything but an ETC model with
    plain, typed settings (see the module docstring). Call it on the unpickled checkpoint before any
    model, task or criterion is built from it.

    Args:
        state: the checkpoint as :func:`load_checkpoint` returns it (``cfg`` a plain dict, or an omegaconf
            node after fairseq's loader).
        path: the file, for messages.
    Raises:
        CheckpointLoadError: one line naming the file, the field and what was expected.
    """
    path = Path(path)
    if state.get("args") is not None:
        arch = getattr(state["args"], "arch", None) if not isinstance(state["args"], Mapping) else state["args"].get("arch")
        raise CheckpointLoadError(
            f"checkpoint {path}: has an argparse-era 'args' config (arch={arch!r}); etc-fairseq builds models "
            "only from checkpoints with a dataclass 'cfg' (RoBERTa checkpoints: convert them with etc-lift)"
        )
    cfg = plain_config(state.get("cfg"))
    if not isinstance(cfg, Mapping):
        raise CheckpointLoadError(f"checkpoint {path}: no 'cfg' config (got {type(cfg).__name__}); not an etc-fairseq checkpoint")
    check_no_resolvers(path, cfg, "cfg")
    allowed = allowed_components()
    for section, required in (("model", True), ("task", False), ("criterion", False)):
        values = plain_config(cfg.get(section))
        if values is None and not required:
            continue
        if not isinstance(values, Mapping):
            raise CheckpointLoadError(
                f"checkpoint {path}: cfg.{section} is a {type(values).__name__}, not a dataclass config "
                f"(expected a dict with _name, one of {', '.join(sorted(allowed[section]))})"
            )
        name = values.get("_name")
        if name not in allowed[section]:
            what = "an ETC model" if section == "model" else f"a {section} etc-fairseq builds"
            raise CheckpointLoadError(
                f"checkpoint {path}: cfg.{section}._name={name!r} is not {what} "
                f"(expected one of {', '.join(sorted(allowed[section]))})"
            )
        check_config_fields(path, section, values, allowed[section][name])


def validate_checkpoint_contents(state: Mapping[str, Any], path: PathLike, tensors: bool = True) -> None:
    """What a checkpoint that passed :func:`validate_checkpoint_config` holds (see the module docstring).

    Args:
        state: the checkpoint as :func:`load_checkpoint` returns it.
        path: the file, for messages.
        tensors: also read every floating-point tensor for NaN / infinite values (a pass over the weights;
            False where only the config is used, e.g. the fields of a ``--finetune-from-model`` checkpoint).
    Raises:
        CheckpointLoadError: one line naming the file and the field or tensor at fault, and what was expected.
    """
    path = Path(path)
    weights = state.get("model")
    if not isinstance(weights, Mapping) or not all(torch.is_tensor(t) for t in weights.values()):
        raise CheckpointLoadError(f"checkpoint {path}: 'model' is not a dict of tensors (got "
                                  f"{type(weights).__name__}); not a checkpoint fairseq wrote")
    history = state.get("optimizer_history")
    if not isinstance(history, list) or not history or not all(isinstance(h, Mapping) for h in history) \
            or not ({"lr_scheduler_state", "best_loss"} & set(history[-1])):
        raise CheckpointLoadError(
            f"checkpoint {path}: 'optimizer_history' is {'missing' if history is None else repr(history)[:60]}; "
            "expected a non-empty list of dicts, the last with 'lr_scheduler_state' (what fairseq writes); "
            "not a fairseq checkpoint, or one edited"
        )
    if not isinstance(state.get("extra_state"), Mapping):
        raise CheckpointLoadError(f"checkpoint {path}: 'extra_state' is {type(state.get('extra_state')).__name__}, "
                                  "expected a dict (what fairseq writes)")
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    model = plain_config(plain_config(state.get("cfg")).get("model"))
    values = SimpleNamespace(**{k: v for k, v in model.items() if k != "_name"})
    etc = model.get("_name") == "etc" or ARCH_MODEL_NAME_REGISTRY.get(model.get("_name")) == "etc"
    if etc:
        try:
            validate_encoder_config(values)
        except ConfigError as e:
            raise CheckpointLoadError(f"checkpoint {path}: cfg.model.{e}") from None
    _check_declared_size(values, weights, path)
    if etc:
        _check_format_version(weights, path)
    if tensors:
        for name, t in weights.items():
            if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise CheckpointLoadError(
                    f"checkpoint {path}: tensor model[{name!r}] holds {bad} NaN or infinite value(s) of "
                    f"{t.numel()}; every output computed from it would be NaN (the training that wrote it "
                    "diverged, or the file was changed): load an earlier checkpoint"
                )


def _check_declared_size(values: SimpleNamespace, weights: Mapping[str, torch.Tensor], path: Path) -> None:
    """The size cfg.model declares against what the tensors hold and what this machine can hold."""
    sizes = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim")
    if not all(isinstance(getattr(values, n, None), int) for n in sizes):
        return
    declared = minimum_parameter_count(values)
    stored = sum(t.numel() for t in weights.values())
    if declared > stored:
        fields = ", ".join(f"{n}={getattr(values, n)}" for n in sizes)
        raise CheckpointLoadError(
            f"checkpoint {path}: cfg.model {fields} declare at least {declared:,} parameters, but its tensors hold "
            f"{stored:,} in all: the config does not describe these weights (nothing was built)"
        )
    try:
        check_fits_in_memory(values, 0, f"checkpoint {path}: cfg.model")
    except ConfigError as e:
        raise CheckpointLoadError(str(e)) from None


#: Version of our checkpoint format, stored as the ``encoder.version`` buffer (:data:`FORMAT_VERSION_KEY`).
#: Bump it when parameter names or meanings change, and teach
#: :meth:`etc_fairseq.models.etc.EtcModel.upgrade_state_dict_named` the step.
ETC_FORMAT_VERSION = 1
#: the state-dict key of the checkpoint format version (the ``version`` buffer of the fairseq encoder)
FORMAT_VERSION_KEY = "encoder.version"


def _check_format_version(weights: Mapping[str, torch.Tensor], path: Path) -> None:
    version = weights.get(FORMAT_VERSION_KEY)
    if version is None:
        return
    if version.numel() != 1 or not bool(torch.isfinite(version.float()).all()) or float(version) != int(float(version)):
        raise CheckpointLoadError(f"checkpoint {path}: tensor model[{FORMAT_VERSION_KEY!r}] = {version.tolist()!r:.40}; "
                                  "expected one whole number (the etc-fairseq format version)")
    if int(float(version)) > ETC_FORMAT_VERSION:
        raise CheckpointLoadError(
            f"checkpoint {path}: etc-fairseq format version {int(float(version))}, newer than this installation "
            f"reads ({ETC_FORMAT_VERSION}); upgrade etc-fairseq to load it"
        )


def load_model_checkpoint(path: PathLike, *, mmap: bool = False, tensors: bool = True) -> Dict[str, Any]:
    """:func:`load_checkpoint`, :func:`validate_checkpoint_config` and :func:`validate_checkpoint_contents`:
    an etc-fairseq checkpoint that is safe to build a model from (``tensors=False``: its weights are not
    read, only its config is used)."""
    state = load_checkpoint(path, mmap=mmap)
    validate_checkpoint_config(state, path)
    validate_checkpoint_contents(state, path, tensors=tensors)
    return state
