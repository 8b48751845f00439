"""Which CONSTRUCTED WikiHop-format records an arm can answer through the candidate links, at each long length.

For ``construct.py``'s default query (``paragraph_mentions WORD``: the answer is the title of the one support
that contains WORD) the path the layout offers runs from WORD's pieces, through their support, to a linked
mention of the answer. A record is *reachable* at a length when the text ``etc-prepare wikihop`` keeps there
(the paper's max-heap crop) still holds WORD and, in the same support, a mention of the answer. A record
whose answer is never mentioned is unreachable at every length (a quarter to a half of the titles never
occur in the kept text). This reads apart, for a 512-token arm, losing the answer's path to the crop from
failing to follow it.

    python examples/lifted_minilm/wikihop_reach.py --records RAW/dev.json --pretrain-dir PRE/data/bin \
        --lengths 2048 512 --out reach.json

The global length at long length L is L / 4, as ``run.sh`` prepares the arms.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np


def word_and_answer_kept(arrays: Dict[str, np.ndarray], word_pieces: Sequence[int], answer: int) -> Tuple[bool, bool]:
    """(WORD's pieces occur in a kept support, and in a support that also keeps a linked mention of candidate
    ``answer``), from one example's prepared arrays: ``long_tokens`` int [L], ``long_context`` int [L] (0 for
    the query, s + 1 for support s), ``long_links`` int [L, K] (linked candidates, -1 none)."""
    tokens, context = arrays["long_tokens"].tolist(), arrays["long_context"]
    n = len(word_pieces)
    word_supports = {int(context[i]) for i in range(len(tokens) - n + 1)
                     if context[i] != 0 and tokens[i:i + n] == list(word_pieces)}
    mention_supports = {int(c) for c in context[(arrays["long_links"] == answer).any(axis=1)]}
    return bool(word_supports), bool(word_supports & mention_supports)


def reach(records, tokenizer, long_len: int) -> Dict[str, int]:
    """Counts over ``records`` (:class:`~etc_fairseq.finetune.wikihop.schema.WikiHopRecord`, default query)
    laid out at ``long_len``: ``word_kept`` and ``reachable`` (:func:`word_and_answer_kept`)."""
    from etc_fairseq.finetune.wikihop.convert import LayoutOptions, build_example

    opts = LayoutOptions(max_long_len=long_len, max_global_len=long_len // 4)
    word_kept = reachable = 0
    for rec in records:
        kind, word = rec.query.split(maxsplit=1)
        if kind != "paragraph_mentions":
            raise ValueError(f"record {rec.id!r}: query {rec.query!r} is not construct.py's default query")
        pieces, _ = tokenizer.encode_words([word])
        kept, reached = word_and_answer_kept(build_example(rec, tokenizer, opts),
                                             pieces, rec.candidates.index(rec.answer))
        word_kept, reachable = word_kept + kept, reachable + reached
    return {"records": len(records), "word_kept": word_kept, "reachable": reachable}


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.finetune.wikihop.schema import read_wikihop
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=Path, required=True, help="construct.py's dev.json (default query)")
    p.add_argument("--pretrain-dir", type=Path, required=True, help="the tokenizer, as etc-prepare wikihop's")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 512])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    records = read_wikihop(args.records)
    tokenizer = WordPieceTokenizer.from_pretrain_dir(args.pretrain_dir)
    out = {str(n): reach(records, tokenizer, n) for n in args.lengths}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for n, c in out.items():
        print(f"long {n}: WORD kept in {c['word_kept']}, reachable (WORD and an answer mention in one support) "
              f"{c['reachable']} of {c['records']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
