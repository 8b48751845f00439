"""fairseq 0.12's ``--tpu`` loop on torch-xla 2.x: the memory-logging fix in etc_fairseq.fairseq_compat (6.).
The XLA run itself needs torch-xla (its own torch version): benchmarks/xla_check.py, docs/tpu.md."""
import pytest

from etc_fairseq.fairseq_compat import _wrap_xla_memory_info


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
