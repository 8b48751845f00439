"""fairseq 0.12's ``--tpu`` loop on torch-xla 2.x: the fixes of etc_fairseq/fairseq_fixes/xla.py.
The XLA run itself needs torch-xla (its own torch version): benchmarks/xla_check.py, docs/tpu.md."""
import pytest

from etc_fairseq.fairseq_fixes.xla import _wrap_xla_memory_info


def test_memory_info_gets_the_keys_fairseq_reads():
    calls = []

    def get_memory_info(device=None):
        calls.append(device)
        return {"bytes_used": 3 * 1024 * 1024, "bytes_limit": 16 * 1024 * 1024, "peak_bytes_used": 5}

    info = _wrap_xla_memory_info(get_memory_info)("xla:0")
    assert calls == ["xla:0"]
    # fairseq: gb_free = kb_free / 1024 / 1024, gb_total = kb_total / 1024 / 1024
    assert info["kb_total"] == 16 * 1024 and info["kb_free"] == 13 * 1024
    assert info["bytes_used"] == 3 * 1024 * 1024 and info["peak_bytes_used"] == 5  # torch-xla's keys kept


def test_memory_info_on_a_backend_without_allocator_stats():
    def get_memory_info(device=None):  # what the PJRT CPU backend raises (torch-xla 2.9)
        raise RuntimeError("Bad StatusOr access: UNIMPLEMENTED: GetAllocatorStats is not supported")

    info = _wrap_xla_memory_info(get_memory_info)("xla:0")
    assert info["kb_total"] == 0 and info["kb_free"] == 0 and info["bytes_used"] == 0


def test_memory_info_other_errors_are_not_hidden():
    def get_memory_info(device=None):
        raise RuntimeError("device xla:7 does not exist")

    with pytest.raises(RuntimeError, match="xla:7"):
        _wrap_xla_memory_info(get_memory_info)("xla:7")


def test_tpu_data_loader_keeps_every_batch_when_the_loader_prefetches(monkeypatch):
    """torch-xla's ParallelLoader takes batches from fairseq's iterator as soon as it is built; fairseq read
    the iterator's position after that and ended every epoch early by the number prefetched."""
    import sys
    import types

    from fairseq.data import iterators

    from etc_fairseq.fairseq_fixes.xla import _tpu_data_loader

    class PrefetchingLoader:  # what ParallelLoader does: a thread starts pulling batches in __init__
        def __init__(self, itr, devices):
            self._itr = itr
            self._buffer = [next(itr) for _ in range(3)]

        def per_device_loader(self, device):
            yield from self._buffer
            yield from self._itr

    xm = types.SimpleNamespace(rendezvous=lambda tag: None, mark_step=lambda: None, xla_device=lambda: "xla:0")
    pl = types.SimpleNamespace(ParallelLoader=PrefetchingLoader)
    torch_xla = types.ModuleType("torch_xla")
    monkeypatch.setitem(sys.modules, "torch_xla", torch_xla)
    monkeypatch.setitem(sys.modules, "torch_xla.core", types.ModuleType("torch_xla.core"))
    monkeypatch.setitem(sys.modules, "torch_xla.core.xla_model", xm)
    monkeypatch.setitem(sys.modules, "torch_xla.distributed", types.ModuleType("torch_xla.distributed"))
    monkeypatch.setitem(sys.modules, "torch_xla.distributed.parallel_loader", pl)
    sys.modules["torch_xla"].core = sys.modules["torch_xla.core"]
    sys.modules["torch_xla.core"].xla_model = xm
    sys.modules["torch_xla"].distributed = sys.modules["torch_xla.distributed"]
    sys.modules["torch_xla.distributed"].parallel_loader = pl

    batches = iterators.GroupedIterator(iterators.CountingIterator(list(range(10))), 1)
    out = list(_tpu_data_loader(batches))
    assert out == [[i] for i in range(10)]

    # resuming mid-epoch: the counter starts where the iterator stands
    itr = iterators.CountingIterator(list(range(10)))
    itr.skip(4)
    loader = _tpu_data_loader(iterators.GroupedIterator(itr, 1))
    assert loader.n == 4 and list(loader) == [[i] for i in range(4, 10)]
