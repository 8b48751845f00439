"""The ``etc_wikihop`` task: WikiHop multiple choice on data written by ``etc-prepare wikihop`` (paper
appendix C). One head, ``task_heads.wikihop_candidates``: a dense layer from each global token's output
to one logit; the criterion ``etc_wikihop`` reads it at the CANDIDATE global tokens (softmax over the
example's candidates), and ``etc-predict wikihop`` picks the candidate with the highest logit. With
``--question-cosine`` a second head, ``task_heads.wikihop_question``
(:class:`~etc_fairseq.encoder.heads.QueryCosineScorer`), adds to each candidate's logit the scaled cosine of
its global token's output with the question's vector (the mean of the QUESTION global tokens' outputs), so
that a comparison a sentence encoder already makes is there from the first update.

Targets (``sample["target"]``): ``answer_index`` int64 [B, 1] (candidate index of the answer, -1 when the
split has no answers) and ``candidate_correct`` int64 [B, C_max] (1 where the candidate equals the answer
under the official definition, 0 else and at padding).
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq.tasks import register_task

from etc_fairseq.finetune.common.task import EtcStructuredTask, QuestionCosineConfig, register_question_head
from etc_fairseq.finetune.wikihop.decode import CANDIDATE_HEAD, QUESTION_HEAD
from etc_fairseq.finetune.wikihop.schema import target_fields
from etc_fairseq.encoder.heads import TokenLogits


@dataclass
class EtcWikiHopConfig(QuestionCosineConfig):
    max_global_len: int = field(
        default=430, metadata={"help": "longest global input accepted (the paper uses 430 for WikiHop)"}
    )


@register_task("etc_wikihop", dataclass=EtcWikiHopConfig)
class EtcWikiHopTask(EtcStructuredTask):
    """WikiHop: choose the answer among the candidates (one global token each)."""

    TARGET_FIELDS = tuple(target_fields())
    ENCODER_OUTPUTS = ("global",)

    def build_heads(self, model) -> None:
        model.register_task_head(CANDIDATE_HEAD, TokenLogits(model.cfg.encoder_embed_dim, 1))
        register_question_head(model, self.cfg, QUESTION_HEAD)
