"""Fixes for fairseq 0.12's ``--tpu`` loop on torch-xla 2.x (opt-in: ``ETC_FAIRSEQ_FIXES=xla``; the project
ships no TPU environment, docs/tpu.md says what was verified on torch-xla's CPU backend).

1. ``torch_xla.core.xla_model.get_memory_info`` as ``fairseq.trainer.Trainer.train_step`` calls it every
   ``--log-interval`` updates: fairseq reads ``mem_info["kb_free"]`` and ``["kb_total"]``, but torch-xla >= 2.x
   returns ``bytes_used`` / ``bytes_limit`` / ``peak_bytes_used`` (KeyError on a TPU), and on the PJRT CPU
   backend the call itself raises ``UNIMPLEMENTED: GetAllocatorStats is not supported``. The replacement adds
   ``kb_free`` / ``kb_total`` from the byte counts, and where the backend keeps no allocator statistics returns
   all-zero counts (fairseq then logs ``gb_free 0``) instead of stopping training.
2. ``fairseq.utils.tpu_data_loader`` (every training and validation epoch): fairseq builds
   ``CountingIterator(ParallelLoader(itr, ...).per_device_loader(...), start=itr.n, total=len(itr))``, and the
   ``ParallelLoader`` constructor starts a thread that already takes batches from ``itr`` before ``itr.n`` is
   read, so the counter starts at the number prefetched and the epoch ends that many batches early, silently
   (measured on torch-xla 2.9: 14 of 20 WikiHop batches per epoch). The replacement reads ``n`` and ``len``
   first and is otherwise fairseq's function.
"""
import functools

from .patching import Patch


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

    return get_memory_info


def _tpu_data_loader(itr):
    """fairseq's ``tpu_data_loader`` with the iterator's position read before the prefetch thread starts
    (see the module docstring)."""
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from fairseq.data import iterators

    start, total = getattr(itr, "n", 0), len(itr)  # before ParallelLoader's thread consumes anything
    xm.rendezvous("tpu_data_loader")  # wait for all workers
    xm.mark_step()
    device = xm.xla_device()
    return iterators.CountingIterator(pl.ParallelLoader(itr, [device]).per_device_loader(device), start=start, total=total)


PATCHES = (
    Patch("torch_xla.core.xla_model", "get_memory_info", _wrap_xla_memory_info),
    Patch("fairseq.utils", "tpu_data_loader", lambda original: _tpu_data_loader),
)
