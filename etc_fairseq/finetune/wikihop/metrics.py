"""WikiHop (QAngaroo) accuracy, as the official definition: an example is correct when the predicted
candidate, lower-cased and stripped of surrounding whitespace, equals the gold answer treated the same
way; accuracy is the share of correct examples over *all* gold examples (a missing prediction scores 0).

Used by both the ``etc_wikihop`` criterion (through the per-candidate ``candidate_correct`` flags that
``etc-prepare wikihop`` computes with :func:`~etc_fairseq.finetune.wikihop.schema.is_correct`, and
:func:`accuracy_from_counts`) and ``etc-evaluate wikihop --predictions P --gold G``, where ``P`` is the official prediction format
``{id: candidate}`` and ``G`` the official QAngaroo JSON (a list of ``{id, query, candidates, supports,
answer}``).

Accuracy is reported in percent (fairseq's convention for accuracies; the paper's tables use it too).
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Mapping, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.wikihop.schema import is_correct, read_wikihop
from etc_fairseq.progress import progress
from etc_fairseq.prepare.documents import InputFormatError


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
