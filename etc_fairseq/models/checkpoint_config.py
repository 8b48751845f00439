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

Used by fairseq's checkpoint loading (:mod:`etc_fairseq.fairseq_fixes.checkpoint_load`),
``EtcModel.from_pretrained`` and ``--finetune-from-model`` (:mod:`etc_fairseq.models.architectures`).
"""
from pathlib import Path
from typing import Any, Dict, Mapping

from etc_fairseq.checkpoint_io import (
    PathLike,
    check_config_fields,
    check_no_resolvers,
    load_checkpoint,
    plain_config,
)
from etc_fairseq.errors import CheckpointLoadError

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


def load_model_checkpoint(path: PathLike, *, mmap: bool = False) -> Dict[str, Any]:
    """:func:`load_checkpoint` then :func:`validate_checkpoint_config`: an etc-fairseq checkpoint that is
    safe to build a model from."""
    state = load_checkpoint(path, mmap=mmap)
    validate_checkpoint_config(state, path)
    return state
