"""``etc-prepare nextsent``: the CONSTRUCTED next-sentence task (:mod:`.schema`) from real Wikipedia articles
-> ETC structured fine-tuning data, HotpotQA-shaped.

Input: a Wikipedia XML dump (``--dump``) or the project's real sample (``--wikipedia-sample``). Articles are cleaned as for pre-training, paragraphs split into sentences,
articles split into train and held-out by the seed, records made by :func:`.schema.make_records`.

Layout (shared with HotpotQA, :func:`etc_fairseq.finetune.common.layout.layout_example`): long = CLS,
question pieces, then per paragraph its title and sentences; global = CLS, one QUESTION token per question
piece, per paragraph a CONTEXT, a TITLE and one SENTENCE token per sentence. Paragraphs are unordered
contexts (l2l cut at their boundaries). ``--flat-structure``: the same tokens without the hierarchy and the
context cut (the paper's ablation); ``--no-globals``: no global tokens but the CLS (long input only: the
"local attention only" ablation; the answer is then scored from the long tokens of each sentence, see the
criterion).

Label: ``answer_index`` int16 [1], the answer's index among the example's kept sentences (in input order),
-1 when truncation dropped it (counted; such an example scores 0). ``num_sentences`` int16 [1] kept
sentences. ``support_index`` int16 [1]: the index of :attr:`.schema.NextSentRecord.support` (the sentence
before the answer in its paragraph) among the kept sentences, -1 if none or dropped. ``question_len`` int16
[1]: the question's pieces in the long input (long positions 1 .. question_len). Side data: ``id``,
``sentences`` (the kept sentences' ``[paragraph, sentence]``) and ``paragraph_sizes`` (sentences per
paragraph of the record).
The records themselves are written to ``DIR/{split}.records.json`` (for baselines and ``etc-evaluate``).
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.commands import Subcommand
from etc_fairseq.errors import ConfigError
from etc_fairseq.guards import fraction, non_negative_int, positive_int

logger = logging.getLogger(__name__)

DEFAULT_MAX_LONG_LEN = 4096
DEFAULT_MAX_GLOBAL_LEN = 256


def read_articles(dump: Path, max_articles: Optional[int] = None):
    """The dump's cleaned articles as :class:`.schema.Article` (paragraphs split into sentences), dump order."""
    from etc_fairseq.finetune.nextsent.schema import Article
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents
    from etc_fairseq.progress import progress

    out = []
    seen = set()
    for d in progress(iter_wikipedia_documents(dump), desc=f"reading {Path(dump).name}", unit="doc"):
        if d.title in seen:
            continue
        seen.add(d.title)
        paragraphs = tuple(t for t in (tuple(split_sentences(p)) for p in d.paragraphs) if t)
        if paragraphs:
            out.append(Article(d.title, paragraphs))
        if max_articles is not None and len(out) >= max_articles:
            break
    return out


def convert_record(rec, tokenizer, max_long_len: int, max_global_len: int, flat: bool, no_globals: bool,
                   counts: Counter) -> Tuple[Dict[str, np.ndarray], dict]:
    """One record -> (arrays, side). See the module docstring."""
    from etc_fairseq.finetune.common.layout import layout_example

    d = tokenizer.dictionary
    q_ids, _ = tokenizer.encode_words(rec.question.split(), first_is_start=True)
    paragraphs = []
    for title, sentences in rec.paragraphs:
        t_ids, _ = tokenizer.encode_words(title.split(), first_is_start=True)
        paragraphs.append((t_ids, [tokenizer.encode_words(s.split(), first_is_start=k == 0)[0]
                                   for k, s in enumerate(sentences)]))
    lay = layout_example(q_ids, paragraphs, d, max_long_len=max_long_len,
                         max_global_len=max_global_len if not no_globals else 1 << 30, flat=flat,
                         role_ids=tokenizer.global_ids)
    kept = [(u.paragraph, u.sentence) for u in lay.units if u.sentence >= 0]
    long_sentence = np.full(len(lay.long_tokens), -1, dtype=np.int64)
    k = 0
    for u in lay.units:
        if u.sentence >= 0:
            long_sentence[u.long_start:u.long_end] = k
            k += 1
    answer = kept.index(tuple(rec.answer)) if tuple(rec.answer) in kept else -1
    support = kept.index(rec.support) if rec.support in kept else -1
    counts["records"] += 1
    counts["truncated"] += int(lay.truncated)
    counts["sentences_dropped"] += lay.sentences_dropped
    counts["answers_dropped"] += int(answer < 0)
    counts["long_tokens"] += len(lay.long_tokens)
    counts["longer_than_512"] += int(len(lay.long_tokens) > 512)
    if answer >= 0:
        u = [u for u in lay.units if u.sentence >= 0][answer]
        counts["answer_distance"] += u.long_start  # long positions from the question's start (CLS = 0)
    arrays = lay.arrays()
    if no_globals:
        cls = arrays["global_tokens"][:1]
        arrays = {
            "long_tokens": arrays["long_tokens"],
            "global_tokens": cls,
            "global_types": arrays["global_types"][:1],
            "long_segment": np.zeros(len(arrays["long_tokens"]), dtype=np.int64),
            "long_context": np.zeros(len(arrays["long_tokens"]), dtype=np.int64),
        }
    arrays["answer_index"] = np.asarray([answer], dtype=np.int64)
    arrays["num_sentences"] = np.asarray([len(kept)], dtype=np.int64)
    arrays["long_sentence"] = long_sentence
    arrays["support_index"] = np.asarray([support], dtype=np.int64)
    arrays["question_len"] = np.asarray([len(q_ids) - lay.question_pieces_cut], dtype=np.int64)
    side = {"id": rec.id, "sentences": [list(x) for x in kept], "paragraph_sizes": [len(s) for _, s in rec.paragraphs]}
    return arrays, side


def prepare_nextsent(
    records: Dict[str, Sequence],
    out_dir: Path,
    tokenizer,
    max_long_len: int = DEFAULT_MAX_LONG_LEN,
    max_global_len: int = DEFAULT_MAX_GLOBAL_LEN,
    flat_structure: bool = False,
    no_globals: bool = False,
    overwrite: bool = False,
    log_every: int = 1000,
    extra_info: Optional[dict] = None,
) -> Dict[str, dict]:
    """Write ``{split: records}`` into ``out_dir`` atomically (layout above). Returns ``{split: counts}``."""
    from etc_fairseq.finetune.common.convert import (check_split_names, format_counts, prepared_directory, write_split,
                                                     write_summary)
    from etc_fairseq.finetune.nextsent.schema import field_specs, record_to_json

    if flat_structure and no_globals:
        raise ConfigError("--flat-structure and --no-globals are two different ablations; give one")
    check_split_names(list(records))
    summary: Dict[str, dict] = {}
    with prepared_directory(out_dir, tokenizer, overwrite=overwrite) as tmp:
        for split, recs in records.items():
            counts: Counter = Counter()
            examples = (convert_record(r, tokenizer, max_long_len, max_global_len, flat_structure, no_globals, counts)
                        for r in recs)
            writer = write_split(tmp, split, field_specs(no_globals), examples, log_every, total=len(recs))
            n = max(counts["records"], 1)
            info = {k: int(counts[k]) for k in ("records", "truncated", "sentences_dropped", "answers_dropped",
                                                "long_tokens", "longer_than_512")}
            info["mean_long_tokens"] = round(counts["long_tokens"] / n, 1)
            info["mean_answer_distance"] = round(counts["answer_distance"] / max(n - counts["answers_dropped"], 1), 1)
            info.update(baselines(recs))
            writer.finalize(counts=info)
            (tmp / f"{split}.records.json").write_text(
                json.dumps([record_to_json(r) for r in recs], ensure_ascii=False) + "\n", encoding="utf-8")
            logger.info(f"{split}: {format_counts(info)}")
            summary[split] = info
        write_summary(tmp, "nextsent", tokenizer, summary, CONSTRUCTED=True, flat_structure=flat_structure,
                      no_globals=no_globals, max_long_len=max_long_len,
                      max_global_len=1 if no_globals else max_global_len,  # --no-globals: the CLS alone
                      **(extra_info or {}))
    return summary


def baselines(records) -> Dict[str, float]:
    """Accuracy / MRR (percent) of the word-overlap baseline and of a random ranking over ``records``
    (on the full records, before truncation)."""
    from etc_fairseq.finetune.nextsent.metrics import random_baseline, rank_scores, summarize
    from etc_fairseq.finetune.nextsent.schema import word_overlap_ranking

    acc = rr = 0.0
    for r in records:
        a, b = rank_scores(word_overlap_ranking(r), r.answer_rank_index())
        acc, rr = acc + a, rr + b
    overlap = summarize(acc, rr, len(records))
    rand = random_baseline([r.num_sentences for r in records])
    return {
        "overlap_accuracy": round(overlap["accuracy"], 2), "overlap_mrr": round(overlap["mrr"], 2),
        "random_accuracy": round(rand["accuracy"], 2), "random_mrr": round(rand["mrr"], 2),
        "mean_sentences": round(sum(r.num_sentences for r in records) / max(len(records), 1), 1),
    }


def build_records(articles, train: int, valid: int, seed: int, heldout_fraction: float = 0.2, **shape):
    """``({"train": [...], "valid": [...]}, split article titles, {split: distinct questions its articles
    give})``: held-out records use held-out articles; no question repeats within a split."""
    from etc_fairseq.finetune.nextsent.schema import make_records, question_pool, split_articles

    train_articles, held_articles = split_articles(articles, heldout_fraction, seed)
    records = {
        "train": make_records(train_articles, train, "train", seed, **shape),
        "valid": make_records(held_articles, valid, "valid", seed, **shape),
    }
    titles = {"train": sorted(a.title for a in train_articles), "valid": sorted(a.title for a in held_articles)}
    available = {"train": len(question_pool(train_articles)), "valid": len(question_pool(held_articles))}
    return records, titles, available


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.convert import add_output_arguments
    from etc_fairseq.finetune.nextsent.schema import PROBES
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    g = p.add_argument_group("input (CONSTRUCTED from real Wikipedia text)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--dump", type=Path, metavar="FILE", help="a Wikipedia XML dump (.xml or .xml.bz2)")
    src.add_argument("--wikipedia-sample", action="store_true",
                     help="the project's real Wikipedia sample (about 100 articles), fetched once into --cache-dir")
    g.add_argument("--cache-dir", type=Path, default=None,
                   help="where the sample is kept (default: $ETC_FAIRSEQ_CACHE, else ~/.cache/etc-fairseq)")
    g.add_argument("--max-articles", type=positive_int, default=None, metavar="N", help="use the first N articles only")
    g.add_argument("--train", type=positive_int, default=2000, metavar="N", help="train records (default 2000)")
    g.add_argument("--valid", type=positive_int, default=300, metavar="N", help="held-out records (default 300)")
    g.add_argument("--heldout-fraction", type=fraction, default=0.2, help="articles held out for valid (default 0.2)")
    g.add_argument("--seed", type=int, default=1, help="everything is a function of the seed (default 1)")
    g.add_argument("--same-article", type=non_negative_int, default=2, help="other paragraphs of the question's article (default 2)")
    g.add_argument("--distractors", type=non_negative_int, default=4, help="distractor articles (default 4)")
    g.add_argument("--distractor-paragraphs", type=non_negative_int, default=2, help="paragraphs per distractor article (default 2)")
    g.add_argument("--probe", choices=PROBES, default=None,
                   help="a PROBE, not the task: the question is a copy of a context sentence; 'copy': the answer is "
                   "that sentence (word overlap solves it; a model learns it on held-out articles only if the "
                   "question reaches the sentence tokens); 'next-of-copy': the answer is the sentence after it "
                   "(find the copy, then step to its successor in sentence order)")
    g.add_argument("--swap-questions", action="store_true",
                   help="a CONTROL: every record gets the next record's question (context and answer unchanged); "
                   "a model that reads the question loses what it found through it, one that does not scores the same")
    g = p.add_argument_group("layout")
    g.add_argument("--max-long-len", type=positive_int, default=DEFAULT_MAX_LONG_LEN, help=f"long budget (default {DEFAULT_MAX_LONG_LEN})")
    g.add_argument("--max-global-len", type=positive_int, default=DEFAULT_MAX_GLOBAL_LEN, help=f"global budget (default {DEFAULT_MAX_GLOBAL_LEN})")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--flat-structure", action="store_true", help="ablation: no paragraph hierarchy, no context cut")
    x.add_argument("--no-globals", action="store_true", help="ablation: only a CLS global token (local attention only)")
    add_output_arguments(p)
    WordPieceTokenizer.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.convert import print_summary
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.from_args(args)
    dump = args.dump
    if args.wikipedia_sample:
        from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

        dump = fetch_wikipedia_sample(args.cache_dir)
    articles = read_articles(dump, args.max_articles)
    records, titles, available = build_records(
        articles, args.train, args.valid, args.seed, args.heldout_fraction, same_article=args.same_article,
        distractors=args.distractors, distractor_paragraphs=args.distractor_paragraphs, probe=args.probe,
    )
    if args.swap_questions:
        from etc_fairseq.finetune.nextsent.schema import swap_questions

        records = {split: swap_questions(recs) for split, recs in records.items()}
    summary = prepare_nextsent(
        records, args.out, tokenizer, args.max_long_len, args.max_global_len, args.flat_structure,
        args.no_globals, overwrite=args.overwrite, log_every=args.log_every,
        extra_info={"seed": args.seed, "source": str(dump), "articles": titles, "probe": args.probe,
                    "swap_questions": args.swap_questions,
                    "questions_available": available},
    )
    print("distinct questions (each used at most once): " + ", ".join(
        f"{split} {len(records[split])} of {n}" for split, n in available.items()))
    probe = f"; PROBE {args.probe}: the question is a copy of a context sentence" if args.probe else ""
    probe += "; CONTROL: questions swapped between records" if args.swap_questions else ""
    print_summary(args.out, summary, wrote_note=f"CONSTRUCTED labels on real Wikipedia text{probe}")
    return 0


PREPARE = Subcommand(
    name="nextsent",
    help="CONSTRUCTED long-range task on real Wikipedia text: find the sentence that followed a removed one",
    description="Build the CONSTRUCTED next-sentence task from a Wikipedia dump: the question is a sentence "
    "removed from an article, the context that article's paragraphs among distractor articles' paragraphs, "
    "the answer the sentence that followed the question. Held-out records use held-out articles only. "
    "HotpotQA-shaped layout (question, paragraphs with titles and sentences as global tokens) for "
    "--task etc_nextsent. Writes DIR/dict.txt, DIR/{split}.* and DIR/{split}.records.json atomically.",
    add_arguments=_add_arguments,
    run=_run,
)
