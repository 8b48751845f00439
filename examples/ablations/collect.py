"""Collect examples/ablations/run.sh's logs into one JSON and one PNG.

Per ablation and arm: the held-out metric of every seed, their mean and sample standard deviation (0 with one
seed) and, for fine-tuning arms, the held-out learning curve (mean over seeds at each validation). The
nextsent word-overlap and random baselines come from the ``valid.meta.json`` that ``etc-prepare nextsent``
wrote for the same held-out records.

Logs read (``RUN_DIR`` = ``--run-dir``):
  ft/<arm>-<seed>.log                fairseq-train --task etc_nextsent (with ``--arm``: any fine-tuning task
                                     whose validation lines carry accuracy, e.g. etc_wikihop), validation
                                     lines with num_updates
  lift/<arm>-<seed>.valid.log        fairseq-validate --task etc_pretraining (mlm_loss, mlm_accuracy)
  extrapolation/long<N>-<seed>.log   the same, at long length N

A log that is missing or has no validation line is one error line naming the file.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

#: a fairseq validation line (SimpleProgressBar: "[epoch 001 | ]valid on 'valid' subset | key value | ...")
VALID_LINE = re.compile(r"valid on 'valid' subset \| (.*)$", re.MULTILINE)

#: the fine-tuning arms of each nextsent ablation, in display order; LONG stands for the main long length
FINETUNE_ARMS = {
    "structure": ["structure", "flat", "noglobals", "roberta512"],
    "cpc": ["structure", "nocpc"],
    "g2l": ["structure", "nohardg2l"],
}
#: what each arm is, for the JSON and the plot
ARM_LABELS = {
    "structure": "ETC, sentence globals + structure, hard g2l",
    "flat": "ETC, same globals, flat (no hierarchy), hard g2l",
    "noglobals": "ETC, no global tokens (local only)",
    "roberta512": "RoBERTa, first 512 tokens",
    "nocpc": "ETC structure, pretrained MLM only",
    "nohardg2l": "ETC structure, pretrained + fine-tuned with soft g2l",
    "support1": "ETC structure, hard g2l, + support loss (weight 1)",
    "lifted": "ETC pretraining from lifted RoBERTa",
    "scratch": "ETC pretraining from scratch",
}


class CollectError(Exception):
    """A log or data file that cannot be read as expected (one line: the file and what is missing)."""


def _numeric_fields(fields: str, sep: str, kv: str) -> Dict[str, float]:
    """``"a 1 | b x | c 2"`` (sep ``" | "``, kv ``" "``) -> ``{"a": 1.0, "c": 2.0}``: non-numeric fields skipped."""
    stats = {}
    for part in fields.split(sep):
        key, _, value = part.strip().partition(kv)
        try:
            stats[key] = float(value)
        except ValueError:
            continue
    return stats


def parse_valid_lines(text: str) -> List[Dict[str, float]]:
    """Every validation line of a fairseq log, in order, as ``{key: float}`` (non-numeric fields skipped)."""
    return [_numeric_fields(m.group(1), " | ", " ") for m in VALID_LINE.finditer(text)]


#: a fairseq-train progress line ("epoch 001:     10 / 250 loss=5.1, accuracy=3, ..., num_updates=10, ...")
TRAIN_LINE = re.compile(r"epoch (\d+):\s+\d+ / \d+ (.*)$", re.MULTILINE)


def parse_train_lines(text: str) -> List[Dict[str, float]]:
    """Every training progress line of a fairseq-train log as ``{key: float}``, plus ``epoch``."""
    return [{"epoch": float(m.group(1)), **_numeric_fields(m.group(2), ", ", "=")} for m in TRAIN_LINE.finditer(text)]


def read_valid(path: Path) -> List[Dict[str, float]]:
    if not path.is_file():
        raise CollectError(f"{path}: missing (has run.sh run this ablation?)")
    lines = parse_valid_lines(path.read_text(encoding="utf-8", errors="replace"))
    if not lines:
        raise CollectError(f"{path}: no \"valid on 'valid' subset | ...\" line (did the run fail or stop early?)")
    return lines


def summary(values: Sequence[float]) -> Dict[str, float]:
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def finetune_arm(run_dir: Path, arm: str, seeds: Sequence[str]) -> dict:
    """One fine-tuning arm: final held-out accuracy (and MRR, where the task logs it: nextsent does, WikiHop
    does not) per seed, summaries, learning curve. Only fairseq-train's validation lines count (they carry
    ``num_updates``); a log may hold others (examples/wikihop/run.sh's fairseq-validate of the best checkpoint)."""
    per_seed, curves, train = {}, {}, {}
    for s in seeds:
        path = run_dir / "ft" / f"{arm}-{s}.log"
        lines = [x for x in read_valid(path) if "num_updates" in x]
        if not lines or any("accuracy" not in x for x in lines):
            raise CollectError(f"{path}: no fairseq-train validation line with num_updates and accuracy (not a fine-tuning log?)")
        last = lines[-1]
        per_seed[s] = {"accuracy": last["accuracy"]}
        if "mrr" in last:
            per_seed[s]["mrr"] = last["mrr"]
        per_seed[s].update(lost=last.get("lost", 0.0), loss=last["loss"], updates=int(last["num_updates"]))
        if "support_accuracy" in last:  # trained with etc_nextsent's --support-loss-weight
            per_seed[s]["support_accuracy"] = last["support_accuracy"]
        curves[s] = [(int(x["num_updates"]), x["accuracy"], x.get("mrr")) for x in lines]
        # first-epoch training batches are scored before the model has trained on them: an estimate of the
        # accuracy on unseen records of the *training* articles, next to the held-out articles' curve
        train[s] = [(int(x["num_updates"]), x["accuracy"]) for x in parse_train_lines(path.read_text(encoding="utf-8", errors="replace"))
                    if x.get("epoch") == 1 and "accuracy" in x and "num_updates" in x]
    has_mrr = all("mrr" in x for x in per_seed.values())
    updates = sorted({u for c in curves.values() for u, _, _ in c})
    curve = []
    for u in updates:
        acc = [a for c in curves.values() for (v, a, _) in c if v == u]
        if len(acc) == len(seeds):  # only points every seed reached
            point = {"updates": u, "accuracy": summary(acc)}
            if has_mrr:
                point["mrr"] = summary([r for c in curves.values() for (v, _, r) in c if v == u])
            curve.append(point)
    first_epoch = []
    for u in sorted({u for c in train.values() for u, _ in c}):
        acc = [a for c in train.values() for (v, a) in c if v == u]
        if len(acc) == len(seeds):
            first_epoch.append({"updates": u, "accuracy": summary(acc)})
    result = {"label": ARM_LABELS.get(arm, arm), "seeds": per_seed, "train_first_epoch": first_epoch,
              "accuracy": summary([x["accuracy"] for x in per_seed.values()])}
    if has_mrr:
        result["mrr"] = summary([x["mrr"] for x in per_seed.values()])
    result.update({"lost": summary([x["lost"] for x in per_seed.values()]),
                   "updates": sorted({x["updates"] for x in per_seed.values()}), "curve": curve})
    return result


def mlm_arm(paths: Dict[str, Path], label: str) -> dict:
    """Held-out MLM loss (bits) and accuracy of one pretraining arm, per seed (and CPC accuracy and
    candidates per batch, where every seed's log has them)."""
    per_seed = {}
    for s, path in paths.items():
        last = read_valid(path)[-1]
        if "mlm_loss" not in last:
            raise CollectError(f"{path}: the validation line has no mlm_loss (not an etc_pretraining log?)")
        per_seed[s] = {"mlm_loss": last["mlm_loss"], "mlm_accuracy": last.get("mlm_accuracy", float("nan"))}
        for key in ("cpc_accuracy", "cpc_candidates"):  # CPC too, where the run had it (nan: --cpc-weight 0)
            if key in last and not math.isnan(last[key]):
                per_seed[s][key] = last[key]
    out = {"label": label, "seeds": per_seed,
           "mlm_loss": summary([x["mlm_loss"] for x in per_seed.values()]),
           "mlm_accuracy": summary([x["mlm_accuracy"] for x in per_seed.values()])}
    for key in ("cpc_accuracy", "cpc_candidates"):
        if all(key in x for x in per_seed.values()):
            out[key] = summary([x[key] for x in per_seed.values()])
    return out


def nextsent_meta(run_dir: Path, long_len: int) -> dict:
    path = run_dir / f"data-structure-{long_len}" / "valid.meta.json"
    if not path.is_file():
        raise CollectError(f"{path}: missing (etc-prepare nextsent has not run for long length {long_len})")
    c = json.loads(path.read_text(encoding="utf-8"))["counts"]
    return {k: c[k] for k in ("records", "mean_long_tokens", "longer_than_512", "mean_answer_distance",
                              "answers_dropped", "truncated", "overlap_accuracy", "overlap_mrr",
                              "random_accuracy", "random_mrr") if k in c}


def nextsent_probe(run_dir: Path, long_len: int) -> Optional[str]:
    """The ``--probe`` the fine-tuning data was prepared with (``etc-prepare nextsent``'s prepare.json), or
    None for the task itself."""
    path = run_dir / f"data-structure-{long_len}" / "prepare.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("probe")


def collect(run_dir: Path, ablations: Sequence[str], seeds: Sequence[str], long_len: int,
            extra_lengths: Sequence[int], extrapolation_lengths: Sequence[int],
            only_arms: Optional[Sequence[str]] = None) -> dict:
    """Every ablation's arms (``only_arms``: only these of :data:`FINETUNE_ARMS`' fine-tuning arms; None: all)."""
    if only_arms is not None:
        known = {n for names in FINETUNE_ARMS.values() for n in names}
        unknown = [n for n in only_arms if n not in known]
        if unknown:
            raise CollectError(f"--arms: unknown fine-tuning arm {unknown[0]!r} (known: {' '.join(sorted(known))})")
    out: dict = {"task": "nextsent (CONSTRUCTED labels, real Wikipedia text)", "seeds": list(seeds),
                 "long": long_len, "ablations": {}}
    finetune = [a for a in ablations if a in FINETUNE_ARMS or a == "length"]
    if finetune:
        out["nextsent_valid"] = {str(long_len): nextsent_meta(run_dir, long_len)}
        probe = nextsent_probe(run_dir, long_len)
        if probe is not None:
            out["probe"] = probe
            out["task"] = f"nextsent PROBE {probe}, not the task (CONSTRUCTED labels, real Wikipedia text)"
    cache: Dict[str, dict] = {}

    def arm(name):
        if name not in cache:
            cache[name] = finetune_arm(run_dir, name, seeds)
        return cache[name]

    for a in ablations:
        if a in FINETUNE_ARMS:
            out["ablations"][a] = {"metric": "held-out nextsent accuracy / MRR (%)",
                                   "arms": {name: arm(name) for name in FINETUNE_ARMS[a]
                                            if only_arms is None or name in only_arms}}
        elif a == "length":
            lengths = sorted(set(extra_lengths) | {long_len})
            arms = {}
            for n in lengths:
                arms[f"long{n}"] = dict(arm("structure" if n == long_len else f"long{n}"), label=f"ETC structure, long length {n}")
                out["nextsent_valid"][str(n)] = nextsent_meta(run_dir, n)
            out["ablations"][a] = {"metric": "held-out nextsent accuracy / MRR (%)", "arms": arms}
        elif a == "lift":
            out["ablations"][a] = {"metric": "held-out MLM loss (bits) / accuracy (%) after ETC pretraining",
                                   "arms": {name: mlm_arm({s: run_dir / "lift" / f"{name}-{s}.valid.log" for s in seeds},
                                                          ARM_LABELS[name]) for name in ("lifted", "scratch")}}
        elif a == "extrapolation":
            out["ablations"][a] = {
                "metric": "held-out MLM loss (bits) / accuracy (%) of the model pretrained at long length 512 (seeds: masking)",
                "arms": {f"long{n}": mlm_arm({s: run_dir / "extrapolation" / f"long{n}-{s}.log" for s in seeds},
                                             f"evaluated at long length {n}") for n in extrapolation_lengths}}
        else:
            raise CollectError(f"unknown ablation {a!r}")
    return out


def plot(results: dict, png: Path) -> None:
    """Learning curves of every fine-tuning arm, then one bar panel per ablation (mean, error bar = min..max
    over seeds, dots = seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    abl = results["ablations"]
    panels = ["curves"] * any(a in abl for a in ("structure", "length", "cpc", "g2l")) + list(abl)
    cols = min(len(panels), 4)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    meta = results.get("nextsent_valid", {}).get(str(results["long"]))
    for ax, name in zip(axes.flat, panels):
        if name == "curves":
            seen = {}
            for a in ("structure", "length", "cpc", "g2l"):
                for arm_name, arm in abl.get(a, {}).get("arms", {}).items():
                    key = arm["label"]
                    if key in seen or not arm["curve"]:
                        continue
                    seen[key] = True
                    u = [p["updates"] for p in arm["curve"]]
                    m = [p["accuracy"]["mean"] for p in arm["curve"]]
                    line, = ax.plot(u, m, marker=".", label=key)
                    tr = arm.get("train_first_epoch", [])
                    if tr:  # dashed: unseen records of the training articles (first epoch, before each update)
                        ax.plot([p["updates"] for p in tr], [p["accuracy"]["mean"] for p in tr], ls="--", lw=0.8,
                                color=line.get_color())
                    ax.fill_between(u, [p["accuracy"]["min"] for p in arm["curve"]],
                                    [p["accuracy"]["max"] for p in arm["curve"]], color=line.get_color(), alpha=0.15)
            if meta:
                ax.axhline(meta["overlap_accuracy"], color="k", ls="--", lw=1, label="word overlap")
                ax.axhline(meta["random_accuracy"], color="k", ls=":", lw=1, label="random")
            ax.set_xlabel("fine-tuning updates")
            ax.set_ylabel("held-out accuracy %")
            ax.set_title(f"{'probe' if results.get('probe') else 'nextsent'} accuracy: held-out articles (solid, min..max),\n"
                         "unseen training-article records, 1st epoch (dashed)", fontsize=8)
            ax.legend(fontsize=5.5)
            continue
        arms = abl[name]["arms"]
        key = "mlm_loss" if name in ("lift", "extrapolation") else "accuracy"
        labels = list(arms)
        means = [arms[k][key]["mean"] for k in labels]
        lo = [arms[k][key]["mean"] - arms[k][key]["min"] for k in labels]
        hi = [arms[k][key]["max"] - arms[k][key]["mean"] for k in labels]
        ax.bar(range(len(labels)), means, yerr=[lo, hi], capsize=3, color="C0", alpha=0.7)
        for i, k in enumerate(labels):
            vals = [s[key] for s in arms[k]["seeds"].values()]
            ax.plot([i] * len(vals), vals, "k.", ms=4)
        if key == "mlm_loss":  # losses differ by tenths of a bit: start the axis near them
            low = min(arms[k][key]["min"] for k in labels)
            high = max(arms[k][key]["max"] for k in labels)
            ax.set_ylim(low - 0.1 - 0.2 * (high - low), high + 0.1 + 0.2 * (high - low))
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=7, rotation=20)
        if key == "accuracy" and meta:
            ax.axhline(meta["overlap_accuracy"], color="k", ls="--", lw=1, label="word overlap")
            ax.axhline(meta["random_accuracy"], color="k", ls=":", lw=1, label="random")
            ax.legend(fontsize=6)
        ax.set_ylabel("held-out accuracy %" if key == "accuracy" else "held-out MLM loss (bits)")
        ax.set_title(f"{name}", fontsize=9)
    what = f"nextsent PROBE {results['probe']}, not the task" if results.get("probe") else "nextsent"
    fig.suptitle(f"{what} (CONSTRUCTED, real Wikipedia text), seeds {' '.join(results['seeds'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def markdown(results: dict) -> str:
    """The README table: one row per ablation arm, mean +- sample std over seeds, and every seed's value."""
    rows = ["| ablation | arm | metric | mean +- std | per seed | updates |", "|---|---|---|---|---|---|"]
    for name, ab in results["ablations"].items():
        for arm_name, arm in ab["arms"].items():
            if "mlm_loss" in arm:
                key, unit, updates = "mlm_loss", "held-out MLM loss, bits", ""
            else:
                key, unit, updates = "accuracy", "held-out accuracy % / MRR %", ", ".join(map(str, arm["updates"]))
                if results.get("probe"):
                    unit += f" ({results['probe']} probe)"
            s = arm[key]
            cell = f"{s['mean']:.2f} +- {s['std']:.2f}"
            seeds = " ".join(f"{x[key]:.2f}" for x in arm["seeds"].values())
            if key == "accuracy":
                cell += f" / {arm['mrr']['mean']:.1f} +- {arm['mrr']['std']:.1f}"
                seeds += " / " + " ".join(f"{x['mrr']:.1f}" for x in arm["seeds"].values())
                if arm["lost"]["mean"] > 0:
                    cell += f" (lost {arm['lost']['mean']:.1f} %)"
            rows.append(f"| {name} | {arm_name}: {arm['label']} | {unit} | {cell} | {seeds} | {updates} |")
    for n, meta in results.get("nextsent_valid", {}).items():
        rows.append(f"| baseline (long {n}) | word overlap / random | held-out accuracy % / MRR % | "
                    f"{meta['overlap_accuracy']:.1f} / {meta['overlap_mrr']:.1f} ; {meta['random_accuracy']:.1f} / "
                    f"{meta['random_mrr']:.1f} | | |")
    return "\n".join(rows) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--ablations", nargs="+", default=None, help="the ablations to collect (not with --arm)")
    p.add_argument("--seeds", nargs="+", required=True)
    p.add_argument("--long", type=int, default=2048, help="the main long length of the fine-tuning arms")
    p.add_argument("--extra-lengths", type=int, nargs="*", default=[512, 4096])
    p.add_argument("--extrapolation-lengths", type=int, nargs="*", default=[512, 2048, 8192])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--png", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None, help="also write the README table here")
    p.add_argument("--arm", default=None, help="write only this fine-tuning arm (curves, seeds) to --out, e.g. a "
                   "longer run of one arm, or examples/wikihop/run.sh's logs; --ablations is then ignored")
    p.add_argument("--arms", nargs="+", default=None,
                   help="only these fine-tuning arms of the structure / cpc / g2l ablations (run.sh's STRUCTURE_ARMS)")
    a = p.parse_args(argv)
    if a.arm is None and not a.ablations:
        p.error("give --ablations (or --arm)")
    if a.arm is not None:
        try:
            one = finetune_arm(a.run_dir, a.arm, a.seeds)
        except CollectError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        a.out.write_text(json.dumps({"run_dir": str(a.run_dir), a.arm: one}, indent=1) + "\n", encoding="utf-8")
        print(f"{a.arm}: held-out accuracy at " + ", ".join(f"{x['updates']}: {x['accuracy']['mean']:.2f}" for x in one["curve"]))
        return 0
    try:
        results = collect(a.run_dir, a.ablations, a.seeds, a.long, a.extra_lengths, a.extrapolation_lengths, a.arms)
    except CollectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if a.png is not None:
        plot(results, a.png)
    if a.markdown is not None:
        a.markdown.write_text(markdown(results), encoding="utf-8")
    for name, ab in results["ablations"].items():
        for arm_name, arm in ab["arms"].items():
            key = "mlm_loss" if "mlm_loss" in arm else "accuracy"
            s = arm[key]
            print(f"{name:14s} {arm_name:12s} {key} {s['mean']:.2f} +- {s['std']:.2f}  ({arm['label']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
