"""Time and memory scaling of global-local attention on CPU (forward + backward).

Implementations compared:

  (a) ``blocked``   etc_fairseq.attention.global_local_attention (blocked l2l, relative bias)
  (b) ``dense_ref`` etc_fairseq.attention.dense_global_local_attention (full long x long
                    logits, same masks and relative bias)
  (c) ``sdpa``      torch.nn.functional.scaled_dot_product_attention over the concatenated
                    long + global sequence, no mask, no bias (a plain dense transformer layer)

Settings: batch 1, 12 heads, head_dim 64, local radius 84, float32; long_len in
512 .. 16384; global_len either fixed at 256 or long_len / 16 capped at 512.
Masks are all true except padding (the last 1/32 of the long input is padding) and the
relative labels follow the ETC layout (25 clipped relative positions + 6 structure labels).

Every (impl, global_len, long_len) measurement runs in a fresh subprocess.  Time is the
median of ``--repeats`` forward+backward passes after one warm-up.  Peak memory is the
growth of the process's peak resident set (VmHWM) over its resident set once the inputs
exist (VmHWM is reset via /proc/self/clear_refs just before the first pass).
Configurations whose estimated memory exceeds ``--mem-budget-gb`` are skipped.

Usage::

    python -m benchmarks.attention_scaling                 # full run (several minutes)
    python -m benchmarks.attention_scaling --quick         # 512 .. 2048 only
    python -m benchmarks.attention_scaling --lengths 1024 4096 --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

from benchmarks.harness import RESULTS_DIR, machine_info, median_time, reset_peak_rss, run_worker, status_kb, write_json
from benchmarks.inputs import BATCH, HEAD_DIM, HEADS, NUM_LABELS, RADIUS, attention_inputs

IMPLS = ("blocked", "dense_ref", "sdpa")
IMPL_LABEL = {"blocked": "(a) blocked", "dense_ref": "(b) dense ref", "sdpa": "(c) sdpa"}
DEFAULT_LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_LENGTHS = [512, 1024, 2048]


def estimate_bytes(impl: str, long_len: int, global_len: int) -> int:
    """Rough peak-memory estimate (bytes) used to skip configurations that would not fit."""
    f32 = 4
    seq = long_len + global_len
    io = 12 * BATCH * HEADS * seq * HEAD_DIM * f32  # q, k, v, grads, outputs
    if impl == "dense_ref":
        # ~7 live [heads, q_len, k_len] float tensors plus int64 label / bool mask matrices
        pairs = BATCH * (long_len * seq + global_len * seq)
        return io + pairs * (7 * HEADS * f32 + 3 * 8 + 4)
    if impl == "sdpa":
        return io + BATCH * HEADS * seq * 64 * f32  # flash attention: O(seq) memory
    block = RADIUS + 1
    pairs = BATCH * (long_len + block) * (3 * block + global_len) + BATCH * global_len * seq
    return io + pairs * (8 * HEADS * f32 + 3 * 8)


# ----------------------------------------------------------------------------
# worker: one measurement in this (fresh) process
# ----------------------------------------------------------------------------


def worker(impl: str, long_len: int, global_len: int, threads: int, repeats: int) -> Dict:
    import gc

    import torch
    import torch.nn.functional as F

    from etc_fairseq.attention import dense_global_local_attention, global_local_attention

    torch.set_num_threads(threads)
    if impl == "sdpa":
        seq = long_len + global_len
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, generator=gen).requires_grad_(True) for _ in range(3))

        def step():
            out = F.scaled_dot_product_attention(q, k, v)
            out.backward(torch.ones_like(out))
            q.grad = k.grad = v.grad = None
    else:
        fn = global_local_attention if impl == "blocked" else dense_global_local_attention
        tensors, kw = attention_inputs(long_len, global_len)
        names = ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")
        args = [tensors[n] for n in names]
        rel = dict(long_rel_emb=tensors["long_rel_emb"], global_rel_emb=tensors["global_rel_emb"])

        def step():
            long_out, global_out = fn(*args, **kw, **rel)
            torch.autograd.backward([long_out, global_out], [torch.ones_like(long_out), torch.ones_like(global_out)])
            for t in tensors.values():
                t.grad = None

    gc.collect()
    base_rss_kb = status_kb("VmRSS")
    reset_ok = reset_peak_rss()
    base_hwm_kb = status_kb("VmHWM") if not reset_ok else base_rss_kb
    timing = median_time(step, repeats)  # one warm-up pass, then the timed ones
    peak_kb = status_kb("VmHWM")
    return dict(
        time_ms=timing["time_s"] * 1000.0,
        min_time_ms=min(timing["times_s"]) * 1000.0,
        times_ms=[t * 1000.0 for t in timing["times_s"]],
        peak_mb=max(0, peak_kb - (base_rss_kb if reset_ok else base_hwm_kb)) / 1024.0,
        peak_method="VmHWM (reset via clear_refs) - VmRSS after inputs" if reset_ok
        else "VmHWM - VmHWM after inputs (peak could not be reset; underestimates)",
    )


# ----------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------


def global_len_for(setting: str, long_len: int) -> int:
    return 256 if setting == "fixed256" else min(long_len // 16, 512)


def measure(impl, long_len, global_len, args) -> Dict:
    return run_worker(__spec__.name, [impl, long_len, global_len, "--threads", args.threads, "--repeats", args.repeats],
                      args.timeout)


def fmt(x, spec="{:.0f}"):
    return "-" if x is None else spec.format(x)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="long_len values")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (median), after 1 warm-up")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--mem-budget-gb", type=float, default=16.0, help="skip configs estimated above this")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "attention_scaling.json"))
    p.add_argument("--quick", action="store_true", help="only long_len 512..2048")
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--settings", nargs="+", default=["fixed256", "ratio16"], choices=["fixed256", "ratio16"],
                   help="fixed256: global_len 256; ratio16: global_len = long_len/16 capped at 512")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per measurement")
    p.add_argument("--worker", nargs=3, metavar=("IMPL", "LONG_LEN", "GLOBAL_LEN"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        impl, long_len, global_len = args.worker[0], int(args.worker[1]), int(args.worker[2])
        print(json.dumps(worker(impl, long_len, global_len, args.threads, args.repeats)))
        return

    lengths = args.lengths or (QUICK_LENGTHS if args.quick else DEFAULT_LENGTHS)
    budget = args.mem_budget_gb * 2**30
    rows: List[Dict] = []
    started = time.time()
    for setting in args.settings:
        for long_len in lengths:
            global_len = global_len_for(setting, long_len)
            for impl in args.impls:
                est = estimate_bytes(impl, long_len, global_len)
                row = dict(impl=impl, setting=setting, long_len=long_len, global_len=global_len,
                           estimated_mb=round(est / 2**20))
                if est > budget:
                    row["status"] = "skipped: estimated memory > budget"
                else:
                    row.update(measure(impl, long_len, global_len, args))
                rows.append(row)
                print(f"[{time.time() - started:7.1f}s] {setting} L={long_len} G={global_len} {impl}: "
                      f"{row.get('status')} {fmt(row.get('time_ms'))} ms {fmt(row.get('peak_mb'))} MB",
                      file=sys.stderr, flush=True)

    # ratios vs (b) and (c) at the same (setting, long_len)
    index = {(r["setting"], r["long_len"], r["impl"]): r for r in rows}
    for r in rows:
        for ref, tag in (("dense_ref", "b"), ("sdpa", "c")):
            o = index.get((r["setting"], r["long_len"], ref))
            ok = r.get("status") == "ok" and o is not None and o.get("status") == "ok"
            r[f"time_vs_{tag}"] = r["time_ms"] / o["time_ms"] if ok else None
            r[f"mem_vs_{tag}"] = (r["peak_mb"] / o["peak_mb"]) if ok and o["peak_mb"] > 0 else None

    lines = [
        "| impl | global_len | long_len | time ms | peak MB | time / (b) | mem / (b) | time / (c) | mem / (c) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {IMPL_LABEL[r['impl']]} | {r['global_len']} | {r['long_len']} | "
                         f"{r.get('status')} | | | | | |")
            continue
        lines.append(
            f"| {IMPL_LABEL[r['impl']]} | {r['global_len']} | {r['long_len']} | {r['time_ms']:.0f} | "
            f"{r['peak_mb']:.0f} | {fmt(r['time_vs_b'], '{:.3f}')} | {fmt(r['mem_vs_b'], '{:.3f}')} | "
            f"{fmt(r['time_vs_c'], '{:.2f}')} | {fmt(r['mem_vs_c'], '{:.2f}')} |"
        )
    table = "\n".join(lines)
    print(table)

    result = dict(
        description="global-local attention forward+backward scaling (CPU)",
        config=dict(batch=BATCH, heads=HEADS, head_dim=HEAD_DIM, local_radius=RADIUS,
                    num_labels=NUM_LABELS, dtype="float32", repeats=args.repeats,
                    mem_budget_gb=args.mem_budget_gb, lengths=lengths, settings=args.settings,
                    padding_fraction=1 / 32),
        machine=machine_info(args.threads),
        results=rows,
        markdown_table=table,
        total_seconds=round(time.time() - started, 1),
    )
    write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
