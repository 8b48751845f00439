"""The word-overlap baseline on HotpotQA-format files: an official prediction file that ``etc-evaluate
hotpotqa`` scores like a model's.

For each record: the sentence sharing the most content words with the question
(:func:`etc_fairseq.text.content_words`; ties go to the earlier sentence) gives the answer, its paragraph's
title, and the supporting facts, that sentence and whichever of its neighbours in the paragraph (the one
before, the one after) shares more content words with the question (the one before on a tie; none when the
paragraph has one sentence). It is the lexical floor of the CONSTRUCTED next-sentence records of
``construct.py --generate``, whose answer is the title of the question's paragraph and whose supporting facts
are the two sentences around the gap; on the real HotpotQA it is a weak floor (no bridge entity, no yes/no).

    python examples/hotpotqa/overlap.py --records DIR/dev.json --out DIR/overlap-pred.json
    etc-evaluate hotpotqa --predictions DIR/overlap-pred.json --gold DIR/dev.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List, Optional, Sequence, Tuple


def overlap_prediction(record: dict) -> Tuple[str, List[list]]:
    """``(answer, supporting facts [[title, sentence index], ...])`` for one record (module docstring)."""
    from etc_fairseq.text import content_words

    question = content_words(record["question"])
    shared = [[len(question & content_words(s)) for s in sentences] for _, sentences in record["context"]]
    best = max(((n, -p, -k) for p, row in enumerate(shared) for k, n in enumerate(row)), default=None)
    if best is None:
        return "", []
    p, k = -best[1], -best[2]
    title, row = record["context"][p][0], shared[p]
    facts = [[title, k]]
    neighbours = [j for j in (k - 1, k + 1) if 0 <= j < len(row)]
    if neighbours:
        facts.append([title, max(neighbours, key=lambda j: (row[j], -j))])
    return title, sorted(facts, key=lambda f: f[1])


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.prepare.atomic import atomic_file

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=Path, required=True, help="a HotpotQA-format JSON file (answers not needed)")
    p.add_argument("--out", type=Path, required=True, help="the prediction file to write")
    args = p.parse_args(argv)
    records = json.loads(args.records.read_text(encoding="utf-8"))
    pred: dict = {"answer": {}, "sp": {}}
    for r in records:
        pred["answer"][r["_id"]], pred["sp"][r["_id"]] = overlap_prediction(r)
    with atomic_file(args.out) as f:
        f.write(json.dumps(pred) + "\n")
    print(f"wrote the word-overlap predictions of {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
