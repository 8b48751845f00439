"""The ``etc_nextsent`` criterion: softmax cross-entropy over each example's sentences (one score per
sentence, :func:`~etc_fairseq.finetune.nextsent.decode.sentence_scores`), and the task's metrics,
sentence-level accuracy and MRR in percent, defined as :mod:`etc_fairseq.finetune.nextsent.metrics`
defines them (ties broken uniformly at random in expectation).

Loss: summed over the examples whose answer the model scored (``sample_size`` = their number; in a static
graph, XLA or ``torch.compile``, the mean over them with ``sample_size`` 1:
:func:`etc_fairseq.criterion_metrics.loss_per_sample_size`).
Metrics: over every example; one whose answer was not scored scores 0 (the model cannot find it): dropped
by truncation when the data was prepared, or beyond the window of a model that reads only a prefix of the
long input (``roberta_window``). ``lost``: the percentage of such examples.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import Ratio, log_mean_loss, log_ratios, logged, loss_per_sample_size
from etc_fairseq.finetune.nextsent.decode import sentence_scores


@dataclass
class EtcNextSentCriterionConfig(FairseqDataclass):
    pass


def rank_metrics(logits: torch.Tensor, answer_index: torch.Tensor):
    """Expected accuracy and reciprocal rank per example (the definition in
    :func:`etc_fairseq.finetune.nextsent.metrics.rank_scores`, vectorised).

    Args:
        logits: float [B, S] (-inf past each example's sentences).
        answer_index: int64 [B], -1 = answer not in the input (scores 0).
    Returns:
        (accuracy float [B], reciprocal rank float [B]).
    """
    has = answer_index.ge(0)  # [B]
    t = torch.gather(logits, 1, answer_index.clamp(min=0).unsqueeze(1))  # [B, 1]
    greater = logits.gt(t).sum(dim=1)  # [B]
    equal = logits.eq(t).sum(dim=1) - 1  # [B]
    # harmonic numbers H_0..H_{S+1}: mean_{j=0..e} 1/(g+1+j) = (H_{g+e+1} - H_g) / (e + 1)
    S = logits.size(1)
    harmonic = torch.cat([logits.new_zeros(1), torch.cumsum(1.0 / torch.arange(1, S + 2, device=logits.device, dtype=logits.dtype), 0)])
    rr = (harmonic[greater + equal + 1] - harmonic[greater]) / (equal + 1).to(logits.dtype)  # [B]
    acc = torch.where(greater.eq(0), 1.0 / (equal + 1).to(logits.dtype), torch.zeros_like(rr))  # [B]
    zero = torch.zeros_like(rr)
    return torch.where(has, acc, zero), torch.where(has, rr, zero)


@register_criterion("etc_nextsent", dataclass=EtcNextSentCriterionConfig)
class EtcNextSentCriterion(FairseqCriterion):
    def __init__(self, cfg: EtcNextSentCriterionConfig, task):
        super().__init__(task)

    def forward(self, model, sample, reduce=True):
        features, extra = self.task.forward_features(model, sample)
        logits, mask = sentence_scores(model, sample, features, extra)  # [B, S_max]
        answer = sample["target"]["answer_index"][:, 0]  # [B]
        # an answer the model did not score (dropped by truncation, or outside a window) is lost
        scored_answer = torch.gather(mask, 1, answer.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
        answer = torch.where(answer.ge(0) & scored_answer, answer, torch.full_like(answer, -1))
        has = answer.ge(0)
        # an example whose sentences truncation dropped has only -inf logits (and no answer): give its row
        # finite values so that log_softmax's backward stays finite (its loss is masked out below)
        scored = logits.masked_fill(~mask.any(dim=1, keepdim=True), 0.0)  # [B, S]
        lprobs = F.log_softmax(scored, dim=-1)  # [B, S]
        nll = -torch.gather(lprobs, 1, answer.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
        loss = torch.where(has, nll, torch.zeros_like(nll)).sum()
        with torch.no_grad():
            acc, rr = rank_metrics(logits.detach(), answer)
        # a static graph (XLA): mean over the labelled examples, sample_size 1 (criterion_metrics)
        loss, sample_size = loss_per_sample_size(loss, has.sum())
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "acc_sum": logged(acc.sum()),
            "rr_sum": logged(rr.sum()),
            "lost_sum": logged((~has).sum()),
            "nexamples": int(answer.numel()),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        log_ratios(logging_outputs, {
            "accuracy": Ratio("acc_sum", "nexamples", 100.0),
            "mrr": Ratio("rr_sum", "nexamples", 100.0),
            "lost": Ratio("lost_sum", "nexamples", 100.0),
        })

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
