"""Build a CONSTRUCTED Natural-Questions-format data set from real Wikipedia articles (not the real NQ).

The official NQ files cannot be downloaded here, so the example runs the whole pipeline on files in exactly
the official formats whose *documents* are real English Wikipedia text (the May 2016 dump sample the
project uses, CC BY-SA 3.0) and whose questions and annotations are made up by this script:

- a document is the article's first ``--paragraphs`` paragraphs, each ``<P> words </P>`` (a top-level
  long-answer candidate), the way NQ tokenizes Wikipedia HTML;
- the question is ``"which paragraph says WORD"`` where WORD (lower-cased, alphabetic, at least 6 letters)
  occurs in exactly one paragraph: the long answer is that paragraph and the short answer the first
  occurrence of WORD; one question in five gets a word found in no paragraph (null answer), and one in
  ten asks ``"does the article mention WORD"`` with a YES answer (long answer: the paragraph).

Train records have one annotation (full form, gzipped, with byte offsets and HTML flags, like
``nq-train-*.jsonl.gz``); dev records have five annotations (the simplified form; two of the five are
made null at random, or four of the five in one record out of five, so that the official "at least 2 of 5"
rule is exercised). Example ids are 9000000+n.

    python examples/nq/construct.py --dump WIKI.xml.bz2 --out DIR --train 150 --valid 40
writes DIR/nq-train.jsonl.gz and DIR/nq-dev.jsonl.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

WORD = re.compile(r"^[a-z]{6,}$")


def document_tokens(paragraphs: Sequence[Sequence[str]]) -> Tuple[List[Tuple[str, bool]], List[Tuple[int, int]]]:
    """``<P> words </P>`` per paragraph -> (tokens (text, is_html), candidate spans)."""
    toks: List[Tuple[str, bool]] = []
    cands = []
    for words in paragraphs:
        s = len(toks)
        toks += [("<P>", True)] + [(w, False) for w in words] + [("</P>", True)]
        cands.append((s, len(toks)))
    return toks, cands


def to_record(example_id: int, question: str, toks, cands, annotations, full: bool) -> dict:
    """An official-format record; ``annotations``: (candidate index or None, short (s, e) or None, yes_no)."""
    starts, pos = [], 0
    for t, _ in toks:
        starts.append(pos)
        pos += len(t.encode("utf-8")) + 1

    def span(s: int, e: int) -> dict:
        d = {"start_token": s, "end_token": e}
        if full:
            d.update(start_byte=starts[s] if s >= 0 else -1,
                     end_byte=starts[e - 1] + len(toks[e - 1][0].encode("utf-8")) if s >= 0 else -1)
        return d

    anns = []
    for cand, short, yn in annotations:
        la = dict(span(*cands[cand]), candidate_index=cand) if cand is not None else dict(span(-1, -1), candidate_index=-1)
        anns.append({"long_answer": la, "short_answers": [span(*short)] if short else [], "yes_no_answer": yn})
    rec = {"example_id": example_id, "question_text": question, "document_url": "https://en.wikipedia.org",
           "long_answer_candidates": [dict(span(s, e), top_level=True) for s, e in cands], "annotations": anns}
    if full:
        rec["document_html"] = " ".join(t for t, _ in toks)
        rec["document_tokens"] = [
            {"token": t, "html_token": h, "start_byte": starts[i], "end_byte": starts[i] + len(t.encode("utf-8"))}
            for i, (t, h) in enumerate(toks)
        ]
    else:
        rec["document_text"] = " ".join(t for t, _ in toks)
    return rec


def make_example(doc, example_id: int, rng: random.Random, n_par: int, max_words: int, n_ann: int, full: bool) -> Optional[dict]:
    pars = [p.split()[:max_words] for p in doc.paragraphs[:n_par]]
    toks, cands = document_tokens(pars)
    where = {}
    for k, words in enumerate(pars):
        for w in words:
            if WORD.match(w):
                where.setdefault(w, set()).add(k)
    unique = sorted(w for w, ks in where.items() if len(ks) == 1)
    if not unique:
        return None
    roll = rng.random()
    if roll < 0.2:
        question = f"which paragraph says {rng.choice(['zyxwvutsr', 'qqqqqqq', 'xylophonic'])}"
        gold = (None, None, "NONE")
    else:
        word = rng.choice(unique)
        k = next(iter(where[word]))
        first = cands[k][0] + 1 + pars[k].index(word)
        if roll < 0.3:
            question, gold = f"does the article mention {word}", (k, None, "YES")
        else:
            question, gold = f"which paragraph says {word}", (k, (first, first + 1), "NONE")
    anns = [gold] * n_ann
    if n_ann > 1:
        for i in rng.sample(range(n_ann), 4 if rng.random() < 0.2 else 2):
            anns[i] = (None, None, "NONE")
    return to_record(example_id, question, toks, cands, anns, full)


def main(argv=None) -> int:
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dump", type=Path, required=True, help="the Wikipedia dump sample (.xml.bz2)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train", type=int, default=150)
    p.add_argument("--valid", type=int, default=40)
    p.add_argument("--paragraphs", type=int, default=6)
    p.add_argument("--max-words", type=int, default=60, help="first N words of each paragraph")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    docs = [d for d in iter_wikipedia_documents(args.dump) if len(d.paragraphs) >= 3]
    # train and dev use disjoint articles; an article gives several examples (different questions)
    n_dev_docs = max(1, len(docs) // 4)
    out = {"train": [], "dev": []}
    for split, pool, n, n_ann, full in (("dev", docs[:n_dev_docs], args.valid, 5, False),
                                        ("train", docs[n_dev_docs:], args.train, 1, True)):
        tries = 0
        while len(out[split]) < n:
            tries += 1
            if tries > 50 * n:
                raise SystemExit(f"could not build {n} {split} examples")
            ex = make_example(rng.choice(pool), 9_000_000 + tries + (0 if split == "train" else 10**6), rng,
                              args.paragraphs, args.max_words, n_ann, full)
            if ex is not None:
                out[split].append(ex)
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / "nq-train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in out["train"])
    (args.out / "nq-dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out["dev"]), encoding="utf-8")
    print(f"wrote {args.out}/nq-train.jsonl.gz ({len(out['train'])} examples, full form) and "
          f"{args.out}/nq-dev.jsonl ({len(out['dev'])} examples, simplified form, 5 annotations)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
