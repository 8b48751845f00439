"""nextsent accuracy and MRR on the records a windowed arm can answer: a 512-token arm scores every record
whose answer lies beyond its window as wrong, so "longer input beats 512" mixes two things, reaching the
answer and ranking it among more distractors. This scores every prediction file on the same subset: the
records whose answer the ``--window`` prediction file scored (not ``null``: ``etc-predict nextsent`` writes
``null`` for a sentence the model did not read), with the metric of ``etc-evaluate nextsent``.

    python examples/lifted_minilm/reachable.py --gold DATA/valid.records.json --window etc512-1.json \
        --predictions etc-1.json local-1.json etc512-1.json --out reachable.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence


def reachable_ids(window: Dict[str, list], records: Sequence) -> List[str]:
    """Ids of the records whose answer ``window`` ({id: [score or None per sentence]}) scored, in order."""
    return [r.id for r in records if r.id in window and window[r.id][r.answer_rank_index()] is not None]


def score_subset(predictions: Dict[str, list], records: Sequence, ids: Sequence[str]) -> Dict[str, float]:
    """Accuracy and MRR (percent) of ``predictions`` over the records ``ids``, as ``etc-evaluate nextsent``
    scores them (a ``None`` score ranks below every number; an answer scored ``None`` counts 0)."""
    from etc_fairseq.finetune.nextsent.metrics import rank_scores, summarize

    by_id = {r.id: r for r in records}
    acc = rr = 0.0
    for i in ids:
        rec, scores = by_id[i], predictions[i]
        if scores[rec.answer_rank_index()] is None:
            continue
        a, r = rank_scores([float("-inf") if s is None else float(s) for s in scores], rec.answer_rank_index())
        acc, rr = acc + a, rr + r
    return summarize(acc, rr, len(ids))


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.errors import InputFormatError
    from etc_fairseq.finetune.nextsent.schema import record_from_json
    from etc_fairseq.guards import load_json_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gold", type=Path, required=True, help="the records file etc-prepare nextsent wrote")
    p.add_argument("--window", type=Path, required=True, help="predictions of the windowed arm: its scored answers "
                   "define the subset")
    p.add_argument("--predictions", type=Path, nargs="+", required=True, help="prediction files to score on it")
    p.add_argument("--out", type=Path, required=True, help="JSON {file: {accuracy, mrr, total}}, plus the subset's size")
    args = p.parse_args(argv)
    records = [record_from_json(d, f"{args.gold}: record {k}")
               for k, d in enumerate(load_json_file(args.gold, "a nextsent records JSON file"))]
    ids = reachable_ids(load_json_file(args.window, "a nextsent prediction JSON file"), records)
    scores = {}
    for f in args.predictions:
        preds = load_json_file(f, "a nextsent prediction JSON file")
        missing = [i for i in ids if i not in preds]
        if missing:
            raise InputFormatError(f"{f}: no prediction for {len(missing)} of the {len(ids)} reachable records "
                                   f"(first: {missing[0]!r}); expected etc-predict nextsent's output for {args.gold}")
        scores[str(f)] = score_subset(preds, records, ids)
    out = {"gold": str(args.gold), "window": str(args.window), "records": len(records), "reachable": len(ids),
           "scores": scores}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
