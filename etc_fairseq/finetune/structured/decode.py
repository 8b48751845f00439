"""Structured decoding: each label level's head applied to the encoder outputs (used by the
``etc_structured`` criterion and ``etc-predict structured``), and ``etc-predict structured``.

- record level: ``task_heads.structured_record``, a :class:`~etc_fairseq.encoder.heads.PooledClassifier` on
  the output of the first CLS global token, or (the task's ``--record-head-input long_mean``) on the mean of
  the long tokens' outputs (:func:`record_logits`);
- global level: ``task_heads.structured_global``, one dense layer from every global token's output to the
  class logits (:func:`global_logits`);
- span level: ``task_heads.structured_span``, start and end logits on every long token
  (:func:`span_logits`); the best span (start <= end, at most ``max_span_len`` long tokens, highest start +
  end logit) is :func:`best_spans`, mapped to words through each long token's word.
"""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional, Tuple

import torch

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.finetune.common.runner import add_predict_arguments, iterate_outputs, write_predictions
from etc_fairseq.structure.global_tokens import GlobalTokenType

#: the head of each label level in ``model.task_heads``
HEADS = {"record": "structured_record", "global": "structured_global", "span": "structured_span"}


def first_of_type(global_types: torch.Tensor, token_type: GlobalTokenType) -> torch.Tensor:
    """int64 [B]: the index of each row's first global token of ``token_type`` (0 when a row has none).

    Args:
        global_types: int64 [B, G].
    """
    hit = global_types.eq(int(token_type))  # [B, G]
    return hit.to(torch.int8).argmax(dim=1)  # argmax returns the first maximum


#: what the record head reads: the first CLS global token, or the mean of the long tokens' outputs
RECORD_HEAD_INPUTS = ("global_cls", "long_mean")


def record_head_input(extra, global_types: torch.Tensor, features: Optional[torch.Tensor] = None,
                      long_padding: Optional[torch.Tensor] = None, head_input: str = "global_cls") -> torch.Tensor:
    """float [B, D]: what the record head reads: the first CLS global token's output (``extra["global_features"]``
    float [B, G, D]; ``global_types`` int64 [B, G]), or with ``head_input="long_mean"`` the mean of the long
    outputs ``features`` float [B, W, D] over the tokens that are not ``long_padding`` (bool [B, L]); W <= L: a
    model that reads only the first W long tokens (``roberta_window``) is pooled over those."""
    if head_input == "long_mean":
        real = (~long_padding[:, : features.size(1)]).unsqueeze(-1).to(features.dtype)  # [B, W, 1]
        return (features * real).sum(1) / real.sum(1).clamp(min=1)  # [B, D]
    if head_input != "global_cls":
        raise ValueError(f"record head input {head_input!r}: expected one of {RECORD_HEAD_INPUTS}")
    feats = extra["global_features"]  # [B, G, D]
    if feats is None:
        raise ConfigError("the record head on the CLS global token needs a model with global tokens; a model "
                         "without them (roberta_window) takes --record-head-input long_mean")
    idx = first_of_type(global_types, GlobalTokenType.CLS)  # [B]
    return feats[torch.arange(feats.size(0), device=feats.device), idx]  # [B, D]


def record_logits(model, extra, global_types: torch.Tensor, features: Optional[torch.Tensor] = None,
                  long_padding: Optional[torch.Tensor] = None, head_input: str = "global_cls") -> torch.Tensor:
    """float [B, C]: the record head on :func:`record_head_input` (the same arguments)."""
    return model.task_heads[HEADS["record"]](record_head_input(extra, global_types, features, long_padding, head_input))


def global_logits(model, extra) -> torch.Tensor:
    """float [B, G, C]: the class logits of every global token."""
    return model.task_heads[HEADS["global"]](extra["global_features"])


def span_logits(model, features: torch.Tensor, long_padding: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(start, end) float32 [B, L] logits of every long token, -inf at padding (``features`` float [B, L, D],
    ``long_padding`` bool [B, L])."""
    logits = model.task_heads[HEADS["span"]](features).float()  # [B, L, 2]
    logits = logits.masked_fill(long_padding.unsqueeze(-1), float("-inf"))
    return logits[..., 0], logits[..., 1]


def best_spans(start: torch.Tensor, end: torch.Tensor, max_len: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The highest-scoring span of each row: ``start[s] + end[e]`` with ``s <= e < s + max_len`` (ties: the
    smallest start, then the shortest).

    Args:
        start, end: float [B, L] (-inf where a span may not start / end).
        max_len: most long tokens in a span (>= 1).
    Returns:
        (first, last) int64 [B] long-token indices.
    """
    if max_len < 1:
        raise ConfigError(f"max_len must be >= 1, got {max_len}")
    B, L = start.shape
    best = torch.full((B,), float("-inf"), dtype=start.dtype, device=start.device)
    first = torch.zeros(B, dtype=torch.long, device=start.device)
    last = torch.zeros(B, dtype=torch.long, device=start.device)
    for w in range(min(max_len, L)):  # spans of w + 1 tokens: start s, end s + w
        score = start[:, : L - w] + end[:, w:]  # [B, L - w]
        value, s = score.max(dim=1)  # first maximum: smallest start
        better = value > best
        best = torch.where(better, value, best)
        first = torch.where(better, s, first)
        last = torch.where(better, s + w, last)
    return first, last


def span_words(first: torch.Tensor, last: torch.Tensor, long_word: torch.Tensor) -> torch.Tensor:
    """int64 [B, 2]: the words of long tokens ``first`` / ``last`` (int64 [B]) through ``long_word`` int64
    [B, L] (each long token's word)."""
    rows = torch.arange(long_word.size(0), device=long_word.device)
    return torch.stack([long_word[rows, first], long_word[rows, last]], dim=1)


def predict_split(model, task, split: str, side: List[dict], batch_size: int, device: str) -> Dict[str, object]:
    """``{id: prediction}`` (the forms of :mod:`.metrics`) for every example of ``split``."""
    level = task.label_level
    if HEADS[level] not in model.task_heads:
        raise CheckpointLoadError(f"the checkpoint has no {HEADS[level]!r} head: not an etc_structured model trained at the "
                         f"{level} level (the data's prepare.json says {level})")
    out: Dict[str, object] = {}
    for sample, features, extra in iterate_outputs(model, task, split, batch_size, device):
        rows = sample["id"].tolist()
        if level == "record":
            pred = record_logits(model, extra, sample["net_input"]["global_types"], features,
                                 sample["net_input"]["src_tokens"].eq(task.dictionary.pad()),
                                 task.cfg.record_head_input).argmax(-1).tolist()
            for row, k in zip(rows, pred):
                out[side[row]["id"]] = task.classes[k]
        elif level == "global":
            pred = global_logits(model, extra).argmax(-1).tolist()  # [B][G]
            for row, ks in zip(rows, pred):
                rec = side[row]
                labels: List[object] = [None] * rec["num_globals"]
                for g, original in enumerate(rec["globals"]):
                    if original >= 0:
                        labels[original] = task.classes[ks[g]]
                out[rec["id"]] = labels
        else:
            start, end = span_logits(model, features, sample["net_input"]["src_tokens"].eq(task.dictionary.pad()))
            first, last = best_spans(start, end, task.cfg.max_span_len)
            words = span_words(first, last, sample["target"]["long_word"]).tolist()
            for row, (a, b) in zip(rows, words):
                out[side[row]["id"]] = [a, b] if 0 <= a <= b else None
    return out


def _run(args: argparse.Namespace) -> int:
    return write_predictions(args, predict_split)


PREDICT = Subcommand(
    name="structured",
    help="predictions of an etc_structured checkpoint {id: class | [class per global token] | [first, last] words}",
    description="Run a fine-tuned etc_structured checkpoint over a split prepared by `etc-prepare structured` and "
    "write {id: prediction}: the class of the record (record level), a class per global token in the record's "
    "order, null for a token etc-prepare cut (global level), or the best [first, last] words (span level).",
    add_arguments=add_predict_arguments,
    run=_run,
)
