"""Longest input whose full-model forward+backward fits a memory budget (CPU, fp32).

Models (batch 1, train mode, ``checkpoint_activations`` on, vocabulary 30,522 as BERT's):

  ``etc``      ``etc_base`` (12 layers, 768 wide, radius 84, separate projections) with a long input
               of ``long_len`` tokens and 512 global tokens: a CONSTRUCTED sentence structure (512
               sentences with fixed-seed lengths, one global sentence token each, every long token
               belongs to its sentence).
  ``roberta``  fairseq's ``roberta_base`` (12 layers, dense attention) over ``long_len`` tokens
               (``max_positions`` raised to fit).

Loss: masked LM over 15% of the long positions (fixed seed), as in pre-training: the LM head runs on
the masked positions only.  One probe = build the model in a fresh subprocess, run one
forward+backward, and record the growth of the peak resident set (VmHWM, reset via
``/proc/self/clear_refs``) over the resident set after building the model and inputs, plus that
baseline (weights, inputs): ``total = baseline + growth`` is what the process needed.  A probe
fits when ``total <= budget`` and it did not crash.  Each probe runs under an allocation limit
(``RLIMIT_DATA``, ``--alloc-limit-gb``; default the budget + 1 GB, at most the machine's memory
- 1.5 GB), so a probe that cannot fit stops with an allocation error ("does not fit") instead of
driving the machine into the kernel's out-of-memory killer.

Search: probe ``--start``, double until a probe does not fit (or ``--max-len``), then bisect
between the last fit and the first miss down to ``--step`` tokens.

``--layers N`` probes an N-layer model instead of 12 and extrapolates: with checkpointing, every
further layer keeps only its inputs (``(long_len + global_len) * 768`` floats for ETC,
``long_len * 768`` for RoBERTa), so ``total(12) = total(N) + (12 - N) * that``; ``--quick`` uses
``--layers 2``, a 4 GB budget and 4096-token steps.  The JSON records which way each figure was
obtained.

Usage::

    python -m benchmarks.capacity --quick                      # development, a few minutes
    python -m benchmarks.capacity --budget-gb 24               # the full search (long: hours on 2 cores)
    python -m benchmarks.capacity --models etc --budget-gb 24 --layers 12 --start 65536 --max-len 65536
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

from benchmarks.harness import (
    REPO,
    RESULTS_DIR,
    command_line,
    load_average,
    machine_info,
    mem_total_gb,
    reset_peak_rss,
    status_kb,
    worker_command,
    write_json,
)
from benchmarks.inputs import sentence_lengths

VOCAB = 30522
GLOBAL_LEN = 512
HIDDEN = 768
FULL_LAYERS = 12
MASK_FRACTION = 0.15


def _dictionary():
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(VOCAB - len(d)):
        d.add_symbol(f"w{i}")
    return d


def build_etc(long_len: int, layers: int):
    """etc_base (``layers`` layers) and a step function running forward + MLM loss + backward."""
    import types

    import torch
    import torch.nn.functional as F

    from etc_fairseq.models import EtcModel, config_for_arch
    from etc_fairseq.structure.builders import segment_ids_from_lengths
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    d = _dictionary()
    cfg = config_for_arch("etc_base", encoder_layers=layers, max_positions=long_len,
                          max_global_positions=GLOBAL_LEN, checkpoint_activations=True)
    model = EtcModel.build_model(cfg, types.SimpleNamespace(source_dictionary=d))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(d.nspecial, len(d), (1, long_len), generator=gen)
    G = min(GLOBAL_LEN, long_len)
    segment = segment_ids_from_lengths(sentence_lengths(long_len, G)).unsqueeze(0)  # [1, long_len]
    global_tokens = torch.full((1, G), model.encoder.special_global_id, dtype=torch.long)
    global_types = torch.full((1, G), int(GlobalTokenType.SENTENCE), dtype=torch.long)
    masked = torch.rand(1, long_len, generator=gen) < MASK_FRACTION
    targets = tokens[masked]

    def step():
        logits, _ = model(tokens, masked_tokens=masked, global_tokens=global_tokens, global_types=global_types,
                          structure={"long_segment": segment})
        F.cross_entropy(logits.float(), targets).backward()

    per_layer_floats = (long_len + G) * HIDDEN
    return model, step, per_layer_floats


def build_roberta(long_len: int, layers: int):
    import argparse as ap
    import types

    import torch
    import torch.nn.functional as F
    from fairseq.models.roberta import RobertaModel
    from fairseq.models.roberta.model import base_architecture

    d = _dictionary()
    args = ap.Namespace(encoder_layers=layers, max_positions=long_len, checkpoint_activations=True,
                        untie_weights_roberta=False, encoder_layers_to_keep=None, encoder_layerdrop=0.0,
                        spectral_norm_classification_head=False, load_checkpoint_heads=False)
    base_architecture(args)
    model = RobertaModel.build_model(args, types.SimpleNamespace(source_dictionary=d, dictionary=d))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(d.nspecial, len(d), (1, long_len), generator=gen)
    masked = torch.rand(1, long_len, generator=gen) < MASK_FRACTION
    targets = tokens[masked]

    def step():
        logits, _ = model(tokens, masked_tokens=masked)
        F.cross_entropy(logits.float(), targets).backward()

    return model, step, long_len * HIDDEN


BUILDERS = dict(etc=build_etc, roberta=build_roberta)


def worker(name: str, long_len: int, layers: int, threads: int, alloc_limit_gb: float = 0.0) -> Dict:
    import gc
    import resource

    if alloc_limit_gb > 0:  # see the module docstring
        limit = int(alloc_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, step, per_layer_floats = BUILDERS[name](long_len, layers)
    model.train()
    gc.collect()
    base_kb = status_kb("VmRSS")
    reset_ok = reset_peak_rss()
    if not reset_ok:
        base_kb = status_kb("VmHWM")
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    peak_kb = status_kb("VmHWM")
    growth_gb = max(0, peak_kb - base_kb) / 2**20
    baseline_gb = base_kb / 2**20
    extra_layers = FULL_LAYERS - layers
    # each missing layer adds its checkpointed inputs plus its weights and their gradients
    layer_params = sum(p.numel() for p in model.encoder.sentence_encoder.layers[0].parameters())
    per_layer_gb = (per_layer_floats + 2 * layer_params) * 4 / 2**30
    return dict(
        baseline_gb=baseline_gb, growth_gb=growth_gb, total_gb=baseline_gb + growth_gb,
        extrapolated_total_gb=baseline_gb + growth_gb + extra_layers * per_layer_gb,
        seconds=seconds, layers=layers, peak_reset=reset_ok,
    )


def probe(name: str, long_len: int, args) -> Dict:
    cmd = worker_command(__spec__.name, [name, long_len, "--layers", args.layers, "--threads", args.threads,
                                         "--alloc-limit-gb", args.alloc_limit_gb])
    started = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return dict(long_len=long_len, fits=False, status=f"timeout after {args.timeout:.0f}s")
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
        if "can't allocate memory" in proc.stderr or "MemoryError" in proc.stderr:
            return dict(long_len=long_len, fits=False, wall_s=round(time.time() - started, 1),
                        status=f"does not fit: an allocation beyond the {args.alloc_limit_gb:g} GB limit "
                               f"was refused ({tail})")
        return dict(long_len=long_len, fits=False,
                    status=f"crashed rc={proc.returncode} (killed: likely out of memory): {tail}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    total = out["total_gb"] if args.layers == FULL_LAYERS else out["extrapolated_total_gb"]
    out.update(long_len=long_len, estimate_gb=total, fits=total <= args.budget_gb, status="ok",
               wall_s=round(time.time() - started, 1))
    return out


def search(name: str, args) -> Dict:
    probes: List[Dict] = []

    def run(n):
        r = probe(name, n, args)
        probes.append(r)
        print(f"  {name} long_len={n}: {r['status']} "
              f"{'%.2f GB' % r['estimate_gb'] if 'estimate_gb' in r else ''} fits={r['fits']}",
              file=sys.stderr, flush=True)
        return r["fits"]

    lo, hi = None, None
    n = args.start
    while n <= args.max_len:
        if run(n):
            lo = n
            n *= 2
        else:
            hi = n
            break
    if lo is None:
        return dict(model=name, longest_fitting=None, first_not_fitting=hi, probes=probes)
    if hi is not None:
        while hi - lo > args.step:
            mid = (lo + hi) // 2 // args.step * args.step
            if mid in (lo, hi):
                break
            if run(mid):
                lo = mid
            else:
                hi = mid
    return dict(model=name, longest_fitting=lo, first_not_fitting=hi, probes=probes)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["etc", "roberta"], choices=list(BUILDERS))
    p.add_argument("--budget-gb", type=float, default=None, help="memory budget (default 24; --quick 4)")
    p.add_argument("--layers", type=int, default=None, help="layers per probe (default 12; --quick 2, extrapolated)")
    p.add_argument("--start", type=int, default=None, help="first probe length (default 8192; --quick 4096)")
    p.add_argument("--step", type=int, default=None, help="bisection resolution (default 2048; --quick 4096)")
    p.add_argument("--max-len", type=int, default=262144)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per probe")
    p.add_argument("--alloc-limit-gb", type=float, default=None,
                   help="per-probe allocation limit (RLIMIT_DATA); default: the budget + 1 GB, at most the "
                        "machine's memory - 1.5 GB; 0 = none")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None, help="default benchmarks/results/capacity.json (--quick: capacity_quick.json)")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "LONG_LEN"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.layers or FULL_LAYERS, args.threads,
                                    args.alloc_limit_gb or 0.0)))
        return
    args.budget_gb = args.budget_gb or (4.0 if args.quick else 24.0)
    if args.alloc_limit_gb is None:
        machine_gb = mem_total_gb()
        args.alloc_limit_gb = round(min(args.budget_gb + 1.0, machine_gb - 1.5 if machine_gb else float("inf")), 2)
    args.layers = args.layers or (2 if args.quick else FULL_LAYERS)
    args.start = args.start or (4096 if args.quick else 8192)
    args.step = args.step or (4096 if args.quick else 2048)
    args.out = args.out or os.path.join(RESULTS_DIR, "capacity_quick.json" if args.quick else "capacity.json")
    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    load_before = load_average()
    started = time.time()
    results = [search(m, args) for m in args.models]
    lines = ["| model | longest long_len that fits | first that does not | budget GB | layers probed |",
             "|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['longest_fitting'] or '-'} | {r['first_not_fitting'] or '-'} | "
                     f"{args.budget_gb:g} | {args.layers}{'' if args.layers == FULL_LAYERS else ' (extrapolated to 12)'} |")
    table = "\n".join(lines)
    print(table)
    result = dict(
        description="longest input whose forward+backward (checkpoint_activations, MLM loss) fits the budget",
        command=command,
        config=dict(vocab=VOCAB, global_len=GLOBAL_LEN, budget_gb=args.budget_gb, layers_probed=args.layers,
                    extrapolated=args.layers != FULL_LAYERS, start=args.start, step=args.step,
                    mask_fraction=MASK_FRACTION, threads=args.threads, dtype="float32", batch=1,
                    alloc_limit_gb=args.alloc_limit_gb),
        machine=machine_info(args.threads),
        load_average_before=load_before,
        load_average_after=load_average(),
        results=results,
        markdown_table=table,
        total_seconds=round(time.time() - started, 1),
    )
    write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
