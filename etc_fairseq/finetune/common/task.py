"""What every structured fine-tuning task (HotpotQA, WikiHop, NQ, OpenKP) shares: its config fields, the
dictionary (the prepared ``dict.txt`` plus ``<mask>``, so that vocabularies match pre-trained and lifted
checkpoints), loading a prepared split as a :class:`~etc_fairseq.data.structured.StructuredDataset`, and
attaching the task's heads to the model in :meth:`build_model`.

A task subclasses :class:`EtcStructuredTask`, sets :attr:`TARGET_FIELDS` (its label/feature fields) and
implements :meth:`build_heads` (``model.register_task_head(name, module)``). Its config dataclass
subclasses :class:`EtcStructuredTaskConfig`, or :class:`QuestionCosineConfig` for a task that offers the
question-cosine head (:func:`register_question_head`).
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from omegaconf import II

from etc_fairseq.data import prepared
from etc_fairseq.data.structured import FieldSpec, StructuredDataset
from etc_fairseq.data.task_base import EtcDataTask
from etc_fairseq.encoder.config import absolute_position_limit
from etc_fairseq.encoder.heads import QueryCosineScorer
from etc_fairseq.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass
class EtcStructuredTaskConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "the directory written by etc-prepare <dataset>"})
    max_long_len: int = field(default=4096, metadata={"help": "longest long input accepted (prepared examples must fit)"})
    max_global_len: int = field(default=256, metadata={"help": "longest global input accepted"})
    pad_to_fixed_length: bool = field(
        default=False, metadata={"help": "pad every batch to --max-long-len / --max-global-len (static shapes)"}
    )
    seed: int = II("common.seed")


@dataclass
class QuestionCosineConfig(EtcStructuredTaskConfig):
    """The config of a task whose answer head scores items (sentences, candidates) against a question."""

    question_cosine: bool = field(
        default=False,
        metadata={"help": "add to each scored item's logit (a sentence, a candidate) its scaled cosine with the "
                  "question's vector, both through dense layers started at the identity, scale started at "
                  "--question-cosine-scale: the head starts where a sentence encoder's zero-shot ranking is "
                  "(etc_nextsent: each sentence's vector against the mean of the question pieces' long outputs, "
                  "data with question_len; etc_wikihop: each CANDIDATE token's output against the mean of the "
                  "QUESTION tokens' outputs; etc_hotpotqa: each SENTENCE token's supporting-fact logit, its "
                  "output against the mean of the QUESTION tokens' outputs, centred on the example's sentences)"},
    )
    question_cosine_scale: float = field(
        default=20.0,
        metadata={"help": "the starting scale of --question-cosine's cosine (learnt; all-MiniLM-L6-v2 was trained "
                  "with 20)"},
    )


def register_question_head(model, cfg: QuestionCosineConfig, name: str) -> None:
    """Register the :class:`~etc_fairseq.encoder.heads.QueryCosineScorer` head ``name`` when
    ``cfg.question_cosine`` is set (a scale <= 0 is a :class:`~etc_fairseq.errors.ConfigError`)."""
    if not cfg.question_cosine:
        return
    if cfg.question_cosine_scale <= 0:
        raise ConfigError(f"--question-cosine-scale: expected a scale > 0, got {cfg.question_cosine_scale}")
    model.register_task_head(name, QueryCosineScorer(model.cfg.encoder_embed_dim, cfg.question_cosine_scale))


class EtcStructuredTask(EtcDataTask):
    """Base class; see the module docstring. The dictionary, ``max_positions`` and the check of a built model
    against the recorded structure settings come from :class:`~etc_fairseq.data.task_base.EtcDataTask`."""

    #: the task's own stored fields (labels, features), besides the core ones
    TARGET_FIELDS: Sequence[FieldSpec] = ()
    #: the dataset class a split is loaded as (a subclass may add side data to batches)
    DATASET_CLASS = StructuredDataset
    #: fine-tuning models have no LM / CPC head (see :class:`etc_fairseq.models.etc.EtcModel`): their
    #: losses never read them, and a parameter without gradient stops DistributedDataParallel
    PRETRAINING_HEADS = False
    #: the encoder outputs the task's heads read ("long" and/or "global" features); the last ETC layer
    #: computes only these (:meth:`etc_fairseq.encoder.EtcEncoder.keep_final_outputs`): the other side's
    #: last-layer parameters would never get a gradient, which stops DistributedDataParallel
    ENCODER_OUTPUTS: Sequence[str] = ("long", "global")

    cfg: EtcStructuredTaskConfig

    def __init__(self, cfg: EtcStructuredTaskConfig, dictionary: Dictionary):
        super().__init__(cfg, dictionary)
        #: prepared lengths above a loaded checkpoint's trained ones, and the prepare.json recording them
        #: (:meth:`take_up_prepared_settings`; the model decides in :meth:`check_prepared_model`)
        self.longer_lengths, self.lengths_source = {}, None

    @classmethod
    def data_description(cls) -> str:
        return f"{cls.__name__} reads the directory written by etc-prepare"

    @classmethod
    def setup_task(cls, cfg: EtcStructuredTaskConfig, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        task.take_up_prepared_settings(from_checkpoint=bool(kwargs.get("from_checkpoint", False)))
        return task

    def take_up_prepared_settings(self, from_checkpoint: bool) -> None:
        """The lengths ``etc-prepare`` recorded in ``DATA/prepare.json`` (:mod:`etc_fairseq.data.prepared`):
        ``--max-long-len`` / ``--max-global-len`` left at their defaults take them; one given below them is
        refused naming the flag; a loaded checkpoint's trained lengths are kept unless the data is longer."""
        self.longer_lengths, self.lengths_source = prepared.take_up_lengths(self.cfg, from_checkpoint)

    def check_prepared_model(self, model) -> None:
        """Hold ``model`` (built) against what the data was prepared for: the structure settings ``etc-prepare
        --arch`` / ``--from-model`` recorded (refused naming the flags when they differ), and data prepared
        longer than a loaded checkpoint's lengths (run at the prepared lengths when the model can, else
        refused naming the flag; :func:`etc_fairseq.data.prepared.lengths_for_model`)."""
        super().check_prepared_model(model)
        model_cfg = getattr(model, "cfg", None)
        if self.longer_lengths:
            trained = {name: getattr(self.cfg, name) for name in self.longer_lengths}
            longer = prepared.lengths_for_model(
                self.longer_lengths, trained, absolute_position_limit(model_cfg) if model_cfg is not None else None,
                bool(self.cfg.pad_to_fixed_length), self.lengths_source,
            )
            for name, value in longer.items():
                prepared.set_task_field(self.cfg, name, value)
            logger.info("%s: running at the prepared lengths %s (the checkpoint was trained with %s)",
                        self.lengths_source, longer, trained)
            self.longer_lengths = {}

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        data_path = self.epoch_data_path(epoch)
        ds = self.DATASET_CLASS(
            data_path,
            split,
            self.TARGET_FIELDS,
            pad_idx=self.dictionary.pad(),
            max_long_len=self.cfg.max_long_len,
            max_global_len=self.cfg.max_global_len,
            pad_to_fixed_length=self.cfg.pad_to_fixed_length,
            value_ranges=self.value_ranges(data_path),
        )
        self.datasets[split] = ds
        logger.info(f"{data_path} {split}: {len(ds)} examples{self.describe_split(ds.meta)}")
        self.check_split(Path(data_path), split, ds.meta, scoring=not kwargs.get("predicting", False))
        return ds

    def value_ranges(self, data_path: str):
        """``{field: (low, high, what)}`` the stored values of a split must lie in (checked when it is loaded:
        a tampered or foreign file fails then, naming it, not as an IndexError inside the model): token ids
        within the dictionary. A task adds its label fields."""
        ids = (0, len(self.dictionary), f"token ids of {Path(data_path) / 'dict.txt'} (+ <mask>)")
        return {"long_tokens": ids, "global_tokens": ids}

    def check_split(self, data_path: Path, split: str, meta: dict, scoring: bool) -> None:
        """Refuse a loaded split the task cannot use (``scoring``: for training or validation, not only for
        predictions); nothing by default."""

    def describe_split(self, meta: dict) -> str:
        """Extra words for the load log line, from the split's meta file (e.g. truncation counts)."""
        return ""

    def get_batch_iterator(self, dataset, **kwargs):
        """fairseq drops a last batch smaller than ``--required-batch-size-multiple`` (default 8); official
        metrics need every example, so every split but ``train`` is batched with multiple 1."""
        if dataset is not self.datasets.get("train") and kwargs.get("required_batch_size_multiple", 1) != 1:
            kwargs["required_batch_size_multiple"] = 1
        return super().get_batch_iterator(dataset, **kwargs)

    def build_model(self, cfg, from_checkpoint=False):
        """:meth:`EtcDataTask.build_model` (the model held against the prepared data), then the encoder's last
        layer limited to :meth:`encoder_outputs` and the task's heads attached."""
        model = super().build_model(cfg, from_checkpoint)
        self.keep_final_outputs(model)
        self.build_heads(model)
        return model

    def keep_final_outputs(self, model) -> None:
        """Let the model's last layer compute only :meth:`encoder_outputs` (``model.keep_final_outputs``)."""
        model.keep_final_outputs(self.encoder_outputs())

    def encoder_outputs(self) -> Sequence[str]:
        """The encoder outputs this task reads (:attr:`ENCODER_OUTPUTS`; a task whose choice depends on
        the prepared data overrides this)."""
        return self.ENCODER_OUTPUTS

    def build_heads(self, model) -> None:
        """Register the task's heads on ``model`` (``model.register_task_head``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_heads")

    def forward_features(self, model, sample):
        """Run the encoder on a collated batch: returns (long features float [B, L, D], extra) with
        ``extra["global_features"]`` float [B, G, D]. Criterions and ``etc-predict`` call this; a task
        with extra inputs (OpenKP's visual features) overrides it to add ``long_extra_embeddings`` /
        ``global_extra_embeddings``."""
        net_input = {k: v for k, v in sample["net_input"].items() if k in self.MODEL_INPUTS}
        return model(**net_input, features_only=True)

    #: the ``net_input`` keys :meth:`forward_features` passes to the model
    MODEL_INPUTS = ("src_tokens", "global_tokens", "global_types", "structure")
