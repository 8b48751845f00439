"""ETC through fairseq's XLA training loop (``fairseq-train --tpu``) on the PJRT CPU backend, compared with the
plain CPU run: per-update losses and XLA compilations per update (issue 20).

Run it through ``scripts/xla_check.sh``, which creates ``.venv-xla`` (torch 2.9.0 + torch-xla 2.9.0, the
project and ve-fairseq) and calls this file with that interpreter::

    bash scripts/xla_check.sh                       # every job, 45 updates each
    bash scripts/xla_check.sh --jobs hotpotqa --updates 30

What it does, for each job (``pretraining``: etc_pretraining + cpc_mlm; ``wikihop``: etc_wikihop on the
CONSTRUCTED WikiHop-format files of examples/wikihop/construct.py; ``hotpotqa``: etc_hotpotqa on the
CONSTRUCTED HotpotQA-format records of examples/hotpotqa/construct.py), on the real Wikipedia sample the tests use:

1. prepares the data once under ``--work`` (default ``runs/xla_check``, git-ignored);
2. runs the same ``fairseq-train`` command twice in fresh processes, ``--cpu`` and ``--tpu`` with
   ``PJRT_DEVICE=CPU``: etc_tiny, ``--pad-to-fixed-length``, dropout 0 (XLA's RNG is not the CPU's), the same
   seed, ``--log-interval 1``;
3. records after every update (a wrapper around ``Trainer.train_step`` in the worker process): the unrounded
   loss fairseq logs, and on XLA torch_xla's metrics: ``CompileTime`` count (XLA compilations),
   ``ExecuteTime`` count (graph executions), ``TransferFromDeviceTime`` count (device-to-host transfers) and
   every counter that moved (``aten::*`` counters are ops that fell back to the CPU);
4. prints one table per job and writes it to ``--out`` (JSON; the jobs not run keep their recorded results,
   each with the versions and settings of the run it comes from).

Pass/fail (exit status 1 on failure): both runs train on the same batches (epoch, step in the epoch, words
and examples per batch equal at every update); every update's XLA loss equals the CPU loss within
``--rtol`` (1e-5, see docs/tpu.md); and no update compiles except the first ``--warmup`` updates of the run
and of its second epoch (fairseq's end-of-epoch logging builds its graphs once).
"""
import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]

# the Wikipedia-sample slices the tests use (tests/conftest.py PRETRAIN_FIXTURE_ARGS)
PRETRAIN_ARGS = dict(tokenizer="spm", vocab_size=1000, max_docs=12, valid_docs=2, min_sentences=7, max_sentence_pieces=128, seed=1)

COMMON_TRAIN = [
    "--user-dir", str(REPO / "user_dir"), "--arch", "etc_tiny", "--pad-to-fixed-length",
    "--dropout", "0", "--attention-dropout", "0", "--batch-size", "2", "--required-batch-size-multiple", "1",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--clip-norm", "1.0", "--lr", "1e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
    "--log-format", "json", "--log-interval", "1", "--num-workers", "0", "--seed", "1",
    "--disable-validation", "--no-save",
]


def job_args(job: str, work: Path, updates: int) -> List[str]:
    if job == "pretraining":
        return [str(work / "pretrain" / "bin"), "--task", "etc_pretraining", "--criterion", "cpc_mlm",
                "--max-long-len", "128", "--max-global-len", "16", "--max-update", str(updates)] + COMMON_TRAIN
    if job == "wikihop":
        return [str(work / "wikihop"), "--task", "etc_wikihop", "--criterion", "etc_wikihop",
                "--max-long-len", "256", "--max-global-len", "48", "--max-update", str(updates)] + COMMON_TRAIN
    if job == "hotpotqa":
        return [str(work / "hotpotqa"), "--task", "etc_hotpotqa", "--criterion", "etc_hotpotqa",
                "--max-long-len", str(HOTPOTQA_LONG), "--max-global-len", str(HOTPOTQA_GLOBAL),
                "--max-update", str(updates)] + COMMON_TRAIN
    raise ValueError(f"unknown job {job!r} ({', '.join(JOBS)})")


JOBS = ("pretraining", "wikihop", "hotpotqa")
#: HotpotQA budgets: the 5 CONSTRUCTED records (examples/hotpotqa/construct.py) become 4 training examples
#: (truncated to fit; the span answer of one is cut off, so it is skipped), i.e. 2 full batches of 2 per epoch
HOTPOTQA_LONG, HOTPOTQA_GLOBAL = 384, 64


def prepare(work: Path) -> None:
    """The two data directories under ``work`` (skipped when present)."""
    from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

    dump = fetch_wikipedia_sample(None)
    pre = work / "pretrain"
    if not (pre / "bin" / "dict.txt").is_file():
        from etc_fairseq.prepare.pretrain import prepare_pretraining

        print(f"[xla_check] preparing {pre}", flush=True)
        prepare_pretraining([dump], pre, **PRETRAIN_ARGS)
    wh = work / "wikihop"
    if not (wh / "train.meta.json").is_file():
        raw = work / "wikihop_raw"
        print(f"[xla_check] preparing {wh}", flush=True)
        subprocess.run([sys.executable, str(REPO / "examples/wikihop/construct.py"), "--dump", str(dump), "--out", str(raw),
                        "--train", "40", "--valid", "8", "--seed", "1"], check=True)
        subprocess.run([sys.executable, "-m", "etc_fairseq.cli.prepare", "wikihop", "--train", str(raw / "train.json"),
                        "--valid", str(raw / "dev.json"), "--out", str(wh), "--overwrite",
                        "--pretrain-dir", str(pre / "bin"), "--max-long-len", "256", "--max-global-len", "48"], check=True)
    hq = work / "hotpotqa"
    if not (hq / "train.meta.json").is_file():
        raw = work / "hotpotqa_raw"
        print(f"[xla_check] preparing {hq}", flush=True)
        subprocess.run([sys.executable, str(REPO / "examples/hotpotqa/construct.py"), "--dump", str(dump), "--out", str(raw)],
                       check=True)
        subprocess.run([sys.executable, "-m", "etc_fairseq.cli.prepare", "hotpotqa", "--train", str(raw / "constructed_train.json"),
                        "--valid", str(raw / "constructed_dev.json"), "--out", str(hq), "--overwrite",
                        "--pretrain-dir", str(pre / "bin"), "--max-long-len", str(HOTPOTQA_LONG),
                        "--max-global-len", str(HOTPOTQA_GLOBAL)], check=True)


# ----------------------------------------------------------------------------------------------------------
# worker: one fairseq-train process, recording every update
# ----------------------------------------------------------------------------------------------------------


def worker(mode: str, record_path: str, fairseq_args: List[str]) -> None:
    from fairseq import trainer as trainer_mod
    from fairseq.logging import metrics
    from fairseq_cli import train as train_cli

    met = None
    if mode == "xla":
        import torch_xla.debug.metrics as met  # noqa: F811

    records = open(record_path, "w", encoding="utf-8")
    original = trainer_mod.Trainer.train_step

    def xla_state() -> Dict[str, object]:
        compile_data = met.metric_data("CompileTime")
        execute_data = met.metric_data("ExecuteTime")
        transfer_data = met.metric_data("TransferFromDeviceTime")
        return {
            "compiles": compile_data[0] if compile_data else 0,
            "compile_s": compile_data[1] / 1e9 if compile_data else 0.0,
            "executions": execute_data[0] if execute_data else 0,
            "transfers": transfer_data[0] if transfer_data else 0,
            "counters": {name: met.counter_value(name) for name in met.counter_names()},
        }

    state = {"last": None, "epoch": 0, "in_epoch": 0}
    original_begin_epoch = trainer_mod.Trainer.begin_epoch

    def begin_epoch(self, epoch):
        state["epoch"], state["in_epoch"] = int(epoch), 0
        return original_begin_epoch(self, epoch)

    def train_step(self, samples, raise_oom=False):
        if met is not None and state["last"] is None:
            state["last"] = xla_state()
        t0 = time.perf_counter()
        out = original(self, samples, raise_oom)
        seconds = time.perf_counter() - t0
        now = xla_state() if met is not None else None  # before this recorder reads any device value
        state["in_epoch"] += 1
        rec = {"update": self.get_num_updates(), "epoch": state["epoch"], "in_epoch": state["in_epoch"],
               "seconds": round(seconds, 4)}
        meters = metrics.get_meters("train_inner") or {}
        for key, meter in meters.items():
            if hasattr(meter, "avg") and meter.avg is not None:  # AverageMeter: the logged value, unrounded
                rec[key] = float(meter.avg)
            elif hasattr(meter, "sum") and not hasattr(meter, "avg"):
                rec[key] = float(meter.sum)
        if met is not None:
            last = state["last"]
            rec["compiles"] = now["compiles"] - last["compiles"]
            rec["compile_s"] = round(now["compile_s"] - last["compile_s"], 3)
            rec["executions"] = now["executions"] - last["executions"]
            rec["transfers"] = now["transfers"] - last["transfers"]
            rec["counters"] = {
                k: v - last["counters"].get(k, 0) for k, v in now["counters"].items() if v != last["counters"].get(k, 0)
            }
            state["last"] = xla_state()  # the reads above (meters on the device) are not the next step's
        records.write(json.dumps(rec) + "\n")
        records.flush()
        return out

    trainer_mod.Trainer.train_step = train_step
    trainer_mod.Trainer.begin_epoch = begin_epoch
    # torch_xla's import-time warning configured the root logger first; fairseq's INFO lines are wanted too
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO,
                        stream=sys.stdout, force=True)
    sys.argv = ["fairseq-train"] + fairseq_args + (["--tpu"] if mode == "xla" else ["--cpu"])
    train_cli.cli_main()
    records.close()


def run_worker(mode: str, job: str, work: Path, updates: int) -> List[dict]:
    record = work / f"{job}.{mode}.jsonl"
    log = work / f"{job}.{mode}.log"
    env = dict(os.environ)
    if mode == "xla":
        env["PJRT_DEVICE"] = "CPU"
    cmd = [sys.executable, __file__, "--worker", mode, "--record", str(record), "--"] + job_args(job, work, updates)
    print(f"[xla_check] {job} / {mode}: {' '.join(cmd[1:])}  (log: {log})", flush=True)
    t0 = time.time()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8").splitlines()[-25:]
        raise SystemExit(f"[xla_check] {job} / {mode} failed (exit {proc.returncode}); last lines of {log}:\n" + "\n".join(tail))
    print(f"[xla_check] {job} / {mode}: {time.time() - t0:.0f} s", flush=True)
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


def warming_up(rec: dict, warmup: int) -> bool:
    """The first ``warmup`` updates of the run, and of its second epoch (fairseq's end-of-epoch logging and
    the first steps after it build their graphs once), may compile; every other update must not."""
    return rec["in_epoch"] <= warmup and rec["epoch"] <= 2


def compare(job: str, cpu: List[dict], xla: List[dict], warmup: int, rtol: float) -> dict:
    rows, failures = [], []
    for c, x in zip(cpu, xla):
        rel = abs(x["loss"] - c["loss"]) / max(abs(c["loss"]), 1e-12)
        rows.append({"update": c["update"], "epoch": x["epoch"], "in_epoch": x["in_epoch"], "loss_cpu": c["loss"], "loss_xla": x["loss"], "rel_diff": rel,
                     "compiles": x["compiles"], "compile_s": x["compile_s"], "executions": x["executions"],
                     "transfers": x["transfers"],
                     # aten:: counters: ops XLA ran on the host; _local_scalar_dense = a device value read
                     "host_fallbacks": {k: v for k, v in x["counters"].items() if k.startswith("aten::")},
                     "seconds_cpu": c["seconds"],
                     "seconds_xla": x["seconds"]})
        if rel > rtol:
            failures.append(f"update {c['update']}: loss cpu {c['loss']:.6f} xla {x['loss']:.6f} (rel {rel:.2e} > {rtol})")
        if (c["epoch"], c["in_epoch"], c["wpb"], c["bsz"]) != (x["epoch"], x["in_epoch"], x["wpb"], x["bsz"]):
            failures.append(f"update {c['update']}: cpu at epoch {c['epoch']} step {c['in_epoch']}, xla at "
                            f"epoch {x['epoch']} step {x['in_epoch']}, words per batch {c['wpb']} vs {x['wpb']} (different batches)")
        if x["compiles"] and not warming_up(x, warmup):
            failures.append(f"update {c['update']}: {x['compiles']} XLA compilation(s) after the warm-up")
    if len(cpu) != len(xla):
        failures.append(f"{len(cpu)} CPU updates but {len(xla)} XLA updates")
    print(f"\n{job}: update  epoch/step  loss_cpu   loss_xla   rel_diff  compiles  executions  transfers  s_cpu  s_xla  CPU fallbacks")
    for r in rows:
        moved = ", ".join(f"{k}+{v}" for k, v in sorted(r["host_fallbacks"].items())) or "-"
        print(f"{job}: {r['update']:6d}  {r['epoch']:5d}/{r['in_epoch']:<4d}  {r['loss_cpu']:.6f}  {r['loss_xla']:.6f}  {r['rel_diff']:.1e}  {r['compiles']:8d}"
              f"  {r['executions']:10d}  {r['transfers']:9d}  {r['seconds_cpu']:5.2f}  {r['seconds_xla']:5.2f}  {moved}")
    after = [r for r in rows if not warming_up(r, warmup)]
    summary = {
        "updates": len(rows),
        "epochs": max((r["epoch"] for r in rows), default=0),
        "compiles_warmup": sum(r["compiles"] for r in rows if warming_up(r, warmup)),
        "compiles_after_warmup": sum(r["compiles"] for r in after),
        "max_rel_diff": max((r["rel_diff"] for r in rows), default=None),
        "max_abs_diff": max((abs(r["loss_xla"] - r["loss_cpu"]) for r in rows), default=None),
        "mean_seconds_xla_after_warmup": sum(r["seconds_xla"] for r in after) / max(len(after), 1),
        "mean_seconds_cpu_after_warmup": sum(r["seconds_cpu"] for r in after) / max(len(after), 1),
        "failures": failures,
    }
    print(f"{job}: {summary['compiles_warmup']} compilations in the first {warmup} updates of epochs 1-2, "
          f"{summary['compiles_after_warmup']} in the other {len(after)} updates; "
          f"max relative loss difference {summary['max_rel_diff']:.2e}")
    for f in failures:
        print(f"{job}: FAIL {f}")
    return {"summary": summary, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", default=",".join(JOBS), help="comma-separated: " + ", ".join(JOBS))
    p.add_argument("--updates", type=int, default=45, help="updates per run (WikiHop: 20 per epoch)")
    p.add_argument("--warmup", type=int, default=3, help="updates allowed to compile")
    p.add_argument("--rtol", type=float, default=1e-5, help="largest relative per-update loss difference XLA vs CPU")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "xla_check")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "xla_check.json")
    p.add_argument("--worker", choices=["cpu", "xla"], help=argparse.SUPPRESS)
    p.add_argument("--record", help=argparse.SUPPRESS)
    p.add_argument("fairseq_args", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.record, args.fairseq_args)
        return 0

    import torch

    try:
        import torch_xla
    except ImportError:
        raise SystemExit("torch_xla is not installed in this interpreter: run scripts/xla_check.sh") from None
    args.work.mkdir(parents=True, exist_ok=True)
    prepare(args.work)
    run_info = {"torch": torch.__version__, "torch_xla": torch_xla.__version__, "updates": args.updates,
                "warmup": args.warmup, "rtol": args.rtol, "date": time.strftime("%Y-%m-%d", time.gmtime())}
    # the jobs not run now keep their recorded results (each job records the run it comes from)
    result = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    result.setdefault("jobs", {})
    ok = True
    for job in [j.strip() for j in args.jobs.split(",") if j.strip()]:
        cpu = run_worker("cpu", job, args.work, args.updates)
        xla = run_worker("xla", job, args.work, args.updates)
        command = [a.replace(str(REPO), ".") for a in job_args(job, Path("WORK"), args.updates)]
        result["jobs"][job] = {"run": run_info, "command": command, **compare(job, cpu, xla, args.warmup, args.rtol)}
        ok = ok and not result["jobs"][job]["summary"]["failures"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\n[xla_check] {'PASS' if ok else 'FAIL'}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
