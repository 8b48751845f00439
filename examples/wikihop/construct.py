"""Build a CONSTRUCTED WikiHop-format data set from real Wikipedia paragraphs (not the real WikiHop).

The official QAngaroo files cannot be downloaded here, so the example and the end-to-end test run the
whole pipeline on files in exactly the official format whose *supports* are real English Wikipedia
paragraphs (the May 2016 dump sample the project uses, CC BY-SA 3.0) and whose queries, candidates and
answers are made up by this script:

- each instance takes one paragraph (one of its first three) from each of ``--supports`` different
  articles; the candidates are those articles' titles, lower-cased (as in WikiHop);
- the query is ``"paragraph_mentions WORD"``, where WORD (lower-cased, alphabetic, at least 5 letters) occurs
  in exactly one of the supports; the answer is the title of that support's article.

Train and valid instances use disjoint articles (the first ``--train-articles`` articles that have at least
three paragraphs feed train, the rest valid). Ids start with ``CONSTRUCTED_``. A ``--test`` file is the
valid file without answers.

    python examples/wikihop/construct.py --dump WIKI.xml.bz2 --out DIR --train 200 --valid 50
writes DIR/train.json, DIR/dev.json, DIR/test.json.
"""
from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import List, Optional, Sequence

WORD = re.compile(r"[a-z]{5,}")


def _documents(dump: Path, max_articles: Optional[int] = None):
    """Articles with at least three paragraphs, in dump order (the first ``max_articles`` of them)."""
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for d in iter_wikipedia_documents(dump):
        if len(d.paragraphs) >= 3:
            docs.append(d)
            if max_articles is not None and len(docs) >= max_articles:
                break
    return docs


def make_records(docs: Sequence, n: int, supports: int, rng: random.Random, split: str) -> List[dict]:
    """``n`` CONSTRUCTED records from ``docs`` (each with ``title`` and ``paragraphs``)."""
    records: List[dict] = []
    attempts = 0
    while len(records) < n:
        attempts += 1
        if attempts > 50 * n:
            raise ValueError(f"could not build {n} {split} records from {len(docs)} articles")
        chosen = rng.sample(list(docs), supports)
        titles = [d.title.lower() for d in chosen]
        if len(set(titles)) < supports:
            continue
        paragraphs = [rng.choice(d.paragraphs[:3]) for d in chosen]
        words = [set(WORD.findall(p.lower())) for p in paragraphs]
        answer_k = rng.randrange(supports)
        unique = sorted(words[answer_k] - set().union(*(w for k, w in enumerate(words) if k != answer_k)))
        if not unique:
            continue
        word = rng.choice(unique)
        records.append(
            {
                "id": f"CONSTRUCTED_{split}_{len(records)}",
                "query": f"paragraph_mentions {word}",
                "candidates": titles,
                "supports": paragraphs,
                "answer": titles[answer_k],
            }
        )
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dump", type=Path, required=True, help="Wikipedia XML dump (the project's sample)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train", type=int, default=200, help="train records")
    p.add_argument("--valid", type=int, default=50, help="valid (dev) records")
    p.add_argument("--supports", type=int, default=4, help="supports (= candidates) per record")
    p.add_argument("--train-articles", type=int, default=70, help="articles reserved for train")
    p.add_argument("--max-articles", type=int, default=None, help="read only the first N usable articles")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    docs = _documents(args.dump, args.max_articles)
    if len(docs) <= args.train_articles + args.supports:
        raise SystemExit(f"{args.dump}: only {len(docs)} articles with >= 3 paragraphs")
    rng = random.Random(args.seed)
    train = make_records(docs[: args.train_articles], args.train, args.supports, rng, "train")
    valid = make_records(docs[args.train_articles :], args.valid, args.supports, rng, "dev")
    test = [{k: v for k, v in r.items() if k != "answer"} for r in valid]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, recs in (("train", train), ("dev", valid), ("test", test)):
        (args.out / f"{name}.json").write_text(json.dumps(recs, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {len(train)} train, {len(valid)} dev, {len(test)} test CONSTRUCTED records "
          f"({len(docs)} articles) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
