"""``etc-prepare hotpotqa``: the official HotpotQA distractor JSON -> ETC structured fine-tuning data.

Input: the official files as they are (``hotpot_train_v1.1.json``, ``hotpot_dev_distractor_v1.json``,
``hotpot_test_fullwiki_v1.json``-style files without answers work too): a JSON list of records with
``_id``, ``question``, ``context`` ``[[title, [sentence, ...]], ...]`` and, in labelled files, ``answer``,
``supporting_facts`` ``[[title, sentence_index], ...]`` and ``type``.

Layout (paper appendix C; :func:`layout_example`), with ``P`` paragraphs::

    long   = CLS, question pieces, then per paragraph: its title pieces, then its sentences' pieces
    global = CLS, one QUESTION token per question piece (mirrors the piece id), then per paragraph:
             a CONTEXT token (the whole paragraph), a TITLE token, one SENTENCE token per sentence

- ``long_segment``: the long CLS belongs to the global CLS, question piece ``j`` to question token ``j``,
  title / sentence pieces to their TITLE / SENTENCE token.
- ``global_parent``: TITLE and SENTENCE tokens -> their paragraph's CONTEXT token (so the CONTEXT token
  "belongs" to every long token of its paragraph, and g2g gets parent/child labels).
- ``long_context`` / ``global_context``: 0 for CLS and the question, ``p + 1`` for paragraph ``p``: l2l is cut
  at paragraph boundaries and g2g between paragraphs gets the unordered ``other_context`` label.
- ``--flat-structure`` (the paper's ablation): no CONTEXT tokens, no parents, all contexts 0 (l2l runs
  across paragraphs, g2g is ordered), so long tokens relate only to their own title/sentence token.
- Hard g2l (the paper's default for HotpotQA) is the model's ``--hard-g2l`` flag, not a data option.

Truncation: no windowing; the question (capped if it alone does not fit), then paragraphs and sentences
are added in order while they fit in ``--max-long-len`` (4096) long and ``--max-global-len`` (256) global
tokens; a sentence (or a paragraph whose title does not fit) that does not fit is dropped and later, shorter
ones are still tried. Counts (examples truncated, sentences / paragraphs dropped, gold supporting facts
lost) are logged and stored in ``{split}.meta.json``.

Labels (:func:`~etc_fairseq.finetune.hotpotqa.schema.target_fields`): ``sp_label`` int8 [global_len] (1 = gold supporting sentence, 0 = other
sentence, -1 = not a sentence token or no gold), ``answer_type`` int8 [1] (0 span, 1 yes, 2 no, -1 unknown),
``answer_span`` int32 [2] (first / last long position of the gold answer, -1 if none). The answer span is the
first occurrence (word-level match under SQuAD normalisation) in a supporting sentence, else in the title of a
supporting paragraph, else anywhere. Training examples whose span answer is not found are dropped (the
paper drops 16 of 90,447) and counted; other splits keep them.

Side data (``{split}.side.jsonl``, one object per example): ``id``, ``titles`` (every paragraph's title),
``units`` ``[[paragraph, sentence (-1 = title), global_index, long_start, long_end], ...]``, ``words`` and
``word_of_piece`` per unit, and the gold ``answer`` / ``supporting_facts`` / ``type`` (null in test files;
the one place a prepared split keeps the gold text, read through
:meth:`~etc_fairseq.finetune.hotpotqa.schema.Gold.from_side`), so that predictions map back to ``(title, sentence index)`` and to answer text (words joined by spaces).
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.common.convert import (
    STANDARD_SPLITS,
    add_output_arguments,
    add_split_arguments,
    check_split_names,
    prepared_directory,
    print_summary,
    write_split,
    write_summary,
)
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.finetune.common.layout import STRUCTURE_FIELD_NAMES, Unit, layout_example
from etc_fairseq.finetune.hotpotqa.schema import AnswerType, HotpotRecord, answer_type_of, read_hotpotqa, target_fields
from etc_fairseq.guards import positive_int
from etc_fairseq.text import normalize_answer

logger = logging.getLogger(__name__)



# ---------------------------------------------------------------------------------------------------------
# layout (pure)
# ---------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=500_000)
def _normalized_word(word: str) -> Tuple[str, ...]:
    """SQuAD-normalised tokens of one word (cached: the same words recur across units and records)."""
    return tuple(normalize_answer(word).split())


def find_answer_words(
    unit_words: Sequence[Sequence[str]], answer: str, order: Sequence[int]
) -> Optional[Tuple[int, int, int]]:
    """First word-level occurrence of ``answer`` (under SQuAD normalisation) in the units, searched in ``order``.

    A match is a run of words ``i..j`` of one unit whose normalised tokens, concatenated, equal the answer's;
    it starts and ends on a word with a non-empty normalisation (so "The" is not taken into a span).

    Returns:
        ``(unit, first_word, last_word)`` or None.
    """
    target = normalize_answer(answer).split()
    if not target:
        return None
    for u in order:
        toks = [_normalized_word(w) for w in unit_words[u]]
        for i in range(len(toks)):
            if not toks[i] or toks[i][0] != target[0]:
                continue
            acc: List[str] = []
            for j in range(i, len(toks)):
                acc.extend(toks[j])
                if acc == target and toks[j]:
                    return u, i, j
                if len(acc) >= len(target) or acc != target[: len(acc)]:
                    break
    return None


# ---------------------------------------------------------------------------------------------------------
# one example
# ---------------------------------------------------------------------------------------------------------


@dataclass
class SplitCounts:
    """What one split's conversion did (logged and stored in ``{split}.meta.json``)."""

    records: int = 0
    examples: int = 0
    examples_truncated: int = 0
    question_pieces_cut: int = 0
    sentences_dropped: int = 0
    paragraphs_dropped: int = 0
    sp_facts_dropped_by_truncation: int = 0
    sp_facts_not_in_context: int = 0
    answers_not_found: int = 0
    examples_skipped_answer_not_found: int = 0
    answer_types: Dict[str, int] = field(default_factory=lambda: {**{t.label: 0 for t in AnswerType}, "none": 0})

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def convert_record(
    rec: HotpotRecord,
    tokenizer,
    max_long_len: int,
    max_global_len: int,
    flat: bool,
    counts: SplitCounts,
) -> Tuple[Dict[str, np.ndarray], dict, bool]:
    """One record -> (arrays for :class:`StructuredWriter`, side record, answer found).

    ``answer found`` is True for yes/no answers, for records without an answer, and for span answers whose
    text occurs in the kept text.
    """
    q_words = rec.question.split()
    q_ids, _ = tokenizer.encode_words(q_words)
    par_ids = []
    par_words: List[Tuple[List[str], List[List[str]]]] = []
    par_wop: List[Tuple[List[int], List[List[int]]]] = []
    for title, sentences in rec.context:
        t_words = title.split()
        t_ids, t_wop = tokenizer.encode_words(t_words)
        s_ids, s_words, s_wops = [], [], []
        for k, sent in enumerate(sentences):
            words = sent.split()
            ids, wop = tokenizer.encode_words(words, first_is_start=(k == 0))
            s_ids.append(ids)
            s_words.append(words)
            s_wops.append(wop)
        par_ids.append((t_ids, s_ids))
        par_words.append((t_words, s_words))
        par_wop.append((t_wop, s_wops))
    lay = layout_example(q_ids, par_ids, tokenizer.dictionary, max_long_len, max_global_len, flat,
                         role_ids=tokenizer.global_ids)

    counts.examples_truncated += lay.truncated
    counts.question_pieces_cut += lay.question_pieces_cut
    counts.sentences_dropped += lay.sentences_dropped
    counts.paragraphs_dropped += lay.paragraphs_dropped

    def unit_words(u: Unit) -> List[str]:
        w = par_words[u.paragraph]
        return w[0] if u.sentence < 0 else w[1][u.sentence]

    def unit_wop(u: Unit) -> List[int]:
        w = par_wop[u.paragraph]
        return w[0] if u.sentence < 0 else w[1][u.sentence]

    # supporting-fact labels on the kept sentence tokens
    G = len(lay.global_tokens)
    sp_label = np.full(G, -1, dtype=np.int8)
    gold_facts: Set[Tuple[str, int]] = set(rec.supporting_facts or [])
    kept = {(rec.context[u.paragraph][0], u.sentence): u for u in lay.units if u.sentence >= 0}
    if rec.supporting_facts is not None:
        for u in lay.units:
            if u.sentence >= 0:
                sp_label[u.global_index] = int((rec.context[u.paragraph][0], u.sentence) in gold_facts)
        existing = {(t, k) for t, sents in rec.context for k in range(len(sents))}
        for fact in gold_facts:
            if fact not in existing:
                counts.sp_facts_not_in_context += 1
            elif fact not in kept:
                counts.sp_facts_dropped_by_truncation += 1

    # answer
    a_type = answer_type_of(rec.answer)
    counts.answer_types["none" if a_type < 0 else AnswerType(a_type).label] += 1
    span = (-1, -1)
    match = None
    found = True
    if a_type == AnswerType.SPAN:
        sp_units = [i for i, u in enumerate(lay.units) if u.sentence >= 0 and (rec.context[u.paragraph][0], u.sentence) in gold_facts]
        sp_pars = {lay.units[i].paragraph for i in sp_units}
        title_units = [i for i, u in enumerate(lay.units) if u.sentence < 0 and u.paragraph in sp_pars]
        preferred = set(sp_units) | set(title_units)
        rest = [i for i in range(len(lay.units)) if i not in preferred]
        words_per_unit = [unit_words(u) for u in lay.units]
        match = find_answer_words(words_per_unit, rec.answer, sp_units + title_units + rest)
        if match is not None:
            from etc_fairseq.prepare.tokenizer import piece_span_of_words

            u = lay.units[match[0]]
            rel = piece_span_of_words(unit_wop(u), match[1], match[2])
            if rel is None:
                match = None
            else:
                span = (u.long_start + rel[0], u.long_start + rel[1])
        if match is None:
            found = False
            counts.answers_not_found += 1

    arrays = lay.arrays()
    arrays["sp_label"] = sp_label
    arrays["answer_type"] = np.asarray([a_type], dtype=np.int8)
    arrays["answer_span"] = np.asarray(span, dtype=np.int32)
    side = {
        "id": rec.id,
        "titles": [t for t, _ in rec.context],
        "units": [[u.paragraph, u.sentence, u.global_index, u.long_start, u.long_end] for u in lay.units],
        "words": [unit_words(u) for u in lay.units],
        "word_of_piece": [unit_wop(u) for u in lay.units],
        "answer": rec.answer,
        "supporting_facts": None if rec.supporting_facts is None else [list(f) for f in rec.supporting_facts],
        "type": rec.type,
        "truncated": lay.truncated,
    }
    return arrays, side, found


# ---------------------------------------------------------------------------------------------------------
# whole files
# ---------------------------------------------------------------------------------------------------------


def prepare_hotpotqa(
    splits: Sequence[Tuple[str, Path]],
    out_dir: Path,
    tokenizer,
    max_long_len: int = 4096,
    max_global_len: int = 256,
    flat_structure: bool = False,
    keep_unfound_train: bool = False,
    max_examples: Optional[int] = None,
    overwrite: bool = False,
    log_every: int = 1000,
) -> Dict[str, dict]:
    """Convert official files into one prepared directory (written atomically).

    Args:
        splits: ``[(split name, official JSON file), ...]`` (names unique).
        out_dir: the output directory.
        tokenizer: a :class:`~etc_fairseq.prepare.tokenizer.WordPieceTokenizer` (its ``dict.txt`` is
            copied to ``out_dir/dict.txt``).
        keep_unfound_train: keep ``train`` examples whose span answer is not found (dropped by default).
        max_examples: convert only the first N records of each file.
    Returns:
        ``{split: counts dict}``.
    """
    from etc_fairseq.data.structured import CORE_FIELDS

    check_split_names([s for s, _ in splits], "--train / --valid / --test or --input FILE --split NAME")
    specs = [CORE_FIELDS[n] for n in ("long_tokens", "global_tokens", "global_types") + STRUCTURE_FIELD_NAMES]
    specs += target_fields()
    summary: Dict[str, dict] = {}
    with prepared_directory(out_dir, tokenizer, overwrite) as tmp:
        for split, path in splits:
            records = read_hotpotqa(path)
            if max_examples is not None:
                records = records[:max_examples]
            counts = SplitCounts(records=len(records))

            def examples():
                for rec in records:
                    arrays, side, found = convert_record(rec, tokenizer, max_long_len, max_global_len, flat_structure, counts)
                    if not found and split == "train" and not keep_unfound_train:
                        counts.examples_skipped_answer_not_found += 1
                        continue
                    counts.examples += 1
                    yield arrays, side

            writer = write_split(tmp, split, specs, examples(), log_every, total=len(records))
            if counts.examples == 0:
                raise InputFormatError(f"{path}: no examples left for split {split!r} ({counts.records} records)")
            info = counts.as_dict()
            writer.finalize(
                source=str(path), flat_structure=flat_structure, max_long_len=max_long_len,
                max_global_len=max_global_len, **info,
            )
            summary[split] = info
            logger.info(
                f"{split}: {counts.examples} examples from {counts.records} records of {path}; truncated "
                f"{counts.examples_truncated} (sentences dropped {counts.sentences_dropped}, paragraphs dropped "
                f"{counts.paragraphs_dropped}, question pieces cut {counts.question_pieces_cut}, gold supporting "
                f"facts lost {counts.sp_facts_dropped_by_truncation}); gold facts not in context "
                f"{counts.sp_facts_not_in_context}; span answers not found {counts.answers_not_found} (skipped "
                f"{counts.examples_skipped_answer_not_found}); answer types {counts.answer_types}"
            )
        write_summary(tmp, "hotpotqa", tokenizer, summary, flat_structure=flat_structure,
                      max_long_len=max_long_len, max_global_len=max_global_len)
    return summary


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    g = add_split_arguments(p, "input (official HotpotQA JSON files)", {
        "train": "e.g. hotpot_train_v1.1.json -> split 'train'", "valid": "e.g. hotpot_dev_distractor_v1.json -> split 'valid'",
        "test": "a file without answers -> split 'test'"})
    g.add_argument("--input", type=Path, action="append", default=[], metavar="FILE",
                   help="more files, each paired with the --split NAME at the same position (repeatable)")
    g.add_argument("--split", action="append", default=[], metavar="NAME", help="split name of the matching --input")
    g.add_argument("--max-examples", type=positive_int, default=None, metavar="N", help="only the first N records of each file")
    g = p.add_argument_group("layout")
    g.add_argument("--max-long-len", type=positive_int, default=4096, help="long input budget (default 4096)")
    g.add_argument("--max-global-len", type=positive_int, default=256, help="global input budget (default 256)")
    g.add_argument("--flat-structure", action="store_true",
                   help="the paper's flat-structure ablation: no paragraph/title hierarchy, no context cut")
    g.add_argument("--keep-unfound-train", action="store_true",
                   help="keep train examples whose span answer is not in the (kept) text (default: drop and count)")
    add_output_arguments(p)
    WordPieceTokenizer.add_arguments(p)


def _splits_from_args(args: argparse.Namespace) -> List[Tuple[str, Path]]:
    if len(args.input) != len(args.split):
        raise ConfigError(f"--input and --split must be given in pairs, got {len(args.input)} --input and {len(args.split)} --split")
    out = [(name, getattr(args, name)) for name in STANDARD_SPLITS if getattr(args, name) is not None]
    out += list(zip(args.split, args.input))
    return out


def _summary_line(c: Dict[str, int]) -> str:
    return (f"{c['examples']} examples ({c['examples_truncated']} truncated, {c['sentences_dropped']} sentences "
            f"dropped, {c['answers_not_found']} span answers not found, {c['examples_skipped_answer_not_found']} skipped)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    splits = _splits_from_args(args)
    tokenizer = WordPieceTokenizer.from_args(args)
    summary = prepare_hotpotqa(
        splits, args.out, tokenizer,
        max_long_len=args.max_long_len, max_global_len=args.max_global_len, flat_structure=args.flat_structure,
        keep_unfound_train=args.keep_unfound_train, max_examples=args.max_examples, overwrite=args.overwrite,
        log_every=args.log_every,
    )
    print_summary(args.out, summary, _summary_line, notes=[f"tokenizer: {tokenizer.stats}"])
    return 0


PREPARE = Subcommand(
    name="hotpotqa",
    help="official HotpotQA JSON -> ETC structured data (question, paragraphs, sentences as global tokens)",
    description="Convert official HotpotQA files (distractor setting; files without answers work too) into "
    "ETC fine-tuning data for --task etc_hotpotqa: long input = CLS, question, each paragraph's title and "
    "sentences; global input = CLS, one token per question piece, per paragraph a paragraph token, a title "
    "token and one token per sentence (paper appendix C). Writes DIR/dict.txt, DIR/{split}.*.bin/.idx, "
    "DIR/{split}.meta.json (with truncation counts), DIR/{split}.side.jsonl and DIR/prepare.json, atomically.",
    add_arguments=_add_arguments,
    run=_run,
)
