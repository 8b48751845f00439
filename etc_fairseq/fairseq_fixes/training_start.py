"""Fix for ``fairseq.checkpoint_utils.load_checkpoint`` (fairseq 0.12), which ``fairseq-train`` calls at its
start to resume or to start over.

Without ``checkpoint_last.pt`` fairseq starts at update 0 and overwrites the numbered checkpoints of the
save directory, and a ``--restore-file`` that does not exist is silently ignored the same way. The rule
(:func:`check_resume`): a start at update 0 in a save directory that already holds ``checkpoint*.pt`` files
is refused in one line naming the newest intact one to pass with ``--restore-file``, unless a ``--reset-*``
option says to start over there; a ``--restore-file`` must exist. Before that, temporaries an interrupted
save left in the save directory are removed (rank 0). After it, the checkpoint to load
(:func:`checkpoint_to_load`) must have as many token embeddings as the task's dictionary gives the model
(:func:`check_vocabulary`): one line naming both sizes, instead of fairseq's size-mismatch traceback ending in
"please ensure that the architectures match" (e.g. a ``checkpoint_last.pt`` of another run in the same
``--save-dir``, resumed before ``--finetune-from-model``). And a refusal the model raises while it loads the
tensors (:class:`~etc_fairseq.errors.CheckpointLoadError`: a tensor of another shape, named) is passed on
with the file named, instead of being replaced by fairseq's generic "please ensure that the architectures
match" (``Trainer.load_checkpoint`` turns every exception there into that one).
"""
import functools
from pathlib import Path

from etc_fairseq.checkpoint_io import load_checkpoint, newest_intact_checkpoint
from etc_fairseq.errors import CheckpointLoadError, EtcError

from .checkpoint_copy import remove_stale_temporaries
from .patching import Patch

_RESET_OPTIONS = ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")


def check_resume(cfg, suffix: str = "") -> None:
    """Refuse a ``fairseq-train`` start that would lose work (see the module docstring).

    Args:
        cfg: fairseq's ``CheckpointConfig`` (``cfg.checkpoint``).
        suffix: the trainer's checkpoint suffix (``""`` unless sharded).
    Raises:
        CheckpointLoadError: one line naming the save directory, the checkpoints found and what to pass.
    """
    restore = cfg.restore_file
    if restore != "checkpoint_last.pt":  # an explicit --restore-file must exist: fairseq would start at 0
        path = Path(restore.replace(".pt", suffix + ".pt") if suffix else restore)
        if not path.is_file():
            raise CheckpointLoadError(
                f"--restore-file {restore}: no such checkpoint (fairseq-train would silently start at update 0)"
            )
        return
    save_dir = Path(cfg.save_dir)
    if (save_dir / f"checkpoint_last{suffix}.pt").exists() or getattr(cfg, "continue_once", None) is not None:
        return
    if any(getattr(cfg, name, False) for name in _RESET_OPTIONS):
        return  # told to start over here
    existing = sorted(p.name for p in save_dir.glob(f"checkpoint*{suffix}.pt")) if save_dir.is_dir() else []
    if not existing:
        return
    intact = newest_intact_checkpoint(save_dir)
    resume = f"resume with --restore-file {intact}" if intact is not None else "no intact one to resume from"
    raise CheckpointLoadError(
        f"{save_dir}: holds {', '.join(existing[:5])}{' ...' if len(existing) > 5 else ''} but no "
        f"checkpoint_last{suffix}.pt; starting at update 0 would overwrite them. {resume[0].upper()}{resume[1:]}, "
        "or train in another --save-dir (or pass a --reset-* option to start over here on purpose)"
    )


def checkpoint_to_load(cfg, suffix: str = "") -> Path:
    """The file ``fairseq.checkpoint_utils.load_checkpoint`` will load for ``cfg`` (``cfg.checkpoint``):
    ``SAVE_DIR/checkpoint_last.pt`` when it exists (resuming wins over ``--finetune-from-model``), else
    ``--finetune-from-model`` or ``--continue-once``, else an explicit ``--restore-file``."""
    if cfg.restore_file == "checkpoint_last.pt":
        last = Path(cfg.save_dir) / f"checkpoint_last{suffix}.pt"
        if last.exists():
            return last
        if getattr(cfg, "continue_once", None) is not None:
            return Path(cfg.continue_once)
        return Path(cfg.finetune_from_model) if cfg.finetune_from_model else last
    return Path(cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else cfg.restore_file)


def check_vocabulary(path: Path, model, data: str, resuming: bool = False) -> None:
    """Refuse, in one line, a checkpoint whose token embedding table has another number of rows than
    ``model``'s (built from the task's dictionary, ``DATA/dict.txt`` + ``<mask>``): fairseq would stop with
    "please ensure that the architectures match" after a size-mismatch traceback. Checkpoints or models
    without an ``embed_tokens.weight`` are not checked.

    Raises:
        CheckpointLoadError: names both sizes, the file and what to do.
    """
    key = next((k for k, _ in model.named_parameters() if k.endswith("embed_tokens.weight")), None)
    if key is None or not Path(path).is_file():
        return
    state = load_checkpoint(Path(path), mmap=True)
    weights = state.get("model") or {}
    theirs = next((v for k, v in weights.items() if k.endswith(key) or key.endswith(k)), None)
    ours = dict(model.named_parameters())[key]
    if theirs is None or theirs.shape[0] == ours.shape[0]:
        return
    hint = ("it is the checkpoint_last.pt of --save-dir, which fairseq resumes (before any --finetune-from-model): "
            "train in another --save-dir" if resuming else
            "prepare the data with that checkpoint's dictionary (etc-prepare ... --pretrain-dir DIR/bin of its data, "
            "or --from-model DIR of an etc-lift output)")
    raise CheckpointLoadError(
        f"{path}: a vocabulary of {theirs.shape[0]} embeddings, but the task's dictionary ({data}/dict.txt + "
        f"<mask>) gives {ours.shape[0]}; {hint}"
    )


def _wrap(original):
    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        if getattr(trainer, "is_data_parallel_master", True):
            remove_stale_temporaries(cfg.save_dir)
        check_resume(cfg, trainer.checkpoint_suffix)
        path = checkpoint_to_load(cfg, trainer.checkpoint_suffix)
        resuming = path.name.startswith("checkpoint_last") and path.parent == Path(cfg.save_dir)
        check_vocabulary(path, trainer.get_model(), str(trainer.cfg.task.get("data", "DATA")), resuming=resuming)
        try:
            return original(cfg, trainer, **passthrough_args)
        except Exception as e:  # noqa: BLE001 -- only fairseq's wrapper around one of our refusals is changed
            refusal = e.__context__
            if type(e) is Exception and str(e).startswith("Cannot load model parameters") and isinstance(refusal, EtcError):
                raise CheckpointLoadError(f"{path}: {refusal}") from None
            raise

    return load_checkpoint


PATCHES = (Patch("fairseq.checkpoint_utils", "load_checkpoint", _wrap),)
