"""The ``etc_structured`` task: the generic structured dataset (:mod:`.schema`) on data written by
``etc-prepare structured``. It reads the label level and the class names from ``DATA/prepare.json`` and
attaches the one head that level needs (:mod:`.decode`): a pooled classifier on the first CLS global token
(record), a class per global token (global), or start/end logits on the long tokens (span).

Targets (``sample["target"]``, :func:`.schema.target_fields`): ``record_label`` int64 [B, 1];
``global_labels`` int64 [B, G]; ``span`` / ``answer_words`` int64 [B, 2] and ``long_word`` int64 [B, L]
(-1 = unlabelled, and padding).
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task

from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.common.convert import SUMMARY_FILE
from etc_fairseq.finetune.common.task import EtcStructuredTask, EtcStructuredTaskConfig
from etc_fairseq.finetune.structured.decode import HEADS, RECORD_HEAD_INPUTS
from etc_fairseq.finetune.structured.schema import LABEL_LEVELS, target_fields

logger = logging.getLogger(__name__)


@dataclass
class EtcStructuredDataConfig(EtcStructuredTaskConfig):
    max_span_len: int = field(
        default=30, metadata={"help": "span level: the longest answer predicted, in long tokens"}
    )
    record_head_input: ChoiceEnum(RECORD_HEAD_INPUTS) = field(
        default="global_cls",
        metadata={"help": "record level: the record head reads the first CLS global token (global_cls, the "
                  "paper's) or the mean of the long tokens' outputs (long_mean: the pooling of "
                  "sentence-embedding models such as all-MiniLM-L6-v2, whose lifted CLS global token carries "
                  "almost nothing of the text until its global side is trained; examples/lifted_minilm)"},
    )


def read_label_info(data: str) -> dict:
    """``label_level`` and ``classes`` that ``etc-prepare structured`` recorded in ``DATA/prepare.json``
    (the first of ``data``'s paths), checked; InputFormatError naming the file otherwise."""
    path = Path(utils.split_paths(data)[0]) / SUMMARY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (the etc_structured task reads the directory written by "
                                "`etc-prepare structured`)")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFormatError(f"{path}: not a readable prepare.json ({e})") from None
    if not isinstance(info, dict) or info.get("dataset") != "structured":
        got = info.get("dataset") if isinstance(info, dict) else None
        raise InputFormatError(f"{path}: field 'dataset': expected \"structured\" (data written by `etc-prepare "
                               f"structured`), got {json.dumps(got)}; use the task of that dataset")
    level, classes = info.get("label_level"), info.get("classes")
    if level not in LABEL_LEVELS:
        raise InputFormatError(f"{path}: field 'label_level': expected one of {list(LABEL_LEVELS)}, got {json.dumps(level)}")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes) or (level != "span" and not classes):
        raise InputFormatError(f"{path}: field 'classes': expected a list of class names, got {json.dumps(classes)}")
    return {"label_level": level, "classes": classes, "global_types": info.get("global_types") or {}}


@register_task("etc_structured", dataclass=EtcStructuredDataConfig)
class EtcStructuredDataTask(EtcStructuredTask):
    """Your own structure: the label level and classes of ``etc-prepare structured``'s ``prepare.json``."""

    def __init__(self, cfg: EtcStructuredDataConfig, dictionary, label_info: dict):
        super().__init__(cfg, dictionary)
        self.label_level = label_info["label_level"]
        self.classes = list(label_info["classes"])
        self.TARGET_FIELDS = tuple(target_fields(self.label_level))

    @classmethod
    def setup_task(cls, cfg: EtcStructuredDataConfig, **kwargs):
        from etc_fairseq.data.indexed import load_data_dictionary

        info = read_label_info(cfg.data)
        dictionary = load_data_dictionary(cfg.data, "etc_structured reads the directory written by etc-prepare structured")
        task = cls(cfg, dictionary, info)
        task.take_up_prepared_settings(from_checkpoint=bool(kwargs.get("from_checkpoint", False)))
        logger.info(f"label level {task.label_level}" + (f", {len(task.classes)} classes {task.classes}"
                                                         if task.classes else ""))
        return task

    def encoder_outputs(self):
        if self.label_level == "span" or (self.label_level == "record" and self.cfg.record_head_input == "long_mean"):
            return ("long",)
        return ("global",)

    def describe_split(self, meta: dict) -> str:
        counts = meta.get("counts") or {}
        return (f" ({self.label_level} level; {counts.get('labels')} labels, {counts.get('unlabelled')} unlabelled, "
                f"{counts.get('truncated_examples')} truncated)")

    def build_heads(self, model) -> None:
        dim = model.cfg.encoder_embed_dim
        if self.label_level == "record":
            head = PooledClassifier(dim, len(self.classes), activation_fn=model.cfg.pooler_activation_fn,
                                    dropout=model.cfg.pooler_dropout)
        elif self.label_level == "global":
            head = TokenLogits(dim, len(self.classes))
        else:
            head = TokenLogits(dim, 2)
        model.register_task_head(HEADS[self.label_level], head)
