"""The ``etc_pretraining`` fairseq task: ETC's structured pre-training (paper Sec. 3.5, appendices B, C).

Data: the ``bin`` directory written by ``etc-prepare pretrain`` (one item per sentence + document offsets,
read by :class:`~etc_fairseq.data.pretraining_corpus.PretrainingCorpus`). Documents are split / packed
into examples of ``--max-long-len`` long tokens and ``--max-global-len`` sentences
(:func:`~etc_fairseq.data.packing.plan_examples`); each example gets CPC sentence masking and whole-word
MLM masking (:class:`~etc_fairseq.data.pretraining_dataset.PretrainingDataset`). Use it with the
``cpc_mlm`` criterion::

    fairseq-train DATA/bin --user-dir user_dir --task etc_pretraining --criterion cpc_mlm --arch etc_tiny ...
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import logging
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from omegaconf import II

from etc_fairseq.data.packing import PackingStats, plan_examples
from etc_fairseq.data.pretraining_corpus import PretrainingCorpus
from etc_fairseq.data.pretraining_dataset import PretrainingDataset, plan_fixed_block_examples
from etc_fairseq.data.task_base import EtcDataTask

logger = logging.getLogger(__name__)


@dataclass
class EtcPretrainingConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "the bin/ directory of `etc-prepare pretrain` (colon-separated: one per epoch)"})
    max_long_len: int = field(default=512, metadata={"help": "long input length (word pieces per example)"})
    max_global_len: int = field(default=64, metadata={"help": "global input length (sentences per example)"})
    pack_documents: bool = field(default=True, metadata={"help": "pack several short documents into one example (attention masked between them)"})
    fixed_blocks: bool = field(default=False, metadata={"help": "ablation: one global token per --fixed-block-len long tokens instead of one per sentence (no CPC)"})
    fixed_block_len: int = field(default=16, metadata={"help": "long tokens per global token with --fixed-blocks (shared with the model's flag)"})
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of the remaining (non-CPC) tokens picked for MLM, whole words"})
    leave_unmasked_prob: float = field(default=0.1, metadata={"help": "fraction of MLM-picked tokens left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={"help": "fraction of MLM-picked tokens replaced by a random token"})
    cpc_sentence_prob: float = field(default=0.1, metadata={"help": "fraction of sentences whose long tokens are all masked for CPC"})
    pad_to_fixed_length: bool = field(default=False, metadata={"help": "pad every batch to --max-long-len / --max-global-len (static shapes)"})
    seed: int = II("common.seed")


@register_task("etc_pretraining", dataclass=EtcPretrainingConfig)
class EtcPretrainingTask(EtcDataTask):
    """See the module docstring; the dictionary, ``max_positions`` and the check of a built model against the
    settings ``etc-prepare pretrain --arch`` (or ``--from-model``) recorded come from
    :class:`~etc_fairseq.data.task_base.EtcDataTask`."""

    cfg: EtcPretrainingConfig

    @classmethod
    def data_description(cls) -> str:
        return "etc_pretraining reads the bin/ of `etc-prepare pretrain`"

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        cfg = self.cfg
        data_path = self.epoch_data_path(epoch)
        corpus = PretrainingCorpus.load(data_path, split, dictionary=self.dictionary)
        lengths = corpus.all_doc_sentence_lengths()
        if cfg.fixed_blocks:
            examples = plan_fixed_block_examples(
                lengths, cfg.max_long_len, cfg.max_global_len, cfg.fixed_block_len, pack=cfg.pack_documents
            )
            stats = None
        else:
            stats = PackingStats()
            examples = plan_examples(lengths, cfg.max_long_len, cfg.max_global_len, pack=cfg.pack_documents, stats=stats)
        self.datasets[split] = PretrainingDataset(
            corpus,
            examples,
            self.dictionary,
            max_long_len=cfg.max_long_len,
            max_global_len=cfg.max_global_len,
            fixed_blocks=cfg.fixed_blocks,
            fixed_block_len=cfg.fixed_block_len,
            mask_prob=cfg.mask_prob,
            leave_unmasked_prob=cfg.leave_unmasked_prob,
            random_token_prob=cfg.random_token_prob,
            cpc_sentence_prob=cfg.cpc_sentence_prob,
            pad_to_fixed_length=cfg.pad_to_fixed_length,
            seed=cfg.seed,
        )
        self.datasets[split].set_epoch(epoch)
        logger.info(
            f"{data_path} {split}: {corpus.num_docs} documents, {corpus.num_sentences} sentences -> "
            f"{len(examples)} examples" + (f" ({stats})" if stats is not None else "")
        )
