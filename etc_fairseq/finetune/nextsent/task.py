"""The ``etc_nextsent`` task: the CONSTRUCTED next-sentence task (:mod:`.schema`) on data written by
``etc-prepare nextsent``. One head, ``task_heads.nextsent_sentences``: a dense layer from one vector per
sentence (its SENTENCE global token's output, or the mean of its long tokens without global tokens; chosen per
example by :func:`~etc_fairseq.finetune.nextsent.decode.sentence_scores`) to one logit; the criterion
``etc_nextsent`` takes the softmax over an example's sentences.

Targets (``sample["target"]``): ``answer_index`` int64 [B, 1] (the answer's index among the example's
sentences, -1 if truncation dropped it), ``num_sentences`` int64 [B, 1], ``long_sentence`` int64 [B, L]
(each long token's sentence index, -1 for the question, titles and CLS), and, in data that has it,
``support_index`` int64 [B, 1] (the sentence before the answer in its paragraph, -1 if none). With
``--support-loss-weight W`` > 0 a second head, ``task_heads.nextsent_support`` (the same shape), scores the
sentences for the support and the criterion adds W times its cross-entropy. With ``--question-cosine`` a
third head, ``task_heads.nextsent_question`` (:class:`~etc_fairseq.encoder.heads.QueryCosineScorer`), adds to
each sentence's logit its scaled cosine with the question (the mean of the question pieces' long outputs,
``question_len`` [B, 1] in the data: etc-prepare nextsent writes it), so that the comparison a sentence
encoder already makes is there from the first update instead of learnt through attention by a one-logit head.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq.tasks import register_task

from etc_fairseq.encoder.heads import TokenLogits
from etc_fairseq.errors import ConfigError
from etc_fairseq.finetune.common.task import EtcStructuredTask, QuestionCosineConfig, register_question_head
from etc_fairseq.finetune.nextsent.decode import QUESTION_HEAD, SENTENCE_HEAD, SUPPORT_HEAD
from etc_fairseq.finetune.nextsent.schema import target_fields


@dataclass
class EtcNextSentConfig(QuestionCosineConfig):
    support_loss_weight: float = field(
        default=0.0,
        metadata={"help": "weight of a second head's loss on the support sentence (the one just before the answer "
                  "in its paragraph: where the question was removed; the copy in the next-of-copy probe), "
                  "partial credit for the first hop as HotpotQA's supporting facts; 0 = no support head"},
    )


@register_task("etc_nextsent", dataclass=EtcNextSentConfig)
class EtcNextSentTask(EtcStructuredTask):
    """Find the sentence that followed the question (one score per sentence)."""

    TARGET_FIELDS = tuple(target_fields())

    def build_heads(self, model) -> None:
        model.register_task_head(SENTENCE_HEAD, TokenLogits(model.cfg.encoder_embed_dim, 1))
        if self.cfg.support_loss_weight < 0:
            raise ConfigError(f"--support-loss-weight: expected a weight >= 0, got {self.cfg.support_loss_weight}")
        if self.cfg.support_loss_weight > 0:
            model.register_task_head(SUPPORT_HEAD, TokenLogits(model.cfg.encoder_embed_dim, 1))
        register_question_head(model, self.cfg, QUESTION_HEAD)
