"""Named ETC architectures (``--arch``): one per preset of :data:`etc_fairseq.encoder.config.PRESETS`
(the paper's sizes, section 4.1 and appendix E, and ``etc_tiny``).

Each architecture only fills fields the user did not set, so fairseq's own model flags
(``--encoder-layers``, ``--local-radius``, ...) override the architecture, as for RoBERTa.

``fairseq-train --finetune-from-model FILE`` (and ``--restore-file FILE``) builds the model from its command
line before it loads FILE's weights. So that a checkpoint which stores its own model (``etc-lift`` output, an
earlier fine-tuning) needs no model flags, every ``etc*`` architecture (the plain ``etc`` one included) first
fills the fields the command line did not set from FILE's stored ``cfg.model`` (read through the one safe
loader and its config gate, :mod:`etc_fairseq.models.checkpoint_config`); flags given on the command line still win,
and the architecture's values fill only what neither sets. ``--restore-file FILE`` counts when it names a file
(not fairseq's default ``checkpoint_last.pt`` of the save directory): continuing a run from its checkpoint in a
new ``--save-dir`` then builds the model that checkpoint holds, as it does for fairseq's own models, whose
architecture flags are the run's.
"""

import functools
import logging
from pathlib import Path

from fairseq.models import ARCH_CONFIG_REGISTRY, register_model_architecture
from fairseq.utils import safe_getattr, safe_hasattr

from etc_fairseq.encoder.config import PRESETS
from etc_fairseq.errors import ConfigError

logger = logging.getLogger(__name__)


def _set_default(args, name, value):
    if not safe_hasattr(args, name) or safe_getattr(args, name) is None:
        setattr(args, name, value)


@functools.lru_cache(maxsize=4)
def stored_model_fields(path: str):
    """``{field: value}`` of the ETC model config stored in checkpoint ``path`` (``cfg.model``; fields of
    :class:`~etc_fairseq.models.etc.EtcConfig` only, ``${...}`` references left out).

    Raises:
        CheckpointLoadError: unreadable file, or a config that is not an ETC model's (one line).
    """
    from etc_fairseq.checkpoint_io import plain_config
    from etc_fairseq.models.checkpoint_config import load_model_checkpoint
    from etc_fairseq.models.etc import EtcConfig

    state = load_model_checkpoint(path, mmap=True, tensors=False)  # fairseq's loader reads the weights later
    model = plain_config(state["cfg"]["model"])
    fields = {k: v for k, v in model.items() if k in EtcConfig.__dataclass_fields__
              and not (isinstance(v, str) and v.startswith("${"))}
    return tuple(sorted(fields.items()))


#: fairseq's default ``--restore-file``: the save directory's own last checkpoint
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"


def fields_from_finetune_checkpoint(args, path=None) -> None:
    """Fill the model fields ``args`` lacks from the config stored in ``path`` (default
    ``args.finetune_from_model``, else an explicit ``args.restore_file``; see the module docstring); nothing
    without a path. ``fairseq-hydra-train``'s ``checkpoint.finetune_from_model`` reaches it through
    :func:`etc_fairseq.fairseq_fixes.yaml_architecture.apply_yaml_architecture`."""
    restore = safe_getattr(args, "restore_file", None)  # a missing one is refused when training starts
    path = path or safe_getattr(args, "finetune_from_model", None) or (
        restore if restore and restore != DEFAULT_RESTORE_FILE and Path(restore).is_file() else None)
    if not path:
        return
    filled = []
    for name, value in stored_model_fields(str(path)):
        if not safe_hasattr(args, name) or safe_getattr(args, name) is None:
            setattr(args, name, value)
            filled.append(name)
    if filled:
        logger.info(f"{len(filled)} model fields from the config stored in {path} (command-line flags win)")


def _etc_model_architecture(args):
    """``--arch etc``: the dataclass defaults, after the fields of a ``--finetune-from-model`` checkpoint."""
    fields_from_finetune_checkpoint(args)


#: ``--arch`` name -> the function filling ``args`` (what :func:`config_for_arch` calls)
ARCHITECTURES = {"etc": _etc_model_architecture}


def _on_the_command_line(architecture):
    """``architecture`` as fairseq's option parsing calls it (``parse_args_and_arch``, before ``main`` runs): a
    user error (a ``--finetune-from-model`` / ``--restore-file`` checkpoint the safe loader refuses) is one
    line ``PROG: error: ...`` and exit status 1, as argparse reports a bad flag, instead of a traceback."""
    @functools.wraps(architecture)
    def on_the_command_line(args):
        from etc_fairseq.guards import command_name, exit_if_user_error

        try:
            architecture(args)
        except Exception as e:  # noqa: BLE001 -- re-raised unless it is a user error
            exit_if_user_error(e, command_name())
            raise

    return on_the_command_line


# fairseq registers a no-op architecture under the model's own name; ours reads the fine-tuning checkpoint
ARCH_CONFIG_REGISTRY["etc"] = _on_the_command_line(_etc_model_architecture)


def _preset_architecture(name: str):
    """The ``--arch NAME`` function: the fields of ``NAME``'s stored ``--finetune-from-model`` checkpoint,
    then :data:`~etc_fairseq.encoder.config.PRESETS` ``[NAME]`` for what is still unset."""

    def architecture(args):
        fields_from_finetune_checkpoint(args)
        for field, value in PRESETS[name].items():
            _set_default(args, field, value)

    architecture.__name__ = architecture.__qualname__ = f"{name}_architecture"
    architecture.__doc__ = f"``--arch {name}``: :data:`etc_fairseq.encoder.config.PRESETS` ``[{name!r}]``."
    return architecture


for _name in PRESETS:
    ARCHITECTURES[_name] = _preset_architecture(_name)
    register_model_architecture("etc", _name)(_on_the_command_line(ARCHITECTURES[_name]))


def config_for_arch(arch: str, **overrides):
    """An :class:`~etc_fairseq.models.etc.EtcConfig` for ``arch`` with ``overrides`` applied first,
    resolved exactly as ``fairseq-train --arch ARCH --flag value`` resolves it (used by tests,
    benchmarks and lifting, which build models outside fairseq's command line)."""
    import argparse

    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from etc_fairseq.models.etc import EtcConfig

    if ARCH_MODEL_NAME_REGISTRY.get(arch) != "etc":
        known = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "etc")
        raise ConfigError(f"unknown ETC architecture {arch!r}; known: {known}")
    unknown = set(overrides) - set(EtcConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown EtcConfig fields {sorted(unknown)}")
    args = argparse.Namespace(**overrides)
    ARCHITECTURES[arch](args)
    cfg = EtcConfig.from_namespace(args)
    cfg._name = arch
    return cfg
