"""Write CONSTRUCTED OpenKP-format files (train.jsonl, dev.jsonl) from real Wikipedia articles.

The official OpenKP files cannot be downloaded here. Each page below is built from one REAL article of the
Wikipedia sample (May 2016 dump shipped with gensim 4.4.0, CC BY-SA 3.0); everything else is CONSTRUCTED:

- text: a "related pages" line (titles of 2-3 other articles of the sample), the article's title, then its
  paragraphs; punctuation dropped (OpenKP's clean-body text has none);
- VDOM: the related line as a small-font inline node at the top, the title as a bold 32 px heading block,
  every paragraph as a 16 px block, in a 620 px column (made-up but plausible pixel positions and sizes);
- KeyPhrases (written by rule for this example, not by annotators): the title, and the most frequent
  two-word phrase of capitalised words in the body (if it occurs at least twice and is not the title).

Usage: python examples/openkp/construct.py --dump DUMP.xml.bz2 --out DIR [--valid 20] [--seed 1]
"""
import argparse
import collections
import json
import random
import re
from pathlib import Path

from etc_fairseq.prepare.atomic import atomic_file
from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents


def words_of(text):
    return re.findall(r"\w+", text)


def feature(x, width, y, height, block, inline, heading, leaf, font, bold, parent=None):
    node = [x, width, y, height, block, inline, heading, leaf, font, bold]
    return [float(v) for v in node + (parent if parent is not None else node)]


def frequent_capitalised_bigram(words, exclude):
    counts = collections.Counter(
        (a, b) for a, b in zip(words, words[1:]) if a[:1].isupper() and b[:1].isupper() and a.isalpha() and b.isalpha()
    )
    for (a, b), n in counts.most_common():
        if n >= 2 and f"{a} {b}".lower() != exclude:
            return [a, b]
    return None


def build_page(doc, related_titles, index):
    title = words_of(doc.title)
    paragraphs = [w for w in (words_of(p) for p in doc.paragraphs) if len(w) >= 6]
    page = [0.0, 1280.0, 0.0, 20000.0, 1.0, 0.0, 0.0, 0.0, 16.0, 0.0]
    words, nodes, y = [], [], 12.0

    def add(ws, feats):
        nodes.append({"Id": 0, "text": " ".join(ws), "feature": feats, "start_idx": len(words), "end_idx": len(words) + len(ws)})
        words.extend(ws)

    related = [w for t in related_titles for w in words_of(t)]
    add(related, feature(48, 620, y, 14, 0, 1, 0, 1, 11, 0, page))
    y += 40
    add(title, feature(48, 620, y, 40, 1, 0, 1, 1, 32, 1, page))
    y += 60
    for p in paragraphs:
        height = 24.0 * (1 + len(p) // 12)
        add(p, feature(48, 620, y, height, 1, 0, 0, 1, 16, 0, page))
        y += height + 20
    keyphrases = [title]
    body = [w for p in paragraphs for w in p]
    second = frequent_capitalised_bigram(body, " ".join(title).lower())
    if second:
        keyphrases.append(second)
    url = f"http://constructed.example/{index}/{'_'.join(title)}"
    return {"url": url, "text": " ".join(words), "VDOM": json.dumps(nodes), "KeyPhrases": keyphrases}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dump", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--valid", type=int, default=20, help="pages for dev.jsonl (the rest go to train.jsonl)")
    p.add_argument("--train", type=int, default=None, help="at most N pages for train.jsonl (default: all the rest)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    docs = [d for d in iter_wikipedia_documents(args.dump) if words_of(d.title) and sum(len(words_of(x)) >= 6 for x in d.paragraphs) >= 3]
    rng = random.Random(args.seed)
    rng.shuffle(docs)
    titles = [d.title for d in docs]
    pages = []
    for i, d in enumerate(docs):
        others = [t for t in rng.sample(titles, 4) if t != d.title][: rng.choice([2, 3])]
        pages.append(build_page(d, others, i))
    train = pages[args.valid :] if args.train is None else pages[args.valid : args.valid + args.train]
    splits = {"dev.jsonl": pages[: args.valid], "train.jsonl": train}
    for name, recs in splits.items():
        with atomic_file(args.out / name) as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{args.out / name}: {len(recs)} CONSTRUCTED pages")


if __name__ == "__main__":
    main()
