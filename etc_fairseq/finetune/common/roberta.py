"""``roberta_window``: fairseq's RoBERTa encoder as a fine-tuning model that reads only the first
``max_positions`` long tokens of an example: the baseline of a flat encoder that sees only the first 512 tokens
(the ``bert512`` / ``roberta512`` arms of the next-sentence and WikiHop-format tasks).

The model is a thin registered wrapper: the encoder is fairseq's own ``RobertaEncoder`` (state-dict keys
``encoder.sentence_encoder.*``, exactly those of a ``fairseq-train --arch roberta_*`` checkpoint), built from
a dataclass config (so its checkpoints pass :func:`etc_fairseq.models.checkpoint_config.validate_checkpoint_config` and
load with ``weights_only=True``), with no LM head (fine-tuning never reads it; a parameter without gradient
stops DistributedDataParallel) and with ``task_heads`` like :class:`etc_fairseq.models.etc.EtcModel`.

``forward(src_tokens, features_only=True)`` crops ``src_tokens`` [B, L] to its first ``max_positions``
columns and returns (features float [B, min(L, max_positions), D], ``{"global_features": None}``); other
``net_input`` keys (global tokens, structure) are ignored. :meth:`max_positions` is None, so fairseq does not
filter the longer examples out: they are cropped, and what lies beyond the window is unreachable (the
``etc_nextsent`` criterion counts answers lost that way).

A pre-trained fairseq RoBERTa checkpoint is turned into this model's format (dataclass config, no LM head)
by ``python -m etc_fairseq.finetune.common.roberta_window`` before ``fairseq-train --finetune-from-model``.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import argparse
import logging
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqEncoderModel, register_model

from etc_fairseq.models.etc import reconcile_task_heads

logger = logging.getLogger(__name__)

#: the registered model name (``--arch roberta_window``)
ROBERTA_WINDOW = "roberta_window"


@dataclass
class RobertaWindowConfig(FairseqDataclass):
    """The fields of fairseq's RoBERTa that size and shape the encoder (the rest: fairseq's
    ``roberta`` base_architecture defaults). Defaults: fairseq's ``roberta_base``."""

    encoder_layers: int = field(default=12, metadata={"help": "number of transformer layers"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "model width"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "FFN inner width"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "attention heads"})
    activation_fn: str = field(default="gelu", metadata={"help": "FFN activation (a fairseq activation name)"})
    encoder_normalize_before: bool = field(default=False, metadata={"help": "pre-LayerNorm layers"})
    dropout: float = field(default=0.1, metadata={"help": "dropout"})
    attention_dropout: float = field(default=0.1, metadata={"help": "attention dropout"})
    activation_dropout: float = field(default=0.0, metadata={"help": "FFN activation dropout"})
    pooler_activation_fn: str = field(default="tanh", metadata={"help": "activation of classification heads "
                                                                "(etc_structured's record head)"})
    pooler_dropout: float = field(default=0.0, metadata={"help": "dropout in classification heads"})
    max_positions: int = field(
        default=512, metadata={"help": "the window: long tokens read from the start of each example "
                               "(the learned position table's size); the rest is cut off"})


def roberta_namespace(cfg: RobertaWindowConfig) -> argparse.Namespace:
    """The argparse Namespace fairseq's ``RobertaEncoder`` is built from: ``cfg``'s fields plus fairseq's
    ``roberta`` base_architecture defaults for every other field."""
    from fairseq.models.roberta.model import base_architecture

    ns = argparse.Namespace(**{name: getattr(cfg, name) for name in RobertaWindowConfig.__dataclass_fields__})
    base_architecture(ns)
    return ns


@register_model(ROBERTA_WINDOW, dataclass=RobertaWindowConfig)
class RobertaWindowModel(FairseqEncoderModel):
    """See the module docstring."""

    def __init__(self, cfg: RobertaWindowConfig, encoder: nn.Module):
        super().__init__(encoder)
        self.cfg = cfg
        self.task_heads = nn.ModuleDict()

    @classmethod
    def build_model(cls, cfg: RobertaWindowConfig, task):
        from fairseq.models.roberta.model import RobertaEncoder

        encoder = RobertaEncoder(roberta_namespace(cfg), task.source_dictionary)
        encoder.lm_head = None  # fine-tuning only: see the module docstring
        return cls(cfg, encoder)

    def forward(self, src_tokens: torch.Tensor, features_only: bool = True, **unused):
        """src_tokens int64 [B, L] -> (features float [B, W, D] of the first W = min(L, max_positions)
        tokens, ``{"global_features": None}``)."""
        if not features_only:
            raise ValueError("roberta_window is a fine-tuning model without an LM head: call it with features_only=True")
        window = src_tokens[:, : self.cfg.max_positions]  # [B, W]
        features, _ = self.encoder.extract_features(window)  # [B, W, D]
        return features, {"global_features": None}

    def max_positions(self) -> Optional[int]:
        """None: any length is accepted (and cropped to the window in :meth:`forward`)."""
        return None

    def keep_final_outputs(self, sides) -> None:
        """Nothing to choose: fairseq's RoBERTa encoder computes its one (long) side whatever ``sides`` is."""

    def register_task_head(self, name: str, head: nn.Module) -> nn.Module:
        """Attach a task's head under ``task_heads.NAME`` (as :meth:`EtcModel.register_task_head`)."""
        self.task_heads[name] = head
        return head

    def upgrade_state_dict_named(self, state_dict: Dict[str, torch.Tensor], name: str):
        """fairseq's own upgrades of the encoder, then: a pre-trained RoBERTa's LM head and classification
        heads are dropped (this model has neither), task heads reconciled as for ETC models."""
        prefix = name + "." if name else ""
        super().upgrade_state_dict_named(state_dict, name)
        dropped = [k for k in state_dict if k.startswith((prefix + "encoder.lm_head.", prefix + "classification_heads."))]
        for k in dropped:
            del state_dict[k]
        if dropped:
            logger.info(f"dropped {len(dropped)} LM / classification head tensors of the checkpoint (fine-tuning model)")
        reconcile_task_heads(self.task_heads, state_dict, prefix)
