"""``etc-predict openkp``: the top 5 keyphrases of every document of a prepared split, by logit, de-duplicated
uncased, in the official format: jsonl ``{"url": ..., "KeyPhrases": [[w, ...], ...]}``.

Documents that ``etc-prepare openkp`` had to skip as empty (no word piece at all; listed in the split's meta)
get an empty prediction, so that the file covers every url of the source file.
"""
from __future__ import annotations

import argparse
import json
import logging
from typing import List

from etc_fairseq.commands import Subcommand

logger = logging.getLogger(__name__)


def phrase_words(words: List[str], flat_index: int, max_n: int) -> List[str]:
    """The words of the n-gram at ``flat_index = w * max_n + n - 1``."""
    w, n = divmod(flat_index, max_n)
    return words[w : w + n + 1]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.runner import add_predict_arguments

    add_predict_arguments(p)
    p.add_argument("--top-k", type=int, default=5, help="keyphrases per document (default 5, the official metric's deepest cut-off)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.data.structured import read_meta, read_side
    from etc_fairseq.finetune.common.runner import iterate_outputs, load_checkpoint, parse_overrides
    from etc_fairseq.models.openkp import top_distinct_batch
    from etc_fairseq.prepare.atomic import atomic_file

    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    model, task, _ = load_checkpoint(args.path, args.data, parse_overrides(args.model_overrides), args.device)
    if not hasattr(task, "keyphrase_logits"):
        raise ValueError(f"{args.path}: not an etc_openkp checkpoint (task {type(task).__name__})")
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
