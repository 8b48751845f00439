"""Hugging Face directories <-> fairseq ``etc`` checkpoints, for ``etc-lift --format hf`` and ``etc-lift HF_DIR``.

The two adapters hold the same modules of the core, so a conversion renames tensors and copies the config
fields; nothing is recomputed:

========================================  =============================================================
fairseq ``etc`` checkpoint                Hugging Face (:mod:`.modeling`)
========================================  =============================================================
``encoder.sentence_encoder.*``            ``etc.encoder.*`` (``encoder.*`` in :class:`~.modeling.EtcModel`)
``encoder.lm_head.*``                     ``lm_head.*`` (:class:`~.modeling.EtcForMaskedLM`; output
                                          matrix tied to the token embeddings in both)
``classification_heads.NAME.*``           ``classifier.*`` (:class:`~.modeling.EtcForSequenceClassification`)
``task_heads.structured_record.*``        ``classifier.*`` (sequence classification, ``global_cls``)
``task_heads.structured_global.*``        ``classifier.*`` (:class:`~.modeling.EtcForTokenClassification`,
                                          global tokens)
``task_heads.structured_span.*``          ``qa_outputs.*`` (:class:`~.modeling.EtcForQuestionAnswering`)
``cpc_head.*``, ``encoder.version``       not in Hugging Face (the CPC head is a pre-training head; a
                                          checkpoint written back gets a fresh one)
========================================  =============================================================

One head goes to a Hugging Face directory (``head``: ``lm``, ``none`` = the encoder alone, or a fairseq head's
name, ``classification_heads.NAME`` / ``task_heads.NAME``); the fairseq name is kept in ``config.json``
(``fairseq_head``) so the way back restores it. Other task heads (NQ, HotpotQA, WikiHop, OpenKP, nextsent) have
no Hugging Face class; ``head="none"`` exports their encoder.

A Hugging Face directory written here holds ``config.json``, ``model.safetensors``, ``tokenizer.json`` (ids =
the model's token rows, :mod:`.tokenization`) with ``tokenizer_config.json``, and, for the fairseq side
(``etc-prepare --from-model DIR``, ``etc-lift DIR``), ``dict.txt``, ``etc_tokenizer.json`` and the source
tokenizer's files. It is written into a temporary sibling directory and renamed into place: a failure leaves
nothing behind.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from etc_fairseq.encoder.config import absolute_position_limit, as_encoder_config
from etc_fairseq.encoder.io import config_to_dict
from etc_fairseq.finetune.structured.decode import HEADS as STRUCTURED_HEADS
from etc_fairseq.lift.fairseq_roberta import LM_HEAD, SENTENCE_ENCODER, LiftError
from etc_fairseq.tokenization import BERT_SPECIALS_IN_FAIRSEQ, TOKENIZER_DESCRIPTION

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]

__all__ = [
    "HfExport",
    "fairseq_heads",
    "export_to_hf",
    "write_hf_directory",
    "lift_fairseq_etc",
    "lift_huggingface_etc",
    "is_huggingface_etc_dir",
    "check_hf_output",
]

#: the dictionary file written next to a converted model (fairseq's name)
DICT_FILE = "dict.txt"
#: the file-name fields of an ``etc_tokenizer.json`` (the source tokenizer's files)
TOKENIZER_FILE_FIELDS = ("vocab", "merges", "model", "encoder_json", "vocab_bpe")
CLASSIFICATION_HEADS = "classification_heads."
TASK_HEADS = "task_heads."
#: fairseq task head -> (Hugging Face class name, its module, config fields it implies)
TASK_HEAD_CLASSES = {
    TASK_HEADS + STRUCTURED_HEADS["record"]: ("EtcForSequenceClassification", "classifier",
                                              {"classification_head_input": "global_cls"}),
    TASK_HEADS + STRUCTURED_HEADS["global"]: ("EtcForTokenClassification", "classifier",
                                              {"token_classification_input": "global"}),
    TASK_HEADS + STRUCTURED_HEADS["span"]: ("EtcForQuestionAnswering", "qa_outputs", {}),
}
#: the fairseq head a Hugging Face head goes back to when its config names none
DEFAULT_FAIRSEQ_HEADS = {
    "EtcForSequenceClassification": CLASSIFICATION_HEADS + "sentence_classification_head",
    ("EtcForTokenClassification", "global"): TASK_HEADS + STRUCTURED_HEADS["global"],
    ("EtcForTokenClassification", "long"): TASK_HEADS + "token_classification",
    "EtcForQuestionAnswering": TASK_HEADS + STRUCTURED_HEADS["span"],
}
HF_ENCODER = "etc.encoder."
CPC_HEAD = "cpc_head."


# -------------------------------------------------------------------------------------------------------------
# heads
# -------------------------------------------------------------------------------------------------------------
def fairseq_heads(state: Mapping[str, torch.Tensor]) -> List[str]:
    """The heads of a fairseq ``etc`` state dict: ``lm`` (the LM head) and each ``classification_heads.NAME``
    and ``task_heads.NAME``, in that order."""
    heads = ["lm"] if LM_HEAD + "dense.weight" in state else []
    for group in (CLASSIFICATION_HEADS, TASK_HEADS):
        names = sorted({k[len(group):].split(".")[0] for k in state if k.startswith(group)})
        heads += [group + n for n in names]
    return heads


def _choose_head(heads: Sequence[str], head: Optional[str], where: str) -> str:
    """``head`` checked against ``heads`` (plus ``none``); None: the one task head, else ``lm`` if there is an
    LM head, else ``none``."""
    task = [h for h in heads if h != "lm"]
    if head is None:
        if len(task) > 1:
            raise LiftError(f"{where}: several heads ({', '.join(task)}); pick one with --head (or --head none for "
                            "the encoder alone)")
        head = task[0] if task else ("lm" if "lm" in heads else "none")
    if head != "none" and head not in heads:
        raise LiftError(f"{where}: no head {head!r}; it has {', '.join(heads) or 'none'} (--head none: the encoder)")
    if head.startswith(TASK_HEADS) and head not in TASK_HEAD_CLASSES:
        raise LiftError(f"{where}: head {head!r} has no Hugging Face class (those are "
                        f"{', '.join(sorted(TASK_HEAD_CLASSES))}, classification_heads.* and lm); --head none exports "
                        "the encoder alone")
    return head


@dataclass
class HfExport:
    """A Hugging Face model ready to be written (see :func:`write_hf_directory`)."""

    model: Any
    tokenizer: Any = None
    #: the model's dictionary in id order (written as ``dict.txt``), or None
    symbols: Optional[List[str]] = None
    #: file name in the directory -> a file to copy, or text to write
    files: Dict[str, Union[Path, str]] = field(default_factory=dict)
    report_lines: List[str] = field(default_factory=list)


def _hf_class(name: str):
    from etc_fairseq import hf

    return getattr(hf, name)


def _head_labels(head_state: Mapping[str, torch.Tensor], module: str) -> int:
    key = "out_proj.weight" if module == "classifier" and "out_proj.weight" in head_state else "proj.weight"
    return int(head_state[key].shape[0])


def export_to_hf(
    state: Mapping[str, torch.Tensor],
    model_fields: Any,
    symbols: Optional[Sequence[str]],
    *,
    head: Optional[str] = None,
    labels: Optional[Sequence[str]] = None,
    global_token_ids: Optional[Mapping[str, int]] = None,
    tokenizer_description: Optional[Mapping[str, Any]] = None,
    tokenizer_files: Sequence[Path] = (),
    where: str = "checkpoint",
) -> HfExport:
    """A fairseq ``etc`` model as a Hugging Face model (and tokenizer), in memory.

    Args:
        state: the fairseq state dict (``encoder.sentence_encoder.*``, heads).
        model_fields: the fairseq model config (fairseq's ``EtcConfig``, or ``cfg.model`` as a dict: the encoder
            fields, missing ones taking their defaults, and ``fixed_block_token``).
        symbols: the dictionary in id order (None: unknown; then no tokenizer).
        head: see the module docstring (None: chosen by :func:`_choose_head`).
        labels: class names of a classification head, in class order (default ``LABEL_i``).
        global_token_ids: pretrained role -> id (``EtcConfig.global_token_ids``).
        tokenizer_description / tokenizer_files: the source tokenizer (an ``etc_tokenizer.json``'s content and
            the files it names) for ``tokenizer.json``.
        where: names the source in errors.
    Raises:
        LiftError: a head that has no Hugging Face class, tensors that do not fit (one line).
    """
    from .configuration import EtcConfig

    heads = fairseq_heads(state)
    head = _choose_head(heads, head, where)
    rows = state[SENTENCE_ENCODER + "embed_tokens.weight"].shape[0]
    if symbols is not None and len(symbols) != rows:
        raise LiftError(f"{where}: the token embedding has {rows} rows, the dictionary {len(symbols)} symbols")
    index = {s: i for i, s in enumerate(symbols)} if symbols is not None else {"<s>": 0, "<pad>": 1}
    if isinstance(model_fields, Mapping):
        model_fields = types.SimpleNamespace(**model_fields)
    fixed = str(getattr(model_fields, "fixed_block_token", "<s>"))
    if fixed not in index:
        raise LiftError(f"{where}: fixed_block_token {fixed!r} is not in the dictionary")
    try:
        fields = config_to_dict(as_encoder_config(model_fields))
    except ValueError as e:
        raise LiftError(f"{where}: {e}") from None
    config_kwargs: Dict[str, Any] = dict(fields, vocab_size=rows, pad_token_id=index["<pad>"],
                                         fixed_block_token_id=index[fixed],
                                         global_token_ids=dict(global_token_ids or {}))
    lines = []
    if head == "lm":
        cls_name, module, hf_prefix = "EtcForMaskedLM", None, HF_ENCODER
    elif head == "none":
        cls_name, module, hf_prefix = "EtcModel", None, "encoder."
    elif head.startswith(CLASSIFICATION_HEADS):
        cls_name, module, hf_prefix = "EtcForSequenceClassification", "classifier", HF_ENCODER
    else:
        cls_name, module, implied = TASK_HEAD_CLASSES[head]
        hf_prefix = HF_ENCODER
        config_kwargs.update(implied)
    out: Dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if k.startswith(SENTENCE_ENCODER):
            out[hf_prefix + k[len(SENTENCE_ENCODER):]] = v
    if module is not None:
        head_state = {k[len(head) + 1:]: v for k, v in state.items() if k.startswith(head + ".")}
        n = _head_labels(head_state, module)
        config_kwargs["num_labels"] = n
        config_kwargs["fairseq_head"] = head
        if "dense.weight" in head_state and head_state["dense.weight"].shape[0] != fields.get("encoder_embed_dim"):
            raise LiftError(f"{where}: head {head} has inner width {head_state['dense.weight'].shape[0]}; the "
                            "Hugging Face classifier's is the model width")
        if labels is not None:
            if len(labels) != n:
                raise LiftError(f"{where}: head {head} has {n} classes, the data names {len(labels)}")
            config_kwargs["id2label"] = {i: str(c) for i, c in enumerate(labels)}
            config_kwargs["label2id"] = {str(c): i for i, c in enumerate(labels)}
        out.update({f"{module}.{k}": v for k, v in head_state.items()})
    elif head == "lm":
        out.update({"lm_head." + k[len(LM_HEAD):]: v for k, v in state.items()
                    if k.startswith(LM_HEAD) and k != LM_HEAD + "weight"})
    left = [h for h in heads if h != head]
    if any(k.startswith(CPC_HEAD) for k in state):
        left.append("cpc_head")
    if left:
        lines.append(f"not in the Hugging Face directory: {', '.join(left)} (one head per directory; --head picks it)")
    try:
        config = EtcConfig(**config_kwargs)
    except ValueError as e:
        raise LiftError(f"{where}: {e}") from None
    config.architectures = [cls_name]
    model = _model_with_state(_hf_class(cls_name), config, out, where)
    lines.insert(0, f"Hugging Face class {cls_name}" + (f" (head {head})" if module is not None else ""))
    export = HfExport(model, symbols=list(symbols) if symbols is not None else None, report_lines=lines)
    if tokenizer_description and symbols is not None:
        _add_tokenizer(export, tokenizer_description, tokenizer_files, symbols, config, where)
    elif symbols is None or not tokenizer_description:
        lines.append("no tokenizer.json: the source names no tokenizer (give its files to etc-lift)")
    return export


def _add_tokenizer(export: HfExport, description: Mapping[str, Any], files: Sequence[Path], symbols: Sequence[str],
                   config, where: str) -> None:
    """``tokenizer.json`` (and the source tokenizer's files with ``etc_tokenizer.json``) into ``export``."""
    import tempfile

    from .tokenization import fast_tokenizer

    named = {str(description[k]) for k in TOKENIZER_FILE_FIELDS if description.get(k)}
    by_name = {Path(p).name: Path(p) for p in files}
    missing = sorted(n for n in named if n not in by_name)
    if missing:
        raise LiftError(f"{where}: tokenizer file {missing[0]} ({TOKENIZER_DESCRIPTION}) not found")
    with tempfile.TemporaryDirectory() as d:
        for name in named:
            shutil.copyfile(by_name[name], Path(d) / name)
        tok, dropped = fast_tokenizer(dict(description), Path(d), symbols, where=f"{where} ({TOKENIZER_DESCRIPTION})",
                                      segments=bool(config.segment_vocab_size))
    limit = absolute_position_limit(config.encoder_config())
    if limit is not None:
        tok.model_max_length = limit
    export.tokenizer = tok
    for name in sorted(named):
        export.files[name] = by_name[name]
    desc = {k: v for k, v in description.items() if k != "source_kind"}
    export.files[TOKENIZER_DESCRIPTION] = json.dumps(desc, indent=2, sort_keys=True) + "\n"
    if dropped:
        export.report_lines.append(f"tokenizer.json: {dropped} pieces / merges of the source tokenizer are not in the "
                                   "model's dictionary and are left out (fairseq's tokenizer gives <unk> for them)")


def _model_with_state(cls, config, state: Mapping[str, torch.Tensor], where: str):
    """``cls(config)`` holding exactly ``state`` (tied weights re-tied); refuses missing, extra or misshapen
    tensors."""
    with torch.device("meta"):
        model = cls(config)
    expected = model.state_dict()
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    missing = sorted(k for k in expected if k not in state and k not in tied)
    extra = sorted(k for k in state if k not in expected)
    if missing or extra:
        raise LiftError(f"{where}: tensors do not fit the model config.json describes: missing {missing[:3]}, "
                        f"unexpected {extra[:3]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise LiftError(f"{where}: tensor {k} has shape {tuple(v.shape)}, the config implies "
                            f"{tuple(expected[k].shape)}")
    full = dict(state)
    for target, source in (getattr(model, "all_tied_weights_keys", {}) or {}).items():
        full[target] = full[source]
    model.load_state_dict({k: v.detach().clone().contiguous() for k, v in full.items()}, strict=True, assign=True)
    model.tie_weights()
    return model.eval()


# -------------------------------------------------------------------------------------------------------------
# writing a Hugging Face directory
# -------------------------------------------------------------------------------------------------------------
def is_huggingface_etc_dir(path: PathLike) -> bool:
    """A directory whose ``config.json`` says ``model_type: etc``."""
    config = Path(path) / "config.json"
    try:
        return Path(path).is_dir() and json.loads(config.read_text(encoding="utf-8")).get("model_type") == "etc"
    except (OSError, ValueError, AttributeError):
        return False


def check_hf_output(out: Path, inputs: Mapping[str, Optional[Path]], overwrite: bool) -> None:
    """Refuse an output directory that is one of the inputs (or holds one), a file, or an existing directory
    unless ``overwrite`` and it holds an ETC Hugging Face model (what this writes)."""
    from etc_fairseq.guards import OutputRefusedError, check_outputs_against_inputs

    try:
        check_outputs_against_inputs({"--out": out}, inputs)
    except OutputRefusedError as e:
        raise LiftError(str(e)) from None
    if out.is_file():
        raise LiftError(f"--out {out} is a file; --format hf writes a directory")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise LiftError(f"{out} exists (pass --overwrite to replace it)")
        if not is_huggingface_etc_dir(out):
            raise LiftError(f"--out {out} exists and is not an ETC Hugging Face directory; --overwrite replaces only those")


def write_hf_directory(export: HfExport, out: PathLike) -> List[Path]:
    """Write ``export`` as the directory ``out`` (see the module docstring), all at once: into a temporary
    sibling, then renamed (an existing ``out`` is replaced only after everything was written)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp-etc-hf")
    old = out.with_name(out.name + ".old-etc-hf")
    for leftover in (tmp, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    from transformers.utils import logging as hf_logging

    from etc_fairseq.lift.huggingface import write_fairseq_dict

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one shard: a progress bar says nothing
    try:
        tmp.mkdir(parents=True)
        export.model.save_pretrained(tmp)
        if export.tokenizer is not None:
            export.tokenizer.save_pretrained(tmp)
        if export.symbols is not None:
            write_fairseq_dict(export.symbols, tmp / DICT_FILE)
        for name, content in export.files.items():
            if isinstance(content, Path):
                shutil.copyfile(content, tmp / name)
            else:
                (tmp / name).write_text(content, encoding="utf-8")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    return sorted(out.iterdir())


# -------------------------------------------------------------------------------------------------------------
# fairseq etc checkpoints as an etc-lift source
# -------------------------------------------------------------------------------------------------------------
def fairseq_side_files(directory: Path) -> List[Path]:
    """The files of a Hugging Face ETC directory that the fairseq side reads: ``dict.txt``,
    ``etc_tokenizer.json`` and the source tokenizer's files it names (those present)."""
    directory = Path(directory)
    out = [p for p in (directory / DICT_FILE, directory / TOKENIZER_DESCRIPTION) if p.is_file()]
    if (directory / TOKENIZER_DESCRIPTION).is_file():
        desc = json.loads((directory / TOKENIZER_DESCRIPTION).read_text(encoding="utf-8"))
        out += [directory / str(desc[k]) for k in TOKENIZER_FILE_FIELDS
                if desc.get(k) and (directory / str(desc[k])).is_file()]
    return out


def _labels(data_dir: Optional[Path], task: Optional[str]) -> Optional[List[str]]:
    """Class names of the data a checkpoint was fine-tuned on, in class order: ``sentence_prediction``'s
    ``label/dict.txt`` (with ``etc-prepare article-classification``'s names for its numbered labels, from its
    ``prepare.json`` ``labels``), or ``etc_structured``'s ``prepare.json`` ``classes``; None when not found."""
    if data_dir is None:
        return None
    if task == "sentence_prediction" and (data_dir / "label" / DICT_FILE).is_file():
        lines = (data_dir / "label" / DICT_FILE).read_text(encoding="utf-8").splitlines()
        names = [line.rsplit(" ", 1)[0] for line in lines if line.strip()]
        named = _json_field(data_dir.parent / "prepare.json", "labels")
        if named and all(n.isdigit() and int(n) < len(named) for n in names):
            names = [str(named[int(n)]) for n in names]
        return names
    classes = _json_field(data_dir / "prepare.json", "classes")
    return [str(c) for c in classes] if classes else None


def _json_field(path: Path, name: str) -> Optional[list]:
    """A non-empty list field of a JSON object file, or None."""
    if not path.is_file():
        return None
    value = json.loads(path.read_text(encoding="utf-8")).get(name)
    return value if isinstance(value, list) and value else None


def lift_fairseq_etc(path: Path, dict_path: Optional[Path] = None):
    """A fairseq ``etc`` checkpoint (``etc-lift`` output, pre-trained or fine-tuned) read as an ``etc-lift``
    source: its state, stored model fields, dictionary (``dict_path``; else ``dict.txt`` next to it; else its
    task's data directory) and tokenizer (found as ``EtcModel.from_pretrained`` finds it). Returns a
    :class:`~etc_fairseq.models.lifting.LiftedModel` with the extra fields :func:`export_to_hf` takes under
    ``provenance``."""
    from etc_fairseq.checkpoint_io import plain_config
    from etc_fairseq.data.tokenizer_files import find_tokenizer
    from etc_fairseq.models.checkpoint_config import load_model_checkpoint
    from etc_fairseq.models.loading import resolve_data_dir
    from etc_fairseq.lift.fairseq_roberta import masked_lm_dictionary
    from etc_fairseq.models.lifting import LiftedModel

    ckpt = load_model_checkpoint(path)
    cfg = plain_config(ckpt["cfg"])
    model_fields = dict(plain_config(cfg["model"]))
    task_cfg = plain_config(cfg.get("task")) or {}
    task = task_cfg.get("_name")
    if dict_path is not None:
        data_dir = Path(dict_path).parent
    else:  # next to the checkpoint (an etc-lift output), else the task's data directory (a training run)
        data = str(task_cfg.get("data") or "").split(os.pathsep)[0]
        candidates = [path.parent] + ([path.parent / data] if data else [])
        data_dir = None
        for candidate in candidates:
            try:
                data_dir = resolve_data_dir(candidate.resolve(), task, str(candidate))
                break
            except FileNotFoundError:
                continue
        if data_dir is None:
            raise LiftError(f"{path}: no dict.txt next to it or in its data directory "
                            f"({', '.join(map(str, candidates))}); pass --dict")
        dict_path = data_dir / ("input0" if task == "sentence_prediction" else "") / DICT_FILE
    dictionary = masked_lm_dictionary(dict_path)
    symbols = list(dictionary.symbols)
    state = {k: v for k, v in ckpt["model"].items()}
    tokenizer, looked, meta = find_tokenizer(path.parent, data_dir)
    description, files = _description(tokenizer, looked)
    role_ids = dict(meta.get("global_token_ids") or {})
    if not role_ids and tokenizer is not None:
        role_ids = {r: tokenizer.global_token_id(r, dictionary) for r in tokenizer.global_token_pieces}
    lines = [f"read {len(state)} tensors; dictionary {dict_path} ({len(symbols)} symbols)"
             + (f"; tokenizer {looked[-1]}" if tokenizer is not None else "; no tokenizer found")]
    return LiftedModel("fairseq-etc", state, types.SimpleNamespace(**model_fields), lines, symbols=symbols,
                       tokenizer_files=files, tokenizer=description,
                       provenance={"fairseq_checkpoint": str(path), "labels": _labels(data_dir, task),
                                   "global_token_ids": role_ids})


def _description(tokenizer, looked: Sequence[str]) -> Tuple[Dict[str, Any], List[Path]]:
    """(``etc_tokenizer.json`` content, files) of a tokenizer :func:`~etc_fairseq.data.tokenizer_files.find_tokenizer` found."""
    if tokenizer is None:
        return {}, []
    if looked and str(looked[-1]).endswith(TOKENIZER_DESCRIPTION):
        path = Path(looked[-1])
        desc = json.loads(path.read_text(encoding="utf-8"))
        return desc, [path.parent / str(desc[k]) for k in TOKENIZER_FILE_FIELDS if desc.get(k)]
    files = [Path(f) for f in tokenizer.files]
    if tokenizer.kind == "sentencepiece":
        return {"type": "sentencepiece", "model": files[0].name, "global_token_pieces": {}}, files
    return {"type": "gpt2_bpe", "encoder_json": files[0].name, "vocab_bpe": files[1].name,
            "global_token_pieces": {}}, files


def role_ids_of_pieces(description: Mapping[str, Any], symbols: Sequence[str]) -> Dict[str, int]:
    """Pretrained role -> dictionary id of the pieces ``global_token_pieces`` names (BERT's special pieces carry
    fairseq's names in the dictionary)."""
    index = {s: i for i, s in enumerate(symbols)}
    out = {}
    for role, piece in (description.get("global_token_pieces") or {}).items():
        symbol = BERT_SPECIALS_IN_FAIRSEQ.get(piece, piece) if description.get("type") == "wordpiece" else piece
        if symbol in index:
            out[role] = index[symbol]
    return out


def export_lifted(lifted, head: Optional[str] = None, where: str = "SOURCE") -> HfExport:
    """:func:`export_to_hf` of an ``etc-lift`` source (:func:`~etc_fairseq.models.lifting.lift_source`'s result, or
    :func:`lift_fairseq_etc`'s); ``where`` names the source in errors."""
    from etc_fairseq.lift.fairseq_roberta import masked_lm_dictionary

    symbols = lifted.symbols
    if symbols is None and lifted.dict_file is not None:
        symbols = list(masked_lm_dictionary(lifted.dict_file).symbols)
    roles = lifted.provenance.get("global_token_ids")
    if roles is None and symbols is not None and lifted.tokenizer:
        roles = role_ids_of_pieces(lifted.tokenizer, symbols)
    if head is None and lifted.kind == "official-etc":
        head = "none"  # official ETC releases no heads: its LM head here is freshly initialised
    return export_to_hf(lifted.state, lifted.etc_cfg, symbols, head=head, labels=lifted.provenance.get("labels"),
                        global_token_ids=roles, tokenizer_description=lifted.tokenizer or None,
                        tokenizer_files=lifted.tokenizer_files, where=where)


# -------------------------------------------------------------------------------------------------------------
# Hugging Face ETC directories as an etc-lift source (the way back)
# -------------------------------------------------------------------------------------------------------------
def lift_huggingface_etc(directory: Path, arch: Optional[str], overrides: Mapping[str, Any], seed: Optional[int]):
    """An ETC Hugging Face directory -> a fairseq ``etc`` checkpoint's state (what
    :func:`~etc_fairseq.models.lifting.write_lifted` writes): the encoder and the directory's head under its
    fairseq name (``config.json``'s ``fairseq_head``, else :data:`DEFAULT_FAIRSEQ_HEADS`); an LM head and CPC
    head the directory lacks start fresh (seeded), as a lifted checkpoint's do."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from etc_fairseq.lift.fairseq_roberta import masked_lm_dictionary
    from etc_fairseq.lift.huggingface import fairseq_dictionary
    from etc_fairseq.models.lifting import LiftedModel, build_etc_model
    from etc_fairseq.models import config_for_arch

    from .configuration import EtcConfig

    config = EtcConfig.from_pretrained(str(directory), local_files_only=True)
    weights = directory / "model.safetensors"
    if not weights.is_file():
        raise LiftError(f"{weights}: missing (a Hugging Face ETC directory holds config.json and model.safetensors)")
    try:
        hf_state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise LiftError(f"{weights}: unreadable safetensors file ({e})") from None
    prefix = HF_ENCODER if any(k.startswith(HF_ENCODER) for k in hf_state) else "encoder."
    if (directory / DICT_FILE).is_file():
        symbols = list(masked_lm_dictionary(directory / DICT_FILE).symbols)
    else:
        from transformers import AutoTokenizer

        from .tokenization import dictionary_symbols

        symbols = dictionary_symbols(AutoTokenizer.from_pretrained(str(directory), local_files_only=True))
    if len(symbols) != config.vocab_size:
        raise LiftError(f"{directory / DICT_FILE}: {len(symbols)} symbols, {directory / 'config.json'} field "
                        f"'vocab_size' is {config.vocab_size}")
    fields = dict(config_to_dict(config), fixed_block_token=symbols[config.fixed_block_token_id])
    try:
        etc_cfg = config_for_arch(arch or "etc_base", **{**fields, **dict(overrides)})
    except ValueError as e:
        raise LiftError(str(e)) from None
    clash = sorted(k for k in overrides if k in fields and overrides[k] != fields[k])
    if clash:
        raise LiftError(f"{directory / 'config.json'}: field {clash[0]} = {fields[clash[0]]!r} comes with the model "
                        "(fine-tuning flags of fairseq-train change it later)")
    model = build_etc_model(etc_cfg, fairseq_dictionary(symbols), seed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    used = set()
    for k, v in hf_state.items():
        if k.startswith(prefix):
            key = SENTENCE_ENCODER + k[len(prefix):]
        elif k.startswith("lm_head."):
            key = LM_HEAD + k[len("lm_head."):]
        else:
            continue
        if key not in state or tuple(state[key].shape) != tuple(v.shape):
            raise LiftError(f"{weights}: tensor {k} {tuple(v.shape)} does not fit the ETC model config.json describes")
        state[key] = v.clone()
        used.add(k)
    state[LM_HEAD + "weight"] = state[SENTENCE_ENCODER + "embed_tokens.weight"]
    arch_name = (config.architectures or ["EtcModel"])[0]
    rest = {k: v for k, v in hf_state.items() if k not in used}
    lines = []
    if rest:
        module = sorted({k.split(".")[0] for k in rest})
        if len(module) != 1:
            raise LiftError(f"{weights}: tensors outside the encoder in several modules {module}")
        side = getattr(config, "token_classification_input", "long")
        head = config.fairseq_head or DEFAULT_FAIRSEQ_HEADS.get(arch_name) or DEFAULT_FAIRSEQ_HEADS.get((arch_name, side))
        if head is None:
            raise LiftError(f"{directory / 'config.json'}: architectures {arch_name!r} has no fairseq head")
        for k, v in rest.items():
            state[head + k[len(module[0]):]] = v.clone()
        lines.append(f"head {arch_name}.{module[0]} -> {head}")
    if not any(k.startswith("lm_head.") for k in hf_state):
        lines.append("created fresh (ETC's own initialisation): the LM head (this directory has none)")
    lines.append("created fresh: the CPC head (a pre-training head; Hugging Face directories have none)")
    tokenizer, files = {}, []
    desc_path = directory / TOKENIZER_DESCRIPTION
    if desc_path.is_file():
        tokenizer = json.loads(desc_path.read_text(encoding="utf-8"))
        files = [p for p in fairseq_side_files(directory) if p.name not in (DICT_FILE, TOKENIZER_DESCRIPTION)]
        named = [str(tokenizer[k]) for k in TOKENIZER_FILE_FIELDS if tokenizer.get(k)]
        missing = sorted(set(named) - {p.name for p in files})
        if missing:
            raise LiftError(f"{desc_path}: names {missing[0]}, which is not in {directory}")
    else:
        lines.append(f"no {TOKENIZER_DESCRIPTION} in {directory}: the fairseq side gets no tokenizer (tokenizer.json "
                     "is Hugging Face's)")
    return LiftedModel("huggingface-etc", state, etc_cfg, lines, symbols=symbols, tokenizer_files=files,
                       tokenizer=tokenizer, provenance={"huggingface_directory": str(directory)})
