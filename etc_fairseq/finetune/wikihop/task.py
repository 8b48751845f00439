"""The ``etc_wikihop`` task: WikiHop multiple choice on data written by ``etc-prepare wikihop`` (paper
appendix C). One head, ``task_heads.wikihop_candidates``: a dense layer from each global token's output
to one logit; the criterion ``etc_wikihop`` reads it at the CANDIDATE global tokens (softmax over the
example's candidates), and ``etc-predict wikihop`` picks the candidate with the highest logit. With
``--question-cosine`` a second head, ``task_heads.wikihop_question``
(:class:`~etc_fairseq.encoder.heads.QueryCosineScorer`), adds to each candidate's logit the scaled cosine of
its global token's output with the question's vector (the mean of the QUESTION global tokens' outputs), so
that a comparison a sentence encoder already makes is there from the first update.

Data prepared with ``--no-globals`` (the local-only arm; ``--arch roberta_window``, the flat encoder's) has
no CANDIDATE tokens: the same heads score each candidate from the mean of its pieces' long outputs in the
candidate list, the question's vector is the mean of the query pieces' long outputs, and the encoder's last
layer computes the long outputs only.

Targets (``sample["target"]``): ``answer_index`` int64 [B, 1] (candidate index of the answer, -1 when the
split has no answers) and ``candidate_correct`` int64 [B, C_max] (1 where the candidate equals the answer
under the official definition, 0 else and at padding); with ``--no-globals`` also ``long_candidate`` int64
[B, L] and ``question_len`` int64 [B, 1].
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.tasks import register_task

from etc_fairseq.data import prepared

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

    def take_up_prepared_settings(self, from_checkpoint: bool) -> None:
        """As the base class; and whether the data was prepared with ``--no-globals`` (``DATA/prepare.json``)."""
        super().take_up_prepared_settings(from_checkpoint)
        path = prepared.summary_path(utils.split_paths(self.cfg.data)[0]) if self.cfg.data else None
        self.no_globals = bool((prepared.read_summary(path) or {}).get("no_globals")) if path else False

    def encoder_outputs(self):
        """The candidates' global tokens; their pieces in the long input with ``--no-globals`` data."""
        return ("long",) if self.no_globals else ("global",)

    def build_heads(self, model) -> None:
        model.register_task_head(CANDIDATE_HEAD, TokenLogits(model.cfg.encoder_embed_dim, 1))
        register_question_head(model, self.cfg, QUESTION_HEAD)
