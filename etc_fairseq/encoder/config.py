"""The ETC encoder's configuration: the single definition of the model's fields.

:class:`EtcEncoderConfig` is a plain dataclass (no fairseq). The fairseq model's ``EtcConfig``
(:mod:`etc_fairseq.models.etc`) inherits it, so every field below is also a ``fairseq-train`` flag
(``--local-radius``, ...) with the ``help`` given here, and is stored in fairseq checkpoints; the
core stores it in ``config.json`` (:mod:`etc_fairseq.encoder.io`).

Defaults give the model as this project trains it (post-LayerNorm BERT/RoBERTa layers, so RoBERTa
weights lift into it). Other fields reproduce Google's released ETC checkpoints: relative_bias,
relative_vocab_size, shared_kv_per_side, separate_attention_layer_norm, pre_layer_norm,
layer_norm_eps, embedding_size, segment_vocab_size (with long_segment_id / global_segment_id),
separate_embedding_layer_norm, no_global_type_embeddings, index_position_embeddings and the
``gelu_accurate`` activation; :mod:`etc_fairseq.official.convert` maps an official ``etc_config.json``
onto them.
"""

# No ``from __future__ import annotations``: fairseq reads the field types at run time.
import enum
from dataclasses import dataclass, field, fields
from typing import Any, Dict

from etc_fairseq.errors import ConfigError
from etc_fairseq.structure.labels import DEFAULT_STRUCTURE_LABELS

#: Activation functions the layers accept (``activation_fn`` / ``pooler_activation_fn``).
#: ``gelu`` is the exact (erf) GELU; ``gelu_accurate`` the tanh approximation (BERT's and the
#: official ETC's ``gelu``).
ACTIVATIONS = ("relu", "gelu", "gelu_accurate", "tanh", "linear", "swish")

CLASSIFICATION_HEAD_INPUTS = ("long_cls", "global_cls")

#: The attention kernels a model may be told to use (``attention_backend``).
ATTENTION_BACKENDS = ("auto", "flex", "blocked")


class _Choice(str, enum.Enum):
    """A string choice: equal to, printed and formatted as its string (as fairseq's ChoiceEnum)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def choice_type(name: str, choices) -> type:
    """A ``str`` enum whose members are ``choices`` (member == its string). Used as a field type, it
    makes fairseq's command line offer exactly these choices and its checkpoint gate
    (:mod:`etc_fairseq.checkpoint_io`) refuse any other stored value."""
    return _Choice(name, {c: c for c in choices})


ActivationName = choice_type("ActivationName", ACTIVATIONS)
ClassificationHeadInput = choice_type("ClassificationHeadInput", CLASSIFICATION_HEAD_INPUTS)
AttentionBackendName = choice_type("AttentionBackendName", ATTENTION_BACKENDS)

@dataclass
class EtcEncoderConfig:
    """Every field of the ETC encoder and its heads. See the module docstring."""

    encoder_layers: int = field(default=12, metadata={"help": "number of ETC layers"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "model width"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "feed-forward inner width"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "attention heads"})
    activation_fn: ActivationName = field(
        default="gelu",
        metadata={"help": "activation of the feed-forward blocks and the LM head: " + ", ".join(ACTIVATIONS)
                  + " (gelu_accurate = the tanh approximation; official ETC's 'gelu')"},
    )
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings and residual branches"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on attention probabilities"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    pooler_activation_fn: ActivationName = field(
        default="tanh", metadata={"help": "activation of classification heads: " + ", ".join(ACTIVATIONS)}
    )
    pooler_dropout: float = field(default=0.0, metadata={"help": "dropout in classification heads"})
    max_positions: int = field(
        default=4096,
        metadata={"help": "rows of the absolute position table with use_absolute_positions, and then the "
                  "longest long input; without absolute positions (the default: relative positions only) "
                  "inputs of any length run (fairseq's name; sentence_prediction sets it)"},
    )
    max_global_positions: int = field(
        default=256,
        metadata={"help": "the global length the architecture is meant for (recorded, not enforced: global "
                  "tokens have no absolute positions unless index_position_embeddings, whose table size "
                  "caps both sides)"},
    )
    local_radius: int = field(default=84, metadata={"help": "l2l attention radius r"})
    relative_pos_max_distance: int = field(
        default=12, metadata={"help": "relative positions are clipped at this distance k"}
    )
    relative_structure_labels: str = field(
        default=",".join(DEFAULT_STRUCTURE_LABELS),
        metadata={
            "help": "comma-separated structure labels after the 2k+1 position labels; must include the "
            "default ones (the builders assign them), more may be appended for task-specific use; "
            "official ETC's order: structure.labels.OFFICIAL_STRUCTURE_LABELS"
        },
    )
    relative_vocab_size: int = field(
        default=0,
        metadata={"help": "rows of the relative tables (official: relative_vocab_size, e.g. 32); 0 = exactly "
                  "the 2k+1 position labels plus the structure labels; rows beyond those are unused"},
    )
    relative_bias: bool = field(
        default=False,
        metadata={"help": "a per-label, per-head bias table [labels, heads] next to the label vectors, added "
                  "to q.e before the 1/sqrt(head_dim) scaling (official ETC has one)"},
    )
    shared_q: bool = field(default=False, metadata={"help": "one W^Q for long and global queries"})
    shared_kv: bool = field(default=False, metadata={"help": "one W^K/W^V for all four attention pieces"})
    shared_kv_per_side: bool = field(
        default=False,
        metadata={"help": "one W^K/W^V per query side: l2l = l2g and g2g = g2l (official "
                  "share_kv_projections); ignored with shared_kv"},
    )
    shared_out_proj: bool = field(default=False, metadata={"help": "one output projection for both sides"})
    separate_attention_layer_norm: bool = field(
        default=False,
        metadata={"help": "one post-attention LayerNorm per side even when the output projection is shared "
                  "(official ETC always has one per side)"},
    )
    # Named "separate" (default False) because fairseq turns a True-by-default bool into a flag that
    # sets it to False: --separate-ffn reads as what it does.
    separate_ffn: bool = field(
        default=False, metadata={"help": "one feed-forward block per side instead of one shared by both"}
    )
    shared_relative_embeddings: bool = field(
        default=False, metadata={"help": "one relative-label table for long and global queries"}
    )
    pre_layer_norm: bool = field(
        default=False,
        metadata={"help": "LayerNorm before each attention/feed-forward block instead of after the residual "
                  "sum (official use_pre_activation_order; no final LayerNorm, as there)"},
    )
    layer_norm_eps: float = field(
        default=1e-5, metadata={"help": "epsilon of every encoder LayerNorm (official ETC: 1e-12)"}
    )
    embedding_size: int = field(
        default=0,
        metadata={"help": "width of the token embedding table; smaller than encoder_embed_dim adds a linear "
                  "projection to the model width (ALBERT/official embedding_size); 0 = encoder_embed_dim"},
    )
    segment_vocab_size: int = field(
        default=0,
        metadata={"help": "rows of a segment embedding table added to both sides' embeddings (official: 16); "
                  "0 = none"},
    )
    long_segment_id: int = field(
        default=1, metadata={"help": "segment id of long tokens when none is given (official: 1)"}
    )
    global_segment_id: int = field(
        default=0, metadata={"help": "segment id of global tokens when none is given (official: 0)"}
    )
    separate_embedding_layer_norm: bool = field(
        default=False, metadata={"help": "one embedding LayerNorm per side (official ETC) instead of one shared"}
    )
    no_global_type_embeddings: bool = field(
        default=False,
        metadata={"help": "no global-token-type embedding table (official ETC has none)"},
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
    index_position_embeddings: int = field(
        default=0,
        metadata={"help": "learned absolute positions by index, one table of this many rows per side (long and "
                  "global; position = index in the sequence, padding included: official "
                  "max_absolute_position_embeddings); 0 = none"},
    )
    attention_backend: AttentionBackendName = field(
        default="auto",
        metadata={"help": "the attention kernel: auto = FlexAttention on CUDA, the blocked kernel elsewhere; "
                  "flex; blocked. FlexAttention has no attention dropout: attention_dropout is not applied on "
                  "its path (measured not to hurt: docs/gpu.md); blocked applies it on CUDA too"},
    )
    checkpoint_activations: bool = field(
        default=False, metadata={"help": "recompute layer activations in backward to save memory"}
    )
    classification_head_input: ClassificationHeadInput = field(
        default="long_cls",
        metadata={"help": "classification heads read the first long token (long_cls) or the first global "
                  "token (global_cls)"},
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # choice fields hold their plain string
            v = getattr(self, f.name)
            if isinstance(v, enum.Enum):
                object.__setattr__(self, f.name, v.value)
        validate_encoder_config(self)

    @property
    def token_embedding_size(self) -> int:
        """Width of the token embedding table (``embedding_size`` or the model width)."""
        return self.embedding_size or self.encoder_embed_dim

    @classmethod
    def preset(cls, name: str, **overrides) -> "EtcEncoderConfig":
        """The named size of :data:`PRESETS` (``etc_base``, ``etc_tiny``, ...) with ``overrides`` applied.

        Raises:
            ValueError: an unknown preset or field name (the known ones listed).
        """
        if name not in PRESETS:
            raise ConfigError(f"unknown ETC preset {name!r}; known: {sorted(PRESETS)}")
        unknown = set(overrides) - set(encoder_config_fields())
        if unknown:
            raise ConfigError(f"unknown EtcEncoderConfig fields {sorted(unknown)}")
        return cls(**{**PRESETS[name], **overrides})


_SEPARATE = dict(shared_q=False, shared_kv=False, shared_out_proj=False, shared_relative_embeddings=False,
                 separate_ffn=False)
_SHARED = dict(_SEPARATE, shared_q=True, shared_kv=True, shared_out_proj=True, shared_relative_embeddings=True)
_BASE = dict(encoder_layers=12, encoder_embed_dim=768, encoder_ffn_embed_dim=3072, encoder_attention_heads=12,
             local_radius=84, relative_pos_max_distance=12, max_positions=4096, max_global_positions=256)
_LARGE = dict(_BASE, encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096,
              encoder_attention_heads=16, local_radius=169, relative_pos_max_distance=24)

#: The named model sizes: the paper's (section 4.1, appendix E; "shared" is its ablation with every
#: attention projection shared by both sides and all four pieces; the feed-forward block is shared in all)
#: and ``etc_tiny`` for tests, demos and CPU runs. A preset lists the fields it sets; the rest keep
#: :class:`EtcEncoderConfig`'s defaults. fairseq's ``--arch`` of the same name reads these
#: (:mod:`etc_fairseq.models.architectures`). Parameter counts (tests/test_model.py): ``etc_base`` ~166M and
#: ``etc_base_shared`` ~109M with a 30,522-token vocabulary, ``etc_large`` ~558M with RoBERTa's 50,265.
PRESETS: Dict[str, Dict[str, Any]] = {
    "etc_base": dict(_BASE, **_SEPARATE),
    "etc_base_shared": dict(_BASE, **_SHARED),
    "etc_large": dict(_LARGE, **_SEPARATE),
    "etc_large_shared": dict(_LARGE, **_SHARED),
    "etc_tiny": dict(_BASE, **_SEPARATE, encoder_layers=2, encoder_embed_dim=64, encoder_ffn_embed_dim=256,
                     encoder_attention_heads=4, local_radius=16, relative_pos_max_distance=4,
                     max_global_positions=64, fixed_block_len=16),
}


def encoder_config_fields():
    """The names of :class:`EtcEncoderConfig`'s fields, in order."""
    return tuple(f.name for f in fields(EtcEncoderConfig))


def absolute_position_limit(cfg):
    """int or None: the longest long input the model's absolute position tables allow: ``max_positions`` with
    ``use_absolute_positions``, ``index_position_embeddings`` when set (the smaller of both), None when the
    model uses relative positions only (then any length runs: the length extrapolation relative
    positions are for)."""
    limits = []
    if getattr(cfg, "use_absolute_positions", False):
        limits.append(int(cfg.max_positions))
    if getattr(cfg, "index_position_embeddings", 0):
        limits.append(int(cfg.index_position_embeddings))
    return min(limits) if limits else None


#: probabilities of the dropout layers: a number in [0, 1)
DROPOUT_FIELDS = ("dropout", "attention_dropout", "activation_dropout", "pooler_dropout")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the largest l2l radius and relative-position clipping distance a config may ask for, and why
MAX_LOCAL_RADIUS = 1 << 17
MAX_RELATIVE_DISTANCE = 4096
LIMIT_REASONS = {
    "local_radius": "every long token keeps 2r+1 mask and label entries; a radius past the input's length attends "
                    "to all of it already",
    "relative_pos_max_distance": "each layer holds 2k+1 relative-label vectors per head; the paper clips at 12 and "
                                 "24, Google's released models at most at 42",
}


def validate_encoder_config(cfg) -> None:
    """Raise :class:`~etc_fairseq.errors.ConfigError` (a ``ValueError``) naming the field when a value
    cannot build a working model: sizes that are not positive integers, a dropout that is not a probability
    in [0, 1) (NaN included), a LayerNorm epsilon that is not a positive finite number, an unknown
    activation. ``cfg`` may be an :class:`EtcEncoderConfig` or anything with its attributes (fairseq's
    ``EtcConfig``, a namespace, a checkpoint's stored config); fairseq's ``II(...)`` placeholders (strings
    starting with ``${``) are left for later."""
    def value(name):
        v = getattr(cfg, name, None)
        if isinstance(v, enum.Enum):
            v = v.value
        return None if isinstance(v, str) and v.startswith("${") else v

    for name in ("activation_fn", "pooler_activation_fn"):
        v = value(name)
        if v is not None and v not in ACTIVATIONS:
            raise ConfigError(f"{name}={v!r}: expected one of {list(ACTIVATIONS)}")
    for name, choices in (("classification_head_input", CLASSIFICATION_HEAD_INPUTS),
                          ("attention_backend", ATTENTION_BACKENDS)):
        v = value(name)
        if v is not None and v not in choices:
            raise ConfigError(f"{name}={v!r}: expected one of {list(choices)}")
    for name in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                 "max_positions", "max_global_positions", "fixed_block_len"):
        v = value(name)
        if v is not None and (not _is_int(v) or v < 1):
            raise ConfigError(f"{name}={v!r}: expected an int >= 1")
    for name in ("relative_vocab_size", "embedding_size", "segment_vocab_size", "local_radius",
                 "relative_pos_max_distance", "index_position_embeddings", "long_segment_id", "global_segment_id"):
        v = value(name)
        if v is not None and (not _is_int(v) or v < 0):
            raise ConfigError(f"{name}={v!r}: expected an int >= 0")
    for name, largest in (("local_radius", MAX_LOCAL_RADIUS), ("relative_pos_max_distance", MAX_RELATIVE_DISTANCE)):
        v = value(name)
        if v is not None and _is_int(v) and v > largest:
            raise ConfigError(f"{name}={v}: expected at most {largest} ({LIMIT_REASONS[name]})")
    for name in DROPOUT_FIELDS:
        v = value(name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0):
            raise ConfigError(f"{name}={v!r}: expected a probability in [0, 1)")
    v = value("layer_norm_eps")
    if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 < v < float("inf")):
        raise ConfigError(f"layer_norm_eps={v!r}: expected a positive finite number")
    dim, heads = value("encoder_embed_dim"), value("encoder_attention_heads")
    if dim is not None and heads is not None and dim % heads:
        raise ConfigError(f"encoder_embed_dim ({dim}) must be divisible by encoder_attention_heads ({heads})")
    nseg = value("segment_vocab_size")
    if nseg:
        for name in ("long_segment_id", "global_segment_id"):
            v = value(name)
            if v is not None and not 0 <= v < nseg:
                raise ConfigError(f"{name}={v}: expected 0 <= id < segment_vocab_size={nseg}")


def as_encoder_config(cfg) -> EtcEncoderConfig:
    """An :class:`EtcEncoderConfig` with the values of ``cfg``'s fields of the same names (fairseq's
    ``EtcConfig``, an omegaconf node, a namespace, or an EtcEncoderConfig); fields ``cfg`` lacks (a
    checkpoint written before the field existed) take their defaults."""
    if type(cfg) is EtcEncoderConfig:
        return cfg
    values = {}
    for f in fields(EtcEncoderConfig):
        if hasattr(cfg, f.name):
            v = getattr(cfg, f.name)
            if v is not None:
                values[f.name] = v.value if isinstance(v, enum.Enum) else v
    return EtcEncoderConfig(**values)
