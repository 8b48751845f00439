"""Lifting fairseq RoBERTa checkpoints into ETC (paper section 3.6 and appendix D).

ETC's global-local attention contains BERT/RoBERTa attention as the special case of a local radius at
least as long as the input, so every RoBERTa weight has a place in an ETC model of the same size:

==========================================  ===================================================================
RoBERTa (``encoder.sentence_encoder.`` ...)  ETC (``encoder.sentence_encoder.`` ...)
==========================================  ===================================================================
``embed_tokens``                             ``embed_tokens`` (and the tied ``encoder.lm_head.weight``)
``layernorm_embedding``                      ``layernorm_embedding``
``embed_positions``                          ``embed_positions`` only with ``use_absolute_positions=True``
                                             (the rows both tables have; the rest keep ETC's own init);
                                             dropped otherwise (ETC uses relative position labels)
``layers.N.self_attn.{q,k,v,out}_proj``      every copy: ``layers.N.self_attn.q_proj.{long,global|shared}``,
                                             ``k_proj``/``v_proj.{l2l,l2g,g2g,g2l|shared}``,
                                             ``out_proj.{long,global|shared}``
``layers.N.self_attn_layer_norm``            ``layers.N.self_attn_layer_norm.{long,global|shared}``
``layers.N.fc1``, ``fc2``                    ``layers.N.ffn.{shared|long,global}.fc1``, ``fc2``
``layers.N.final_layer_norm``                ``layers.N.final_layer_norm.{shared|long,global}``
``encoder.lm_head.{dense,layer_norm,bias}``  ``encoder.lm_head.{dense,layer_norm,bias}``
==========================================  ===================================================================

Created fresh (the ETC model's own initialisation): relative-label embeddings (``rel_emb``), the global
token-type embeddings, the CPC head and any other ETC-only parameter, position rows RoBERTa does not have. Dropped: classification heads, fairseq's
``version`` buffers, position embeddings when ETC does not use absolute positions.

Both generations of fairseq RoBERTa key names are read: current ``encoder.*`` names and the 2019
released ones (``decoder.*``, ``emb_layer_norm``, packed ``self_attn.in_proj_weight``/``in_proj_bias``).

Checkpoints are read by :func:`etc_fairseq.checkpoint_io.load_checkpoint` (``torch.load(weights_only=True)``);
the only globals allowed beyond torch's defaults are ``argparse.Namespace`` (fairseq's argparse-era
configs) and, only for a checkpoint that needs them, numpy's scalar and dtype reconstructors. Anything
else is refused before it can run. Lifting reads tensors and a few typed size fields; it builds no model
from the RoBERTa checkpoint's config.

This module maps tensors; building the fresh ETC model the lifted tensors go into and writing the fairseq
checkpoint belong to the fairseq adapter (:mod:`etc_fairseq.models.lifting`: ``lift_checkpoint`` is the
file-to-file lift, ``etc-lift`` the command)::

    state, roberta_cfg = load_roberta_state("roberta/model.pt")
    dictionary = check_dictionary(state, masked_lm_dictionary("dict.txt"))
    fresh = build_etc_model(etc_cfg, dictionary, seed=1).state_dict()      # etc_fairseq.models.lifting
    etc_state, report = lift_roberta_into_etc(state, roberta_cfg, etc_cfg, fresh)
    print(report.summary())
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch

from etc_fairseq.checkpoint_io import load_checkpoint
from etc_fairseq.errors import InputFormatError

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]

#: Prefix of RoBERTa's (and ETC's) embeddings and layers in a fairseq state dict.
SENTENCE_ENCODER = "encoder.sentence_encoder."
LM_HEAD = "encoder.lm_head."

#: The config fields that must be equal on both sides for lifting (paper appendix D).
SIZE_FIELDS = ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "encoder_ffn_embed_dim")

#: Why a source's absolute position table is not lifted into a model without one (paper appendix D).
DISCARDED_POSITIONS = "absolute position embeddings (discarded: relative positions only, paper appendix D)"

#: How etc-lift names each size field on the command line (fairseq's flags).
SIZE_FLAGS = {name: "--" + name.replace("_", "-") for name in SIZE_FIELDS}


class LiftError(InputFormatError):
    """A source checkpoint, dictionary or ETC config that cannot be lifted. The message names the file
    and/or both conflicting values."""


# -------------------------------------------------------------------------------------------------------
# safe loading: etc_fairseq.checkpoint_io (argparse-era configs allowed; nothing is built from them)
# -------------------------------------------------------------------------------------------------------


# -------------------------------------------------------------------------------------------------------
# RoBERTa checkpoints: config and key names
# -------------------------------------------------------------------------------------------------------


@dataclass
class RobertaConfig:
    """What lifting needs from a RoBERTa checkpoint's config (fairseq field names).

    Attributes:
        encoder_layers, encoder_embed_dim, encoder_attention_heads, encoder_ffn_embed_dim: model size.
        activation_fn: the FFN (and LM head) activation.
        max_positions: the longest input (the position table has ``max_positions + 2`` rows), or None.
        encoder_normalize_before: pre-LayerNorm layers (ETC layers are post-LayerNorm: not liftable).
        no_scale_embedding: RoBERTa does not scale embeddings by sqrt(dim) (neither does ETC).
        arch: the ``--arch`` the checkpoint was trained with (for messages).
        source: where the config came from (``"args"`` or ``"cfg.model"``).
    """

    encoder_layers: int
    encoder_embed_dim: int
    encoder_attention_heads: int
    encoder_ffn_embed_dim: int
    activation_fn: str = "gelu"
    max_positions: Optional[int] = None
    encoder_normalize_before: bool = False
    no_scale_embedding: bool = True
    arch: str = "roberta"
    source: str = "args"


def _config_fields(obj: Any) -> Dict[str, Any]:
    """A Namespace, dict or omegaconf node -> plain dict of its top-level fields."""
    if obj is None:
        return {}
    if isinstance(obj, argparse.Namespace):
        return dict(vars(obj))
    if isinstance(obj, Mapping):
        return dict(obj)
    try:  # omegaconf DictConfig (only if a caller passes an already-created config)
        from omegaconf import OmegaConf

        if OmegaConf.is_config(obj):
            return dict(OmegaConf.to_container(obj, resolve=True))
    except ImportError:  # pragma: no cover
        pass
    return dict(getattr(obj, "__dict__", {}))


def roberta_config_from_checkpoint(checkpoint: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor],
                                   path: PathLike = "checkpoint") -> RobertaConfig:
    """Read the RoBERTa config from a fairseq checkpoint dict and check it against the tensors.

    Args:
        checkpoint: the unpickled checkpoint (``args`` Namespace of argparse-era fairseq, or ``cfg`` whose
            ``model`` section is a Namespace or dict).
        state_dict: the checkpoint's model state dict, already normalised to current key names
            (:func:`normalise_roberta_state`); sizes missing from the config are read from it.
        path: the file, for messages.
    Returns:
        a :class:`RobertaConfig`.
    Raises:
        LiftError: no config, or a config that disagrees with the tensors.
    """
    fields: Dict[str, Any] = {}
    source = None
    if checkpoint.get("args") is not None:
        fields, source = _config_fields(checkpoint["args"]), "args"
    elif checkpoint.get("cfg") is not None:
        cfg = _config_fields(checkpoint["cfg"])
        fields, source = _config_fields(cfg.get("model")), "cfg.model"
    if not fields:
        raise LiftError(f"{path}: the checkpoint has neither an 'args' nor a 'cfg.model' config")

    emb = state_dict.get(SENTENCE_ENCODER + "embed_tokens.weight")
    if emb is None:
        raise LiftError(
            f"{path}: no {SENTENCE_ENCODER}embed_tokens.weight: not a fairseq RoBERTa checkpoint "
            f"(first keys: {list(state_dict)[:5]})"
        )
    layer_ids = {
        int(m.group(1))
        for k in state_dict
        for m in [re.match(re.escape(SENTENCE_ENCODER) + r"layers\.(\d+)\.", k)]
        if m
    }
    fc1 = state_dict.get(SENTENCE_ENCODER + "layers.0.fc1.weight")
    from_tensors = {
        "encoder_layers": len(layer_ids),
        "encoder_embed_dim": emb.shape[1],
        "encoder_ffn_embed_dim": fc1.shape[0] if fc1 is not None else None,
    }
    sizes = {}
    for name in SIZE_FIELDS:
        value = fields.get(name)
        seen = from_tensors.get(name)
        if value is None:
            value = seen
        if value is None:
            raise LiftError(f"{path}: the checkpoint's {source} does not record {name}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise LiftError(f"{path}: the checkpoint's {source}.{name}={value!r:.80} is not an int")
        if seen is not None and int(value) != int(seen):
            raise LiftError(
                f"{path}: the checkpoint's {source} says {name}={value} but its tensors have {seen} "
                "(pruned or edited checkpoint?)"
            )
        sizes[name] = int(value)
    if layer_ids != set(range(sizes["encoder_layers"])):
        raise LiftError(f"{path}: layer indices {sorted(layer_ids)} are not 0..{sizes['encoder_layers'] - 1}")
    max_positions = fields.get("max_positions", fields.get("max_source_positions"))
    return RobertaConfig(
        **sizes,
        activation_fn=str(fields.get("activation_fn") or "gelu"),
        max_positions=int(max_positions) if max_positions is not None else None,
        encoder_normalize_before=bool(fields.get("encoder_normalize_before", False)),
        no_scale_embedding=bool(fields.get("no_scale_embedding", True)),
        arch=str(fields.get("arch") or fields.get("_name") or "roberta"),
        source=source,
    )


def normalise_roberta_state(state_dict: Mapping[str, torch.Tensor]) -> "OrderedDict[str, torch.Tensor]":
    """Rename a RoBERTa state dict to current fairseq names (what fairseq's own upgrade code does).

    - ``decoder.*`` (2019 releases) -> ``encoder.*``
    - ``.emb_layer_norm.`` -> ``.layernorm_embedding.``
    - ``self_attn.in_proj_weight`` / ``in_proj_bias`` (packed [q; k; v] along dim 0) ->
      ``self_attn.{q,k,v}_proj.weight`` / ``.bias``

    Args:
        state_dict: RoBERTa model state dict (either generation of names).
    Returns:
        a new ordered dict with current names (tensors are shared, not copied).
    Raises:
        LiftError: a packed projection whose first dimension is not divisible by 3, or a key that
            exists under both names.
    """
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()

    def put(key: str, value: torch.Tensor, original: str) -> None:
        if key in out:
            raise LiftError(f"both {original!r} and another key map to {key!r}: ambiguous checkpoint")
        out[key] = value

    for key, value in state_dict.items():
        new = key
        if new.startswith("decoder."):
            new = "encoder." + new[len("decoder."):]
        new = new.replace(".emb_layer_norm.", ".layernorm_embedding.")
        m = re.match(r"(.*\.self_attn\.)in_proj_(weight|bias)$", new)
        if m:
            prefix, kind = m.groups()
            if value.shape[0] % 3 != 0:
                raise LiftError(f"{key}: packed [q; k; v] projection of shape {tuple(value.shape)} is not 3 x dim")
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                put(f"{prefix}{name}.{kind}", part, key)
            continue
        put(new, value, key)
    return out


def load_roberta_state(path: PathLike) -> Tuple["OrderedDict[str, torch.Tensor]", RobertaConfig]:
    """Load a fairseq RoBERTa checkpoint safely and normalise it.

    Args:
        path: a fairseq RoBERTa checkpoint (``model.pt`` of a release, or ``checkpoint_*.pt`` of
            ``fairseq-train --arch roberta_*``).
    Returns:
        (state_dict with current fairseq names, :class:`RobertaConfig`).
    Raises:
        CheckpointLoadError: missing, unreadable or unsafe file (named).
        LiftError: missing config, or not a RoBERTa checkpoint.
    """
    checkpoint = load_checkpoint(path, legacy_configs=True)
    model = checkpoint.get("model")
    if not isinstance(model, Mapping) or not model:
        raise LiftError(f"{path}: no 'model' state dict in the checkpoint (keys: {sorted(checkpoint)})")
    state = normalise_roberta_state(model)
    return state, roberta_config_from_checkpoint(checkpoint, state, path)


# -------------------------------------------------------------------------------------------------------
# dictionaries
# -------------------------------------------------------------------------------------------------------


def masked_lm_dictionary(dict_path: PathLike):
    """The dictionary fairseq's ``masked_lm`` (and ``sentence_prediction``) task builds from ``dict.txt``:
    ``<s>``, ``<pad>``, ``</s>``, ``<unk>``, the file's entries (with fairseq-preprocess's
    ``madeupwordNNNN`` padding to a multiple of 8, if present), then ``<mask>``.

    Args:
        dict_path: a fairseq ``dict.txt``.
    Returns:
        a ``fairseq.data.Dictionary``.
    Raises:
        LiftError: the file is missing or malformed.
    """

    dict_path = Path(dict_path)
    if not dict_path.is_file():
        raise LiftError(f"{dict_path}: no such dictionary file")
    from etc_fairseq.data.indexed import load_dictionary

    try:
        d = load_dictionary(dict_path)
    except Exception as e:
        raise LiftError(f"{dict_path}: not a fairseq dict.txt ({e})") from None
    d.add_symbol("<mask>")
    d.lift_source = str(dict_path)  # for messages
    return d


def placeholder_dictionary(size: int):
    """A fairseq Dictionary of ``size`` symbols with fairseq's standard special-symbol ids (``<s>``=0,
    ``<pad>``=1, ``</s>``=2, ``<unk>``=3); the other symbols are placeholders. The ETC model only needs
    the size and the special ids."""
    from fairseq.data import Dictionary

    d = Dictionary()
    if size < len(d):
        raise LiftError(f"a vocabulary of {size} rows cannot hold fairseq's {len(d)} special symbols")
    for i in range(size - len(d)):
        d.add_symbol(f"<lifted_{i}>")
    return d


def check_dictionary(roberta_state: Mapping[str, torch.Tensor], dictionary=None):
    """Check that the vocabulary matches the RoBERTa embedding rows and return the dictionary to build the
    ETC model with.

    Args:
        roberta_state: normalised RoBERTa state dict.
        dictionary: the task's dictionary (see :func:`masked_lm_dictionary`), or None to use the
            checkpoint's own vocabulary size (embedding rows, which must then agree with the LM head).
    Returns:
        the dictionary (``dictionary`` itself, or a :func:`placeholder_dictionary`).
    Raises:
        LiftError: the sizes differ (the message says what was compared).
    """
    emb_key = SENTENCE_ENCODER + "embed_tokens.weight"
    rows = roberta_state[emb_key].shape[0]
    for key in (LM_HEAD + "bias", LM_HEAD + "weight"):
        if key in roberta_state and roberta_state[key].shape[0] != rows:
            raise LiftError(
                f"the RoBERTa checkpoint's {key} has {roberta_state[key].shape[0]} rows but {emb_key} has {rows}"
            )
    if dictionary is None:
        return placeholder_dictionary(rows)
    size = len(dictionary)
    if size != rows:
        source = getattr(dictionary, "lift_source", None)
        if source is not None:
            entries = size - dictionary.nspecial - 1
            what = (
                f"dictionary {source} gives {size} symbols the way fairseq's masked_lm task builds it "
                f"({dictionary.nspecial} special symbols <s>,<pad>,</s>,<unk> + {entries} dict.txt entries + <mask>)"
            )
        else:
            what = f"the dictionary has {size} symbols"
        hint = ""
        if 0 < rows - size < 8:
            hint = (
                "; fairseq-preprocess pads dict.txt to a multiple of 8 with madeupwordNNNN entries: use the "
                "dict.txt the checkpoint was trained with"
            )
        elif size - rows == 1:
            hint = "; the checkpoint's vocabulary seems to lack <mask>"
        raise LiftError(f"{what}, but the RoBERTa token embedding ({emb_key}) has {rows} rows{hint}")
    return dictionary


# -------------------------------------------------------------------------------------------------------
# compatibility and the lift itself
# -------------------------------------------------------------------------------------------------------


def check_compatible(roberta_cfg: RobertaConfig, etc_cfg, roberta_name: str = "RoBERTa checkpoint") -> None:
    """Refuse configurations whose weights would not fit or not compute the same function.

    Args:
        roberta_cfg: from :func:`load_roberta_state`.
        etc_cfg: an :class:`~etc_fairseq.models.etc.EtcConfig` (e.g. from ``config_for_arch``).
        roberta_name: how messages name the RoBERTa side (e.g. its path).
    Raises:
        LiftError: listing every mismatch with both values and the flag that fixes it.
    """
    arch = getattr(etc_cfg, "_name", None) or "etc"
    problems = []
    for name in SIZE_FIELDS:
        r, e = getattr(roberta_cfg, name), getattr(etc_cfg, name)
        if int(r) != int(e):
            problems.append(f"{name}: {roberta_name} has {r}, ETC config ({arch}) has {e} (pass {SIZE_FLAGS[name]} {r})")
    if str(roberta_cfg.activation_fn) != str(etc_cfg.activation_fn):
        problems.append(
            f"activation_fn: {roberta_name} has {roberta_cfg.activation_fn}, ETC config ({arch}) has "
            f"{etc_cfg.activation_fn} (pass --activation-fn {roberta_cfg.activation_fn})"
        )
    if roberta_cfg.encoder_normalize_before:
        problems.append(
            f"{roberta_name} has pre-LayerNorm layers (encoder_normalize_before=True); ETC layers are "
            "post-LayerNorm like BERT/RoBERTa, so the lifted weights would compute a different function"
        )
    if not roberta_cfg.no_scale_embedding:
        problems.append(
            f"{roberta_name} scales token embeddings by sqrt(dim) (no_scale_embedding=False); ETC, like "
            "RoBERTa, does not"
        )
    if problems:
        raise LiftError("cannot lift: " + "; ".join(problems))


#: RoBERTa module in a layer -> (report group, the ETC ModuleDict in the layer holding its copies).
_LAYER_MAP = {
    "self_attn.q_proj": ("attention q", "self_attn.q_proj"),
    "self_attn.k_proj": ("attention k", "self_attn.k_proj"),
    "self_attn.v_proj": ("attention v", "self_attn.v_proj"),
    "self_attn.out_proj": ("attention output", "self_attn.out_proj"),
    "self_attn_layer_norm": ("attention layer norm", "self_attn_layer_norm"),
    "fc1": ("feed-forward", "ffn"),
    "fc2": ("feed-forward", "ffn"),
    "final_layer_norm": ("feed-forward layer norm", "final_layer_norm"),
}


@dataclass
class LiftReport:
    """What :func:`lift_roberta_into_etc` did.

    Attributes:
        lifted: ETC key -> the RoBERTa key its values came from (one RoBERTa tensor fills several ETC
            copies when projections are separate).
        groups: group name -> number of ETC tensors lifted in it.
        fresh: ETC keys left at the ETC model's own initialisation.
        dropped: RoBERTa key -> why it was not used.
        notes: anything else worth saying (partial position tables, dtype casts).
        source: what the source model is, as the summary names it.
        lm_head_lifted: whether the LM head's transform came from the source (False: it starts fresh, so
            masked-token predictions mean nothing until the model is pretrained further).
    """

    lifted: Dict[str, str] = field(default_factory=dict)
    groups: Dict[str, int] = field(default_factory=dict)
    fresh: List[str] = field(default_factory=list)
    dropped: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    source: str = "RoBERTa"
    lm_head_lifted: bool = True

    def summary(self) -> str:
        """A human-readable multi-line summary (what ``etc-lift`` prints)."""
        sources = len(set(self.lifted.values()))
        lines = [f"lifted {len(self.lifted)} ETC tensors from {sources} {self.source} tensors:"]
        lines += [f"  {name:<30} {count}" for name, count in self.groups.items()]
        fresh_groups = Counter(_fresh_group(k) for k in self.fresh)
        lines.append(f"created fresh (ETC's own initialisation): {len(self.fresh)} tensors")
        lines += [f"  {name:<30} {count}" for name, count in sorted(fresh_groups.items())]
        dropped_reasons = Counter(self.dropped.values())
        lines.append(f"dropped from the {self.source} model: {len(self.dropped)} tensors")
        lines += [f"  {count:>4} x {reason}" for reason, count in dropped_reasons.items()]
        heads = sorted({k.split(".")[1] for k in self.dropped if k.startswith("classification_heads.")})
        if heads:
            lines.append(f"  (classification heads not lifted: {', '.join(heads)})")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _fresh_group(key: str) -> str:
    if ".rel_emb." in key:
        return "relative-label embeddings"
    if "embed_global_types" in key:
        return "global token-type embeddings"
    if key.startswith("cpc_head."):
        return "CPC head (pretraining)"
    if "embed_positions" in key:
        return "position embeddings"
    if key.startswith("classification_heads."):
        return "classification heads"
    if key.endswith("version"):
        return "format version buffer"
    return "other"


def _drop_reason(key: str, use_positions: bool) -> Optional[str]:
    """Why a RoBERTa key that lifting does not use may be dropped (None: unknown key)."""
    if key.startswith("classification_heads.") or key.startswith("encoder.classification_heads."):
        return "RoBERTa classification head (task-specific; not lifted)"
    if key.endswith(".version") or key.endswith("._float_tensor"):
        return "fairseq bookkeeping buffer"
    if key == SENTENCE_ENCODER + "embed_positions.weight" and not use_positions:
        return DISCARDED_POSITIONS
    return None


def check_weight(t: torch.Tensor, name: str, source: PathLike) -> torch.Tensor:
    """``t`` if it is a floating-point tensor of finite values, else one line naming the tensor and what it holds
    (an integer or boolean weight would otherwise be cast to float without a word)."""
    if not t.is_floating_point():
        raise LiftError(f"{source}: tensor {name!r} is {str(t.dtype).replace('torch.', '')}; a weight is floating point")
    if not bool(torch.isfinite(t).all()):
        raise LiftError(f"{source}: tensor {name!r} holds NaN or infinite values")
    return t


def _copy(value: torch.Tensor, like: torch.Tensor, etc_key: str, roberta_key: str) -> torch.Tensor:
    if tuple(value.shape) != tuple(like.shape):
        raise LiftError(
            f"shape mismatch: RoBERTa {roberta_key} is {tuple(value.shape)} but ETC {etc_key} is {tuple(like.shape)}"
        )
    return value.detach().to(dtype=like.dtype).clone().contiguous()


def lift_roberta_into_etc(
    roberta_state: Mapping[str, torch.Tensor],
    roberta_cfg: RobertaConfig,
    etc_cfg,
    fresh_state: Mapping[str, torch.Tensor],
    *,
    drop_unknown: bool = False,
    roberta_name: str = "RoBERTa checkpoint",
    allow_missing_lm_head: bool = False,
) -> Tuple["OrderedDict[str, torch.Tensor]", LiftReport]:
    """Lift RoBERTa weights into a complete ETC state dict.

    Args:
        roberta_state: RoBERTa state dict with current names (:func:`load_roberta_state`).
        roberta_cfg: its :class:`RobertaConfig`.
        etc_cfg: the target model's config (fairseq's ``EtcConfig`` or anything with its fields).
        fresh_state: the complete state dict of the target ETC model, freshly initialised (fairseq names:
            ``encoder.sentence_encoder.*``, ``encoder.lm_head.*``, ...); what the source does not give keeps these
            values (:func:`etc_fairseq.models.lifting.build_etc_model` builds it, with the dictionary
            :func:`check_dictionary` accepts).
        drop_unknown: drop RoBERTa keys etc-lift does not recognise instead of refusing.
        roberta_name: how messages name the RoBERTa side.
        allow_missing_lm_head: a source without an LM head (e.g. a Hugging Face ``BertModel``) keeps
            ETC's own LM-head initialisation (noted in the report) instead of being refused.
    Returns:
        (state dict holding EVERY parameter and buffer of the ETC model, float tensors in the ETC model's
        dtype; the tied ``encoder.lm_head.weight`` is the same tensor as the token embedding),
        and a :class:`LiftReport`.
    Raises:
        LiftError: size/activation/normalisation mismatch, dictionary mismatch, unknown RoBERTa keys
            (unless ``drop_unknown``), missing RoBERTa tensors, untied LM-head weights, shape mismatches.
    """
    check_compatible(roberta_cfg, etc_cfg, roberta_name)
    etc_state: "OrderedDict[str, torch.Tensor]" = OrderedDict((k, v.detach().clone()) for k, v in fresh_state.items())
    report = LiftReport()
    used = set()
    groups: Counter = Counter()

    def lift(etc_key: str, roberta_key: str, group: str) -> torch.Tensor:
        if roberta_key not in roberta_state:
            raise LiftError(f"{roberta_name} lacks {roberta_key} (needed for ETC {etc_key})")
        if etc_key not in etc_state:
            raise AssertionError(f"ETC model has no {etc_key}: lifting map out of date")
        value = check_weight(roberta_state[roberta_key], roberta_key, roberta_name)
        etc_state[etc_key] = _copy(value, fresh_state[etc_key], etc_key, roberta_key)
        report.lifted[etc_key] = roberta_key
        used.add(roberta_key)
        groups[group] += 1
        return etc_state[etc_key]

    # embeddings
    emb = lift(SENTENCE_ENCODER + "embed_tokens.weight", SENTENCE_ENCODER + "embed_tokens.weight", "token embeddings")
    for p in ("weight", "bias"):
        lift(SENTENCE_ENCODER + f"layernorm_embedding.{p}", SENTENCE_ENCODER + f"layernorm_embedding.{p}",
             "embedding layer norm")
    if etc_cfg.use_absolute_positions:
        _lift_positions(roberta_state, etc_state, fresh_state, report, used, groups, roberta_name)

    # layers: every ETC copy of every RoBERTa module (the copies are the keys of each switchable
    # ModuleDict: sides, pieces, or the single "shared"; the name after the module's path in the state dict)
    for i in range(etc_cfg.encoder_layers):
        r_prefix = f"{SENTENCE_ENCODER}layers.{i}."
        for r_name, (group, etc_path) in _LAYER_MAP.items():
            container = f"{r_prefix}{etc_path}."
            for copy_key in dict.fromkeys(k[len(container):].split(".")[0] for k in fresh_state
                                          if k.startswith(container)):
                if etc_path == "ffn":
                    target = f"{r_prefix}ffn.{copy_key}.{r_name}"
                else:
                    target = f"{r_prefix}{etc_path}.{copy_key}"
                for p in ("weight", "bias"):
                    lift(f"{target}.{p}", f"{r_prefix}{r_name}.{p}", group)

    # LM head (its weight is tied to the token embeddings)
    has_lm_head = LM_HEAD + "dense.weight" in roberta_state
    if not has_lm_head and allow_missing_lm_head:
        report.lm_head_lifted = False
        report.notes.append(f"{roberta_name} has no LM head: ETC's LM head (dense, layer norm, bias) starts "
                            "from its own initialisation (its weight is tied to the lifted token embeddings)")
    else:
        for sub in ("dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias"):
            lift(LM_HEAD + sub, LM_HEAD + sub, "LM head")
    head_w = roberta_state.get(LM_HEAD + "weight")
    if head_w is not None:
        if head_w.shape != roberta_state[SENTENCE_ENCODER + "embed_tokens.weight"].shape or not torch.equal(
            head_w, roberta_state[SENTENCE_ENCODER + "embed_tokens.weight"]
        ):
            raise LiftError(
                f"{roberta_name}: {LM_HEAD}weight differs from the token embeddings (untie_weights_roberta); "
                "ETC's LM head is tied to its token embeddings"
            )
        used.add(LM_HEAD + "weight")
    etc_state[LM_HEAD + "weight"] = emb  # same tensor: tied, as in the model
    report.lifted[LM_HEAD + "weight"] = SENTENCE_ENCODER + "embed_tokens.weight"
    groups["LM head"] += 1

    # what was not used
    unknown = []
    for key in roberta_state:
        if key in used:
            continue
        reason = _drop_reason(key, etc_cfg.use_absolute_positions)
        if reason is None:
            if not drop_unknown:
                unknown.append(key)
                continue
            reason = "not recognised by etc-lift (--drop-unknown)"
        report.dropped[key] = reason
    if unknown:
        raise LiftError(
            f"{roberta_name} holds {len(unknown)} tensors etc-lift does not know how to lift: "
            f"{unknown[:10]}{' ...' if len(unknown) > 10 else ''}; pass --drop-unknown (drop_unknown=True) "
            "to lift the rest anyway"
        )
    report.fresh = [k for k in etc_state if k not in report.lifted]
    report.groups = dict(groups)
    dtypes = {str(roberta_state[k].dtype) for k in used}
    target_dtypes = {str(v.dtype) for v in fresh_state.values() if v.is_floating_point()}
    if dtypes - target_dtypes:
        report.notes.append(f"cast RoBERTa tensors from {sorted(dtypes)} to {sorted(target_dtypes)}")
    return etc_state, report


def _lift_positions(roberta_state, etc_state, fresh_state, report, used, groups, roberta_name) -> None:
    """Copy the rows both absolute-position tables have (same LearnedPositionalEmbedding layout: row =
    position + padding_idx + 1). ETC rows beyond RoBERTa's keep ETC's initialisation; RoBERTa rows beyond
    ETC's are dropped. Both cases are noted in the report."""
    key = SENTENCE_ENCODER + "embed_positions.weight"
    if key not in roberta_state:
        raise LiftError(
            f"the ETC config has use_absolute_positions=True but {roberta_name} has no learned position "
            f"embeddings ({key})"
        )
    src, like = roberta_state[key], fresh_state[key]
    if src.shape[1] != like.shape[1]:
        raise LiftError(f"{key}: RoBERTa width {src.shape[1]} vs ETC {like.shape[1]}")
    n = min(src.shape[0], like.shape[0])
    out = like.detach().clone()
    out[:n] = src[:n].to(like.dtype)
    etc_state[key] = out
    report.lifted[key] = key
    used.add(key)
    groups["position embeddings"] += 1
    if like.shape[0] > src.shape[0]:
        report.notes.append(
            f"position embeddings: ETC's table has {like.shape[0]} rows (max_positions "
            f"{like.shape[0] - 2}), RoBERTa's {src.shape[0]}: rows {n}..{like.shape[0] - 1} (positions beyond "
            f"{n - 2}) keep ETC's own initialisation"
        )
    elif like.shape[0] < src.shape[0]:
        report.notes.append(
            f"position embeddings: ETC's table has {like.shape[0]} rows, RoBERTa's {src.shape[0]}: RoBERTa "
            f"rows {n}..{src.shape[0] - 1} were dropped"
        )


__all__ = [
    "LiftError",
    "LiftReport",
    "RobertaConfig",
    "check_compatible",
    "check_dictionary",
    "lift_roberta_into_etc",
    "load_roberta_state",
    "masked_lm_dictionary",
    "normalise_roberta_state",
    "placeholder_dictionary",
    "roberta_config_from_checkpoint",
]
