"""Loading a trained ETC checkpoint from a local directory as an :class:`~etc_fairseq.hub.EtcHubInterface`
(``EtcModel.from_pretrained``, like fairseq's ``RobertaModel.from_pretrained``): the checkpoint passes both
gates of the safe loader (:func:`~etc_fairseq.models.checkpoint_config.load_model_checkpoint`) before fairseq
reads it, its task is registered (:func:`~etc_fairseq.models.registration.register_components`), and the
tokenizer is found next to the model or its data (:func:`~etc_fairseq.data.tokenizer_files.find_tokenizer`).
What is read, and the input layouts: :mod:`etc_fairseq.hub`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Union

from etc_fairseq.data.tokenizer_files import find_tokenizer
from etc_fairseq.errors import CheckpointLoadError, MissingFileError
from etc_fairseq.hub import LM_HEAD_LIFTED, EtcHubInterface

from .checkpoint_config import load_model_checkpoint
from .registration import register_components

PathLike = Union[str, os.PathLike]


def from_pretrained(
    model_name_or_path: PathLike,
    checkpoint_file: str = "model.pt",
    data_name_or_path: str = ".",
    spm_model: Optional[PathLike] = None,
    gpt2_encoder_json: Optional[PathLike] = None,
    gpt2_vocab_bpe: Optional[PathLike] = None,
    **kwargs,
) -> EtcHubInterface:
    """Load a trained ETC checkpoint from a local directory (what ``EtcModel.from_pretrained`` does).

    Args:
        model_name_or_path: a local directory holding the checkpoint (no URLs, no archive names: nothing
            is downloaded).
        checkpoint_file: the checkpoint's file name in that directory.
        data_name_or_path: the data directory with ``dict.txt``; relative to the model directory when it
            starts with ``.`` (fairseq's convention), else a path.
        spm_model / gpt2_encoder_json / gpt2_vocab_bpe: tokenizer files (else found by
            :func:`~etc_fairseq.data.tokenizer_files.find_tokenizer`).
        kwargs: fairseq config overrides (as ``hub_utils.from_pretrained`` takes them), e.g. ``dropout``.
    Returns:
        an :class:`EtcHubInterface` in evaluation mode (dropout off; ``.train()`` switches it on).
    Raises:
        FileNotFoundError: a directory or file is missing (named).
        CheckpointLoadError: the checkpoint references globals outside torch's
            weights-only allowlist, or its config names anything but an ETC model with known, typed fields
            (nothing of it is executed or built).
    """
    from fairseq import hub_utils
    from fairseq.models import MODEL_REGISTRY

    model_dir = Path(model_name_or_path)
    if not model_dir.is_dir():
        raise MissingFileError(
            f"{model_name_or_path}: no such model directory (EtcModel.from_pretrained reads local files "
            "only; nothing is downloaded)"
        )
    data_name_or_path = str(data_name_or_path)
    data_dir = (model_dir / data_name_or_path) if data_name_or_path.startswith(".") else Path(data_name_or_path)
    data_dir = data_dir.resolve()
    task_name = None
    for name in checkpoint_file.split(os.pathsep):
        path = model_dir / name
        if not path.is_file():
            raise MissingFileError(f"{path}: no such checkpoint file")
        state = load_model_checkpoint(path, mmap=True)  # both gates; fairseq's loader (wrapped) checks again
        task_name = task_name or _task_name(state)
        lifted_from = (state.get("extra_state") or {}).get("lifted_from") or {}
        lm_head_trained = lifted_from.get(LM_HEAD_LIFTED, True) is not False
        del state
    data_dir = resolve_data_dir(data_dir, task_name, data_name_or_path)
    register_components()  # the checkpoint's task must be registered for fairseq to build it
    tokenizer, looked, meta = find_tokenizer(model_dir, data_dir, spm_model, gpt2_encoder_json, gpt2_vocab_bpe)
    kwargs.setdefault("load_checkpoint_heads", True)
    try:
        x = hub_utils.from_pretrained(str(model_dir.resolve()), checkpoint_file, str(data_dir), archive_map=None, **kwargs)
    except CheckpointLoadError as e:  # the model's refusal of a tensor does not know the file
        if str(model_dir / checkpoint_file) in str(e):
            raise
        raise CheckpointLoadError(f"{model_dir / checkpoint_file}: {e}") from None
    model = x["models"][0]
    if not isinstance(model, MODEL_REGISTRY["etc"]):
        raise CheckpointLoadError(
            f"{model_dir / checkpoint_file}: holds a {type(model).__name__}, not an ETC model "
            "(for RoBERTa checkpoints use etc-lift or RobertaModel.from_pretrained)"
        )
    role_ids = meta.get("global_token_ids") or {}
    if not role_ids and getattr(tokenizer, "global_token_pieces", None):  # an etc-lift output directory
        role_ids = {r: tokenizer.global_token_id(r, x["task"].source_dictionary) for r in tokenizer.global_token_pieces}
    hub = EtcHubInterface(
        x["args"], x["task"], model, tokenizer,
        max_sentence_pieces=int(meta.get("max_sentence_pieces", 0) or 0), tokenizer_search=looked,
        global_role_ids=role_ids, lm_head_trained=lm_head_trained,
    )
    return hub.eval()  # dropout off: the same text gives the same features (call .train() to fine-tune)


def _task_name(state: Dict[str, Any]) -> Optional[str]:
    cfg = state.get("cfg") or {}
    task = cfg.get("task") if isinstance(cfg, dict) else None
    if isinstance(task, dict):
        return task.get("_name")
    args = state.get("args")
    return getattr(args, "task", None)


def resolve_data_dir(data_dir: Path, task_name: Optional[str], given: str = "") -> Path:
    """The data directory to give the checkpoint's task: for fairseq's ``sentence_prediction`` the
    directory holding ``input0/dict.txt`` (and ``label/``) -- also when ``input0`` itself is given -- else
    the one holding ``dict.txt``.

    Raises:
        FileNotFoundError: the dictionary the task reads is missing (the path is named).
    """
    if task_name == "sentence_prediction":
        if not (data_dir / "input0" / "dict.txt").is_file() and data_dir.name == "input0" \
                and (data_dir / "dict.txt").is_file():
            data_dir = data_dir.parent  # given bin/input0: the task itself appends input0/
        need = data_dir / "input0" / "dict.txt"
    else:
        need = data_dir / "dict.txt"
    if not need.is_file():
        raise MissingFileError(
            f"{need}: no such file (data_name_or_path={given!r}; task {task_name or '?'} reads its dictionary "
            "there)"
        )
    return data_dir
