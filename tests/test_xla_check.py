"""benchmarks/xla_check.py's pass/fail rules (it runs only in .venv-xla, with torch-xla; docs/tpu.md has its
figures): which updates and validation batches may compile, and the loss checks. Records are written here
in the form its worker writes them."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def xla_check():
    from benchmarks import xla_check

    return xla_check


def _update(n, epoch, in_epoch, loss, compiles=0):
    return {"kind": "update", "update": n, "epoch": epoch, "in_epoch": in_epoch, "seconds": 0.1, "loss": loss,
            "wpb": 100.0, "bsz": 2.0, "compiles": compiles, "compile_s": 0.0, "executions": 5, "transfers": 4,
            "counters": {"aten::_local_scalar_dense": 3}, "host_reads": {"fairseq/trainer.py:1522 x": 3}}


def _valid(after, loss, batch_compiles):
    return {"kind": "valid", "update": after, "seconds": 1.0, "batches": len(batch_compiles), "loss": loss,
            "logged_loss": round(loss, 3), "batch_compiles": batch_compiles, "batch_reads": [1] * len(batch_compiles),
            "compiles": sum(batch_compiles), "executions": 0, "transfers": 0, "counters": {}, "host_reads": {}}


def _run(xla_check, cpu, xla, log_interval=1):
    return xla_check.compare("job", cpu, xla, warmup=3, rtol=1e-5, log_interval=log_interval)["summary"]["failures"]


def test_a_clean_run_passes_with_warm_up_compilations(xla_check):
    # 2 epochs of 6: compilations in the first updates, at the end of epoch 1 and the start of epoch 2
    plan = [(1, 1, 5), (1, 2, 2), (1, 6, 3), (2, 1, 1)]
    xla = [_update(i + 1, 1 + i // 6, 1 + i % 6, 7.0 - 0.1 * i, compiles=next((c for e, s, c in plan if (e, s) == (1 + i // 6, 1 + i % 6)), 0))
           for i in range(12)]
    cpu = [dict(r, loss=r["loss"] * (1 + 2e-7), compiles=0) for r in xla]
    cpu_v, xla_v = [_valid(6, 7.5, [0] * 5), _valid(12, 7.2, [0] * 5)], [_valid(6, 7.5, [1, 0, 0, 0, 1]), _valid(12, 7.2, [0] * 5)]
    assert _run(xla_check, cpu + cpu_v, xla + xla_v) == []


@pytest.mark.parametrize("what, expected", [
    ("update compiles after the warm-up", "update 5: 1 XLA compilation(s) after the warm-up"),
    ("loss differs", "update 4: loss cpu"),
    ("different batch", "update 3: cpu at epoch 1 step 3"),
    ("validation batch in the middle compiles", "validation after update 6: XLA compilation(s) in batch(es) [3]"),
    ("second validation compiles", "validation after update 12: XLA compilation(s) in batch(es) [1]"),
    ("valid loss differs", "validation after update 12: valid loss cpu"),
])
def test_each_failure_is_reported(xla_check, what, expected):
    xla = [_update(i + 1, 1, i + 1, 7.0 - 0.1 * i) for i in range(12)]
    cpu = [dict(r) for r in xla]
    xla_v = [_valid(6, 7.5, [1, 0, 0, 0, 1]), _valid(12, 7.2, [0] * 5)]
    cpu_v = [_valid(6, 7.5, [0] * 5), _valid(12, 7.2, [0] * 5)]
    if what == "update compiles after the warm-up":
        xla[4]["compiles"] = 1
    elif what == "loss differs":
        xla[3]["loss"] *= 1 + 2e-5
    elif what == "different batch":
        xla[2]["wpb"] = 90.0
    elif what == "validation batch in the middle compiles":
        xla_v[0]["batch_compiles"][2] = 1
    elif what == "second validation compiles":
        xla_v[1]["batch_compiles"][0] = 1
    elif what == "valid loss differs":
        xla_v[1]["loss"] *= 1 + 2e-5
    failures = _run(xla_check, cpu + cpu_v, xla + xla_v)
    assert len(failures) == 1 and failures[0].startswith(expected), failures


def test_warm_up_counts_logged_updates(xla_check):
    """With --log-interval 5 fairseq's logging graphs compile at the first logged updates (5, 10), not at
    updates 1-3; a compilation at the fourth logged update (20) still fails."""
    xla = [_update(i + 1, 1, i + 1, float("nan"), compiles={1: 1, 2: 1, 5: 4, 10: 1}.get(i + 1, 0)) for i in range(30)]
    cpu = [dict(r, compiles=0) for r in xla]
    assert _run(xla_check, cpu, xla, log_interval=5) == []
    xla[19]["compiles"] = 1
    assert _run(xla_check, cpu, xla, log_interval=5) == ["update 20: 1 XLA compilation(s) after the warm-up"]
