"""The ``etc_hotpotqa`` task: HotpotQA (distractor setting) on data written by ``etc-prepare hotpotqa``.

Heads (registered on the model in :meth:`EtcHotpotqaTask.build_heads`, saved in checkpoints):

- ``hotpotqa_sp``:   :class:`~etc_fairseq.encoder.heads.TokenLogits` (1 output) on the global features: one
  supporting-fact logit per global token (used on the SENTENCE tokens; sigmoid).
- ``hotpotqa_type``: :class:`~etc_fairseq.encoder.heads.PooledClassifier` (3 classes: span / yes / no) on
  the global CLS (global index 0).
- ``hotpotqa_span``: :class:`~etc_fairseq.encoder.heads.TokenLogits` (2 outputs) on the long features:
  answer start / end logits.
- ``hotpotqa_question`` (with ``--question-cosine``): :class:`~etc_fairseq.encoder.heads.QueryCosineScorer`,
  each global token's scaled cosine with the mean of the QUESTION tokens' outputs, less its mean over the
  example's sentences, added to its supporting-fact logit (:func:`~etc_fairseq.finetune.hotpotqa.decode.apply_heads`).

Hard g2l: the paper's HotpotQA models use a hard g2l mask (global tokens attend only to the long tokens
they summarise; removing it hurt). It is the model option ``--hard-g2l`` (``EtcConfig.hard_g2l``), not a
task option: pass it to ``fairseq-train``; it is stored in the checkpoint with the model config.

The dataset adds each example's side record (``{split}.side.jsonl``: ids, titles, unit offsets, words,
gold answer and supporting facts) to the batch as ``sample["side"]`` (a list of dicts), which the
``etc_hotpotqa`` criterion and ``etc-predict hotpotqa`` use to compute the official metrics and to map
predictions back to ``(title, sentence index)`` and answer text.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import logging
from dataclasses import dataclass
from typing import List

from fairseq.tasks import register_task

from etc_fairseq.data.structured import SideRecords, StructuredDataset, side_path
from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.common.task import EtcStructuredTask, QuestionCosineConfig, register_question_head
from etc_fairseq.finetune.hotpotqa.decode import QUESTION_HEAD, SP_HEAD, SPAN_HEAD, TYPE_HEAD
from etc_fairseq.finetune.hotpotqa.schema import AnswerType, target_fields

logger = logging.getLogger(__name__)


class HotpotqaDataset(StructuredDataset):
    """:class:`StructuredDataset` whose items and batches also carry the side record (``sample["side"]``)."""

    def __init__(self, data_dir, split, *args, **kwargs):
        super().__init__(data_dir, split, *args, **kwargs)
        self.side = SideRecords(side_path(data_dir, split))
        if len(self.side) != len(self):
            raise InputFormatError(f"{self.side.path}: {len(self.side)} records, meta says {len(self)} examples")

    def __getitem__(self, index: int):
        item = super().__getitem__(index)
        item["side"] = self.side[index]
        return item

    def collater(self, samples: List[dict]):
        batch = super().collater(samples)
        if batch:
            batch["side"] = [s["side"] for s in samples]
        return batch


@dataclass
class EtcHotpotqaConfig(QuestionCosineConfig):
    pass


@register_task("etc_hotpotqa", dataclass=EtcHotpotqaConfig)
class EtcHotpotqaTask(EtcStructuredTask):
    """HotpotQA: supporting facts, answer type, answer span (see the module docstring)."""

    TARGET_FIELDS = tuple(target_fields())

    DATASET_CLASS = HotpotqaDataset

    def describe_split(self, meta: dict) -> str:
        return f" (HotpotQA; flat_structure={meta.get('flat_structure')}, truncated {meta.get('examples_truncated')})"

    def build_heads(self, model) -> None:
        dim = model.cfg.encoder_embed_dim
        model.register_task_head(SP_HEAD, TokenLogits(dim, 1))
        model.register_task_head(
            TYPE_HEAD,
            PooledClassifier(dim, len(AnswerType), activation_fn=model.cfg.pooler_activation_fn,
                             dropout=model.cfg.pooler_dropout),
        )
        model.register_task_head(SPAN_HEAD, TokenLogits(dim, 2))
        register_question_head(model, self.cfg, QUESTION_HEAD)
