"""The ``etc`` fairseq model: the core :class:`etc_fairseq.encoder.EtcEncoder` (embeddings -> N x
ETC layers -> long and global features) wrapped as a fairseq encoder model, with an LM head tied to
the token embeddings, RoBERTa-style classification heads and task heads.

Inputs (``net_input`` keys, all optional except ``src_tokens``): ``src_tokens``, ``global_tokens``,
``global_types``, ``structure`` (a dict of compact int64 structure ids, so that fairseq's
``move_to_cuda`` moves it), ``segment_ids``, ``global_segment_ids``; see :mod:`etc_fairseq.encoder.model`.

With only ``src_tokens`` (fairseq's stock ``masked_lm`` and ``sentence_prediction`` tasks), the model
builds fixed-block global tokens itself: one global token per ``fixed_block_len`` long tokens (the
paper's "fixed blocks" configuration).
"""


# No ``from __future__ import annotations`` here: fairseq reads the EtcConfig field types at run time.
import argparse
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqEncoder, FairseqEncoderModel, register_model

from etc_fairseq.encoder import ClassificationHead, EtcEncoder, EtcEncoderConfig, LMHead
from etc_fairseq.encoder.config import absolute_position_limit
from etc_fairseq.encoder.model import label_vocab_from_config  # noqa: F401  (re-exported for callers)
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.structure.global_tokens import GlobalTokenType, special_global_token_id

from .checkpoint_config import ETC_FORMAT_VERSION  # noqa: F401  (defined with the checks of the format)

logger = logging.getLogger(__name__)


#: Upgrade steps: ``FORMAT_UPGRADES[v](state_dict, prefix)`` turns a version-``v`` state dict (keys under
#: ``prefix``) into version ``v + 1`` in place. Empty while version 1 is the only format;
#: :meth:`EtcModel.upgrade_state_dict_named` applies the steps in order (tests/test_reliability_checkpoints.py).
FORMAT_UPGRADES: Dict[int, Callable[[Dict[str, torch.Tensor], str], None]] = {}


@dataclass
class EtcConfig(FairseqDataclass, EtcEncoderConfig):
    """The model fields of :class:`~etc_fairseq.encoder.EtcEncoderConfig` (inherited: each one is a
    ``fairseq-train`` flag with its help) plus what only the fairseq adapter uses."""

    load_checkpoint_heads: bool = field(
        default=False, metadata={"help": "(re-)register classification heads found in a checkpoint"}
    )
    fixed_block_token: str = field(
        default="<s>",
        metadata={"help": "dictionary symbol of the global tokens the model makes itself (fixed blocks, when no "
                  "global input is given): <s>, or the sentence token a converted model was pretrained with "
                  "([unused0] for official ETC; etc-lift sets it)"},
    )


class EtcFairseqEncoder(FairseqEncoder):
    """The core :class:`~etc_fairseq.encoder.EtcEncoder` (``sentence_encoder``, the part RoBERTa's
    ``sentence_encoder`` corresponds to) plus the tied LM head (``lm_head``), as a fairseq encoder.

    ``lm_head=False`` builds no LM head (``lm_head`` is None): fine-tuning models, whose losses never read
    the LM logits (a parameter without gradient stops PyTorch's DistributedDataParallel)."""

    def __init__(self, cfg: EtcConfig, dictionary, lm_head: bool = True):
        super().__init__(dictionary)
        self.cfg = cfg
        symbol = getattr(cfg, "fixed_block_token", "<s>")
        self.special_global_id = special_global_token_id(dictionary) if symbol == "<s>" else dictionary.index(symbol)
        if self.special_global_id == dictionary.unk() and symbol != "<unk>":
            raise ConfigError(f"--fixed-block-token {symbol!r} is not in the dictionary")
        self.sentence_encoder = EtcEncoder(cfg, len(dictionary), dictionary.pad(), self.special_global_id)
        self.lm_head = LMHead(
            cfg.encoder_embed_dim, self.sentence_encoder.embed_tokens.weight, cfg.activation_fn,
            cfg.layer_norm_eps,
        ) if lm_head else None
        self.register_buffer("version", torch.tensor([ETC_FORMAT_VERSION], dtype=torch.float))

    def prepare_inputs(self, src_tokens, global_tokens=None, global_types=None, structure=None):
        """See :meth:`etc_fairseq.encoder.EtcEncoder.prepare_inputs`."""
        return self.sentence_encoder.prepare_inputs(src_tokens, global_tokens, global_types, structure)

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
        segment_ids: Optional[torch.Tensor] = None,
        global_segment_ids: Optional[torch.Tensor] = None,
        **unused,
    ) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Returns (x, extra): x is the LM logits float [batch, long_len, vocab] (or
        [num_masked, vocab] given ``masked_tokens`` bool [batch, long_len]), or the long features
        float [batch, long_len, dim] when ``features_only``. ``extra`` holds ``global_features`` float
        [batch, global_len, dim], both padding masks (bool, True = padding: reuse them rather than
        recomputing), the ``structure`` (masks and labels) used, and ``inner_states`` (list of
        (long, global)).

        ``long_extra_embeddings`` float [batch, long_len, dim] and ``global_extra_embeddings`` float
        [batch, global_len, dim] (optional) are added to the input embeddings: the hook for task-specific
        input features (OpenKP's visual features), computed by a task head module."""
        out = self.sentence_encoder(
            src_tokens, global_tokens, global_types, structure,
            segment_ids=segment_ids, global_segment_ids=global_segment_ids,
            long_extra=long_extra_embeddings, global_extra=global_extra_embeddings,
            return_all_hiddens=return_all_hiddens,
        )
        extra = {
            "global_features": out.global_features,
            "long_padding_mask": out.long_padding_mask,
            "global_padding_mask": out.global_padding_mask,
            "structure": out.structure,
            "inner_states": out.inner_states,
        }
        x_long = out.long_features
        if not features_only:
            x_long = self.output_layer(x_long, masked_tokens=masked_tokens)
        return x_long, extra

    def output_layer(self, features: torch.Tensor, masked_tokens: Optional[torch.Tensor] = None) -> torch.Tensor:
        """float [batch, long_len, dim] -> float [batch, long_len, vocab] (or [num_masked, vocab])."""
        if self.lm_head is None:
            raise RuntimeError("this model has no LM head (built for a fine-tuning task): call it with "
                               "features_only=True")
        return self.lm_head(features, masked_tokens)

    def max_positions(self) -> Optional[int]:
        """The longest long input, or None (no limit) without absolute position embeddings: see
        :func:`absolute_position_limit`."""
        return absolute_position_limit(self.cfg)


def reconcile_task_heads(task_heads: nn.ModuleDict, state_dict: Dict[str, torch.Tensor], prefix: str) -> None:
    """Task heads on loading a checkpoint (in place on ``state_dict``): the model (built by the task)
    decides which heads exist. Checkpoint tensors under ``PREFIX task_heads.`` of heads that are absent or
    differ in shape are dropped (with a warning); missing ones get the model's fresh weights (e.g.
    fine-tuning from a pre-trained checkpoint). Shared by every model with ``task_heads``."""
    task_prefix = prefix + "task_heads."
    current = task_heads.state_dict()
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


@register_model("etc", dataclass=EtcConfig)
class EtcModel(FairseqEncoderModel):
    """ETC encoder (Ainslie et al., 2020) as a fairseq encoder model. See the module docstring.

    Pre-training heads (the LM head ``encoder.lm_head`` and ``cpc_head``) exist only where the task uses
    them: a task whose class attribute ``PRETRAINING_HEADS`` is False (every fine-tuning task) gets a
    model without them, so that every parameter of the model receives a gradient in every step (PyTorch's
    DistributedDataParallel, fairseq's default ``--ddp-backend``, stops on parameters without one).
    Tasks without the attribute (``etc_pretraining``, fairseq's ``masked_lm``) get both heads.
    :meth:`upgrade_state_dict_named` drops the heads of a pre-trained checkpoint the model does not
    have, and gives a model that has them fresh ones (the LM projection tied to the embeddings) when
    a fine-tuned checkpoint lacks them."""

    def __init__(self, cfg: EtcConfig, encoder: EtcFairseqEncoder, cpc_head: bool = True):
        super().__init__(encoder)
        self.cfg = cfg
        self.classification_heads = nn.ModuleDict()
        # Task-specific output (and input-feature) modules, registered by the fine-tuning tasks'
        # build_model (HotpotQA, WikiHop, NQ, OpenKP): see register_task_head.
        self.task_heads = nn.ModuleDict()
        # CPC (paper appendix B): a bilinear score between the global output of a CPC-masked sentence
        # (projected by this layer) and the separate encoding of that sentence alone.
        self.cpc_head = nn.Linear(cfg.encoder_embed_dim, cfg.encoder_embed_dim) if cpc_head else None

    @classmethod
    def add_args(cls, parser):
        """fairseq's flags from :class:`EtcConfig`, plus ``--no-FLAG`` for every on/off switch ``--FLAG``.

        A model field the command line leaves out is taken from a ``--finetune-from-model`` checkpoint's
        stored config (``architectures.fields_from_finetune_checkpoint``), so without the negation a switch
        that checkpoint has on (``--hard-g2l``, ``--relative-bias``, ...) could not be turned off for the
        fine-tuning. Switches whose name already starts with ``no_`` get no ``--no-no-...`` form."""
        super().add_args(parser)
        for f in dataclasses.fields(EtcConfig):
            if f.type in (bool, "bool") and not f.name.startswith("no_"):
                flag = f.name.replace("_", "-")
                parser.add_argument(f"--no-{flag}", dest=f.name, action="store_false", default=argparse.SUPPRESS,
                                    help=f"turn --{flag} off (e.g. when the --finetune-from-model checkpoint has it on)")

    @classmethod
    def build_model(cls, cfg: EtcConfig, task):
        """The model for ``task``, after checking that this machine can hold what ``cfg`` describes
        (:func:`~etc_fairseq.encoder.size.check_fits_in_memory`: ``--encoder-layers 100000`` is refused at
        once, naming the flags, instead of being built for minutes or failing in the allocator)."""
        from etc_fairseq.encoder.config import validate_encoder_config
        from etc_fairseq.encoder.size import check_fits_in_memory

        validate_encoder_config(cfg)
        check_fits_in_memory(cfg, len(task.source_dictionary), "the model (--arch and the model flags)")
        heads = bool(getattr(task, "PRETRAINING_HEADS", True))
        return cls(cfg, EtcFairseqEncoder(cfg, task.source_dictionary, lm_head=heads), cpc_head=heads)

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        classification_head_name: Optional[str] = None,
        **kwargs,
    ):
        """Like RoBERTa's forward; extra ``kwargs`` (global_tokens, global_types, structure,
        masked_tokens, ...) go to :meth:`EtcFairseqEncoder.forward`."""
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
        if self.cpc_head is None:
            raise RuntimeError("this model has no CPC head (built for a fine-tuning task)")
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
        self.classification_heads[name] = ClassificationHead(
            self.cfg.encoder_embed_dim,
            num_classes,
            inner_dim=inner_dim or self.cfg.encoder_embed_dim,
            activation_fn=self.cfg.pooler_activation_fn,
            dropout=self.cfg.pooler_dropout,
        )

    def keep_final_outputs(self, sides) -> None:
        """Let the encoder's last layer compute only ``sides`` ("long" and/or "global"): what the task's
        heads read (:meth:`etc_fairseq.encoder.EtcEncoder.keep_final_outputs`)."""
        self.encoder.sentence_encoder.keep_final_outputs(sides)

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

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's loading (format upgrade, then strict ``nn.Module`` loading), with tensors that do not fit
        this model refused as one :class:`~etc_fairseq.errors.CheckpointLoadError` line naming the first
        tensor and both shapes (and how many more differ), instead of torch's multi-line RuntimeError."""
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as e:
            problems = [p.strip() for p in str(e).splitlines()[1:] if p.strip()]
            if not str(e).startswith("Error(s) in loading state_dict") or not problems:
                raise
            first = problems[0].rstrip(".")[:300]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CheckpointLoadError(
                f"the checkpoint's tensors do not fit the model built from its config and the command line: "
                f"{first}{more}"
            ) from None

    @property
    def supported_targets(self):
        return {"self"}

    def max_positions(self) -> Optional[int]:
        """None (any length) for a relative-position model; the absolute table's size otherwise (fairseq's
        ``resolve_max_positions`` skips None, so the task's own limit applies alone)."""
        return absolute_position_limit(self.cfg)

    def upgrade_state_dict_named(self, state_dict: Dict[str, torch.Tensor], name: str):
        """Checks the checkpoint format version and reconciles classification heads (heads in the
        checkpoint but not in the model are dropped, or registered with ``load_checkpoint_heads``;
        heads in the model but not in the checkpoint keep their fresh weights)."""
        prefix = name + "." if name else ""
        version_key = prefix + "encoder.version"
        version = int(state_dict[version_key].item()) if version_key in state_dict else ETC_FORMAT_VERSION
        if version > ETC_FORMAT_VERSION:
            raise CheckpointLoadError(
                f"checkpoint has etc-fairseq format version {version}, newer than this installation "
                f"supports ({ETC_FORMAT_VERSION}); upgrade etc-fairseq to load it"
            )
        for step in range(version, ETC_FORMAT_VERSION):
            if step not in FORMAT_UPGRADES:
                raise CheckpointLoadError(f"checkpoint has etc-fairseq format version {version}; no upgrade from {step}")
            logger.info(f"upgrading checkpoint from etc-fairseq format version {step} to {step + 1}")
            FORMAT_UPGRADES[step](state_dict, prefix)
        state_dict[version_key] = torch.tensor([ETC_FORMAT_VERSION], dtype=torch.float)
        super().upgrade_state_dict_named(state_dict, name)
        self._reconcile_pretraining_heads(state_dict, prefix)
        self._drop_unused_final_layer_side(state_dict, prefix)

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

        reconcile_task_heads(self.task_heads, state_dict, prefix)

    #: state-dict prefixes of the pre-training heads (see the class docstring)
    PRETRAINING_HEAD_PREFIXES = ("encoder.lm_head.", "cpc_head.")

    def _reconcile_pretraining_heads(self, state_dict: Dict[str, torch.Tensor], prefix: str) -> None:
        """Per pre-training head (LM, CPC): drop the checkpoint's tensors of a head this model was built
        without; give a head this model has but the checkpoint has no tensor of (a fine-tuning model's
        checkpoint) the model's fresh weights (``encoder.lm_head.weight``: the checkpoint's own token
        embeddings, to which it is tied). Otherwise the tensors load as they are (strictly)."""
        own = self.state_dict()
        dropped = 0
        for head in self.PRETRAINING_HEAD_PREFIXES:
            current = {k: v for k, v in own.items() if k.startswith(head)}
            in_ckpt = [k for k in state_dict if k.startswith(prefix + head)]
            if not current:
                for k in in_ckpt:
                    del state_dict[k]
                dropped += len(in_ckpt)
            elif not in_ckpt:
                for k, v in current.items():
                    if k == "encoder.lm_head.weight":
                        v = state_dict.get(prefix + "encoder.sentence_encoder.embed_tokens.weight", v)
                    state_dict[prefix + k] = v
        if dropped:
            logger.info(f"not loading {dropped} pre-training head tensors (LM / CPC head): this model, "
                        "built for a fine-tuning task, has no such heads")

    def _drop_unused_final_layer_side(self, state_dict: Dict[str, torch.Tensor], prefix: str) -> None:
        """A model whose last layer computes one side only (a fine-tuning task that reads one side,
        :meth:`etc_fairseq.encoder.EtcEncoder.keep_final_outputs`) has no parameters for the other side
        there: drop those tensors of a complete (e.g. pre-trained) checkpoint."""
        encoder = self.encoder.sentence_encoder
        if tuple(encoder.final_outputs) == ("long", "global"):
            return
        layer = f"encoder.sentence_encoder.layers.{len(encoder.layers) - 1}."
        own = {k for k in self.state_dict() if k.startswith(layer)}
        dropped = [k for k in state_dict if k.startswith(prefix + layer) and k[len(prefix):] not in own]
        for k in dropped:
            del state_dict[k]
        if dropped:
            logger.info(f"not loading {len(dropped)} tensors of the last layer that only its "
                        f"{'/'.join(s for s in ('long', 'global') if s not in encoder.final_outputs)} outputs use: "
                        f"this task reads the {'/'.join(encoder.final_outputs)} features only")

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """Load a trained checkpoint from a local directory as an :class:`etc_fairseq.hub.EtcHubInterface`
        (encode text / documents, ``extract_features``, classification heads); see
        :func:`etc_fairseq.models.loading.from_pretrained`."""
        from etc_fairseq.models.loading import from_pretrained

        return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
