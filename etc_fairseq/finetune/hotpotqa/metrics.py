"""HotpotQA's official evaluation (the distractor-setting script ``hotpot_evaluate_v1.py``), reimplemented.

Definitions (per gold example, then averaged over **all gold examples**; a gold id missing from the
prediction file scores 0 on what is missing, and 0 on joint):

- **answer** (:func:`answer_scores`): SQuAD normalisation (:mod:`etc_fairseq.text`); EM = equal
  normalised strings; precision / recall / F1 = token overlap. Special rule: if either normalised string is
  ``yes``, ``no`` or ``noanswer`` and they differ, precision = recall = F1 = 0.
- **supporting facts** (:func:`sp_scores`): the predicted and gold facts as sets of ``(title, sentence
  index)``; ``tp`` = shared, ``fp`` = predicted only, ``fn`` = gold only; precision = tp / (tp + fp) (0 if
  nothing predicted), recall = tp / (tp + fn) (0 if no gold), F1 their harmonic mean (0 if both 0),
  EM = 1 iff fp = fn = 0 (so an empty prediction for an empty gold list is EM 1, F1 0).
- **joint** (:func:`joint_scores`): precision = answer precision x sp precision, recall = answer recall x
  sp recall, F1 their harmonic mean (0 if both 0), EM = answer EM x sp EM. Only when the example has both
  an answer and an sp prediction.

Keys of the result: ``em, f1, prec, recall, sp_em, sp_f1, sp_prec, sp_recall, joint_em, joint_f1,
joint_prec, joint_recall`` (fractions in [0, 1]).

``etc-evaluate hotpotqa --predictions PRED.json --gold hotpot_dev_distractor_v1.json`` prints them as JSON.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Dict, Iterable, Mapping, Optional, Sequence

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.hotpotqa.schema import Gold, read_gold
from etc_fairseq.progress import progress
from etc_fairseq.text import normalize_answer, token_prf

logger = logging.getLogger(__name__)

__all__ = [
    "METRIC_KEYS",
    "answer_scores",
    "sp_scores",
    "joint_scores",
    "example_scores",
    "evaluate",
    "load_predictions",
    "EVALUATE",
]

METRIC_KEYS = (
    "em", "f1", "prec", "recall",
    "sp_em", "sp_f1", "sp_prec", "sp_recall",
    "joint_em", "joint_f1", "joint_prec", "joint_recall",
)

#: the six numbers HotpotQA results are reported with (answer, supporting facts, joint; EM and F1)
HEADLINE_KEYS = ("em", "f1", "sp_em", "sp_f1", "joint_em", "joint_f1")


def logged_name(key: str) -> str:
    """The name training logs use for a :data:`HEADLINE_KEYS` key (``em`` -> ``ans_em``)."""
    return key if "_" in key else f"ans_{key}"


_SPECIAL_ANSWERS = ("yes", "no", "noanswer")


def answer_scores(prediction: str, gold: str) -> Dict[str, float]:
    """``{"em", "f1", "prec", "recall"}`` of one answer (yes/no/noanswer mismatch scores 0)."""
    norm_pred, norm_gold = normalize_answer(prediction), normalize_answer(gold)
    em = float(norm_pred == norm_gold)
    if norm_pred != norm_gold and (norm_pred in _SPECIAL_ANSWERS or norm_gold in _SPECIAL_ANSWERS):
        return {"em": em, "f1": 0.0, "prec": 0.0, "recall": 0.0}
    prec, recall, f1 = token_prf(prediction, gold)
    return {"em": em, "f1": f1, "prec": prec, "recall": recall}


def _fact_set(facts: Iterable[Sequence]) -> set:
    return {(str(f[0]), int(f[1])) for f in facts}


def sp_scores(prediction: Iterable[Sequence], gold: Iterable[Sequence]) -> Dict[str, float]:
    """``{"sp_em", "sp_f1", "sp_prec", "sp_recall"}`` of (title, sentence index) sets."""
    pred, gold_set = _fact_set(prediction), _fact_set(gold)
    tp = len(pred & gold_set)
    fp = len(pred - gold_set)
    fn = len(gold_set - pred)
    prec = tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = tp / (tp + fn) if tp + fn > 0 else 0.0
    f1 = 2 * prec * recall / (prec + recall) if prec + recall > 0 else 0.0
    em = 1.0 if fp + fn == 0 else 0.0
    return {"sp_em": em, "sp_f1": f1, "sp_prec": prec, "sp_recall": recall}


def joint_scores(answer: Mapping[str, float], sp: Mapping[str, float]) -> Dict[str, float]:
    """``{"joint_em", "joint_f1", "joint_prec", "joint_recall"}`` from :func:`answer_scores` and :func:`sp_scores`."""
    prec = answer["prec"] * sp["sp_prec"]
    recall = answer["recall"] * sp["sp_recall"]
    f1 = 2 * prec * recall / (prec + recall) if prec + recall > 0 else 0.0
    return {"joint_em": answer["em"] * sp["sp_em"], "joint_f1": f1, "joint_prec": prec, "joint_recall": recall}


def example_scores(
    pred_answer: Optional[str],
    pred_sp: Optional[Iterable[Sequence]],
    gold_answer: str,
    gold_sp: Iterable[Sequence],
) -> Dict[str, float]:
    """All :data:`METRIC_KEYS` of one gold example; ``None`` = no prediction (those scores and joint are 0)."""
    out = {k: 0.0 for k in METRIC_KEYS}
    ans = sp = None
    if pred_answer is not None:
        ans = answer_scores(pred_answer, gold_answer)
        out.update(ans)
    if pred_sp is not None:
        sp = sp_scores(pred_sp, gold_sp)
        out.update(sp)
    if ans is not None and sp is not None:
        out.update(joint_scores(ans, sp))
    return out


def evaluate(predictions: Mapping[str, Mapping], gold: Sequence[Gold]) -> Dict[str, float]:
    """Average :func:`example_scores` over the gold examples.

    Args:
        predictions: ``{"answer": {id: text}, "sp": {id: [[title, idx], ...]}}`` (either part may be absent).
        gold: the gold examples (:func:`~etc_fairseq.finetune.hotpotqa.schema.read_gold` from an official
            file, or :meth:`~etc_fairseq.finetune.hotpotqa.schema.Gold.from_side` from a prepared split);
            at least one.
    Returns:
        ``{key: mean}`` for :data:`METRIC_KEYS`, plus ``"n"`` (gold examples), ``"missing_answer"`` and
        ``"missing_sp"`` (gold ids without that prediction).
    """
    if not gold:
        raise InputFormatError("no gold examples to evaluate against")
    answers = predictions.get("answer", {}) or {}
    sps = predictions.get("sp", {}) or {}
    totals = {k: 0.0 for k in METRIC_KEYS}
    missing_answer = missing_sp = 0
    for g in progress(gold, desc="evaluating", unit="ex"):
        pa = answers.get(g.id)
        ps = sps.get(g.id)
        missing_answer += pa is None
        missing_sp += ps is None
        for k, v in example_scores(pa, ps, g.answer, g.supporting_facts).items():
            totals[k] += v
    n = len(gold)
    out: Dict[str, float] = {k: totals[k] / n for k in METRIC_KEYS}
    out.update(n=n, missing_answer=missing_answer, missing_sp=missing_sp)
    if missing_answer or missing_sp:
        logger.warning(f"{missing_answer} gold ids have no answer prediction, {missing_sp} no sp prediction (scored 0)")
    return out


# ---------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------


def _load_json(path: Path, what: str):
    from etc_fairseq.guards import load_json_file

    return load_json_file(path, what)


def load_predictions(path: Path) -> dict:
    """A prediction file ``{"answer": {id: text}, "sp": {id: [[title, idx], ...]}}``, checked."""
    from etc_fairseq.prepare.documents import InputFormatError

    data = _load_json(path, "a HotpotQA prediction JSON file")
    if not isinstance(data, dict) or not ({"answer", "sp"} & set(data)):
        raise InputFormatError(f"{path}: expected an object with 'answer' and/or 'sp'")
    for key in ("answer", "sp"):
        part = data.get(key, {})
        if not isinstance(part, dict):
            raise InputFormatError(f"{path}: field {key!r} must be an object {{id: ...}}")
    for _id, text in data.get("answer", {}).items():
        if not isinstance(text, str):
            raise InputFormatError(f"{path}: answer of id {_id}: expected a string, got {type(text).__name__}")
    for _id, facts in data.get("sp", {}).items():
        if not isinstance(facts, list) or not all(
            isinstance(f, (list, tuple)) and len(f) == 2 and isinstance(f[0], str) and isinstance(f[1], int)
            for f in facts
        ):
            raise InputFormatError(f"{path}: sp of id {_id}: expected a list of [title, sentence_index]")
    return data


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, 'prediction file {"answer": {...}, "sp": {...}}',
                           "official gold file (e.g. hotpot_dev_distractor_v1.json)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import format_metrics, report_metrics

    text = format_metrics(evaluate(load_predictions(args.predictions), read_gold(args.gold)))
    report_metrics(text, text, args.output)
    return 0


EVALUATE = Subcommand(
    name="hotpotqa",
    help="HotpotQA answer / supporting-fact / joint EM and F1 (official definitions)",
    description="Score a HotpotQA prediction file ({\"answer\": {id: text}, \"sp\": {id: [[title, idx], ...]}}) "
    "against the official gold JSON with the official script's definitions: SQuAD answer normalisation, "
    "yes/no/noanswer mismatch = 0, supporting facts as (title, sentence index) sets, joint precision / recall "
    "= products, everything averaged over the gold examples (missing predictions score 0).",
    add_arguments=_add_arguments,
    run=_run,
)
