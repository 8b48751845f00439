"""The ``etc_wikihop`` criterion: softmax cross-entropy over each example's candidate answers, one logit
per CANDIDATE global token (paper appendix C), and WikiHop accuracy with the official definition.

Loss: summed over the examples that have an answer (``sample_size`` = their number; examples of an
unlabelled test split add nothing). In a static graph (XLA, ``torch.compile``) the count stays on the device:
the loss is the mean over the labelled examples and ``sample_size`` is 1 (the same update on one worker; over
several workers or ``--update-freq`` steps, the mean of the per-batch means).
Accuracy: the top candidate is correct when its ``candidate_correct``
flag (computed by ``etc-prepare wikihop`` with :func:`etc_fairseq.finetune.wikihop.schema.is_correct`) is 1;
the sums are logged and their ratio in percent is derived as
:func:`etc_fairseq.finetune.wikihop.metrics.accuracy_from_counts` computes it, so training logs and ``fairseq-validate`` print the same number ``etc-evaluate wikihop`` computes.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import Ratio, log_mean_loss, log_ratios, logged, loss_per_sample_size
from etc_fairseq.finetune.wikihop.decode import candidate_scores
from etc_fairseq.finetune.wikihop.metrics import ACCURACY_SCALE


@dataclass
class EtcWikiHopCriterionConfig(FairseqDataclass):
    pass


def loss_and_counts(logits: torch.Tensor, answer_index: torch.Tensor, candidate_correct: torch.Tensor):
    """Summed CE and accuracy counts.

    Args:
        logits: float [B, C] from :func:`~etc_fairseq.finetune.wikihop.decode.candidate_logits`.
        answer_index: int64 [B] (-1 = no answer: excluded).
        candidate_correct: int64 [B, C'] with C' <= C (0-padded).
    Returns:
        (loss float scalar (sum over labelled examples), n_correct int64 scalar, n_labelled int64 scalar):
        tensors, nothing read on the host.
    """
    labelled = answer_index.ge(0)  # [B]
    lprobs = F.log_softmax(logits, dim=-1)  # [B, C]
    nll = -torch.gather(lprobs, 1, answer_index.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
    loss = torch.where(labelled, nll, torch.zeros_like(nll)).sum()
    pred = logits.argmax(dim=-1)  # [B]
    correct_flags = F.pad(candidate_correct, (0, logits.size(1) - candidate_correct.size(1)))  # [B, C]
    hit = torch.gather(correct_flags, 1, pred.unsqueeze(1)).squeeze(1).gt(0) & labelled  # [B]
    return loss, hit.sum(), labelled.sum()


@register_criterion("etc_wikihop", dataclass=EtcWikiHopCriterionConfig)
class EtcWikiHopCriterion(FairseqCriterion):
    def __init__(self, cfg: EtcWikiHopCriterionConfig, task):
        super().__init__(task)

    def forward(self, model, sample, reduce=True):
        features, extra = self.task.forward_features(model, sample)
        logits, _ = candidate_scores(model, sample, features, extra)  # [B, C_max]
        target = sample["target"]
        loss, n_correct, n_labelled = loss_and_counts(
            logits, target["answer_index"][:, 0], target["candidate_correct"]
        )
        # a static graph (XLA): mean over the labelled examples, sample_size 1 (criterion_metrics)
        loss, sample_size = loss_per_sample_size(loss, n_labelled)
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "ncorrect": logged(n_correct),
            "nlabelled": logged(n_labelled),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        log_ratios(logging_outputs, {"accuracy": Ratio("ncorrect", "nlabelled", ACCURACY_SCALE)})

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
