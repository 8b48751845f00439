"""Official ETC (Google's TensorFlow ``etcmodel``) -> :class:`~etc_fairseq.encoder.EtcEncoder`, and running
the converted model on the official model's own inputs.

- :func:`official_to_encoder_config`: an ``etc_config.json`` dict -> :class:`EtcEncoderConfig`. Every
  official ``EtcConfig`` field is mapped (:data:`OFFICIAL_FIELD_HANDLING` says how) or refused by name
  (e.g. an ``att_size_per_head`` that does not equal ``hidden_size / num_attention_heads``, an unknown
  ``hidden_act``, a field the official config does not have).
- :func:`official_weight_map`: for one config, every parameter of the converted encoder -> the official
  variable it comes from (and whether the Dense kernel is transposed).
- :func:`convert_official_checkpoint`: read a checkpoint directory (:mod:`.checkpoint` checks every
  variable's name and shape against the config first) and build the encoder. Every official model
  variable lands in exactly one parameter (checked); training-only variables (``global_step``, optimizer
  slots) are counted in the returned :class:`OfficialConversion`.
- :func:`forward_official_inputs`: ``EtcModel.call``'s keyword arguments -> ``(long_output, global_output)``.

Relative ids: the official layout (0 = the token itself, 1..D = key to the right, D+1..2D = key to the
left, 2D+1 = long token not in the global token's sentence, 2D+2 = in it, 2D+3 = across contexts) is
:data:`etc_fairseq.structure.labels.OFFICIAL_STRUCTURE_LABELS`'s order, so the converted model's relative
tables are the official ones row for row and official ids index them unchanged. Our structure builders
also use two labels official ETC lacks (``parent``, ``child``); when the official table has no rows left
for them (``relative_vocab_size < 2D+1+5``) the table is extended with zero rows (reported in
:attr:`OfficialConversion.new_relative_rows`), which official inputs never index.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig
from etc_fairseq.errors import InputFormatError
from etc_fairseq.official.checkpoint import CONFIG_FILE, OfficialCheckpoint, read_official_checkpoint
from etc_fairseq.official.tf_checkpoint import TFCheckpointError
from etc_fairseq.official.variables import OFFICIAL_CONFIG_DEFAULTS, OFFICIAL_SCOPE, with_official_defaults
from etc_fairseq.structure.labels import OFFICIAL_STRUCTURE_LABELS

logger = logging.getLogger(__name__)

__all__ = [
    "OFFICIAL_FIELD_HANDLING",
    "OFFICIAL_FIXED_BLOCK_TOKEN_ID",
    "OFFICIAL_GLOBAL_TOKEN_IDS",
    "OFFICIAL_INPUT_NAMES",
    "OfficialConversion",
    "convert_official_checkpoint",
    "forward_official_inputs",
    "official_to_encoder_config",
    "official_weight_map",
]

#: The global token id official ETC was pretrained with for every sentence (and fixed-block) global token.
OFFICIAL_FIXED_BLOCK_TOKEN_ID = 1

#: vocabulary kind -> pretrained role (see :data:`etc_fairseq.structure.global_tokens.PRETRAINED_ROLES`) ->
#: official token id of that global token. Sentence (1) and CPC mask (2) tokens were used in pretraining;
#: the others are the official fine-tuning converters' defaults (HotpotQA / WikiHop / NQ), e.g. CLS is
#: BERT's ``[CLS]`` (101) but ``<unused_39>`` (40) in the SentencePiece vocabulary, whose ``<s>`` (2) is
#: the CPC mask token.
OFFICIAL_GLOBAL_TOKEN_IDS: Dict[str, Dict[str, int]] = {
    "wordpiece": {"cls": 101, "sentence": OFFICIAL_FIXED_BLOCK_TOKEN_ID, "cpc_mask": 2, "question": 3,
                  "candidate": 4, "paragraph": 5},
    "sentencepiece": {"cls": 40, "sentence": OFFICIAL_FIXED_BLOCK_TOKEN_ID, "cpc_mask": 2, "question": 41,
                      "candidate": 42, "paragraph": 43},
}

#: How each official ``EtcConfig`` field is carried over (documentation and the test that none is forgotten).
OFFICIAL_FIELD_HANDLING: Dict[str, str] = {
    "vocab_size": "rows of the token table (the encoder's vocab_size)",
    "segment_vocab_size": "segment_vocab_size",
    "embedding_size": "embedding_size (null or = hidden_size: 0, no projection)",
    "hidden_size": "encoder_embed_dim",
    "num_hidden_layers": "encoder_layers",
    "num_attention_heads": "encoder_attention_heads",
    "local_radius": "local_radius",
    "att_size_per_head": "must be null or hidden_size / num_attention_heads (refused otherwise)",
    "relative_pos_max_distance": "relative_pos_max_distance",
    "relative_vocab_size": "relative_vocab_size (extended with zero rows if our 5 structure labels do not fit; "
                           "null: zero tables, no relative term)",
    "max_absolute_position_embeddings": "index_position_embeddings (and max_positions / max_global_positions)",
    "intermediate_size": "encoder_ffn_embed_dim",
    "hidden_act": "activation_fn: gelu -> gelu_accurate (tanh approximation), relu, tanh, linear",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "initializer_range": "initialisation only; converted weights do not use it",
    "share_feed_forward_params": "separate_ffn = not share_feed_forward_params",
    "share_kv_projections": "shared_kv_per_side",
    "share_qkv_projections": "shared_q and shared_kv",
    "share_att_output_projection": "shared_out_proj (the attention LayerNorm stays per side)",
    "use_pre_activation_order": "pre_layer_norm",
    "use_hard_g2l_mask": "hard_g2l",
    "use_hard_l2g_mask": "hard_l2g",
    "grad_checkpointing_period": "checkpoint_activations = period > 0 (every layer)",
}

_ACTIVATIONS = {"gelu": "gelu_accurate", "relu": "relu", "tanh": "tanh", "linear": "linear"}

#: The keyword arguments of the official ``EtcModel.call`` that :func:`forward_official_inputs` accepts.
OFFICIAL_INPUT_NAMES = (
    "token_ids", "global_token_ids", "segment_ids", "global_segment_ids", "position_ids", "global_position_ids",
    "l2l_att_mask", "g2g_att_mask", "l2g_att_mask", "g2l_att_mask",
    "l2l_relative_att_ids", "g2g_relative_att_ids", "l2g_relative_att_ids", "g2l_relative_att_ids",
    "long_embedding_adder", "global_embedding_adder",
)


class OfficialConversionError(TFCheckpointError):
    """An official config or checkpoint that cannot become an ETC encoder (one line naming file and field)."""


def official_to_encoder_config(config: Mapping[str, Any], source: str = CONFIG_FILE) -> EtcEncoderConfig:
    """An official ``etc_config.json`` dict -> the :class:`EtcEncoderConfig` computing the same function.

    Args:
        config: the official fields; missing ones take the official defaults (``vocab_size`` is required).
        source: the file name used in error messages.
    Raises:
        OfficialConversionError: a field that is not an official one, or a value this encoder cannot express.
    """
    unknown = sorted(set(config) - set(OFFICIAL_CONFIG_DEFAULTS) - {"vocab_size"})
    if unknown:
        raise OfficialConversionError(
            f"{source}: field {unknown[0]!r} is not an official EtcConfig field (known: "
            f"{sorted(OFFICIAL_FIELD_HANDLING)})"
        )
    try:
        c = with_official_defaults(config)
    except ValueError as e:
        raise OfficialConversionError(f"{source}: {e}") from None
    h, n = c["hidden_size"], c["num_attention_heads"]
    if not isinstance(h, int) or not isinstance(n, int) or n < 1 or h % n:
        raise OfficialConversionError(f"{source}: hidden_size {h!r} must be a multiple of num_attention_heads {n!r}")
    if c["att_size_per_head"] not in (None, h // n):
        raise OfficialConversionError(
            f"{source}: field 'att_size_per_head' = {c['att_size_per_head']!r}: this encoder needs "
            f"hidden_size / num_attention_heads = {h // n} (or null)"
        )
    if c["hidden_act"] not in _ACTIVATIONS:
        raise OfficialConversionError(
            f"{source}: field 'hidden_act' = {c['hidden_act']!r}: expected one of {sorted(_ACTIVATIONS)}"
        )
    d = c["relative_pos_max_distance"]
    needed = 2 * d + 1 + len(OFFICIAL_STRUCTURE_LABELS)
    rel_rows = c["relative_vocab_size"]
    if rel_rows is None and d != 0:
        raise OfficialConversionError(f"{source}: relative_pos_max_distance must be 0 when relative_vocab_size is null")
    e = c["embedding_size"]
    p = c["max_absolute_position_embeddings"]
    defaults = EtcEncoderConfig()
    try:
        return EtcEncoderConfig(
            encoder_layers=c["num_hidden_layers"],
            encoder_embed_dim=h,
            encoder_ffn_embed_dim=c["intermediate_size"],
            encoder_attention_heads=n,
            activation_fn=_ACTIVATIONS[c["hidden_act"]],
            dropout=float(c["hidden_dropout_prob"]),
            attention_dropout=float(c["attention_probs_dropout_prob"]),
            activation_dropout=0.0,
            max_positions=p or defaults.max_positions,
            max_global_positions=p or defaults.max_global_positions,
            local_radius=c["local_radius"],
            relative_pos_max_distance=d,
            relative_structure_labels=",".join(OFFICIAL_STRUCTURE_LABELS),
            relative_vocab_size=max(rel_rows or 0, needed),
            relative_bias=True,
            shared_q=bool(c["share_qkv_projections"]),
            shared_kv=bool(c["share_qkv_projections"]),
            shared_kv_per_side=bool(c["share_kv_projections"]) and not c["share_qkv_projections"],
            shared_out_proj=bool(c["share_att_output_projection"]),
            separate_attention_layer_norm=True,
            separate_ffn=not c["share_feed_forward_params"],
            shared_relative_embeddings=False,
            pre_layer_norm=bool(c["use_pre_activation_order"]),
            layer_norm_eps=1e-12,
            embedding_size=0 if e in (None, h) else e,
            segment_vocab_size=c["segment_vocab_size"],
            long_segment_id=1,
            global_segment_id=0,
            separate_embedding_layer_norm=True,
            no_global_type_embeddings=True,
            hard_g2l=bool(c["use_hard_g2l_mask"]),
            hard_l2g=bool(c["use_hard_l2g_mask"]),
            use_absolute_positions=False,
            index_position_embeddings=p,
            checkpoint_activations=bool(c["grad_checkpointing_period"]),
        )
    except ValueError as err:
        raise OfficialConversionError(f"{source}: {err}") from None


def official_weight_map(config: Mapping[str, Any]) -> Dict[str, Tuple[str, bool]]:
    """``{encoder parameter name: (official variable name, transpose)}`` for an official config.

    ``transpose`` is True for Dense kernels (official ``[in, out]``, ``nn.Linear.weight`` ``[out, in]``).
    Relative tables map onto the first ``relative_vocab_size`` rows of ours (see the module docstring).
    """
    c = with_official_defaults(config)
    s = OFFICIAL_SCOPE
    t = f"{s}/global_local_transformer_layers"
    out: Dict[str, Tuple[str, bool]] = {}

    def dense(ours: str, theirs: str) -> None:
        out[f"{ours}.weight"] = (f"{theirs}/kernel", True)
        out[f"{ours}.bias"] = (f"{theirs}/bias", False)

    def layer_norm(ours: str, theirs: str) -> None:
        out[f"{ours}.weight"] = (f"{theirs}/gamma", False)
        out[f"{ours}.bias"] = (f"{theirs}/beta", False)

    out["embed_tokens.weight"] = (f"{s}/token_emb_lookup/embedding_table", False)
    if c["embedding_size"] not in (None, c["hidden_size"]):
        dense("embed_tokens_proj", f"{s}/token_emb_lookup/projection")
    if c["segment_vocab_size"]:
        out["embed_segments.weight"] = (f"{s}/segment_emb_lookup/embedding_table", False)
    if c["max_absolute_position_embeddings"]:
        out["embed_long_index_positions.weight"] = ("position_emb_lookup_long/embedding_table", False)
        out["embed_global_index_positions.weight"] = ("position_emb_lookup_global/embedding_table", False)
    layer_norm("layernorm_embedding", f"{s}/long_emb_layer_norm")
    layer_norm("layernorm_embedding_global", f"{s}/global_emb_layer_norm")
    for i in range(c["num_hidden_layers"]):
        a = f"{t}/fused_att_layer_{i}/fused_global_local_att"
        ours = f"layers.{i}.self_attn"
        if c["share_qkv_projections"]:
            projections = {"q_proj.shared": "long_query", "k_proj.shared": "l2l_key", "v_proj.shared": "l2l_value"}
        else:
            projections = {"q_proj.long": "long_query", "q_proj.global": "global_query"}
            if c["share_kv_projections"]:
                for kind in ("key", "value"):
                    projections[f"{kind[0]}_proj.long"] = f"l2l_{kind}"
                    projections[f"{kind[0]}_proj.global"] = f"g2g_{kind}"
            else:
                for kind in ("key", "value"):
                    for piece in ("l2l", "l2g", "g2g", "g2l"):
                        projections[f"{kind[0]}_proj.{piece}"] = f"{piece}_{kind}"
        for mine, theirs in projections.items():
            dense(f"{ours}.{mine}", f"{a}/{theirs}_projection/linear")
        if c["share_att_output_projection"]:
            dense(f"{ours}.out_proj.shared", f"{a}/long_output_projection")
        else:
            dense(f"{ours}.out_proj.long", f"{a}/long_output_projection")
            dense(f"{ours}.out_proj.global", f"{a}/global_output_projection")
        if c["relative_vocab_size"] is not None:
            for side, scope in (("long", f"{a}/long_qkv_attention/qkv_relative_attention"),
                                ("global", f"{a}/global_qkv_attention")):
                out[f"{ours}.rel_emb.{side}"] = (f"{scope}/relative_emb_table", False)
                out[f"{ours}.rel_bias.{side}"] = (f"{scope}/relative_bias_table", False)
        layer_norm(f"layers.{i}.self_attn_layer_norm.long", f"{t}/fused_att_layer_{i}/layer_norm_0")
        layer_norm(f"layers.{i}.self_attn_layer_norm.global", f"{t}/fused_att_layer_{i}/layer_norm_1")
        blocks = {"shared": "feed_forward"} if c["share_feed_forward_params"] else {
            "long": "long_feed_forward", "global": "global_feed_forward"}
        for key, block in blocks.items():
            f = f"{t}/{block}_layer_{i}"
            dense(f"layers.{i}.ffn.{key}.fc1", f"{f}/dense_layers/layer_0")
            dense(f"layers.{i}.ffn.{key}.fc2", f"{f}/dense_layers/layer_1")
            layer_norm(f"layers.{i}.final_layer_norm.{key}", f"{f}/layer_norm")
    return out


@dataclass
class OfficialConversion:
    """What :func:`convert_official_checkpoint` built and how.

    encoder: the converted model (eval mode); official_config: every official field (defaults filled in);
    mapped: official variables copied (all of the model's); skipped: training-only variables left out
    (``global_step``, optimizer slots); new_relative_rows: zero rows appended to each relative table for
    labels official ETC lacks; vocab_file: the vocabulary found next to the checkpoint, if any; dropped:
    variables outside the model left out on request (``drop_unknown``).
    """

    encoder: EtcEncoder
    official_config: Dict[str, Any]
    mapped: int
    skipped: List[str] = field(default_factory=list)
    new_relative_rows: int = 0
    vocab_file: Optional[Path] = None
    dropped: List[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for logs and ``etc-lift``."""
        parts = [f"{self.mapped} official variables mapped"]
        if self.skipped:
            parts.append(f"{len(self.skipped)} training-only variables (step counter, optimizer slots) left out")
        if self.dropped:
            parts.append(f"{len(self.dropped)} variables outside the model left out (--drop-unknown): "
                         + ", ".join(self.dropped))
        if self.new_relative_rows:
            parts.append(f"relative tables extended by {self.new_relative_rows} zero rows for labels official "
                         "ETC lacks (parent, child)")
        return ", ".join(parts)


#: Vocabulary file names of the released checkpoints (BERT uncased WordPiece; RoBERTa SentencePiece).
OFFICIAL_VOCAB_FILES = ("vocab_bert_uncased_english.txt", "vocab_gpt_for_etc.model", "vocab.txt", "spm.model")


def find_official_vocab(directory: Union[str, Path]) -> Optional[Path]:
    """The vocabulary file of an official checkpoint directory (see :data:`OFFICIAL_VOCAB_FILES`), or None."""
    for name in OFFICIAL_VOCAB_FILES:
        path = Path(directory) / name
        if path.is_file():
            return path
    return None


def official_padding_idx(vocab_file: Optional[Path]) -> int:
    """The padding id: ``[PAD]``'s line in a WordPiece vocabulary (0 in BERT's), ``<pad>``'s id in a
    SentencePiece model, else 0 (official ETC pads with 0 whatever the vocabulary: its masks, not the id,
    keep padding out of attention)."""
    if vocab_file is not None and vocab_file.suffix == ".txt":
        with open(vocab_file, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.rstrip("\n") == "[PAD]":
                    return i
    if vocab_file is not None and vocab_file.suffix == ".model":
        pieces = sentencepiece_pieces(vocab_file)
        if "<pad>" in pieces:
            return pieces.index("<pad>")
    return 0


def sentencepiece_pieces(model_file: Union[str, Path], expected_size: Optional[int] = None) -> List[str]:
    """Every piece of a SentencePiece ``.model`` in id order (official ``vocab_gpt_for_etc.model``).

    Raises:
        OfficialConversionError: not a SentencePiece model, or ``expected_size`` pieces expected.
    """
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(model_file))
    except (RuntimeError, OSError) as e:
        raise OfficialConversionError(f"{model_file}: not a SentencePiece model ({e})") from None
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if expected_size is not None and len(pieces) != expected_size:
        raise OfficialConversionError(f"{model_file}: {len(pieces)} pieces but the config's vocab_size is {expected_size}")
    return pieces


def convert_official_checkpoint(directory: Union[str, Path], checkpoint: Optional[Union[str, Path]] = None,
                                config_overrides: Optional[Mapping[str, Any]] = None,
                                drop_unknown: bool = False) -> OfficialConversion:
    """Read an official ETC checkpoint directory and build the :class:`EtcEncoder` computing the same function.

    Args:
        directory: holds ``etc_config.json``, ``model.ckpt.*`` and (optionally) the vocabulary.
        checkpoint: another checkpoint prefix / ``.index`` file, if not the one in ``directory``.
        config_overrides: :class:`EtcEncoderConfig` fields to set after the mapping (e.g. dropout).
        drop_unknown: leave out variables outside the model's scope (named in ``dropped``; see :mod:`.checkpoint`).
    Raises:
        TFCheckpointError (or its subclass :class:`OfficialConversionError`): see :mod:`.checkpoint`;
        a config this encoder cannot express; a vocabulary file whose size differs from ``vocab_size``.
    """
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    official: OfficialCheckpoint = read_official_checkpoint(directory, checkpoint, drop_unknown=drop_unknown)
    raw = json.loads(config_path.read_text(encoding="utf-8"))
    cfg = official_to_encoder_config(raw, source=str(config_path))
    if config_overrides:
        values = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        bad = sorted(set(config_overrides) - set(values))
        if bad:
            raise OfficialConversionError(f"override {bad[0]!r} is not an EtcEncoderConfig field")
        values.update(config_overrides)
        try:
            cfg = EtcEncoderConfig(**values)
        except ValueError as e:
            raise OfficialConversionError(f"{config_path} with overrides: {e}") from None
    c = official.config
    vocab_file = find_official_vocab(directory)
    if vocab_file is not None and vocab_file.suffix == ".txt":
        with open(vocab_file, encoding="utf-8") as f:
            rows = sum(1 for _ in f)
        if rows != c["vocab_size"]:
            raise OfficialConversionError(
                f"{vocab_file}: {rows} entries but {config_path} field 'vocab_size' is {c['vocab_size']}"
            )
    elif vocab_file is not None:
        pieces = sentencepiece_pieces(vocab_file)
        if len(pieces) != c["vocab_size"]:
            raise OfficialConversionError(
                f"{vocab_file}: {len(pieces)} pieces but {config_path} field 'vocab_size' is {c['vocab_size']}"
            )
    encoder = EtcEncoder(cfg, c["vocab_size"], official_padding_idx(vocab_file), OFFICIAL_FIXED_BLOCK_TOKEN_ID)
    state = encoder.state_dict()
    mapping = official_weight_map(c)
    unmapped_ours = sorted(k for k in state if k not in mapping and not _is_relative_table(k))
    if unmapped_ours:
        raise OfficialConversionError(
            f"{config_path}: encoder parameter {unmapped_ours[0]!r} has no official variable (conversion bug)")
    used = {theirs for theirs, _ in mapping.values()}
    unused = sorted(set(official.weights) - used)
    if unused:
        raise OfficialConversionError(f"{config_path}: official variable {unused[0]!r} maps to no parameter")
    new_rows = 0
    with torch.no_grad():
        for ours, target in state.items():
            if ours not in mapping:  # relative tables of a model without official relative tables: zeros
                target.zero_()
                continue
            theirs, transpose = mapping[ours]
            value = torch.from_numpy(np.ascontiguousarray(official.weights[theirs]))
            if transpose:
                value = value.t()
            if _is_relative_table(ours) and value.shape[0] < target.shape[0]:
                new_rows = target.shape[0] - value.shape[0]
                target.zero_()
                target[: value.shape[0]].copy_(value)
                continue
            if tuple(value.shape) != tuple(target.shape):
                raise OfficialConversionError(
                    f"{config_path}: official variable {theirs!r} {list(value.shape)} does not fit parameter "
                    f"{ours!r} {list(target.shape)}")
            target.copy_(value)
    encoder.eval()
    conversion = OfficialConversion(encoder, c, len(used), official.skipped, new_rows, vocab_file, official.dropped)
    logger.info("%s: %s", directory, conversion.summary())
    return conversion


def _is_relative_table(name: str) -> bool:
    return ".rel_emb." in name or ".rel_bias." in name


# ----------------------------------------------------------------------------------------------------------
def official_token_rows(model) -> Optional[Sequence[int]]:
    """The model's token row of each official token id, as the model's files recorded it (``etc-lift`` orders
    the rows by its fairseq dictionary and writes the map into ``etc_tokenizer.json``): from a hub interface's
    tokenizer, an :class:`EtcEncoder` loaded from a directory, or a Hugging Face model's directory; None when
    ``model`` carries none (an encoder straight from :func:`convert_official_checkpoint`, whose rows are the
    official ids)."""
    from etc_fairseq.tokenization import read_source_token_rows

    rows = getattr(getattr(model, "tokenizer", None), "source_token_rows", None)
    if rows is None:
        rows = getattr(_find_encoder(model), "source_token_rows", None)
    directory = getattr(getattr(model, "config", None), "_name_or_path", None)  # a Hugging Face model
    if rows is None and isinstance(directory, str) and directory and Path(directory).is_dir():
        rows = read_source_token_rows(directory)
    return rows


def forward_official_inputs(model, features: Mapping[str, Any],
                            token_rows: Optional[Sequence[int]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Run a converted model on the inputs of the official ``EtcModel.call``; no structure is rebuilt.

    Args:
        model: an :class:`EtcEncoder` (e.g. :attr:`OfficialConversion.encoder`, or one loaded from a directory),
            a fairseq ``etc`` model / hub interface holding one, or a Hugging Face ``etc_fairseq.hf`` model.
        token_rows: the model's token row of each official id; default: the map the model's files recorded
            (:func:`official_token_rows`), else the ids are the rows.
        features: the official keyword names (numpy arrays, lists or tensors; ``B`` batch, ``L`` long length,
            ``G`` global length, ``r`` local radius, ``H`` hidden size):

            - ``token_ids`` int [B, L], ``global_token_ids`` int [B, G] (required);
            - ``segment_ids`` int [B, L] (default 1), ``global_segment_ids`` int [B, G] (default 0);
            - ``position_ids`` int [B, L], ``global_position_ids`` int [B, G] (default ``range(length)``;
              only with absolute position embeddings);
            - ``l2l_att_mask`` int 0/1 [B, L, 2r+1] (slot ``w`` = key ``i + w - r``), ``g2g_att_mask`` [B, G, G],
              ``l2g_att_mask`` [B, L, G], ``g2l_att_mask`` [B, G, L] (default all ones);
            - the four ``*_relative_att_ids`` int, same shapes (default: no relative term on that piece);
            - ``long_embedding_adder`` float [B, L, H], ``global_embedding_adder`` float [B, G, H].
    Returns:
        ``(long_output float [B, L, H], global_output float [B, G, H])``, as the official model returns them.
    Raises:
        InputFormatError: an unknown keyword, a missing required input, shapes that do not fit, an id outside
            the model's tables.
    """
    from etc_fairseq.attention import GlobalLocalStructure

    encoder = _find_encoder(model)
    unknown = sorted(set(features) - set(OFFICIAL_INPUT_NAMES))
    if unknown:
        raise InputFormatError(f"unknown official input {unknown[0]!r}; expected some of {list(OFFICIAL_INPUT_NAMES)}")
    for name in ("token_ids", "global_token_ids"):
        if features.get(name) is None:
            raise InputFormatError(f"official input {name!r} is required")
    device = next(encoder.parameters()).device

    def tensor(name: str, dtype: torch.dtype) -> Optional[torch.Tensor]:
        value = features.get(name)
        if value is None:
            return None
        return torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value).to(device, dtype)

    long_tokens = tensor("token_ids", torch.long)
    global_tokens = tensor("global_token_ids", torch.long)
    rows = official_token_rows(model) if token_rows is None else token_rows
    if rows is not None:
        table = torch.as_tensor(list(rows), dtype=torch.long, device=device)
        mapped = []
        for name, ids in (("token_ids", long_tokens), ("global_token_ids", global_tokens)):
            inside = (ids >= 0) & (ids < len(table))
            row = torch.where(inside, table[ids.clamp(0, len(table) - 1)], torch.full_like(ids, -1))
            if bool(row.lt(0).any()):
                raise InputFormatError(f"official input {name!r} holds id {int(ids[row.lt(0)][0])}, which has no "
                                       f"row in this model (official vocabulary of {len(table)} ids)")
            mapped.append(row)
        long_tokens, global_tokens = mapped
    (b, n_long), n_global = long_tokens.shape, global_tokens.shape[1]
    r = encoder.cfg.local_radius
    shapes = {"l2l": (b, n_long, 2 * r + 1), "g2g": (b, n_global, n_global),
              "l2g": (b, n_long, n_global), "g2l": (b, n_global, n_long)}
    masks, rels = {}, {}
    for piece, shape in shapes.items():
        mask = tensor(f"{piece}_att_mask", torch.long)
        masks[piece] = torch.ones(shape, dtype=torch.bool, device=device) if mask is None else mask.ne(0)
        rels[piece] = tensor(f"{piece}_relative_att_ids", torch.long)
        for what, t in ((f"{piece}_att_mask", masks[piece]), (f"{piece}_relative_att_ids", rels[piece])):
            if t is not None and tuple(t.shape) != shape:
                raise InputFormatError(f"official input {what!r} has shape {tuple(t.shape)}, expected {shape}")
    if (rels["g2g"] is None) != (rels["g2l"] is None):
        raise InputFormatError("g2g_relative_att_ids and g2l_relative_att_ids must be given together (as officially)")
    for piece, ids in rels.items():
        if ids is not None and ids.numel() and (ids.min() < 0 or ids.max() >= encoder.num_relative_rows):
            raise InputFormatError(f"official input '{piece}_relative_att_ids' has ids outside 0..{encoder.num_relative_rows - 1}")
    structure = GlobalLocalStructure(
        l2l_mask=masks["l2l"], l2g_mask=masks["l2g"], g2g_mask=masks["g2g"], g2l_mask=masks["g2l"],
        local_radius=r, l2l_rel=rels["l2l"], l2g_rel=rels["l2g"], g2g_rel=rels["g2g"], g2l_rel=rels["g2l"],
    )
    dtype = next(encoder.parameters()).dtype
    long_extra = tensor("long_embedding_adder", dtype)
    global_extra = tensor("global_embedding_adder", dtype)
    # Explicit absolute positions: the encoder adds rows 0..len-1 of its index tables; the difference to the
    # requested rows travels with the embedding adders, so the sum is the official table[position_ids].
    for name, table, length in (("position_ids", encoder.embed_long_index_positions, n_long),
                                ("global_position_ids", encoder.embed_global_index_positions, n_global)):
        ids = tensor(name, torch.long)
        if ids is None:
            continue
        if table is None:
            raise InputFormatError(f"official input {name!r} given but the model has no absolute position embeddings")
        if ids.min() < 0 or ids.max() >= table.num_embeddings:
            raise InputFormatError(f"official input {name!r} has ids outside 0..{table.num_embeddings - 1}")
        delta = table(ids) - table.weight[:length].unsqueeze(0)  # [B, length, H]
        if name == "position_ids":
            long_extra = delta if long_extra is None else long_extra + delta
        else:
            global_extra = delta if global_extra is None else global_extra + delta
    out = encoder(
        long_tokens, global_tokens, torch.zeros_like(global_tokens), structure,
        segment_ids=tensor("segment_ids", torch.long), global_segment_ids=tensor("global_segment_ids", torch.long),
        long_extra=long_extra, global_extra=global_extra,
    )
    return out.long_features, out.global_features


def _find_encoder(model) -> EtcEncoder:
    """The :class:`EtcEncoder` inside ``model`` (itself, a fairseq ``etc`` model, or a hub interface)."""
    seen = model
    for attr in (None, "model", "encoder", "sentence_encoder"):
        if attr is not None:
            seen = getattr(seen, attr, seen)
        if isinstance(seen, EtcEncoder):
            return seen
    raise TypeError(f"expected an EtcEncoder or a model holding one, got {type(model).__name__}")
