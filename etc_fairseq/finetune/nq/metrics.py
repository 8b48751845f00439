"""The official Natural Questions evaluation (``nq_eval`` of the ``natural-questions`` package), reimplemented
as pure functions, used by ``etc-evaluate nq`` and by the ``etc_nq`` criterion in ``fairseq-validate``.

Rules (as the official script defines them):

- Spans are ``[start, end)``; a span is null when its token and byte offsets are all negative. Two non-null
  spans are equal if both have byte offsets and these match, or else (or also) if both have token offsets
  and these match.
- Gold has a long answer iff at least ``long_non_null_threshold`` (2) annotators gave a non-null long
  answer; a short answer iff at least ``short_non_null_threshold`` (2) gave non-null short spans or a yes/no.
- A predicted long answer is correct iff gold has a long answer and the span equals one annotator's non-null
  long answer. A predicted short answer (spans, or yes/no) is correct iff gold has a short answer and: the
  predicted yes/no equals one annotator's yes/no, or (no yes/no predicted) the predicted span *set* equals
  one annotator's span set (null spans ignored on both sides).
- Precision = correct / predicted non-null, recall = correct / gold non-null, F1 their harmonic mean.
  Each answer has a score; the "best threshold" numbers treat predictions scored below a threshold as null
  and take the threshold maximising F1 (scanning scores from high to low, first maximum wins); the
  "ignoring scores" numbers count every prediction; R@P is the highest recall at precision >= 0.5/0.75/0.9.
- The prediction file must cover exactly the gold example ids. A yes/no answer together with non-null short
  spans is an error. (Duplicate example ids in the prediction file: the last one counts, as in the official
  reader; they are counted and logged.)
"""
from __future__ import annotations

import argparse
import json
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.guards import positive_int
from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.finetune.nq.schema import NqAnnotation, NqSpan, read_nq_file
from etc_fairseq.progress import progress

logger = logging.getLogger(__name__)

PR_TARGETS = (0.5, 0.75, 0.9)


@dataclass
class NqLabel:
    """One annotation or prediction: long span, short spans, yes/no (lower case: none/yes/no), scores."""

    long_answer: NqSpan
    short_answers: List[NqSpan] = field(default_factory=list)
    yes_no_answer: str = "none"
    long_score: float = 0.0
    short_score: float = 0.0


def label_from_annotation(a: NqAnnotation) -> NqLabel:
    return NqLabel(a.long_answer, list(a.short_answers), a.yes_no_answer.lower())


def spans_equal(a: NqSpan, b: NqSpan) -> bool:
    """Official equality of two non-null spans: bytes when both have them, else/also tokens."""
    if a.start_byte >= 0 and a.end_byte >= 0 and b.start_byte >= 0 and b.end_byte >= 0:
        if a.start_byte == b.start_byte and a.end_byte == b.end_byte:
            return True
    if a.start_token >= 0 and a.end_token >= 0 and b.start_token >= 0 and b.end_token >= 0:
        if a.start_token == b.start_token and a.end_token == b.end_token:
            return True
    return False


def is_null_span_list(spans: Sequence[NqSpan]) -> bool:
    return all(s.is_null for s in spans)


def span_set_equal(gold: Sequence[NqSpan], pred: Sequence[NqSpan]) -> bool:
    """Every non-null predicted span equals some gold span and vice versa (a set comparison)."""
    gold = [s for s in gold if not s.is_null]
    pred = [s for s in pred if not s.is_null]
    return all(any(spans_equal(p, g) for g in gold) for p in pred) and all(any(spans_equal(p, g) for p in pred) for g in gold)


def gold_has_long_answer(gold: Sequence[NqLabel], threshold: int = 2) -> bool:
    return bool(gold) and sum(not g.long_answer.is_null for g in gold) >= threshold


def gold_has_short_answer(gold: Sequence[NqLabel], threshold: int = 2) -> bool:
    return bool(gold) and sum((not is_null_span_list(g.short_answers)) or g.yes_no_answer != "none" for g in gold) >= threshold


#: (gold has answer, prediction has answer, prediction correct, score)
AnswerStat = Tuple[bool, bool, bool, float]


def score_long_answer(gold: Sequence[NqLabel], pred: NqLabel, threshold: int = 2) -> AnswerStat:
    has_gold = gold_has_long_answer(gold, threshold)
    has_pred = not pred.long_answer.is_null
    correct = has_gold and has_pred and any(
        not g.long_answer.is_null and spans_equal(g.long_answer, pred.long_answer) for g in gold
    )
    return has_gold, has_pred, correct, pred.long_score


def score_short_answer(gold: Sequence[NqLabel], pred: NqLabel, threshold: int = 2) -> AnswerStat:
    has_gold = gold_has_short_answer(gold, threshold)
    has_pred = (not is_null_span_list(pred.short_answers)) or pred.yes_no_answer != "none"
    correct = False
    if has_gold and has_pred:
        if pred.yes_no_answer != "none":
            correct = any(pred.yes_no_answer == g.yes_no_answer for g in gold)
        else:
            correct = any(span_set_equal(g.short_answers, pred.short_answers) for g in gold)
    return has_gold, has_pred, correct, pred.short_score


def _div(x: float, y: float) -> float:
    return x / y if y else 0.0


def f1_ignoring_scores(stats: Sequence[AnswerStat]) -> Dict[str, float]:
    """P/R/F1 counting every prediction (the official 'METRICS IGNORING SCORES')."""
    correct = sum(s[2] for s in stats)
    p = _div(correct, sum(s[1] for s in stats))
    r = _div(correct, sum(s[0] for s in stats))
    return {"n": len(stats), "f1": _div(2 * p * r, p + r), "precision": p, "recall": r}


def best_threshold_metrics(stats: Sequence[AnswerStat], targets: Sequence[float] = PR_TARGETS) -> Dict[str, float]:
    """The official score-threshold scan: best F1 (with its P, R and threshold) and R@P for ``targets``."""
    ordered = sorted(stats, key=lambda s: s[3], reverse=True)
    total_gold = sum(s[0] for s in ordered)
    by_score: "OrderedDict[float, Tuple[float, float]]" = OrderedDict()
    correct = predicted = 0
    for has_gold, has_pred, is_correct, score in ordered:
        correct += is_correct
        predicted += has_pred
        by_score[score] = (_div(correct, predicted), _div(correct, total_gold))
    best = (0.0, 0.0, 0.0, 0.0)
    max_r = [0.0] * len(targets)
    max_p = [0.0] * len(targets)
    for threshold, (p, r) in by_score.items():
        for t, target in enumerate(targets):
            if p >= target and r > max_r[t]:
                max_r[t], max_p[t] = r, p
        f1 = _div(2 * p * r, p + r)
        if f1 > best[0]:
            best = (f1, p, r, threshold)
    out = {
        "best-threshold-f1": best[0],
        "best-threshold-precision": best[1],
        "best-threshold-recall": best[2],
        "best-threshold": best[3],
    }
    for t, target in enumerate(targets):
        out[f"recall-at-precision>={target:.2}"] = max_r[t]
        out[f"precision-at-precision>={target:.2}"] = max_p[t]
    return out


def score_answers(
    gold: Dict[Any, List[NqLabel]], pred: Dict[Any, NqLabel], long_threshold: int = 2, short_threshold: int = 2
) -> Tuple[List[AnswerStat], List[AnswerStat]]:
    """Long and short answer statistics over all examples (ids must match exactly)."""
    if set(gold) != set(pred):
        missing, extra = set(gold) - set(pred), set(pred) - set(gold)
        raise InputFormatError(
            f"prediction example ids differ from the gold ids: {len(missing)} gold ids without prediction "
            f"(e.g. {sorted(map(str, missing))[:3]}), {len(extra)} predicted ids not in gold (e.g. {sorted(map(str, extra))[:3]})"
        )
    long_stats = [score_long_answer(gold[k], pred[k], long_threshold) for k in gold]
    short_stats = [score_short_answer(gold[k], pred[k], short_threshold) for k in gold]
    return long_stats, short_stats


def nq_metrics(
    gold: Dict[Any, List[NqLabel]], pred: Dict[Any, NqLabel], long_threshold: int = 2, short_threshold: int = 2
) -> Dict[str, float]:
    """All official numbers: ``long-``/``short-`` + best-threshold F1/P/R/threshold and R@P (the official
    JSON output), plus ``long-answer-``/``short-answer-`` F1/P/R ignoring scores."""
    long_stats, short_stats = score_answers(gold, pred, long_threshold, short_threshold)
    out: Dict[str, float] = {}
    for prefix, stats in (("long-", long_stats), ("short-", short_stats)):
        out.update({prefix + k: v for k, v in best_threshold_metrics(stats).items()})
    for prefix, stats in (("long-answer-", long_stats), ("short-answer-", short_stats)):
        out.update({prefix + k: v for k, v in f1_ignoring_scores(stats).items()})
    return out


# ---------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------


def read_gold(paths: Sequence[Path]) -> Dict[Any, List[NqLabel]]:
    """Gold annotations from official NQ files (full or simplified, .gz or plain): example_id -> labels."""
    out: Dict[Any, List[NqLabel]] = {}
    for path in paths:
        for ex in progress(read_nq_file(path, with_document=False), desc=f"reading {Path(path).name}", unit="ex"):
            if ex.example_id in out:
                raise InputFormatError(f"{ex.source}: example_id {ex.example_id} appears twice in the gold files")
            out[ex.example_id] = [label_from_annotation(a) for a in ex.annotations]
    return out


def _pred_span(d: Any, where: str) -> NqSpan:
    if not isinstance(d, dict):
        raise InputFormatError(f"{where}: expected an object with start_token/end_token/start_byte/end_byte, got {json.dumps(d)[:80]}")
    vals = []
    for k in ("start_byte", "end_byte", "start_token", "end_token"):
        v = d.get(k, -1)
        if not isinstance(v, int) or isinstance(v, bool):
            raise InputFormatError(f"{where}.{k}: expected an integer, got {json.dumps(v)[:40]}")
        vals.append(v)
    sb, eb, st, et = vals
    if (sb < 0) != (eb < 0) or (st < 0) != (et < 0):
        raise InputFormatError(f"{where}: inconsistent null span (start and end must both be -1 or both >= 0): {d}")
    if (sb >= 0 and sb >= eb) or (st >= 0 and st >= et):
        raise InputFormatError(f"{where}: start must be < end: {d}")
    return NqSpan(st, et, sb, eb)


def parse_predictions(obj: Any, where: str = "predictions") -> Tuple[Dict[Any, NqLabel], int]:
    """The official prediction JSON -> (example_id -> NqLabel, number of duplicate ids (last one kept))."""
    if not isinstance(obj, dict) or not isinstance(obj.get("predictions"), list):
        raise InputFormatError(f"{where}: expected {{\"predictions\": [...]}}")
    out: Dict[Any, NqLabel] = {}
    dups = 0
    for i, p in enumerate(obj["predictions"]):
        w = f"{where}: predictions[{i}]"
        if not isinstance(p, dict) or "example_id" not in p:
            raise InputFormatError(f"{w}: expected an object with example_id")
        long_span = _pred_span(p["long_answer"], f"{w}.long_answer") if "long_answer" in p else NqSpan()
        shorts = p.get("short_answers", [])
        if not isinstance(shorts, list):
            raise InputFormatError(f"{w}.short_answers: expected a list")
        short_spans = [_pred_span(s, f"{w}.short_answers[{j}]") for j, s in enumerate(shorts)]
        yn = p.get("yes_no_answer", "none")
        if not isinstance(yn, str) or yn.lower() not in ("yes", "no", "none"):
            raise InputFormatError(f"{w}.yes_no_answer: expected YES, NO or NONE, got {json.dumps(yn)}")
        yn = yn.lower()
        if yn != "none" and not is_null_span_list(short_spans):
            raise InputFormatError(f"{w}: a yes/no answer and non-null short answers cannot coexist")
        scores = []
        for k in ("long_answer_score", "short_answers_score"):
            v = p.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise InputFormatError(f"{w}.{k}: expected a number, got {json.dumps(v)}")
            if not math.isfinite(v):
                # NaN compares false with everything: the official threshold scan would rank it by file order
                raise InputFormatError(f"{w} (example_id {p['example_id']}).{k}: {v} is not a finite score; "
                                       "scores must be finite numbers to be ranked")
            scores.append(float(v))
        dups += p["example_id"] in out
        out[p["example_id"]] = NqLabel(long_span, short_spans, yn, scores[0], scores[1])
    return out, dups


def read_predictions(path: Path) -> Dict[Any, NqLabel]:
    from etc_fairseq.guards import load_json_file

    path = Path(path)
    obj = load_json_file(path, "an NQ prediction JSON file")
    pred, dups = parse_predictions(obj, str(path))
    if dups:
        logger.warning(f"{path}: {dups} duplicate example ids (the last prediction of each counts, as officially)")
    return pred


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, 'official prediction JSON ({"predictions": [...]})',
                           "official NQ jsonl(.gz) files (the 5-way annotated dev set)", many_gold=True)
    p.add_argument("--long-non-null-threshold", type=positive_int, default=2, help="annotators needed for a gold long answer (official: 2)")
    p.add_argument("--short-non-null-threshold", type=positive_int, default=2, help="annotators needed for a gold short answer (official: 2)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import report_metrics

    gold = read_gold(args.gold)
    pred = read_predictions(args.predictions)
    m = nq_metrics(gold, pred, args.long_non_null_threshold, args.short_non_null_threshold)
    text = json.dumps(m, indent=1)
    headline = (
        f"long answer  F1 {m['long-best-threshold-f1']:.4f} P {m['long-best-threshold-precision']:.4f} "
        f"R {m['long-best-threshold-recall']:.4f} (best threshold {m['long-best-threshold']:.4g}; n={m['long-answer-n']})\n"
        f"short answer F1 {m['short-best-threshold-f1']:.4f} P {m['short-best-threshold-precision']:.4f} "
        f"R {m['short-best-threshold-recall']:.4f} (best threshold {m['short-best-threshold']:.4g})"
    )
    report_metrics(text + "\n" + headline, text, args.output)
    return 0


EVALUATE = Subcommand(
    name="nq",
    help="official Natural Questions long/short answer P/R/F1 (nq_eval rules)",
    description=__doc__.split("\n\n", 1)[1],
    add_arguments=_add_arguments,
    run=_run,
)
