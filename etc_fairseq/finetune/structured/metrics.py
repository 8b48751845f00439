"""The structured dataset's metrics, defined once for the ``etc_structured`` criterion (``fairseq-validate``)
and ``etc-evaluate structured --predictions P --gold F.jsonl --label-level L``, in percent:

``record``  accuracy: predicted class == the record's ``label``, over the labelled gold records.
``global``  accuracy: predicted class == ``globals[i].label``, over the labelled global tokens of the gold
            records.
``span``    exact match and F1 over the labelled gold records: the predicted ``[first, last]`` words against
            the gold ``answer``; F1 of the two sets of word indices (precision = shared words / predicted
            words, recall = shared words / gold words).

A gold record (or token) without a prediction counts as wrong. The prediction file (``etc-predict
structured``) is one JSON object ``{id: prediction}``: a class name (record level), a list with one class name
or null per global token of the record, in the record's order (global level; a token cut by ``etc-prepare``
gets null), or ``[first, last]`` words or null (span level).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.structured.schema import LABEL_LEVELS, StructuredRecord, read_records

#: metrics are reported in percent
SCALE = 100.0


def span_scores(pred: Optional[Sequence[int]], gold: Sequence[int]) -> Tuple[float, float]:
    """(exact match, F1) in [0, 1] of one predicted word span (inclusive; None = no prediction) against the
    gold span."""
    if pred is None or pred[0] < 0 or pred[1] < pred[0]:
        return 0.0, 0.0
    p = set(range(pred[0], pred[1] + 1))
    g = set(range(gold[0], gold[1] + 1))
    shared = len(p & g)
    if shared == 0:
        return float(tuple(pred) == tuple(gold)), 0.0
    precision, recall = shared / len(p), shared / len(g)
    return float(tuple(pred) == tuple(gold)), 2 * precision * recall / (precision + recall)


def ratio(numerator: float, denominator: float) -> float:
    """``SCALE * numerator / denominator``; NaN without any labelled gold."""
    return SCALE * numerator / denominator if denominator > 0 else float("nan")


def evaluate(predictions: Mapping[str, object], gold: Sequence[StructuredRecord], label_level: str) -> Dict[str, float]:
    """The metrics of ``predictions`` against the gold records at ``label_level`` (see the module docstring).

    Returns:
        record / global: ``{"accuracy", "correct", "labelled", "missing", "unknown"}``; span: ``{"exact_match",
        "f1", "labelled", "missing", "unknown"}`` (``missing``: labelled gold records without a prediction;
        ``unknown``: predicted ids not in the gold file).
    """
    ids = {r.id for r in gold}
    unknown = sum(1 for k in predictions if k not in ids)
    missing = 0
    if label_level == "record":
        labelled = [r for r in gold if r.label is not None]
        missing = sum(1 for r in labelled if r.id not in predictions)
        correct = sum(1 for r in labelled if predictions.get(r.id) == r.label)
        return {"accuracy": ratio(correct, len(labelled)), "correct": correct, "labelled": len(labelled),
                "missing": missing, "unknown": unknown}
    if label_level == "global":
        correct = labelled = 0
        for r in gold:
            pred = predictions.get(r.id)
            gold_labels = [g.label for g in r.globals]
            n = sum(1 for x in gold_labels if x is not None)
            labelled += n
            if pred is None:
                missing += int(n > 0)
                continue
            correct += sum(1 for x, y in zip(gold_labels, pred) if x is not None and x == y)
        return {"accuracy": ratio(correct, labelled), "correct": correct, "labelled": labelled,
                "missing": missing, "unknown": unknown}
    if label_level == "span":
        em = f1 = 0.0
        labelled = [r for r in gold if r.answer is not None]
        for r in labelled:
            if r.id not in predictions:
                missing += 1
            e, f = span_scores(predictions.get(r.id), r.answer)
            em += e
            f1 += f
        return {"exact_match": ratio(em, len(labelled)), "f1": ratio(f1, len(labelled)),
                "labelled": len(labelled), "missing": missing, "unknown": unknown}
    raise ValueError(f"label level must be one of {LABEL_LEVELS}, got {label_level!r}")


def load_predictions(path: Path, label_level: str) -> Dict[str, object]:
    """Read an ``etc-predict structured`` file, checking each prediction's form for ``label_level``."""
    from etc_fairseq.guards import load_json_file

    data = load_json_file(path, "a prediction JSON file {id: prediction} (etc-predict structured)")
    if not isinstance(data, dict):
        raise InputFormatError(f"{path}: expected a JSON object {{id: prediction}}, got {type(data).__name__}")
    for key, value in data.items():
        if label_level == "record":
            ok, what = isinstance(value, str), "a class name"
        elif label_level == "global":
            ok = isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)
            what = "a list of class names or nulls, one per global token"
        else:
            ok = value is None or (isinstance(value, list) and len(value) == 2
                                   and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
            what = "[first, last] word indices or null"
        if not ok:
            raise InputFormatError(f"{path}: prediction for id {key!r}: expected {what} ({label_level} level), "
                                   f"got {json.dumps(value)[:80]}")
    return data


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, "prediction file {id: prediction} (etc-predict structured)",
                           "the JSONL records with their labels (what etc-prepare structured read)")
    p.add_argument("--label-level", choices=LABEL_LEVELS, required=True, help="the level the labels are at")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import format_metrics, report_metrics

    gold = read_records(args.gold, label_level=args.label_level, check_types=False)
    scores = evaluate(load_predictions(args.predictions, args.label_level), gold, args.label_level)
    if scores["labelled"] == 0:
        what = {"record": "record has a 'label'", "global": "global token has a 'label'", "span": "record has an 'answer'"}
        raise InputFormatError(f"{args.gold}: no {what[args.label_level]} (--label-level {args.label_level}): "
                               "nothing to score")
    text = format_metrics(scores)
    report_metrics(text, text, args.output)
    return 0


EVALUATE = Subcommand(
    name="structured",
    help="accuracy (record / global level) or span exact match and F1 of etc-predict structured predictions",
    description="Score an etc-predict structured file {id: prediction} against the JSONL records: record level, "
    "accuracy over labelled records; global level, accuracy over labelled global tokens; span level, exact match "
    "and word-set F1 over records with an answer. A missing prediction counts as wrong. Prints one JSON line.",
    add_arguments=_add_arguments,
    run=_run,
)
