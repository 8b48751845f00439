"""Arms of the nextsent task compared record by record: per record, each arm's accuracy and reciprocal rank
averaged over its seeds' prediction files (``etc-predict nextsent``'s output; an answer scored ``null``
counts 0, other ``null`` scores rank below every number, as ``etc-evaluate nextsent`` scores them); per pair
of arms, the mean difference in points with two 95 % percentile intervals: one from resampling records, one
from resampling articles (all records of a drawn article come along), since the records of one held-out
article are not independent.

    python examples/lifted_minilm/paired.py --gold DATA/valid.records.json \
        --arm etc etc-1.json etc-2.json etc-3.json --arm local local-1.json local-2.json local-3.json \
        --pairs etc:local --out paired.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

METRICS = (("accuracy", "accuracy"), ("mrr", "MRR"))  # (JSON key, printed name), in per_record's tuple order


def per_record(records: Sequence, files: Sequence[Dict[str, list]]) -> List[Tuple[float, float]]:
    """(accuracy, reciprocal rank) of each record, the mean over ``files`` ({id: [score or None per sentence]})."""
    from etc_fairseq.finetune.nextsent.metrics import rank_scores

    out = []
    for r in records:
        t, acc, rr = r.answer_rank_index(), 0.0, 0.0
        for preds in files:
            s = preds[r.id]
            if s[t] is not None:
                a, b = rank_scores([float("-inf") if x is None else x for x in s], t)
                acc, rr = acc + a / len(files), rr + b / len(files)
        out.append((acc, rr))
    return out


def percent(rows: Sequence[Tuple[float, float]]) -> Dict[str, float]:
    """Mean accuracy and MRR of :func:`per_record`'s rows, in percent."""
    return {key: 100 * sum(x[k] for x in rows) / len(rows) for k, (key, _) in enumerate(METRICS)}


def cluster_bootstrap_interval(values: Sequence[float], clusters: Sequence, resamples: int,
                               rng: random.Random) -> Tuple[float, float]:
    """95 % percentile interval of the mean of ``values`` when whole clusters (``clusters[i]`` is value i's)
    are resampled: each resample draws as many clusters as there are, with replacement, and takes the mean
    over all their values."""
    groups: Dict[object, List[float]] = {}
    for v, c in zip(values, clusters):
        groups.setdefault(c, []).append(v)
    sums = [(sum(g), len(g)) for g in groups.values()]
    boots = []
    for _ in range(resamples):
        drawn = [rng.choice(sums) for _ in sums]
        boots.append(sum(s for s, _ in drawn) / sum(n for _, n in drawn))
    boots.sort()
    return boots[resamples * 25 // 1000], boots[resamples * 975 // 1000]


def bootstrap_interval(values: Sequence[float], resamples: int, rng: random.Random) -> Tuple[float, float]:
    """95 % percentile interval of the mean of ``values`` over ``resamples`` resamplings of the values: the
    cluster bootstrap with one value per cluster (the same draws from ``rng`` as
    ``sorted(sum(rng.choice(values) for _ in values) / len(values) for _ in range(resamples))``)."""
    return cluster_bootstrap_interval(values, range(len(values)), resamples, rng)


def load_predictions(path: Path, records: Sequence, gold: Path) -> Dict[str, list]:
    """``etc-predict nextsent``'s file ``path``, checked to hold one score per sentence for each record."""
    from etc_fairseq.errors import InputFormatError
    from etc_fairseq.guards import load_json_file

    preds = load_json_file(path, "a nextsent prediction JSON file")
    for what, bad in (("no prediction", lambda r: not isinstance(preds, dict) or r.id not in preds),
                      ("not one score per sentence", lambda r: not isinstance(preds[r.id], list)
                       or len(preds[r.id]) != r.num_sentences)):
        ids = [r.id for r in records if bad(r)]
        if ids:
            raise InputFormatError(f"{path}: {what} for {len(ids)} of the {len(records)} records (first: {ids[0]!r}); "
                                   f"expected etc-predict nextsent's output for {gold}")
    return preds


def _reachable_ids():
    spec = importlib.util.spec_from_file_location("lifted_minilm_reachable", Path(__file__).with_name("reachable.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reachable_ids


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.errors import ConfigError, InputFormatError
    from etc_fairseq.finetune.nextsent.schema import record_from_json
    from etc_fairseq.guards import load_json_file
    from etc_fairseq.prepare.atomic import atomic_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gold", type=Path, required=True, help="the records file etc-prepare nextsent wrote")
    p.add_argument("--arm", nargs="+", action="append", required=True, metavar=("NAME", "FILE"),
                   help="an arm's name and its prediction files, one per seed (repeat for each arm)")
    p.add_argument("--pairs", nargs="+", metavar="A:B", help="arms to compare (default: the first against each other)")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="seed of the record bootstrap (seed + 1: the article one)")
    p.add_argument("--subset-window", type=Path, help="only the records whose answer this prediction file scored")
    p.add_argument("--out", type=Path, required=True, help="JSON: each arm's means and per-seed values, each pair's")
    args = p.parse_args(argv)
    if args.resamples < 1:
        raise ConfigError(f"--resamples {args.resamples}: expected at least 1")
    arms: Dict[str, List[Path]] = {}
    for name, *files in args.arm:
        if name in arms or not files:
            raise ConfigError(f"--arm {name}: expected a new arm name and its prediction files")
        arms[name] = [Path(f) for f in files]
    names = list(arms)
    pairs = ([(names[0], b) for b in names[1:]] if args.pairs is None
             else [tuple(p.partition(":")[::2]) for p in args.pairs])
    unknown = [f"{a}:{b}" for a, b in pairs if a not in arms or b not in arms]
    if unknown:
        raise ConfigError(f"--pairs {unknown[0]}: expected A:B with A and B among the --arm names {', '.join(names)}")
    records = [record_from_json(d, f"{args.gold}: record {k}")
               for k, d in enumerate(load_json_file(args.gold, "a nextsent records JSON file"))]
    if args.subset_window is not None:
        ids = set(_reachable_ids()(load_json_file(args.subset_window, "a nextsent prediction JSON file"), records))
        records = [r for r in records if r.id in ids]
    if not records:
        raise InputFormatError(f"{args.gold}: no records to compare (with --subset-window: none whose answer it scored)")
    scores: Dict[str, List[Tuple[float, float]]] = {}  # arm: per_record's rows
    out = {"gold": str(args.gold), "subset_window": args.subset_window and str(args.subset_window),
           "records": len(records), "articles": len({r.article for r in records}), "resamples": args.resamples,
           "seed": args.seed, "arms": {}, "pairs": []}
    for name, files in arms.items():
        preds = [load_predictions(f, records, args.gold) for f in files]
        scores[name] = per_record(records, preds)
        out["arms"][name] = {"files": [str(f) for f in files], **percent(scores[name]),
                             "per_seed": [percent(per_record(records, [d])) for d in preds]}
    rng, cluster_rng = random.Random(args.seed), random.Random(args.seed + 1)
    articles = [r.article for r in records]
    for a, b in pairs:
        row = {"a": a, "b": b}
        for k, (key, printed) in enumerate(METRICS):
            d = [x[k] - y[k] for x, y in zip(scores[a], scores[b])]
            rec = [100 * v for v in bootstrap_interval(d, args.resamples, rng)]
            art = [100 * v for v in cluster_bootstrap_interval(d, articles, args.resamples, cluster_rng)]
            row[key] = {"difference": 100 * sum(d) / len(d), "records_interval": rec, "articles_interval": art}
            print(f"{a} - {b} {printed}: {row[key]['difference']:+.1f} points, 95 % interval over {len(d)} records "
                  f"[{rec[0]:+.1f}, {rec[1]:+.1f}], over {out['articles']} articles [{art[0]:+.1f}, {art[1]:+.1f}]")
        out["pairs"].append(row)
    with atomic_file(args.out) as f:
        f.write(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
