"""The ``etc_hotpotqa`` criterion: HotpotQA's three losses and the official metrics.

Loss = ``sp_weight * SP + type_weight * TYPE + span_weight * SPAN``, each a mean over the worker's batch
(``sample_size`` is 1, as in ``cpc_mlm``):

- SP: sigmoid binary cross-entropy of the supporting-fact logit of every SENTENCE global token that has a
  label (``sp_label`` 0/1; -1 elsewhere), averaged over those tokens;
- TYPE: cross-entropy of span / yes / no from the global CLS, over examples with a known answer type;
- SPAN: (start CE + end CE) / 2 over the long tokens (padding excluded), over span-answer examples whose
  answer was found in the kept text (``answer_span`` >= 0).

Metrics (training and validation; ``fairseq-validate`` prints them): each example is decoded exactly as
``etc-predict hotpotqa`` does (:func:`etc_fairseq.finetune.hotpotqa.decode.decode_example`, supporting-fact
threshold ``--sp-threshold``) and scored with the official definitions
(:func:`etc_fairseq.finetune.hotpotqa.metrics.example_scores`) against the gold answer text and supporting facts
of its side record. Sums are logged and divided in ``reduce_metrics``: ``ans_em``, ``ans_f1``, ``sp_em``,
``sp_f1``, ``joint_em``, ``joint_f1`` (percent, over examples with gold; on the prepared valid split, which
keeps every record, this is the official score of the whole file at that threshold). The threshold that is
best on dev is chosen with ``etc-predict hotpotqa --tune-sp-threshold``.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import NATS_TO_BITS, Ratio, log_mean_loss, log_ratios
from etc_fairseq.finetune.hotpotqa.decode import apply_heads, batch_scores, decode_example
from etc_fairseq.finetune.hotpotqa.metrics import HEADLINE_KEYS, example_scores, logged_name
from etc_fairseq.finetune.hotpotqa.schema import AnswerType, Gold

#: logged name -> official metric key
METRICS = {logged_name(key): key for key in HEADLINE_KEYS}
LOSSES = ("sp", "type", "span")


@dataclass
class EtcHotpotqaCriterionConfig(FairseqDataclass):
    sp_weight: float = field(default=1.0, metadata={"help": "weight of the supporting-fact BCE"})
    type_weight: float = field(default=1.0, metadata={"help": "weight of the span/yes/no cross-entropy"})
    span_weight: float = field(default=1.0, metadata={"help": "weight of the answer start/end cross-entropy"})
    sp_threshold: float = field(
        default=0.5, metadata={"help": "supporting-fact probability threshold for the logged metrics (choose it on "
                               "dev with etc-predict hotpotqa --tune-sp-threshold)"}
    )
    max_answer_len: int = field(default=30, metadata={"help": "longest decoded answer span, in long tokens"})


def _masked_mean(values: torch.Tensor, mask: torch.Tensor):
    """(sum of ``values`` where ``mask`` / max(count, 1), count) for float ``values`` and bool ``mask`` of the
    same shape. Always part of the autograd graph, also when nothing counts (loss 0, gradient exactly 0):
    every head then gets a gradient in every step, which DistributedDataParallel requires."""
    count = int(mask.sum())
    total = torch.where(mask, values, torch.zeros_like(values)).sum()
    return total / max(count, 1), count


def hotpotqa_losses(sp_logits, type_logits, start_logits, end_logits, long_padding_mask, target):
    """The three mean losses (float scalars) and their counts.

    Args:
        sp_logits: float [B, G]; type_logits: float [B, 3]; start_logits / end_logits: float [B, L].
        long_padding_mask: bool [B, L], True = padding.
        target: ``sp_label`` int64 [B, G] (-1 = none), ``answer_type`` int64 [B, 1] (-1 = unknown),
            ``answer_span`` int64 [B, 2] (-1 = none).
    Returns:
        dict: ``sp_loss``, ``type_loss``, ``span_loss`` (0 when nothing counts, still connected to the
        heads) and ``sp_count``, ``type_count``, ``span_count`` (ints).
    """
    sp_label = target["sp_label"]
    sp_bce = F.binary_cross_entropy_with_logits(
        sp_logits.float(), sp_label.clamp(min=0).float(), reduction="none")  # [B, G]
    sp_loss, sp_count = _masked_mean(sp_bce, sp_label.ge(0))
    a_type = target["answer_type"][:, 0]  # [B]
    type_ce = F.cross_entropy(type_logits.float(), a_type.clamp(min=0), reduction="none")  # [B]
    type_loss, type_count = _masked_mean(type_ce, a_type.ge(0))
    span = target["answer_span"]  # [B, 2]
    span_mask = a_type.eq(int(AnswerType.SPAN)) & span[:, 0].ge(0)  # [B]
    neg = torch.finfo(torch.float32).min
    s = start_logits.float().masked_fill(long_padding_mask, neg)  # [B, L]
    e = end_logits.float().masked_fill(long_padding_mask, neg)  # [B, L]
    span_ce = 0.5 * (F.cross_entropy(s, span[:, 0].clamp(min=0), reduction="none")
                     + F.cross_entropy(e, span[:, 1].clamp(min=0), reduction="none"))  # [B]
    span_loss, span_count = _masked_mean(span_ce, span_mask)
    return dict(sp_loss=sp_loss, type_loss=type_loss, span_loss=span_loss,
                sp_count=sp_count, type_count=type_count, span_count=span_count)


@register_criterion("etc_hotpotqa", dataclass=EtcHotpotqaCriterionConfig)
class EtcHotpotqaCriterion(FairseqCriterion):
    def __init__(self, task, sp_weight=1.0, type_weight=1.0, span_weight=1.0, sp_threshold=0.5, max_answer_len=30):
        super().__init__(task)
        self.sp_weight = float(sp_weight)
        self.type_weight = float(type_weight)
        self.span_weight = float(span_weight)
        self.sp_threshold = float(sp_threshold)
        self.max_answer_len = int(max_answer_len)

    def forward(self, model, sample, reduce=True):
        features, extra = self.task.forward_features(model, sample)  # [B, L, D], [B, G, D]
        heads = apply_heads(model, features, extra)  # once: the losses and the metrics' decoding share them
        long_pad = extra["long_padding_mask"]  # [B, L]
        parts = hotpotqa_losses(*heads, long_pad, sample["target"])
        loss = self.sp_weight * parts["sp_loss"] + self.type_weight * parts["type_loss"] + self.span_weight * parts["span_loss"]

        log = {
            "loss": float(loss.detach()),
            "sample_size": 1,
            "nsentences": sample["nsentences"],
            "ntokens": sample["ntokens"],
        }
        for k in LOSSES:
            n = parts[f"{k}_count"]
            log[f"{k}_loss_sum"] = float(parts[f"{k}_loss"].detach()) * n
            log[f"{k}_count"] = n
        sums = {name: 0.0 for name in METRICS}
        n_gold = 0
        with torch.no_grad():
            scores = batch_scores(heads.detach(), long_pad, extra["global_padding_mask"])
        for side, (sp_probs, t_logits, s_logp, e_logp) in zip(sample["side"], scores):
            gold = Gold.from_side(side)
            if gold is None:
                continue
            answer, sp, _ = decode_example(side, sp_probs, t_logits, s_logp, e_logp, self.sp_threshold, self.max_answer_len)
            m = example_scores(answer, sp, gold.answer, gold.supporting_facts)
            for name, key in METRICS.items():
                sums[name] += m[key]
            n_gold += 1
        log["gold_count"] = n_gold
        for name in METRICS:
            log[f"{name}_sum"] = sums[name]
        return loss, 1, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        ratios = {f"{k}_loss": Ratio(f"{k}_loss_sum", f"{k}_count", NATS_TO_BITS) for k in LOSSES}
        ratios.update({name: Ratio(f"{name}_sum", "gold_count", 100.0) for name in METRICS})
        log_ratios(logging_outputs, ratios)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
