"""What every benchmark shares: timing, peak memory, machine information, fresh-process workers, the
command line that reproduces a run, and writing its JSON result.

Benchmarks are modules of this package, run from the repository root as ``python -m benchmarks.NAME``;
a benchmark that measures in fresh processes starts them with :func:`run_worker` (``python -m
benchmarks.NAME --worker ...``), which reads the worker's result from the last line of its stdout.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

#: the repository root (workers run there, so that ``-m benchmarks.NAME`` resolves)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where results are written by default
RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")


# ---------------------------------------------------------------------------------------------------------
# time
# ---------------------------------------------------------------------------------------------------------


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> Dict:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times.

    Returns:
        ``{"time_s": median wall seconds, "times_s": every wall time, "cpu_s": median process CPU seconds}``.
    """
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return dict(time_s=statistics.median(wall), times_s=wall, cpu_s=statistics.median(cpu))


# ---------------------------------------------------------------------------------------------------------
# memory (Linux /proc)
# ---------------------------------------------------------------------------------------------------------


def status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (e.g. ``VmHWM``, the peak resident set), 0 if absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (``VmHWM``) of this process; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def mem_total_gb() -> Optional[float]:
    """The machine's memory (MemTotal of /proc/meminfo) in GiB, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------------------
# the machine and the run
# ---------------------------------------------------------------------------------------------------------


def load_average() -> List[float]:
    """The 1/5/15-minute load averages (empty where unavailable): a busy machine makes timings noisy."""
    try:
        return list(os.getloadavg())
    except OSError:
        return []


def machine_info(threads: int) -> Dict:
    """torch and Python versions, thread count, CPU model, logical CPUs, memory and platform."""
    import torch

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = mem_total_gb()
    return dict(
        torch=torch.__version__, python=platform.python_version(), threads=threads,
        cpu_model=cpu, logical_cpus=os.cpu_count(), mem_total_gb=None if mem_gb is None else round(mem_gb, 1),
        platform=platform.platform(),
    )


def command_line(module: str, argv: Optional[Sequence[str]] = None) -> str:
    """The command that reproduces this run: ``python -m MODULE ARGS`` (``argv`` default: ``sys.argv[1:]``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", module] + [shlex.quote(a) for a in args])


def worker_command(module: str, args: Sequence[object]) -> List[str]:
    """``[python, -m, MODULE, --worker, ARGS...]``: run it with ``cwd=REPO``."""
    return [sys.executable, "-m", module, "--worker", *map(str, args)]


def run_worker(module: str, args: Sequence[object], timeout: float, env: Optional[Mapping[str, str]] = None) -> Dict:
    """Run ``python -m MODULE --worker ARGS`` in a fresh process (in the repository root) and return the JSON
    object on the last line of its stdout, with ``status="ok"``; on failure ``{"status": "failed ..."}`` or
    ``{"status": "timeout ..."}`` naming the cause."""
    try:
        proc = subprocess.run(worker_command(module, args), capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        return dict(status=f"timeout after {timeout:.0f} s")
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output: killed, likely out of memory"]
        return dict(status=f"failed (rc={proc.returncode}): {tail[0][:200]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["status"] = "ok"
    return result


def write_json(path: str, result: object) -> None:
    """Write ``result`` to ``path`` (directories created) via a temporary file, so that an interrupted
    run never leaves a half-written result behind."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, path)
