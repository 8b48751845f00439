"""``EtcConfig``: the Hugging Face configuration of an ETC model (``model_type = "etc"``).

It carries every field of :class:`etc_fairseq.encoder.EtcEncoderConfig` under the same name (the field list is
read from that dataclass, so a field added there is a field here), the vocabulary facts the encoder is built
with (``vocab_size``, ``pad_token_id``, ``fixed_block_token_id``) and what only the Hugging Face classes use:

- ``global_token_ids``: pretrained role (``sentence``, ``cls``, ``cpc_mask``, ...) -> the id of the global token
  the model was pretrained with for it (official ETC: ``[unused0]`` for sentences); empty: ``<s>`` (the
  tokenizer's ``bos``/``cls`` token) for every role, the lifting rule of
  :mod:`etc_fairseq.structure.global_tokens`. The processor (:mod:`.processing`) reads it.
- ``token_classification_input``: which tokens :class:`~.modeling.EtcForTokenClassification` labels,
  ``long`` (one label per long token) or ``global`` (one per global token);
- ``fairseq_head``: where the task head lives in a fairseq ``etc`` checkpoint (``classification_heads.NAME``
  or ``task_heads.NAME``), so that a fine-tuned checkpoint converted to Hugging Face converts back under the
  same name (:mod:`.convert`); None for a head made here.

The Hugging Face names ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads`` and
``intermediate_size`` are aliases of ``encoder_embed_dim``, ``encoder_layers``, ``encoder_attention_heads`` and
``encoder_ffn_embed_dim``.

A field ETC does not have, or a value of the wrong type, is refused with a one-line
:class:`~etc_fairseq.errors.CheckpointLoadError` naming the ``config.json`` and the field.

Not to be confused with fairseq's ``etc_fairseq.models.etc.EtcConfig`` (the ``fairseq-train`` flags of the same
encoder fields): this one is ``etc_fairseq.hf.EtcConfig``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional

from transformers import PreTrainedConfig

from etc_fairseq.encoder.config import EtcEncoderConfig, encoder_config_fields
from etc_fairseq.encoder.io import config_to_dict, encoder_config_from_dict
from etc_fairseq.errors import CheckpointLoadError

__all__ = ["EtcConfig", "ATTRIBUTE_MAP", "TOKEN_CLASSIFICATION_INPUTS"]

#: Hugging Face's usual names -> the ETC field they stand for
ATTRIBUTE_MAP = {
    "hidden_size": "encoder_embed_dim",
    "num_hidden_layers": "encoder_layers",
    "num_attention_heads": "encoder_attention_heads",
    "intermediate_size": "encoder_ffn_embed_dim",
}

TOKEN_CLASSIFICATION_INPUTS = ("long", "global")

#: keys Hugging Face itself writes into (or passes to) a config: its dataclass fields, the arguments its
#: ``__post_init__`` reads, and what its tools set on a model's config (the Trainer's ``use_cache``, a pipeline's
#: ``custom_pipelines``)
_HF_KEYS = frozenset({f.name for f in dataclasses.fields(PreTrainedConfig)} | {
    "model_type", "torch_dtype", "num_labels", "name_or_path", "_name_or_path", "output_attentions",
    "attn_implementation", "experts_implementation", "_commit_hash", "use_cache", "custom_pipelines",
})


def _source(name_or_path: Any) -> str:
    """How an error names the config: ``DIR/config.json`` when loaded from a directory."""
    if name_or_path and os.path.isdir(str(name_or_path)):
        return os.path.join(str(name_or_path), "config.json")
    return str(name_or_path) if name_or_path else "EtcConfig"


def _check_id(source: str, name: str, value: Any, vocab_size: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab_size:
        raise CheckpointLoadError(
            f"{source}: field {name!r} = {value!r}: expected a token id in 0..{vocab_size - 1} (vocab_size)")


class EtcConfig(PreTrainedConfig):
    """The configuration of every ``etc_fairseq.hf`` model class (see the module docstring).

    Args:
        vocab_size: rows of the token embedding table (the tokenizer's vocabulary size).
        pad_token_id: the padding id (long and global inputs; ``attention_mask`` 0 becomes this id).
        fixed_block_token_id: the id of the global tokens the model makes itself when only ``input_ids`` are
            given (one per ``fixed_block_len`` long tokens).
        global_token_ids: pretrained role -> global token id (see the module docstring).
        token_classification_input: ``long`` or ``global``.
        fairseq_head: ``classification_heads.NAME`` / ``task_heads.NAME`` or None.
        tie_word_embeddings: must be True: the masked-LM head's output matrix is the token embedding table.
        kwargs: every :class:`~etc_fairseq.encoder.EtcEncoderConfig` field (defaults: that dataclass's), and
            Hugging Face's own config keys (``id2label``, ``problem_type``, ...).
    """

    model_type = "etc"
    attribute_map = ATTRIBUTE_MAP

    def __init__(
        self,
        vocab_size: int = 50265,
        pad_token_id: int = 1,
        fixed_block_token_id: int = 0,
        global_token_ids: Optional[Dict[str, int]] = None,
        token_classification_input: str = "long",
        fairseq_head: Optional[str] = None,
        tie_word_embeddings: bool = True,
        **kwargs,
    ):
        source = _source(kwargs.get("name_or_path"))
        kwargs = {ATTRIBUTE_MAP.get(k, k): v for k, v in kwargs.items()}
        model_type = kwargs.pop("model_type", self.model_type)
        if model_type != self.model_type:
            raise CheckpointLoadError(f"{source}: field 'model_type' = {model_type!r}; EtcConfig is {self.model_type!r}")
        fields = set(encoder_config_fields())
        unknown = sorted(k for k in kwargs if k not in fields and k not in _HF_KEYS)
        if unknown:
            raise CheckpointLoadError(
                f"{source}: unknown field {unknown[0]!r}: not an ETC field (the fields of "
                "etc_fairseq.encoder.EtcEncoderConfig, vocab_size, pad_token_id, fixed_block_token_id, "
                "global_token_ids, token_classification_input, fairseq_head) nor a Hugging Face config key")
        encoder = encoder_config_from_dict({k: kwargs.pop(k) for k in list(kwargs) if k in fields}, source)
        _check_encoder_config(encoder, source)
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise CheckpointLoadError(f"{source}: field 'vocab_size' = {vocab_size!r}: expected an int >= 1")
        _check_id(source, "pad_token_id", pad_token_id, vocab_size)
        _check_id(source, "fixed_block_token_id", fixed_block_token_id, vocab_size)
        global_token_ids = dict(global_token_ids or {})
        for role, value in global_token_ids.items():
            if not isinstance(role, str):
                raise CheckpointLoadError(f"{source}: field 'global_token_ids': role {role!r} is not a string")
            _check_id(source, f"global_token_ids.{role}", value, vocab_size)
        if token_classification_input not in TOKEN_CLASSIFICATION_INPUTS:
            raise CheckpointLoadError(f"{source}: field 'token_classification_input' = {token_classification_input!r}: "
                                      f"expected one of {list(TOKEN_CLASSIFICATION_INPUTS)}")
        if fairseq_head is not None and (not isinstance(fairseq_head, str)
                                         or fairseq_head.split(".")[0] not in ("classification_heads", "task_heads")):
            raise CheckpointLoadError(f"{source}: field 'fairseq_head' = {fairseq_head!r}: expected "
                                      "'classification_heads.NAME', 'task_heads.NAME' or null")
        if tie_word_embeddings is not True:
            raise CheckpointLoadError(f"{source}: field 'tie_word_embeddings' = {tie_word_embeddings!r}: the ETC "
                                      "masked-LM head's output matrix is the token embedding table (always tied)")
        for name, value in config_to_dict(encoder).items():
            setattr(self, name, value)
        self.vocab_size = vocab_size
        self.pad_token_id = pad_token_id
        self.fixed_block_token_id = fixed_block_token_id
        self.global_token_ids = global_token_ids
        self.token_classification_input = token_classification_input
        self.fairseq_head = fairseq_head
        self.tie_word_embeddings = True
        super().__init__(**kwargs)

    @classmethod
    def preset(cls, name: str, **kwargs) -> "EtcConfig":
        """A config of the named size (``etc_base``, ``etc_large``, ``etc_tiny``, ...: the presets of
        :meth:`etc_fairseq.encoder.EtcEncoderConfig.preset`), ``kwargs`` applied (encoder fields, their Hugging
        Face aliases, and the arguments of the class: ``vocab_size``, ``pad_token_id``, ``num_labels``, ...).

        Raises:
            ValueError: an unknown preset.
        """
        kwargs = {ATTRIBUTE_MAP.get(k, k): v for k, v in kwargs.items()}
        fields = set(encoder_config_fields())
        encoder = EtcEncoderConfig.preset(name, **{k: v for k, v in kwargs.items() if k in fields})
        return cls(**config_to_dict(encoder), **{k: v for k, v in kwargs.items() if k not in fields})

    def encoder_config(self) -> EtcEncoderConfig:
        """The :class:`~etc_fairseq.encoder.EtcEncoderConfig` these fields make (what the encoder is built from)."""
        return encoder_config_from_dict({name: getattr(self, name) for name in encoder_config_fields()},
                                        _source(self.name_or_path))


def _check_encoder_config(cfg: EtcEncoderConfig, source: str) -> None:
    """What building the encoder would refuse (relative labels and table sizes), as a one-line error now."""
    from etc_fairseq.encoder.model import label_vocab_from_config, relative_table_rows

    try:
        relative_table_rows(cfg, label_vocab_from_config(cfg))
    except ValueError as e:
        raise CheckpointLoadError(f"{source}: {e}") from None
