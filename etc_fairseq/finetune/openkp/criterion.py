"""The ``etc_openkp`` criterion: one softmax over all 1..5-gram candidates of a document; the target
probability is split equally among the gold keyphrases found in the document, on their first occurrence, or
with ``--max-loss`` on the occurrence with the highest logit (paper appendix C). ``sample_size`` = the documents
with a gold phrase found (in a static graph, XLA or ``torch.compile``, the loss is the mean over them and
``sample_size`` 1: :func:`etc_fairseq.criterion_metrics.loss_per_sample_size`).

In evaluation (``fairseq-validate``, validation during training) it also computes the official OpenKP
metrics (:mod:`etc_fairseq.finetune.openkp.metrics`): top 5 n-grams by logit, de-duplicated uncased (equal n-gram
ids), P/R/F1 @1, @3, @5 per document, averaged over documents. Recall counts every distinct gold phrase,
also those cut off by truncation. Per-document values are logged as sums and divided in
:meth:`reduce_metrics`, so the printed figures are exact averages over the whole split.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from etc_fairseq.criterion_metrics import log_mean_loss, loss_per_sample_size, total
from etc_fairseq.finetune.openkp.metrics import KS, f1
from etc_fairseq.finetune.openkp.decode import hits_at, top_distinct_batch
from etc_fairseq.finetune.openkp.heads import keyphrase_loss, keyphrase_targets, ngram_valid_mask


@dataclass
class EtcOpenKPCriterionConfig(FairseqDataclass):
    max_loss: bool = field(
        default=False,
        metadata={"help": "use the max logit over all occurrences of each keyphrase instead of its first occurrence"},
    )


@register_criterion("etc_openkp", dataclass=EtcOpenKPCriterionConfig)
class EtcOpenKPCriterion(FairseqCriterion):
    def __init__(self, task, max_loss: bool = False):
        super().__init__(task)
        self.max_loss = bool(max_loss)

    def forward(self, model, sample, reduce=True):
        logits = self.task.keyphrase_logits(model, sample)  # float [B, W, 5]
        target = sample["target"]
        ngram_ids = target["ngram_ids"]  # int64 [B, W, 5]
        gold = target["gold_phrases"]  # int64 [B, K]
        valid = ngram_valid_mask(ngram_ids)
        targets, found = keyphrase_targets(ngram_ids, gold, logits, self.max_loss)
        per_doc = keyphrase_loss(logits, valid, targets)  # [B]
        # sample_size = documents with a gold phrase found; in a static graph (XLA) the mean over them with
        # sample_size 1 (criterion_metrics.loss_per_sample_size)
        loss, sample_size = loss_per_sample_size(per_doc.sum(), found.gt(0).sum())
        n_docs = int(gold.size(0))
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": n_docs,
            "sample_size": sample_size,
        }
        if not model.training:
            # decoding (distinct phrases by id, hits against the gold ids) runs on the host, once per batch:
            # evaluation only, so a training step reads nothing from the device
            logging_output["kp_docs"] = n_docs
            logits_cpu, ngram_cpu = logits.detach().float().cpu(), ngram_ids.cpu()
            predicted = top_distinct_batch(logits_cpu, ngram_cpu, max(KS))
            flat_ids = ngram_cpu.reshape(n_docs, -1).tolist()
            for b, gold_row in enumerate(gold.cpu().tolist()):
                pred_ids = [flat_ids[b][i] for i in predicted[b]]
                gold_b = [g for g in gold_row if g != -1]  # -1 = batch padding; -2 = not in document
                hits = hits_at(pred_ids, gold_b, KS)
                for k, h in zip(KS, hits):
                    p = h / k
                    r = h / len(gold_b) if gold_b else 0.0
                    for name, value in (("p", p), ("r", r), ("f1", f1(p, r))):
                        key = f"kp_{name}_{k}"
                        logging_output[key] = logging_output.get(key, 0.0) + value
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        log_mean_loss(logging_outputs)
        n_docs = total(logging_outputs, "kp_docs")
        if n_docs > 0:  # validation only: per-document means over the documents seen
            for k in KS:
                for name, label in (("p", "P"), ("r", "R"), ("f1", "F1")):
                    metrics.log_scalar(f"{label}@{k}", total(logging_outputs, f"kp_{name}_{k}") / n_docs, n_docs, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
