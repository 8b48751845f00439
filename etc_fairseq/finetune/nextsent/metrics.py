"""Metrics of the CONSTRUCTED next-sentence task: sentence-level accuracy and MRR, with ties broken
uniformly at random *in expectation* (so a constant scorer gets exactly the random baseline), and
``etc-evaluate nextsent`` on a prediction file.

For one record with ``n`` sentence scores and the answer's index ``t``: ``g`` = sentences scoring strictly
higher than the answer, ``e`` = other sentences scoring the same. Then

    accuracy = 1 / (e + 1) if g == 0 else 0
    reciprocal rank = mean over j = 0..e of 1 / (g + 1 + j)

Percentages over records are what the criterion, ``fairseq-validate`` and ``etc-evaluate`` print.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Dict, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import InputFormatError
from etc_fairseq.progress import progress

__all__ = ["rank_scores", "summarize", "random_baseline", "EVALUATE"]


def rank_scores(scores: Sequence[float], target: int) -> Tuple[float, float]:
    """(expected accuracy, expected reciprocal rank) of the answer ``target`` under ``scores``.

    Args:
        scores: one score per sentence (not NaN; ``-inf`` ranks below everything).
        target: index of the answer in ``scores``.
    """
    n = len(scores)
    if not 0 <= target < n:
        raise ValueError(f"target {target} out of range for {n} scores")
    if any(math.isnan(float(s)) for s in scores):
        raise ValueError("scores must not be NaN")
    t = float(scores[target])
    greater = sum(1 for s in scores if float(s) > t)
    equal = sum(1 for s in scores if float(s) == t) - 1
    acc = 1.0 / (equal + 1) if greater == 0 else 0.0
    rr = sum(1.0 / (greater + 1 + j) for j in range(equal + 1)) / (equal + 1)
    return acc, rr


def summarize(acc_sum: float, rr_sum: float, n: float) -> Dict[str, float]:
    """Percentages from sums over ``n`` records (0 when ``n`` is 0)."""
    if n <= 0:
        return {"accuracy": 0.0, "mrr": 0.0, "total": 0}
    return {"accuracy": 100.0 * acc_sum / n, "mrr": 100.0 * rr_sum / n, "total": int(n)}


def random_baseline(sentence_counts: Sequence[int]) -> Dict[str, float]:
    """Exact expected accuracy / MRR (percent) of a random ranking: ``1/n`` and ``H_n / n`` per record."""
    acc = sum(1.0 / n for n in sentence_counts)
    rr = sum(sum(1.0 / k for k in range(1, n + 1)) / n for n in sentence_counts)
    return summarize(acc, rr, len(sentence_counts))


# ---------------------------------------------------------------------------------------------------------
# etc-evaluate nextsent
# ---------------------------------------------------------------------------------------------------------
def evaluate_files(predictions: Path, gold: Path) -> Dict[str, float]:
    """Score ``{id: [score per sentence]}`` against the records file ``gold`` (JSON list). ``None`` scores
    (sentences the model never saw) rank below all others, and an answer scored ``None`` scores 0, as in the
    ``etc_nextsent`` criterion (the model cannot find what it did not read; otherwise a record whose
    sentences were all cut would get the random expectation here and 0 in ``fairseq-validate``); a missing
    prediction counts as a constant score (the random expectation) and is counted; a wrong length is an error."""
    from etc_fairseq.finetune.nextsent.schema import record_from_json

    from etc_fairseq.guards import UniqueIds, load_json_file

    preds = load_json_file(predictions, "a nextsent prediction JSON file {id: [scores]}")
    if not isinstance(preds, dict):
        raise InputFormatError(f"{predictions}: expected a JSON object {{id: [score per sentence]}}, got "
                               f"{type(preds).__name__}")
    gold_data = load_json_file(gold, "a nextsent records JSON file")
    if not isinstance(gold_data, list):
        raise InputFormatError(f"{gold}: expected a JSON list of records (what etc-prepare nextsent wrote), got "
                               f"{type(gold_data).__name__}")
    records = [record_from_json(d, f"{gold}: record {i}") for i, d in enumerate(gold_data)]
    ids = UniqueIds("id")
    for i, rec in enumerate(records):
        ids.add(rec.id, f"{gold}: record {i}")
    acc = rr = 0.0
    missing = 0
    for rec in progress(records, desc="evaluating", unit="ex"):
        scores = preds.get(rec.id)
        if scores is None:
            missing += 1
            scores = [0.0] * rec.num_sentences
        if not isinstance(scores, list) or not all(
                s is None or (isinstance(s, (int, float)) and not isinstance(s, bool) and not math.isnan(s)) for s in scores):
            raise InputFormatError(f"{predictions}: id {rec.id!r}: expected a list of scores (numbers, or null for a "
                                   f"sentence not scored), got {json.dumps(scores)[:80]}")
        if len(scores) != rec.num_sentences:
            raise InputFormatError(f"{predictions}: id {rec.id!r}: {len(scores)} scores, expected {rec.num_sentences}")
        if scores[rec.answer_rank_index()] is None:
            continue  # the answer was not scored: 0
        scores = [float("-inf") if s is None else float(s) for s in scores]
        a, r = rank_scores(scores, rec.answer_rank_index())
        acc, rr = acc + a, rr + r
    out = summarize(acc, rr, len(records))
    out["missing"] = missing
    return out


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, "JSON {id: [score per sentence]}", "the records file etc-prepare nextsent wrote")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import report_metrics

    text = json.dumps(evaluate_files(args.predictions, args.gold))
    report_metrics(text, text, args.output)
    return 0


EVALUATE = Subcommand(
    name="nextsent",
    help="sentence accuracy / MRR of next-sentence predictions (CONSTRUCTED task)",
    description="Score {id: [score per sentence]} against the records file written by etc-prepare nextsent.",
    add_arguments=_add_arguments,
    run=_run,
)
