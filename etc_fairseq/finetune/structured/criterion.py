"""The ``etc_structured`` criterion: the loss and metrics of the label level the data was prepared at
(the task's ``label_level``), with the definitions of :mod:`.metrics`, so ``fairseq-validate`` prints what
``etc-evaluate structured`` computes on the same prepared examples.

- record: cross-entropy of the record head; ``accuracy`` over labelled records.
- global: cross-entropy per labelled global token; ``accuracy`` over labelled global tokens (those the
  converter cut count as wrong).
- span: the mean of the start and end cross-entropies over the long tokens; ``exact_match`` and ``f1`` of the
  best span's words (:func:`.decode.best_spans`) against the gold words, over every labelled record (a record
  whose answer ``etc-prepare`` cut has no span loss and scores what the model finds).

``sample_size`` is the number of labelled items the loss sums over (records, global tokens or spans). Nothing
is read on the host in a training step under a static graph (``torch.compile``, XLA:
:func:`etc_fairseq.criterion_metrics.logged`, :func:`~etc_fairseq.criterion_metrics.loss_per_sample_size`):
``tests/test_compile.py`` compiles a training step of each label level with ``torch.compile(fullgraph=True)``.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import Ratio, log_mean_loss, log_ratios, logged, loss_per_sample_size
from etc_fairseq.finetune.structured.decode import best_spans, global_logits, record_logits, span_logits, span_words
from etc_fairseq.finetune.structured.metrics import SCALE


@dataclass
class EtcStructuredCriterionConfig(FairseqDataclass):
    pass


def class_loss_and_counts(logits: torch.Tensor, target: torch.Tensor):
    """Summed cross-entropy and accuracy counts of class logits.

    Args:
        logits: float [N, C]; target: int64 [N], -1 = unlabelled (excluded).
    Returns:
        (loss float scalar, n_correct int64 scalar, n_labelled int64 scalar): tensors, nothing read on the host.
    """
    labelled = target.ge(0)
    nll = F.cross_entropy(logits.float(), target.clamp(min=0), reduction="none")  # [N]
    loss = torch.where(labelled, nll, torch.zeros_like(nll)).sum()
    correct = (logits.argmax(-1).eq(target) & labelled).sum()
    return loss, correct, labelled.sum()


def span_metric_sums(pred_words: torch.Tensor, gold_words: torch.Tensor):
    """Summed exact match and F1 (in [0, 1] per record, :func:`.metrics.span_scores` vectorised) and the
    number of labelled records.

    Args:
        pred_words, gold_words: int64 [B, 2] inclusive word spans (gold -1 = unlabelled; a predicted span
            with a negative or reversed end scores 0).
    Returns:
        (exact-match sum float scalar, F1 sum float scalar, labelled int64 scalar): tensors.
    """
    labelled = gold_words[:, 0].ge(0)
    valid = pred_words[:, 0].ge(0) & pred_words[:, 1].ge(pred_words[:, 0])
    shared = (torch.minimum(pred_words[:, 1], gold_words[:, 1]) - torch.maximum(pred_words[:, 0], gold_words[:, 0]) + 1).clamp(min=0)
    n_pred = (pred_words[:, 1] - pred_words[:, 0] + 1).clamp(min=1)
    n_gold = (gold_words[:, 1] - gold_words[:, 0] + 1).clamp(min=1)
    f1 = torch.where(shared > 0, 2.0 * shared / (n_pred + n_gold), torch.zeros_like(shared, dtype=torch.float))
    em = pred_words.eq(gold_words).all(dim=1)
    keep = labelled & valid
    return (em & keep).float().sum(), torch.where(keep, f1, torch.zeros_like(f1)).sum(), labelled.sum()


@register_criterion("etc_structured", dataclass=EtcStructuredCriterionConfig)
class EtcStructuredCriterion(FairseqCriterion):
    def __init__(self, cfg: EtcStructuredCriterionConfig, task):
        super().__init__(task)

    def forward(self, model, sample, reduce=True):
        features, extra = self.task.forward_features(model, sample)
        target = sample["target"]
        level = self.task.label_level
        log = {"ntokens": sample["ntokens"], "nsentences": sample["nsentences"]}
        if level == "record":
            padding = sample["net_input"]["src_tokens"].eq(self.task.dictionary.pad())  # [B, L]
            logits = record_logits(model, extra, sample["net_input"]["global_types"], features, padding,
                                   self.task.cfg.record_head_input)  # [B, C]
            loss, correct, n = class_loss_and_counts(logits, target["record_label"][:, 0])
            log.update(ncorrect=logged(correct), nlabelled=logged(n))
        elif level == "global":
            logits = global_logits(model, extra)  # [B, G, C]
            labels = target["global_labels"]  # [B, G']
            labels = F.pad(labels, (0, logits.size(1) - labels.size(1)), value=-1)  # [B, G]
            loss, correct, n = class_loss_and_counts(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
            # labelled tokens the converter cut count as wrong (as etc-evaluate scores them)
            log.update(ncorrect=logged(correct), nlabelled=logged(n + target["labels_cut"].sum()))
        else:
            padding = sample["net_input"]["src_tokens"].eq(self.task.dictionary.pad())  # [B, L]
            start, end = span_logits(model, features, padding)  # [B, L] each
            span = target["span"]  # [B, 2]
            has = span[:, 0].ge(0)
            nll = (F.cross_entropy(start, span[:, 0].clamp(min=0), reduction="none")
                   + F.cross_entropy(end, span[:, 1].clamp(min=0), reduction="none")) / 2  # [B]
            loss = torch.where(has, nll, torch.zeros_like(nll)).sum()
            n = has.sum()
            with torch.no_grad():
                first, last = best_spans(start.detach(), end.detach(), self.task.cfg.max_span_len)
                em, f1, n_answers = span_metric_sums(span_words(first, last, target["long_word"]), target["answer_words"])
            log.update(em_sum=logged(em), f1_sum=logged(f1), nanswers=logged(n_answers))
        # eagerly a sum over the n labelled items; in a static graph (XLA) their mean, sample_size 1
        loss, sample_size = loss_per_sample_size(loss, n)
        log.update(loss=loss.data, sample_size=sample_size)
        return loss, sample_size, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        if any("ncorrect" in log for log in logging_outputs):
            log_ratios(logging_outputs, {"accuracy": Ratio("ncorrect", "nlabelled", SCALE)})
        if any("em_sum" in log for log in logging_outputs):
            log_ratios(logging_outputs, {"exact_match": Ratio("em_sum", "nanswers", SCALE),
                                         "f1": Ratio("f1_sum", "nanswers", SCALE)})

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
