"""Fixes for multi-process ``fairseq-train`` on CPU (opt-in: ``ETC_FAIRSEQ_FIXES=cpu_distributed``; real
training runs on GPUs, where fairseq needs none of these; docs/distributed.md uses them to show data-parallel
training equal to one process on a CPU machine).

1. ``fairseq.distributed.utils.call_main`` and ``_infer_torch_distributed_launch_init``: both compute
   ``rank % torch.cuda.device_count()`` or spawn ``min(torch.cuda.device_count(), world_size)`` processes, i.e.
   divide by zero or spawn nothing without CUDA. With ``--cpu`` (or no CUDA) the replacements spawn
   ``--distributed-world-size`` processes on ``tcp://localhost`` (fairseq's own launcher) or, under
   ``torchrun``, set device id 0 (fairseq would call ``torch.cuda.set_device`` for a local rank > 0), and
   select the ``gloo`` backend if ``nccl`` (fairseq's default) was left in place. Under ``torchrun`` with
   ``--distributed-world-size`` left at 1 (fairseq's default where there is at most one GPU),
   ``infer_init_method`` ignores torchrun's environment and every process trains alone (all writing the same
   checkpoints): the replacement takes the world size from ``WORLD_SIZE``.
2. ``fairseq.models.DistributedFairseqModel`` (``--ddp-backend pytorch_ddp``/``c10d``, the default): it passes
   ``device_ids=[device_id]`` to ``DistributedDataParallel``, which torch rejects for CPU modules. On CPU the
   replacement builds the same DDP with ``device_ids=None``.
3. ``fairseq.distributed.utils.all_gather_list`` (every update, for criterions whose logging outputs cannot be
   summed, e.g. ``etc_nq``'s per-window predictions): it allocates ``torch.cuda.ByteTensor`` and pinned
   memory, so it fails without CUDA, and it refuses outputs over ``--all-gather-list-size`` bytes. Where no
   CUDA process group is in use (gloo), the replacement gathers with ``torch.distributed.all_gather_object``
   (no size limit, same per-rank list); NCCL and XLA groups keep fairseq's function.
"""
import functools
import logging
import os
import socket
from typing import Any, List

import torch

from .patching import Patch
from .unused_parameters import refuse_unused_parameter_search

logger = logging.getLogger(__name__)


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

    return _infer_torch_distributed_launch_init


def _wrap_ddp_model(original):
    @functools.wraps(original)
    def DistributedFairseqModel(args, model, process_group, device):
        if torch.device(device).type != "cpu" or args.ddp_backend not in {"c10d", "pytorch_ddp"} or args.tpu:
            return original(args, model, process_group, device)
        refuse_unused_parameter_search(args, model)  # builds DDP itself: the default fix's check first
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

    return DistributedFairseqModel


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

    return all_gather_list


PATCHES = (
    Patch("fairseq.distributed.utils", "call_main", _wrap_call_main),
    Patch("fairseq.distributed.utils", "_infer_torch_distributed_launch_init", _wrap_torchrun_init),
    Patch("fairseq.models", "DistributedFairseqModel", _wrap_ddp_model),
    Patch("fairseq.distributed.utils", "all_gather_list", _wrap_all_gather_list),
)
