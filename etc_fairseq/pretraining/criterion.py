"""The ``cpc_mlm`` criterion: ETC's pre-training loss ``mlm_weight * MLM + cpc_weight * CPC``
(paper Sec. 3.5 and appendices B, C: weights 0.8 / 0.2).

- **MLM**: cross-entropy over the MLM-picked long positions (``target != pad``); only those positions
  go through the LM head (``masked_tokens``).
- **CPC** (appendix B, a dual encoder with shared weights): ``predicted`` = the main pass's global features
  of the CPC-masked sentences; ``targets`` = :meth:`EtcModel.encode_segments_alone` of those sentences'
  original tokens (gradients flow into both passes); ``scores = model.cpc_scores(predicted, targets)``
  ``[n, n]``; NCE loss = cross-entropy of every row with the diagonal as the positive and all other CPC
  sentences of the batch as negatives. With ``cpc_weight == 0`` the second encoder is never run. With
  fixed-length padding the CPC rows are padded to a fixed number (``cpc["valid"]`` marks the real ones):
  padding rows are neither predictions nor negatives, so the loss is the same.

Static graphs (:func:`etc_fairseq.tracing.static_graph`: ``torch.compile``, or tensors on an XLA device):
the LM head runs on every long position and the counts stay tensors, so nothing is read on the host.

Normalisation: each loss is a mean (MLM per picked token, CPC per CPC sentence) over the worker's batch,
and the returned ``sample_size`` is 1. fairseq sums gradients over workers (and ``--update-freq`` steps) and
divides by the summed sample size, so the update uses the average of the per-batch means; CPC negatives
are the CPC sentences of the same worker's batch only. Logged sums and counts are exact over all workers:
``mlm_loss`` = total MLM loss / total picked tokens, ``cpc_loss`` = total NCE loss / total CPC sentences.
Losses are logged in base 2 (fairseq's convention); accuracies in percent.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import NATS_TO_BITS, Ratio, log_mean_loss, log_ratios
from etc_fairseq.tracing import static_graph


@dataclass
class CpcMlmConfig(FairseqDataclass):
    mlm_weight: float = field(default=0.8, metadata={"help": "weight of the (mean) MLM loss"})
    cpc_weight: float = field(default=0.2, metadata={"help": "weight of the (mean) CPC NCE loss; 0 skips the second encoder"})


def nce_loss(scores: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """CPC's NCE loss for a square ``scores`` float ``[n, n]``: row ``i``'s positive is column ``i``."""
    if scores.dim() != 2 or scores.size(0) != scores.size(1):
        raise ValueError(f"scores must be [n, n], got {tuple(scores.shape)}")
    labels = torch.arange(scores.size(0), device=scores.device)
    return F.cross_entropy(scores.float(), labels, reduction=reduction)


@register_criterion("cpc_mlm", dataclass=CpcMlmConfig)
class CpcMlmCriterion(FairseqCriterion):
    def __init__(self, task, mlm_weight: float = 0.8, cpc_weight: float = 0.2):
        super().__init__(task)
        self.mlm_weight = float(mlm_weight)
        self.cpc_weight = float(cpc_weight)

    def forward(self, model, sample, reduce=True):
        target = sample["target"]
        masked = target.ne(self.padding_idx)
        static = static_graph(target)
        if static:
            # Static shapes, no host synchronisation (torch.compile, XLA/TPU): the LM head runs on every
            # position and unmasked ones are ignored by the loss -- the same loss as below, at the
            # cost of the LM head on all positions; the counts stay tensors.
            logits, extra = model(**sample["net_input"])
            flat = logits.view(-1, logits.size(-1)).float()
            mlm_sum = F.cross_entropy(flat, target.view(-1), ignore_index=self.padding_idx, reduction="sum")
            n_mask = masked.sum()
            mlm_correct = ((flat.argmax(-1) == target.view(-1)) & masked.view(-1)).sum()
        else:
            n_mask = int(masked.sum().item())
            logits, extra = model(**sample["net_input"], masked_tokens=masked)
            picked_target = target[masked]
            mlm_sum = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), picked_target, reduction="sum")
            mlm_correct = int((logits.argmax(-1) == picked_target).sum().item()) if n_mask else 0

        cpc = sample.get("cpc") or {}
        seg = cpc.get("segment_tokens")
        valid = cpc.get("valid")  # bool [N] with fixed-length padding: False on padding rows
        n_rows = int(seg.size(0)) if seg is not None else 0
        cpc_sum = logits.new_zeros((), dtype=torch.float)
        cpc_correct = 0
        cpc_counted = 0
        if self.cpc_weight != 0.0 and n_rows > 0:
            predicted = extra["global_features"][cpc["batch_index"], cpc["global_index"]]
            targets = model.encode_segments_alone(seg)
            scores = model.cpc_scores(predicted, targets)  # [N, N]
            labels = torch.arange(n_rows, device=scores.device)
            if valid is None:
                cpc_sum = nce_loss(scores, reduction="sum")
                cpc_correct = (scores.argmax(-1) == labels).sum()
                cpc_counted = n_rows
            else:
                # padding rows are no candidate (a score far below any real one: exp underflows to 0) and
                # add no loss: the same NCE as on the valid rows alone
                scores = scores.float().masked_fill(~valid.unsqueeze(0), -1e9)
                per_row = F.cross_entropy(scores, labels, reduction="none")  # [N]
                cpc_sum = torch.where(valid, per_row, torch.zeros_like(per_row)).sum()
                cpc_correct = ((scores.argmax(-1) == labels) & valid).sum()
                cpc_counted = valid.sum()
            if not static:
                cpc_correct = int(cpc_correct.item())
                cpc_counted = int(cpc_counted)
        if not static and cpc_counted == 0:
            # keep every parameter in the graph (DDP without find_unused_parameters)
            cpc_sum = cpc_sum + 0.0 * sum(p.sum() for p in model.cpc_head.parameters())

        n_mask_div = n_mask.clamp(min=1) if isinstance(n_mask, torch.Tensor) else max(n_mask, 1)
        cpc_div = cpc_counted.clamp(min=1) if isinstance(cpc_counted, torch.Tensor) else max(cpc_counted, 1)
        loss = self.mlm_weight * mlm_sum / n_mask_div + self.cpc_weight * cpc_sum / cpc_div
        logging_output = {
            "loss": loss.data,
            "mlm_loss_sum": mlm_sum.data,
            "mlm_count": n_mask,
            "mlm_correct": mlm_correct,
            "cpc_loss_sum": cpc_sum.data,
            "cpc_count": cpc_counted,
            "cpc_correct": cpc_correct,
            "cpc_batches": (cpc_counted > 0).long() if isinstance(cpc_counted, torch.Tensor) else int(cpc_counted > 0),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": 1,
        }
        return loss, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        log_ratios(logging_outputs, {
            "mlm_loss": Ratio("mlm_loss_sum", "mlm_count", NATS_TO_BITS),
            "mlm_accuracy": Ratio("mlm_correct", "mlm_count", 100.0),
            "cpc_loss": Ratio("cpc_loss_sum", "cpc_count", NATS_TO_BITS),
            "cpc_accuracy": Ratio("cpc_correct", "cpc_count", 100.0),
            "cpc_candidates": Ratio("cpc_count", "cpc_batches"),
        })

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
