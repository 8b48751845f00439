"""The ``etc_nextsent`` criterion: softmax cross-entropy over each example's sentences (one score per
sentence, :func:`~etc_fairseq.finetune.nextsent.decode.sentence_scores`), and the task's metrics,
sentence-level accuracy and MRR in percent, defined as :mod:`etc_fairseq.finetune.nextsent.metrics`
defines them (ties broken uniformly at random in expectation).

With the task's ``--support-loss-weight W`` > 0 the loss adds W times the same cross-entropy of the support
head on ``support_index`` (the sentence before the answer in its paragraph), and ``support_accuracy`` is
logged over the examples whose support was scored.

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
from omegaconf import II

from etc_fairseq.criterion_metrics import Ratio, log_mean_loss, log_ratios, logged, loss_per_sample_size
from etc_fairseq.errors import ConfigError
from etc_fairseq.finetune.nextsent.decode import SUPPORT_HEAD, sentence_scores


@dataclass
class EtcNextSentCriterionConfig(FairseqDataclass):
    support_loss_weight: float = II("task.support_loss_weight")


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


def sentence_nll(logits: torch.Tensor, mask: torch.Tensor, index: torch.Tensor):
    """Cross-entropy of one sentence per example among its scored sentences.

    Args:
        logits: float [B, S] (-inf where ``mask`` is False); mask: bool [B, S], the scored sentences.
        index: int64 [B], the target sentence, -1 = none.
    Returns:
        (nll float [B], 0 where there is no target; index int64 [B], -1 also where the target was not
        scored: dropped by truncation, or outside a window).
    """
    scored_target = torch.gather(mask, 1, index.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
    index = torch.where(index.ge(0) & scored_target, index, torch.full_like(index, -1))
    # an example whose sentences truncation dropped has only -inf logits (and no target): give its row
    # finite values so that log_softmax's backward stays finite (its loss is masked out)
    scored = logits.masked_fill(~mask.any(dim=1, keepdim=True), 0.0)  # [B, S]
    lprobs = F.log_softmax(scored, dim=-1)  # [B, S]
    nll = -torch.gather(lprobs, 1, index.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
    return torch.where(index.ge(0), nll, torch.zeros_like(nll)), index


@register_criterion("etc_nextsent", dataclass=EtcNextSentCriterionConfig)
class EtcNextSentCriterion(FairseqCriterion):
    def __init__(self, cfg: EtcNextSentCriterionConfig, task):
        super().__init__(task)
        # the task's value: it decided whether the support head exists (cfg's II reference resolves to the
        # same number under fairseq; a criterion built directly, with a default or no config, has none)
        self.support_loss_weight = float(getattr(getattr(task, "cfg", None), "support_loss_weight", 0.0))

    def forward(self, model, sample, reduce=True):
        features, extra = self.task.forward_features(model, sample)
        logits, mask = sentence_scores(model, sample, features, extra)  # [B, S_max]
        # an answer the model did not score (dropped by truncation, or outside a window) is lost
        nll, answer = sentence_nll(logits, mask, sample["target"]["answer_index"][:, 0])  # [B], [B]
        has = answer.ge(0)
        loss = nll.sum()
        support_log = {}
        if self.support_loss_weight > 0:
            support_loss, support_log = self.support_loss(model, sample, features, extra)
            loss = loss + self.support_loss_weight * support_loss
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
            **support_log,
        }
        return loss, sample_size, logging_output

    def support_loss(self, model, sample, features, extra):
        """The support head's summed cross-entropy on ``support_index`` (the sentence before the answer in
        its paragraph) and its logging entries (accuracy over the examples that have a scored support)."""
        support = sample["target"].get("support_index")
        if support is None:
            raise ConfigError(
                f"--support-loss-weight needs the support_index field, and the data in {self.task.cfg.data} was "
                "prepared without it: prepare it again with etc-prepare nextsent")
        logits, mask = sentence_scores(model, sample, features, extra, SUPPORT_HEAD)  # [B, S]
        nll, support = sentence_nll(logits, mask, support[:, 0])
        with torch.no_grad():
            acc, _ = rank_metrics(logits.detach(), support)
        return nll.sum(), {"support_acc_sum": logged(acc.sum()), "support_n": logged(support.ge(0).sum())}

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        ratios = {
            "accuracy": Ratio("acc_sum", "nexamples", 100.0),
            "mrr": Ratio("rr_sum", "nexamples", 100.0),
            "lost": Ratio("lost_sum", "nexamples", 100.0),
        }
        if any("support_n" in log for log in logging_outputs):  # trained with --support-loss-weight
            ratios["support_accuracy"] = Ratio("support_acc_sum", "support_n", 100.0)
        log_ratios(logging_outputs, ratios)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
