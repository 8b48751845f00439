"""Narrow, documented fixes to fairseq 0.12.3 code paths that etc-fairseq relies on.

Imported (and :func:`install` called) by :mod:`etc_fairseq.register`, i.e. whenever fairseq loads our
``--user-dir``. Each fix replaces one fairseq function by a wrapper that changes only the behaviour named
below and otherwise calls the original; :func:`install` is idempotent. Nothing here switches torch's safe
loading off: no ``weights_only=False``, no ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``.

1. ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` (every checkpoint read by ``fairseq-train
   --restore-file`` / resume, ``fairseq-validate --path``, ``--finetune-from-model``,
   ``load_model_ensemble_and_task``, hence ``etc-predict --path`` and ``EtcModel.from_pretrained``):
   fairseq calls ``torch.load`` without ``weights_only`` and then builds whatever model, task and
   criterion the checkpoint's config names. The wrapper first passes the file through both gates of
   :mod:`etc_fairseq.checkpoint_io` (a weights-only read with the tensors memory-mapped, then
   :func:`~etc_fairseq.checkpoint_io.validate_checkpoint_config`: an ETC model with known, typed fields,
   one of our tasks and criterions), then runs the original with ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``
   (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` removed). Every refusal is one
   :class:`~etc_fairseq.checkpoint_io.CheckpointLoadError` naming the file (and, for a truncated file,
   the other checkpoints in the same directory to fall back to). An ``etc-lift`` output was never trained:
   its config holds a placeholder task (``masked_lm``, for the hub) and no criterion, and fairseq's
   overrides replace a whole section only where the checkpoint has none, so ``fairseq-validate DATA --task
   etc_pretraining --criterion cpc_mlm --path lifted.pt`` would run the placeholder task and then stop at
   the missing criterion (``ConfigAttributeError``). For such a checkpoint the task and criterion named
   in the overrides replace the stored ones, built as fairseq builds an absent section.
2. ``fairseq.file_io.PathManager.copy`` (used by ``checkpoint_utils.save_checkpoint`` to write
   ``checkpoint_last.pt`` / ``checkpoint_best.pt`` as copies of the freshly saved checkpoint): a plain
   ``shutil.copyfile`` onto the destination, so a kill during the copy leaves a truncated
   ``checkpoint_last.pt`` that the next run resumes from. The wrapper copies local files to a temporary
   name in the destination directory (``.checkpoint_last.pt.tmp-*``, given the source's mode, i.e. 0666
   minus the umask like every other checkpoint), fsyncs, and renames (atomic on POSIX). Temporaries a
   killed copy left behind are removed by the next copy and when training starts (6.).
3. ``fairseq.distributed.utils.call_main`` / ``_infer_torch_distributed_launch_init`` (multi-process
   launch): both compute ``rank % torch.cuda.device_count()`` or spawn ``min(torch.cuda.device_count(),
   world_size)`` processes, i.e. divide by zero or spawn nothing without CUDA. With ``--cpu`` (or no CUDA)
   the wrappers spawn ``--distributed-world-size`` processes on ``tcp://localhost`` (fairseq's own
   launcher) or, under ``torchrun``, set device id 0 (fairseq would call ``torch.cuda.set_device`` for
   a local rank > 0), and select the ``gloo`` backend if ``nccl`` (fairseq's default) was left in place.
   Under ``torchrun`` with ``--distributed-world-size`` left at 1 (fairseq's default where there is at
   most one GPU), ``infer_init_method`` ignores torchrun's environment and every process trains alone
   (all writing the same checkpoints): the wrapper takes the world size from ``WORLD_SIZE``.
4. ``fairseq.models.DistributedFairseqModel`` (``--ddp-backend pytorch_ddp``/``c10d``, the default): it
   passes ``device_ids=[device_id]`` to ``DistributedDataParallel``, which torch rejects for CPU modules.
   On CPU the wrapper builds the same DDP with ``device_ids=None``. With ``--find-unused-parameters`` and a
   fine-tuning model (one with ``task_heads``) it stops with one line: DDP searches for unused parameters
   from the outputs of the model's ``forward``, but our criterions apply the task heads to those outputs
   outside it, so DDP takes the heads for unused and then sees their gradients arrive ("Expected to mark a
   variable ready only once"); fine-tuning models have no unused parameters, so the option is not needed.
5. ``fairseq.distributed.utils._broadcast_object_slow`` (rank 0 reads a checkpoint and broadcasts it to
   the other ranks on resume): the receiving ranks ``torch.load`` the pickled state, which the weights-only
   loader rejects (it holds omegaconf ``DictConfig`` objects and fairseq's ``_TensorPlaceholder``). The
   wrapper encodes exactly those two types as plain containers before pickling, receives with
   ``torch.load(weights_only=True)``, and decodes them again; anything else unsafe is still refused.
6. ``fairseq.checkpoint_utils.load_checkpoint`` (``fairseq-train``'s start): without ``checkpoint_last.pt``
   fairseq starts at update 0 and overwrites the numbered checkpoints of the save directory, and a
   ``--restore-file`` that does not exist is silently ignored the same way. The rule (:func:`check_resume`):
   a start at update 0 in a save directory that already holds ``checkpoint*.pt`` files is refused in one
   line naming the newest intact one to pass with ``--restore-file``, unless a ``--reset-*`` option says
   to start over there; a ``--restore-file`` must exist. Before that, temporaries an interrupted save
   left in the save directory (``.checkpoint*.pt.tmp-*``, ``checkpoint*.pt.tmp``) are removed (rank 0).
   After it, the checkpoint to load (:func:`checkpoint_to_load`) must have as many token embeddings as the
   task's dictionary gives the model (:func:`check_vocabulary`): one line naming both sizes, instead of
   fairseq's size-mismatch traceback ending in "please ensure that the architectures match" (e.g. a
   ``checkpoint_last.pt`` of another run in the same ``--save-dir``, resumed before ``--finetune-from-model``).
7. ``torch_xla.core.xla_model.get_memory_info`` as called by ``fairseq.trainer.Trainer.train_step`` with
   ``--tpu`` (every ``--log-interval`` updates): fairseq 0.12 reads ``mem_info["kb_free"]`` and
   ``mem_info["kb_total"]``, but torch-xla >= 2.x returns ``bytes_used`` / ``bytes_limit`` /
   ``peak_bytes_used`` (KeyError on a TPU), and on the PJRT CPU backend the call itself raises
   ``RuntimeError: ... UNIMPLEMENTED: GetAllocatorStats is not supported``. The wrapper adds ``kb_free`` /
   ``kb_total`` derived from the byte counts, and where the backend keeps no allocator statistics returns
   all-zero counts (fairseq then logs ``gb_free 0``) instead of stopping training. Installed only where
   torch_xla is importable (fairseq itself imports it at start-up when present).
8. ``fairseq.utils.tpu_data_loader`` (``--tpu``: every training and validation epoch): fairseq builds
   ``CountingIterator(ParallelLoader(itr, ...).per_device_loader(...), start=itr.n, total=len(itr))``, and
   the ``ParallelLoader`` constructor starts a thread that already takes batches from ``itr`` before
   ``itr.n`` is read, so the counter starts at the number prefetched and the epoch ends that many batches
   early, silently (measured on torch-xla 2.9: 14 of 20 WikiHop batches per epoch). The replacement reads
   ``n`` and ``len`` first and is otherwise fairseq's function.
9. ``fairseq.dataclass.initialize.add_defaults`` (``fairseq-train`` and ``fairseq-hydra-train`` call it on
   the composed config, the second time right after importing ``--user-dir``): it maps an architecture
   name in ``model._name`` to its model (``etc_tiny`` -> ``etc``) and fills every field the config lacks
   from ``EtcConfig``'s defaults, so the architecture function that runs later finds every field set and
   changes nothing: a yaml ``model: {_name: etc_tiny}`` silently built the default (base-sized) model.
   The wrapper first fills the fields the config leaves unset from ``checkpoint.finetune_from_model``'s
   stored model config when one is given (what ``fairseq-train --finetune-from-model`` does through the
   architecture functions, which ``fairseq-hydra-train`` calls on ``cfg.model`` alone), then from the
   named ETC architecture (:func:`apply_yaml_architecture`), then calls the original; fields the yaml
   sets are kept. Command-line ``--arch`` configs arrive with every field set already and are unchanged.
   Installed into ``fairseq_cli.train`` / ``fairseq_cli.hydra_train`` too, which import the function by
   name.
10. ``fairseq.distributed.utils.all_gather_list`` (``fairseq-train`` on several processes, every update,
    for criterions whose logging outputs cannot be summed, e.g. ``etc_nq``'s per-window predictions): it
    allocates ``torch.cuda.ByteTensor`` and pinned memory, so it fails without CUDA (``type
    torch.cuda.ByteTensor not available``), and it refuses outputs over ``--all-gather-list-size`` bytes.
    Where no CUDA process group is in use (gloo), the wrapper gathers with
    ``torch.distributed.all_gather_object`` (no size limit, same per-rank list); NCCL and XLA groups keep
    fairseq's function.
"""
import contextlib
import functools
import io
import logging
import os
import pickle
import shutil
import socket
import stat
import tempfile
import zipfile
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, List

import torch

from etc_fairseq import checkpoint_io
from etc_fairseq.checkpoint_io import CheckpointLoadError

logger = logging.getLogger(__name__)

_INSTALLED = False


def _wrap_load_checkpoint_to_cpu(original):
    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        local = Path(str(path))
        if local.is_file():  # missing (or remote) files: fairseq reports them itself
            # both gates of checkpoint_io before fairseq touches the file: a weights-only read (tensors
            # memory-mapped, not read) and the config check; only then fairseq's own loader
            state = checkpoint_io.load_checkpoint(local, mmap=True)
            checkpoint_io.validate_checkpoint_config(state, local)
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
        _lifted_task_and_criterion(state, overrides)
        return state

    load_checkpoint_to_cpu.__etc_fairseq_wrapped__ = True
    return load_checkpoint_to_cpu


def _lifted_task_and_criterion(state, overrides) -> None:
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


# -------------------------------------------------------------------------------------------------------
# 2. atomic checkpoint copies
# -------------------------------------------------------------------------------------------------------


def stale_temporaries(directory) -> List[Path]:
    """Files a killed checkpoint save leaves in ``directory``: ``.checkpoint*.pt.tmp-*`` (our copy of
    ``checkpoint_last.pt`` / ``checkpoint_best.pt``) and ``checkpoint*.pt.tmp`` (fairseq's own atomic save)."""
    d = Path(directory)
    try:
        return sorted(set(d.glob(".checkpoint*.pt.tmp-*")) | set(d.glob("checkpoint*.pt.tmp")))
    except OSError:
        return []


def remove_stale_temporaries(directory) -> None:
    """Delete :func:`stale_temporaries` (logged); called when a save or a training run starts, when
    nothing is writing them."""
    for p in stale_temporaries(directory):
        try:
            p.unlink()
            logger.info(f"removed {p}, left by an interrupted checkpoint save")
        except FileNotFoundError:  # another rank removed it first
            pass


def _wrap_copy(original):
    @functools.wraps(original)
    def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        from fairseq.file_io import PathManager

        if PathManager.path_requires_pathmanager(src_path) or PathManager.path_requires_pathmanager(dst_path):
            return original(src_path, dst_path, overwrite=overwrite)
        if os.path.exists(dst_path) and not overwrite:
            return original(src_path, dst_path, overwrite=overwrite)
        dst_dir = os.path.dirname(os.path.abspath(dst_path))
        prefix = f".{os.path.basename(dst_path)}.tmp-"
        for stale in Path(dst_dir).glob(glob_escape(prefix) + "*"):  # a copy killed before its rename
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=dst_dir)
        try:
            # mkstemp creates 0600; give the copy the mode of its source, which fairseq created like
            # every other checkpoint (0666 minus the umask)
            os.chmod(tmp, stat.S_IMODE(os.stat(src_path).st_mode))
            with os.fdopen(fd, "wb") as out, open(src_path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dst_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True

    copy.__etc_fairseq_wrapped__ = True
    return staticmethod(copy)


_RESET_OPTIONS = ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")


def check_resume(cfg, suffix: str = "") -> None:
    """Refuse a ``fairseq-train`` start that would lose work (see the module docstring, 6.).

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
    intact = checkpoint_io.newest_intact_checkpoint(save_dir)
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
    state = checkpoint_io.load_checkpoint(Path(path), mmap=True)
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


def _wrap_load_checkpoint(original):
    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        if getattr(trainer, "is_data_parallel_master", True):
            remove_stale_temporaries(cfg.save_dir)
        check_resume(cfg, trainer.checkpoint_suffix)
        path = checkpoint_to_load(cfg, trainer.checkpoint_suffix)
        resuming = path.name.startswith("checkpoint_last") and path.parent == Path(cfg.save_dir)
        check_vocabulary(path, trainer.get_model(), str(trainer.cfg.task.get("data", "DATA")), resuming=resuming)
        return original(cfg, trainer, **passthrough_args)

    load_checkpoint.__etc_fairseq_wrapped__ = True
    return load_checkpoint


# -------------------------------------------------------------------------------------------------------
# 3.-5. multi-process training on CPU, safe checkpoint broadcast
# -------------------------------------------------------------------------------------------------------


def _no_cuda(cfg) -> bool:
    return bool(getattr(cfg.common, "cpu", False)) or not torch.cuda.is_available()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _torchrun_env() -> bool:
    return all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"))


def _wrap_call_main(original):
    @functools.wraps(original)
    def call_main(cfg, main, **kwargs):
        dt = cfg.distributed_training
        if _torchrun_env() and dt.distributed_world_size == 1 and int(os.environ["WORLD_SIZE"]) > 1:
            # infer_init_method returns early for world size 1 -- the default on a machine with one or
            # no GPU -- and each torchrun process would train alone; take the world size from torchrun
            logger.info(f"torchrun: WORLD_SIZE={os.environ['WORLD_SIZE']} (--distributed-world-size was 1)")
            dt.distributed_world_size = int(os.environ["WORLD_SIZE"])
        if not _no_cuda(cfg) or getattr(cfg.common, "tpu", False):
            return original(cfg, main, **kwargs)
        from fairseq.distributed import utils as dist_utils

        if dt.distributed_backend == "nccl" and (dt.distributed_world_size > 1 or _torchrun_env()):
            logger.info("no CUDA: using the gloo distributed backend instead of nccl")
            dt.distributed_backend = "gloo"
        spawn = (
            dt.distributed_world_size > 1
            and dt.distributed_init_method is None
            and not _torchrun_env()
            and not os.environ.get("SLURM_JOB_NODELIST")
            and not os.environ.get("SLURM_STEP_NODELIST")
            and not dt.pipeline_model_parallel
        )
        if not spawn:
            return original(cfg, main, **kwargs)
        # fairseq's _infer_single_node_init asserts world_size <= torch.cuda.device_count() and call_main
        # spawns min(device_count, world_size) processes: on CPU, spawn world_size processes ourselves.
        port = dt.distributed_port if dt.distributed_port > 0 else _free_port()
        dt.distributed_init_method = f"tcp://localhost:{port}"
        kwargs["start_rank"] = dt.distributed_rank
        dt.distributed_rank = None  # assigned per process by distributed_main
        logger.info(f"CPU: spawning {dt.distributed_world_size} processes ({dt.distributed_backend}, {dt.distributed_init_method})")
        torch.multiprocessing.spawn(
            fn=dist_utils.distributed_main,
            args=(main, cfg, kwargs),
            nprocs=dt.distributed_world_size,
            join=True,
        )

    call_main.__etc_fairseq_wrapped__ = True
    return call_main


def _wrap_torchrun_init(original):
    @functools.wraps(original)
    def _infer_torch_distributed_launch_init(cfg):
        if torch.cuda.device_count() > 0:
            return original(cfg)
        # fairseq: cfg.device_id = rank % torch.cuda.device_count() -> ZeroDivisionError without CUDA
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        # no device to select; a device_id > 0 would make infer_init_method call torch.cuda.set_device
        cfg.device_id = 0
        cfg.distributed_no_spawn = True
        if cfg.distributed_backend == "nccl":
            cfg.distributed_backend = "gloo"

    _infer_torch_distributed_launch_init.__etc_fairseq_wrapped__ = True
    return _infer_torch_distributed_launch_init


def _wrap_distributed_model(original):
    @functools.wraps(original)
    def DistributedFairseqModel(args, model, process_group, device):
        if (args.find_unused_parameters and args.ddp_backend in {"c10d", "pytorch_ddp"}
                and len(getattr(model, "task_heads", ())) > 0):
            raise ValueError(
                "--find-unused-parameters does not work with the etc fine-tuning tasks and is not needed: their "
                "heads run in the criterion, outside the model's forward, where DistributedDataParallel's search "
                "for unused parameters cannot see them (it then marks the heads' parameters ready twice); every "
                "parameter of a fine-tuning model gets a gradient in every step, so leave the option out")
        if torch.device(device).type != "cpu" or args.ddp_backend not in {"c10d", "pytorch_ddp"} or args.tpu:
            return original(args, model, process_group, device)
        from fairseq.distributed import ModuleProxyWrapper
        from torch.nn.parallel import DistributedDataParallel

        # as fairseq's pytorch_ddp branch, but device_ids/output_device None: torch's DDP contract for CPU
        wrapped = DistributedDataParallel(
            module=model.to(device),
            device_ids=None,
            output_device=None,
            broadcast_buffers=args.broadcast_buffers,
            bucket_cap_mb=args.bucket_cap_mb,
            process_group=process_group,
            find_unused_parameters=args.find_unused_parameters,
            gradient_as_bucket_view=args.gradient_as_bucket_view,
        )
        return ModuleProxyWrapper(wrapped)

    DistributedFairseqModel.__etc_fairseq_wrapped__ = True
    return DistributedFairseqModel


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


def _wrap_all_gather_list(original):
    @functools.wraps(original)
    def all_gather_list(data, group=None, max_size=16384):
        import torch.distributed as dist
        from fairseq import utils
        from fairseq.distributed import utils as dist_utils

        if group is None:
            group = dist_utils.get_global_group()
        if isinstance(group, tuple) or (torch.cuda.is_available() and dist.get_backend(group) != "gloo"):
            return original(data, group=group, max_size=max_size)  # XLA or NCCL: fairseq's own path
        out: List[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(out, utils.move_to_cpu(data), group=group)
        return out

    all_gather_list.__etc_fairseq_wrapped__ = True
    return all_gather_list


def _broadcast_object_slow(obj: Any, src_rank: int, group: object, dist_device: torch.device) -> Any:
    """fairseq's ``_broadcast_object_slow`` with a weights-only receive (see the module docstring, 5.)."""
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


_broadcast_object_slow.__etc_fairseq_wrapped__ = True


# -------------------------------------------------------------------------------------------------------
# 7.-8. fairseq's --tpu loop on torch-xla 2.x: memory logging, epoch length
# -------------------------------------------------------------------------------------------------------


def _wrap_xla_memory_info(original):
    @functools.wraps(original)
    def get_memory_info(device=None):
        try:
            info = dict(original(device))
        except RuntimeError as e:
            if "UNIMPLEMENTED" not in str(e):
                raise
            # PJRT CPU backend: no allocator statistics to report
            info = {"bytes_used": 0, "bytes_limit": 0, "peak_bytes_used": 0}
        if "bytes_limit" in info and "kb_total" not in info:  # the keys fairseq 0.12 reads
            info["kb_total"] = info["bytes_limit"] // 1024
            info["kb_free"] = max(info["bytes_limit"] - info.get("bytes_used", 0), 0) // 1024
        return info

    get_memory_info.__etc_fairseq_wrapped__ = True
    return get_memory_info


def _tpu_data_loader(itr):
    """fairseq's ``tpu_data_loader`` with the iterator's position read before the prefetch thread starts
    (see the module docstring, 8.)."""
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from fairseq.data import iterators

    start, total = getattr(itr, "n", 0), len(itr)  # before ParallelLoader's thread consumes anything
    xm.rendezvous("tpu_data_loader")  # wait for all workers
    xm.mark_step()
    device = xm.xla_device()
    return iterators.CountingIterator(pl.ParallelLoader(itr, [device]).per_device_loader(device), start=start, total=total)


_tpu_data_loader.__etc_fairseq_wrapped__ = True


def _install_xla_fixes() -> None:
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:  # no torch_xla: nothing to fix (fairseq's --tpu needs it anyway)
        return
    from fairseq import utils as fairseq_utils

    if not getattr(xm.get_memory_info, "__etc_fairseq_wrapped__", False):
        xm.get_memory_info = _wrap_xla_memory_info(xm.get_memory_info)
    fairseq_utils.tpu_data_loader = _tpu_data_loader


# -------------------------------------------------------------------------------------------------------
# integrity of fairseq's binarized (mmap) datasets
# -------------------------------------------------------------------------------------------------------

_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_HEADER = 9 + 8 + 1 + 8  # magic, version <Q, dtype code <B, number of items <Q


def verify_indexed_dataset(prefix) -> int:
    """Check that ``prefix.idx`` / ``prefix.bin`` form a complete fairseq mmap indexed dataset.

    fairseq's ``MMapIndexedDataset`` trusts both files: a truncated ``.bin`` (a copy or a preparation run
    that was cut short) only fails when a training batch reaches the missing items, deep inside numpy.
    This reads the ``.idx`` header, checks the ``.idx`` size (header + int32 sizes + int64 pointers) and
    that the ``.bin`` size equals the end of the last item. Nothing is loaded into memory.

    Args:
        prefix: the path without ``.idx`` / ``.bin``.
    Returns:
        the number of items.
    Raises:
        FileNotFoundError: a file is missing (the message names it).
        ValueError: a file is truncated or not this format (the message names it and what was expected).
    """
    import struct

    import numpy as np
    from fairseq.data.indexed_dataset import _code_to_dtype

    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    for p in (idx, bin_):
        if not p.is_file():
            raise FileNotFoundError(f"{p}: missing (prepared data incomplete; re-run etc-prepare)")
    hint = "the prepared data is truncated or corrupt; re-run etc-prepare"
    with open(idx, "rb") as f:
        header = f.read(_MMAP_HEADER)
        if len(header) < _MMAP_HEADER or header[:9] != _MMAP_MAGIC:
            raise ValueError(f"{idx}: not a fairseq mmap index (bad or short header); {hint}")
        (version,) = struct.unpack("<Q", header[9:17])
        (code,) = struct.unpack("<B", header[17:18])
        (n,) = struct.unpack("<Q", header[18:26])
        if version != 1 or code not in _code_to_dtype:
            raise ValueError(f"{idx}: unsupported index version {version} / dtype code {code}; {hint}")
    expected_idx = _MMAP_HEADER + 12 * n
    if idx.stat().st_size < expected_idx:
        raise ValueError(f"{idx}: {idx.stat().st_size} bytes, the header announces {n} items ({expected_idx} bytes); {hint}")
    itemsize = np.dtype(_code_to_dtype[code]).itemsize
    expected_bin = 0
    if n:
        mm = np.memmap(idx, mode="r", dtype=np.uint8)
        size = int(np.frombuffer(mm, dtype=np.int32, count=1, offset=_MMAP_HEADER + 4 * (n - 1))[0])
        pointer = int(np.frombuffer(mm, dtype=np.int64, count=1, offset=_MMAP_HEADER + 4 * n + 8 * (n - 1))[0])
        del mm
        expected_bin = pointer + size * itemsize
    actual = bin_.stat().st_size
    if actual != expected_bin:
        raise ValueError(f"{bin_}: {actual} bytes, its index {idx.name} needs {expected_bin} for {n} items; {hint}")
    return n


# -------------------------------------------------------------------------------------------------------


def apply_yaml_architecture(cfg) -> None:
    """Fill the unset fields of ``cfg.model`` (a composed fairseq/hydra config, an omegaconf ``DictConfig``)
    in place: first from the model config stored in ``checkpoint.finetune_from_model`` when one is given
    (as ``fairseq-train --finetune-from-model`` does, :mod:`etc_fairseq.models.architectures`), then from
    the ETC architecture that ``model._name`` names; fields already set are kept. A config naming another
    model or no model is left alone; the plain ``etc`` model takes only the checkpoint's fields (fairseq
    fills the rest with the dataclass defaults). See fix 9."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
    from omegaconf import DictConfig, OmegaConf, open_dict

    model = cfg.get("model") if hasattr(cfg, "get") else None
    name = model if isinstance(model, str) else getattr(model, "_name", None) if model is not None else None
    if not isinstance(name, str) or ARCH_MODEL_NAME_REGISTRY.get(name) != "etc":
        return
    if isinstance(model, str):
        with open_dict(cfg):
            cfg.model = DictConfig({"_name": model})
        model = cfg.model
    if not OmegaConf.is_config(model):
        return
    checkpoint = cfg.get("checkpoint")
    finetune_from = checkpoint.get("finetune_from_model") if OmegaConf.is_config(checkpoint) else None
    # Every etc* architecture function (the plain "etc" one included) first fills the unset fields from the
    # checkpoint its args name as finetune_from_model, as on fairseq-train's command line; a yaml names it
    # under checkpoint:, so it is lent to the model node for the call (reached through fairseq's registry:
    # this module sits below etc_fairseq.models and does not import it).
    with open_dict(model):
        lent = bool(finetune_from) and "finetune_from_model" not in model
        if lent:
            model.finetune_from_model = finetune_from
        try:
            ARCH_CONFIG_REGISTRY[name](model)
        finally:
            if lent:
                del model["finetune_from_model"]


def _wrap_add_defaults(original):
    @functools.wraps(original)
    def add_defaults(cfg):
        apply_yaml_architecture(cfg)
        return original(cfg)

    add_defaults.__etc_fairseq_wrapped__ = True
    return add_defaults


def _install_add_defaults() -> None:
    import sys

    from fairseq.dataclass import initialize

    if not getattr(initialize.add_defaults, "__etc_fairseq_wrapped__", False):
        initialize.add_defaults = _wrap_add_defaults(initialize.add_defaults)
    for name in ("fairseq_cli.train", "fairseq_cli.hydra_train"):  # imported the function by name
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "add_defaults"):
            module.add_defaults = initialize.add_defaults


def install() -> None:
    """Apply all fixes (idempotent). Called by :mod:`etc_fairseq.register`."""
    global _INSTALLED
    if _INSTALLED:
        return
    from fairseq import checkpoint_utils, models
    from fairseq.distributed import utils as dist_utils
    from fairseq.file_io import PathManager

    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "__etc_fairseq_wrapped__", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap_load_checkpoint_to_cpu(checkpoint_utils.load_checkpoint_to_cpu)
    if not getattr(checkpoint_utils.load_checkpoint, "__etc_fairseq_wrapped__", False):
        checkpoint_utils.load_checkpoint = _wrap_load_checkpoint(checkpoint_utils.load_checkpoint)
    if not getattr(PathManager.copy, "__etc_fairseq_wrapped__", False):
        PathManager.copy = _wrap_copy(PathManager.copy)
    if not getattr(dist_utils.call_main, "__etc_fairseq_wrapped__", False):
        dist_utils.call_main = _wrap_call_main(dist_utils.call_main)
    if not getattr(dist_utils._infer_torch_distributed_launch_init, "__etc_fairseq_wrapped__", False):
        dist_utils._infer_torch_distributed_launch_init = _wrap_torchrun_init(
            dist_utils._infer_torch_distributed_launch_init
        )
    if not getattr(models.DistributedFairseqModel, "__etc_fairseq_wrapped__", False):
        models.DistributedFairseqModel = _wrap_distributed_model(models.DistributedFairseqModel)
    dist_utils._broadcast_object_slow = _broadcast_object_slow
    if not getattr(dist_utils.all_gather_list, "__etc_fairseq_wrapped__", False):
        dist_utils.all_gather_list = _wrap_all_gather_list(dist_utils.all_gather_list)
    _install_xla_fixes()
    _install_add_defaults()
    _INSTALLED = True


install()
