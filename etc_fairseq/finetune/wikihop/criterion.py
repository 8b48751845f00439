"""The ``etc_wikihop`` criterion: softmax cross-entropy over each example's candidate answers, one logit
per CANDIDATE global token (paper appendix C), and WikiHop accuracy with the official definition.

Loss: summed over the examples that have an answer (``sample_size`` = their number; examples of an
unlabelled test split add nothing). In a static graph (XLA, ``torch.compile``) the count stays on the device:
the loss is the mean over the labelled examples and ``sample_size`` is 1 (the same update on one worker; over
several workers or ``--update-freq`` steps, the mean of the per-batch means).
Accuracy: the top candidate is correct when its ``candidate_correct``
flag (computed by ``etc-prepare wikihop`` with :func:`etc_fairseq.finetune.wikihop.metrics.is_correct`) is 1;
the sums are logged and :func:`etc_fairseq.finetune.wikihop.metrics.accuracy_from_counts` derives the percent,
so training logs and ``fairseq-validate`` print the same number ``etc-evaluate wikihop`` computes.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import math
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.finetune.wikihop.metrics import accuracy_from_counts
from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.tracing import static_graph


@dataclass
class EtcWikiHopCriterionConfig(FairseqDataclass):
    pass


def candidate_logits(head_logits: torch.Tensor, global_types: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gather the candidates' logits, in candidate order.

    Args:
        head_logits: float [B, G], one logit per global token.
        global_types: int64 [B, G] (:class:`GlobalTokenType`; padding rows may hold anything but CANDIDATE).
    Returns:
        (logits float32 [B, C_max] with -inf past each example's candidates, mask bool [B, C_max]);
        column ``k`` is the example's ``k``-th CANDIDATE global token, whatever its position. ``C_max`` is the
        most candidates in the batch, or ``G`` in a static graph (:func:`etc_fairseq.tracing.static_graph`).
    """
    is_cand = global_types.eq(int(GlobalTokenType.CANDIDATE))  # [B, G]
    n_cand = is_cand.sum(dim=1)  # [B]
    if static_graph(global_types):  # no host read: C_max = G (the extra columns are masked)
        c_max = max(global_types.size(1), 1)
    else:
        c_max = max(int(n_cand.max()) if n_cand.numel() else 0, 1)
    # stable sort puts the candidate positions first, in order
    order = torch.sort((~is_cand).to(torch.int8), dim=1, stable=True).indices[:, :c_max]  # [B, C_max]
    mask = torch.arange(c_max, device=global_types.device).unsqueeze(0) < n_cand.unsqueeze(1)  # [B, C_max]
    logits = torch.gather(head_logits.float(), 1, order)  # [B, C_max]
    return logits.masked_fill(~mask, float("-inf")), mask


def loss_and_counts(logits: torch.Tensor, answer_index: torch.Tensor, candidate_correct: torch.Tensor):
    """Summed CE and accuracy counts.

    Args:
        logits: float [B, C] from :func:`candidate_logits`.
        answer_index: int64 [B] (-1 = no answer: excluded).
        candidate_correct: int64 [B, C'] with C' <= C (0-padded).
    Returns:
        (loss float scalar (sum over labelled examples), n_correct, n_labelled): the counts are ints, or
        int64 scalar tensors in a static graph (no host read).
    """
    labelled = answer_index.ge(0)  # [B]
    lprobs = F.log_softmax(logits, dim=-1)  # [B, C]
    nll = -torch.gather(lprobs, 1, answer_index.clamp(min=0).unsqueeze(1)).squeeze(1)  # [B]
    loss = torch.where(labelled, nll, torch.zeros_like(nll)).sum()
    pred = logits.argmax(dim=-1)  # [B]
    correct_flags = F.pad(candidate_correct, (0, logits.size(1) - candidate_correct.size(1)))  # [B, C]
    hit = torch.gather(correct_flags, 1, pred.unsqueeze(1)).squeeze(1).gt(0) & labelled  # [B]
    if static_graph(logits):
        return loss, hit.sum(), labelled.sum()
    return loss, int(hit.sum()), int(labelled.sum())


@register_criterion("etc_wikihop", dataclass=EtcWikiHopCriterionConfig)
class EtcWikiHopCriterion(FairseqCriterion):
    def __init__(self, cfg: EtcWikiHopCriterionConfig, task):
        super().__init__(task)

    def forward(self, model, sample, reduce=True):
        from etc_fairseq.finetune.wikihop.task import CANDIDATE_HEAD

        _, extra = self.task.forward_features(model, sample)
        head_logits = model.task_heads[CANDIDATE_HEAD](extra["global_features"]).squeeze(-1)  # [B, G]
        logits, _ = candidate_logits(head_logits, sample["net_input"]["global_types"])
        target = sample["target"]
        loss, n_correct, n_labelled = loss_and_counts(
            logits, target["answer_index"][:, 0], target["candidate_correct"]
        )
        sample_size = n_labelled
        if isinstance(n_labelled, torch.Tensor):
            # static graph: fairseq would read a tensor sample_size on the host (``sample_size or 1.0``), so
            # the loss is divided here and sample_size is 1 -- the same gradient and logged loss per batch
            loss = loss / n_labelled.clamp(min=1)
            sample_size = 1
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "ncorrect": n_correct,
            "nlabelled": n_labelled,
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar_sum("_ncorrect", total("ncorrect"))
        metrics.log_scalar_sum("_nlabelled", total("nlabelled"))
        metrics.log_derived(
            "accuracy",
            lambda meters: round(accuracy_from_counts(meters["_ncorrect"].sum, meters["_nlabelled"].sum), 3),
        )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
