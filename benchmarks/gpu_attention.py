"""The GPU path of the attention (performance issue, goal 5): FlexAttention against the blocked
kernel and dense SDPA, plus the exactness check of both against the dense reference.

Per long length (default 4096 and 16384; 256 global tokens), batch 1, 12 heads, head_dim 64,
radius 84, 31 relative labels, the inputs of ``attention_scaling.py`` (trailing padding, one
global token per segment, relative labels on all four pieces):

  ``flex``     :func:`etc_fairseq.attention.flex.flex_global_local_attention` with ``compile=True``
  ``blocked``  :func:`etc_fairseq.attention.global_local_attention` (the chunked kernel)
  ``sdpa``     ``F.scaled_dot_product_attention`` over the concatenated long + global sequence,
               no mask and no bias: plain dense attention, the baseline to beat

Time: forward+backward (sum of the outputs, ``backward``), median of ``--repeats`` after
``--warmup`` passes (the first flex passes compile), synchronised; memory: growth of
``torch.cuda.max_memory_allocated`` over the allocated memory once the inputs exist.
Exactness: at long 1024 / global 64 in float32, the outputs and every input gradient of ``flex``
and ``blocked`` against :func:`etc_fairseq.attention.dense.dense_global_local_attention` (max
absolute difference, and whether it is within ``--atol``).

Usage::

    python -m benchmarks.gpu_attention                      # CUDA: bf16 at 4096 and 16384
    python -m benchmarks.gpu_attention --device cpu --quick # smoke run of the script on CPU

On CPU, torch's flex attention has no backward (torch 2.13): ``--device cpu`` times forward passes
only, in float32, at small lengths, and checks forward exactness only. Those figures say nothing
about a GPU; the output file says which device produced it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List, Optional


from benchmarks import inputs as scaling
from benchmarks.harness import RESULTS_DIR, command_line, machine_info, write_json

GLOBAL_LEN = scaling.GLOBAL_LEN
IMPLS = ("flex", "blocked", "sdpa")
#: compile the flex path (always on CUDA; on CPU only with ``--cpu-compile``)
COMPILE_FLEX_ON_CPU = False


def _inputs(long_len: int, global_len: int, device, dtype, grad: bool):
    """attention_scaling's inputs moved to ``device``; float tensors cast to ``dtype`` (leaves that
    require grad when ``grad``)."""
    tensors, kw = scaling.attention_inputs(long_len, global_len)
    tensors = {k: v.detach().to(device=device, dtype=dtype).requires_grad_(grad) for k, v in tensors.items()}
    kw = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in kw.items()}
    return tensors, kw


def _call(impl: str, tensors: Dict, kw: Dict):
    """One forward of ``impl``: returns a tuple of output tensors."""
    import torch
    import torch.nn.functional as F

    from etc_fairseq.attention import dense_global_local_attention, flex_global_local_attention, global_local_attention

    if impl == "flex":
        return flex_global_local_attention(**tensors, **kw,
                                           compile=tensors["long_q"].is_cuda or COMPILE_FLEX_ON_CPU)
    if impl == "blocked":
        return global_local_attention(**tensors, **kw)
    if impl == "dense":
        return dense_global_local_attention(**tensors, **kw)
    if impl == "sdpa":
        q = torch.cat([tensors["long_q"], tensors["global_q"]], dim=2)  # [B, H, L + G, D]
        k = torch.cat([tensors["long_k"], tensors["global_k"]], dim=2)
        v = torch.cat([tensors["long_v"], tensors["global_v"]], dim=2)
        return (F.scaled_dot_product_attention(q, k, v),)
    raise ValueError(impl)


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_impl(impl: str, long_len: int, device, dtype, backward: bool, warmup: int, repeats: int) -> Dict:
    import torch

    tensors, kw = _inputs(long_len, GLOBAL_LEN, device, dtype, backward)

    def step():
        with torch.set_grad_enabled(backward):
            outs = _call(impl, tensors, kw)
        if backward:
            sum(o.float().sum() for o in outs).backward()
            for t in tensors.values():
                t.grad = None

    try:
        for _ in range(warmup):
            step()
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            _sync(device)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 -- recorded per row (out of memory, unsupported backward)
        return dict(status=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    row = dict(status="ok", time_ms=1000 * statistics.median(times), times_ms=[1000 * t for t in times])
    if device.type == "cuda":
        row["peak_mb"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    return row


def exactness(device, backward: bool, atol: float) -> Dict:
    """flex and blocked against the dense reference, float32, long 1024 / global 64."""
    import torch

    results = {}
    ref_t, kw = _inputs(1024, 64, device, torch.float32, backward)
    ref = _call("dense", ref_t, kw)
    if backward:
        sum((o * (i + 1)).sum() for i, o in enumerate(ref)).backward()
    for impl in ("flex", "blocked"):
        t, _ = _inputs(1024, 64, device, torch.float32, backward)
        try:
            outs = _call(impl, t, kw)
            diffs = {f"out{i}": (o - r).abs().max().item() for i, (o, r) in enumerate(zip(outs, ref))}
            if backward:
                sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
                for name, x in t.items():
                    diffs[f"grad_{name}"] = (x.grad - ref_t[name].grad).abs().max().item()
        except Exception as e:  # noqa: BLE001
            results[impl] = dict(status=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        results[impl] = dict(status="ok", max_abs_diff=diffs, within_atol=max(diffs.values()) <= atol)
    return results


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--lengths", type=int, nargs="+", default=None,
                   help="long lengths (default 4096 16384 on CUDA, 1024 2048 on CPU)")
    p.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                   help="default bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--atol", type=float, default=1e-4, help="exactness tolerance (float32)")
    p.add_argument("--quick", action="store_true", help="1 warm-up, 2 repeats, the first length only")
    p.add_argument("--cpu-compile", action="store_true",
                   help="on CPU, run the flex path through torch.compile (inference: is it faster there?)")
    p.add_argument("--out", default=None,
                   help="default benchmarks/results/gpu_attention.json (CUDA) or gpu_attention_cpu_smoke.json")
    args = p.parse_args(argv)
    global COMPILE_FLEX_ON_CPU
    COMPILE_FLEX_ON_CPU = args.cpu_compile
    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    lengths = args.lengths or ([4096, 16384] if cuda else [1024, 2048])
    if args.quick:
        args.warmup, args.repeats, lengths = 1, 2, lengths[:1]
    backward = cuda  # flex attention has no CPU backward in torch 2.13
    out_path = args.out or os.path.join(RESULTS_DIR, "gpu_attention.json" if cuda else "gpu_attention_cpu_smoke.json")
    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    torch.manual_seed(0)

    check = exactness(device, backward, args.atol)
    for impl, r in check.items():
        print(f"exactness {impl} vs dense (fp32): {r.get('within_atol', r['status'])} "
              f"{max(r['max_abs_diff'].values()) if 'max_abs_diff' in r else ''}", flush=True)
    rows = []
    for n in lengths:
        for impl in IMPLS:
            row = dict(impl=impl, long_len=n, global_len=GLOBAL_LEN)
            row.update(time_impl(impl, n, device, dtype, backward, args.warmup, args.repeats))
            rows.append(row)
            print(f"L={n} {impl}: {row['status']} {row.get('time_ms', float('nan')):.2f} ms "
                  f"{row.get('peak_mb', float('nan')):.0f} MB", file=sys.stderr, flush=True)
    what = "forward+backward" if backward else "forward only"
    lines = [f"| long_len | impl | {what} ms | peak MB | vs blocked |", "|---:|---|---:|---:|---:|"]
    for r in rows:
        blocked = next((b for b in rows if b["impl"] == "blocked" and b["long_len"] == r["long_len"]), None)
        ratio = (f"{r['time_ms'] / blocked['time_ms']:.2f}" if r["status"] == "ok" and blocked
                 and blocked["status"] == "ok" else "-")
        lines.append(f"| {r['long_len']} | {r['impl']} | {r.get('time_ms', float('nan')):.2f} | "
                     f"{r.get('peak_mb', float('nan')):.0f} | {ratio} |" if r["status"] == "ok"
                     else f"| {r['long_len']} | {r['impl']} | {r['status']} | | |")
    table = "\n".join(lines)
    print(table)
    device_name = torch.cuda.get_device_name(device) if cuda else machine_info(torch.get_num_threads())
    result = dict(
        description="flex vs blocked vs dense SDPA attention; exactness of flex and blocked vs the dense reference",
        command=command, device=str(device), device_name=device_name, torch=torch.__version__,
        dtype=str(dtype), measured=what, flex_compiled=cuda or args.cpu_compile, exactness_fp32=check, results=rows, markdown_table=table,
        config=dict(global_len=GLOBAL_LEN, heads=scaling.HEADS, head_dim=scaling.HEAD_DIM,
                    local_radius=scaling.RADIUS, labels=scaling.NUM_LABELS, warmup=args.warmup,
                    repeats=args.repeats, atol=args.atol),
    )
    write_json(out_path, result)
    print(f"wrote {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
