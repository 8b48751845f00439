"""Training throughput through fairseq itself: ``fairseq-train`` words per second of ``etc_base`` at long
length 4096 (global 256, ``etc_pretraining`` + ``cpc_mlm``) against ``roberta_base`` at 512
(``masked_lm``), on the same data, in the same run (CPU, fp32).

Data: the real Wikipedia dump sample (``etc_fairseq.prepare.sample_data``; ``--dump`` to give another
dump) prepared twice with ONE sentencepiece model and dictionary: ``prepare_pretraining`` for ETC and
``prepare_mlm`` (reusing that model and dictionary) for RoBERTa.  Both runs see the same number of
tokens per update at most (ETC: batch 1 x up to 4096 long tokens, packed from whole sentences, so
often fewer; RoBERTa: batch 8 x 512); ``words_per_update_mean`` records what they saw.

Each run logs every update (``--log-format simple --log-interval 1``); the figure is the words per
second over all updates after the first (warm-up): the sum of their words (fairseq's ``wpb``: real,
non-padding tokens) over the sum of their times (``wpb / wps`` each), so that updates of different
sizes weigh by their size (the per-update median of ``wps`` is recorded too, as ``wps_median``).
Per-token cost = 1 / that; the goal in the issue: ETC's per-token cost at 4096 within 1.25x of
RoBERTa's at 512.

Usage::

    python -m benchmarks.fairseq_throughput --quick        # 3 updates each
    python -m benchmarks.fairseq_throughput --updates 20 --workdir /tmp/tp

Writes ``benchmarks/results/fairseq_throughput.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional


from benchmarks.harness import REPO, RESULTS_DIR, command_line, load_average, machine_info, write_json

WPS = re.compile(r"\bwps=([0-9.]+)")
WPB = re.compile(r"\bwpb=([0-9.]+)")


def prepare(dump: Path, workdir: Path, vocab_size: int, max_docs: Optional[int]) -> Dict[str, Path]:
    """Both data directories, sharing one sentencepiece model and dictionary."""
    from etc_fairseq.prepare.mlm import prepare_mlm
    from etc_fairseq.prepare.pretrain import prepare_pretraining

    pre_dir, mlm_dir = workdir / "pretrain", workdir / "mlm"
    pre = prepare_pretraining([dump], pre_dir, tokenizer="spm", vocab_size=vocab_size, max_docs=max_docs,
                              overwrite=True)
    pre_bin = Path(pre.bin_dir)
    mlm = prepare_mlm([dump], mlm_dir, spm_model=pre.tokenizer_files["spm_model"], srcdict=pre_bin / "dict.txt",
                      max_docs=max_docs, overwrite=True)
    return dict(etc=pre_bin, roberta=Path(mlm.bin_dir))


def train_command(name: str, data: Path, save_dir: Path, updates: int, threads: int) -> List[str]:
    common = ["--optimizer", "adam", "--lr", "1e-4", "--lr-scheduler", "fixed", "--cpu", "--seed", "1",
              "--num-workers", "0", "--log-format", "simple", "--log-interval", "1",
              "--max-update", str(updates), "--disable-validation", "--no-save", "--save-dir", str(save_dir)]
    exe = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    if name == "etc":
        return [exe, str(data), "--user-dir", os.path.join(REPO, "user_dir"), "--task", "etc_pretraining",
                "--criterion", "cpc_mlm", "--arch", "etc_base", "--max-long-len", "4096", "--max-global-len",
                "256", "--max-positions", "4096", "--batch-size", "1"] + common
    return [exe, str(data), "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta_base",
            "--tokens-per-sample", "512", "--sample-break-mode", "complete", "--batch-size", "8"] + common


def run_train(name: str, cmd: List[str], threads: int, timeout: float) -> Dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    log = proc.stdout + proc.stderr
    wps, wpb = [], []
    for line in log.splitlines():
        if "train_inner" in line or "| epoch" in line:
            m, b = WPS.search(line), WPB.search(line)
            if m and b:
                wps.append(float(m.group(1)))
                wpb.append(float(b.group(1)))
    row = dict(model=name, command=" ".join(shlex.quote(c) for c in cmd), returncode=proc.returncode,
               wall_s=round(time.time() - t0, 1), wps_per_update=wps, wpb_per_update=wpb)
    if proc.returncode != 0 or len(wps) < 2:
        row["status"] = f"failed (rc={proc.returncode}, {len(wps)} wps values): " + " | ".join(log.strip().splitlines()[-3:])[:400]
        return row
    # after the warm-up update: all words over all time (each update's time = wpb / wps)
    words = sum(wpb[1:])
    seconds = sum(b / w for b, w in zip(wpb[1:], wps[1:]) if w > 0)
    row.update(status="ok", wps=words / seconds, wps_median=statistics.median(wps[1:]),
               words_per_update_mean=words / len(wpb[1:]), cost_per_token_s=seconds / words)
    return row


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dump", default=None, help="Wikipedia dump (default: the sample in the repo cache)")
    p.add_argument("--workdir", default=None, help="data and scratch directory (default: a temp dir)")
    p.add_argument("--updates", type=int, default=None, help="updates per run (default 10; --quick 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-docs", type=int, default=None)
    p.add_argument("--timeout", type=float, default=7200.0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "fairseq_throughput.json"))
    args = p.parse_args(argv)
    updates = args.updates or (3 if args.quick else 10)
    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    import tempfile

    from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

    dump = Path(args.dump) if args.dump else fetch_wikipedia_sample(Path(os.environ.get("ETC_FAIRSEQ_CACHE", os.path.join(REPO, ".cache"))))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="etc_tp_"))
    workdir.mkdir(parents=True, exist_ok=True)
    load_before = load_average()
    data = prepare(dump, workdir, args.vocab_size, args.max_docs)
    rows = []
    for name in ("etc", "roberta"):
        save = workdir / f"save_{name}"
        cmd = train_command(name, data[name], save, updates, args.threads)
        print(f"running {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        rows.append(run_train(name, cmd, args.threads, args.timeout))
        shutil.rmtree(save, ignore_errors=True)
    ratio = None
    if all(r.get("status") == "ok" for r in rows):
        ratio = rows[0]["cost_per_token_s"] / rows[1]["cost_per_token_s"]
    lines = ["| model | input | words/update | words/s | words/s (median of updates) | per-token cost ms | status |",
             "|---|---|---:|---:|---:|---:|---|"]
    nan = float("nan")
    for r, inp in zip(rows, ("long 4096 + global 256", "512")):
        lines.append(f"| {r['model']} | {inp} | {r.get('words_per_update_mean', nan):.0f} | {r.get('wps', nan):.1f} | "
                     f"{r.get('wps_median', nan):.1f} | {1000 * r.get('cost_per_token_s', nan):.2f} | "
                     f"{r['status'][:60]} |")
    table = "\n".join(lines)
    print(table)
    print(f"per-token cost ETC@4096 / RoBERTa@512: {ratio if ratio is None else round(ratio, 3)} "
          f"(goal <= 1.25)")
    result = dict(description="fairseq-train throughput, etc_base@4096 vs roberta_base@512, same data",
                  command=command, updates=updates, machine=machine_info(args.threads),
                  load_average_before=load_before, load_average_after=load_average(),
                  results=rows, cost_ratio_etc_over_roberta=ratio, markdown_table=table)
    write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
