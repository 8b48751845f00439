"""OpenKP decoding: n-gram logits -> the best distinct n-grams (:func:`top_distinct_batch`, used by the
criterion and ``etc-predict openkp``), and their hits among the gold phrase ids (:func:`hits_at`).

``etc-predict openkp``: the top 5 keyphrases of every document of a prepared split, by logit, de-duplicated
uncased, in the official format: jsonl ``{"url": ..., "KeyPhrases": [[w, ...], ...]}``.

Documents that ``etc-prepare openkp`` had to skip as empty (no word piece at all; listed in the split's meta)
get an empty prediction, so that the file covers every url of the source file.
"""
from __future__ import annotations

import argparse
import json
import logging
from typing import List, Sequence

import torch

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.guards import positive_int

logger = logging.getLogger(__name__)


def top_distinct_ngrams(scores: Sequence[float], phrase_ids: Sequence[int], k: int = 5) -> List[int]:
    """Flat indices of the ``k`` best n-grams with distinct phrase ids (uncased de-duplication).

    Args:
        scores: one score per flat n-gram (higher = better).
        phrase_ids: the n-gram's phrase id, < 0 = not a candidate.
    Returns:
        up to ``k`` flat indices, best first; ties go to the smaller index.
    """
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    seen, out = set(), []
    for i in order:
        pid = phrase_ids[i]
        if pid < 0 or pid in seen:
            continue
        seen.add(pid)
        out.append(i)
        if len(out) == k:
            break
    return out


def top_distinct_batch(logits: torch.Tensor, ngram_ids: torch.Tensor, k: int = 5) -> List[List[int]]:
    """:func:`top_distinct_ngrams` for each document of a batch.

    Args:
        logits: float [B, W, N]; ngram_ids: int [B, W, N].
    Returns:
        per document, up to ``k`` flat indices (``w * N + n - 1``) best first.
    """
    B = logits.size(0)
    flat_ids = ngram_ids.reshape(B, -1)
    flat = logits.detach().float().reshape(B, -1).masked_fill(flat_ids < 0, float("-inf"))
    out = []
    for b in range(B):
        n_valid = int((flat_ids[b] >= 0).sum())
        # a few times k candidates almost always hold k distinct phrases; fall back to all of them
        m = min(n_valid, 8 * k)
        while True:
            vals, idx = flat[b].topk(m) if m > 0 else (flat[b][:0], flat_ids[b][:0])
            picked = top_distinct_ngrams(vals.tolist(), flat_ids[b][idx].tolist(), k)
            if len(picked) == k or m >= n_valid:
                break
            m = min(n_valid, 4 * m)
        out.append([int(idx[i]) for i in picked])
    return out


def hits_at(predicted_ids: Sequence[int], gold_ids: Sequence[int], ks: Sequence[int] = (1, 3, 5)) -> List[int]:
    """How many of the first ``k`` (distinct) predicted phrase ids are gold ids (ids < 0 never match)."""
    gold = {g for g in gold_ids if g >= 0}
    return [sum(1 for p in predicted_ids[:k] if p in gold) for k in ks]


def phrase_words(words: List[str], flat_index: int, max_n: int) -> List[str]:
    """The words of the n-gram at ``flat_index = w * max_n + n - 1``."""
    w, n = divmod(flat_index, max_n)
    return words[w : w + n + 1]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.runner import add_predict_arguments

    add_predict_arguments(p)
    p.add_argument("--top-k", type=positive_int, default=5, help="keyphrases per document (default 5, the official metric's deepest cut-off)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.data.structured import read_meta, read_side
    from etc_fairseq.finetune.common.runner import iterate_outputs, load_checkpoint, parse_overrides
    from etc_fairseq.prepare.atomic import atomic_file

    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")
    model, task, _ = load_checkpoint(args.path, args.data, parse_overrides(args.model_overrides), args.device)
    if not hasattr(task, "keyphrase_logits"):
        raise CheckpointLoadError(f"{args.path}: not an etc_openkp checkpoint (task {type(task).__name__})")
    side = read_side(args.data, args.split)
    meta = read_meta(args.data, args.split)
    n = 0
    with atomic_file(args.output) as out:
        for sample, features, _extra in iterate_outputs(model, task, args.split, args.batch_size, args.device):
            target = sample["target"]
            ngram_ids = target["ngram_ids"]
            max_n = ngram_ids.size(-1)
            logits = model.task_heads["openkp_keyphrase"](features, target["word_of_piece"], ngram_ids.size(1))
            for row, picked in zip(sample["id"].tolist(), top_distinct_batch(logits, ngram_ids, args.top_k)):
                rec = side[row]
                phrases = [phrase_words(rec["words"], i, max_n) for i in picked]
                out.write(json.dumps({"url": rec["url"], "KeyPhrases": phrases}, ensure_ascii=False) + "\n")
                n += 1
        for url in meta.get("empty_urls", []):
            out.write(json.dumps({"url": url, "KeyPhrases": []}) + "\n")
            n += 1
    print(f"wrote {n} predictions to {args.output}")
    return 0


PREDICT = Subcommand(
    name="openkp",
    help="OpenKP: top 5 keyphrases per page (official jsonl)",
    description="Run a fine-tuned etc_openkp checkpoint over a prepared split and write jsonl "
    '{"url": ..., "KeyPhrases": [[w, ...], ...]}: the top-k n-grams (1-5 words) by logit, de-duplicated '
    "uncased. Score it with etc-evaluate openkp --predictions FILE --gold OFFICIAL.jsonl.",
    add_arguments=_add_arguments,
    run=_run,
)
