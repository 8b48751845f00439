"""Record-level accuracy split by input length: on the records longer than a crop, and on the rest.

Reads the gold labels from the records ``etc-prepare structured`` read (JSONL: ``id``, ``label``), each record's
long length from the data it prepared (``<data>/<split>.long_tokens`` sizes, ``<split>.side.jsonl`` ids, in
the same order), and any number of arms, each a list of ``etc-predict structured`` files ({id: class}, one per
seed). For each arm: accuracy in percent on the records whose long input is longer than ``--crop`` (what a
512-token arm does not read all of) and on those it reads whole, per seed and averaged over the seeds.

    python examples/lifted_minilm/by_length.py --records RECORDS/valid.jsonl --data DATA-2048 --crop 512 \\
        --arm etc pred/etc-1.json pred/etc-2.json --arm etc512 pred/etc512-1.json pred/etc512-2.json --out by_length.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence


class ByLengthError(Exception):
    """Missing or malformed input (one line: the file and what is wrong)."""


def long_lengths(data: Path, split: str) -> Dict[str, int]:
    """{record id: long tokens} of a split ``etc-prepare structured`` wrote to ``data``."""
    from fairseq.data import data_utils

    side = data / f"{split}.side.jsonl"
    if not side.is_file():
        raise ByLengthError(f"{side}: missing (not a directory etc-prepare structured wrote?)")
    ids = [json.loads(line)["id"] for line in side.read_text(encoding="utf-8").splitlines() if line.strip()]
    ds = data_utils.load_indexed_dataset(str(data / f"{split}.long_tokens"), None)
    if ds is None or len(ds) != len(ids):
        raise ByLengthError(f"{data / split}.long_tokens: missing, or not one entry per record of {side}")
    sizes = ds.sizes.tolist()
    return dict(zip(ids, sizes))


def gold_labels(records: Path) -> Dict[str, str]:
    """{id: label} of a records JSONL."""
    out = {}
    for n, line in enumerate(records.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            r = json.loads(line)
            if not isinstance(r.get("id"), str) or not isinstance(r.get("label"), str):
                raise ByLengthError(f"{records}:{n}: expected string fields 'id' and 'label'")
            out[r["id"]] = r["label"]
    return out


def accuracy_by_length(gold: Dict[str, str], lengths: Dict[str, int], predictions: Dict[str, str],
                       crop: int) -> Dict[str, float]:
    """Accuracy (percent) of ``predictions`` on the records of ``gold`` longer than ``crop`` long tokens
    (``long``), on the others (``short``) and on all, with the counts; a record without a prediction counts wrong."""
    groups: Dict[str, List[bool]] = {"long": [], "short": [], "all": []}
    for rid, label in gold.items():
        if rid not in lengths:
            raise ByLengthError(f"record {rid!r}: not in the prepared data")
        ok = predictions.get(rid) == label
        groups["long" if lengths[rid] > crop else "short"].append(ok)
        groups["all"].append(ok)
    out: Dict[str, float] = {}
    for name, hits in groups.items():
        out[name] = 100.0 * sum(hits) / len(hits) if hits else float("nan")
        out[f"{name}_records"] = len(hits)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=Path, required=True, help="the records JSONL etc-prepare structured read")
    p.add_argument("--data", type=Path, required=True, help="the data it prepared from them (the long lengths)")
    p.add_argument("--split", default="valid")
    p.add_argument("--crop", type=int, default=512, help="records longer than this many long tokens are 'long'")
    p.add_argument("--arm", nargs="+", action="append", required=True, metavar=("NAME", "FILE"),
                   help="an arm's name and its prediction files, one per seed")
    p.add_argument("--out", type=Path, required=True, help="the JSON to write")
    a = p.parse_args(argv)
    try:
        gold, lengths = gold_labels(a.records), long_lengths(a.data, a.split)
        arms = {}
        for name, *files in a.arm:
            if not files:
                raise ByLengthError(f"--arm {name}: no prediction file")
            per_seed = [accuracy_by_length(gold, lengths, json.loads(Path(f).read_text(encoding="utf-8")), a.crop)
                        for f in files]
            arms[name] = {"files": files, "per_seed": per_seed,
                          **{k: sum(s[k] for s in per_seed) / len(per_seed) for k in ("long", "short", "all")}}
    except (ByLengthError, OSError, ValueError) as e:
        print(f"by_length: error: {e}", file=sys.stderr)
        return 1
    res = {"records": str(a.records), "data": str(a.data), "crop": a.crop, "arms": arms}
    from etc_fairseq.prepare.atomic import atomic_file

    a.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(a.out) as f:  # all at once: a killed run leaves no half-written file
        f.write(json.dumps(res, indent=1) + "\n")
    first = next(iter(arms.values()))["per_seed"][0]
    print(f"{first['long_records']} records longer than {a.crop} long tokens, {first['short_records']} not")
    for name, arm in arms.items():
        print(f"{name}: accuracy {arm['long']:.1f} % on the long, {arm['short']:.1f} % on the others, "
              f"{arm['all']:.1f} % on all (mean of {len(arm['per_seed'])} seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
