"""Next-sentence decoding: one score per sentence of an example, from the ``nextsent_sentences`` head
(:func:`sentence_scores`, used by the ``etc_nextsent`` criterion and ``etc-predict nextsent``).

With sentence global tokens (the ETC layout and its flat ablation) a sentence's score is the head applied
to its SENTENCE global token's output; without them (``--no-globals``) it is the head applied to the mean of
its long tokens' outputs, so every variant is scored by the same dense layer from one vector per sentence.
A model with the ``nextsent_question`` head (the task's ``--question-cosine``) adds to that logit the
sentence vector's scaled cosine with the question's vector
(:func:`~etc_fairseq.finetune.common.selection.question_mean`).
"""
from __future__ import annotations

import argparse
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.finetune.common.runner import add_predict_arguments, iterate_outputs, write_predictions
from etc_fairseq.finetune.common.selection import gather_by_type, mean_by_index, question_mean
from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.tracing import static_graph

#: name of the sentence-scoring head in ``model.task_heads`` (features [.., D] -> one logit)
SENTENCE_HEAD = "nextsent_sentences"
#: name of the support head (the same shape), present when the task's ``support_loss_weight`` > 0
SUPPORT_HEAD = "nextsent_support"
#: name of the question-cosine head (items [.., S, D], query [.., D] -> one logit per item), present with
#: the task's ``question_cosine``; it adds to the answer head's logits only
QUESTION_HEAD = "nextsent_question"


def sentence_scores(model, sample, features: torch.Tensor, extra, head_name: str = SENTENCE_HEAD
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scores of every sentence by the head ``head_name`` (the answer's, or :data:`SUPPORT_HEAD`): (logits
    float32 [B, S] with -inf past each example's sentences, mask bool [B, S]); column ``k`` is the
    example's ``k``-th sentence in input order. ``S`` is at least the batch's
    most sentences (in a static graph, :func:`etc_fairseq.tracing.static_graph`, at least the long length).

    Per example: from its SENTENCE global tokens' outputs when every sentence has one, else from the mean
    of each sentence's long tokens (data prepared with ``--no-globals``, or an example some of whose sentence
    tokens the global budget cut), so that every sentence in the input is scored. A model without global
    features (``extra["global_features"]`` None: ``roberta_window``) always pools, over the long tokens it
    read; a sentence none of whose tokens it read is masked (-inf). Both are computed for every batch and
    one is picked per example, so an example's scores do not depend on the other examples of its batch, and both heads' inputs (the long and the global side of
    the last layer) take part in every step (a zero gradient where not picked), as DistributedDataParallel
    requires."""
    head = model.task_heads[head_name]
    question_head = model.task_heads[QUESTION_HEAD] if (
        head_name == SENTENCE_HEAD and QUESTION_HEAD in model.task_heads) else None
    query = None
    if question_head is not None:
        question_len = sample["target"].get("question_len")
        if question_len is None:
            raise ConfigError("--question-cosine needs the question_len field, and this data was prepared without "
                              "it: prepare it again with etc-prepare nextsent")
        query = question_mean(features, question_len[:, 0])  # [B, D]

    def score(vectors: torch.Tensor) -> torch.Tensor:  # float [B, T, D] -> float32 [B, T]
        logits = head(vectors).squeeze(-1).float()
        if question_head is not None:
            logits = logits + question_head(vectors, query).float()
        return logits

    num = sample["target"]["num_sentences"][:, 0]  # [B]
    # columns: the batch's most sentences; in a static graph (no host read) the long length, which bounds
    # it (every kept sentence has at least one long token)
    s_max = sample["target"]["long_sentence"].size(1) if static_graph(num) else max(int(num.max()), 1)
    pooled, present = mean_by_index(features, sample["target"]["long_sentence"], s_max)  # [B, S, D], [B, S]
    p_logits = score(pooled)  # [B, S]
    # a sentence without tokens in the features (beyond a windowed model's reach) is not scored
    p_mask = (torch.arange(s_max, device=num.device).unsqueeze(0) < num.unsqueeze(1)) & present  # [B, S]
    if extra.get("global_features") is None:  # a model without global tokens (roberta_window)
        return p_logits.masked_fill(~p_mask, float("-inf")), p_mask
    global_types = sample["net_input"]["global_types"]
    g_logits, g_mask = gather_by_type(score(extra["global_features"]), global_types,
                                      GlobalTokenType.SENTENCE)  # [B, N_max]
    width = max(g_logits.size(1), s_max)
    g_logits = F.pad(g_logits, (0, width - g_logits.size(1)), value=float("-inf"))  # [B, W]
    g_mask = F.pad(g_mask, (0, width - g_mask.size(1)), value=False)
    p_logits = F.pad(p_logits, (0, width - s_max), value=float("-inf"))
    p_mask = F.pad(p_mask, (0, width - s_max), value=False)
    # global when every sentence of the example has its global token, so that every sentence is scored
    use_global = (g_mask.sum(dim=1) == num).unsqueeze(1) & num.gt(0).unsqueeze(1)  # [B, 1]
    mask = torch.where(use_global, g_mask, p_mask)  # [B, W]
    logits = torch.where(use_global, g_logits, p_logits)  # [B, W]
    return logits.masked_fill(~mask, float("-inf")), mask


def predict_scores(model, task, split: str, side: List[dict], batch_size: int, device: str) -> Dict[str, List[float]]:
    """``{id: [score per sentence of the record, in input order]}`` for every example of ``split``; a
    sentence that truncation dropped, or that a windowed model did not read, gets ``None`` (ranked below
    every scored one)."""
    if SENTENCE_HEAD not in model.task_heads:
        raise CheckpointLoadError(f"the checkpoint has no {SENTENCE_HEAD!r} head: not an etc_nextsent model")
    out: Dict[str, List[float]] = {}
    for sample, features, extra in iterate_outputs(model, task, split, batch_size, device):
        logits, mask = sentence_scores(model, sample, features, extra)
        for row, scores, scored in zip(sample["id"].tolist(), logits.tolist(), mask.tolist()):
            rec = side[row]
            full = [[None] * n for n in rec["paragraph_sizes"]]
            for (p, k), score, ok in zip(rec["sentences"], scores, scored):
                full[p][k] = score if ok else None
            out[rec["id"]] = [x for para in full for x in para]
    return out


def _run(args: argparse.Namespace) -> int:
    return write_predictions(args, predict_scores, indent=None)


PREDICT = Subcommand(
    name="nextsent",
    help="next-sentence scores {id: [score per sentence]} (CONSTRUCTED task)",
    description="Run a fine-tuned etc_nextsent checkpoint over a split prepared by `etc-prepare nextsent` and "
    "write one score per kept sentence; `etc-evaluate nextsent` ranks them.",
    add_arguments=add_predict_arguments,
    run=_run,
)
