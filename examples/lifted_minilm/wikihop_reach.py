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

With ``--arm NAME FILE...`` (``etc-predict wikihop`` outputs, {id: candidate}, one per seed) it also scores
each arm on three disjoint sets of records: reachable at the shortest length given (``short``), reachable at
the longest only (``long_only``), and at neither (``neither``): what the longer input adds is the second set;
``long`` (every record reachable at the longest length) and ``all`` too. With ``--pairs A:B...`` each pair of
arms is compared record by record on every set (:func:`paired_difference`).

The global length at long length L is L / 4, as ``run.sh`` prepares the arms.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

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


def reachable_ids(records, tokenizer, long_len: int) -> Tuple[List[str], List[str]]:
    """(ids of the records whose WORD is kept, ids of the reachable ones; :func:`word_and_answer_kept`) over
    ``records`` (:class:`~etc_fairseq.finetune.wikihop.schema.WikiHopRecord`, default query) laid out at ``long_len``."""
    from etc_fairseq.finetune.wikihop.convert import LayoutOptions, build_example

    opts = LayoutOptions(max_long_len=long_len, max_global_len=long_len // 4)
    word_kept, reachable = [], []
    for rec in records:
        kind, word = rec.query.split(maxsplit=1)
        if kind != "paragraph_mentions":
            raise ValueError(f"record {rec.id!r}: query {rec.query!r} is not construct.py's default query")
        pieces, _ = tokenizer.encode_words([word])
        kept, reached = word_and_answer_kept(build_example(rec, tokenizer, opts),
                                             pieces, rec.candidates.index(rec.answer))
        if kept:
            word_kept.append(rec.id)
        if reached:
            reachable.append(rec.id)
    return word_kept, reachable


def counts(records: Sequence, word_kept: Sequence[str], reachable: Sequence[str]) -> Dict[str, int]:
    """The counts written per length: ``records``, ``word_kept``, ``reachable``."""
    return {"records": len(records), "word_kept": len(word_kept), "reachable": len(reachable)}


def reach(records, tokenizer, long_len: int) -> Dict[str, int]:
    """:func:`counts` of :func:`reachable_ids` at ``long_len``."""
    return counts(records, *reachable_ids(records, tokenizer, long_len))


def subsets(all_ids: Sequence[str], short_reachable: Sequence[str], long_reachable: Sequence[str]) -> Dict[str, List[str]]:
    """The three disjoint sets, in ``all_ids``' order: reachable at the short length, at the long one only, at neither."""
    short, long_ = set(short_reachable), set(long_reachable)
    return {"short": [i for i in all_ids if i in short],
            "long_only": [i for i in all_ids if i in long_ and i not in short],
            "neither": [i for i in all_ids if i not in long_ and i not in short]}


def accuracy(gold: Dict[str, str], ids: Sequence[str], predictions: Dict[str, str]) -> Optional[float]:
    """``etc-evaluate wikihop``'s accuracy (percent; a record not predicted counts wrong) over ``ids`` only;
    None for no ids."""
    from etc_fairseq.finetune.wikihop.metrics import evaluate

    if not ids:
        return None
    return evaluate(predictions, [(i, gold[i]) for i in ids]).accuracy


@functools.lru_cache(maxsize=None)
def _bootstrap_interval():
    """paired.py's bootstrap_interval (the scripts of this folder are files, not a package)."""
    spec = importlib.util.spec_from_file_location("lifted_minilm_paired", Path(__file__).with_name("paired.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.bootstrap_interval


def paired_difference(gold: Dict[str, str], ids: Sequence[str], a: Sequence[Dict[str, str]],
                      b: Sequence[Dict[str, str]], resamples: int, rng: random.Random) -> Optional[Dict[str, object]]:
    """Arm ``a`` minus arm ``b`` over ``ids`` (each a list of prediction files, one per seed): per record, each
    arm's correctness (the schema's ``is_correct``, a missing prediction wrong) averaged over its files; the
    mean difference in points and its 95 % percentile interval from resampling the records; None for no ids."""
    from etc_fairseq.finetune.wikihop.schema import is_correct

    if not ids:
        return None
    def mean_correct(files, i):
        return sum(is_correct(f.get(i), gold[i]) for f in files) / len(files)
    diffs = [100.0 * (mean_correct(a, i) - mean_correct(b, i)) for i in ids]
    low, high = _bootstrap_interval()(diffs, resamples, rng)
    return {"records": len(ids), "difference": sum(diffs) / len(diffs), "records_interval": [low, high]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.finetune.wikihop.metrics import load_predictions
    from etc_fairseq.finetune.wikihop.schema import read_wikihop
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=Path, required=True, help="construct.py's dev.json (default query)")
    p.add_argument("--pretrain-dir", type=Path, required=True, help="the tokenizer, as etc-prepare wikihop's")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 512])
    p.add_argument("--arm", nargs="+", action="append", default=[], metavar=("NAME", "FILE"),
                   help="an arm's name and its prediction files (etc-predict wikihop, one per seed); repeatable")
    p.add_argument("--pairs", nargs="+", default=[], metavar="A:B",
                   help="arms compared record by record on every set: A minus B, with a 95 %% interval over records")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples of --pairs")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap of --pairs")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    records = read_wikihop(args.records)
    tokenizer = WordPieceTokenizer.from_pretrain_dir(args.pretrain_dir)
    ids = {n: reachable_ids(records, tokenizer, n) for n in args.lengths}
    out = {str(n): counts(records, kept, reached) for n, (kept, reached) in ids.items()}
    for n, c in out.items():
        print(f"long {n}: WORD kept in {c['word_kept']}, reachable (WORD and an answer mention in one support) "
              f"{c['reachable']} of {c['records']}")
    if args.arm:
        if len(args.lengths) < 2:
            p.error("--arm needs two --lengths: the sets are reachable at the shortest, at the longest only, at neither")
        short, long_ = min(args.lengths), max(args.lengths)
        sets = subsets([r.id for r in records], ids[short][1], ids[long_][1])
        gold = {r.id: r.answer for r in records}
        long_reachable = set(ids[long_][1])
        every = {"all": [r.id for r in records], "long": [r.id for r in records if r.id in long_reachable]}
        out["subsets"] = {"short": short, "long": long_, "ids": sets}
        out["arms"], preds_of = {}, {}
        chosen = {**every, **sets}  # every set an arm is scored on, in the order written
        for name, *files in args.arm:
            if not files:
                p.error(f"--arm {name}: expected prediction files after the name")
            preds = preds_of[name] = [load_predictions(Path(f)) for f in files]
            arm = {"files": files}
            for key, sel in chosen.items():
                per_seed = [accuracy(gold, sel, pr) for pr in preds]
                arm[key] = {"records": len(sel), "per_seed": per_seed,
                            "mean": None if not sel else sum(per_seed) / len(per_seed)}
            out["arms"][name] = arm
            print(f"{name}: " + "; ".join(f"{k} ({arm[k]['records']}) {arm[k]['mean']:.1f}" for k in chosen
                                          if arm[k]["mean"] is not None))
        pairs = [pair.split(":") for pair in args.pairs]
        for pair in pairs:
            if len(pair) != 2 or not all(n in preds_of for n in pair):
                p.error(f"--pairs {':'.join(pair)}: expected A:B, two names given to --arm ({', '.join(preds_of)})")
        if pairs:
            rng = random.Random(args.seed)
            out["pairs"] = []
            for a, b in pairs:
                pair = {"a": a, "b": b}
                for key, sel in chosen.items():
                    pair[key] = paired_difference(gold, sel, preds_of[a], preds_of[b], args.resamples, rng)
                out["pairs"].append(pair)
                print(f"{a} - {b}: " + "; ".join(
                    f"{k} {d['difference']:+.1f} [{d['records_interval'][0]:+.1f}, {d['records_interval'][1]:+.1f}]"
                    for k in chosen if (d := pair[k]) is not None))
    elif args.pairs:
        p.error("--pairs compares arms: give them with --arm")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
