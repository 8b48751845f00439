"""How close is the global-local attention kernel to the machine's matmul speed, and what does the
blocking waste?

For one attention call (batch 1, 12 heads, head_dim 64, radius 84, global_len 256, the ETC label
layout of ``attention_scaling.py``), forward+backward, float32, this script reports:

* **useful GFLOP**: the multiply-adds the attention needs, counted as 2 FLOPs each over the allowed
  pairs only: long queries see ``2r+1`` local keys and ``global_len`` global keys, global queries
  see ``global_len + long_len`` keys; ``q.k`` and ``p.v`` per pair and head (forward), twice that
  for backward (``dq``, ``dk``, ``dv``, ``dp``).  Masked pairs inside the band (padding) are
  counted as useful: the count is the kernel's job description, not the input's.
* **computed GFLOP**: what the kernel's matrix products actually do.  Chunked kernel (production):
  each chunk of ``Q`` long queries multiplies against ``Q + 2r`` local keys (``2r+1`` needed) plus
  the global keys, and the backward pass recomputes ``q.k`` (7 products per chunk: 2 forward, 5
  backward).  Plain-autograd 3-block kernel (``autograd_blocked``): blocks of ``b = r + 1``
  queries against ``3b`` keys, 6 products (no recomputation).
* **wasted work** = 1 - useful / computed.
* **achieved GFLOP/s** = useful (and computed) GFLOP / median time, against the **matmul GFLOP/s**
  measured here, in the same run, for (a) batched products of the kernel's own chunk shapes and
  (b) one large GEMM ``[long_len, 768] x [768, 768]`` (the projections' shape).
* **matmul-only s** = computed GFLOP / chunk-shape matmul GFLOP/s: the time the kernel's products
  alone take at this machine's speed for their shapes, and **rest s** = time - matmul-only: the
  non-matmul work (gathers of the relative/mask bias, softmax and its backward, copies).

Usage::

    python -m benchmarks.kernel_efficiency                 # long_len 2048, 4096, 8192
    python -m benchmarks.kernel_efficiency --quick         # long_len 2048, 1 repeat
    python -m benchmarks.kernel_efficiency --chunks 64 128 256 --lengths 4096

Writes ``benchmarks/results/kernel_efficiency.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional


from benchmarks.harness import RESULTS_DIR, command_line, load_average, machine_info, median_time, write_json
from benchmarks.inputs import GLOBAL_LEN, HEAD_DIM, HEADS, RADIUS, attention_inputs

HIDDEN = HEADS * HEAD_DIM


def useful_gflop(long_len: int, global_len: int, r: int) -> float:
    """Forward+backward FLOPs of the allowed pairs (see the module docstring), in GFLOP."""
    pairs = long_len * (2 * r + 1 + global_len) + global_len * (global_len + long_len)
    fwd = pairs * HEADS * HEAD_DIM * 2 * 2  # q.k and p.v
    return 3 * fwd / 1e9


def chunked_gflop(long_len: int, global_len: int, r: int, chunk: int, global_chunk: int) -> float:
    """Matmul FLOPs of the chunked kernel: 7 products per chunk (2 forward, 5 backward)."""
    n_long = -(-long_len // chunk) * chunk
    n_glob = -(-global_len // global_chunk) * global_chunk
    pairs = n_long * (chunk + 2 * r + global_len) + n_glob * (global_len + long_len)
    return 7 * pairs * HEADS * HEAD_DIM * 2 / 1e9


def autograd_gflop(long_len: int, global_len: int, r: int) -> float:
    """Matmul FLOPs of the plain-autograd 3-block kernel: 6 products (2 forward, 4 backward)."""
    b = r + 1
    n_long = -(-long_len // b) * b
    pairs = n_long * (3 * b + global_len) + global_len * (global_len + long_len)
    return 6 * pairs * HEADS * HEAD_DIM * 2 / 1e9


def matmul_gflops(long_len: int, chunk: int, r: int, repeats: int) -> Dict:
    """GFLOP/s of (a) the chunk-shaped batched products and (b) a projection-shaped GEMM."""
    import torch

    gen = torch.Generator().manual_seed(0)
    k_cols = chunk + 2 * r + GLOBAL_LEN
    n_chunks = -(-long_len // chunk)
    q = torch.randn(HEADS, chunk, HEAD_DIM, generator=gen)
    k = torch.randn(HEADS, k_cols, HEAD_DIM, generator=gen)
    p = torch.randn(HEADS, chunk, k_cols, generator=gen)

    def chunk_products():
        for _ in range(n_chunks):
            torch.matmul(q, k.transpose(-1, -2))  # logits
            torch.matmul(p, k)  # p.v

    t_chunk = median_time(chunk_products, repeats)
    flop_chunk = n_chunks * 2 * (HEADS * chunk * k_cols * HEAD_DIM * 2) / 1e9
    x = torch.randn(long_len, HIDDEN, generator=gen)
    w = torch.randn(HIDDEN, HIDDEN, generator=gen)
    t_gemm = median_time(lambda: torch.matmul(x, w), repeats)
    flop_gemm = long_len * HIDDEN * HIDDEN * 2 / 1e9
    return dict(
        chunk_products=dict(shape=f"{n_chunks} x 2 x bmm [{HEADS}, {chunk}, {HEAD_DIM}] x [{HEAD_DIM}, {k_cols}]",
                            gflop=flop_chunk, time_s=t_chunk["time_s"],
                            gflops=flop_chunk / t_chunk["time_s"]),
        projection_gemm=dict(shape=f"[{long_len}, {HIDDEN}] x [{HIDDEN}, {HIDDEN}]", gflop=flop_gemm,
                             time_s=t_gemm["time_s"], gflops=flop_gemm / t_gemm["time_s"]),
    )


def time_kernel(kind: str, long_len: int, chunk: int, repeats: int) -> Dict:
    import torch

    import etc_fairseq.attention.blocked as blocked
    from etc_fairseq.attention import autograd_global_local_attention, global_local_attention

    tensors, kw = attention_inputs(long_len, GLOBAL_LEN)
    names = ("long_q", "long_k", "long_v", "global_q", "global_k", "global_v")
    args = [tensors[n] for n in names]
    rel = dict(long_rel_emb=tensors["long_rel_emb"], global_rel_emb=tensors["global_rel_emb"])
    fn = global_local_attention if kind == "chunked" else autograd_global_local_attention
    saved = blocked.LONG_CHUNK
    blocked.LONG_CHUNK = chunk

    def step():
        lo, go = fn(*args, **kw, **rel)
        torch.autograd.backward([lo, go], [torch.ones_like(lo), torch.ones_like(go)])
        for t in tensors.values():
            t.grad = None

    try:
        return median_time(step, repeats)
    finally:
        blocked.LONG_CHUNK = saved


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--chunks", type=int, nargs="+", default=None,
                   help="long-query chunk sizes of the chunked kernel (default: the kernel's LONG_CHUNK)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (median); default 3, --quick 1")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="long_len 2048 only, 1 repeat")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "kernel_efficiency.json"))
    args = p.parse_args(argv)
    import torch

    import etc_fairseq.attention.blocked as blocked

    torch.set_num_threads(args.threads)
    repeats = args.repeats or (1 if args.quick else 3)
    lengths = args.lengths or ([2048] if args.quick else [2048, 4096, 8192])
    chunks = args.chunks or [blocked.LONG_CHUNK]
    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    load_before = load_average()
    rows = []
    r, g = RADIUS, GLOBAL_LEN
    for long_len in lengths:
        useful = useful_gflop(long_len, g, r)
        runs = [("autograd_blocked", None)] + [("chunked", c) for c in chunks]
        speeds = {}  # chunk -> matmul speeds at its shapes (the autograd row uses the kernel's default chunk's)
        for kind, chunk in runs:
            c = chunk or blocked.LONG_CHUNK
            if c not in speeds:
                speeds[c] = matmul_gflops(long_len, c, r, repeats)
            mm = speeds[c]
            if kind == "chunked":
                computed = chunked_gflop(long_len, g, r, chunk, blocked.GLOBAL_CHUNK)
                t = time_kernel(kind, long_len, chunk, repeats)
            else:
                computed = autograd_gflop(long_len, g, r)
                t = time_kernel(kind, long_len, blocked.LONG_CHUNK, repeats)
            row = dict(kernel=kind, chunk=chunk, long_len=long_len, global_len=g, local_radius=r,
                       useful_gflop=useful, computed_gflop=computed, wasted_fraction=1 - useful / computed,
                       useful_gflops=useful / t["time_s"], computed_gflops=computed / t["time_s"],
                       matmul_gflops_chunk_shapes=mm["chunk_products"]["gflops"],
                       matmul_gflops_projection_gemm=mm["projection_gemm"]["gflops"], **t)
            row["fraction_of_chunk_matmul_speed"] = row["computed_gflops"] / row["matmul_gflops_chunk_shapes"]
            # what the kernel's products alone take at the measured chunk-shape speed, and the rest
            row["matmul_only_s"] = computed / row["matmul_gflops_chunk_shapes"]
            row["non_matmul_s"] = t["time_s"] - row["matmul_only_s"]
            rows.append(row)
            print(f"L={long_len} {kind}{'' if chunk is None else f' Q={chunk}'}: {t['time_s']:.3f} s, "
                  f"useful {useful:.1f} GFLOP, computed {computed:.1f} GFLOP", file=sys.stderr, flush=True)
    lines = ["| long_len | kernel | time s | CPU s | useful GFLOP | computed GFLOP | wasted | useful GFLOP/s | "
             "computed GFLOP/s | matmul GFLOP/s (chunk shapes) | matmul GFLOP/s (projection GEMM) | "
             "matmul-only s | rest s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        name = x["kernel"] + ("" if x["chunk"] is None else f" (Q={x['chunk']})")
        lines.append(
            f"| {x['long_len']} | {name} | {x['time_s']:.3f} | {x['cpu_s']:.2f} | {x['useful_gflop']:.1f} | "
            f"{x['computed_gflop']:.1f} | {100 * x['wasted_fraction']:.0f}% | {x['useful_gflops']:.1f} | "
            f"{x['computed_gflops']:.1f} | {x['matmul_gflops_chunk_shapes']:.1f} | "
            f"{x['matmul_gflops_projection_gemm']:.1f} | {x['matmul_only_s']:.3f} | {x['non_matmul_s']:.3f} |")
    table = "\n".join(lines)
    print(table)
    result = dict(
        description="attention kernel forward+backward: achieved vs matmul GFLOP/s, wasted work of the blocking",
        command=command,
        config=dict(heads=HEADS, head_dim=HEAD_DIM, local_radius=r, global_len=g, dtype="float32", batch=1,
                    repeats=repeats, threads=args.threads, global_chunk=blocked.GLOBAL_CHUNK),
        machine=machine_info(args.threads),
        load_average_before=load_before,
        load_average_after=load_average(),
        results=rows,
        markdown_table=table,
    )
    write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
