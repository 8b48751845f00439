"""Collect examples/ablations/run.sh's fairseq-validate logs into one JSON: per variant the held-out
accuracy / MRR of every seed, their mean and (sample) standard deviation, and the word-overlap and random
baselines `etc-prepare nextsent` computed on the same held-out records."""
import argparse
import json
import re
import statistics
from pathlib import Path

LINE = re.compile(r"valid on 'valid' subset .*\| accuracy ([\d.]+) \| mrr ([\d.]+)")


def parse(log: Path):
    m = None
    for m in LINE.finditer(log.read_text(encoding="utf-8", errors="replace")):
        pass
    if m is None:
        raise SystemExit(f"{log}: no 'valid on valid subset ... accuracy ... mrr' line")
    return float(m.group(1)), float(m.group(2))


def spread(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--variants", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", required=True)
    p.add_argument("--updates", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    out = {"task": "nextsent (CONSTRUCTED, real Wikipedia text)", "updates": a.updates, "variants": {}}
    for v in a.variants:
        runs = {s: parse(a.run_dir / f"validate-{v}-{s}.log") for s in a.seeds}
        acc = [x for x, _ in runs.values()]
        mrr = [y for _, y in runs.values()]
        meta = json.loads((a.run_dir / f"data-{v}" / "valid.meta.json").read_text())["counts"]
        out["variants"][v] = {
            "seeds": {s: {"accuracy": x, "mrr": y} for s, (x, y) in runs.items()},
            "accuracy_mean": statistics.mean(acc), "accuracy_std": spread(acc),
            "mrr_mean": statistics.mean(mrr), "mrr_std": spread(mrr),
        }
        out["baselines"] = {k: meta[k] for k in ("overlap_accuracy", "overlap_mrr", "random_accuracy", "random_mrr")}
        out["valid"] = {k: meta[k] for k in ("records", "mean_long_tokens", "longer_than_512", "mean_answer_distance",
                                             "answers_dropped")}
    a.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
