"""Finding the tokenizer a checkpoint's training data was encoded with, from the files next to the model and
its data (the one search: the hub's :func:`find_tokenizer`, ``etc-show``'s :func:`find_gpt2_encoder_json`).

Search order of :func:`find_tokenizer`: explicit files if given; else, for an ``etc-lift`` output (or data
``etc-prepare pretrain --from-model`` wrote), the source model's own tokenizer from its ``etc_tokenizer.json``
(:func:`etc_fairseq.tokenization.load_tokenizer`); else the ``pretrain.json`` that ``etc-prepare pretrain``
writes into its ``bin/`` directory (it names ``../spm.model`` or ``../gpt2/{encoder.json,vocab.bpe}``); else
``spm.model`` or GPT-2's ``encoder.json`` + ``vocab.bpe`` (under ``gpt2/`` or directly) in the model
directory, the data directory or its parent.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from etc_fairseq.data.pretraining_corpus import read_meta
from etc_fairseq.errors import ConfigError, MissingFileError
from etc_fairseq.tokenization import (
    TOKENIZER_DESCRIPTION,
    SourceTokenizer,
    byte_level_bpe_tokenizer,
    load_tokenizer,
    sentencepiece_tokenizer,
)

PathLike = Union[str, os.PathLike]


def _spm(model: PathLike) -> SourceTokenizer:
    """A sentencepiece model whose pieces are the dictionary symbols (``etc-prepare pretrain --tokenizer spm``)."""
    if not Path(model).is_file():
        raise MissingFileError(f"{model}: no such sentencepiece model")
    return sentencepiece_tokenizer(model)


def _gpt2(encoder_json: PathLike, vocab_bpe: PathLike) -> SourceTokenizer:
    """GPT-2 byte-level BPE whose dictionary symbols are GPT-2 ids in decimal (fairseq RoBERTa's ``dict.txt``);
    each text is encoded on its own, without a leading space, as ``etc-prepare pretrain`` encodes sentences."""
    for p in (encoder_json, vocab_bpe):
        if not Path(p).is_file():
            raise MissingFileError(f"{p}: no such GPT-2 BPE file")
    return byte_level_bpe_tokenizer(encoder_json, vocab_bpe, gpt2_ids=True)


def gpt2_files(d: Path) -> Optional[Tuple[Path, Path]]:
    """GPT-2 BPE's ``(encoder.json, vocab.bpe)`` in ``d/gpt2/`` or ``d`` (the first with both), or None."""
    for sub in (d / "gpt2", d):
        if (sub / "encoder.json").is_file() and (sub / "vocab.bpe").is_file():
            return sub / "encoder.json", sub / "vocab.bpe"
    return None


def find_tokenizer(
    model_dir: PathLike,
    data_dir: PathLike,
    spm_model: Optional[PathLike] = None,
    gpt2_encoder_json: Optional[PathLike] = None,
    gpt2_vocab_bpe: Optional[PathLike] = None,
) -> Tuple[Optional[SourceTokenizer], List[str], Dict[str, Any]]:
    """Find the tokenizer that a checkpoint's training data was encoded with (see the module docstring
    for the search order).

    Args:
        model_dir: the checkpoint's directory.
        data_dir: the data directory (with ``dict.txt``).
        spm_model / gpt2_encoder_json + gpt2_vocab_bpe: explicit files (take precedence).
    Returns:
        (the :class:`~etc_fairseq.tokenization.SourceTokenizer` or None, the places looked at, the
        ``pretrain.json`` contents or ``{}``).
    Raises:
        MissingFileError: an explicit file, or one that ``pretrain.json`` names, is missing.
        TokenizerFileError: a file that is not the tokenizer it should be.
        ConfigError: both kinds given explicitly, or only one of the two GPT-2 files.
    """
    model_dir, data_dir = Path(model_dir), Path(data_dir)
    meta: Dict[str, Any] = {}
    meta_path = data_dir / "pretrain.json"
    if meta_path.is_file():
        meta = read_meta(data_dir)
    if spm_model is not None and (gpt2_encoder_json is not None or gpt2_vocab_bpe is not None):
        raise ConfigError("give either spm_model or the GPT-2 files (gpt2_encoder_json, gpt2_vocab_bpe), not both")
    if (gpt2_encoder_json is None) != (gpt2_vocab_bpe is None):
        raise ConfigError("GPT-2 BPE needs both gpt2_encoder_json and gpt2_vocab_bpe")
    if spm_model is not None:
        return _spm(spm_model), [f"spm_model={spm_model}"], meta
    if gpt2_encoder_json is not None:
        return _gpt2(gpt2_encoder_json, gpt2_vocab_bpe), [f"gpt2 files {gpt2_encoder_json}, {gpt2_vocab_bpe}"], meta
    looked = []
    # an etc-lift output (or a corpus prepared --from-model one): the source model's own tokenizer
    lifted_dirs = [model_dir]
    if "model_dir" in meta.get("tokenizer_files", {}):
        lifted_dirs.append(data_dir / meta["tokenizer_files"]["model_dir"])
    for d in lifted_dirs:
        if (d / TOKENIZER_DESCRIPTION).is_file():
            return load_tokenizer(d), [str(d / TOKENIZER_DESCRIPTION)], meta
    if meta:
        files = {k: (data_dir / v) for k, v in meta.get("tokenizer_files", {}).items()}
        for p in files.values():
            if not p.is_file():
                raise MissingFileError(f"{p}: tokenizer file named by {meta_path} is missing")
        if meta.get("tokenizer") == "spm" and "spm_model" in files:
            return _spm(files["spm_model"]), [str(meta_path)], meta
        if meta.get("tokenizer") == "gpt2" and {"gpt2_encoder_json", "gpt2_vocab_bpe"} <= set(files):
            return _gpt2(files["gpt2_encoder_json"], files["gpt2_vocab_bpe"]), [str(meta_path)], meta
        looked.append(f"{meta_path} (names no usable tokenizer)")
    else:
        looked.append(f"{meta_path} (absent)")
    seen = set()
    for d in (model_dir, data_dir, data_dir.parent):
        d = d.resolve()
        if d in seen:
            continue
        seen.add(d)
        if (d / "spm.model").is_file():
            return _spm(d / "spm.model"), looked + [str(d / "spm.model")], meta
        pair = gpt2_files(d)
        if pair is not None:
            return _gpt2(*pair), looked + [str(pair[0])], meta
        looked.append(f"{d}/{{spm.model, encoder.json + vocab.bpe, gpt2/encoder.json + gpt2/vocab.bpe}}")
    return None, looked, meta


def find_gpt2_encoder_json(data: Path) -> Optional[Path]:
    """The ``encoder.json`` that decodes the GPT-2 ids of the data in ``data``: the one ``pretrain.json`` names,
    else the one :func:`gpt2_files` finds in ``data`` or its parent; None if there is none."""
    if (data / "pretrain.json").is_file():
        rel = (read_meta(data).get("tokenizer_files") or {}).get("gpt2_encoder_json")
        if rel and (data / rel).is_file():
            return data / rel
    for d in (data, data.parent):
        pair = gpt2_files(d)
        if pair is not None:
            return pair[0]
    return None
