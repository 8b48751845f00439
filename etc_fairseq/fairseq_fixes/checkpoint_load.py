"""Fix for ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` (fairseq 0.12): every checkpoint that
``fairseq-train`` (resume, ``--restore-file``, ``--finetune-from-model``), ``fairseq-validate --path`` and
``load_model_ensemble_and_task`` read.

fairseq calls ``torch.load`` without ``weights_only`` and then builds whatever model, task and criterion the
checkpoint's config names (several fairseq models ``eval()`` config strings). The replacement first passes the
file through both gates of the project's loader (a weights-only read with the tensors memory-mapped, then the
config check: an ETC model with known, typed fields, one of our tasks and criterions), then runs the original
with ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``. Every refusal is one :class:`~etc_fairseq.errors.CheckpointLoadError`
naming the file (and, for a truncated file, the other checkpoints of its directory to fall back to).

The model's own refusal while it loads the tensors (a tensor of another shape:
:meth:`etc_fairseq.models.etc.EtcModel.load_state_dict`) does not know the file;
``checkpoint_utils.load_model_ensemble_and_task`` (``fairseq-validate``, ``etc-predict``) is wrapped to name it.

An ``etc-lift`` output was never trained: its config holds a placeholder task (``masked_lm``, for the hub) and
no criterion, and fairseq's overrides replace a whole section only where the checkpoint has none, so
``fairseq-validate DATA --task etc_pretraining --criterion cpc_mlm --path lifted.pt`` would run the placeholder
task and stop at the missing criterion (``ConfigAttributeError``). For such a checkpoint the task and criterion
named in the overrides replace the stored ones, built as fairseq builds an absent section.
"""
import functools
import pickle
import zipfile
from pathlib import Path

from etc_fairseq import checkpoint_io
from etc_fairseq.errors import CheckpointLoadError
from etc_fairseq.models.checkpoint_config import validate_checkpoint_config, validate_checkpoint_contents

from .patching import Patch


def _wrap(original):
    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        local = Path(str(path))
        if local.is_file():  # missing (or remote) files: fairseq reports them itself
            state = checkpoint_io.load_checkpoint(local, mmap=True)
            validate_checkpoint_config(state, local)
            validate_checkpoint_contents(state, local)
            del state
        try:
            with checkpoint_io.force_weights_only():
                state = original(path, *args, **kwargs)
        except pickle.UnpicklingError as e:  # the file changed since it was checked
            raise CheckpointLoadError(f"{path}: refusing to load checkpoint: {str(e).strip().splitlines()[-1]}") from None
        except (EOFError, zipfile.BadZipFile) as e:
            raise CheckpointLoadError(checkpoint_io.corrupt_message(local, f"{type(e).__name__}: {e}")) from None
        except RuntimeError as e:
            msg = str(e)
            if "PytorchStreamReader" in msg or "zip archive" in msg or "storage" in msg.lower():
                raise CheckpointLoadError(checkpoint_io.corrupt_message(local, msg.splitlines()[0])) from None
            raise
        overrides = kwargs.get("arg_overrides", args[0] if args else None)
        lifted_task_and_criterion(state, overrides)
        return state

    return load_checkpoint_to_cpu


def lifted_task_and_criterion(state, overrides) -> None:
    """For an ``etc-lift`` output (``extra_state.lifted_from``), the task and criterion named in
    ``overrides`` (fairseq's command-line overrides, e.g. ``fairseq-validate --task T --criterion C``)
    replace the placeholder task and the absent criterion of its config, built from their registered
    dataclasses with the overrides applied, as fairseq builds a section a checkpoint lacks; the other
    sections the checkpoint lacks (``common``, ``dataset``, ..., which the task's ``${common.seed}``-style
    fields refer to) get fairseq's defaults, overridden the same way."""
    extra = state.get("extra_state") if isinstance(state, dict) else None
    if not overrides or not isinstance(extra, dict) or "lifted_from" not in extra:
        return
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.dataclass.utils import overwrite_args_by_name
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY
    from omegaconf import DictConfig, OmegaConf, open_dict

    cfg = state.get("cfg")
    if not OmegaConf.is_config(cfg):
        return
    registries = {"task": TASK_DATACLASS_REGISTRY, "criterion": REGISTRIES["criterion"]["dataclass_registry"]}
    chosen = {g: overrides.get(g) for g, r in registries.items() if isinstance(overrides.get(g), str)
              and overrides.get(g) in r and not (OmegaConf.is_config(cfg.get(g)) and cfg[g].get("_name") == overrides.get(g))}
    if not chosen:
        return
    defaults = OmegaConf.structured(FairseqConfig)
    with open_dict(cfg):
        for key in defaults:
            if key not in ("model", "task", "criterion") and cfg.get(key) is None and OmegaConf.is_config(defaults[key]):
                cfg[key] = DictConfig(OmegaConf.to_container(defaults[key]))
                overwrite_args_by_name(cfg[key], overrides)
        for group, name in chosen.items():
            cfg[group] = DictConfig(registries[group][name]())
            overwrite_args_by_name(cfg[group], overrides)
            cfg[group]._name = name


def _wrap_ensemble(original):
    @functools.wraps(original)
    def load_model_ensemble_and_task(filenames, *args, **kwargs):
        try:
            return original(filenames, *args, **kwargs)
        except CheckpointLoadError as e:
            names = [str(f) for f in filenames]
            if any(name in str(e) for name in names):
                raise
            raise CheckpointLoadError(f"{', '.join(names)}: {e}") from None

    return load_model_ensemble_and_task


PATCHES = (
    Patch("fairseq.checkpoint_utils", "load_checkpoint_to_cpu", _wrap),
    Patch("fairseq.checkpoint_utils", "load_model_ensemble_and_task", _wrap_ensemble),
)
