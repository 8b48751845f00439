"""The ``etc_nq`` task: Natural Questions on data written by ``etc-prepare nq`` (paper appendix C), one
window of a document per example.

Heads (``model.task_heads``): ``nq_long_span`` and ``nq_short_span`` (TokenLogits, 2 outputs: start and end
logit per long token) and ``nq_answer_type`` (PooledClassifier on the long CLS: null/yes/no/short/long).

Targets (``sample["target"]``, see :mod:`etc_fairseq.finetune.nq.schema`): ``nq_targets`` int64 [B, 5],
``long_word`` int64 [B, L], ``candidates`` int64 [B, C, 3], ``gold`` int64 [B, n] (all annotations, for the
official metric), ``window_info`` int64 [B, 3] (example index, window index, number of windows).
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq.tasks import register_task

from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
from etc_fairseq.finetune.nq.schema import ANSWER_TYPES, target_fields
from etc_fairseq.finetune.common.task import EtcStructuredTask, EtcStructuredTaskConfig

@dataclass
class EtcNqConfig(EtcStructuredTaskConfig):
    max_global_len: int = field(default=230, metadata={"help": "longest global input (paper: 230 for long length 4096)"})
    long_non_null_threshold: int = field(
        default=2, metadata={"help": "official metric: annotators needed for a gold long answer (official: 2)"}
    )
    short_non_null_threshold: int = field(
        default=2, metadata={"help": "official metric: annotators needed for a gold short answer (official: 2)"}
    )
    max_short_words: int = field(default=38, metadata={"help": "longest predicted short answer in words (paper: 38)"})


@register_task("etc_nq", dataclass=EtcNqConfig)
class EtcNqTask(EtcStructuredTask):
    """Natural Questions: long and short answer spans plus answer type, per window."""

    TARGET_FIELDS = tuple(target_fields())
    ENCODER_OUTPUTS = ("long",)

    def build_heads(self, model) -> None:
        dim = model.cfg.encoder_embed_dim
        model.register_task_head("nq_long_span", TokenLogits(dim, 2))
        model.register_task_head("nq_short_span", TokenLogits(dim, 2))
        model.register_task_head(
            "nq_answer_type",
            PooledClassifier(dim, len(ANSWER_TYPES), activation_fn=model.cfg.pooler_activation_fn, dropout=model.cfg.pooler_dropout),
        )
