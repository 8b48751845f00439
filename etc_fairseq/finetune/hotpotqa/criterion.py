"""The ``etc_hotpotqa`` criterion: HotpotQA's three losses and the official metrics.

Loss = ``sp_weight * SP + type_weight * TYPE + span_weight * SPAN``, each a mean over the worker's batch
(``sample_size`` is 1, as in ``cpc_mlm``):

- SP: sigmoid binary cross-entropy of the supporting-fact logit of every SENTENCE global token that has a
  label (``sp_label`` 0/1; -1 elsewhere), averaged over those tokens;
- TYPE: cross-entropy of span / yes / no from the global CLS, over examples with a known answer type;
- SPAN: (start CE + end CE) / 2 over the long tokens (padding excluded), over span-answer examples whose
  answer was found in the kept text (``answer_span`` >= 0).

Metrics in evaluation (``fairseq-validate``, validation during training): each example is decoded exactly as
``etc-predict hotpotqa`` does (:func:`etc_fairseq.finetune.hotpotqa.decode.decode_example`, supporting-fact
threshold ``--sp-threshold``) and scored with the official definitions
(:func:`etc_fairseq.finetune.hotpotqa.metrics.example_scores`) against the gold answer text and supporting facts
of its side record. Sums are logged and divided in ``reduce_metrics``: ``ans_em``, ``ans_f1``, ``sp_em``,
``sp_f1``, ``joint_em``, ``joint_f1`` (percent, over examples with gold; on the prepared valid split, which
keeps every record, this is the official score of the whole file at that threshold). Decoding is host work
(answer strings against gold text), so training steps skip it: they log, computed on the device, ``type_acc``
(answer type argmax = gold, percent of examples with a known type) and ``sp_acc`` (thresholded
supporting-fact prediction = label, percent of labelled sentence tokens), as evaluation does too. The
threshold that is best on dev is chosen with ``etc-predict hotpotqa --tune-sp-threshold``.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import NATS_TO_BITS, Ratio, log_mean_loss, log_ratios, logged
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
    """(sum of ``values`` where ``mask`` / max(count, 1), count int64 scalar) for float ``values`` and bool
    ``mask`` of the same shape; nothing is read on the host. Always part of the autograd graph, also when
    nothing counts (loss 0, gradient exactly 0): every head then gets a gradient in every step, which
    DistributedDataParallel requires."""
    count = mask.sum()
    total = torch.where(mask, values, torch.zeros_like(values)).sum()
    return total / count.clamp(min=1).to(total.dtype), count


def hotpotqa_losses(sp_logits, type_logits, start_logits, end_logits, long_padding_mask, target):
    """The three mean losses (float scalars) and their counts.

    Args:
        sp_logits: float [B, G]; type_logits: float [B, 3]; start_logits / end_logits: float [B, L].
        long_padding_mask: bool [B, L], True = padding.
        target: ``sp_label`` int64 [B, G] (-1 = none), ``answer_type`` int64 [B, 1] (-1 = unknown),
            ``answer_span`` int64 [B, 2] (-1 = none).
    Returns:
        dict: ``sp_loss``, ``type_loss``, ``span_loss`` (0 when nothing counts, still connected to the
        heads) and ``sp_count``, ``type_count``, ``span_count`` (int64 scalar tensors).
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


def head_hits(heads, target, sp_threshold: float):
    """On-device accuracy counts of two heads, computed in every step (no decoding, nothing read on the host).

    Args:
        heads: :class:`~etc_fairseq.finetune.hotpotqa.decode.HeadOutputs` (sp_logits float [B, G],
            type_logits float [B, 3], ...).
        target: ``sp_label`` int64 [B, G] (-1 = none), ``answer_type`` int64 [B, 1] (-1 = unknown).
        sp_threshold: supporting-fact probability threshold (``>=``, as decoding uses it).
    Returns:
        (type_correct int64 scalar: argmax answer type = gold, over examples with a known type;
        sp_correct int64 scalar: labelled sentence tokens whose thresholded prediction equals the label).
    """
    a_type = target["answer_type"][:, 0]  # [B]
    type_correct = (heads.type_logits.argmax(-1).eq(a_type) & a_type.ge(0)).sum()
    sp_label = target["sp_label"]  # [B, G]
    sp_pred = torch.sigmoid(heads.sp_logits.float()).ge(sp_threshold).long()  # [B, G]
    sp_correct = (sp_pred.eq(sp_label) & sp_label.ge(0)).sum()
    return type_correct, sp_correct


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
        # once: the losses and the metrics' decoding share them
        heads = apply_heads(model, features, extra, sample["net_input"]["global_types"])
        long_pad = extra["long_padding_mask"]  # [B, L]
        parts = hotpotqa_losses(*heads, long_pad, sample["target"])
        loss = self.sp_weight * parts["sp_loss"] + self.type_weight * parts["type_loss"] + self.span_weight * parts["span_loss"]

        log = {
            "loss": loss.data,
            "sample_size": 1,
            "nsentences": sample["nsentences"],
            "ntokens": sample["ntokens"],
        }
        for k in LOSSES:
            n = parts[f"{k}_count"]
            log[f"{k}_loss_sum"] = logged(parts[f"{k}_loss"] * n)
            log[f"{k}_count"] = logged(n)
        with torch.no_grad():
            type_hit, sp_hit = head_hits(heads, sample["target"], self.sp_threshold)
        log["type_correct"] = logged(type_hit)
        log["sp_correct"] = logged(sp_hit)
        if not model.training:
            log.update(self.official_sums(sample, heads.detach(), long_pad, extra["global_padding_mask"]))
        return loss, 1, log

    def official_sums(self, sample, heads, long_padding_mask, global_padding_mask) -> dict:
        """The official metrics' sums over the batch's examples with gold (side records) and their count.

        Decoding maps spans back to words and compares answer strings with the gold text of the side records:
        host work, so it runs in evaluation only (fairseq-validate, validation during training), with one
        copy of the heads' outputs to the host per batch, and a training step reads nothing from the device.
        """
        sums = {name: 0.0 for name in METRICS}
        n_gold = 0
        scores = batch_scores(heads, long_padding_mask, global_padding_mask)
        for side, (sp_probs, t_logits, s_logp, e_logp) in zip(sample["side"], scores):
            gold = Gold.from_side(side)
            if gold is None:
                continue
            answer, sp, _ = decode_example(side, sp_probs, t_logits, s_logp, e_logp, self.sp_threshold, self.max_answer_len)
            m = example_scores(answer, sp, gold.answer, gold.supporting_facts)
            for name, key in METRICS.items():
                sums[name] += m[key]
            n_gold += 1
        out = {f"{name}_sum": sums[name] for name in METRICS}
        out["gold_count"] = n_gold
        return out

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        ratios = {f"{k}_loss": Ratio(f"{k}_loss_sum", f"{k}_count", NATS_TO_BITS) for k in LOSSES}
        ratios["type_acc"] = Ratio("type_correct", "type_count", 100.0)
        ratios["sp_acc"] = Ratio("sp_correct", "sp_count", 100.0)
        if any("gold_count" in log for log in logging_outputs):  # evaluation: the official metrics
            ratios.update({name: Ratio(f"{name}_sum", "gold_count", 100.0) for name in METRICS})
        log_ratios(logging_outputs, ratios)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
