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

from etc_fairseq.data import prepared
from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
from etc_fairseq.errors import InputFormatError, MissingFileError
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
    prepared_label_level: str = field(
        default="", metadata={"help": "the label level of DATA/prepare.json, set by the task and recorded in "
                              "checkpoints: data prepared at another level is refused (given, it must match)"}
    )
    prepared_classes: str = field(
        default="", metadata={"help": "the class names of DATA/prepare.json as a JSON list, set by the task and "
                              "recorded in checkpoints: data with other classes is refused (given, they must match)"}
    )


def read_label_info(data: str) -> dict:
    """``label_level`` and ``classes`` that ``etc-prepare structured`` recorded in ``DATA/prepare.json``
    (the first of ``data``'s paths), checked; InputFormatError naming the file otherwise. ``path`` in the
    result is the file."""
    from etc_fairseq.guards import load_json_file

    path = Path(utils.split_paths(data)[0]) / SUMMARY_FILE
    if not path.is_file():
        raise MissingFileError(f"{path}: missing (the etc_structured task reads the directory written by "
                               "`etc-prepare structured`)")
    info = load_json_file(path, "the prepare.json of `etc-prepare structured`")
    if not isinstance(info, dict) or info.get("dataset") != "structured":
        got = info.get("dataset") if isinstance(info, dict) else None
        raise InputFormatError(f"{path}: field 'dataset': expected \"structured\" (data written by `etc-prepare "
                               f"structured`), got {json.dumps(got)}; use the task of that dataset")
    level, classes = info.get("label_level"), info.get("classes")
    if level not in LABEL_LEVELS:
        raise InputFormatError(f"{path}: field 'label_level': expected one of {list(LABEL_LEVELS)}, got {json.dumps(level)}")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes) or (level != "span" and not classes) \
            or len(set(classes)) != len(classes):
        raise InputFormatError(f"{path}: field 'classes': expected a list of distinct class names, got "
                               f"{json.dumps(classes)[:80]}")
    return {"label_level": level, "classes": classes, "global_types": info.get("global_types") or {}, "path": path}


def hold_label_info(cfg: EtcStructuredDataConfig, info: dict, from_checkpoint: bool) -> None:
    """Hold the label level and classes of ``DATA/prepare.json`` (``info``) against those ``cfg`` records (a
    checkpoint's: the data it was trained on; or given on the command line), then record them in ``cfg`` so
    the checkpoints of a training run carry them. A model's head is only meaningful for the level and classes
    it was trained with: a prepare.json edited to another level, or listing other classes (3 for a 2-class
    checkpoint, or the same ones in another order), would be scored with a fresh random head.

    Raises:
        InputFormatError: one line naming prepare.json, the field, and both values.
    """
    whose = "the checkpoint was trained on" if from_checkpoint else "--prepared-{} gives"
    level, classes = info["label_level"], json.dumps(info["classes"])
    if cfg.prepared_label_level and cfg.prepared_label_level != level:
        raise InputFormatError(
            f"{info['path']}: field 'label_level' is {level!r}, but {whose.format('label-level')} "
            f"{cfg.prepared_label_level!r} labels: prepare the data at the level the model was trained for"
        )
    if cfg.prepared_classes and cfg.prepared_classes != classes:
        raise InputFormatError(
            f"{info['path']}: field 'classes' is {classes}, but {whose.format('classes')} "
            f"{cfg.prepared_classes}: prepare the data with those classes (etc-prepare structured --classes)"
        )
    prepared.set_task_field(cfg, "prepared_label_level", level)
    prepared.set_task_field(cfg, "prepared_classes", classes)


@register_task("etc_structured", dataclass=EtcStructuredDataConfig)
class EtcStructuredDataTask(EtcStructuredTask):
    """Your own structure: the label level and classes of ``etc-prepare structured``'s ``prepare.json``."""

    def __init__(self, cfg: EtcStructuredDataConfig, dictionary, label_info: dict):
        super().__init__(cfg, dictionary)
        self.label_level = label_info["label_level"]
        self.classes = list(label_info["classes"])
        self.TARGET_FIELDS = tuple(target_fields(self.label_level))

    @classmethod
    def data_description(cls) -> str:
        return "etc_structured reads the directory written by etc-prepare structured"

    @classmethod
    def setup_task(cls, cfg: EtcStructuredDataConfig, **kwargs):
        from etc_fairseq.data.indexed import load_data_dictionary

        from_checkpoint = bool(kwargs.get("from_checkpoint", False))
        info = read_label_info(cfg.data)
        hold_label_info(cfg, info, from_checkpoint)
        dictionary = load_data_dictionary(cfg.data, cls.data_description())
        task = cls(cfg, dictionary, info)
        task.take_up_prepared_settings(from_checkpoint=from_checkpoint)
        logger.info(f"label level {task.label_level}" + (f", {len(task.classes)} classes {task.classes}"
                                                         if task.classes else ""))
        return task

    def encoder_outputs(self):
        if self.label_level == "span" or (self.label_level == "record" and self.cfg.record_head_input == "long_mean"):
            return ("long",)
        return ("global",)

    def value_ranges(self, data_path: str):
        ranges = super().value_ranges(data_path)
        classes = f"class indices of the {len(self.classes)} classes of {Path(data_path) / SUMMARY_FILE} (or -1)"
        for name in ("record_label", "global_labels"):
            ranges[name] = (-1, len(self.classes), classes)
        return ranges

    def check_split(self, data_path: Path, split: str, meta: dict, scoring: bool) -> None:
        """Span level: a split whose every answer ``etc-prepare`` cut (``--max-long-len`` too short for where
        the answers are) has nothing to learn from or score: refused, instead of a loss of 0 and an F1 of 0
        over answers the model never saw. Predicting on it is allowed."""
        counts = meta.get("counts") or {}
        labels, cut = counts.get("labels"), counts.get("answers_cut")
        if self.label_level == "span" and scoring and isinstance(labels, int) and labels > 0 and cut == labels:
            raise InputFormatError(
                f"{data_path / f'{split}.meta.json'}: every one of the {labels} answers of split {split!r} was cut by "
                f"etc-prepare (answers_cut={cut}: they lie beyond the --max-long-len it was prepared with): nothing "
                "to train on or score; prepare the data again with a larger --max-long-len"
            )

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
