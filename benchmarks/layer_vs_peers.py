"""One transformer layer, forward+backward, on CPU: ETC against BERT, Longformer and BigBird.

Layers compared (hidden 768, 12 heads, FFN 3072, GELU, post-LayerNorm, train mode, float32,
batch 1). Dropout is 0 in every layer by default (``--dropout`` sets it for all of them, on the
residual branches and the attention probabilities): on CPU, ``scaled_dot_product_attention`` has
no fused kernel with dropout (it falls back to the O(len^2) math path), and sampling the Bernoulli
masks of attention-probability dropout costs every layer time that says nothing about its
attention scheme.

  ``etc``         our :class:`etc_fairseq.encoder.layer.EtcLayer` with the ``etc_base`` settings
                  (local radius 84, separate W^Q per side and W^K/W^V per attention piece, 31
                  relative labels) on a long input of ``long_len`` tokens plus 256 global tokens.
                  The structure comes from :func:`etc_fairseq.structure.builders.build_structure`
                  for a CONSTRUCTED sentence-structured input: the long input is cut into 256
                  sentences (lengths drawn from a fixed-seed generator, mean ``long_len / 256``),
                  one global "sentence" token each; the last 1/32 of the long input is padding.
  ``etc_no_attn`` the same ETC layer with its attention kernel replaced by the sum of the queries,
                  keys and values it would receive (all projections, output projections, FFN,
                  LayerNorms and residuals kept): what the layer costs apart from attention, i.e.
                  a floor that no attention kernel can go below for this architecture.
  ``etc_matmul_floor`` ``etc_no_attn`` plus the production kernel's matrix products alone (same
                  chunk shapes and count, 2 per chunk forward and 5 backward, on buffers of those
                  shapes) and none of its other work: a floor for any kernel with this blocking
                  that computes its products exactly in fp32 on this machine.
  ``etc_shared``  the ``etc_base_shared`` layer (one W^Q, W^K, W^V, output projection and FFN for
                  both sides, as in the paper's "shared" rows): same inputs as ``etc``.
  ``bert``        a plain BERT layer written here: fused QKV projection and
                  ``torch.nn.functional.scaled_dot_product_attention`` (full attention, fused
                  kernel) over ``long_len`` tokens.
  ``longformer``  HF transformers' ``LongformerLayer``, ``attention_window`` 168 (= 2 * 84, the
                  same local width as ETC), over ``long_len`` tokens (padded to a multiple of 168
                  with masked positions) with global attention on the first token (the usual
                  classification set-up).
  ``bigbird``     HF transformers' ``BigBirdLayer`` with ``attention_type="block_sparse"``
                  (block 64, 3 random blocks: the BigBird-base defaults) over ``long_len`` tokens.

Each (layer, long_len) measurement runs in a fresh subprocess with ``torch.set_num_threads``
(default 2). Time: median of ``--repeats`` forward+backward passes (output summed, ``backward``)
after one warm-up pass; the process CPU time of the same passes (user + system, all threads) is
recorded too, as a load-robust second figure on a shared machine. Peak memory comes from a
second fresh subprocess (one pass after the warm-up) run with glibc's mmap threshold fixed at
128 KiB (``MALLOC_MMAP_THRESHOLD_``), so freed buffers go back to the system and the figure is the
peak of live buffers, the same from run to run: growth of the process's peak resident set
(VmHWM, reset via ``/proc/self/clear_refs`` after the warm-up pass) over the resident set once the
layer and its inputs exist, i.e. activations, gradients and workspace of one forward+backward
pass; the parameter gradients are included (they are dropped before every pass).

Besides the goals, the JSON's ``floor_vs_peers`` gives, per length, both floors against BERT and
against half of the fastest peer, and ``per_token_4096_vs_bert_512`` the layer-level form of the
fairseq throughput goal: per-token time of ETC at 4096 (and of its matmul floor) over BERT at 512.

Usage::

    python -m benchmarks.layer_vs_peers                    # 512 .. 16384, ~20 min on 2 cores
    python -m benchmarks.layer_vs_peers --quick            # 1024 .. 4096, 1 repeat
    python -m benchmarks.layer_vs_peers --lengths 2048 8192 --layers etc bert

Needs ``transformers`` for the Longformer/BigBird peers (``pip install -e .[bench]``); without it
those rows are recorded as skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Dict, List, Optional


from benchmarks.harness import (
    RESULTS_DIR,
    command_line,
    load_average,
    machine_info,
    reset_peak_rss,
    run_worker,
    status_kb,
    write_json,
)
from benchmarks.inputs import sentence_lengths

HIDDEN, HEADS, FFN, GLOBAL_LEN, RADIUS = 768, 12, 3072, 256, 84
DROPOUT = 0.0  # see the module docstring; --dropout to change
LAYERS = ("etc", "etc_no_attn", "etc_matmul_floor", "etc_shared", "bert", "longformer", "bigbird")
PEERS = ("bert", "longformer", "bigbird")  # the layers the goals compare ETC with
DEFAULT_LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_LENGTHS = [1024, 4096]
PADDING_FRACTION = 1 / 32


# ----------------------------------------------------------------------------
# the layers (built inside the worker process)
# ----------------------------------------------------------------------------


def _bert_layer_class():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class BertSdpaLayer(nn.Module):
        """Post-LN BERT layer; attention = fused QKV + F.scaled_dot_product_attention."""

        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.out = nn.Linear(HIDDEN, HIDDEN)
            self.ln1 = nn.LayerNorm(HIDDEN)
            self.fc1 = nn.Linear(HIDDEN, FFN)
            self.fc2 = nn.Linear(FFN, HIDDEN)
            self.ln2 = nn.LayerNorm(HIDDEN)

        def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
            """x float [batch, len, hidden]; key_padding_mask bool [batch, len] (True = padding)."""
            b, t, _ = x.shape
            qkv = self.qkv(x).view(b, t, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # each [batch, heads, len, head_dim]
            attn_mask = ~key_padding_mask[:, None, None, :]  # [batch, 1, 1, len], True = attend
            p = DROPOUT if self.training else 0.0
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
            a = a.transpose(1, 2).reshape(b, t, HIDDEN)
            x = self.ln1(x + F.dropout(self.out(a), DROPOUT, self.training))
            h = self.fc2(F.gelu(self.fc1(x)))
            return self.ln2(x + F.dropout(h, DROPOUT, self.training))

    return BertSdpaLayer


def build_etc(long_len: int, arch: str = "etc_base"):
    """An ``arch`` EtcLayer and its inputs: (layer, step, [x_long, x_global])."""
    import torch

    from etc_fairseq.models.architectures import config_for_arch
    from etc_fairseq.encoder import EtcLayer, label_vocab_from_config
    from etc_fairseq.structure.builders import build_structure, segment_ids_from_lengths

    cfg = config_for_arch(arch, dropout=DROPOUT, attention_dropout=DROPOUT)
    vocab = label_vocab_from_config(cfg)
    layer = EtcLayer(cfg, vocab.size)
    n_pad = int(long_len * PADDING_FRACTION)
    real = long_len - n_pad
    G = min(GLOBAL_LEN, real)
    segment = torch.full((1, long_len), -1, dtype=torch.long)
    segment[0, :real] = segment_ids_from_lengths(sentence_lengths(real, G))
    long_pad = torch.zeros(1, long_len, dtype=torch.bool)
    long_pad[0, real:] = True
    global_pad = torch.zeros(1, GLOBAL_LEN, dtype=torch.bool)
    global_pad[0, G:] = True
    structure = build_structure(
        long_padding_mask=long_pad, global_padding_mask=global_pad, vocab=vocab,
        local_radius=cfg.local_radius, long_segment=segment,
    )
    gen = torch.Generator().manual_seed(1)
    x_long = torch.randn(1, long_len, HIDDEN, generator=gen).requires_grad_(True)
    x_global = torch.randn(1, GLOBAL_LEN, HIDDEN, generator=gen).requires_grad_(True)

    def step():
        a, b = layer(x_long, x_global, structure)
        (a.sum() + b.sum()).backward()

    return layer, step, [x_long, x_global]


def build_etc_shared(long_len: int):
    return build_etc(long_len, "etc_base_shared")


#: ``impl`` names under which the floors below register their attention in
#: :data:`etc_fairseq.attention.IMPLEMENTATIONS`; the layer runs them through its ``backend``, the same
#: dispatch as the production kernel (so a floor cannot silently fall back to the real kernel).
NO_ATTENTION_IMPL = "bench_no_attention"
MATMUL_FLOOR_IMPL = "bench_matmul_floor"


def _no_attention_halves():
    """(long half, global half) with the argument names of the blocked kernel's halves that return a sum
    of their inputs: every projection's output feeds the result, so every GEMM of the layer runs on the
    same shapes, forward and backward, and the attention itself costs O(len * head_dim)."""

    def long_half(long_q, l2l_k, l2l_v, l2g_k, l2g_v, **_):
        # q / l2l: float [batch, heads, long_len, head_dim]; l2g: [batch, heads, global_len, head_dim],
        # summed over its tokens to broadcast onto the long rows
        return long_q + l2l_k + l2l_v + (l2g_k + l2g_v).sum(dim=2, keepdim=True)

    def global_half(global_q, g2g_k, g2g_v, g2l_k, g2l_v, **_):
        # q / g2g: float [batch, heads, global_len, head_dim]; g2l: [batch, heads, long_len, head_dim]
        return global_q + g2g_k + g2g_v + (g2l_k + g2l_v).sum(dim=2, keepdim=True)

    return long_half, global_half


def _use_impl(layer, name: str, halves) -> None:
    """Register ``halves`` as attention implementation ``name`` and make ``layer`` use it."""
    from etc_fairseq.attention import global_local

    global_local.IMPLEMENTATIONS[name] = halves
    layer.self_attn.backend = name


def build_etc_no_attn(long_len: int):
    """build_etc's layer with the attention kernel replaced by a sum of its inputs (see the module
    docstring): every GEMM of the layer runs on the same shapes, forward and backward."""
    layer, step, inputs = build_etc(long_len)
    _use_impl(layer, NO_ATTENTION_IMPL, _no_attention_halves())
    return layer, step, inputs


def _kernel_products_class():
    import torch

    class KernelProducts(torch.autograd.Function):
        """Identity on ``x`` that runs the production kernel's matrix products for one softmax side:
        ``chunks`` chunks of ``rows`` queries against ``cols`` keys, 2 products per chunk forward
        (q.k, p.v) and 5 backward (q.k recomputed, dV, dP, dQ, dK), on buffers of those shapes."""

        @staticmethod
        def forward(ctx, x, chunks: int, rows: int, cols: int):  # type: ignore[override]
            bh, d = x.shape[0] * x.shape[1], x.shape[-1]
            gen = torch.Generator().manual_seed(0)
            # float [bh, rows, d] queries / grads, [bh, cols, d] keys / values, [bh, rows, cols] probs
            ctx.bufs = (torch.randn(bh, rows, d, generator=gen), torch.randn(bh, cols, d, generator=gen),
                        torch.randn(bh, rows, cols, generator=gen))
            ctx.chunks = chunks
            q, k, p = ctx.bufs
            for _ in range(chunks):
                torch.bmm(q, k.transpose(1, 2))  # logits
                torch.bmm(p, k)  # p.v
            return x.clone()

        @staticmethod
        def backward(ctx, g):  # type: ignore[override]
            q, k, p = ctx.bufs
            for _ in range(ctx.chunks):
                torch.bmm(q, k.transpose(1, 2))  # logits recomputed
                torch.bmm(p.transpose(1, 2), q)  # dV
                torch.bmm(q, k.transpose(1, 2))  # dP
                torch.bmm(p, k)  # dQ
                torch.bmm(p.transpose(1, 2), q)  # dK
            return g, None, None, None

    return KernelProducts


def build_etc_matmul_floor(long_len: int):
    """build_etc_no_attn's layer plus the attention kernel's matrix products (same chunk shapes and
    count as the production kernel, forward and backward) and nothing else of the kernel: what
    the layer would cost if the kernel's gathers, softmaxes and copies were free."""
    import etc_fairseq.attention.blocked as blocked

    layer, step, inputs = build_etc(long_len)
    products = _kernel_products_class()
    plain_long, plain_global = _no_attention_halves()
    q_long = blocked.LONG_CHUNK
    q_glob = min(blocked.GLOBAL_CHUNK, GLOBAL_LEN)

    def long_half(long_q, l2l_k, l2l_v, l2g_k, l2g_v, *, local_radius, **kw):
        out = plain_long(long_q, l2l_k, l2l_v, l2g_k, l2g_v)  # [batch, heads, long_len, head_dim]
        return products.apply(out, -(-long_len // q_long), q_long, q_long + 2 * local_radius + GLOBAL_LEN)

    def global_half(global_q, g2g_k, g2g_v, g2l_k, g2l_v, **kw):
        out = plain_global(global_q, g2g_k, g2g_v, g2l_k, g2l_v)  # [batch, heads, global_len, head_dim]
        return products.apply(out, -(-GLOBAL_LEN // q_glob), q_glob, GLOBAL_LEN + long_len)

    _use_impl(layer, MATMUL_FLOOR_IMPL, (long_half, global_half))
    return layer, step, inputs


def build_bert(long_len: int):
    import torch

    layer = _bert_layer_class()()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, long_len, HIDDEN, generator=gen).requires_grad_(True)
    pad = torch.zeros(1, long_len, dtype=torch.bool)
    pad[0, long_len - int(long_len * PADDING_FRACTION):] = True

    def step():
        layer(x, pad).sum().backward()

    return layer, step, [x]


def build_longformer(long_len: int):
    import torch
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerLayer

    window = 2 * RADIUS
    cfg = LongformerConfig(
        hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu",
        attention_window=[window], hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT,
        num_hidden_layers=1,
    )
    layer = LongformerLayer(cfg, layer_id=0)
    padded = math.ceil(long_len / window) * window  # the layer needs a multiple of the window
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, padded, HIDDEN, generator=gen).requires_grad_(True)
    # LongformerModel's per-layer mask: -10000 = masked, 0 = local, +10000 = global
    mask = torch.zeros(1, padded)
    mask[0, long_len - int(long_len * PADDING_FRACTION):] = -10000.0
    mask[0, 0] = 10000.0
    is_index_masked = mask < 0
    is_index_global_attn = mask > 0

    def step():
        out = layer(x, attention_mask=mask, is_index_masked=is_index_masked,
                    is_index_global_attn=is_index_global_attn, is_global_attn=True)[0]
        out.sum().backward()

    return layer, step, [x]


def build_bigbird(long_len: int):
    import torch
    from transformers import BigBirdConfig
    from transformers.models.big_bird.modeling_big_bird import BigBirdLayer, BigBirdModel

    block = 64
    cfg = BigBirdConfig(
        hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN, hidden_act="gelu_new",
        attention_type="block_sparse", block_size=block, num_random_blocks=3,
        hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT, num_hidden_layers=1,
        max_position_embeddings=max(4096, long_len),
    )
    layer = BigBirdLayer(cfg, seed=0)
    layer.set_attention_type("block_sparse")
    padded = math.ceil(long_len / block) * block
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, padded, HIDDEN, generator=gen).requires_grad_(True)
    attn = torch.ones(1, padded)
    attn[0, long_len - int(long_len * PADDING_FRACTION):] = 0.0
    blocked, band, from_mask, to_mask = BigBirdModel.create_masks_for_block_sparse_attn(attn, block)

    def step():
        out = layer(x, band_mask=band, from_mask=from_mask, to_mask=to_mask, blocked_encoder_mask=blocked)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()

    return layer, step, [x]


BUILDERS = dict(etc=build_etc, etc_no_attn=build_etc_no_attn, etc_matmul_floor=build_etc_matmul_floor,
                etc_shared=build_etc_shared, bert=build_bert, longformer=build_longformer, bigbird=build_bigbird)


def worker(name: str, long_len: int, threads: int, repeats: int) -> Dict:
    import gc

    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    np.random.seed(0)  # BigBird draws its random blocks with numpy in train mode
    layer, step, inputs = BUILDERS[name](long_len)
    layer.train()

    def clear():
        layer.zero_grad(set_to_none=True)
        for t in inputs:
            t.grad = None

    step()  # warm-up (one-time initialisation: thread pools, kernel selection, lazy imports)
    clear()
    gc.collect()
    base_rss_kb = status_kb("VmRSS")
    reset_ok = reset_peak_rss()
    base_hwm_kb = base_rss_kb if reset_ok else status_kb("VmHWM")
    times: List[float] = []
    cpu_times: List[float] = []
    for _ in range(repeats):
        clear()
        torch.manual_seed(0)
        np.random.seed(0)
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    peak_kb = status_kb("VmHWM")
    return dict(
        time_s=statistics.median(times),
        times_s=times,
        cpu_s=statistics.median(cpu_times),
        cpu_times_s=cpu_times,
        peak_mb=max(0, peak_kb - base_hwm_kb) / 1024.0,
        peak_method="VmHWM (reset via clear_refs after warm-up) - VmRSS before the timed passes" if reset_ok
        else "VmHWM - VmHWM after building (peak could not be reset; underestimates)",
        params=sum(p.numel() for p in layer.parameters()),
    )


# ----------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------


def estimate_peak_gb(name: str, long_len: int) -> float:
    """Rough peak-memory estimate (GB) used to skip configurations that would not fit: fitted to
    earlier runs on the reference machine (BigBird's block-sparse layer grows ~3x per doubling)."""
    x = long_len / 8192
    return {"etc": 0.6 * x, "etc_no_attn": 0.6 * x, "etc_matmul_floor": 0.6 * x, "etc_shared": 0.6 * x,
            "bert": 0.6 * x, "longformer": 1.3 * x, "bigbird": 4.5 * x ** 1.6}[name]


#: glibc's mmap threshold for the memory pass: every allocation of 128 KiB or more gets its own
#: mapping, returned to the system when freed, so the resident-set high-water mark is the peak of
#: live buffers. With glibc's default (a threshold that adapts upwards after frees) freed buffers
#: stay in the heap and the same pass measured anywhere between 286 and 628 MB (ETC, 8192).
MEMORY_PASS_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _run_worker(name: str, long_len: int, args, repeats: int, env: Optional[Dict[str, str]] = None) -> Dict:
    return run_worker(__spec__.name, [name, long_len, "--threads", args.threads, "--repeats", repeats,
                                      "--dropout", args.dropout], args.timeout, env=dict(os.environ, **(env or {})))


def measure(name: str, long_len: int, args) -> Dict:
    """Time (and CPU time) from a pass with the default allocator; peak memory from a second
    one-repeat pass with :data:`MEMORY_PASS_ENV` (deterministic, but slower: its time is not used)."""
    out = _run_worker(name, long_len, args, args.repeats)
    if out["status"] != "ok":
        return out
    mem = _run_worker(name, long_len, args, 1, MEMORY_PASS_ENV)
    out["peak_mb_default_allocator"] = out["peak_mb"]
    if mem["status"] != "ok":
        out["status"] = f"memory pass {mem['status']}"
        return out
    out["peak_mb"] = mem["peak_mb"]
    out["peak_method"] = (f"{mem['peak_method']}, in a separate one-pass run with "
                          f"{' '.join(f'{k}={v}' for k, v in MEMORY_PASS_ENV.items())}")
    return out


def plot(rows: List[Dict], path: str, title: str) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in LAYERS:
        pts = [(r["long_len"], r["time_s"], r["peak_mb"]) for r in rows
               if r["layer"] == name and r.get("status") == "ok"]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        style = dict(marker="o", label=name)
        if name == "etc_no_attn":  # a floor, not a layer
            style.update(linestyle="--", label="etc without attention (floor)")
        elif name == "etc_matmul_floor":  # a floor, not a layer
            style.update(linestyle=":", label="etc, attention = its matmuls only (floor)")
        axes[0].plot(xs, [p[1] for p in pts], **style)
        axes[1].plot(xs, [p[2] for p in pts], **style)
    for ax, ylabel in zip(axes, ("forward+backward time (s)", "peak memory growth (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("long input length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path


def main(argv: Optional[List[str]] = None) -> None:
    global DROPOUT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--layers", nargs="+", default=list(LAYERS), choices=LAYERS)
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (median); default 3, --quick 1")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dropout", type=float, default=DROPOUT,
                   help="dropout of every layer (residual branches and attention probabilities)")
    p.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS}, 1 repeat")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    p.add_argument("--mem-budget-gb", type=float, default=8.0,
                   help="skip configurations whose estimated peak memory is above this")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "layer_vs_peers.json"))
    p.add_argument("--worker", nargs=2, metavar=("LAYER", "LONG_LEN"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    DROPOUT = args.dropout

    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.threads, args.repeats)))
        return

    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    lengths = args.lengths or (QUICK_LENGTHS if args.quick else DEFAULT_LENGTHS)
    try:
        import transformers  # noqa: F401

        have_hf = True
    except ImportError:
        have_hf = False
    load_before = load_average()
    started = time.time()
    rows: List[Dict] = []
    for long_len in lengths:
        for name in args.layers:
            row = dict(layer=name, long_len=long_len)
            if name in ("longformer", "bigbird") and not have_hf:
                row["status"] = "skipped: transformers not installed"
            elif estimate_peak_gb(name, long_len) > args.mem_budget_gb:
                row["status"] = f"skipped: estimated peak > --mem-budget-gb {args.mem_budget_gb:g}"
            else:
                row.update(measure(name, long_len, args))
            rows.append(row)
            print(f"[{time.time() - started:7.1f}s] L={long_len} {name}: {row.get('status')} "
                  f"{row.get('time_s', float('nan')):.3f} s {row.get('peak_mb', float('nan')):.0f} MB",
                  file=sys.stderr, flush=True)
    load_after = load_average()

    index = {(r["layer"], r["long_len"]): r for r in rows}
    for r in rows:
        etc = index.get(("etc", r["long_len"]))
        ok = r.get("status") == "ok" and etc is not None and etc.get("status") == "ok"
        r["time_vs_etc"] = r["time_s"] / etc["time_s"] if ok else None
        r["mem_vs_etc"] = r["peak_mb"] / etc["peak_mb"] if ok and etc["peak_mb"] > 0 else None

    for r in rows:
        etc = index.get(("etc", r["long_len"]))
        ok = r.get("status") == "ok" and etc is not None and etc.get("status") == "ok"
        r["cpu_vs_etc"] = r["cpu_s"] / etc["cpu_s"] if ok and etc["cpu_s"] > 0 else None
    lines = ["| long_len | layer | time s | CPU s | peak MB | time / ETC's | CPU / ETC's | peak MB / ETC's |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {r['long_len']} | {r['layer']} | {r.get('status')} | | | | | |")
            continue
        tv, cv, mv = ("-" if r[k] is None else f"{r[k]:.2f}" for k in ("time_vs_etc", "cpu_vs_etc", "mem_vs_etc"))
        lines.append(f"| {r['long_len']} | {r['layer']} | {r['time_s']:.3f} | {r['cpu_s']:.2f} | "
                     f"{r['peak_mb']:.0f} | {tv} | {cv} | {mv} |")
    table = "\n".join(lines)
    print(table)

    # the goals, evaluated on this run's side-by-side figures
    goals = {}

    def ok(name, n):
        r = index.get((name, n))
        return r if r is not None and r.get("status") == "ok" else None

    speed = {n: (ok("etc", n), ok("bert", n)) for n in lengths if n >= 2048}
    if 2048 in speed and all(e and b for e, b in speed.values()):  # "from 2048 on" needs 2048 measured
        goals["etc_at_least_as_fast_as_bert_from_2048"] = all(e["time_s"] <= b["time_s"] for e, b in speed.values())
    if 8192 in lengths and ok("etc", 8192):
        peers = [ok(n, 8192) for n in PEERS]
        if all(peers):
            goals["etc_2x_faster_than_every_peer_at_8192"] = all(
                pr["time_s"] >= 2 * ok("etc", 8192)["time_s"] for pr in peers)
        if ok("longformer", 8192):
            goals["etc_peak_at_most_half_longformer_at_8192"] = (
                ok("etc", 8192)["peak_mb"] <= 0.5 * ok("longformer", 8192)["peak_mb"])
    for k, v in goals.items():
        print(f"goal {k}: {'met' if v else 'NOT met'}")
    # The floors against the goals, per length: ETC without its attention kernel, and ETC whose
    # kernel does only its matrix products, against BERT and against half of the fastest peer
    # (a floor above a goal's time means no kernel of this blocking can meet the goal on this machine).
    floor = {}
    for n in lengths:
        f, m, bert = ok("etc_no_attn", n), ok("etc_matmul_floor", n), ok("bert", n)
        peers = [r for r in (ok(name, n) for name in PEERS) if r]
        if not (f or m) or not peers:
            continue
        fastest = min(peers, key=lambda r: r["time_s"])
        entry = dict(fastest_peer=fastest["layer"], fastest_peer_s=fastest["time_s"],
                     bert_s=bert["time_s"] if bert else None)
        for key, r in (("no_attention", f), ("matmul_floor", m)):
            if r:
                entry[f"{key}_s"] = r["time_s"]
                entry[f"{key}_over_half_fastest_peer"] = r["time_s"] / (0.5 * fastest["time_s"])
                entry[f"{key}_over_bert"] = r["time_s"] / bert["time_s"] if bert else None
        floor[str(n)] = entry
        print(f"L={n}: ETC without attention {f['time_s'] if f else float('nan'):.3f} s, with only the "
              f"kernel's matmuls {m['time_s'] if m else float('nan'):.3f} s; BERT "
              f"{bert['time_s'] if bert else float('nan'):.3f} s; half of the fastest peer "
              f"({fastest['layer']}) {0.5 * fastest['time_s']:.3f} s")
    # fairseq throughput goal (ETC at 4096 within 1.25x of RoBERTa at 512 per token), at layer level
    per_token = {}
    e4, m4, b512 = ok("etc", 4096), ok("etc_matmul_floor", 4096), ok("bert", 512)
    if b512 and (e4 or m4):
        bert_tok = b512["time_s"] / 512
        per_token = dict(bert_512_s_per_token=bert_tok)
        for key, r in (("etc_4096", e4), ("etc_matmul_floor_4096", m4)):
            if r:
                per_token[f"{key}_s_per_token"] = r["time_s"] / 4096
                per_token[f"{key}_over_bert_512"] = r["time_s"] / 4096 / bert_tok
        print("per token, layer level: " + ", ".join(
            f"{k} {v:.2f}" for k, v in per_token.items() if k.endswith("over_bert_512")))

    result = dict(
        description="one layer forward+backward, CPU, fp32, batch 1: ETC (etc_base) vs BERT (SDPA), "
                    "HF Longformer (window 168), HF BigBird (block sparse)",
        command=command,
        config=dict(hidden=HIDDEN, heads=HEADS, ffn=FFN, global_len=GLOBAL_LEN, local_radius=RADIUS,
                    dropout=DROPOUT, dtype="float32", batch=1, repeats=args.repeats, lengths=lengths,
                    padding_fraction=PADDING_FRACTION, threads=args.threads),
        machine=machine_info(args.threads),
        load_average_before=load_before,
        load_average_after=load_after,
        results=rows,
        goals=goals,
        floor_vs_peers=floor,
        per_token_4096_vs_bert_512=per_token,
        markdown_table=table,
        total_seconds=round(time.time() - started, 1),
    )
    write_json(args.out, result)
    png = plot(rows, os.path.splitext(args.out)[0] + ".png",
               f"one layer fwd+bwd, CPU {args.threads} threads, fp32 (load avg {load_before[0]:.1f} before the run)")
    print(f"wrote {args.out}" + (f" and {png}" if png else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
