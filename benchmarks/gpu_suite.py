"""One GPU run, prepared on CPU: ETC's attention and model measured where its users train, in ONE JSON.

The suite uses only the fairseq-free core (``etc_fairseq.attention`` / ``structure`` / ``encoder``), torch and
``transformers`` (the peers), so a GPU machine without fairseq runs it (``scripts/gpu_suite.sh``). It works on
torch 2.11 and 2.13. Parts, in order (``--parts``), each written to the JSON as soon as it is done, each
skipped once the time budget (``--budget-s``) is spent (``--parts`` names them in the order to run):

``smoke``      flex attention compiled and run once (forward + backward, bf16, 4,096 long tokens) through the
               model (one ``etc_base`` layer, the plan built from structure ids) and through the attention
               benchmark's plan (read from built masks), each try in a subprocess with a time limit, with
               the kernel options of :data:`KERNEL_OPTION_LADDER` in turn (torch's defaults first) until one
               works; the later parts use those options (``ETC_FLEX_KERNEL_OPTIONS``, ``docs/gpu.md``), and
               skip the flex path (the model trains with the blocked kernel) when none does.
``exactness``  float32, forward AND every gradient (queries, keys, values of both sides, l2g / g2l keys and
               values, relative-label tables and biases) of ``flex`` and ``blocked`` against the dense reference
               (TF32 off), on the benchmarks' CONSTRUCTED ETC inputs at a long length that is and one that is not
               a multiple of 128; pass: max |difference| <= 1e-5 x max(1, max |reference|). Then bfloat16: the
               error of ``flex`` / ``blocked`` in bf16 against the float32 reference must be at most 2x the error
               of the dense reference computed in bf16 (+1e-3): bf16 keeps 8 mantissa bits (relative rounding
               2^-8 = 0.4 % per input), so its error is set by the format, not a constant; a kernel is as exact
               as bf16 allows when it is no worse than dense attention in bf16.
``attention``  attention alone, forward+backward, bf16, batch 1, 12 heads of 64, r = 84, 256 global tokens, at
               4,096 / 16,384 / 65,536 long tokens: ``flex`` (the batch's plan built once, as the model does for
               its 12 layers; its build time is reported apart), ``blocked``, ``sdpa`` (flash, no mask, over the
               same long + global tokens: the dense floor), HF ``LongformerSelfAttention`` (window 168, the 256
               global tokens first) and HF ``BigBirdBlockSparseAttention`` (block 64, 3 random blocks); the HF
               modules include their Q/K/V projections (not separable), ETC's and SDPA's rows do not. Time =
               median after warm-up (the first flex call compiles), peak memory over the inputs, and TFLOP/s on
               the allowed pairs (forward 4 * head_dim flops per pair and head, backward 2.5x forward).
``model``      a whole training step in bf16 (autocast; forward, the LM head and MLM loss on the 15 % masked
               positions only, as fairseq and ModernBERT train, backward, AdamW step): ``etc_base``
               (the core :class:`~etc_fairseq.encoder.EtcEncoder`, ``EtcEncoderConfig.preset("etc_base")``: 12
               layers of 768, r = 84, fixed-block global tokens; attention dropout 0) at 8,192 and 32,768 long tokens, HF
               ModernBERT-base (random init, its fastest attention available: flash_attention_2, else
               flex_attention, else sdpa) at the same lengths, BERT-base at 512 (batch 16); tokens per second,
               and the host synchronisations CUDA reports in one eager ``etc_base`` step.
``compile``    ``torch.compile(fullgraph=True)`` of an ``etc_base`` forward + loss (+ backward on CUDA) with the
               flex path (``--compile-layers`` of its layers, default 12): graph breaks, compilations over 5 batches of different content at one shape and one
               more length, host synchronisations in a compiled step (``torch.cuda.set_sync_debug_mode``).
``capacity``   the longest input ``etc_base`` trains on with activation checkpointing (bf16 step, the MLM loss on
               8,192 masked positions: the head's memory grows with the vocabulary, not with the encoder),
               doubling from 65,536 until out of memory or out of time; peak memory and step time per length.

On CUDA every part after ``smoke`` runs in a subprocess stopped after ``--part-limit-s`` (180 s; ``--isolate``),
so one part whose compilations take minutes cannot use the whole budget (inductor's on-disk cache keeps the
kernels a part compiled for the next one).

Usage::

    bash scripts/gpu_suite.sh                                # on the GPU machine (installs given wheels first)
    python -m benchmarks.gpu_suite                           # CUDA: every part, within --budget-s (450)
    python -m benchmarks.gpu_suite --device cpu --quick      # every part CPU allows, tiny sizes (a test runs it)

On CPU (``--device cpu``) FlexAttention has no backward: flex is measured forward-only, the ETC model trains
with the blocked kernel, and ``--quick`` shrinks every size so the whole run takes well under a minute; its
figures say nothing about a GPU. The JSON names the device, torch, triton, transformers and Python versions.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from typing import Callable, Dict, List, Optional

from benchmarks import inputs as bench_inputs
from benchmarks.harness import REPO, RESULTS_DIR, command_line, write_json

PARTS = ("smoke", "exactness", "attention", "model", "compile", "capacity")
FP32_TOL = 1e-5


# ---------------------------------------------------------------------------------------------------------
# the run: device, versions, time budget, timing
# ---------------------------------------------------------------------------------------------------------


class Run:
    """The device, the mode and the time budget of one suite run."""

    def __init__(self, device, quick: bool, budget_s: float):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.quick = quick
        #: attention heads of the attention parts (12 of 64, as etc_base; 2 in quick runs)
        self.heads = 2 if quick else bench_inputs.HEADS
        self.start = time.perf_counter()
        self.budget_s = budget_s
        #: why the flex path is not measured (the smoke part found no kernel options that compile), or None
        self.flex_skipped: Optional[str] = None

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def sync(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> int:
        """Reset CUDA's peak-memory counter; returns the bytes allocated now (0 on CPU)."""
        import torch

        if not self.cuda:
            return 0
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)
        return torch.cuda.memory_allocated(self.device)

    def peak_mb(self, base: int) -> Optional[float]:
        import torch

        return (torch.cuda.max_memory_allocated(self.device) - base) / 2**20 if self.cuda else None

    def time(self, step: Callable[[], object], warmup: int, repeats: int) -> Dict:
        """Median wall time (ms) of ``step`` after ``warmup`` calls, and peak memory (MB) over what was
        allocated before them."""
        base = self.reset_peak()
        for _ in range(warmup):
            step()
        self.sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            self.sync()
            times.append(1000 * (time.perf_counter() - t0))
        return dict(time_ms=statistics.median(times), times_ms=times, peak_mb=self.peak_mb(base))


def versions() -> Dict:
    """torch, CUDA, triton, transformers, numpy, Python; the repository's commit where git knows it."""
    import torch

    out = dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda)
    for name in ("triton", "transformers", "numpy", "safetensors"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                       timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["commit"] = None
    return out


def device_info(run: Run) -> Dict:
    import torch

    if run.cuda:
        p = torch.cuda.get_device_properties(run.device)
        return dict(type="cuda", name=p.name, capability=f"{p.major}.{p.minor}", memory_gb=round(p.total_memory / 2**30, 1),
                    multiprocessors=p.multi_processor_count)
    from benchmarks.harness import machine_info

    return dict(type="cpu", **machine_info(torch.get_num_threads()))


def _failed(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"failed: {type(e).__name__}: {first}"


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


# ---------------------------------------------------------------------------------------------------------
# (a) exactness
# ---------------------------------------------------------------------------------------------------------


def _attention_case(long_len: int, global_len: int, split: bool, device, dtype, heads: int = bench_inputs.HEADS):
    """The benchmarks' CONSTRUCTED ETC inputs (:func:`benchmarks.inputs.attention_inputs`) plus per-label biases
    and, with ``split``, l2g / g2l keys and values of their own: (leaf tensors, structure kwargs)."""
    import torch

    tensors, kw = bench_inputs.attention_inputs(long_len, global_len, heads)
    gen = torch.Generator().manual_seed(1)
    H, D, N = heads, bench_inputs.HEAD_DIM, bench_inputs.NUM_LABELS
    tensors["long_rel_bias"] = torch.randn(N, H, generator=gen)
    tensors["global_rel_bias"] = torch.randn(N, H, generator=gen)
    if split:
        for piece, n in (("l2g", global_len), ("g2l", long_len)):
            tensors[f"{piece}_k"] = torch.randn(1, H, n, D, generator=gen)
            tensors[f"{piece}_v"] = torch.randn(1, H, n, D, generator=gen)
    tensors = {k: v.detach().to(device=device, dtype=dtype).requires_grad_(True) for k, v in tensors.items()}
    kw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    return tensors, kw


def _call_attention(impl: str, tensors: Dict, kw: Dict, flex_compile: bool):
    from etc_fairseq.attention import global_local_attention

    t = dict(tensors)
    extra = {}
    for piece in ("l2g", "g2l"):
        if f"{piece}_k" in t:
            extra[f"{piece}_kv"] = (t.pop(f"{piece}_k"), t.pop(f"{piece}_v"))
    return global_local_attention(**t, **kw, **extra, impl=impl,
                                  flex_compile=flex_compile if impl == "flex" else None)


def _outputs_and_grads(impl, tensors, kw, cotangents, backward: bool, flex_compile: bool) -> Dict:
    """Outputs (and input gradients under ``backward``) of one implementation, as float32 tensors by name."""
    import torch

    with torch.set_grad_enabled(backward):
        outs = _call_attention(impl, tensors, kw, flex_compile)
    got = {"out_long": outs[0].float(), "out_global": outs[1].float()}
    if backward:
        loss = sum((o.float() * c).sum() for o, c in zip(outs, cotangents))
        grads = torch.autograd.grad(loss, list(tensors.values()))
        got.update({f"grad_{name}": g.float() for name, g in zip(tensors, grads)})
    return got


def part_exactness(run: Run) -> Dict:
    import torch

    backward_flex = run.cuda  # torch's flex attention has no CPU backward
    cases = [(200, 20, True), (256, 16, False)] if run.quick else [(1000, 60, True), (1024, 64, False)]
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    results = []
    try:
        for long_len, global_len, split in cases:
            case = dict(long_len=long_len, global_len=global_len, own_l2g_g2l_keys=split, fp32={}, bf16={})
            ref_t, kw = _attention_case(long_len, global_len, split, run.device, torch.float32, run.heads)
            gen = torch.Generator().manual_seed(2)
            cot = [torch.randn(ref_t["long_q"].shape, generator=gen).to(run.device),
                   torch.randn(ref_t["global_q"].shape, generator=gen).to(run.device)]
            ref = _outputs_and_grads("dense", ref_t, kw, cot, True, False)
            for impl in ("blocked", "flex"):
                backward = impl != "flex" or backward_flex
                if impl == "flex" and run.flex_skipped:
                    case["fp32"][impl] = dict(status=run.flex_skipped)
                    continue
                try:
                    t, _ = _attention_case(long_len, global_len, split, run.device, torch.float32, run.heads)
                    got = _outputs_and_grads(impl, t, kw, cot, backward, run.cuda)
                    diffs = {k: (got[k] - ref[k]).abs().max().item() for k in got}
                    worst = max(diffs[k] / max(1.0, ref[k].abs().max().item()) for k in diffs)
                    case["fp32"][impl] = dict(status="ok", backward=backward, max_abs_diff=diffs,
                                              max_scaled_diff=worst, within_tolerance=worst <= FP32_TOL)
                except Exception as e:  # noqa: BLE001 -- recorded per row
                    case["fp32"][impl] = dict(status=_failed(e))
            # bf16: each implementation's error against the float32 reference, next to dense's own bf16 error
            errors = {}
            impls = ("dense", "blocked") + (() if run.flex_skipped else ("flex",))
            for impl in impls if not (run.quick and results) else ():
                backward = impl != "flex" or backward_flex
                try:
                    t, _ = _attention_case(long_len, global_len, split, run.device, torch.bfloat16, run.heads)
                    got = _outputs_and_grads(impl, t, kw, [c.bfloat16() for c in cot], backward, run.cuda)
                    errors[impl] = {k: (got[k] - ref[k]).abs().max().item() for k in got}
                except Exception as e:  # noqa: BLE001
                    case["bf16"][impl] = dict(status=_failed(e))
            for impl in ("blocked", "flex"):
                if impl not in errors or "dense" not in errors:
                    continue
                bound = {k: 2 * errors["dense"][k] + 1e-3 for k in errors[impl]}
                case["bf16"][impl] = dict(status="ok", max_abs_error=errors[impl], dense_bf16_error=errors["dense"],
                                          within_tolerance=all(errors[impl][k] <= bound[k] for k in bound))
            results.append(case)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev_tf32
    return dict(tolerance_fp32=f"max |diff| <= {FP32_TOL} x max(1, max |reference|)",
                tolerance_bf16="max |error vs fp32 reference| <= 2 x dense-in-bf16's error + 1e-3", cases=results)


# ---------------------------------------------------------------------------------------------------------
# (b) attention alone
# ---------------------------------------------------------------------------------------------------------


def _allowed_pairs(kw: Dict) -> int:
    """Allowed query-key pairs of a structure (l2l band slots inside the sequence, l2g, g2g, g2l)."""
    from etc_fairseq.attention.common import band_key_in_range

    L = kw["l2l_mask"].shape[1]
    l2l = (kw["l2l_mask"] & band_key_in_range(L, kw["local_radius"], kw["l2l_mask"].device)).sum()
    return int(l2l + kw["l2g_mask"].sum() + kw["g2g_mask"].sum() + kw["g2l_mask"].sum())


def _tflops(pairs: int, heads: int, backward: bool, ms: float) -> float:
    """Achieved TFLOP/s: forward 4 * head_dim flops per pair and head, backward 2.5x the forward."""
    flops = 4 * bench_inputs.HEAD_DIM * heads * pairs * (3.5 if backward else 1.0)
    return flops / (ms / 1000) / 1e12


def _etc_steps(run: Run, long_len: int, global_len: int, dtype, backward: bool) -> Dict[str, Callable]:
    """Forward(+backward) steps of flex (plan prebuilt) and blocked on the same CONSTRUCTED inputs."""
    import torch

    from etc_fairseq.attention import GlobalLocalStructure
    from etc_fairseq.attention.flex import flex_joint_attention, flex_plan_from_structure, relative_table

    tensors, kw = _attention_case(long_len, global_len, False, run.device, dtype, run.heads)
    del tensors["long_rel_bias"], tensors["global_rel_bias"]  # the inputs of the benchmarks' kernels
    structure = GlobalLocalStructure(**kw)
    t0 = time.perf_counter()
    plan = flex_plan_from_structure(structure, split_kv=False)
    run.sync()
    plan_ms = 1000 * (time.perf_counter() - t0)
    lay = plan.layout
    gp, lp = lay.global_pad, lay.long_pad

    def pad(x, n):
        return torch.nn.functional.pad(x, (0, 0, 0, n - x.shape[2]))

    def flex():
        t = tensors
        q = torch.cat([pad(t["global_q"], gp), pad(t["long_q"], lp)], 2)
        k = torch.cat([pad(t["global_k"], gp), pad(t["long_k"], lp)], 2)
        v = torch.cat([pad(t["global_v"], gp), pad(t["long_v"], lp)], 2)
        tables = [relative_table(q[:, :, :gp], t["global_rel_emb"], None),
                  relative_table(q[:, :, gp:], t["long_rel_emb"], None)]
        return flex_joint_attention(plan, q, k, v, tables, compile=run.cuda)

    def blocked():
        return _call_attention("blocked", tensors, kw, False)

    def step(fn):
        def run_step():
            with torch.set_grad_enabled(backward):
                out = fn()
            if backward:
                outs = out if isinstance(out, tuple) else (out,)
                sum(o.float().sum() for o in outs).backward()
                for x in tensors.values():
                    x.grad = None
        return run_step

    return dict(flex=step(flex), blocked=step(blocked)), plan_ms, _allowed_pairs(kw)


def _peer_step(name: str, run: Run, long_len: int, global_len: int, dtype, backward: bool):
    """SDPA (flash, no mask) / HF Longformer / HF BigBird self-attention over the same long + global tokens."""
    import torch
    import torch.nn.functional as F

    H, D = run.heads, bench_inputs.HEAD_DIM
    n = long_len + global_len
    gen = torch.Generator().manual_seed(3)
    if name == "sdpa":
        qkv = [torch.randn(1, H, n, D, generator=gen).to(run.device, dtype).requires_grad_(backward) for _ in range(3)]

        def call():
            if run.cuda:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(*qkv)
            return F.scaled_dot_product_attention(*qkv)
        leaves, pairs = qkv, n * n
    elif name == "longformer":
        from transformers import LongformerConfig
        from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

        window = 2 * bench_inputs.RADIUS
        cfg = LongformerConfig(hidden_size=H * D, num_attention_heads=H, attention_window=[window],
                               attention_probs_dropout_prob=0.0)
        module = LongformerSelfAttention(cfg, layer_id=0).to(run.device, dtype)
        padded = math.ceil(n / window) * window
        x = torch.randn(1, padded, H * D, generator=gen).to(run.device, dtype).requires_grad_(backward)
        mask = torch.zeros(1, padded, device=run.device, dtype=dtype)
        mask[0, :global_len] = 10000.0  # the global tokens first (LongformerModel's per-layer mask values)
        mask[0, n:] = -10000.0
        glob, masked = mask > 0, mask < 0

        def call():
            return module(x, attention_mask=mask, is_index_masked=masked, is_index_global_attn=glob,
                          is_global_attn=True)[0]
        leaves = [x]
        pairs = long_len * (window + 1 + global_len) + global_len * n
    elif name == "bigbird":
        from transformers import BigBirdConfig
        from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention, BigBirdModel

        block = 16 if run.quick else 64  # BigBird needs enough blocks for its random ones
        padded = math.ceil(n / block) * block
        cfg = BigBirdConfig(hidden_size=H * D, num_attention_heads=H, attention_type="block_sparse", block_size=block,
                            num_random_blocks=3, max_position_embeddings=padded)
        module = BigBirdBlockSparseAttention(cfg, seed=0).to(run.device, dtype)
        x = torch.randn(1, padded, H * D, generator=gen).to(run.device, dtype).requires_grad_(backward)
        attn = torch.ones(1, padded, device=run.device, dtype=dtype)
        attn[0, n:] = 0
        blocked_mask, band, from_mask, to_mask = BigBirdModel.create_masks_for_block_sparse_attn(attn, block)

        def call():
            out = module(x, band_mask=band, from_mask=from_mask, to_mask=to_mask, from_blocked_mask=blocked_mask,
                         to_blocked_mask=blocked_mask)
            return out[0] if isinstance(out, tuple) else out
        leaves = [x]
        pairs = padded * block * (3 + 3 + 2)  # sliding 3 + random 3 + global 2 blocks per query block (approx.)
    else:
        raise ValueError(name)

    def step():
        with torch.set_grad_enabled(backward):
            out = call()
        if backward:
            out.float().sum().backward()
            for t in leaves:
                t.grad = None
    return step, pairs


def part_attention(run: Run, lengths: List[int]) -> Dict:
    import torch

    dtype = torch.bfloat16 if run.cuda else torch.float32
    global_len = 16 if run.quick else bench_inputs.GLOBAL_LEN
    warmup, repeats = (1, 1) if run.quick else (2, 5)
    backward = run.cuda
    rows = []
    for long_len in lengths:
        if run.left() < 0:
            rows.append(dict(long_len=long_len, status="skipped: time budget"))
            continue
        try:
            etc, plan_ms, pairs = _etc_steps(run, long_len, global_len, dtype, backward)
        except Exception as e:  # noqa: BLE001
            rows.append(dict(long_len=long_len, impl="etc inputs", status=_failed(e)))
            continue
        steps = [("flex", etc["flex"], pairs, dict(plan_build_ms=plan_ms)), ("blocked", etc["blocked"], pairs, {})]
        for peer in ("sdpa", "longformer", "bigbird"):
            steps.append((peer, None, None, {}))
        for impl, step, impl_pairs, extra in steps:
            row = dict(impl=impl, long_len=long_len, global_len=global_len, dtype=str(dtype),
                       measured="forward+backward" if backward else "forward only", **extra)
            if run.left() < 0:
                rows.append(dict(row, status="skipped: time budget"))
                continue
            if impl == "flex" and run.flex_skipped:
                rows.append(dict(row, status=run.flex_skipped))
                continue
            try:
                if step is None:
                    step, impl_pairs = _peer_step(impl, run, long_len, global_len, dtype, backward)
                row.update(run.time(step, warmup, repeats), status="ok", allowed_pairs=impl_pairs)
                row["tflops"] = _tflops(impl_pairs, run.heads, backward, row["time_ms"])
            except Exception as e:  # noqa: BLE001 -- out of memory, a peer that cannot run this length
                row["status"] = _failed(e)
            finally:
                step = None
                if run.cuda:
                    torch.cuda.empty_cache()
            rows.append(row)
            print(f"  attention L={long_len} {impl}: {row['status']} {row.get('time_ms', float('nan')):.2f} ms",
                  file=sys.stderr, flush=True)
    for row in rows:  # against flash-dense at the same length
        sdpa = next((r for r in rows if r.get("impl") == "sdpa" and r.get("long_len") == row.get("long_len")
                     and r.get("status") == "ok"), None)
        if sdpa and row.get("status") == "ok":
            row["speedup_vs_sdpa"] = sdpa["time_ms"] / row["time_ms"]
            row["tflops_fraction_of_sdpa"] = row["tflops"] / sdpa["tflops"]
    return dict(heads=run.heads, head_dim=bench_inputs.HEAD_DIM, local_radius=bench_inputs.RADIUS,
                rows=rows)


# ---------------------------------------------------------------------------------------------------------
# (c) whole-model training steps, (d) capacity
# ---------------------------------------------------------------------------------------------------------


#: the sizes of every model in a ``--quick`` run (a smoke test of the code, not a measurement)
QUICK_SIZES = dict(layers=2, width=64, ffn=128, heads=4, vocab=1000)


def _etc_base(run: Run, quick: bool, **overrides):
    """``EtcEncoderConfig.preset("etc_base")`` (12 layers of 768, r = 84, fixed blocks of 16) with attention
    dropout 0, plus the tied LM head (RoBERTa's vocabulary); ``quick``: :data:`QUICK_SIZES`."""
    from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig, LMHead

    fields = dict(attention_dropout=0.0, **overrides)
    if run.flex_skipped:
        fields["attention_backend"] = "blocked"
    vocab = 50265
    if quick:
        q = QUICK_SIZES
        fields.update(encoder_layers=q["layers"], encoder_embed_dim=q["width"], encoder_ffn_embed_dim=q["ffn"],
                      encoder_attention_heads=q["heads"], local_radius=16)
        vocab = q["vocab"]
    enc = EtcEncoder(EtcEncoderConfig.preset("etc_base", **fields), vocab, 1, 0).to(run.device)
    head = LMHead(enc.cfg.encoder_embed_dim, enc.embed_tokens.weight, enc.cfg.activation_fn).to(run.device)
    return enc, head


def _mlm_batch(run: Run, batch: int, length: int, vocab: int, seed: int = 0, max_masked: Optional[int] = None):
    """Random tokens, int64 ``[batch, length]``, and MLM targets (-100 except at 15 % of the positions, at
    most ``max_masked`` of them)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, vocab, (batch, length), generator=gen)
    picked = torch.rand(batch, length, generator=gen) < 0.15
    if max_masked is not None and int(picked.sum()) > max_masked:
        keep = torch.zeros(picked.numel(), dtype=torch.bool)
        keep[picked.flatten().nonzero().squeeze(1)[torch.randperm(int(picked.sum()), generator=gen)[:max_masked]]] = True
        picked = keep.view_as(picked)
    targets = torch.where(picked, tokens, torch.full_like(tokens, -100))
    return tokens.to(run.device), targets.to(run.device)


def _train_step(run: Run, model_fn: Callable, params, tokens, targets) -> Callable[[], None]:
    """One bf16 (autocast) training step: forward, the LM head on the masked positions only (as fairseq's and
    ModernBERT's sparse MLM do), cross entropy, backward, AdamW step. ``model_fn(tokens, rows)``: float
    logits ``[rows.numel(), vocab]`` at int64 ``rows``, the masked positions of the flattened
    ``[batch * length]`` (found once, so that the step itself needs no host synchronisation)."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(params, lr=1e-5)
    amp = torch.autocast(device_type=run.device.type, dtype=torch.bfloat16, enabled=run.cuda)
    rows = (targets.flatten() != -100).nonzero().squeeze(1)
    labels = targets.flatten()[rows]

    def step():
        with amp:
            logits = model_fn(tokens, rows)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _etc_mlm(enc, head) -> Callable:
    """(tokens, rows) -> the LM head's logits at the masked long positions (:func:`_train_step`)."""
    return lambda t, rows: head(enc(t).long_features.flatten(0, 1)[rows])


def _etc_params(enc, head) -> list:
    """The encoder's parameters and the head's own (its output projection is the tied embedding)."""
    return list(enc.parameters()) + [head.bias, *head.dense.parameters(), *head.layer_norm.parameters()]


def _hf_model(run: Run, name: str, length: int, quick: bool):
    """(forward: (tokens, rows) -> logits at the masked positions (:func:`_train_step`), parameters, attention used, vocabulary,
    attention implementations that failed) of HF ModernBERT-base or BERT-base, random init from their configs
    (never downloaded)."""
    q = QUICK_SIZES
    small = dict(hidden_size=q["width"], intermediate_size=q["ffn"], num_attention_heads=q["heads"],
                 vocab_size=q["vocab"]) if quick else {}
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM

        cfg = BertConfig(num_hidden_layers=q["layers"] if quick else 12, **small)
        tried = ["sdpa"]
        model_cls, vocab = BertForMaskedLM, cfg.vocab_size
    else:
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2) if quick else {}
        cfg = ModernBertConfig(num_hidden_layers=3 if quick else 22, max_position_embeddings=max(8192, length),
                               **small, **special)
        tried = ["flash_attention_2", "flex_attention", "sdpa"] if run.cuda else ["sdpa"]
        model_cls, vocab = ModernBertForMaskedLM, cfg.vocab_size
    errors = {}
    for attn in tried:
        try:
            model = model_cls._from_config(cfg, attn_implementation=attn).to(run.device)
            model.train()
            if name == "bert":
                fn = (lambda t, rows: model.cls(model.bert(input_ids=t).last_hidden_state.flatten(0, 1)[rows]))
            else:
                fn = (lambda t, rows: model.decoder(model.head(
                    model.model(input_ids=t).last_hidden_state.flatten(0, 1)[rows])))
            return fn, list(model.parameters()), attn, vocab, errors
        except Exception as e:  # noqa: BLE001 -- an implementation this machine lacks (flash-attn not installed)
            errors[attn] = _failed(e)
    raise RuntimeError(f"no attention implementation of {name} runs here: {errors}")


def part_model(run: Run, lengths: List[int]) -> Dict:
    import torch

    warmup, repeats = (1, 1) if run.quick else (2, 3)
    rows = []
    jobs = [("etc_base", n, 1) for n in lengths] + [("modernbert_base", n, 1) for n in lengths] + [("bert_base", 512 if not run.quick else 128, 16 if not run.quick else 2)]
    for name, length, batch in jobs:
        row = dict(model=name, length=length, batch=batch)
        if run.left() < 0:
            rows.append(dict(row, status="skipped: time budget"))
            continue
        try:
            if name == "etc_base":
                enc, head = _etc_base(run, run.quick)
                enc.train()
                row["attention"] = enc.attention_impl(run.device)
                fn, params, vocab = _etc_mlm(enc, head), _etc_params(enc, head), enc.vocab_size
            else:
                fn, params, attn, vocab, errors = _hf_model(run, "bert" if name == "bert_base" else "modernbert", length, run.quick)
                row.update(attention=attn, unavailable_attention=errors)
            tokens, targets = _mlm_batch(run, batch, length, vocab)
            step = _train_step(run, fn, params, tokens, targets)
            row.update(run.time(step, warmup, repeats), status="ok")
            row["tokens_per_s"] = batch * length / (row["time_ms"] / 1000)
            if run.cuda and name == "etc_base":
                row["host_syncs_in_an_eager_step"] = _host_syncs(run, step)
        except Exception as e:  # noqa: BLE001
            row["status"] = _failed(e)
        finally:
            fn = params = step = None
            if run.cuda:
                torch.cuda.empty_cache()
        rows.append(row)
        print(f"  model {name} x{length}: {row['status']} {row.get('tokens_per_s', float('nan')):.0f} tokens/s",
              file=sys.stderr, flush=True)
    ok = {(r["model"], r["length"]): r for r in rows if r.get("status") == "ok"}
    bert = next((r for r in rows if r["model"] == "bert_base" and r.get("status") == "ok"), None)
    for r in rows:
        if r.get("status") != "ok":
            continue
        mb = ok.get(("modernbert_base", r["length"]))
        if r["model"] == "etc_base" and mb:
            r["tokens_per_s_vs_modernbert"] = r["tokens_per_s"] / mb["tokens_per_s"]
        if r["model"] == "etc_base" and bert:
            r["per_token_cost_vs_bert_512"] = bert["tokens_per_s"] / r["tokens_per_s"]
    return dict(precision="bf16 autocast" if run.cuda else "float32", optimizer="AdamW", rows=rows)


def _host_syncs(run: Run, step: Callable[[], object]) -> int:
    """Host synchronisations CUDA reports (``torch.cuda.set_sync_debug_mode("warn")``) in one call of ``step``."""
    import warnings

    import torch

    run.sync()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
            run.sync()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


#: masked positions per capacity step: the LM head's logits grow with the vocabulary, not the encoder
CAPACITY_MASKED = 8192


def part_capacity(run: Run, start: int, max_len: int) -> Dict:
    import torch

    rows = []
    length = start
    while length <= max_len:
        row = dict(long_len=length)
        if run.left() < 0:
            rows.append(dict(row, status="skipped: time budget"))
            break
        try:
            enc, head = _etc_base(run, run.quick, checkpoint_activations=True)
            enc.train()
            tokens, targets = _mlm_batch(run, 1, length, enc.vocab_size, max_masked=CAPACITY_MASKED)
            step = _train_step(run, _etc_mlm(enc, head), _etc_params(enc, head), tokens, targets)
            row.update(run.time(step, 1, 1), status="ok", attention=enc.attention_impl(run.device))
            if run.cuda:
                row["peak_total_gb"] = torch.cuda.max_memory_allocated(run.device) / 2**30
        except Exception as e:  # noqa: BLE001
            row["status"] = "out of memory" if _is_oom(e) else _failed(e)
        finally:
            enc = head = step = params = None
            if run.cuda:
                torch.cuda.empty_cache()
        rows.append(row)
        print(f"  capacity {length}: {row['status']}", file=sys.stderr, flush=True)
        if row["status"] != "ok":
            break
        length *= 2
    trained = [r["long_len"] for r in rows if r["status"] == "ok"]
    return dict(checkpoint_activations=True, masked_positions=CAPACITY_MASKED,
                longest_trained=max(trained) if trained else None, rows=rows)


# ---------------------------------------------------------------------------------------------------------
# smoke: which flex kernel options compile and run on this GPU
# ---------------------------------------------------------------------------------------------------------

#: ``flex_attention`` kernel options the smoke part tries in turn: torch's defaults, then fewer pipeline
#: stages and smaller tiles (less shared memory per block: the mask and label functions read several
#: tables per tile, and torch's default tiles asked for 1.4 MB of an H200's 227 KB)
KERNEL_OPTION_LADDER = (
    {},
    {"num_stages": 1},
    {"fwd_BLOCK_M": 64, "fwd_BLOCK_N": 64, "bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64,
     "bwd_BLOCK_N2": 32, "num_stages": 1},
    {"fwd_BLOCK_M": 32, "fwd_BLOCK_N": 32, "bwd_BLOCK_M1": 16, "bwd_BLOCK_N1": 32, "bwd_BLOCK_M2": 32,
     "bwd_BLOCK_N2": 16, "num_stages": 1, "num_warps": 4},
)


def smoke_child(run: Run, length: int) -> Dict:
    """One try of :func:`part_smoke` (in its own process, kernel options from ``ETC_FLEX_KERNEL_OPTIONS``):
    the flex path's first call (compilation included) and then its median of 3, through one ``etc_base``
    layer (a bf16 training step) and through the attention benchmark's plan (forward + backward)."""
    import torch

    out: Dict = dict(status="ok")
    backward = run.cuda  # no flex backward on CPU
    try:
        enc, head = _etc_base(run, run.quick, encoder_layers=1)
        enc.backend = "flex"
        enc.train(backward)
        tokens, targets = _mlm_batch(run, 1, length, enc.vocab_size)
        if backward:
            step = _train_step(run, _etc_mlm(enc, head), _etc_params(enc, head), tokens, targets)
        else:
            def step():
                with torch.no_grad():
                    return enc(tokens)
        t0 = time.perf_counter()
        step()
        run.sync()
        out.update(model_first_step_s=time.perf_counter() - t0,
                   model_step_ms=run.time(step, 0, 1 if run.quick else 3)["time_ms"])
    except Exception as e:  # noqa: BLE001 -- the result of the try
        out.update(status=_failed(e), model=_failed(e))
    try:
        etc, _, _ = _etc_steps(run, length, 16 if run.quick else bench_inputs.GLOBAL_LEN,
                               torch.bfloat16 if run.cuda else torch.float32, backward)
        t0 = time.perf_counter()
        etc["flex"]()
        run.sync()
        out.update(attention_first_call_s=time.perf_counter() - t0,
                   attention_ms=run.time(etc["flex"], 0, 1 if run.quick else 3)["time_ms"])
    except Exception as e:  # noqa: BLE001
        out["attention"] = _failed(e)
    return out


def part_smoke(run: Run, length: int, per_try_s: float) -> Dict:
    """:data:`KERNEL_OPTION_LADDER` tried in turn (:func:`smoke_child`, one subprocess each, at most
    ``per_try_s``) until the model's flex path compiles and runs; the process then uses those options."""
    from etc_fairseq.attention.flex import KERNEL_OPTIONS_ENV, set_flex_kernel_options

    rows, chosen = [], None
    for options in KERNEL_OPTION_LADDER:
        row: Dict = dict(kernel_options=options)
        if run.left() < 0:
            rows.append(dict(row, status="skipped: time budget"))
            break
        cmd = [sys.executable, "-m", "benchmarks.gpu_suite", "--device", str(run.device), "--smoke-child",
               "--smoke-length", str(length)] + (["--quick"] if run.quick else [])
        env = dict(os.environ, **{KERNEL_OPTIONS_ENV: json.dumps(options)})
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=per_try_s)
            lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
            if lines:
                row.update(json.loads(lines[-1]))
            else:
                last = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
                row["status"] = f"failed: exit {p.returncode}: {last}"
        except subprocess.TimeoutExpired:
            row["status"] = f"failed: not done in {per_try_s:.0f} s"
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(f"  smoke {json.dumps(options)}: {row['status']}", file=sys.stderr, flush=True)
        if row["status"] == "ok":
            chosen = options
            break
    if chosen is None:
        run.flex_skipped = "skipped: no kernel options in the smoke part compiled the flex path"
    else:
        set_flex_kernel_options(chosen or None)
    return dict(length=length, per_try_s=per_try_s, chosen=chosen, rows=rows)


# ---------------------------------------------------------------------------------------------------------
# (e) compile counts
# ---------------------------------------------------------------------------------------------------------


def part_compile(run: Run, length: int, new_length: int, layers: int) -> Dict:
    import torch
    import torch.nn.functional as F
    from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend
    from torch._dynamo.utils import counters

    if run.flex_skipped:
        return dict(skipped=run.flex_skipped)
    enc, head = _etc_base(run, run.quick, dropout=0.0, encoder_layers=2 if run.quick else layers)
    enc.backend = "flex"
    enc.train(run.cuda)
    train = run.cuda  # CPU flex attention has no backward: forward + loss only

    def step(tokens, targets):
        with torch.autocast(device_type=run.device.type, dtype=torch.bfloat16, enabled=run.cuda):
            logits = head(enc(tokens).long_features)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)

    def batch(seed, n):
        tokens, targets = _mlm_batch(run, 1, n, enc.vocab_size, seed)
        tokens[0, n - 1 - 37 * seed:] = 1  # different padding in every batch
        return tokens, targets

    torch._dynamo.reset()
    counters.clear()
    cnt = CompileCounterWithBackend("inductor") if run.cuda else CompileCounter()
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend=cnt)
    out = dict(backend="inductor" if run.cuda else "dynamo only (CompileCounter)", length=length,
               layers=len(enc.layers), with_backward=train)
    t0 = time.perf_counter()
    with torch.set_grad_enabled(train):
        for seed in range(5):
            loss = compiled(*batch(seed, length))
            if train:
                loss.backward()
        run.sync()
        out.update(compilations_5_batches=cnt.frame_count, first_5_batches_s=time.perf_counter() - t0)
        if run.cuda:
            tokens, targets = batch(7, length)
            out["host_syncs_in_a_compiled_step"] = _host_syncs(run, lambda: compiled(tokens, targets).backward())
        compiled(*batch(8, new_length))
    out.update(new_length=new_length, compilations_after_new_length=cnt.frame_count,
               graph_breaks=sum(counters["graph_break"].values()), unique_graphs=counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    return out


# ---------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------


def _isolated_part(run: Run, part: str, child_args: List[str], limit_s: float) -> Dict:
    """``part`` run in a subprocess (the kernel options and flex verdict of the smoke part passed on), stopped
    after ``limit_s`` seconds or at the end of the run's budget, whichever comes first; its JSON result."""
    from etc_fairseq.attention.flex import KERNEL_OPTIONS_ENV, flex_kernel_options

    cmd = [sys.executable, "-m", "benchmarks.gpu_suite", *child_args, "--part-child", "--parts", part,
           "--budget-s", str(max(run.left(), 1.0))] + (["--skip-flex", run.flex_skipped] if run.flex_skipped else [])
    env = dict(os.environ, **{KERNEL_OPTIONS_ENV: json.dumps(flex_kernel_options() or {})})
    limit = max(1.0, min(limit_s, run.left() + 30))
    try:  # the child's stderr (its progress lines) goes to ours
        p = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return dict(status=f"failed: not done in {limit:.0f} s (stopped)")
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else dict(status=f"failed: exit {p.returncode}, no result")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 1 repeat (the CPU test's mode)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="run in the order given")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time budget; a part that starts after it is skipped (default 450 on CUDA, 150 with --quick)")
    p.add_argument("--attention-lengths", type=int, nargs="+", default=None,
                   help="long lengths of the attention part (default 4096 16384 65536)")
    p.add_argument("--model-lengths", type=int, nargs="+", default=None,
                   help="long lengths of the whole-model part (default 8192 32768)")
    p.add_argument("--capacity-start", type=int, default=None, help="default 65536")
    p.add_argument("--capacity-max", type=int, default=None, help="default 4194304")
    p.add_argument("--compile-layers", type=int, default=12,
                   help="etc_base layers in the compile part (default all 12; compile counts do not depend on depth, "
                        "compile time does)")
    p.add_argument("--smoke-length", type=int, default=None, help="long length of the smoke part (default 4096)")
    p.add_argument("--smoke-try-s", type=float, default=150, help="time limit of one smoke try (default 150 s)")
    p.add_argument("--smoke-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run each part after the smoke part in a subprocess stopped after --part-limit-s, so that a "
                        "compilation that takes minutes cannot use the whole budget (default: on CUDA)")
    p.add_argument("--part-limit-s", type=float, default=180, help="time limit of an isolated part (default 180 s)")
    p.add_argument("--part-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--skip-flex", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="default benchmarks/results/gpu_suite_<device>.json")
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    quick = args.quick
    run = Run(device, quick, args.budget_s if args.budget_s is not None else (150 if quick else 450))
    smoke_length = args.smoke_length or (256 if quick else 4096)
    if args.smoke_child:  # one try of the smoke part: its result as one JSON line
        print(json.dumps(smoke_child(run, smoke_length)), flush=True)
        return 0
    run.flex_skipped = args.skip_flex
    isolate = run.cuda if args.isolate is None else args.isolate
    att_lengths = args.attention_lengths or ([300] if quick else [4096, 16384, 65536])
    model_lengths = args.model_lengths or ([256] if quick else [8192, 32768])
    cap_start = args.capacity_start or (512 if quick else 65536)
    cap_max = args.capacity_max or (512 if quick else 4 * 1048576)
    out_path = args.out or os.path.join(RESULTS_DIR, f"gpu_suite_{run.device.type}{'_quick' if quick else ''}.json")
    result = dict(
        description="ETC on one device: exactness, attention alone, whole-model training steps, compile counts, "
                    "capacity (benchmarks/gpu_suite.py's docstring says what each part measures)",
        command=command_line(__spec__.name if __spec__ else "benchmarks.gpu_suite", argv), device=device_info(run),
        versions=versions(), quick=quick, budget_s=run.budget_s, parts={},
    )
    print(f"command: {result['command']}\ndevice: {result['device']}", file=sys.stderr, flush=True)
    torch.manual_seed(0)
    jobs = {
        "smoke": lambda: part_smoke(run, smoke_length, args.smoke_try_s),
        "exactness": lambda: part_exactness(run),
        "attention": lambda: part_attention(run, att_lengths),
        "model": lambda: part_model(run, model_lengths),
        "compile": lambda: part_compile(run, 128 if quick else 4096, 256 if quick else 8192, args.compile_layers),
        "capacity": lambda: part_capacity(run, cap_start, cap_max),
    }
    if args.part_child:  # one isolated part: its result as one JSON line
        part = args.parts[0]
        try:
            out = dict(jobs[part](), status="ok")
        except Exception as e:  # noqa: BLE001
            out = dict(status=_failed(e), traceback=traceback.format_exc()[-3000:])
        out["fairseq_imported"] = any(m.split(".")[0] == "fairseq" for m in sys.modules)
        print(json.dumps(out), flush=True)
        return 0
    child_args = ["--device", device, "--attention-lengths", *map(str, att_lengths), "--model-lengths",
                  *map(str, model_lengths), "--capacity-start", str(cap_start), "--capacity-max", str(cap_max),
                  "--compile-layers", str(args.compile_layers)] + (["--quick"] if quick else [])
    child_fairseq = False
    for part in dict.fromkeys(args.parts):  # in the order given
        if run.left() < 0:
            result["parts"][part] = dict(status="skipped: time budget")
        else:
            t0 = time.perf_counter()
            print(f"[{part}] {run.left():.0f} s left", file=sys.stderr, flush=True)
            if isolate and part != "smoke":  # the smoke part isolates each of its tries itself
                result["parts"][part] = _isolated_part(run, part, child_args, args.part_limit_s)
                child_fairseq |= bool(result["parts"][part].pop("fairseq_imported", False))
            else:
                try:
                    result["parts"][part] = dict(jobs[part](), status="ok")
                except Exception as e:  # noqa: BLE001 -- one part failing must not lose the others
                    result["parts"][part] = dict(status=_failed(e), traceback=traceback.format_exc()[-3000:])
            result["parts"][part]["seconds"] = time.perf_counter() - t0
        result["fairseq_imported"] = child_fairseq or any(m.split(".")[0] == "fairseq" for m in sys.modules)
        result["seconds"] = time.perf_counter() - run.start
        write_json(out_path, result)  # after every part: a run cut short keeps what it measured
    print(f"wrote {out_path} ({result['seconds']:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
