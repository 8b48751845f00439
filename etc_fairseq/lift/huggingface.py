"""Hugging Face BERT / RoBERTa directories -> ETC (the same lift as fairseq RoBERTa, paper appendix D).

A Hugging Face model directory holds ``config.json`` (``model_type`` ``bert`` or ``roberta``), the weights
(``model.safetensors``, read with the ``safetensors`` library, or ``pytorch_model.bin``, read with
:func:`etc_fairseq.checkpoint_io.load_checkpoint`, torch's ``weights_only`` loader) and the tokenizer's
vocabulary (``vocab.txt`` for BERT WordPiece; ``vocab.json`` + ``merges.txt`` for RoBERTa byte-level BPE).

The weights are renamed to fairseq RoBERTa's names and lifted by
:func:`etc_fairseq.lift.fairseq_roberta.lift_roberta_into_etc`, so every copy rule, report and check is the
fairseq one. What Hugging Face models have beyond fairseq RoBERTa:

- ``token_type_embeddings`` -> ETC's segment embeddings (``segment_vocab_size`` = ``type_vocab_size``,
  long and global segment id 0, BERT's default token type);
- BERT's absolute positions (row = index) -> ``index_position_embeddings`` (the long table is BERT's; the
  global table starts at zero, :data:`GLOBAL_POSITIONS_NOTE`); RoBERTa's (row = position + padding_idx + 1) -> fairseq's
  ``use_absolute_positions`` table. With ``relative_positions_only`` (``etc-lift --relative-positions-only``,
  the paper's appendix D) they are discarded instead: the lifted model has no absolute position table, reads
  inputs of any length through its relative position labels, and needs continued pretraining, since those
  labels' vectors start fresh;
- ``LayerNorm`` epsilon -> ``layer_norm_eps``; ``hidden_act`` ``gelu`` (erf) / ``gelu_new`` (tanh) / ``relu``;
- the pooler and BERT's next-sentence head are dropped (reported); a model without an MLM head keeps ETC's
  own LM-head initialisation (reported).

Vocabulary: a fairseq dictionary always starts ``<s>, <pad>, </s>, <unk>`` and the masked-LM task appends
``<mask>``. The converted token table is the source's table with its rows reordered to that dictionary:
BERT's ``[CLS] [PAD] [SEP] [UNK]`` become rows 0-3 and ``[MASK]`` the last row, every other token keeps its
relative order. :attr:`HuggingFaceSource.fairseq_ids` maps a source id to its fairseq id and
:func:`write_fairseq_dict` writes the matching ``dict.txt`` (one vocabulary string per line).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple, Union

import torch

from etc_fairseq.checkpoint_io import load_checkpoint

from .fairseq_roberta import DISCARDED_POSITIONS, LM_HEAD, SENTENCE_ENCODER, LiftError, RobertaConfig, check_weight

PathLike = Union[str, os.PathLike]

HF_CONFIG = "config.json"
HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: model_type -> the key prefix of its *For... classes' base model.
HF_PREFIXES = {"bert": "bert.", "roberta": "roberta."}
#: The source's special tokens -> fairseq's (the dictionary's first four symbols and the task's <mask>).
SPECIALS = {
    "bert": {"[CLS]": "<s>", "[PAD]": "<pad>", "[SEP]": "</s>", "[UNK]": "<unk>", "[MASK]": "<mask>"},
    "roberta": {"<s>": "<s>", "<pad>": "<pad>", "</s>": "</s>", "<unk>": "<unk>", "<mask>": "<mask>"},
    # official ETC's SentencePiece vocabulary (etc_large); a model without <mask> gets a fresh <mask> row
    "sentencepiece": {"<s>": "<s>", "<pad>": "<pad>", "</s>": "</s>", "<unk>": "<unk>", "<mask>": "<mask>"},
}
#: source vocabulary kinds whose <mask> may be missing (then ``fairseq_order`` gives -1: a new row)
_MASK_MAY_BE_NEW = ("sentencepiece",)
_FAIRSEQ_FIRST = ("<s>", "<pad>", "</s>", "<unk>")
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate", "relu": "relu"}


def is_huggingface_dir(path: PathLike) -> bool:
    """True when ``path`` is a directory with a Hugging Face ``config.json`` (``model_type`` set)."""
    config = Path(path) / HF_CONFIG
    if not config.is_file():
        return False
    try:
        return "model_type" in json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


#: why the global position table of a lift that keeps the source's positions starts at zero
GLOBAL_POSITIONS_NOTE = (
    "the global position table starts at zero (global tokens take no absolute position from the source): the "
    "source's position 0 is where its [CLS] always sat; in all-MiniLM-L6-v2 that row (5 times the norm of the "
    "others) turns the first global token into one near-constant vector whatever it reads (examples/lifted_minilm)")


@dataclass
class HuggingFaceSource:
    """A Hugging Face BERT/RoBERTa directory, read and renamed for lifting.

    kind: ``bert`` or ``roberta``; config: its ``config.json``; state: fairseq RoBERTa names
    (``encoder.sentence_encoder.*``, ``encoder.lm_head.*``), token rows in fairseq dictionary order;
    roberta_cfg: the sizes for :func:`lift_roberta_into_etc`; symbols: the fairseq dictionary's symbols in
    id order; fairseq_ids: int64 [source vocab] source id -> fairseq id; extra: tensors ETC takes beyond
    fairseq RoBERTa (``token_type``, ``positions``); dropped: source key -> why it is not lifted;
    tokenizer_files: the source's tokenizer files; position_key: the source's key of its absolute position
    table.
    """

    directory: Path
    kind: str
    config: Dict[str, Any]
    weights_file: Path
    state: "OrderedDict[str, torch.Tensor]"
    roberta_cfg: RobertaConfig
    symbols: List[str]
    fairseq_ids: torch.Tensor
    extra: Dict[str, torch.Tensor] = field(default_factory=dict)
    dropped: Dict[str, str] = field(default_factory=dict)
    tokenizer_files: List[Path] = field(default_factory=list)
    position_key: str = "embeddings.position_embeddings.weight"  # the source's name of its position table

    def etc_overrides(self, relative_positions_only: bool = False) -> Dict[str, Any]:
        """EtcConfig fields the source's config determines (sizes, activation, epsilon, positions, segments).
        ``relative_positions_only``: no absolute position table (the source's is discarded)."""
        c = self.config
        out: Dict[str, Any] = dict(
            encoder_layers=c["num_hidden_layers"], encoder_embed_dim=c["hidden_size"],
            encoder_ffn_embed_dim=c["intermediate_size"], encoder_attention_heads=c["num_attention_heads"],
            activation_fn=_ACTIVATIONS[c.get("hidden_act", "gelu")],
            layer_norm_eps=float(c.get("layer_norm_eps", 1e-12)),
            dropout=float(c.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(c.get("attention_probs_dropout_prob", 0.1)),
        )
        if "token_type" in self.extra:
            out.update(segment_vocab_size=self.extra["token_type"].shape[0], long_segment_id=0, global_segment_id=0)
        if relative_positions_only:
            out.update(index_position_embeddings=0, use_absolute_positions=False)
        elif self.kind == "bert":
            out["index_position_embeddings"] = self.extra["positions"].shape[0]
            out["max_global_positions"] = self.extra["positions"].shape[0]
        else:
            rows = self.state[SENTENCE_ENCODER + "embed_positions.weight"].shape[0]
            out.update(use_absolute_positions=True, max_positions=rows - self.symbols.index("<pad>") - 1)
        return out


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LiftError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(value, dict):
        raise LiftError(f"{path}: expected a JSON object")
    return value


def read_weights(directory: Path) -> Tuple[Path, Dict[str, torch.Tensor]]:
    """The tensors of ``model.safetensors`` (preferred) or ``pytorch_model.bin`` in ``directory``."""
    for name in HF_WEIGHTS:
        path = directory / name
        if not path.is_file():
            continue
        if name.endswith(".safetensors"):
            from safetensors import SafetensorError
            from safetensors.torch import load_file

            try:
                return path, dict(load_file(str(path)))
            except (SafetensorError, OSError) as e:
                raise LiftError(f"{path}: unreadable safetensors file ({e})") from None
        state = load_checkpoint(path)
        if not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise LiftError(f"{path}: expected a state dict of tensors")
        return path, dict(state)
    raise LiftError(f"{directory}: no weights ({' or '.join(HF_WEIGHTS)})")


def read_vocabulary(directory: Path, kind: str, size: int) -> Tuple[List[str], List[Path]]:
    """The source vocabulary as a list indexed by source id, and the tokenizer files it came from."""
    if kind == "bert":
        path = directory / "vocab.txt"
        if not path.is_file():
            raise LiftError(f"{path}: missing (a BERT directory needs its WordPiece vocabulary)")
        vocab = path.read_text(encoding="utf-8").split("\n")
        if vocab and vocab[-1] == "":
            vocab.pop()
        files = [path]
    else:
        path = directory / "vocab.json"
        if not path.is_file():
            raise LiftError(f"{path}: missing (a RoBERTa directory needs its byte-level BPE vocabulary)")
        mapping = _read_json(path)
        vocab = [""] * len(mapping)
        for token, i in mapping.items():
            if not isinstance(i, int) or not 0 <= i < len(mapping) or vocab[i]:
                raise LiftError(f"{path}: token {token!r} has id {i!r}; expected unique ids 0..{len(mapping) - 1}")
            vocab[i] = token
        files = [path] + [p for p in (directory / "merges.txt",) if p.is_file()]
    if len(vocab) != size:
        raise LiftError(f"{path}: {len(vocab)} tokens but {directory / HF_CONFIG} field 'vocab_size' is {size}")
    files += [p for p in (directory / "tokenizer.json", directory / "tokenizer_config.json",
                          directory / "special_tokens_map.json") if p.is_file()]
    return vocab, files


def fairseq_order(vocab: List[str], kind: str, source: str) -> Tuple[List[str], List[int]]:
    """(fairseq symbols in id order, source id of each) for a source vocabulary (see the module docstring).
    The source id is -1 for a ``<mask>`` the vocabulary lacks (SentencePiece only): a new row."""
    specials = SPECIALS[kind]
    spaced = next((i for i, tok in enumerate(vocab) if tok == "" or any(c.isspace() for c in tok)), None)
    if spaced is not None:
        what = "an empty entry" if vocab[spaced] == "" else f"symbol {vocab[spaced]!r}, which contains whitespace"
        raise LiftError(f"{source}: entry {spaced} (line {spaced + 1} of a vocab.txt) is {what}; a dictionary "
                        "symbol is one non-empty token without spaces")
    index = {tok: i for i, tok in enumerate(vocab)}
    if kind in _MASK_MAY_BE_NEW and "<mask>" not in index:
        index["<mask>"] = -1
    missing = [tok for tok in specials if tok not in index]
    if missing:
        raise LiftError(f"{source}: special token {missing[0]!r} not in the vocabulary")
    first = {fs: index[tok] for tok, fs in specials.items()}
    order = [first[s] for s in _FAIRSEQ_FIRST]
    taken = set(first.values())
    order += [i for i in range(len(vocab)) if i not in taken]
    order.append(first["<mask>"])
    symbols = [_FAIRSEQ_FIRST[j] if j < 4 else vocab[i] for j, i in enumerate(order)]
    symbols[-1] = "<mask>"
    if len(set(symbols)) != len(symbols):
        dup = next(s for s in symbols if symbols.count(s) > 1)
        raise LiftError(f"{source}: token {dup!r} appears twice once the specials are renamed to fairseq's")
    return symbols, order


def _layer_map(i: int) -> Dict[str, str]:
    src, dst = f"encoder.layer.{i}.", f"{SENTENCE_ENCODER}layers.{i}."
    return {
        src + "attention.self.query": dst + "self_attn.q_proj",
        src + "attention.self.key": dst + "self_attn.k_proj",
        src + "attention.self.value": dst + "self_attn.v_proj",
        src + "attention.output.dense": dst + "self_attn.out_proj",
        src + "attention.output.LayerNorm": dst + "self_attn_layer_norm",
        src + "intermediate.dense": dst + "fc1",
        src + "output.dense": dst + "fc2",
        src + "output.LayerNorm": dst + "final_layer_norm",
    }


#: the sizes a source's config.json must give, and the probabilities and epsilon it may give
_SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
_PROBABILITY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def check_config(config: Dict[str, Any], config_path: Path) -> None:
    """Refuse, naming the file and field, a ``config.json`` value :func:`read_huggingface` cannot use: a
    ``model_type`` or ``hidden_act`` that is not one etc-lift reads, a size that is not a positive int, a dropout
    that is not a probability in [0, 1) (NaN included), a ``layer_norm_eps`` that is not a positive finite number.

    Raises:
        LiftError: one line naming ``config_path``, the field, its value and what was expected.
    """
    def refuse(name: str, expected: str):
        raise LiftError(f"{config_path}: field {name!r} = {config.get(name)!r}: expected {expected}")

    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in HF_PREFIXES:
        refuse("model_type", f"one of {sorted(HF_PREFIXES)}")
    for name in _SIZE_FIELDS:
        v = config.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            refuse(name, "an int >= 1")
    act = config.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        refuse("hidden_act", f"one of {sorted(_ACTIVATIONS)}")
    for name in _PROBABILITY_FIELDS:
        v = config.get(name, 0.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0:
            refuse(name, "a probability in [0, 1)")
    eps = config.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0.0 < eps < float("inf"):
        refuse("layer_norm_eps", "a positive finite number")


def read_huggingface(directory: PathLike) -> HuggingFaceSource:
    """Read and rename a Hugging Face BERT/RoBERTa directory (see the module docstring).

    Raises:
        LiftError / CheckpointLoadError: missing or unreadable files, an unsupported ``model_type``,
            ``hidden_act`` or ``position_embedding_type``, a vocabulary whose size is not ``vocab_size``,
            tensors this lift does not know (named).
    """
    directory = Path(directory)
    config_path = directory / HF_CONFIG
    if not config_path.is_file():
        raise LiftError(f"{config_path}: missing (a Hugging Face model directory holds config.json)")
    config = _read_json(config_path)
    check_config(config, config_path)
    kind = config["model_type"]
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise LiftError(f"{config_path}: field 'position_embedding_type' = {config['position_embedding_type']!r}; "
                        "only 'absolute' lifts")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise LiftError(f"{config_path}: a decoder / cross-attention model is not an encoder to lift")
    weights_file, raw = read_weights(directory)
    vocab, tokenizer_files = read_vocabulary(directory, kind, config["vocab_size"])
    symbols, order = fairseq_order(vocab, kind, str(tokenizer_files[0]))
    fairseq_ids = torch.empty(len(order), dtype=torch.long)
    fairseq_ids[torch.tensor(order)] = torch.arange(len(order))
    perm = torch.tensor(order)

    prefix = HF_PREFIXES[kind]
    names = {k[len(prefix):] if k.startswith(prefix) else k: k for k in raw}
    state: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    extra: Dict[str, torch.Tensor] = {}
    dropped: Dict[str, str] = {}
    used = set()

    def take(name: str) -> torch.Tensor:
        if name not in names:
            raise LiftError(f"{weights_file}: tensor {prefix}{name} missing")
        used.add(name)
        return check_weight(raw[names[name]], names[name], weights_file)

    def rename(src: str, dst: str) -> None:
        for p in ("weight", "bias"):
            state[f"{dst}.{p}"] = take(f"{src}.{p}")

    words = take("embeddings.word_embeddings.weight")
    if tuple(words.shape) != (config["vocab_size"], config["hidden_size"]):
        raise LiftError(f"{weights_file}: tensor {names['embeddings.word_embeddings.weight']!r} has shape "
                        f"{tuple(words.shape)}, {config_path} declares vocab_size {config['vocab_size']} x hidden_size "
                        f"{config['hidden_size']}")
    state[SENTENCE_ENCODER + "embed_tokens.weight"] = words[perm]
    rename("embeddings.LayerNorm", SENTENCE_ENCODER + "layernorm_embedding")
    positions = take("embeddings.position_embeddings.weight")
    if kind == "bert":
        extra["positions"] = positions
    else:
        state[SENTENCE_ENCODER + "embed_positions.weight"] = positions
    if "embeddings.token_type_embeddings.weight" in names:
        extra["token_type"] = take("embeddings.token_type_embeddings.weight")
    hidden, ffn = config["hidden_size"], config["intermediate_size"]
    for i in range(config["num_hidden_layers"]):
        for src, dst in _layer_map(i).items():
            rename(src, dst)
            want = {"fc1": (ffn, hidden), "fc2": (hidden, ffn)}.get(dst.rsplit(".", 1)[-1], (hidden, hidden))
            if not dst.endswith("layer_norm") and tuple(state[dst + ".weight"].shape) != want:
                raise LiftError(f"{weights_file}: tensor {names[src + '.weight']!r} has shape "
                                f"{tuple(state[dst + '.weight'].shape)}, {config_path} declares {want}")
    heads = {"bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                      "cls.predictions.bias", "cls.predictions.decoder"),
             "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder")}[kind]
    dense, norm, bias, decoder = heads
    if dense + ".weight" in names:
        rename(dense, LM_HEAD + "dense")
        rename(norm, LM_HEAD + "layer_norm")
        state[LM_HEAD + "bias"] = take(bias)[perm]
        if decoder + ".weight" in names:
            state[LM_HEAD + "weight"] = take(decoder + ".weight")[perm]
        if decoder + ".bias" in names:
            if not torch.equal(take(decoder + ".bias"), raw[names[bias]]):
                raise LiftError(f"{weights_file}: {decoder}.bias differs from {bias}; expected the tied bias")
    for name in names:
        if name in used:
            continue
        if name.startswith("pooler."):
            dropped[names[name]] = "pooler (ETC has classification heads of its own)"
        elif name.startswith("cls.seq_relationship"):
            dropped[names[name]] = "BERT next-sentence-prediction head"
        elif name == "embeddings.position_ids" or name.endswith("token_type_ids"):
            dropped[names[name]] = "Hugging Face index buffer"
        else:
            raise LiftError(f"{weights_file}: tensor {names[name]!r} is not part of a {kind} encoder etc-lift knows")
    roberta_cfg = RobertaConfig(
        encoder_layers=config["num_hidden_layers"], encoder_embed_dim=hidden,
        encoder_ffn_embed_dim=config["intermediate_size"], encoder_attention_heads=config["num_attention_heads"],
        activation_fn=_ACTIVATIONS[config.get("hidden_act", "gelu")], encoder_normalize_before=False,
        no_scale_embedding=True, max_positions=positions.shape[0], arch=f"huggingface-{kind}",
    )
    return HuggingFaceSource(directory, kind, config, weights_file, state, roberta_cfg, symbols, fairseq_ids,
                             extra, dropped, tokenizer_files, names["embeddings.position_embeddings.weight"])


def write_fairseq_dict(symbols: List[str], path: PathLike) -> Path:
    """``dict.txt`` for ``symbols`` (fairseq id order): every symbol after the first four, without the final
    ``<mask>`` (fairseq's masked-LM task adds it), one ``SYMBOL 1`` line each."""
    if tuple(symbols[:4]) != _FAIRSEQ_FIRST or symbols[-1] != "<mask>":
        raise ValueError("symbols must start with <s> <pad> </s> <unk> and end with <mask>")
    bad = [s for s in symbols if not s or any(c.isspace() for c in s)]
    if bad:
        raise LiftError(f"vocabulary symbol {bad[0]!r} contains whitespace; it cannot be a dict.txt line")
    path = Path(path)
    path.write_text("".join(f"{s} 1\n" for s in symbols[4:-1]), encoding="utf-8")
    return path


def fairseq_dictionary(symbols: List[str]):
    """The fairseq ``Dictionary`` with ``symbols`` in id order (what the masked-LM task builds from the
    :func:`write_fairseq_dict` file)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    if d.symbols != list(symbols[: len(d)]):
        raise ValueError(f"symbols must start with {d.symbols}")
    for s in symbols[len(d):]:
        d.add_symbol(s)
    return d


def lift_huggingface_into_etc(source: HuggingFaceSource, etc_cfg, fresh_state: Mapping[str, torch.Tensor]):
    """Lift a :func:`read_huggingface` source into a complete ETC state dict for ``etc_cfg`` (which must
    include :meth:`HuggingFaceSource.etc_overrides``); ``fresh_state``: the target model's fresh state dict, its
    token rows those of ``fairseq_dictionary(source.symbols)`` (see
    :func:`~.fairseq_roberta.lift_roberta_into_etc`). Returns (state dict, LiftReport)."""
    from .fairseq_roberta import check_dictionary, lift_roberta_into_etc

    name = f"Hugging Face {source.kind} {source.weights_file}"
    check_dictionary(source.state, fairseq_dictionary(source.symbols))
    state, report = lift_roberta_into_etc(source.state, source.roberta_cfg, etc_cfg, fresh_state,
                                          roberta_name=name, allow_missing_lm_head=True)
    report.source = {"bert": "Hugging Face BERT", "roberta": "Hugging Face RoBERTa"}.get(source.kind, name)

    def put(key: str, value: torch.Tensor, src: str, group: str) -> None:
        if key not in state or tuple(state[key].shape) != tuple(value.shape):
            shape = tuple(state[key].shape) if key in state else None
            raise LiftError(f"{name}: {src} {tuple(value.shape)} does not fit ETC {key} {shape}")
        state[key] = value.detach().to(state[key].dtype).clone()
        report.lifted[key] = src
        report.groups[group] = report.groups.get(group, 0) + 1
        if key in report.fresh:
            report.fresh.remove(key)

    if "token_type" in source.extra:
        put(SENTENCE_ENCODER + "embed_segments.weight", source.extra["token_type"],
            "embeddings.token_type_embeddings.weight", "segment embeddings")
    if "positions" in source.extra and etc_cfg.index_position_embeddings:
        put(f"{SENTENCE_ENCODER}embed_long_index_positions.weight", source.extra["positions"],
            "embeddings.position_embeddings.weight", "position embeddings")
        glob = f"{SENTENCE_ENCODER}embed_global_index_positions.weight"
        state[glob] = torch.zeros_like(state[glob])
        if glob in report.fresh:
            report.fresh.remove(glob)
        report.notes.append(GLOBAL_POSITIONS_NOTE)
    elif "positions" in source.extra:
        report.dropped[source.position_key] = DISCARDED_POSITIONS
    report.dropped.update(source.dropped)
    return state, report
