"""The ``etc_nq`` criterion: Natural Questions fine-tuning loss and the official metrics (paper appendix C).

Loss per window = cross-entropy of the long-answer start, long-answer end, short-answer start, short-answer
end (each a softmax over CLS + the window's document positions; CLS = no answer in this window) plus the
cross-entropy of the answer type (null/yes/no/short/long, from the long CLS). ``sample_size`` = windows;
``loss`` is the summed five-term loss per window (base 2 in the log, fairseq's convention).

Metrics in evaluation mode (``fairseq-validate``, fairseq-train's validation): the **official** NQ numbers
(:mod:`etc_fairseq.finetune.nq.metrics`) on whole examples: every window's answers (:func:`etc_fairseq.finetune.nq.decode.window_prediction`)
are aggregated per example exactly as ``etc-predict nq`` does, and compared with all the example's
annotations (stored in the ``gold`` field), in a custom fairseq meter that lives for one validation run:
``nq_long_f1``/``nq_long_p``/``nq_long_r`` and ``nq_short_f1``/``_p``/``_r`` (best score threshold, the
official headline numbers, in percent). They equal ``etc-evaluate nq`` on the ``etc-predict nq`` output when
the valid split is the whole gold file. ``window_type_acc`` (answer type accuracy per window, in percent) is a
per-window diagnostic, not an official metric.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import logging
from dataclasses import dataclass, field
from typing import Dict, List

import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import meters

from etc_fairseq.criterion_metrics import Ratio, log_mean_loss, log_ratios, logged
from etc_fairseq.finetune.nq.decode import ExamplePrediction, batch_window_predictions, head_logits

logger = logging.getLogger(__name__)


@dataclass
class EtcNqCriterionConfig(FairseqDataclass):
    official_metrics: bool = field(
        default=True, metadata={"help": "in evaluation, aggregate windows per example and log the official P/R/F1"}
    )


class NqOfficialMeter(meters.Meter):
    """Accumulates window predictions per example during one validation and computes the official NQ
    metrics on demand. State: example index -> (ExamplePrediction, encoded gold)."""

    def __init__(self, long_threshold: int = 2, short_threshold: int = 2):
        super().__init__()
        self.long_threshold = long_threshold
        self.short_threshold = short_threshold
        self.reset()

    def reset(self):
        self.examples: Dict[int, ExamplePrediction] = {}
        self.gold: Dict[int, List[int]] = {}
        self.seen: Dict[int, set] = {}  # example -> window indices seen
        self.num_windows: Dict[int, int] = {}
        self._cache = None

    def update(self, windows, long_threshold: int = 2, short_threshold: int = 2):
        """``windows``: list of ((example index, window index, number of windows), WindowPrediction,
        encoded gold list), in any order (a window seen twice is counted once)."""
        self.long_threshold, self.short_threshold = long_threshold, short_threshold
        for (ex, k, n), w, gold in windows:
            if k in self.seen.setdefault(ex, set()):
                continue
            self.seen[ex].add(k)
            self.num_windows[ex] = n
            self.examples.setdefault(ex, ExamplePrediction()).update(w, k)
            self.gold.setdefault(ex, gold)
        self._cache = None

    @property
    def incomplete(self) -> int:
        """Examples some of whose windows were never seen (then the metrics are not the official ones)."""
        return sum(len(self.seen[ex]) < n for ex, n in self.num_windows.items())

    def state_dict(self):
        return {}  # lives for one validation run only

    def load_state_dict(self, state_dict):
        self.reset()

    def compute(self) -> Dict[str, float]:
        if self._cache is None:
            from etc_fairseq.finetune.nq.metrics import NqLabel, label_from_annotation, nq_metrics
            from etc_fairseq.finetune.nq.schema import NqSpan, decode_gold

            gold, pred = {}, {}
            for ex, p in self.examples.items():
                gold[ex] = [label_from_annotation(a) for a in decode_gold(self.gold[ex])]
                rec = p.to_official(ex)
                la = rec["long_answer"]
                pred[ex] = NqLabel(
                    NqSpan(la["start_token"], la["end_token"]),
                    [NqSpan(s["start_token"], s["end_token"]) for s in rec["short_answers"]],
                    rec["yes_no_answer"].lower(),
                    rec["long_answer_score"],
                    rec["short_answers_score"],
                )
            self._cache = nq_metrics(gold, pred, self.long_threshold, self.short_threshold) if gold else {}
            if self.incomplete:
                logger.warning(
                    f"{self.incomplete} of {len(self.examples)} examples were evaluated on only some of their "
                    "windows (did fairseq drop part of a batch? pass --required-batch-size-multiple 1): the "
                    "nq_* metrics are then not the official ones"
                )
        return self._cache

    @property
    def smoothed_value(self) -> float:
        return len(self.examples)


# fairseq rebuilds saved meters by class name from its own module namespace (MetersDict.load_state_dict);
# make ours findable there so that a checkpoint whose metrics state holds one can be resumed.
setattr(meters, NqOfficialMeter.__name__, NqOfficialMeter)


@register_criterion("etc_nq", dataclass=EtcNqCriterionConfig)
class EtcNqCriterion(FairseqCriterion):
    def __init__(self, task, official_metrics: bool = True):
        super().__init__(task)
        self.official_metrics = official_metrics

    def forward(self, model, sample, reduce=True):
        features, _ = self.task.forward_features(model, sample)  # [B, L, D]
        long_word = sample["target"]["long_word"]  # [B, L]
        long_logits, short_logits, type_logits = head_logits(model, features, long_word)
        t = sample["target"]["nq_targets"]  # [B, 5]
        losses = [
            F.cross_entropy(long_logits[:, :, 0].float(), t[:, 0], reduction="sum"),
            F.cross_entropy(long_logits[:, :, 1].float(), t[:, 1], reduction="sum"),
            F.cross_entropy(short_logits[:, :, 0].float(), t[:, 2], reduction="sum"),
            F.cross_entropy(short_logits[:, :, 1].float(), t[:, 3], reduction="sum"),
            F.cross_entropy(type_logits.float(), t[:, 4], reduction="sum"),
        ]
        loss = sum(losses)
        bsz = t.size(0)
        logging_output = {
            "loss": loss.data,
            "long_loss": (losses[0] + losses[1]).data,
            "short_loss": (losses[2] + losses[3]).data,
            "type_loss": losses[4].data,
            "type_correct": logged((type_logits.argmax(-1) == t[:, 4]).sum()),
            "ntokens": sample["ntokens"],
            "nsentences": bsz,
            "sample_size": bsz,
        }
        if not model.training and self.official_metrics:
            cfg = self.task.cfg
            # decoding runs on the host (one copy of the batch's logits): evaluation only, so a training step
            # reads nothing from the device
            wins = batch_window_predictions(sample, long_logits, short_logits, type_logits, cfg.max_short_words)
            gold = sample["target"]["gold"].cpu().tolist()  # [B][gold length]
            logging_output["nq_windows"] = [(ex, w, [int(v) for v in gold[b]]) for b, (ex, w) in enumerate(wins)]
            logging_output["nq_thresholds"] = (cfg.long_non_null_threshold, cfg.short_non_null_threshold)
        return loss, bsz, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        for key in ("loss", "long_loss", "short_loss", "type_loss"):
            log_mean_loss(logging_outputs, key)
        # sample_size = windows
        log_ratios(logging_outputs, {"window_type_acc": Ratio("type_correct", "sample_size", 100.0, digits=2, empty=0.0)})
        windows = [w for log in logging_outputs for w in log.get("nq_windows", [])]
        if not windows:
            return
        thresholds = next(log["nq_thresholds"] for log in logging_outputs if "nq_thresholds" in log)
        metrics.log_custom(NqOfficialMeter, "_nq_official", windows, *thresholds)

        def official(key):
            def fn(m):
                meter = m["_nq_official"] if "_nq_official" in m else None
                if meter is None or not meter.examples:
                    return 0.0
                return round(100.0 * meter.compute()[key], 2)

            return fn

        for name, key in (
            ("nq_long_f1", "long-best-threshold-f1"),
            ("nq_long_p", "long-best-threshold-precision"),
            ("nq_long_r", "long-best-threshold-recall"),
            ("nq_short_f1", "short-best-threshold-f1"),
            ("nq_short_p", "short-best-threshold-precision"),
            ("nq_short_r", "short-best-threshold-recall"),
        ):
            metrics.log_derived(name, official(key))
        metrics.log_derived("nq_examples", lambda m: len(m["_nq_official"].examples) if "_nq_official" in m else 0)
        metrics.log_derived("nq_incomplete", lambda m: m["_nq_official"].incomplete if "_nq_official" in m else 0)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        # window predictions are lists, gathered (not summed) across workers
        return False
