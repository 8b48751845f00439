"""The ``etc`` fairseq model: embeddings -> N x :class:`EtcLayer` -> long and global features, an LM head
tied to the token embeddings, and RoBERTa-style classification heads.

Inputs (``net_input`` keys, all optional except ``src_tokens``):

- ``src_tokens``  int64 [batch, long_len]: the long input (word pieces), padded with the dictionary's pad.
- ``global_tokens`` int64 [batch, global_len]: dictionary ids of the global tokens, padded with pad.
- ``global_types``  int64 [batch, global_len]: :class:`~etc_fairseq.structure.global_tokens.GlobalTokenType`.
- ``structure``     dict of compact int64 structure ids (``long_segment``, ``global_parent``,
  ``long_context``, ``global_context``, ``long_example``, ``global_example``, ``long_links``, ``global_hard_g2l``), turned
  into the four masks and label tensors on the model's device by
  :func:`etc_fairseq.structure.builders.build_structure`. A dict (not a dataclass) so that fairseq's
  ``move_to_cuda`` moves it.

With only ``src_tokens`` (fairseq's stock ``masked_lm`` and ``sentence_prediction`` tasks), the model
builds fixed-block global tokens itself: one global token per ``fixed_block_len`` long tokens (the
paper's "fixed blocks" configuration).
"""


# No ``from __future__ import annotations`` here: fairseq reads the EtcConfig field types at run time.
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqEncoder, FairseqEncoderModel, register_model
from fairseq.models.roberta.model import RobertaClassificationHead, RobertaLMHead
from fairseq.modules import LayerNorm, LearnedPositionalEmbedding
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from torch.utils.checkpoint import checkpoint

from etc_fairseq.models.layer import EtcLayer
from etc_fairseq.structure.builders import (
    REQUIRED_STRUCTURE_LABELS,
    STRUCTURE_KEYS,
    GlobalLocalStructure,
    build_structure,
    fixed_block_ids,
)
from etc_fairseq.structure.global_tokens import (
    NUM_GLOBAL_TOKEN_TYPES,
    GlobalTokenType,
    special_global_token_id,
)
from etc_fairseq.structure.labels import DEFAULT_STRUCTURE_LABELS, RelativeLabelVocab

logger = logging.getLogger(__name__)

#: Version of our checkpoint format, stored as the ``encoder.version`` buffer. Bump it when parameter
#: names or meanings change, and teach :meth:`EtcModel.upgrade_state_dict_named` the step.
ETC_FORMAT_VERSION = 1

#: Upgrade steps: ``FORMAT_UPGRADES[v](state_dict, prefix)`` turns a version-``v`` state dict (keys under
#: ``prefix``) into version ``v + 1`` in place. Empty while version 1 is the only format;
#: :meth:`EtcModel.upgrade_state_dict_named` applies the steps in order (tests/test_reliability_checkpoints.py).
FORMAT_UPGRADES: Dict[int, Callable[[Dict[str, torch.Tensor], str], None]] = {}



@dataclass
class EtcConfig(FairseqDataclass):
    encoder_layers: int = field(default=12, metadata={"help": "number of ETC layers"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "model width"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "feed-forward inner width"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "attention heads"})
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function"}
    )
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings and residual branches"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on attention probabilities"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    pooler_activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="tanh", metadata={"help": "activation of classification heads"}
    )
    pooler_dropout: float = field(default=0.0, metadata={"help": "dropout in classification heads"})
    max_positions: int = field(
        default=4096,
        metadata={"help": "maximum long input length (fairseq's name; sentence_prediction sets it)"},
    )
    max_global_positions: int = field(default=256, metadata={"help": "maximum global input length"})
    local_radius: int = field(default=84, metadata={"help": "l2l attention radius r"})
    relative_pos_max_distance: int = field(
        default=12, metadata={"help": "relative positions are clipped at this distance k"}
    )
    relative_structure_labels: str = field(
        default=",".join(DEFAULT_STRUCTURE_LABELS),
        metadata={
            "help": "comma-separated structure labels after the 2k+1 position labels; must include the "
            "default ones (the builders assign them), more may be appended for task-specific use"
        },
    )
    shared_q: bool = field(default=False, metadata={"help": "one W^Q for long and global queries"})
    shared_kv: bool = field(default=False, metadata={"help": "one W^K/W^V for all four attention pieces"})
    shared_out_proj: bool = field(default=False, metadata={"help": "one output projection for both sides"})
    # Named "separate" (default False) because fairseq turns a True-by-default bool into a flag that
    # sets it to False: --separate-ffn reads as what it does.
    separate_ffn: bool = field(
        default=False, metadata={"help": "one feed-forward block per side instead of one shared by both"}
    )
    shared_relative_embeddings: bool = field(
        default=False, metadata={"help": "one relative-label table for long and global queries"}
    )
    hard_g2l: bool = field(
        default=False, metadata={"help": "global tokens attend only to the long tokens they summarise"}
    )
    hard_l2g: bool = field(
        default=False, metadata={"help": "long tokens attend only to their own global tokens"}
    )
    fixed_block_len: int = field(
        default=16,
        metadata={"help": "with no global input given, one global token per this many long tokens"},
    )
    use_absolute_positions: bool = field(
        default=False,
        metadata={"help": "add learned absolute position embeddings to the long input (RoBERTa-style)"},
    )
    checkpoint_activations: bool = field(
        default=False, metadata={"help": "recompute layer activations in backward to save memory"}
    )
    classification_head_input: ChoiceEnum(["long_cls", "global_cls"]) = field(
        default="long_cls",
        metadata={"help": "classification heads read the first long token or the first global token"},
    )
    load_checkpoint_heads: bool = field(
        default=False, metadata={"help": "(re-)register classification heads found in a checkpoint"}
    )


def label_vocab_from_config(cfg) -> RelativeLabelVocab:
    """The model's relative-label vocabulary, derived from its config (never stored separately)."""
    names = tuple(n.strip() for n in str(cfg.relative_structure_labels).split(",") if n.strip())
    missing = [n for n in REQUIRED_STRUCTURE_LABELS if n not in names]
    if missing:
        raise ValueError(
            f"relative_structure_labels={cfg.relative_structure_labels!r} lacks {missing}: the structure "
            f"builders assign all of {list(REQUIRED_STRUCTURE_LABELS)}; extra labels may be appended"
        )
    return RelativeLabelVocab(cfg.relative_pos_max_distance, names)


class EtcTransformer(nn.Module):
    """Embeddings and the layer stack (the part that RoBERTa's ``sentence_encoder`` corresponds to)."""

    def __init__(self, cfg: EtcConfig, dictionary):
        super().__init__()
        self.cfg = cfg
        self.padding_idx = dictionary.pad()
        self.label_vocab = label_vocab_from_config(cfg)
        dim = cfg.encoder_embed_dim
        self.embed_tokens = nn.Embedding(len(dictionary), dim, self.padding_idx)
        # RoBERTa-compatible learned positions (row = position + padding_idx + 1), long input only.
        self.embed_positions = (
            LearnedPositionalEmbedding(cfg.max_positions + self.padding_idx + 1, dim, self.padding_idx)
            if cfg.use_absolute_positions
            else None
        )
        self.embed_global_types = nn.Embedding(NUM_GLOBAL_TOKEN_TYPES, dim)
        self.layernorm_embedding = LayerNorm(dim)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            EtcLayer(
                dim,
                cfg.encoder_ffn_embed_dim,
                cfg.encoder_attention_heads,
                self.label_vocab.size,
                dropout=cfg.dropout,
                attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout,
                activation_fn=cfg.activation_fn,
                shared_q=cfg.shared_q,
                shared_kv=cfg.shared_kv,
                shared_out_proj=cfg.shared_out_proj,
                shared_ffn=not cfg.separate_ffn,
                shared_relative_embeddings=cfg.shared_relative_embeddings,
            )
            for _ in range(cfg.encoder_layers)
        )
        if self.embed_tokens.weight.device.type != "meta":  # meta: shapes only (parameter counting)
            self.apply(init_bert_params)

    def embed(
        self,
        long_tokens: torch.Tensor,
        global_tokens: torch.Tensor,
        global_types: torch.Tensor,
        long_extra: Optional[torch.Tensor] = None,
        global_extra: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """long_tokens int64 [batch, long_len], global_tokens/global_types int64 [batch, global_len]
        -> (float [batch, long_len, dim], float [batch, global_len, dim]).

        ``long_extra`` float [batch, long_len, dim] / ``global_extra`` float [batch, global_len, dim], if
        given, are added to the embeddings before the embedding layer norm (task-specific input features,
        e.g. OpenKP's visual features)."""
        x_long = self.embed_tokens(long_tokens)
        if self.embed_positions is not None:
            x_long = x_long + self.embed_positions(long_tokens)
        x_global = self.embed_tokens(global_tokens) + self.embed_global_types(global_types)
        if long_extra is not None:
            x_long = x_long + long_extra.to(x_long.dtype)
        if global_extra is not None:
            x_global = x_global + global_extra.to(x_global.dtype)
        x_long = self.dropout(self.layernorm_embedding(x_long))
        x_global = self.dropout(self.layernorm_embedding(x_global))
        return x_long, x_global

    def forward(
        self,
        long_tokens: torch.Tensor,
        global_tokens: torch.Tensor,
        global_types: torch.Tensor,
        structure: GlobalLocalStructure,
        return_all_hiddens: bool = False,
        long_extra: Optional[torch.Tensor] = None,
        global_extra: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Returns long features float [batch, long_len, dim], global features float
        [batch, global_len, dim], and (if ``return_all_hiddens``) every layer's (long, global) input.
        ``long_extra``/``global_extra``: see :meth:`embed`."""
        x_long, x_global = self.embed(long_tokens, global_tokens, global_types, long_extra, global_extra)
        inner_states = [(x_long, x_global)] if return_all_hiddens else []
        for layer in self.layers:
            if self.cfg.checkpoint_activations and self.training and torch.is_grad_enabled():
                # Non-reentrant checkpointing restores the RNG state, so dropout masks (and therefore
                # outputs and gradients) are identical to the non-checkpointed run.
                x_long, x_global = checkpoint(layer, x_long, x_global, structure, use_reentrant=False)
            else:
                x_long, x_global = layer(x_long, x_global, structure)
            if return_all_hiddens:
                inner_states.append((x_long, x_global))
        return x_long, x_global, inner_states


class EtcEncoder(FairseqEncoder):
    """Turns ``net_input`` into the four masks/labels, runs :class:`EtcTransformer`, applies the LM head."""

    def __init__(self, cfg: EtcConfig, dictionary):
        super().__init__(dictionary)
        self.cfg = cfg
        self.sentence_encoder = EtcTransformer(cfg, dictionary)
        self.lm_head = RobertaLMHead(
            embed_dim=cfg.encoder_embed_dim,
            output_dim=len(dictionary),
            activation_fn=cfg.activation_fn,
            weight=self.sentence_encoder.embed_tokens.weight,
        )
        self.special_global_id = special_global_token_id(dictionary)
        self.register_buffer("version", torch.tensor([ETC_FORMAT_VERSION], dtype=torch.float))

    # -- inputs ---------------------------------------------------------------------------------------
    def prepare_inputs(
        self,
        src_tokens: torch.Tensor,
        global_tokens: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        structure: Optional[Dict[str, torch.Tensor]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, GlobalLocalStructure]:
        """Fill in fixed-block global tokens if none are given and build the masks and labels.

        src_tokens int64 [batch, long_len]; global_tokens/global_types int64 [batch, global_len] or None;
        structure: dict of compact int64 ids (see module docstring) or None.
        Returns (global_tokens, global_types, GlobalLocalStructure).
        """
        cfg = self.cfg
        pad = self.dictionary.pad()
        if src_tokens.dim() != 2:
            raise ValueError(f"src_tokens must be int64 [batch, long_len], got shape {tuple(src_tokens.shape)}")
        if cfg.use_absolute_positions and src_tokens.size(1) > cfg.max_positions:
            raise ValueError(
                f"long input of length {src_tokens.size(1)} exceeds max_positions={cfg.max_positions}, "
                "the size of the absolute position table (use_absolute_positions=True)"
            )
        long_padding_mask = src_tokens.eq(pad)
        structure = dict(structure or {})
        unknown = set(structure) - set(STRUCTURE_KEYS)
        if unknown:
            raise ValueError(f"unknown structure keys {sorted(unknown)}; expected a subset of {STRUCTURE_KEYS}")
        if global_tokens is None:
            if global_types is not None:
                raise ValueError("global_types given without global_tokens")
            long_segment, global_len, global_padding_mask = fixed_block_ids(
                long_padding_mask, cfg.fixed_block_len
            )
            structure.setdefault("long_segment", long_segment)
            global_tokens = torch.full_like(global_padding_mask, self.special_global_id, dtype=torch.long)
            global_tokens = global_tokens.masked_fill(global_padding_mask, pad)
            global_types = torch.full_like(global_tokens, int(GlobalTokenType.FIXED_BLOCK))
        else:
            if global_types is None:
                raise ValueError("global_tokens given without global_types")
            if global_tokens.shape != global_types.shape or global_tokens.size(0) != src_tokens.size(0):
                raise ValueError(
                    f"global_tokens {tuple(global_tokens.shape)} and global_types {tuple(global_types.shape)} "
                    f"must both be [batch={src_tokens.size(0)}, global_len]"
                )
            global_padding_mask = global_tokens.eq(pad)
        if global_tokens.size(1) > cfg.max_global_positions:
            raise ValueError(
                f"global input of length {global_tokens.size(1)} exceeds max_global_positions="
                f"{cfg.max_global_positions}"
            )
        built = build_structure(
            long_padding_mask=long_padding_mask,
            global_padding_mask=global_padding_mask,
            vocab=self.sentence_encoder.label_vocab,
            local_radius=cfg.local_radius,
            hard_g2l=cfg.hard_g2l,
            hard_l2g=cfg.hard_l2g,
            **structure,
        )
        return global_tokens, global_types, built

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        masked_tokens: Optional[torch.Tensor] = None,
        global_tokens: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        structure: Optional[Dict[str, torch.Tensor]] = None,
        long_extra_embeddings: Optional[torch.Tensor] = None,
        global_extra_embeddings: Optional[torch.Tensor] = None,
        **unused,
    ) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Returns (x, extra): x is the LM logits float [batch, long_len, vocab] (or
        [num_masked, vocab] given ``masked_tokens`` bool [batch, long_len]), or the long features
        float [batch, long_len, dim] when ``features_only``. ``extra`` holds ``global_features`` float
        [batch, global_len, dim], both padding masks, and ``inner_states`` (list of (long, global)).

        ``long_extra_embeddings`` float [batch, long_len, dim] and ``global_extra_embeddings`` float
        [batch, global_len, dim] (optional) are added to the input embeddings: the hook for task-specific
        input features (OpenKP's visual features), computed by a task head module."""
        global_tokens, global_types, built = self.prepare_inputs(
            src_tokens, global_tokens, global_types, structure
        )
        x_long, x_global, inner_states = self.sentence_encoder(
            src_tokens, global_tokens, global_types, built, return_all_hiddens=return_all_hiddens,
            long_extra=long_extra_embeddings, global_extra=global_extra_embeddings,
        )
        extra = {
            "global_features": x_global,
            "long_padding_mask": src_tokens.eq(self.dictionary.pad()),
            "global_padding_mask": global_tokens.eq(self.dictionary.pad()),
            "inner_states": inner_states,
        }
        if not features_only:
            x_long = self.output_layer(x_long, masked_tokens=masked_tokens)
        return x_long, extra

    def output_layer(self, features: torch.Tensor, masked_tokens: Optional[torch.Tensor] = None) -> torch.Tensor:
        """float [batch, long_len, dim] -> float [batch, long_len, vocab] (or [num_masked, vocab])."""
        return self.lm_head(features, masked_tokens)

    def max_positions(self) -> int:
        return self.cfg.max_positions


@register_model("etc", dataclass=EtcConfig)
class EtcModel(FairseqEncoderModel):
    """ETC encoder (Ainslie et al., 2020) as a fairseq encoder model. See the module docstring."""

    def __init__(self, cfg: EtcConfig, encoder: EtcEncoder):
        super().__init__(encoder)
        self.cfg = cfg
        self.classification_heads = nn.ModuleDict()
        # Task-specific output (and input-feature) modules, registered by the fine-tuning tasks'
        # build_model (HotpotQA, WikiHop, NQ, OpenKP): see register_task_head.
        self.task_heads = nn.ModuleDict()
        # CPC (paper appendix B): a bilinear score between the global output of a CPC-masked sentence
        # (projected by this layer) and the separate encoding of that sentence alone.
        self.cpc_head = nn.Linear(cfg.encoder_embed_dim, cfg.encoder_embed_dim)

    @classmethod
    def build_model(cls, cfg: EtcConfig, task):
        return cls(cfg, EtcEncoder(cfg, task.source_dictionary))

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        classification_head_name: Optional[str] = None,
        **kwargs,
    ):
        """Like RoBERTa's forward; extra ``kwargs`` (global_tokens, global_types, structure,
        masked_tokens) go to :meth:`EtcEncoder.forward`."""
        if classification_head_name is not None:
            features_only = True
        x, extra = self.encoder(src_tokens, features_only, return_all_hiddens, **kwargs)
        if classification_head_name is not None:
            head_input = x if self.cfg.classification_head_input == "long_cls" else extra["global_features"]
            x = self.classification_heads[classification_head_name](head_input)
        return x, extra

    def encode_segments_alone(self, segment_tokens: torch.Tensor) -> torch.Tensor:
        """Encode each row as its own input: long = that segment's tokens, global = one token that
        every long token belongs to (the second CPC encoder of appendix B, same weights).

        segment_tokens: int64 [num_segments, max_segment_len], padded with the dictionary's pad.
        Returns the global token's output features, float [num_segments, embed_dim].
        """
        pad = self.encoder.dictionary.pad()
        n = segment_tokens.size(0)
        global_tokens = segment_tokens.new_full((n, 1), self.encoder.special_global_id)
        global_types = torch.full_like(global_tokens, int(GlobalTokenType.SENTENCE))
        long_segment = torch.where(
            segment_tokens.ne(pad), torch.zeros_like(segment_tokens), torch.full_like(segment_tokens, -1)
        )
        _, extra = self.encoder(
            segment_tokens, features_only=True, global_tokens=global_tokens, global_types=global_types,
            structure={"long_segment": long_segment},
        )
        return extra["global_features"][:, 0]

    def cpc_scores(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """NCE scores of every (prediction, candidate) pair.

        predicted: float [n, embed_dim], global outputs of the CPC-masked sentences;
        targets: float [m, embed_dim], encodings of the sentences alone (:meth:`encode_segments_alone`).
        Returns float [n, m]; entry [i, j] scores candidate j for prediction i.
        """
        return self.cpc_head(predicted) @ targets.transpose(0, 1)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)

    def register_classification_head(self, name: str, num_classes: int = None, inner_dim: int = None, **kwargs):
        """A RoBERTa-style head on the first long token (or first global token, see
        ``classification_head_input``)."""
        if name in self.classification_heads:
            prev = self.classification_heads[name]
            if num_classes != prev.out_proj.out_features or (inner_dim or self.cfg.encoder_embed_dim) != prev.dense.out_features:
                logger.warning(
                    f're-registering head "{name}" with num_classes {num_classes} '
                    f"(prev: {prev.out_proj.out_features})"
                )
        self.classification_heads[name] = RobertaClassificationHead(
            input_dim=self.cfg.encoder_embed_dim,
            inner_dim=inner_dim or self.cfg.encoder_embed_dim,
            num_classes=num_classes,
            activation_fn=self.cfg.pooler_activation_fn,
            pooler_dropout=self.cfg.pooler_dropout,
        )

    def register_task_head(self, name: str, head: nn.Module) -> nn.Module:
        """Attach a task's head module under ``task_heads.NAME`` (so it is saved in checkpoints) and
        return it. Fine-tuning tasks call this from ``build_model``; their criterions call the module
        on the features returned by :meth:`forward` (``features_only=True``). Re-registering a name
        replaces the module. When a checkpoint is loaded, :meth:`upgrade_state_dict_named` keeps the
        fresh weights of heads the checkpoint lacks and drops checkpoint heads the model lacks."""
        if not name.isidentifier():
            raise ValueError(f"task head name must be a Python identifier, got {name!r}")
        self.task_heads[name] = head
        return head

    @property
    def supported_targets(self):
        return {"self"}

    def max_positions(self):
        return self.cfg.max_positions

    def upgrade_state_dict_named(self, state_dict: Dict[str, torch.Tensor], name: str):
        """Checks the checkpoint format version and reconciles classification heads (heads in the
        checkpoint but not in the model are dropped, or registered with ``load_checkpoint_heads``;
        heads in the model but not in the checkpoint keep their fresh weights)."""
        prefix = name + "." if name else ""
        version_key = prefix + "encoder.version"
        version = int(state_dict[version_key].item()) if version_key in state_dict else ETC_FORMAT_VERSION
        if version > ETC_FORMAT_VERSION:
            raise RuntimeError(
                f"checkpoint has etc-fairseq format version {version}, newer than this installation "
                f"supports ({ETC_FORMAT_VERSION}); upgrade etc-fairseq to load it"
            )
        for step in range(version, ETC_FORMAT_VERSION):
            if step not in FORMAT_UPGRADES:
                raise RuntimeError(f"checkpoint has etc-fairseq format version {version}; no upgrade from {step}")
            logger.info(f"upgrading checkpoint from etc-fairseq format version {step} to {step + 1}")
            FORMAT_UPGRADES[step](state_dict, prefix)
        state_dict[version_key] = torch.tensor([ETC_FORMAT_VERSION], dtype=torch.float)
        super().upgrade_state_dict_named(state_dict, name)

        head_prefix = prefix + "classification_heads."
        in_ckpt: Dict[str, Tuple[int, int]] = {}
        for k, v in state_dict.items():
            if k.startswith(head_prefix) and k.endswith(".out_proj.weight"):
                head = k[len(head_prefix) : -len(".out_proj.weight")]
                inner = state_dict[head_prefix + head + ".dense.weight"].size(0)
                in_ckpt[head] = (v.size(0), inner)
        for head, (num_classes, inner) in in_ckpt.items():
            current = self.classification_heads[head] if head in self.classification_heads else None
            if current is None and self.cfg.load_checkpoint_heads:
                self.register_classification_head(head, num_classes, inner)
                continue
            if current is None or (current.out_proj.out_features, current.dense.out_features) != (num_classes, inner):
                logger.warning(f"dropping classification head {head!r} from the checkpoint: "
                               "not in the model or of different size")
                for k in [k for k in state_dict if k.startswith(head_prefix + head + ".")]:
                    del state_dict[k]
        for k, v in self.classification_heads.state_dict().items():
            state_dict.setdefault(head_prefix + k, v)

        # Task heads: the model (built by the task) decides which heads exist. Checkpoint tensors of
        # heads that are absent or differ in shape are dropped (with a warning); missing ones keep the
        # model's fresh weights (e.g. fine-tuning from a pre-trained checkpoint).
        task_prefix = prefix + "task_heads."
        current = self.task_heads.state_dict()
        dropped = []
        for k in [k for k in state_dict if k.startswith(task_prefix)]:
            sub = k[len(task_prefix):]
            if sub not in current or current[sub].shape != state_dict[k].shape:
                dropped.append(sub)
                del state_dict[k]
        if dropped:
            logger.warning(f"dropping {len(dropped)} task-head tensors from the checkpoint that this model "
                           f"does not have (or has with another shape): {sorted(dropped)[:8]}")
        for k, v in current.items():
            state_dict.setdefault(task_prefix + k, v)

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """Load a trained checkpoint from a local directory as an :class:`etc_fairseq.hub.EtcHubInterface`
        (encode text / documents, ``extract_features``, classification heads); see
        :func:`etc_fairseq.hub.from_pretrained`."""
        from etc_fairseq.hub import from_pretrained

        return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
