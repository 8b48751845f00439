"""Where one layer's forward+backward time goes: ``torch.profiler`` over one pass of a
``layer_vs_peers.py`` layer (same builders, same inputs), grouped into the linear layers' matrix
products (``aten::mm``/``aten::addmm``), the attention's batched products (``aten::bmm`` and
``aten::baddbmm_``, whose FLOPs are counted here from the recorded shapes) and everything else,
with the GFLOP/s the profiler's FLOP counts give for the matrix products.

Usage::

    python -m benchmarks.profile_layer                       # etc at 2048, 2 threads
    python -m benchmarks.profile_layer --layer bert --long-len 4096 --top 15

Prints the groups and the top operators by self CPU time; ``--out`` writes them as JSON.
Run it on a quiet machine: the shares are robust to load, the GFLOP/s are not.
"""

from __future__ import annotations

import argparse
from typing import List, Optional


from benchmarks import layer_vs_peers
from benchmarks.harness import command_line, machine_info, write_json

GROUPS = {"aten::mm": "linear GEMMs", "aten::addmm": "linear GEMMs", "aten::bmm": "attention bmm",
          "aten::baddbmm_": "attention bmm"}


def _baddbmm_flops(input_shapes) -> int:
    """FLOPs of ``out.baddbmm_(a, b)`` from its recorded input shapes (the profiler counts none
    for the in-place op): out ``[n, m, p]``, a ``[n, m, k]`` -> ``2 n m k p``."""
    out, a = input_shapes[0], input_shapes[1]
    if len(out) != 3 or len(a) != 3:
        return 0
    return 2 * out[0] * out[1] * out[2] * a[2]


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layer", default="etc", choices=layer_vs_peers.LAYERS)
    p.add_argument("--long-len", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layer, step, inputs = layer_vs_peers.BUILDERS[args.layer](args.long_len)
    layer.train()
    step()  # warm-up
    layer.zero_grad(set_to_none=True)
    for t in inputs:
        t.grad = None
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total_us = sum(e.self_cpu_time_total for e in events)
    groups = {}
    for e in prof.key_averages(group_by_input_shape=True):  # per (op, shapes): for the FLOPs
        if e.self_cpu_time_total <= 0:
            continue
        g = groups.setdefault(GROUPS.get(e.key, "other"), dict(self_cpu_s=0.0, flops=0))
        g["self_cpu_s"] += e.self_cpu_time_total / 1e6
        flops = e.flops or 0
        if e.key == "aten::baddbmm_" and not flops:
            flops = _baddbmm_flops(e.input_shapes) * e.count
        g["flops"] += flops
    print(f"{args.layer} long_len={args.long_len}, {args.threads} threads: self CPU total {total_us / 1e6:.3f} s")
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["self_cpu_s"]):
        g["share"] = g["self_cpu_s"] / (total_us / 1e6)
        if name in GROUPS.values() and g["flops"]:
            g["gflops_per_s"] = g["flops"] / g["self_cpu_s"] / 1e9
        rate = f", {g['gflops_per_s']:.0f} GFLOP/s" if "gflops_per_s" in g else ""
        print(f"  {name:14s} {g['self_cpu_s']:.3f} s ({100 * g['share']:.0f}%){rate}")
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]
    for e in top:
        print(f"  {e.key:40s} {e.self_cpu_time_total / 1e3:9.1f} ms  x{e.count}")
    if args.out:
        write_json(args.out, dict(
            command=command_line(__spec__.name), machine=machine_info(args.threads),
            layer=args.layer, long_len=args.long_len, threads=args.threads,
            self_cpu_total_s=total_us / 1e6, groups=groups,
            top=[dict(op=e.key, self_cpu_ms=e.self_cpu_time_total / 1e3, calls=e.count) for e in top]))


if __name__ == "__main__":
    main()
