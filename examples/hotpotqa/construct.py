"""Build CONSTRUCTED HotpotQA-format files from real Wikipedia paragraphs (not the real HotpotQA).

The official HotpotQA files cannot be downloaded here, so the example (run.sh) and the tests run the
pipeline on files in exactly the official distractor format whose paragraphs are real English Wikipedia
text (the May 2016 dump sample the project uses, CC BY-SA 3.0; titles = article titles). Two kinds:

- by default, five records whose questions, answers and supporting facts were written by hand for the first
  sentences of five articles: the pipeline runs, nothing can be learnt from them;

      python examples/hotpotqa/construct.py --dump WIKI.xml.bz2 --out DIR
  writes DIR/constructed_train.json, DIR/constructed_dev.json (the same records) and
  DIR/constructed_test.json (without answers);

- ``--generate``: a training set, with labels constructed automatically (:func:`hotpot_record`). Each record
  is a record of the next-sentence task (:mod:`etc_fairseq.finetune.nextsent.schema`: a sentence removed from
  a paragraph, held-out records from held-out articles only) laid out as HotpotQA's distractor setting: the
  question is the removed sentence, the context the gapped paragraph among ``--distractors`` first
  paragraphs of other articles (one paragraph per title, 10 paragraphs by default as in HotpotQA), the
  answer the title of the question's article (a span of the context: HotpotQA's answer search falls back to
  the supporting paragraphs' titles), and the supporting facts the two sentences around the gap (the one
  the question followed, when there is one, and the one that followed it). Finding the answer is matching
  the sentence with its paragraph; the supporting facts need the sentence order around the gap.

      python examples/hotpotqa/construct.py --dump WIKI.xml.bz2 --out DIR --generate --train 1000 --valid 200
  writes DIR/train.json, DIR/dev.json and DIR/test.json (dev without answers).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

# (title, number of leading sentences of the article's first paragraph used as the HotpotQA paragraph)
CONSTRUCTED_PARAGRAPHS = (("Anarchism", 3), ("Autism", 3), ("Alabama", 3), ("Abraham Lincoln", 3), ("Aristotle", 3))

# CONSTRUCTED questions about those real paragraphs: (_id, question, answer, supporting facts, type)
CONSTRUCTED_QUESTIONS = (
    ("c-alabama", "Which state is bordered by Tennessee to the north and is the 30th-most extensive of the "
     "50 United States?", "Alabama", [["Alabama", 1], ["Alabama", 2]], "bridge"),
    ("c-lincoln", "Was Abraham Lincoln the 16th President of the United States?", "yes",
     [["Abraham Lincoln", 0]], "comparison"),
    ("c-aristotle", "Who became the guardian of Aristotle after his father died?", "Proxenus of Atarneus",
     [["Aristotle", 1]], "bridge"),
    ("c-anarchism", "Does anarchism consider the state to be desirable?", "no",
     [["Anarchism", 0], ["Anarchism", 2]], "comparison"),
    ("c-autism", "Which disorder do parents usually notice signs of in the first two years of a child's life?",
     "Autism", [["Autism", 0], ["Autism", 1]], "bridge"),
)


def constructed_paragraphs(dump_path):
    """``[[title, [sentences]], ...]`` from the real Wikipedia articles named in CONSTRUCTED_PARAGRAPHS
    (HotpotQA style: sentences after the first start with a space)."""
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    want = dict(CONSTRUCTED_PARAGRAPHS)
    found = {}
    for doc in iter_wikipedia_documents(dump_path):
        if doc.title in want and doc.title not in found:
            sents = split_sentences(doc.paragraphs[0])[: want[doc.title]]
            found[doc.title] = [s if k == 0 else " " + s for k, s in enumerate(sents)]
        if len(found) == len(want):
            break
    assert set(found) == set(want), f"articles missing from the dump sample: {set(want) - set(found)}"
    return [[t, found[t]] for t, _ in CONSTRUCTED_PARAGRAPHS]


def constructed_records(dump_path):
    """CONSTRUCTED HotpotQA-format records (real paragraphs, written questions); each record gets the
    paragraphs in a different rotation."""
    paragraphs = constructed_paragraphs(dump_path)
    out = []
    for i, (_id, q, a, sp, typ) in enumerate(CONSTRUCTED_QUESTIONS):
        ctx = paragraphs[i:] + paragraphs[:i]
        out.append({"_id": _id, "question": q, "answer": a, "supporting_facts": sp, "context": ctx, "type": typ,
                    "level": "easy"})
    return out


def hotpot_record(rec) -> dict:
    """One next-sentence record (:class:`~etc_fairseq.finetune.nextsent.schema.NextSentRecord`, one paragraph
    per title) as a HotpotQA distractor-format record (see the module docstring; sentences after a
    paragraph's first start with a space, as in HotpotQA)."""
    from etc_fairseq.errors import InputFormatError

    titles = [t for t, _ in rec.paragraphs]
    if len(set(titles)) != len(titles):
        raise InputFormatError(f"record {rec.id!r}: a title holds several paragraphs ({titles}); HotpotQA's "
                               "supporting facts name a sentence by (title, index): make it with same_article=0")
    facts = [f for f in (rec.support, rec.answer) if f is not None]
    return {
        "_id": rec.id,
        "question": rec.question,
        "answer": rec.article,
        "supporting_facts": [[titles[p], s] for p, s in facts],
        "context": [[t, [x if k == 0 else " " + x for k, x in enumerate(sents)]] for t, sents in rec.paragraphs],
        "type": "bridge",
        "level": "CONSTRUCTED",
    }


def generated_records(dump_path, train: int, valid: int, seed: int, distractors: int = 9):
    """``{"train": [...], "dev": [...]}`` HotpotQA-format records (:func:`hotpot_record`) from next-sentence
    records over the dump's articles, ``distractors`` other articles' first paragraphs each; held-out
    records use held-out articles only (:func:`etc_fairseq.finetune.nextsent.convert.build_records`)."""
    from etc_fairseq.finetune.nextsent.convert import build_records, read_articles

    records, _, _ = build_records(read_articles(dump_path), train, valid, seed, same_article=0,
                                  distractors=distractors, distractor_paragraphs=1)
    return {"train": [hotpot_record(r) for r in records["train"]], "dev": [hotpot_record(r) for r in records["valid"]]}


def without_answers(records):
    """The records as a test file has them: ``_id``, ``question`` and ``context`` only."""
    return [{k: r[k] for k in ("_id", "question", "context")} for r in records]


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.guards import positive_int
    from etc_fairseq.prepare.atomic import atomic_file

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dump", type=Path, required=True, help="the Wikipedia dump sample (.xml.bz2)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--generate", action="store_true", help="a training set with constructed labels (module docstring)")
    p.add_argument("--train", type=positive_int, default=1000, help="--generate: training records (default 1000)")
    p.add_argument("--valid", type=positive_int, default=200, help="--generate: held-out records (default 200)")
    p.add_argument("--distractors", type=positive_int, default=9, help="--generate: other articles' paragraphs "
                   "per record (default 9: 10 paragraphs, as HotpotQA's distractor setting)")
    p.add_argument("--seed", type=int, default=1, help="--generate: everything is a function of the seed")
    args = p.parse_args(argv)
    if args.generate:
        splits = generated_records(args.dump, args.train, args.valid, args.seed, args.distractors)
        splits["test"] = without_answers(splits["dev"])
        args.out.mkdir(parents=True, exist_ok=True)
        for name, recs in splits.items():
            with atomic_file(args.out / f"{name}.json") as f:
                f.write(json.dumps(recs, indent=1) + "\n")
        print(f"wrote {len(splits['train'])} train, {len(splits['dev'])} dev CONSTRUCTED records (test: dev without "
              f"answers) to {args.out}")
        return 0
    records = constructed_records(args.dump)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "constructed_train.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    (args.out / "constructed_dev.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    test = without_answers(records)
    (args.out / "constructed_test.json").write_text(json.dumps(test, indent=1), encoding="utf-8")
    print(f"wrote {len(records)} CONSTRUCTED records (train = dev; test without answers) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
