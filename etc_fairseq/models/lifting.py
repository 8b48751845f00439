"""Lifting into the fairseq ``etc`` model (``etc-lift``'s intake): recognise a source, build the fresh ETC model
its tensors go into (:func:`build_etc_model`), lift or convert them (:mod:`etc_fairseq.lift`,
:mod:`etc_fairseq.official.convert`), and write the fairseq checkpoint with its vocabulary and tokenizer files.

Sources (:func:`detect_source`):

- ``official-etc``: a directory with ``etc_config.json`` (Google's released ETC, TensorFlow checkpoint),
  converted weight for weight by :mod:`etc_fairseq.official.convert`;
- ``huggingface-bert`` / ``huggingface-roberta``: a directory with a Hugging Face ``config.json``
  (:mod:`etc_fairseq.lift.huggingface`);
- ``fairseq-roberta``: a checkpoint file (:mod:`etc_fairseq.lift.fairseq_roberta`); the only source without a config of its
  own, so the only one that needs ``--arch``;
- ``fairseq-etc`` (a fairseq ``etc`` checkpoint, for ``--format hf``) and ``huggingface-etc`` (a Hugging Face
  ETC directory, back to fairseq): :mod:`etc_fairseq.hf.convert`.

Output, all computed in memory before anything is written (a failure writes nothing):

- the checkpoint (``--out``), a plain fairseq checkpoint whose ``cfg.model`` holds the architecture and
  every ETC field, so ``EtcModel.from_pretrained`` and ``fairseq-train --finetune-from-model`` (without
  model flags: :mod:`etc_fairseq.models.architectures`) build the same model;
- next to it ``dict.txt`` (the fairseq dictionary the token rows are ordered by; sources with their own
  vocabulary), the source's tokenizer files and ``etc_tokenizer.json`` (which tokenizer, which files,
  which vocabulary string each special global token was pretrained with, and ``split_punctuation`` when
  text is pre-split like BERT's BasicTokenizer first, as official ``etc_large_split_punctuation`` expects;
  read by :mod:`etc_fairseq.tokenization`);
- optionally (``encoder_dir``) the core's ``model.safetensors`` + ``config.json``
  (:func:`etc_fairseq.encoder.save_pretrained`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch

from etc_fairseq.lift.fairseq_roberta import (
    SENTENCE_ENCODER,
    LiftError,
    LiftReport,
    check_dictionary,
    lift_roberta_into_etc,
    load_roberta_state,
    masked_lm_dictionary,
)
from etc_fairseq.encoder.io import CONFIG_NAME
from etc_fairseq.hub import LM_HEAD_LIFTED
from etc_fairseq.lift.huggingface import fairseq_dictionary, write_fairseq_dict
from etc_fairseq.prepare.atomic import atomic_directory
from etc_fairseq.tokenization import SOURCE_TOKEN_ROWS

from .architectures import config_for_arch
from .etc import EtcConfig, EtcModel

PathLike = Union[str, os.PathLike]

SOURCE_KINDS = ("official-etc", "huggingface-bert", "huggingface-roberta", "fairseq-roberta", "fairseq-etc",
                "huggingface-etc")
#: sources that are ETC models already: converted between the two formats by :mod:`etc_fairseq.hf.convert`
ETC_KINDS = ("fairseq-etc", "huggingface-etc")
TOKENIZER_DESCRIPTION = "etc_tokenizer.json"
#: The architecture whose defaults fill the fields a source's own config does not determine.
DEFAULT_ARCH = "etc_base"


def detect_source(path: PathLike) -> Tuple[str, str]:
    """(kind, one-line description) of an ``etc-lift`` source; :data:`SOURCE_KINDS` lists the kinds.

    Raises:
        LiftError: a path that is none of them (the message says what each kind holds).
    """
    from etc_fairseq.official.checkpoint import CONFIG_FILE

    from etc_fairseq.lift.huggingface import HF_CONFIG, HF_WEIGHTS, is_huggingface_dir

    p = Path(path)
    if p.is_dir():
        if (p / CONFIG_FILE).is_file():
            return "official-etc", f"{p} is an official ETC TensorFlow checkpoint directory ({CONFIG_FILE})"
        if is_huggingface_dir(p):
            kind = json.loads((p / HF_CONFIG).read_text(encoding="utf-8"))["model_type"]
            return f"huggingface-{kind}", f"{p} is a Hugging Face {kind} directory ({HF_CONFIG})"
        if list(p.glob("*.ckpt.index")) or (p / "checkpoint").is_file():
            raise LiftError(f"{p / CONFIG_FILE}: missing (a TensorFlow checkpoint directory without the official "
                            "ETC config next to it)")
        raise LiftError(
            f"{p}: not a source etc-lift reads: expected {CONFIG_FILE} (official ETC), {HF_CONFIG} (Hugging Face "
            "BERT/RoBERTa) or a fairseq RoBERTa checkpoint file"
        )
    if p.is_file():
        if p.suffix == ".safetensors" or p.name in HF_WEIGHTS or is_huggingface_dir(p.parent):
            raise LiftError(
                f"{p}: a Hugging Face weights file; pass its directory ({p.parent}), where etc-lift reads "
                f"{HF_CONFIG} and the tokenizer files beside it"
            )
        if is_etc_checkpoint(p):
            return "fairseq-etc", f"{p} is a fairseq ETC checkpoint"
        return "fairseq-roberta", f"{p} is a fairseq checkpoint file (read as fairseq RoBERTa)"
    raise LiftError(f"{p}: no such file or directory")


def is_etc_checkpoint(path: PathLike) -> bool:
    """A checkpoint file whose config names an ETC model (``cfg.model._name`` ``etc`` or ``etc_*``): trained
    or written by etc-lift, the source ``etc-lift --format hf`` exports."""
    from etc_fairseq.checkpoint_io import CheckpointLoadError, load_checkpoint, plain_config

    try:
        cfg = plain_config(load_checkpoint(path, mmap=True).get("cfg"))
    except (CheckpointLoadError, OSError, RuntimeError, ValueError):
        return False
    model = plain_config(cfg.get("model")) if isinstance(cfg, dict) else None
    name = model.get("_name") if isinstance(model, dict) else None
    return isinstance(name, str) and (name == "etc" or name.startswith("etc_"))


@dataclass
class LiftedModel:
    """A converted model ready to be written: fairseq state, config, dictionary symbols and what to copy."""

    kind: str
    state: Dict[str, torch.Tensor]
    etc_cfg: Any
    report_lines: List[str]
    symbols: Optional[List[str]] = None  # fairseq dictionary in id order (None: the source's dict.txt)
    dict_file: Optional[Path] = None  # a dict.txt to copy as is (fairseq RoBERTa --dict)
    tokenizer_files: List[Path] = field(default_factory=list)
    tokenizer: Dict[str, Any] = field(default_factory=dict)  # etc_tokenizer.json content
    provenance: Dict[str, Any] = field(default_factory=dict)


def _config(arch: Optional[str], source_fields: Dict[str, Any], overrides: Dict[str, Any], source: str):
    """The ETC config: ``arch``'s fields, then the source's (``source`` names its config file), then the model
    flags. A value that cannot work is refused naming where it came from: the flag or the source's file."""
    try:
        return config_for_arch(arch or DEFAULT_ARCH, **{**source_fields, **overrides})
    except ValueError as e:
        field_name = str(e).split("=", 1)[0].split(" ", 1)[0]
        where = (f"--{field_name.replace('_', '-')}" if field_name in overrides
                 else source if field_name in source_fields else f"--arch {arch or DEFAULT_ARCH}")
        raise LiftError(f"{where}: {e}") from None


def _official_vocabulary(directory: Path, conv):
    """(official vocabulary in id order, fairseq symbols, official id of each symbol, etc_tokenizer.json
    content) of a converted official checkpoint (WordPiece ``.txt`` or SentencePiece ``.model``)."""
    from etc_fairseq.official.convert import OFFICIAL_GLOBAL_TOKEN_IDS, OFFICIAL_VOCAB_FILES, sentencepiece_pieces

    from etc_fairseq.lift.huggingface import fairseq_order

    vocab_file = conv.vocab_file
    if vocab_file is None:
        raise LiftError(f"{directory}: no vocabulary file (expected one of {', '.join(OFFICIAL_VOCAB_FILES)}); "
                        "etc-lift writes the dict.txt the converted token rows follow from it")
    if vocab_file.suffix == ".txt":
        vocab = vocab_file.read_text(encoding="utf-8").split("\n")
        if vocab and vocab[-1] == "":
            vocab.pop()
        symbols, order = fairseq_order(vocab, "bert", str(vocab_file))
        tokenizer: Dict[str, Any] = {"type": "wordpiece", "vocab": vocab_file.name, "lowercase": True}
        roles = OFFICIAL_GLOBAL_TOKEN_IDS["wordpiece"]
    else:
        vocab = sentencepiece_pieces(vocab_file, conv.encoder.vocab_size)
        symbols, order = fairseq_order(vocab, "sentencepiece", str(vocab_file))
        tokenizer = {"type": "sentencepiece", "model": vocab_file.name}
        roles = OFFICIAL_GLOBAL_TOKEN_IDS["sentencepiece"]
    tokenizer["global_token_pieces"] = {role: vocab[i] for role, i in roles.items() if i < len(vocab)}
    # the model row of each official id: the lift orders the token rows by the fairseq dictionary, and features
    # made by the official code (etc_fairseq.official.forward_official_inputs) hold official ids
    rows = [-1] * len(vocab)
    for row, official_id in enumerate(order):
        if official_id >= 0:
            rows[official_id] = row
    tokenizer[SOURCE_TOKEN_ROWS] = rows
    return vocab, symbols, order, tokenizer


def lift_official(directory: Path, arch: Optional[str], overrides: Dict[str, Any], seed: Optional[int],
                  drop_unknown: bool = False) -> LiftedModel:
    """An official ETC directory -> ETC fairseq state (the converted encoder; LM and other heads fresh).
    ``drop_unknown``: variables outside the official model's scope are left out, each named in the report."""
    from etc_fairseq.encoder.io import config_to_dict
    from etc_fairseq.official.convert import OFFICIAL_FIXED_BLOCK_TOKEN_ID, convert_official_checkpoint

    conv = convert_official_checkpoint(directory, drop_unknown=drop_unknown)
    enc_fields = config_to_dict(conv.encoder.cfg)
    _, symbols, order, tokenizer = _official_vocabulary(directory, conv)
    # the global tokens the model makes itself are the sentence token official ETC was pretrained with
    enc_fields["fixed_block_token"] = symbols[order.index(OFFICIAL_FIXED_BLOCK_TOKEN_ID)]
    cfg = _config(arch, enc_fields, overrides, str(directory / "etc_config.json"))
    changed = sorted(k for k in overrides if k in enc_fields and overrides[k] != enc_fields[k])
    weights_fixed = {"encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                     "embedding_size", "segment_vocab_size", "relative_vocab_size", "index_position_embeddings",
                     "shared_q", "shared_kv", "shared_kv_per_side", "shared_out_proj", "separate_ffn",
                     "separate_attention_layer_norm", "shared_relative_embeddings", "relative_bias",
                     "separate_embedding_layer_norm", "no_global_type_embeddings", "use_absolute_positions",
                     "relative_structure_labels", "relative_pos_max_distance"}
    clash = [k for k in changed if k in weights_fixed]
    if clash:
        raise LiftError(f"{directory / 'etc_config.json'}: field {clash[0]} is fixed by the official weights "
                        f"({enc_fields[clash[0]]!r}); it cannot be overridden")
    perm = torch.tensor(order)
    dictionary = fairseq_dictionary(symbols)
    model = build_etc_model(cfg, dictionary, seed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    enc_state = conv.encoder.state_dict()
    for k, v in enc_state.items():
        key = SENTENCE_ENCODER + k
        rows = len(perm) if k == "embed_tokens.weight" else v.shape[0]  # fairseq order may add a <mask> row
        if key not in state or state[key].shape != (rows,) + tuple(v.shape[1:]):
            raise LiftError(f"{directory}: converted tensor {k} does not fit the ETC model built from the config")
        if k == "embed_tokens.weight":
            new_rows = perm < 0  # a <mask> the source vocabulary lacks keeps ETC's own initialisation
            state[key] = torch.where(new_rows[:, None], state[key], v[perm.clamp(min=0)])
        else:
            state[key] = v.clone()
    lm = "encoder.lm_head.weight"
    if lm in state:
        state[lm] = state[SENTENCE_ENCODER + "embed_tokens.weight"]
    fresh = sorted(k for k in state if not k.startswith(SENTENCE_ENCODER) and k != lm)
    lines = [conv.summary(), f"created fresh (ETC's own initialisation): {len(fresh)} tensors outside the encoder "
             "(LM head dense/LayerNorm/bias, pretraining heads; official ETC releases no heads)"]
    if (perm < 0).any():
        lines.append(f"{conv.vocab_file} has no <mask> piece: dictionary row {len(symbols) - 1} (<mask>) is new, "
                     "with ETC's own initialisation")
    return LiftedModel("official-etc", state, cfg, lines, symbols=symbols, tokenizer_files=[conv.vocab_file],
                       tokenizer=tokenizer, provenance={"official_checkpoint": str(directory),
                                                        "skipped_training_variables": len(conv.skipped),
                                                        "dropped_variables": list(conv.dropped),
                                                        LM_HEAD_LIFTED: False})


def lift_hf(directory: Path, arch: Optional[str], overrides: Dict[str, Any], seed: Optional[int],
            relative_positions_only: bool = False) -> LiftedModel:
    """A Hugging Face BERT/RoBERTa directory -> ETC fairseq state (see :mod:`.huggingface`);
    ``relative_positions_only``: the source's absolute position table is discarded."""
    from etc_fairseq.lift.huggingface import lift_huggingface_into_etc, read_huggingface

    src = read_huggingface(directory)
    cfg = _config(arch, src.etc_overrides(relative_positions_only), overrides, str(directory / "config.json"))
    fresh = build_etc_model(cfg, fairseq_dictionary(src.symbols), seed).state_dict()
    state, report = lift_huggingface_into_etc(src, cfg, fresh)
    # BERT and RoBERTa were pretrained without global tokens: none is named, so every special global token
    # is <s> (BERT's [CLS] row, a trained embedding; [unused0] never was), the lifting rule of
    # etc_fairseq.structure.global_tokens
    if src.kind == "bert":
        tokenizer = {"type": "wordpiece", "vocab": "vocab.txt",
                     "lowercase": bool(_tokenizer_option(directory, "do_lower_case", True)),
                     "global_token_pieces": {}}
    else:
        tokenizer = {"type": "byte_level_bpe", "vocab": "vocab.json", "merges": "merges.txt", "global_token_pieces": {}}
    return LiftedModel(f"huggingface-{src.kind}", state, cfg, [report.summary()], symbols=src.symbols,
                       tokenizer_files=src.tokenizer_files, tokenizer=tokenizer,
                       provenance={"huggingface_directory": str(directory), "weights": src.weights_file.name,
                                   LM_HEAD_LIFTED: report.lm_head_lifted})


def _tokenizer_option(directory: Path, name: str, default: Any) -> Any:
    path = directory / "tokenizer_config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8")).get(name, default)
        except json.JSONDecodeError:
            return default
    return default


def _gpt2_files(gpt2_files: Optional[Tuple[PathLike, PathLike]], dict_path: Optional[Path]) -> List[Path]:
    """GPT-2's ``encoder.json`` and ``vocab.bpe`` for a fairseq RoBERTa source, checked (both given, both
    readable as GPT-2 BPE files, and a ``--dict`` to map their ids through); [] when not given."""
    if gpt2_files is None:
        return []
    encoder_json, vocab_bpe = (Path(p) for p in gpt2_files)
    if dict_path is None:
        raise LiftError("--gpt2-encoder-json/--gpt2-vocab-bpe need --dict (RoBERTa's dict.txt, which maps "
                        "GPT-2 ids to the checkpoint's embedding rows)")
    for flag, p in (("--gpt2-encoder-json", encoder_json), ("--gpt2-vocab-bpe", vocab_bpe)):
        if not p.is_file():
            raise LiftError(f"{p}: no such file (given as {flag})")
    try:
        encoder = json.loads(encoder_json.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LiftError(f"{encoder_json}: not GPT-2's encoder.json (not valid JSON: {e})") from None
    if not isinstance(encoder, dict) or not all(isinstance(v, int) for v in encoder.values()):
        raise LiftError(f"{encoder_json}: not GPT-2's encoder.json (expected a JSON object of token -> id)")
    return [encoder_json, vocab_bpe]


def lift_fairseq(path: Path, arch: Optional[str], overrides: Dict[str, Any], seed: Optional[int],
                 dict_path: Optional[Path], drop_unknown: bool,
                 gpt2_files: Optional[Tuple[PathLike, PathLike]] = None) -> LiftedModel:
    """A fairseq RoBERTa checkpoint -> ETC fairseq state (``--arch`` required).

    The checkpoint names no tokenizer, so one is written only when given: ``gpt2_files`` (GPT-2's
    ``encoder.json``, ``vocab.bpe``; fairseq's released RoBERTa models) are copied next to the output with an
    ``etc_tokenizer.json`` of type ``gpt2_bpe`` (tokens as their GPT-2 ids, as RoBERTa's ``dict.txt``)."""
    if not arch:
        raise LiftError(f"{path}: a fairseq RoBERTa checkpoint carries no ETC config: pass --arch (e.g. etc_base)")
    files = _gpt2_files(gpt2_files, dict_path)
    cfg = _config(arch, {}, overrides, str(path))
    state, roberta_cfg = load_roberta_state(path)
    dictionary = check_dictionary(state, masked_lm_dictionary(dict_path) if dict_path is not None else None)
    fresh = build_etc_model(cfg, dictionary, seed).state_dict()
    etc_state, report = lift_roberta_into_etc(state, roberta_cfg, cfg, fresh, drop_unknown=drop_unknown,
                                              roberta_name=f"RoBERTa checkpoint {path}")
    lines = [report.summary()]
    if files:
        tokenizer = {"type": "gpt2_bpe", "encoder_json": files[0].name, "vocab_bpe": files[1].name,
                     "global_token_pieces": {}}
    else:
        tokenizer = {}
        lines.append("no tokenizer written (a fairseq checkpoint names none): for GPT-2 BPE, as fairseq's released "
                     "RoBERTa, pass --gpt2-encoder-json and --gpt2-vocab-bpe so that EtcModel.from_pretrained and "
                     "etc-prepare --from-model cut text")
    return LiftedModel("fairseq-roberta", etc_state, cfg, lines, dict_file=dict_path,
                       tokenizer_files=files, tokenizer=tokenizer,
                       provenance={"roberta_checkpoint": str(path), "roberta_arch": roberta_cfg.arch,
                                   "dict": str(dict_path) if dict_path is not None else None})


#: what starts fresh in a model lifted with relative positions only, and what it then needs (the summary's note)
RELATIVE_ONLY_NOTE = (
    "relative positions only (paper appendix D): the source's absolute position table is discarded and the "
    "lifted model reads inputs of any length; what it knows of word order must now come from the relative "
    "position labels, whose vectors start fresh, as do the global token-type embeddings and the CPC head "
    "(and the LM head's transform when the source has no MLM head): continue pretraining (MLM + CPC, "
    "--task etc_pretraining --criterion cpc_mlm) before fine-tuning")


def _refuse_absolute_position_flags(overrides: Dict[str, Any]) -> None:
    """``--relative-positions-only`` with a flag that asks for an absolute position table: one line."""
    asked = [flag for name, flag in (("use_absolute_positions", "--use-absolute-positions"),
                                     ("index_position_embeddings", "--index-position-embeddings"))
             if overrides.get(name)]
    if asked:
        raise LiftError(f"--relative-positions-only discards absolute positions, {asked[0]} asks for them: "
                        "give one or the other")


def _relative_positions_only(lifted: LiftedModel, source: Path) -> None:
    """Check that ``lifted`` has no absolute position table and add :data:`RELATIVE_ONLY_NOTE` to its summary."""
    from etc_fairseq.encoder.config import absolute_position_limit

    if absolute_position_limit(lifted.etc_cfg) is not None:
        raise LiftError(f"{source}: its weights include an absolute position table (use_absolute_positions="
                        f"{lifted.etc_cfg.use_absolute_positions}, index_position_embeddings="
                        f"{lifted.etc_cfg.index_position_embeddings}) that this kind of source cannot drop")
    lifted.report_lines.append(f"note: {RELATIVE_ONLY_NOTE}")
    lifted.provenance["relative_positions_only"] = True


def _g2g_bias(lifted: LiftedModel, logit: float, source: Path) -> None:
    """Start every g2g score of ``lifted`` shifted by ``logit`` (:func:`etc_fairseq.lift.global_side.set_g2g_bias`)
    and say so in its summary and provenance."""
    from etc_fairseq.encoder.model import label_vocab_from_config
    from etc_fairseq.lift.global_side import set_g2g_bias

    cfg = lifted.etc_cfg
    heads = cfg.encoder_attention_heads
    keys = set_g2g_bias(lifted.state, label_vocab_from_config(cfg).g2g_ids(), heads,
                        cfg.encoder_embed_dim // heads, logit, str(source))
    lifted.report_lines.append(
        f"note: g2g bias {logit:g}: every global -> global label of the global queries' relative bias table "
        f"(relative_bias, learnable; {len(keys)} layers) starts at {logit:g} in the softmax's units, so a global "
        "query starts by reading its long tokens rather than the other global tokens")
    lifted.provenance["g2g_bias"] = logit


def _global_token_pieces(lifted: LiftedModel, pieces: Dict[str, str], source: Path) -> None:
    """Record the pieces the summary global tokens start from in ``lifted``'s ``etc_tokenizer.json``
    (:mod:`etc_fairseq.lift.global_side`), checked against its vocabulary."""
    from etc_fairseq.lift.global_side import check_pieces
    from etc_fairseq.tokenization import BERT_SPECIALS_IN_FAIRSEQ

    if not lifted.tokenizer or lifted.symbols is None:
        raise LiftError(f"{source}: --global-token-piece needs the source's tokenizer and vocabulary, and this "
                        "source brings none (a fairseq RoBERTa checkpoint)")
    specials = BERT_SPECIALS_IN_FAIRSEQ if lifted.tokenizer.get("type") == "wordpiece" else {}
    check_pieces(pieces, lifted.symbols, specials, str(source))
    lifted.tokenizer["global_token_pieces"] = dict(lifted.tokenizer.get("global_token_pieces") or {}, **pieces)
    lifted.report_lines.append(
        "note: global tokens start from " + ", ".join(f"{r}: {p}" for r, p in sorted(pieces.items()))
        + " (etc_tokenizer.json global_token_pieces: etc-prepare --from-model and EtcModel.from_pretrained use them)")
    lifted.provenance["global_token_pieces"] = dict(sorted(pieces.items()))


#: the released official checkpoint whose text must be pre-split by BERT's BasicTokenizer (its directory
#: name says so; its etc_config.json is etc_large's)
SPLIT_PUNCTUATION_NAME = "split_punctuation"


def lift_source(source: PathLike, *, arch: Optional[str] = None, overrides: Optional[Dict[str, Any]] = None,
                seed: Optional[int] = 1, dict_path: Optional[PathLike] = None, drop_unknown: bool = False,
                split_punctuation: Optional[bool] = None,
                gpt2_files: Optional[Tuple[PathLike, PathLike]] = None,
                relative_positions_only: bool = False, g2g_bias: Optional[float] = None,
                global_token_pieces: Optional[Dict[str, str]] = None) -> Tuple[str, LiftedModel]:
    """Detect and convert ``source`` (nothing written). Returns (one-line description, :class:`LiftedModel`).

    ``relative_positions_only``: discard the source's absolute position embeddings (paper appendix D), so the
    lifted model takes inputs of any length (:data:`RELATIVE_ONLY_NOTE` says what then starts fresh); the
    flags asking for an absolute table are refused with it. A fairseq RoBERTa is lifted so by default; an
    official ETC checkpoint has no absolute table unless its config sets one (then it is refused).

    ``g2g_bias``: start every global -> global score shifted by this many logits (a learnable relative bias,
    ``relative_bias`` turned on); ``global_token_pieces``: role -> the source piece those global tokens start
    from (:mod:`etc_fairseq.lift.global_side`; refused for an official ETC checkpoint, which was pretrained
    with its own global tokens and biases).

    ``gpt2_files``: GPT-2's ``(encoder.json, vocab.bpe)``, the tokenizer of a fairseq RoBERTa source
    (refused for the other kinds, which bring their own).

    ``split_punctuation``: the source model expects text pre-split by BERT's BasicTokenizer
    (:func:`etc_fairseq.tokenization.bert_basic_split`), recorded in ``etc_tokenizer.json``; None: detected
    (an official directory named like ``etc_large_split_punctuation``)."""
    kind, line = detect_source(source)
    source = Path(source)
    overrides = dict(overrides or {})
    if gpt2_files is not None and kind != "fairseq-roberta":
        raise LiftError(f"{source}: --gpt2-encoder-json/--gpt2-vocab-bpe are for a fairseq RoBERTa checkpoint; "
                        "this source brings its own tokenizer")
    if kind.startswith("huggingface-") and overrides.get("index_position_embeddings") == 0:
        relative_positions_only = True  # a BERT's index table of 0 rows: the same request, spelled as a field
    if relative_positions_only:
        _refuse_absolute_position_flags(overrides)
    if kind == "official-etc" and (g2g_bias is not None or global_token_pieces):
        raise LiftError(f"{source}: an official ETC checkpoint was pretrained with its own global tokens and "
                        "relative biases; --g2g-bias and --global-token-piece are for lifting BERT/RoBERTa")
    if g2g_bias is not None:
        overrides["relative_bias"] = True
    if kind == "official-etc":
        lifted = lift_official(source, arch, overrides, seed, drop_unknown)
        if split_punctuation is None:
            split_punctuation = SPLIT_PUNCTUATION_NAME in source.resolve().name
    elif kind in ETC_KINDS:
        raise LiftError(f"{source}: already an ETC model; etc-lift converts it between fairseq and Hugging Face "
                        "(etc_fairseq.hf.convert)")
    elif kind.startswith("huggingface-"):
        lifted = lift_hf(source, arch, overrides, seed, relative_positions_only)
    else:
        lifted = lift_fairseq(source, arch, overrides, seed, Path(dict_path) if dict_path else None, drop_unknown,
                              gpt2_files)
    if relative_positions_only:
        _relative_positions_only(lifted, source)
    if g2g_bias is not None:
        _g2g_bias(lifted, g2g_bias, source)
    if global_token_pieces:
        _global_token_pieces(lifted, global_token_pieces, source)
    if split_punctuation:
        if not lifted.tokenizer:
            raise LiftError(f"{source}: --split-punctuation needs the source's tokenizer, and this source has none "
                            "(a fairseq RoBERTa checkpoint without --gpt2-encoder-json/--gpt2-vocab-bpe)")
        lifted.tokenizer["split_punctuation"] = True
        lifted.report_lines.append("text is pre-split as BERT's BasicTokenizer does (punctuation, CJK, no "
                                   "lower-casing) before the tokenizer: etc_tokenizer.json split_punctuation")
    if dict_path is not None and kind != "fairseq-roberta":
        theirs = masked_lm_dictionary(dict_path).symbols
        if theirs != lifted.symbols:
            raise LiftError(f"{dict_path}: differs from the vocabulary of {source} ({len(theirs)} vs "
                            f"{len(lifted.symbols)} symbols); omit --dict, etc-lift writes the matching dict.txt")
    lifted.provenance["seed"] = seed
    return line, lifted


#: the prefix of the staging directory :func:`write_lifted` writes into before renaming (a killed run's is removed
#: by the next run)
STAGING_PREFIX = ".etc-lift-staging-"


def write_lifted(lifted: LiftedModel, out: PathLike, *, overwrite: bool = False,
                 encoder_dir: Optional[PathLike] = None) -> List[Path]:
    """Write the checkpoint, ``dict.txt``, tokenizer files and ``etc_tokenizer.json`` (see the module
    docstring), and with ``encoder_dir`` the core's directory; refuses to replace existing files unless
    ``overwrite``. Returns the paths written.

    All or nothing: every file is first written into a staging directory next to ``out`` (and the core's
    directory next to ``encoder_dir``), then renamed into place, the checkpoint last, so a checkpoint present
    means its files are too; a failure removes the staging and leaves the old outputs as they were, and a
    staging directory a killed run left behind is removed by the next run.
    """
    out = Path(out)
    folder = out.parent
    planned = [out]
    if lifted.symbols is not None or lifted.dict_file is not None:
        planned.append(folder / "dict.txt")
    planned += [folder / p.name for p in lifted.tokenizer_files]
    if lifted.tokenizer:
        planned.append(folder / TOKENIZER_DESCRIPTION)
    if not overwrite:
        taken = [p for p in planned if p.exists() and not _same_file(p, lifted)]
        if taken:
            raise LiftError(f"{taken[0]} exists (pass --overwrite to replace it)")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(STAGING_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    core = atomic_directory(encoder_dir, overwrite=overwrite, marker=CONFIG_NAME) if encoder_dir is not None \
        else contextlib.nullcontext()
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
    try:
        with core as core_tmp:
            staged = _stage_files(lifted, staging, folder, out.name)
            if core_tmp is not None:
                model_encoder_dir(lifted, core_tmp)
                write_tokenizer_files(lifted, core_tmp)
            for src in staged[1:] + staged[:1]:  # the checkpoint last
                os.replace(src, folder / src.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [folder / src.name for src in staged] + ([Path(encoder_dir)] if encoder_dir is not None else [])


def _stage_files(lifted: LiftedModel, staging: Path, folder: Path, checkpoint_name: str) -> List[Path]:
    """Write the checkpoint (first in the list) and its files into ``staging``; a file that is the very input it
    would be copied from (``dict.txt`` lifted in place) is not staged."""
    staged = [save_etc_checkpoint(staging / checkpoint_name, lifted.state, lifted.etc_cfg,
                                  lifted_from=dict(lifted.provenance, kind=lifted.kind))]
    if lifted.symbols is not None:
        staged.append(write_fairseq_dict(lifted.symbols, staging / "dict.txt"))
    elif lifted.dict_file is not None and Path(lifted.dict_file).resolve() != (folder / "dict.txt").resolve():
        staged.append(Path(shutil.copyfile(lifted.dict_file, staging / "dict.txt")))
    staged += [p for p in write_tokenizer_files(lifted, staging)
               if not any(Path(t).resolve() == (folder / p.name).resolve() for t in lifted.tokenizer_files)]
    return staged


def write_tokenizer_files(lifted: LiftedModel, directory: Path) -> List[Path]:
    """Copy the source's tokenizer files into ``directory`` and write its ``etc_tokenizer.json``; returns them."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for p in lifted.tokenizer_files:
        if p.resolve() != (directory / p.name).resolve():
            written.append(Path(shutil.copyfile(p, directory / p.name)))
    if lifted.tokenizer:
        path = directory / TOKENIZER_DESCRIPTION
        path.write_text(json.dumps(dict(lifted.tokenizer, source_kind=lifted.kind), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def _same_file(path: Path, lifted: LiftedModel) -> bool:
    """A planned output that is already the very input file (e.g. dict.txt lifted in place)."""
    sources = list(lifted.tokenizer_files) + ([lifted.dict_file] if lifted.dict_file else [])
    return any(Path(s).resolve() == path.resolve() for s in sources)


def model_encoder_dir(lifted: LiftedModel, directory: PathLike) -> None:
    """Write the lifted encoder in the core's format (``model.safetensors`` + ``config.json``)."""
    dictionary = fairseq_dictionary(lifted.symbols) if lifted.symbols else masked_lm_dictionary(lifted.dict_file)
    model = build_etc_model(lifted.etc_cfg, dictionary)
    model.load_state_dict(lifted.state, strict=True)
    model.encoder.sentence_encoder.save_pretrained(directory)


def checkpoint_config(etc_cfg) -> Dict[str, Any]:
    """The ``cfg.model`` dict a written checkpoint holds (architecture name under ``_name``)."""
    return etc_config_dict(etc_cfg)


# -------------------------------------------------------------------------------------------------------
# the fairseq model and its checkpoint file
# -------------------------------------------------------------------------------------------------------


def build_etc_model(etc_cfg, dictionary, seed: Optional[int] = None):
    """Build an :class:`~etc_fairseq.models.etc.EtcModel` on CPU (fresh initialisation, deterministic
    when ``seed`` is given, without touching the global RNG state)."""
    import types

    task = types.SimpleNamespace(source_dictionary=dictionary)
    if seed is None:
        return EtcModel.build_model(etc_cfg, task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return EtcModel.build_model(etc_cfg, task)


def etc_config_dict(etc_cfg) -> Dict[str, Any]:
    """An EtcConfig as a plain dict (every field, plus ``_name`` = the architecture)."""
    out: Dict[str, Any] = {}
    for name in EtcConfig.__dataclass_fields__:
        value = getattr(etc_cfg, name)
        if hasattr(value, "value") and not isinstance(value, (int, float, str, bool)):
            value = value.value  # enum -> str
        out[name] = value
    out["_name"] = getattr(etc_cfg, "_name", None) or "etc"
    return out


def save_etc_checkpoint(
    path: PathLike,
    etc_state: Mapping[str, torch.Tensor],
    etc_cfg,
    lifted_from: Optional[Dict[str, Any]] = None,
) -> Path:
    """Write an ETC checkpoint that ``fairseq-train --finetune-from-model`` (and
    ``checkpoint_utils.load_checkpoint_to_cpu``) accepts, holding only plain data (loads with torch's
    default ``weights_only=True``).

    Args:
        path: output file (parent directories are created).
        etc_state: a complete ETC state dict (:func:`lift_roberta_into_etc`).
        etc_cfg: the ETC config; stored as ``cfg.model`` (a plain dict with ``_name`` = the architecture).
        lifted_from: plain-data provenance stored under ``extra_state.lifted_from`` (e.g. source path).
    Returns:
        the path written.
    Raises:
        LiftError: the location cannot be written (read-only, full); no temporary file is left.
    """
    return save_model_checkpoint(path, etc_state, etc_config_dict(etc_cfg), lifted_from, what="ETC checkpoint")


def save_model_checkpoint(
    path: PathLike,
    state: Mapping[str, torch.Tensor],
    model_cfg: Dict[str, Any],
    lifted_from: Optional[Dict[str, Any]] = None,
    what: str = "checkpoint",
) -> Path:
    """Write a checkpoint of one of etc-fairseq's models (``model_cfg``: its dataclass fields as a plain
    dict with ``_name``) in the format :func:`save_etc_checkpoint` describes, atomically (``what`` names
    it in the error)."""
    path = Path(path)
    checkpoint = {
        "args": None,
        # The task section makes the file loadable by EtcModel.from_pretrained (fairseq's hub builds the
        # task from it, with data = the directory holding dict.txt); fairseq-train uses its own task.
        "cfg": {"model": dict(model_cfg), "task": {"_name": "masked_lm", "data": "."}},
        "model": OrderedDict(state),
        "criterion": None,
        "optimizer_history": [
            {
                "criterion_name": "lifted",
                "optimizer_name": "lifted",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "last_optimizer_state": None,
        "task_state": {},
        "extra_state": {
            "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "version": 2},
            "lifted_from": dict(lifted_from or {}),
        },
    }
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(checkpoint, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # read-only or full location (torch reports write errors as RuntimeError)
        detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip().splitlines()[-1]
        raise LiftError(f"{path}: cannot write the {what} ({detail}); nothing was written") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def lift_checkpoint(
    roberta_path: PathLike,
    arch: str,
    out_path: PathLike,
    dict_path: Optional[PathLike] = None,
    overrides: Optional[Dict[str, Any]] = None,
    *,
    seed: Optional[int] = 1,
    drop_unknown: bool = False,
) -> Tuple[Path, LiftReport, Any]:
    """File to file: load, lift, save (what ``etc-lift`` does).

    Args:
        roberta_path: fairseq RoBERTa checkpoint.
        arch: an ETC architecture (``etc_base``, ``etc_large``, ...).
        out_path: where to write the ETC checkpoint.
        dict_path: the task's ``dict.txt`` to check the vocabulary against, or None.
        overrides: EtcConfig fields overriding the architecture (as fairseq-train's model flags do).
        seed: seed for the fresh tensors.
        drop_unknown: see :func:`lift_roberta_into_etc`.
    Returns:
        (path written, :class:`LiftReport`, the EtcConfig used).
    """
    try:
        etc_cfg = config_for_arch(arch, **(overrides or {}))
    except ValueError as e:
        raise LiftError(str(e)) from None
    state, roberta_cfg = load_roberta_state(roberta_path)
    dictionary = check_dictionary(state, masked_lm_dictionary(dict_path) if dict_path is not None else None)
    fresh = build_etc_model(etc_cfg, dictionary, seed).state_dict()
    etc_state, report = lift_roberta_into_etc(
        state, roberta_cfg, etc_cfg, fresh, drop_unknown=drop_unknown,
        roberta_name=f"RoBERTa checkpoint {roberta_path}",
    )
    written = save_etc_checkpoint(
        out_path, etc_state, etc_cfg,
        lifted_from={"roberta_checkpoint": str(roberta_path), "roberta_arch": roberta_cfg.arch,
                     "dict": str(dict_path) if dict_path is not None else None, "seed": seed},
    )
    return written, report, etc_cfg


__all__ = ["DEFAULT_ARCH", "SOURCE_KINDS", "TOKENIZER_DESCRIPTION", "LiftReport", "LiftedModel", "build_etc_model",
           "detect_source", "etc_config_dict", "is_etc_checkpoint", "lift_checkpoint", "lift_source",
           "save_etc_checkpoint", "save_model_checkpoint", "write_lifted"]
