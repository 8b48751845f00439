"""WikiHop (QAngaroo) accuracy, as the official definition: an example is correct when the predicted
candidate, lower-cased and stripped of surrounding whitespace, equals the gold answer treated the same
way; accuracy is the share of correct examples over *all* gold examples (a missing prediction scores 0).

Used by both the ``etc_wikihop`` criterion (through the per-candidate ``candidate_correct`` flags that
``etc-prepare wikihop`` computes with :func:`~etc_fairseq.finetune.wikihop.schema.is_correct`, and
:func:`accuracy_from_counts`) and ``etc-evaluate wikihop --predictions P --gold G``, where ``P`` is the official prediction format
``{id: candidate}`` and ``G`` the official QAngaroo JSON (a list of ``{id, query, candidates, supports,
answer}``).

Accuracy is reported in percent (fairseq's convention for accuracies; the paper's tables use it too).

The floors any model must beat (:func:`baselines`, written by ``etc-prepare wikihop`` into each answered
split's ``meta.json``): a random pick among the candidates, and word overlap (:func:`word_overlap_scores`).
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.wikihop.schema import WikiHopRecord, candidate_pattern, is_correct, read_wikihop
from etc_fairseq.progress import progress
from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.text import content_words


#: accuracy is reported in percent
ACCURACY_SCALE = 100.0


def accuracy_from_counts(correct: float, total: float) -> float:
    """Accuracy in percent from sufficient statistics; NaN when there is no gold example."""
    return ACCURACY_SCALE * correct / total if total > 0 else float("nan")


@dataclass
class WikiHopScores:
    """What :func:`evaluate` returns.

    Attributes:
        accuracy: percent correct over all gold examples.
        correct: number of correct predictions.
        total: number of gold examples.
        missing: gold examples without a prediction (scored 0).
        unknown: prediction ids that are not in the gold file (ignored).
    """

    accuracy: float
    correct: int
    total: int
    missing: int
    unknown: int


def evaluate(predictions: Mapping[str, str], gold: Sequence[Tuple[str, str]]) -> WikiHopScores:
    """Score predictions against gold ``(id, answer)`` pairs."""
    gold_ids = {gid for gid, _ in gold}
    correct = sum(is_correct(predictions.get(gid), answer) for gid, answer in gold)
    missing = sum(gid not in predictions for gid, _ in gold)
    unknown = sum(pid not in gold_ids for pid in predictions)
    return WikiHopScores(accuracy_from_counts(correct, len(gold)), correct, len(gold), missing, unknown)


def word_overlap_scores(rec: WikiHopRecord) -> List[float]:
    """The lexical baseline's score of each candidate (candidate order): the largest number of the query
    subject's content words (the relation left out) that one support mentioning the candidate contains
    (mentions as ``etc-prepare wikihop`` links them: case-insensitive, on word boundaries); 0 for a candidate
    no support mentions."""
    query = content_words(" ".join(rec.query.split()[1:]))
    shared = [len(query & content_words(s)) for s in rec.supports]
    scores = []
    for cand in rec.candidates:
        pattern = candidate_pattern(cand)
        scores.append(float(max((n for s, n in zip(rec.supports, shared) if pattern.search(s)), default=0)))
    return scores


def expected_accuracy(scores: Sequence[float], correct: Sequence[bool]) -> float:
    """The chance that a scorer picking uniformly among its top-scored candidates picks a correct one
    (scores and correct flags in candidate order, at least one candidate)."""
    top = max(scores)
    tied = [ok for s, ok in zip(scores, correct) if s == top]
    return sum(tied) / len(tied)


def baselines(records: Sequence[WikiHopRecord]) -> Dict[str, float]:
    """Accuracy (percent, over the answered ``records``, on their full text) of a random pick
    (``random_accuracy``) and of the word-overlap scorer (``overlap_accuracy``, ties split evenly)."""
    answered = [r for r in records if r.answer is not None]
    if not answered:
        return {}
    rand = overlap = 0.0
    for r in answered:
        correct = [is_correct(c, r.answer) for c in r.candidates]
        rand += sum(correct) / len(correct)
        overlap += expected_accuracy(word_overlap_scores(r), correct)
    n = len(answered)
    return {"random_accuracy": round(accuracy_from_counts(rand, n), 2),
            "overlap_accuracy": round(accuracy_from_counts(overlap, n), 2)}


def load_predictions(path: Path) -> Dict[str, str]:
    """Read the official prediction format ``{id: candidate}`` (InputFormatError naming the file otherwise)."""
    from etc_fairseq.guards import load_json_file

    data = load_json_file(path, "a WikiHop prediction JSON file {id: candidate}")
    if not isinstance(data, dict):
        raise InputFormatError(f"{path}: expected a JSON object {{id: candidate}}, got {type(data).__name__}")
    for key, value in data.items():
        if not isinstance(value, str):
            raise InputFormatError(f"{path}: prediction for id {key!r}: expected a string, got {type(value).__name__}")
    return data


def load_gold(path: Path) -> list:
    """``(id, answer)`` pairs of an official QAngaroo WikiHop JSON file; every record needs an answer."""
    out = []
    for rec in progress(read_wikihop(path), desc=f"reading {Path(path).name}", unit="ex"):
        if rec.answer is None:
            raise InputFormatError(f"{path}: record id {rec.id!r}: field 'answer' missing (a test file cannot be scored)")
        out.append((rec.id, rec.answer))
    return out


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, "prediction file {id: candidate} (etc-predict wikihop)",
                           "official QAngaroo WikiHop JSON with answers (e.g. dev.json)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import format_metrics, report_metrics

    scores = evaluate(load_predictions(args.predictions), load_gold(args.gold))
    text = format_metrics(asdict(scores))
    report_metrics(text, text, args.output)
    return 0


EVALUATE = Subcommand(
    name="wikihop",
    help="WikiHop accuracy (official definition) of {id: candidate} predictions",
    description="Score a WikiHop prediction file {id: candidate} against the official QAngaroo JSON: a "
    "prediction is correct when it equals the answer after lower-casing and stripping; accuracy (percent) "
    "is over all gold examples, a missing prediction counts as wrong. Prints one JSON line: accuracy, "
    "correct, total, missing (gold ids without a prediction), unknown (prediction ids not in the gold file).",
    add_arguments=_add_arguments,
    run=_run,
)
