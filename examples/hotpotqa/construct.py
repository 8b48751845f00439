"""Build CONSTRUCTED HotpotQA-format files from real Wikipedia paragraphs (not the real HotpotQA).

The official HotpotQA files cannot be downloaded here, so the example (run.sh) and the tests run the
pipeline on files in exactly the official distractor format whose paragraphs are real English Wikipedia
text (the first sentences of real articles of the May 2016 dump sample the project uses, CC BY-SA 3.0;
titles = article titles) and whose questions, answers and supporting facts were written by hand for them.

    python examples/hotpotqa/construct.py --dump WIKI.xml.bz2 --out DIR
writes DIR/constructed_train.json, DIR/constructed_dev.json (the same records) and DIR/constructed_test.json
(without answers).
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dump", type=Path, required=True, help="the Wikipedia dump sample (.xml.bz2)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    args = p.parse_args(argv)
    records = constructed_records(args.dump)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "constructed_train.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    (args.out / "constructed_dev.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    test = [{k: r[k] for k in ("_id", "question", "context")} for r in records]
    (args.out / "constructed_test.json").write_text(json.dumps(test, indent=1), encoding="utf-8")
    print(f"wrote {len(records)} CONSTRUCTED records (train = dev; test without answers) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
