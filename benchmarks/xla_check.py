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
   seed, ``--log-interval`` (1 unless given); the pre-training job validates every ``--validate-every``
   updates (15; 0: never);
3. records every update (wrappers around ``Trainer.train_step`` in the worker process; an update's counts run
   from the start of its train_step to the start of the next, so they include fairseq's logging of it): the
   unrounded loss fairseq logs, and on XLA torch_xla's metrics: ``CompileTime`` count (XLA compilations),
   ``ExecuteTime`` count (graph executions), ``TransferFromDeviceTime`` count (device-to-host transfers),
   every counter that moved (``aten::*`` counters are ops that fell back to the CPU;
   ``aten::_local_scalar_dense`` is a device value read on the host), and the file:line of every such read
   (:func:`trace_host_reads`); and every validation during training (around ``fairseq_cli.train.validate``):
   the unrounded valid loss, the compilations of each validation batch, and the same counts;
4. prints one table per job and writes it to ``--out`` (JSON; the jobs not run keep their recorded results,
   each with the versions and settings of the run it comes from).

Pass/fail (exit status 1 on failure): both runs train on the same batches (epoch, step in the epoch, words
and examples per batch equal at every update); every update's XLA loss equals the CPU loss within
``--rtol`` (1e-5, see docs/tpu.md; not compared with ``--log-interval`` > 1, see :func:`compare`); no
update compiles outside the warm-up (:func:`warming_up`); every valid loss equals the CPU run's within
``--rtol``; and no validation batch compiles except the first validation's first and last batch.
"""
import argparse
import json
import logging
import math
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
    "--log-format", "json", "--num-workers", "0", "--seed", "1", "--no-save",
]


def job_args(job: str, work: Path, updates: int, validate_every: int = 0, log_interval: int = 1) -> List[str]:
    """The fairseq-train arguments of a job (``--cpu`` / ``--tpu`` added by the worker). ``validate_every``:
    the pre-training job validates on its valid subset every that many updates (and after the last); the
    fine-tuning jobs never validate here (docs/tpu.md verifies their validation separately)."""
    common = COMMON_TRAIN + ["--log-interval", str(log_interval)]
    if job == "pretraining":
        valid = ["--validate-interval-updates", str(validate_every)] if validate_every else ["--disable-validation"]
        return [str(work / "pretrain" / "bin"), "--task", "etc_pretraining", "--criterion", "cpc_mlm",
                "--max-long-len", "128", "--max-global-len", "16", "--max-update", str(updates)] + common + valid
    common = common + ["--disable-validation"]
    if job == "wikihop":
        return [str(work / "wikihop"), "--task", "etc_wikihop", "--criterion", "etc_wikihop",
                "--max-long-len", "256", "--max-global-len", "48", "--max-update", str(updates)] + common
    if job == "hotpotqa":
        return [str(work / "hotpotqa"), "--task", "etc_hotpotqa", "--criterion", "etc_hotpotqa",
                "--max-long-len", str(HOTPOTQA_LONG), "--max-global-len", str(HOTPOTQA_GLOBAL),
                "--max-update", str(updates)] + common
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


#: torch.Tensor methods that read a tensor's value on the host (on an XLA tensor: aten::_local_scalar_dense,
#: or a whole-tensor copy for tolist / numpy)
HOST_READ_METHODS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


def _read_site() -> str:
    """Where a device value was read on the host: ``file:line function`` of the innermost caller outside
    torch / torch_xla / this file (path from site-packages or the repository on), followed by the innermost
    torch_xla frame in parentheses when torch_xla itself made the read for it."""
    import traceback

    def short(frame):
        path = frame.filename
        for root in ("site-packages/", str(REPO) + "/"):
            if root in path:
                path = path.split(root, 1)[1]
                break
        return f"{path}:{frame.lineno} {frame.name}"

    here = str(Path(__file__).resolve())
    inner = None
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename
        if "/torch_xla/" in path and inner is None:
            inner = frame
        if path == here or "/torch/" in path or "/torch_xla/" in path:
            continue
        return short(frame) + (f" (in {short(inner)})" if inner is not None else "")
    return "?"


def trace_host_reads(reads: List[str]) -> None:
    """Wrap :data:`HOST_READ_METHODS` of ``torch.Tensor`` so that every call on an XLA tensor appends its
    :func:`_read_site` to ``reads`` (the recorder itself reads no XLA tensor)."""
    import torch

    def wrap(name):
        method = getattr(torch.Tensor, name)

        def traced(self, *args, **kwargs):
            if self.device.type == "xla":
                reads.append(_read_site())
            return method(self, *args, **kwargs)

        traced.__name__ = name
        return traced

    for name in HOST_READ_METHODS:
        setattr(torch.Tensor, name, wrap(name))


def worker(mode: str, record_path: str, fairseq_args: List[str]) -> None:
    """Run ``fairseq-train`` (``--cpu`` or ``--tpu``) in this process and write one JSON line per update
    (``"kind": "update"``) and per validation (``"kind": "valid"``) to ``record_path``."""
    from collections import Counter

    from fairseq import trainer as trainer_mod
    from fairseq.logging import metrics
    from fairseq_cli import train as train_cli

    met = None
    reads: List[str] = []
    if mode == "xla":
        import torch_xla.debug.metrics as met  # noqa: F811

        trace_host_reads(reads)

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

    def xla_delta(now, last) -> Dict[str, object]:
        """What XLA did between two :func:`xla_state` snapshots, and the host reads traced in between."""
        delta = {
            "compiles": now["compiles"] - last["compiles"],
            "compile_s": round(now["compile_s"] - last["compile_s"], 3),
            "executions": now["executions"] - last["executions"],
            "transfers": now["transfers"] - last["transfers"],
            "counters": {k: v - last["counters"].get(k, 0) for k, v in now["counters"].items()
                         if v != last["counters"].get(k, 0)},
            "host_reads": dict(Counter(reads)),
        }
        reads.clear()
        return delta

    # An update's counts run from the start of its train_step to the start of the next one (or of a
    # validation, or the end of the run): they include fairseq's logging of the update, which runs after
    # train_step returns (fairseq_cli/train.py, every --log-interval updates). So its record is written
    # when that window closes.
    state = {"last": None, "epoch": 0, "in_epoch": 0, "valid": None, "pending": None}
    original_begin_epoch = trainer_mod.Trainer.begin_epoch

    def begin_epoch(self, epoch):
        state["epoch"], state["in_epoch"] = int(epoch), 0
        return original_begin_epoch(self, epoch)

    def close_update():
        rec, state["pending"] = state["pending"], None
        if rec is None:
            return
        if met is not None:
            rec.update(xla_delta(xla_state(), state["last"]))
            state["last"] = xla_state()
        records.write(json.dumps(rec) + "\n")
        records.flush()

    def train_step(self, samples, raise_oom=False):
        close_update()
        if met is not None and state["last"] is None:
            state["last"] = xla_state()  # model set-up and data loading before the first update are not counted
            reads.clear()
        t0 = time.perf_counter()
        out = original(self, samples, raise_oom)
        seconds = time.perf_counter() - t0
        state["in_epoch"] += 1
        rec = {"kind": "update", "update": self.get_num_updates(), "epoch": state["epoch"],
               "in_epoch": state["in_epoch"], "seconds": round(seconds, 4)}
        # the logged values, unrounded; not the ones still on the XLA device (gnorm, clip: reading them
        # here would be a host read of this recorder's, and would run their graph early)
        meters = metrics.get_meters("train_inner") or {}
        for key, meter in meters.items():
            value = getattr(meter, "avg", None) if hasattr(meter, "avg") else getattr(meter, "sum", None)
            if value is not None and not (hasattr(value, "device") and value.device.type == "xla"):
                rec[key] = float(value)
        state["pending"] = rec
        return out

    # validation during training (fairseq_cli.train.validate): the valid loss fairseq logs, unrounded, from the
    # logging outputs that Trainer.valid_step reduces (on the host already: fairseq sends them to the CPU
    # under --tpu), and XLA's work per validation batch
    original_validate = train_cli.validate
    original_valid_step = trainer_mod.Trainer.valid_step
    original_reduce = trainer_mod.Trainer._reduce_and_log_stats

    def validate(cfg, trainer, task, epoch_itr, subsets):
        close_update()
        state["valid"] = {"loss": 0.0, "sample_size": 0.0, "batch_compiles": [], "batch_reads": []}
        before = xla_state() if met is not None else None
        t0 = time.perf_counter()
        losses = original_validate(cfg, trainer, task, epoch_itr, subsets)
        v, state["valid"] = state["valid"], None
        rec = {"kind": "valid", "update": trainer.get_num_updates(), "seconds": round(time.perf_counter() - t0, 3),
               "batches": len(v["batch_compiles"]), "loss": v["loss"] / max(v["sample_size"], 1) / math.log(2),
               "logged_loss": losses[0], "batch_compiles": v["batch_compiles"], "batch_reads": v["batch_reads"]}
        if met is not None:
            rec.update(xla_delta(xla_state(), before))
            state["last"] = xla_state()  # the next update's counts start after the validation
        records.write(json.dumps(rec) + "\n")
        records.flush()
        return losses

    def valid_step(self, sample, raise_oom=False):
        before = xla_state()["compiles"] if met is not None else 0
        n_reads = len(reads)
        out = original_valid_step(self, sample, raise_oom)
        if state["valid"] is not None:
            state["valid"]["batch_compiles"].append((xla_state()["compiles"] if met is not None else 0) - before)
            state["valid"]["batch_reads"].append(len(reads) - n_reads)
        return out

    def reduce_and_log_stats(self, logging_outputs, sample_size, grad_norm=None):
        if state["valid"] is not None and grad_norm is None and logging_outputs:
            # on the host already (fairseq sends them to the CPU under --tpu): no XLA read
            state["valid"]["loss"] += sum(float(log.get("loss", 0)) for log in logging_outputs)
            state["valid"]["sample_size"] += sum(float(log.get("sample_size", 0)) for log in logging_outputs)
        return original_reduce(self, logging_outputs, sample_size, grad_norm)

    trainer_mod.Trainer.train_step = train_step
    trainer_mod.Trainer.begin_epoch = begin_epoch
    trainer_mod.Trainer.valid_step = valid_step
    trainer_mod.Trainer._reduce_and_log_stats = reduce_and_log_stats
    train_cli.validate = validate
    # torch_xla's import-time warning configured the root logger first; fairseq's INFO lines are wanted too
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO,
                        stream=sys.stdout, force=True)
    sys.argv = ["fairseq-train"] + fairseq_args + (["--tpu"] if mode == "xla" else ["--cpu"])
    train_cli.cli_main()
    close_update()
    records.close()


def run_worker(mode: str, job: str, work: Path, fairseq_args: List[str]) -> List[dict]:
    record = work / f"{job}.{mode}.jsonl"
    log = work / f"{job}.{mode}.log"
    env = dict(os.environ)
    if mode == "xla":
        env["PJRT_DEVICE"] = "CPU"
        env["ETC_FAIRSEQ_FIXES"] = "xla"
    cmd = [sys.executable, __file__, "--worker", mode, "--record", str(record), "--"] + fairseq_args
    print(f"[xla_check] {job} / {mode}: {' '.join(cmd[1:])}  (log: {log})", flush=True)
    t0 = time.time()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8").splitlines()[-25:]
        raise SystemExit(f"[xla_check] {job} / {mode} failed (exit {proc.returncode}); last lines of {log}:\n" + "\n".join(tail))
    print(f"[xla_check] {job} / {mode}: {time.time() - t0:.0f} s", flush=True)
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


def warming_up(rec: dict, warmup: int, log_interval: int = 1) -> bool:
    """The first ``warmup`` logged updates (every ``log_interval``-th: fairseq's logging builds its graphs
    then) of the run, the last update of its first epoch and the first ``warmup`` logged updates of its
    second (fairseq's end-of-epoch logging, counted with the update it follows, and the first steps after it
    build their graphs once) may compile; every other update must not. ``rec["epoch_end"]``: the last update
    recorded in its epoch (set by :func:`compare`)."""
    return ((rec["in_epoch"] <= warmup * log_interval and rec["epoch"] <= 2)
            or (rec.get("epoch_end", False) and rec["epoch"] == 1))


def _updates(records: List[dict]) -> List[dict]:
    return [r for r in records if r.get("kind", "update") == "update"]


def _validations(records: List[dict]) -> List[dict]:
    return [r for r in records if r.get("kind") == "valid"]


def _sites(reads: Dict[str, int]) -> str:
    return "; ".join(f"{site} x{n}" for site, n in sorted(reads.items())) or "-"


def compare_validations(job: str, cpu: List[dict], xla: List[dict], rtol: float, failures: List[str]) -> List[dict]:
    """Validations during training: the valid loss of the XLA run against the CPU run's (``rtol``), and XLA
    compilations per validation batch: the first validation compiles its graphs (the first batch, and a
    last batch with fewer examples), no later batch and no later validation compiles."""
    rows = []
    for k, (c, x) in enumerate(zip(cpu, xla)):
        rel = abs(x["loss"] - c["loss"]) / max(abs(c["loss"]), 1e-12)
        compiles = x["batch_compiles"]
        # the batches that may compile: the first validation's first and last (a smaller last batch is a new shape)
        allowed = {0, len(compiles) - 1} if k == 0 else set()
        late = [i + 1 for i, n in enumerate(compiles) if n and i not in allowed]
        rows.append({"update": c["update"], "batches": x["batches"], "valid_loss_cpu": c["loss"], "valid_loss_xla": x["loss"],
                     "logged_cpu": c["logged_loss"], "logged_xla": x["logged_loss"], "rel_diff": rel,
                     "compiles": x["compiles"], "compiles_first_batch": compiles[0] if compiles else 0,
                     "compiles_last_batch": compiles[-1] if len(compiles) > 1 else 0,
                     "compiles_other_batches": sum(n for i, n in enumerate(compiles) if i not in {0, len(compiles) - 1}),
                     "executions": x["executions"], "transfers": x["transfers"],
                     "host_reads": x["host_reads"], "reads_per_batch": sorted(set(x["batch_reads"])),
                     "host_fallbacks": {k2: v for k2, v in x["counters"].items() if k2.startswith("aten::")},
                     "seconds_cpu": c["seconds"], "seconds_xla": x["seconds"]})
        if rel > rtol:
            failures.append(f"validation after update {c['update']}: valid loss cpu {c['loss']:.6f} xla {x['loss']:.6f} "
                            f"(rel {rel:.2e} > {rtol})")
        if c["batches"] != x["batches"] or c["update"] != x["update"]:
            failures.append(f"validation after update {c['update']}: {c['batches']} CPU batches, {x['batches']} XLA batches "
                            f"(after update {x['update']})")
        if late:
            failures.append(f"validation after update {c['update']}: XLA compilation(s) in batch(es) {late[:10]}")
    if len(cpu) != len(xla):
        failures.append(f"{len(cpu)} CPU validations but {len(xla)} XLA validations")
    if rows:
        print(f"\n{job}: validation after update  batches  valid_loss_cpu  valid_loss_xla  rel_diff  compiles (first/last/other batches)"
              f"  s_cpu  s_xla  host reads")
    for r in rows:
        print(f"{job}: {r['update']:24d}  {r['batches']:7d}  {r['valid_loss_cpu']:14.6f}  {r['valid_loss_xla']:14.6f}  {r['rel_diff']:.1e}"
              f"  {r['compiles']:3d} ({r['compiles_first_batch']}/{r['compiles_last_batch']}/{r['compiles_other_batches']})"
              f"  {r['seconds_cpu']:6.1f}  {r['seconds_xla']:6.1f}  {_sites(r['host_reads'])}")
    return rows


def compare(job: str, cpu_records: List[dict], xla_records: List[dict], warmup: int, rtol: float,
            log_interval: int = 1) -> dict:
    """Per update: the same batch and loss (``rtol``) in both runs, and no XLA compilation after the
    warm-up; then the validations (:func:`compare_validations`). With ``log_interval`` > 1 the per-update
    losses are not compared: fairseq under ``--tpu`` reduces only every ``log_interval``-th update's
    logging output, the CPU run averages over the interval."""
    cpu, xla = _updates(cpu_records), _updates(xla_records)
    nan = float("nan")
    for i, x in enumerate(xla):
        x["epoch_end"] = i + 1 == len(xla) or xla[i + 1]["epoch"] != x["epoch"]
    rows, failures = [], []
    for c, x in zip(cpu, xla):
        if log_interval == 1:
            rel = abs(x["loss"] - c["loss"]) / max(abs(c["loss"]), 1e-12)
        else:
            rel = nan
            c, x = dict(c, loss=nan), dict(x, loss=nan)
        rows.append({"update": c["update"], "epoch": x["epoch"], "in_epoch": x["in_epoch"], "epoch_end": x["epoch_end"],
                     "loss_cpu": c["loss"], "loss_xla": x["loss"], "rel_diff": rel,
                     "compiles": x["compiles"], "compile_s": x["compile_s"], "executions": x["executions"],
                     "transfers": x["transfers"],
                     # aten:: counters: ops XLA ran on the host; _local_scalar_dense = a device value read
                     "host_fallbacks": {k: v for k, v in x["counters"].items() if k.startswith("aten::")},
                     # where each device value was read on the host (benchmarks/xla_check.py trace_host_reads)
                     "host_reads": x.get("host_reads", {}),
                     "seconds_cpu": c["seconds"],
                     "seconds_xla": x["seconds"]})
        if rel > rtol:
            failures.append(f"update {c['update']}: loss cpu {c['loss']:.6f} xla {x['loss']:.6f} (rel {rel:.2e} > {rtol})")
        if (c["epoch"], c["in_epoch"]) != (x["epoch"], x["in_epoch"]) or (
                log_interval == 1 and (c["wpb"], c["bsz"]) != (x["wpb"], x["bsz"])):
            failures.append(f"update {c['update']}: cpu at epoch {c['epoch']} step {c['in_epoch']}, xla at "
                            f"epoch {x['epoch']} step {x['in_epoch']}, words per batch {c.get('wpb')} vs {x.get('wpb')} (different batches)")
        if x["compiles"] and not warming_up(x, warmup, log_interval):
            failures.append(f"update {c['update']}: {x['compiles']} XLA compilation(s) after the warm-up")
    if len(cpu) != len(xla):
        failures.append(f"{len(cpu)} CPU updates but {len(xla)} XLA updates")
    print(f"\n{job}: update  epoch/step  loss_cpu   loss_xla   rel_diff  compiles  executions  transfers  s_cpu  s_xla  CPU fallbacks")
    for r in rows:
        moved = ", ".join(f"{k}+{v}" for k, v in sorted(r["host_fallbacks"].items())) or "-"
        print(f"{job}: {r['update']:6d}  {r['epoch']:5d}/{r['in_epoch']:<4d}  {r['loss_cpu']:.6f}  {r['loss_xla']:.6f}  {r['rel_diff']:.1e}  {r['compiles']:8d}"
              f"  {r['executions']:10d}  {r['transfers']:9d}  {r['seconds_cpu']:5.2f}  {r['seconds_xla']:5.2f}  {moved}")
    # where the host reads came from: each distinct pattern of read sites, and the updates that had it
    patterns: Dict[str, List[int]] = {}
    for r in rows:
        patterns.setdefault(_sites(r["host_reads"]), []).append(r["update"])
    for sites, updates in patterns.items():
        shown = ", ".join(map(str, updates[:8])) + (", ..." if len(updates) > 8 else "")
        print(f"{job}: host reads in {len(updates)} update(s) ({shown}): {sites}")
    valid_rows = compare_validations(job, _validations(cpu_records), _validations(xla_records), rtol, failures)
    for what, r in [("update", r) for r in rows] + [("validation after update", r) for r in valid_rows]:
        traced, counted = sum(r["host_reads"].values()), r["host_fallbacks"].get("aten::_local_scalar_dense", 0)
        if traced != counted:
            print(f"{job}: {what} {r['update']}: {traced} traced reads, aten::_local_scalar_dense +{counted} "
                  f"(tolist / numpy copy whole tensors; other reads were not traced)")
    after = [r for r in rows if not warming_up(r, warmup, log_interval)]
    summary = {
        "updates": len(rows),
        "epochs": max((r["epoch"] for r in rows), default=0),
        "compiles_warmup": sum(r["compiles"] for r in rows if warming_up(r, warmup, log_interval)),
        "compiles_after_warmup": sum(r["compiles"] for r in after),
        "max_rel_diff": max((r["rel_diff"] for r in rows if log_interval == 1), default=nan),
        "max_abs_diff": max((abs(r["loss_xla"] - r["loss_cpu"]) for r in rows if log_interval == 1), default=nan),
        "mean_seconds_xla_after_warmup": sum(r["seconds_xla"] for r in after) / max(len(after), 1),
        "mean_seconds_cpu_after_warmup": sum(r["seconds_cpu"] for r in after) / max(len(after), 1),
        "validations": len(valid_rows),
        "valid_max_rel_diff": max((r["rel_diff"] for r in valid_rows), default=None),
        "valid_compiles": [r["compiles"] for r in valid_rows],
        "failures": failures,
    }
    print(f"{job}: {summary['compiles_warmup']} compilations in the warm-up updates (the first {warmup} logged of epochs 1-2, "
          f"the last of epoch 1), "
          f"{summary['compiles_after_warmup']} in the other {len(after)} updates; "
          f"max relative loss difference {summary['max_rel_diff']:.2e}")
    if valid_rows:
        print(f"{job}: {len(valid_rows)} validations, compilations {summary['valid_compiles']}, max relative valid loss "
              f"difference {summary['valid_max_rel_diff']:.2e}")
    for f in failures:
        print(f"{job}: FAIL {f}")
    return {"summary": summary, "rows": rows, "validations": valid_rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", default=",".join(JOBS), help="comma-separated: " + ", ".join(JOBS))
    p.add_argument("--updates", type=int, default=45, help="updates per run (WikiHop: 20 per epoch)")
    p.add_argument("--warmup", type=int, default=3, help="logged updates allowed to compile (see warming_up)")
    p.add_argument("--rtol", type=float, default=1e-5, help="largest relative per-update loss difference XLA vs CPU")
    p.add_argument("--validate-every", type=int, default=15,
                   help="pre-training job: validate every that many updates during training (0: no validation)")
    p.add_argument("--log-interval", type=int, default=1, help="fairseq-train --log-interval")
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
                "warmup": args.warmup, "rtol": args.rtol, "validate_every": args.validate_every,
                "log_interval": args.log_interval, "date": time.strftime("%Y-%m-%d", time.gmtime())}
    # the jobs not run now keep their recorded results (each job records the run it comes from)
    result = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    result.setdefault("jobs", {})
    ok = True
    for job in [j.strip() for j in args.jobs.split(",") if j.strip()]:
        fairseq_args = job_args(job, args.work, args.updates, args.validate_every, args.log_interval)
        cpu = run_worker("cpu", job, args.work, fairseq_args)
        xla = run_worker("xla", job, args.work, fairseq_args)
        command = [a.replace(str(REPO), ".")
                   for a in job_args(job, Path("WORK"), args.updates, args.validate_every, args.log_interval)]
        result["jobs"][job] = {"run": run_info, "command": command, **compare(job, cpu, xla, args.warmup, args.rtol, args.log_interval)}
        ok = ok and not result["jobs"][job]["summary"]["failures"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\n[xla_check] {'PASS' if ok else 'FAIL'}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
