"""HotpotQA decoding: the three heads on the encoder outputs (:func:`apply_heads`, run once per batch by both
the ``etc_hotpotqa`` criterion and ``etc-predict hotpotqa``), their outputs as per-example arrays
(:func:`batch_scores`), and one example's prediction (:func:`decode_example`). ``etc-predict hotpotqa``
writes the official prediction file ``{"answer": {id: text}, "sp": {id: [[title, sentence_index], ...]}}``.

Heads (``model.task_heads``, registered by the task): :data:`SP_HEAD` (one logit per global token, read at
the SENTENCE tokens), :data:`TYPE_HEAD` (:class:`~etc_fairseq.finetune.hotpotqa.schema.AnswerType` logits
from the global CLS), :data:`SPAN_HEAD` (start / end logits per long token).

Decoding (paper appendix C, :func:`decode_example`):

- supporting facts: the sentences whose sigmoid probability is >= the threshold (``--sp-threshold``; the
  paper chooses it on dev among ``linspace(0, 1, 11)``: ``--tune-sp-threshold`` does that on the given split,
  reports every threshold's metrics and writes the predictions of the best one by joint F1);
- answer type: argmax of the span / yes / no head on the global CLS; yes / no give the answer "yes" / "no";
- span: start and end inside one unit (a sentence or a title) that belongs to a predicted supporting fact
  (the sentence itself, or its paragraph's title), start <= end, at most ``--max-answer-len`` (30) long
  tokens, highest ``start_prob * end_prob`` (softmax over all long tokens). If no sentence passes the
  threshold, every kept sentence and title is allowed (so the answer is not empty); this fallback is
  counted and logged. The span maps back to whole words (joined by single spaces).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple

import numpy as np
import torch

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.finetune.common.selection import mean_by_type
from etc_fairseq.finetune.common.spans import best_span, select_above_threshold
from etc_fairseq.finetune.hotpotqa.metrics import HEADLINE_KEYS
from etc_fairseq.finetune.hotpotqa.schema import AnswerType, Gold, SideUnit as U
from etc_fairseq.guards import positive_int
from etc_fairseq.structure.global_tokens import GlobalTokenType

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLDS = tuple(round(x, 1) for x in np.linspace(0.0, 1.0, 11))

#: names of the heads in ``model.task_heads``
SP_HEAD, TYPE_HEAD, SPAN_HEAD = "hotpotqa_sp", "hotpotqa_type", "hotpotqa_span"
#: name of the question-cosine head (global tokens [B, G, D], question [B, D] -> one logit per global token),
#: present with the task's ``question_cosine``; it adds to the supporting-fact logits only
QUESTION_HEAD = "hotpotqa_question"


class HeadOutputs(NamedTuple):
    """The heads' outputs on one batch; padding positions are not masked."""

    sp_logits: torch.Tensor  # float [B, G]
    type_logits: torch.Tensor  # float [B, len(AnswerType)]
    start_logits: torch.Tensor  # float [B, L]
    end_logits: torch.Tensor  # float [B, L]

    def detach(self) -> "HeadOutputs":
        return HeadOutputs(*(t.detach() for t in self))


def apply_heads(model, features, extra, global_types: torch.Tensor) -> HeadOutputs:
    """The three heads on encoder outputs: ``features`` float [B, L, D], ``extra["global_features"]`` float
    [B, G, D]; ``global_types`` int64 [B, G]. With the question-cosine head, each global token's
    supporting-fact logit gains its scaled cosine with the mean of the QUESTION tokens' outputs, less the mean
    of that term over the example's SENTENCE tokens: a sigmoid reads a logit's level, and a sentence encoder's
    cosines are all positive (times a scale of 20, every sentence would start as a fact, and the linear head's
    bias moves about the learning rate per update); centred, the sentences more similar to the question than
    the example's average start above the threshold."""
    g = extra["global_features"]
    sp_logits = model.task_heads[SP_HEAD](g).squeeze(-1)  # [B, G]
    if QUESTION_HEAD in model.task_heads:
        question = mean_by_type(g, global_types, GlobalTokenType.QUESTION)  # [B, D]
        cosine = model.task_heads[QUESTION_HEAD](g, question)  # [B, G]
        centre = mean_by_type(cosine.unsqueeze(-1), global_types, GlobalTokenType.SENTENCE)  # [B, 1]
        sp_logits = sp_logits + cosine - centre  # [B, G]
    type_logits = model.task_heads[TYPE_HEAD](g[:, 0])  # [B, 3]: from the global CLS
    span = model.task_heads[SPAN_HEAD](features)  # [B, L, 2]
    return HeadOutputs(sp_logits, type_logits, span[..., 0], span[..., 1])


def decode_example(
    side: dict,
    sp_probs: np.ndarray,
    type_logits: np.ndarray,
    start_logp: np.ndarray,
    end_logp: np.ndarray,
    threshold: float,
    max_answer_len: int = 30,
) -> Tuple[str, List[List], bool]:
    """One example's prediction.

    Args:
        side: its side record (``titles``, ``units``, ``words``, ``word_of_piece``).
        sp_probs: float [global_len] supporting-fact probabilities (only SENTENCE tokens are read).
        type_logits: float [3] span / yes / no.
        start_logp, end_logp: float [long_len] log-probabilities of start / end (``-inf`` at padding).
        threshold: supporting-fact probability threshold (``>=``).
        max_answer_len: most long tokens in a span.
    Returns:
        ``(answer text, [[title, sentence index], ...], fallback used)``.
    """
    units = side["units"]  # [[paragraph, sentence, global, long_start, long_end], ...] (SideUnit)
    sent_units = [i for i, u in enumerate(units) if u[U.SENTENCE] >= 0]
    sent_probs = [float(sp_probs[units[i][U.GLOBAL_INDEX]]) for i in sent_units]
    chosen = [sent_units[j] for j in select_above_threshold(sent_probs, threshold)]
    sp = [[side["titles"][units[i][U.PARAGRAPH]], int(units[i][U.SENTENCE])] for i in chosen]
    answer_type = AnswerType(int(np.argmax(type_logits)))
    if answer_type != AnswerType.SPAN:
        return answer_type.label, sp, False
    fallback = not chosen
    if fallback:
        allowed = list(range(len(units)))
    else:
        paragraphs = {units[i][U.PARAGRAPH] for i in chosen}
        titles = {i for i, u in enumerate(units) if u[U.SENTENCE] < 0 and u[U.PARAGRAPH] in paragraphs}
        allowed = sorted(set(chosen) | titles)
    ranges = [(units[i][U.LONG_START], units[i][U.LONG_END]) for i in allowed]
    best = best_span(start_logp, end_logp, ranges, max_answer_len)
    if best is None:
        return "", sp, fallback
    _, s, e = best
    for i in allowed:
        lo, hi = units[i][U.LONG_START], units[i][U.LONG_END]
        if lo <= s < hi:
            wop = side["word_of_piece"][i]
            words = side["words"][i]
            return " ".join(words[wop[s - lo] : wop[e - lo] + 1]), sp, fallback
    raise AssertionError("decoded span outside every allowed unit")


def batch_scores(heads: HeadOutputs, long_padding_mask, global_padding_mask):
    """The heads' outputs on a batch as per-example numpy arrays.

    Args:
        heads: from :func:`apply_heads`.
        long_padding_mask: bool [B, L], global_padding_mask: bool [B, G] (True = padding; the model
            returns both in ``extra``).
    Returns:
        list (one per example) of ``(sp_probs float32 [G], type_logits float32 [3], start_logp float32 [L],
        end_logp float32 [L])``, cut to the example's own lengths.
    """
    # one copy to the host first: cutting rows to their lengths on an XLA device would compile a graph per shape
    heads = HeadOutputs(*(t.detach().float().cpu() for t in heads))
    long_padding_mask, global_padding_mask = long_padding_mask.cpu(), global_padding_mask.cpu()
    neg = float("-inf")
    start_logp = torch.log_softmax(heads.start_logits.masked_fill(long_padding_mask, neg), dim=-1)  # [B, L]
    end_logp = torch.log_softmax(heads.end_logits.masked_fill(long_padding_mask, neg), dim=-1)  # [B, L]
    sp_probs = torch.sigmoid(heads.sp_logits)  # [B, G]
    long_len = (~long_padding_mask).sum(-1).tolist()
    global_len = (~global_padding_mask).sum(-1).tolist()
    out = []
    for b in range(sp_probs.size(0)):
        out.append((
            sp_probs[b, : global_len[b]].numpy(),
            heads.type_logits[b].numpy(),
            start_logp[b, : long_len[b]].numpy(),
            end_logp[b, : long_len[b]].numpy(),
        ))
    return out


def predictions_at(outputs: Sequence[Tuple[dict, tuple]], threshold: float, max_answer_len: int) -> Tuple[dict, int]:
    """``({"answer": ..., "sp": ...}, fallbacks)`` for ``[(side, scores), ...]`` at one threshold."""
    answers: Dict[str, str] = {}
    sps: Dict[str, list] = {}
    fallbacks = 0
    for side, (sp_probs, type_logits, start_logp, end_logp) in outputs:
        a, sp, fb = decode_example(side, sp_probs, type_logits, start_logp, end_logp, threshold, max_answer_len)
        answers[side["id"]] = a
        sps[side["id"]] = sp
        fallbacks += fb
    return {"answer": answers, "sp": sps}, fallbacks


def side_metrics(predictions: dict, sides: Sequence[dict]) -> Dict[str, float]:
    """Official metrics of ``predictions`` against the gold answers / supporting facts kept in the side records."""
    from etc_fairseq.finetune.hotpotqa.metrics import evaluate

    gold = [Gold.from_side(s) for s in sides]
    missing = [s["id"] for s, g in zip(sides, gold) if g is None]
    if missing:
        raise ConfigError(f"{len(missing)} examples have no gold answer (e.g. {missing[0]}): cannot tune on a test split")
    return evaluate(predictions, gold)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.runner import add_predict_arguments

    add_predict_arguments(p)
    p.add_argument("--sp-threshold", type=float, default=None,
                   help="supporting-fact probability threshold (default: the checkpoint criterion's "
                   "--sp-threshold, else 0.5)")
    p.add_argument("--tune-sp-threshold", action="store_true",
                   help="try every --thresholds value on this split (it needs gold answers), report each one's "
                   "metrics and write the predictions of the best by joint F1")
    p.add_argument("--thresholds", type=float, nargs="+", default=list(DEFAULT_THRESHOLDS),
                   help="candidates for --tune-sp-threshold (default linspace(0, 1, 11), as in the paper)")
    p.add_argument("--max-answer-len", type=positive_int, default=30, help="longest answer span in long tokens (default 30)")
    p.add_argument("--report", type=Path, default=None, help="write the tuning table / metrics as JSON here")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import format_metrics
    from etc_fairseq.finetune.common.runner import iterate_outputs, load_checkpoint, parse_overrides
    from etc_fairseq.prepare.atomic import atomic_file

    model, task, cfg = load_checkpoint(args.path, args.data, parse_overrides(args.model_overrides), args.device)
    if SP_HEAD not in model.task_heads:
        raise CheckpointLoadError(f"{args.path}: not an etc_hotpotqa checkpoint (no {SP_HEAD!r} head; task {type(task).__name__})")
    threshold = args.sp_threshold
    if threshold is None:
        threshold = float(getattr(getattr(cfg, "criterion", None), "sp_threshold", 0.5) or 0.5)
    outputs: List[Tuple[dict, tuple]] = []
    for sample, features, extra in iterate_outputs(model, task, args.split, args.batch_size, args.device):
        heads = apply_heads(model, features, extra, sample["net_input"]["global_types"])
        scores = batch_scores(heads, extra["long_padding_mask"], extra["global_padding_mask"])
        outputs.extend(zip(sample["side"], scores))
    report: Dict[str, object] = {"split": args.split, "examples": len(outputs)}
    if args.tune_sp_threshold:
        table = []
        for t in args.thresholds:
            preds, fallbacks = predictions_at(outputs, t, args.max_answer_len)
            m = side_metrics(preds, [s for s, _ in outputs])
            table.append({"threshold": t, "fallbacks": fallbacks, **{k: m[k] for k in HEADLINE_KEYS}})
            print(f"sp threshold {t:.2f}: " + format_metrics(table[-1]))
        # ties: better sp F1, then answer F1, then the threshold nearest 0.5
        best = max(table, key=lambda r: (r["joint_f1"], r["sp_f1"], r["f1"], -abs(r["threshold"] - 0.5)))
        threshold = best["threshold"]
        report["tuning"] = table
        print(f"best sp threshold on {args.split} (joint F1): {threshold}")
    preds, fallbacks = predictions_at(outputs, threshold, args.max_answer_len)
    if fallbacks:
        logger.info(f"{fallbacks} of {len(outputs)} examples had no sentence above threshold {threshold}: span searched everywhere")
    report.update(sp_threshold=threshold, fallbacks=fallbacks)
    if all(Gold.from_side(s) is not None for s, _ in outputs):
        metrics = side_metrics(preds, [s for s, _ in outputs])
        report["metrics"] = metrics
        print(f"{args.split} metrics at sp threshold {threshold}: " + format_metrics(metrics))
    with atomic_file(args.output) as f:
        json.dump(preds, f, ensure_ascii=False)
    if args.report is not None:
        with atomic_file(args.report) as f:
            json.dump(report, f, indent=1)
    print(f"wrote {len(preds['answer'])} predictions to {args.output} (sp threshold {threshold})")
    return 0


PREDICT = Subcommand(
    name="hotpotqa",
    help="official HotpotQA prediction file from an etc_hotpotqa checkpoint (sp threshold tuning included)",
    description="Run a fine-tuned etc_hotpotqa checkpoint over a prepared split and write "
    "{\"answer\": {id: text}, \"sp\": {id: [[title, idx], ...]}} (paper appendix C decoding: spans inside one "
    "sentence or title of a predicted supporting fact, start <= end, at most 30 tokens, best start*end "
    "probability). --tune-sp-threshold picks the supporting-fact threshold with the best joint F1 on the split.",
    add_arguments=_add_arguments,
    run=_run,
)
