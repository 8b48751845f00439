"""ETC as Hugging Face ``PreTrainedModel`` classes: the core :class:`etc_fairseq.encoder.EtcEncoder` and the core
heads (:mod:`etc_fairseq.encoder.heads`) behind the ``transformers`` conventions. No second implementation: every
class below holds the same modules as the fairseq ``etc`` model, under the names :mod:`.convert` maps.

- :class:`EtcModel`: the encoder; :class:`EtcModelOutput` (``last_hidden_state`` = the long features, plus the
  global features and which global tokens are real).
- :class:`EtcForMaskedLM`: the tied LM head (``lm_head``; fill-mask pipelines).
- :class:`EtcForSequenceClassification`: a pooled classifier (``classifier``) on the first long token
  (``classification_head_input = "long_cls"``) or on the first CLS global token (``"global_cls"``; the first
  global token when none has type CLS), as fairseq's ``sentence_prediction`` heads and the ``etc_structured``
  record head read them.
- :class:`EtcForTokenClassification`: one linear map per long token (or per global token, with
  ``token_classification_input = "global"``; ``classifier``).
- :class:`EtcForQuestionAnswering`: start / end logits on the long tokens (``qa_outputs``).

Inputs (every tensor int64; ``B`` batch, ``L`` long length, ``G`` global length):

- ``input_ids`` [B, L] and ``attention_mask`` [B, L] (1 = token, 0 = padding; a padding position is given the
  pad id, and the pad id is padding wherever it stands). With nothing else, the model makes the global tokens
  itself: one per ``fixed_block_len`` long tokens (``fixed_block_token_id``, type FIXED_BLOCK), as the fairseq
  model does.
- the global input: ``global_input_ids`` [B, G], ``global_attention_mask`` [B, G], ``global_types`` [B, G]
  (:class:`etc_fairseq.structure.GlobalTokenType`);
- the structure, one named tensor per compact structure id of
  :func:`etc_fairseq.structure.build_structure` (``long_segment`` [B, L], ``global_parent`` [B, G], ...,
  ``long_links`` [B, L, K]);
- ``token_type_ids`` [B, L] / ``global_token_type_ids`` [B, G]: segment ids, for models with segment embeddings
  (a lifted BERT, official ETC).

:class:`etc_fairseq.hf.EtcProcessor` makes all of them from documents.

``attn_implementation`` (``from_pretrained(..., attn_implementation=...)`` or ``set_attn_implementation``) picks
the attention kernel: ``"auto"`` (default: FlexAttention on CUDA, which applies no attention dropout, else
the blocked kernel), ``"blocked"``, ``"flex"`` (also ``"flex_attention"``), ``"dense"`` (the O(L^2) reference; also
``"eager"``) or ``"autograd"`` (:data:`ATTN_IMPLEMENTATIONS`). Attention probabilities are never materialised
by the production kernels, so ``output_attentions`` is refused.

Gradient checkpointing (``gradient_checkpointing_enable()`` / ``activation_checkpointing_enable()``) switches on
the encoder's own checkpointing of every layer (non-reentrant; dropout masks are those of the run without it).

Loading (:meth:`EtcPreTrainedModel.from_pretrained`) is strict about the encoder: a checkpoint whose encoder
tensors are missing, unexpected or of another shape is refused with a one-line
:class:`~etc_fairseq.errors.CheckpointLoadError` naming the file and tensor. Heads follow Hugging Face's rule
(a head the checkpoint lacks starts fresh, with a warning).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from etc_fairseq.attention.global_local import IMPLEMENTATIONS
from etc_fairseq.encoder import EtcEncoder, EtcSelfAttention, LMHead, PooledClassifier, TokenLogits
from etc_fairseq.errors import CheckpointLoadError, ConfigError, InputFormatError
from etc_fairseq.finetune.structured.decode import first_of_type
from etc_fairseq.structure.builders import STRUCTURE_KEYS
from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.tracing import static_graph

from .configuration import EtcConfig

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "EtcPreTrainedModel",
    "EtcModel",
    "EtcForMaskedLM",
    "EtcForSequenceClassification",
    "EtcForTokenClassification",
    "EtcForQuestionAnswering",
    "EtcModelOutput",
    "EtcMaskedLMOutput",
    "EtcSequenceClassifierOutput",
    "EtcTokenClassifierOutput",
    "EtcQuestionAnsweringModelOutput",
]

#: ``attn_implementation`` -> the encoder's attention backend (``EtcEncoder.backend``): the
#: kernels of :mod:`etc_fairseq.attention` by their own names, "auto", and Hugging Face's names for the same
#: kinds of kernel ("eager": the plain reference; "flex_attention": FlexAttention)
ATTN_IMPLEMENTATIONS: Dict[str, str] = {
    "auto": "auto", **{name: name for name in IMPLEMENTATIONS}, "eager": "dense", "flex_attention": "flex",
}


# -------------------------------------------------------------------------------------------------------------
# outputs: Hugging Face's, plus the global side
# -------------------------------------------------------------------------------------------------------------
@dataclass
class EtcModelOutput(BaseModelOutput):
    """:class:`~transformers.modeling_outputs.BaseModelOutput` of the long tokens (``last_hidden_state`` float
    [B, L, D]; ``hidden_states``: the embeddings and every layer's output, L+1 tensors), plus the global tokens':

    - ``global_last_hidden_state`` float [B, G, D]; ``global_hidden_states`` (as ``hidden_states``);
    - ``global_attention_mask`` int64 [B, G]: 1 for a real global token (also the ones the model made itself),
      0 for padding.
    """

    global_last_hidden_state: Optional[torch.Tensor] = None
    global_hidden_states: Optional[Tuple[torch.Tensor, ...]] = None
    global_attention_mask: Optional[torch.Tensor] = None


@dataclass
class EtcMaskedLMOutput(MaskedLMOutput):
    """:class:`~transformers.modeling_outputs.MaskedLMOutput` (logits float [B, L, vocab]) plus the global
    features (see :class:`EtcModelOutput`)."""

    global_last_hidden_state: Optional[torch.Tensor] = None
    global_hidden_states: Optional[Tuple[torch.Tensor, ...]] = None


@dataclass
class EtcSequenceClassifierOutput(SequenceClassifierOutput):
    """:class:`~transformers.modeling_outputs.SequenceClassifierOutput` (logits float [B, num_labels]) plus the
    global features (see :class:`EtcModelOutput`)."""

    global_last_hidden_state: Optional[torch.Tensor] = None
    global_hidden_states: Optional[Tuple[torch.Tensor, ...]] = None


@dataclass
class EtcTokenClassifierOutput(TokenClassifierOutput):
    """:class:`~transformers.modeling_outputs.TokenClassifierOutput` (logits float [B, L, num_labels], or
    [B, G, num_labels] for global tokens) plus the global features (see :class:`EtcModelOutput`)."""

    global_last_hidden_state: Optional[torch.Tensor] = None
    global_hidden_states: Optional[Tuple[torch.Tensor, ...]] = None


@dataclass
class EtcQuestionAnsweringModelOutput(QuestionAnsweringModelOutput):
    """:class:`~transformers.modeling_outputs.QuestionAnsweringModelOutput` (start / end logits float [B, L])
    plus the global features (see :class:`EtcModelOutput`)."""

    global_last_hidden_state: Optional[torch.Tensor] = None
    global_hidden_states: Optional[Tuple[torch.Tensor, ...]] = None


# -------------------------------------------------------------------------------------------------------------
# the base class
# -------------------------------------------------------------------------------------------------------------
class EtcPreTrainedModel(PreTrainedModel):
    """What every ETC class shares: its config class, weight initialisation (BERT's, as the core's:
    normal(0, 0.02) weights and relative-label tables, zero biases), attention choice, gradient checkpointing
    and strict loading."""

    config_class = EtcConfig
    base_model_prefix = "etc"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EtcLayer"]

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # Linear / Embedding: normal(0, 0.02), zero biases and padding row
        if isinstance(module, EtcSelfAttention):
            for table in module.rel_emb.values():
                init.normal_(table, mean=0.0, std=0.02)
            for bias in (module.rel_bias.values() if module.rel_bias is not None else ()):
                init.zeros_(bias)
        elif isinstance(module, LMHead):
            init.zeros_(module.bias)

    def get_correct_attn_implementation(self, requested_attention: Optional[str], is_init_check: bool = False) -> str:
        """``attn_implementation`` checked against :data:`ATTN_IMPLEMENTATIONS` (None: ``"auto"``)."""
        name = "auto" if requested_attention is None else requested_attention
        if name not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(f"attn_implementation={requested_attention!r}: ETC's attention kernels are "
                             f"{sorted(ATTN_IMPLEMENTATIONS)}")
        return name

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=None,
                                    every_n_layers: int = 1) -> None:
        """Switch the encoder's checkpointing of every layer (``EtcEncoder.run_layers``) on or off."""
        if enable and every_n_layers != 1:
            raise ConfigError(f"every_n_layers={every_n_layers}: ETC checkpoints every layer or none")
        for module in self.modules():
            if isinstance(module, EtcModel):
                module.gradient_checkpointing = bool(enable)
                module.encoder.cfg.checkpoint_activations = bool(enable)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Hugging Face's ``from_pretrained``, then the check of the module docstring: encoder tensors must fit;
        a head tensor of another shape only with ``ignore_mismatched_sizes=True`` (it then starts fresh)."""
        want_info = kwargs.pop("output_loading_info", False)
        heads_may_differ = bool(kwargs.pop("ignore_mismatched_sizes", False))
        model, info = super().from_pretrained(pretrained_model_name_or_path, *model_args, output_loading_info=True,
                                              ignore_mismatched_sizes=True, **kwargs)
        _check_loaded(model, info, pretrained_model_name_or_path, heads_may_differ)
        return (model, info) if want_info else model


def _check_loaded(model: EtcPreTrainedModel, info: dict, source, heads_may_differ: bool) -> None:
    """Refuse a load that left encoder tensors missing, unused or of another shape, or a head tensor of another
    shape unless ``heads_may_differ`` (one line naming the file and tensor)."""
    prefix = "" if isinstance(model, EtcModel) else EtcPreTrainedModel.base_model_prefix + "."
    where = Path(str(source)) / "model.safetensors" if Path(str(source)).is_dir() else source

    def names(keys, encoder=True):
        out = []
        for k in keys:
            k = k[0] if isinstance(k, tuple) else k
            bare = k[len(prefix):] if k.startswith(prefix) else k
            if bare.startswith("encoder.") == encoder:
                out.append(k)
        return sorted(out)

    mismatched = info.get("mismatched_keys", ())
    for what, keys in (("missing", names(info.get("missing_keys", ()))),
                       ("not part of this model", names(info.get("unexpected_keys", ()))),
                       ("of another shape than config.json implies", names(mismatched))):
        if keys:
            raise CheckpointLoadError(f"{where}: encoder tensor {keys[0]!r} {what} ({len(keys)} such tensors); "
                                      "the weights do not fit config.json")
    heads = names(mismatched, encoder=False)
    if heads and not heads_may_differ:
        raise CheckpointLoadError(f"{where}: tensor {heads[0]!r} has another shape than config.json implies (e.g. "
                                  "another num_labels); pass ignore_mismatched_sizes=True to start the head fresh")


# -------------------------------------------------------------------------------------------------------------
# the encoder
# -------------------------------------------------------------------------------------------------------------
class EtcModel(EtcPreTrainedModel):
    """The ETC encoder (see the module docstring for the inputs); returns :class:`EtcModelOutput`."""

    def __init__(self, config: EtcConfig):
        super().__init__(config)
        self.encoder = EtcEncoder(config.encoder_config(), config.vocab_size, config.pad_token_id,
                                  config.fixed_block_token_id)
        self.gradient_checkpointing = bool(self.encoder.cfg.checkpoint_activations)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        self.encoder.vocab_size = value.num_embeddings

    def _check_ids(self, name: str, ids: torch.Tensor) -> None:
        """A clear error for a token id outside the embedding table (a tokenizer that is not the model's)."""
        if static_graph(ids) or ids.numel() == 0:
            return
        vocab = self.encoder.embed_tokens.num_embeddings
        bad = (ids < 0) | (ids >= vocab)
        if bool(bad.any()):
            raise InputFormatError(f"{name} holds the id {int(ids[bad][0])}, outside the model's vocabulary 0..{vocab - 1} "
                             "(config.json vocab_size): the ids come from another tokenizer than the model's")

    def _masked(self, name: str, ids: Optional[torch.Tensor], mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """ids int64 [B, len] with the pad id where ``mask`` (int/bool [B, len]) is 0."""
        if ids is None:
            if mask is not None:
                raise InputFormatError(f"{name.replace('input_ids', 'attention_mask')} given without {name}")
            return None
        if ids.dim() != 2:
            raise InputFormatError(f"{name} must be int64 [batch, length], got shape {tuple(ids.shape)}")
        self._check_ids(name, ids)
        if mask is None:
            return ids
        if mask.shape != ids.shape:
            raise InputFormatError(f"the attention mask of {name} has shape {tuple(mask.shape)}, {name} {tuple(ids.shape)}")
        return ids.masked_fill(mask.eq(0), self.config.pad_token_id)

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        global_input_ids: Optional[torch.Tensor] = None,
        global_attention_mask: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        global_token_type_ids: Optional[torch.Tensor] = None,
        long_segment: Optional[torch.Tensor] = None,
        global_parent: Optional[torch.Tensor] = None,
        long_context: Optional[torch.Tensor] = None,
        global_context: Optional[torch.Tensor] = None,
        long_example: Optional[torch.Tensor] = None,
        global_example: Optional[torch.Tensor] = None,
        long_links: Optional[torch.Tensor] = None,
        global_hard_g2l: Optional[torch.Tensor] = None,
        output_hidden_states: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Union[EtcModelOutput, Tuple[torch.Tensor, ...]]:
        """See the module docstring; every structure argument is int64 (``long_*`` [B, L], ``global_*`` [B, G],
        ``long_links`` [B, L, K])."""
        if output_attentions or (output_attentions is None and self.config.output_attentions):
            raise ConfigError("output_attentions: ETC's attention kernels never form the attention probabilities "
                             "(the local band and the global parts are computed blockwise)")
        if input_ids is None:
            raise InputFormatError("input_ids is required (int64 [batch, long_len]); ETC embeds token ids itself")
        hidden = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        given = dict(long_segment=long_segment, global_parent=global_parent, long_context=long_context,
                     global_context=global_context, long_example=long_example, global_example=global_example,
                     long_links=long_links, global_hard_g2l=global_hard_g2l)  # the keys of STRUCTURE_KEYS
        structure = {k: v for k, v in given.items() if v is not None}
        self.encoder.backend = ATTN_IMPLEMENTATIONS[self.config._attn_implementation or "auto"]
        out = self.encoder(
            self._masked("input_ids", input_ids, attention_mask),
            self._masked("global_input_ids", global_input_ids, global_attention_mask),
            global_types, structure or None,
            segment_ids=token_type_ids, global_segment_ids=global_token_type_ids, return_all_hiddens=bool(hidden),
        )
        result = EtcModelOutput(
            last_hidden_state=out.long_features,
            hidden_states=tuple(s[0] for s in out.inner_states) if hidden else None,
            global_last_hidden_state=out.global_features,
            global_hidden_states=tuple(s[1] for s in out.inner_states) if hidden else None,
            global_attention_mask=(~out.global_padding_mask).long(),
        )
        return result if _return_dict(self.config, return_dict) else result.to_tuple()


def _return_dict(config: EtcConfig, return_dict: Optional[bool]) -> bool:
    return config.return_dict if return_dict is None else return_dict


#: the keyword arguments every head passes on to :class:`EtcModel` unchanged
_ENCODER_ARGS = ("input_ids", "attention_mask", "token_type_ids", "global_input_ids", "global_attention_mask",
                 "global_types", "global_token_type_ids") + STRUCTURE_KEYS + ("output_hidden_states",
                                                                               "output_attentions")


def _encode(head: EtcPreTrainedModel, values: dict) -> EtcModelOutput:
    """Run the head's encoder on the :data:`_ENCODER_ARGS` of a head's ``forward`` locals."""
    return head.etc(**{k: values[k] for k in _ENCODER_ARGS}, return_dict=True)


def _finish(config: EtcConfig, return_dict: Optional[bool], output_class, enc: EtcModelOutput, **head_outputs):
    """A head's ``output_class``: its own ``head_outputs`` (loss, logits, ...) and, from the encoder's output
    ``enc``, the hidden states and the global features; its tuple (loss first when there is one) with
    ``return_dict=False``."""
    output = output_class(**head_outputs, hidden_states=enc.hidden_states,
                          global_last_hidden_state=enc.global_last_hidden_state,
                          global_hidden_states=enc.global_hidden_states)
    return output if _return_dict(config, return_dict) else output.to_tuple()


# -------------------------------------------------------------------------------------------------------------
# heads
# -------------------------------------------------------------------------------------------------------------
class EtcForMaskedLM(EtcPreTrainedModel):
    """The encoder and its masked-LM head (``lm_head``: dense -> activation -> LayerNorm -> the token
    embedding table, tied). ``labels`` int64 [B, L]: the token to predict, -100 where none."""

    _tied_weights_keys = {"lm_head.weight": "etc.encoder.embed_tokens.weight"}

    def __init__(self, config: EtcConfig):
        super().__init__(config)
        self.etc = EtcModel(config)
        self.lm_head = LMHead(config.encoder_embed_dim, self.etc.encoder.embed_tokens.weight, config.activation_fn,
                              config.layer_norm_eps)
        self.post_init()

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        global_input_ids: Optional[torch.Tensor] = None,
        global_attention_mask: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        global_token_type_ids: Optional[torch.Tensor] = None,
        long_segment: Optional[torch.Tensor] = None,
        global_parent: Optional[torch.Tensor] = None,
        long_context: Optional[torch.Tensor] = None,
        global_context: Optional[torch.Tensor] = None,
        long_example: Optional[torch.Tensor] = None,
        global_example: Optional[torch.Tensor] = None,
        long_links: Optional[torch.Tensor] = None,
        global_hard_g2l: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_hidden_states: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Union[EtcMaskedLMOutput, Tuple[torch.Tensor, ...]]:
        enc = _encode(self, locals())
        logits = self.lm_head(enc.last_hidden_state)  # [B, L, vocab]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
        return _finish(self.config, return_dict, EtcMaskedLMOutput, enc, loss=loss, logits=logits)


class EtcForSequenceClassification(EtcPreTrainedModel):
    """The encoder and a pooled classifier (``classifier``: dropout -> dense -> ``pooler_activation_fn`` ->
    dropout -> projection, fairseq's classification head) on the token ``classification_head_input`` names
    (see the module docstring). ``labels``: int64 [B] classes, float [B] (regression, ``num_labels`` 1) or float
    [B, num_labels] (multi-label), with Hugging Face's ``problem_type`` rule."""

    def __init__(self, config: EtcConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.etc = EtcModel(config)
        self.classifier = PooledClassifier(config.encoder_embed_dim, config.num_labels,
                                           activation_fn=config.pooler_activation_fn, dropout=config.pooler_dropout)
        self.post_init()

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        global_input_ids: Optional[torch.Tensor] = None,
        global_attention_mask: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        global_token_type_ids: Optional[torch.Tensor] = None,
        long_segment: Optional[torch.Tensor] = None,
        global_parent: Optional[torch.Tensor] = None,
        long_context: Optional[torch.Tensor] = None,
        global_context: Optional[torch.Tensor] = None,
        long_example: Optional[torch.Tensor] = None,
        global_example: Optional[torch.Tensor] = None,
        long_links: Optional[torch.Tensor] = None,
        global_hard_g2l: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_hidden_states: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Union[EtcSequenceClassifierOutput, Tuple[torch.Tensor, ...]]:
        enc = _encode(self, locals())
        if self.config.classification_head_input == "long_cls":
            pooled = enc.last_hidden_state[:, 0]  # [B, D]
        else:
            feats = enc.global_last_hidden_state  # [B, G, D]
            if global_types is None:
                index = torch.zeros(feats.size(0), dtype=torch.long, device=feats.device)
            else:
                index = first_of_type(global_types, GlobalTokenType.CLS)  # [B]
            pooled = feats[torch.arange(feats.size(0), device=feats.device), index]
        logits = self.classifier(pooled)  # [B, num_labels]
        loss = None if labels is None else self._loss(logits, labels)
        return _finish(self.config, return_dict, EtcSequenceClassifierOutput, enc, loss=loss, logits=logits)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Hugging Face's sequence-classification losses, chosen by ``config.problem_type``."""
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        logits = logits.float()
        if self.config.problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1), labels.float().view(-1)) if self.num_labels == 1 \
                else F.mse_loss(logits, labels.float())
        if self.config.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels.float())


class EtcForTokenClassification(EtcPreTrainedModel):
    """The encoder and one linear map per token (``classifier``) on the long tokens, or the global tokens with
    ``token_classification_input = "global"``. ``labels`` int64 [B, L] (or [B, G]), -100 where none."""

    def __init__(self, config: EtcConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.etc = EtcModel(config)
        self.classifier = TokenLogits(config.encoder_embed_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        global_input_ids: Optional[torch.Tensor] = None,
        global_attention_mask: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        global_token_type_ids: Optional[torch.Tensor] = None,
        long_segment: Optional[torch.Tensor] = None,
        global_parent: Optional[torch.Tensor] = None,
        long_context: Optional[torch.Tensor] = None,
        global_context: Optional[torch.Tensor] = None,
        long_example: Optional[torch.Tensor] = None,
        global_example: Optional[torch.Tensor] = None,
        long_links: Optional[torch.Tensor] = None,
        global_hard_g2l: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        output_hidden_states: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Union[EtcTokenClassifierOutput, Tuple[torch.Tensor, ...]]:
        enc = _encode(self, locals())
        glob = self.config.token_classification_input == "global"
        logits = self.classifier(enc.global_last_hidden_state if glob else enc.last_hidden_state)  # [B, T, C]
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:
                raise InputFormatError(f"labels must be int64 [batch, {'global' if glob else 'long'}_len] = "
                                 f"{tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.float().view(-1, self.num_labels), labels.view(-1), ignore_index=-100)
        return _finish(self.config, return_dict, EtcTokenClassifierOutput, enc, loss=loss, logits=logits)


class EtcForQuestionAnswering(EtcPreTrainedModel):
    """The encoder and start / end logits on every long token (``qa_outputs``, fairseq's span heads).
    ``start_positions`` / ``end_positions`` int64 [B]: long-token indices; one past the input (clamped to ``L``,
    as BERT's) or negative (-100: unlabelled) is ignored."""

    def __init__(self, config: EtcConfig):
        super().__init__(config)
        self.etc = EtcModel(config)
        self.qa_outputs = TokenLogits(config.encoder_embed_dim, 2)
        self.post_init()

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        global_input_ids: Optional[torch.Tensor] = None,
        global_attention_mask: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        global_token_type_ids: Optional[torch.Tensor] = None,
        long_segment: Optional[torch.Tensor] = None,
        global_parent: Optional[torch.Tensor] = None,
        long_context: Optional[torch.Tensor] = None,
        global_context: Optional[torch.Tensor] = None,
        long_example: Optional[torch.Tensor] = None,
        global_example: Optional[torch.Tensor] = None,
        long_links: Optional[torch.Tensor] = None,
        global_hard_g2l: Optional[torch.Tensor] = None,
        start_positions: Optional[torch.Tensor] = None,
        end_positions: Optional[torch.Tensor] = None,
        output_hidden_states: Optional[bool] = None,
        output_attentions: Optional[bool] = None,
        return_dict: Optional[bool] = None,
    ) -> Union[EtcQuestionAnsweringModelOutput, Tuple[torch.Tensor, ...]]:
        enc = _encode(self, locals())
        logits = self.qa_outputs(enc.last_hidden_state)  # [B, L, 2]
        start_logits, end_logits = logits[..., 0].contiguous(), logits[..., 1].contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.size(1)  # a position past the input or negative (unlabelled) is ignored
            start, end = (torch.where(p.view(-1) < 0, ignored, p.view(-1)).clamp(0, ignored)
                          for p in (start_positions, end_positions))
            loss = (F.cross_entropy(start_logits.float(), start, ignore_index=ignored)
                    + F.cross_entropy(end_logits.float(), end, ignore_index=ignored)) / 2
        return _finish(self.config, return_dict, EtcQuestionAnsweringModelOutput, enc, loss=loss,
                       start_logits=start_logits, end_logits=end_logits)
