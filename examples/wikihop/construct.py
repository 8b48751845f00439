"""Build a CONSTRUCTED WikiHop-format data set from real Wikipedia paragraphs (not the real WikiHop).

The official QAngaroo files cannot be downloaded here, so the example and the end-to-end test run the
whole pipeline on files in exactly the official format whose *supports* are real English Wikipedia
paragraphs (the May 2016 dump sample the project uses, CC BY-SA 3.0) and whose queries, candidates and
answers are made up by this script:

- each instance takes one paragraph (one of its first three) from each of ``--supports`` different
  articles;
- ``--query paragraph_mentions`` (the default): the candidates are those articles' titles, lower-cased (as
  in WikiHop); the query is ``"paragraph_mentions WORD"``, where WORD (lower-cased, alphabetic, at least 5
  letters) occurs in exactly one of the supports; the answer is the title of that support's article. For
  ETC this is (reasoned from the layout) a chain of four attention steps (WORD's pieces match the query;
  the paragraph's CONTEXT token gathers the match; the title's mentions read their CONTEXT token; the
  candidate reads its mentions), learnt only as a whole: no step earns anything alone. A quarter to a
  third of the titles never occur in the kept text, so no link can lead to them.
- ``--query mentioned_as``: a probe of the candidate-mention links alone. The candidates are one word per
  support (alphabetic, at least 5 letters, lower-cased) that occurs in no other support, so each candidate
  is mentioned, in its own support only, and being mentioned tells nothing apart; the query is
  ``"mentioned_as WORD"``, WORD the answer as the text first spells it (a cased vocabulary gives
  "Angola" and "angola" different pieces). A candidate's global token reads only its mentions, so the model
  must find the query's word among the mentions of the right candidate: two attention steps (the
  mention's pieces match the query's global tokens; the candidate reads its mentions), across the input as
  in the copy probe of examples/nextsent. Comparing the query with the candidate *strings* solves it; the
  model never sees those strings, only the text and the links.
- ``--swap-queries`` (a control): every dev record gets the next dev record's query, answers unchanged.

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
SURFACE_WORD = re.compile(r"(?<![\w-])[A-Za-z]{5,}(?![\w-])")


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


#: the query kinds (``--query``), documented in the module docstring
QUERIES = ("paragraph_mentions", "mentioned_as")


def make_records(docs: Sequence, n: int, supports: int, rng: random.Random, split: str,
                 query: str = "paragraph_mentions") -> List[dict]:
    """``n`` CONSTRUCTED records of kind ``query`` (one of :data:`QUERIES`) from ``docs`` (each with
    ``title`` and ``paragraphs``)."""
    if query not in QUERIES:
        raise ValueError(f"query must be one of {QUERIES}, got {query!r}")
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
        if query == "mentioned_as":
            # one word per support that no other support has (the candidates), as the text writes it
            surface = []  # per support: {lower-cased word: its first spelling in the text}
            for p in paragraphs:
                first = {}
                for w in SURFACE_WORD.findall(p):
                    first.setdefault(w.lower(), w)
                surface.append(first)
            # what the mention linker (candidate_pattern: case-insensitive, not inside a longer \w run) finds
            runs = [set(re.findall(r"\w+", p.lower())) for p in paragraphs]
            picks = []
            for k in range(supports):
                own = sorted(set(surface[k]) - set().union(*(runs[j] for j in range(supports) if j != k)))
                if not own:
                    break
                picks.append(rng.choice(own))
            if len(picks) < supports:
                continue
            answer_k = rng.randrange(supports)
            candidates = picks
            unique = [surface[answer_k][picks[answer_k]]]
        else:
            answer_k = rng.randrange(supports)
            candidates = titles
            words = [set(WORD.findall(p.lower())) for p in paragraphs]
            unique = sorted(words[answer_k] - set().union(*(w for k, w in enumerate(words) if k != answer_k)))
        if not unique:
            continue
        word = rng.choice(unique)
        records.append(
            {
                "id": f"CONSTRUCTED_{split}_{len(records)}",
                "query": f"{query} {word}",
                "candidates": candidates,
                "supports": paragraphs,
                "answer": candidates[answer_k],
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
    p.add_argument("--query", choices=QUERIES, default="paragraph_mentions",
                   help="the kind of CONSTRUCTED query (module docstring)")
    p.add_argument("--swap-queries", action="store_true",
                   help="a control: every dev record gets the next dev record's query, its answer unchanged (a model "
                        "that reads the query falls to chance; one that scores candidates without it does not)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    docs = _documents(args.dump, args.max_articles)
    if len(docs) <= args.train_articles + args.supports:
        raise SystemExit(f"{args.dump}: only {len(docs)} articles with >= 3 paragraphs")
    rng = random.Random(args.seed)
    train = make_records(docs[: args.train_articles], args.train, args.supports, rng, "train", args.query)
    valid = make_records(docs[args.train_articles :], args.valid, args.supports, rng, "dev", args.query)
    if args.swap_queries:  # a control: the answers stay, the query is another record's
        queries = [r["query"] for r in valid]
        for i, r in enumerate(valid):
            r["query"] = queries[(i + 1) % len(valid)]
    test = [{k: v for k, v in r.items() if k != "answer"} for r in valid]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, recs in (("train", train), ("dev", valid), ("test", test)):
        (args.out / f"{name}.json").write_text(json.dumps(recs, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {len(train)} train, {len(valid)} dev, {len(test)} test CONSTRUCTED records "
          f"({len(docs)} articles) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
