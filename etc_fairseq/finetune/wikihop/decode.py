"""WikiHop decoding: the candidate head on the global features, its logits gathered at the CANDIDATE global
tokens (:func:`candidate_scores`, used by the ``etc_wikihop`` criterion and by ``etc-predict wikihop``; with
the ``wikihop_question`` head, the task's ``--question-cosine``, each candidate's logit plus the scaled
cosine of its output with the mean of the QUESTION global tokens' outputs; in ``--no-globals`` data the
candidates' and the query's pieces in the long input instead), and
``etc-predict wikihop``: the official prediction file ``{id: candidate}`` from a fine-tuned ``etc_wikihop``
checkpoint and a split prepared by ``etc-prepare wikihop`` (paper appendix C: the candidate whose global
token has the highest logit)."""
from __future__ import annotations

import argparse
import logging
from typing import Dict, List, Tuple

import torch

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import CheckpointLoadError, InputFormatError
from etc_fairseq.finetune.common.runner import add_predict_arguments, iterate_outputs, write_predictions
from etc_fairseq.finetune.common.selection import gather_by_type, mean_by_index, mean_by_type, question_mean
from etc_fairseq.structure.global_tokens import GlobalTokenType

logger = logging.getLogger(__name__)

#: name of the candidate-scoring head in ``model.task_heads`` (one logit per global token)
CANDIDATE_HEAD = "wikihop_candidates"
#: name of the question-cosine head (items [B, G, D], query [B, D] -> one logit per item), present with the
#: task's ``question_cosine``
QUESTION_HEAD = "wikihop_question"


def candidate_logits(head_logits: torch.Tensor, global_types: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The candidates' logits in candidate order: :func:`~etc_fairseq.finetune.common.selection.gather_by_type`
    at the CANDIDATE global tokens (head_logits float [B, G], global_types int64 [B, G] -> logits float32
    [B, C_max] with -inf past each example's candidates, mask bool [B, C_max])."""
    return gather_by_type(head_logits, global_types, GlobalTokenType.CANDIDATE)


def candidate_scores(model, sample, features: torch.Tensor, extra) -> Tuple[torch.Tensor, torch.Tensor]:
    """Apply the candidate head (plus the question-cosine head's logits when the model has it) to one vector
    per candidate and return what :func:`candidate_logits` returns (logits float32 [B, C_max], mask bool
    [B, C_max]).

    The vectors: the CANDIDATE tokens' outputs in ``extra["global_features"]`` float [B, G, D], the question
    the mean of the QUESTION tokens'; in data prepared with ``--no-globals`` (``sample["target"]`` holds
    ``long_candidate``), the mean of each candidate's pieces in ``features`` float [B, W, D] (the long
    outputs; W < L for a windowed model, whose unread candidates are masked), the question the mean of the
    query pieces'."""
    target = sample["target"]
    candidate_head = model.task_heads[CANDIDATE_HEAD]
    question_head = model.task_heads[QUESTION_HEAD] if QUESTION_HEAD in model.task_heads else None
    if "long_candidate" in target:  # --no-globals data: it always holds question_len too
        c_max = target["candidate_correct"].size(1)
        pooled, present = mean_by_index(features, target["long_candidate"], c_max)  # [B, C_max, D], [B, C_max]
        logits = candidate_head(pooled).squeeze(-1).float()  # [B, C_max]
        if question_head is not None:
            query = question_mean(features, target["question_len"][:, 0])  # [B, D]
            logits = logits + question_head(pooled, query).float()
        return logits.masked_fill(~present, float("-inf")), present
    global_features = extra["global_features"]  # [B, G, D]
    global_types = sample["net_input"]["global_types"]  # [B, G]
    head_logits = candidate_head(global_features).squeeze(-1).float()  # [B, G]
    if question_head is not None:
        query = mean_by_type(global_features, global_types, GlobalTokenType.QUESTION)  # [B, D]
        head_logits = head_logits + question_head(global_features, query).float()
    return candidate_logits(head_logits, global_types)


def predict_candidates(model, task, split: str, side: List[dict], batch_size: int, device: str) -> Dict[str, str]:
    """``{id: best candidate}`` for every example of ``split`` (``side``: its side records)."""
    if CANDIDATE_HEAD not in model.task_heads:
        raise CheckpointLoadError(f"the checkpoint has no {CANDIDATE_HEAD!r} head: not an etc_wikihop model")
    out: Dict[str, str] = {}
    for sample, features, extra in iterate_outputs(model, task, split, batch_size, device):
        logits, _ = candidate_scores(model, sample, features, extra)  # [B, C_max]
        best = logits.argmax(dim=-1).tolist()  # [B]
        for row, k in zip(sample["id"].tolist(), best):
            rec = side[row]
            if k >= len(rec["candidates"]):
                raise InputFormatError(f"{split} example {row} (id {rec['id']!r}): candidate {k} out of range; "
                                 "side file and prepared data disagree")
            out[rec["id"]] = rec["candidates"][k]
    return out


def _run(args: argparse.Namespace) -> int:
    return write_predictions(args, predict_candidates)


PREDICT = Subcommand(
    name="wikihop",
    help="WikiHop predictions {id: candidate}",
    description="Run a fine-tuned etc_wikihop checkpoint over a split prepared by `etc-prepare wikihop` and write "
    "the official prediction format {id: candidate} (the candidate with the highest logit).",
    add_arguments=add_predict_arguments,
    run=_run,
)
