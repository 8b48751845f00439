"""``etc-prepare openkp``: the official OpenKP (MS MARCO OpenKP) jsonl -> the structured fine-tuning format.

Official record (one JSON object per line)::

    url         the page's url (the document id of the official evaluation)
    text        the page's clean-body text, words separated by spaces
    VDOM        a JSON *string*: a list of nodes {"Id", "text", "feature": [20 floats], "start_idx",
                "end_idx"}; node words are text.split()[start_idx:end_idx] (end exclusive)
    KeyPhrases  a list of 1-3 keyphrases, each a list of words (absent in the evaluation file)

The 20 features are 10 of the node followed by the same 10 of its parent (OpenKP README): x, width, y,
height (pixels), is block, is inline, is heading, is leaf (0/1), font size, is bold (0/1). They are stored
raw; the model encodes them (:mod:`etc_fairseq.finetune.openkp.heads`).

Layout (paper appendix C): the long input is all word pieces of the page (no CLS, no question); the global
input is one ``VDOM_NODE`` token per VDOM node; every long token belongs to its node's global token
(``long_segment``). Truncation keeps whole words and stops at whichever binds first: the long length or the
global length (a word whose node would be global token number ``max_global + 1``). Both are counted.

Stored per example (``{split}.*``):

- core fields ``long_tokens``, ``global_tokens``, ``global_types``, ``long_segment``
- ``word_of_piece`` int32 [long_len]: the word (index into the kept words) of each piece
- ``ngram_ids`` int32 [num_words, 5]: ``[w, n-1]`` = id of the lower-cased text of words ``w..w+n-1``
  within this document (equal text -> equal id; -1 past the end); see :func:`enumerate_ngram_ids`
- ``gold_phrases`` int32 [max(num_gold, 1)]: the ngram id of each distinct gold keyphrase, -2 when it does
  not occur in the kept words (it still counts for recall); ``[-1]`` (no gold) for files without KeyPhrases
- ``node_features`` float64 [global_len, 20]: the raw VDOM features of each kept node (a long token's
  features are its node's, gathered through ``long_segment`` by the model: no per-token copy on disk)
- side jsonl: ``{"url", "words"}`` (the kept words, for predictions) and ``"gold"`` (normalised phrases)

Training examples whose kept words contain none of their keyphrases are skipped (as in the paper), as are
repeated urls; both are counted.
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.common.convert import (
    add_output_arguments,
    add_split_arguments,
    check_split_names,
    prepared_directory,
    print_summary,
    splits_from_args,
    write_split,
    write_summary,
)
from etc_fairseq.guards import check_input_file, positive_int
from etc_fairseq.finetune.openkp.metrics import clean_phrases, dedup
from etc_fairseq.finetune.openkp.schema import (
    DEFAULT_MAX_GLOBAL_LEN,
    DEFAULT_MAX_LONG_LEN,
    GOLD_NOT_IN_DOCUMENT,
    MAX_NGRAM,
    NUM_VISUAL_FEATURES,
    VdomNode,
    field_specs,
    iter_records,
)
from etc_fairseq.errors import ConfigError
from etc_fairseq.prepare.documents import InputFormatError

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# pure functions
# ----------------------------------------------------------------------------------------------------------


def word_nodes(num_words: int, nodes: Sequence[VdomNode]) -> Tuple[List[int], int, int]:
    """The node each word belongs to.

    Returns:
        (word_node, uncovered, overlapping): ``word_node[w]`` = index (in ``nodes``) of the first node whose
        range covers word ``w``, or -1; the number of words no node covers; the number of word positions
        covered again by a later node (ignored).
    """
    word_node = [-1] * num_words
    overlapping = 0
    for i, node in enumerate(nodes):
        for w in range(node.start, node.end):
            if word_node[w] == -1:
                word_node[w] = i
            else:
                overlapping += 1
    uncovered = sum(1 for n in word_node if n == -1)
    return word_node, uncovered, overlapping


@dataclass
class DocumentLayout:
    """Result of :func:`layout_document`.

    Attributes:
        long_tokens: piece ids of the kept words.
        word_of_piece: word index of each piece.
        long_segment: global index of each piece's node, -1 for words outside every node.
        kept_nodes: indices (into the VDOM list) of the nodes given a global token, in global order.
        num_words: number of kept words (a prefix of the page's words).
        truncated_by: None, ``"long"`` or ``"global"``.
    """

    long_tokens: List[int]
    word_of_piece: List[int]
    long_segment: List[int]
    kept_nodes: List[int]
    num_words: int
    truncated_by: Optional[str] = None


def layout_document(word_pieces: Sequence[Sequence[int]], word_node: Sequence[int], max_long: int, max_global: int) -> DocumentLayout:
    """Long and global layout of one page, truncated at whole words.

    Args:
        word_pieces: the piece ids of each word.
        word_node: the node of each word (:func:`word_nodes`), -1 for none.
        max_long: most long tokens.
        max_global: most global tokens (one per node, numbered in order of first appearance in the text).
    Returns:
        :class:`DocumentLayout`; the kept words are the longest prefix that fits both limits.
    """
    layout = DocumentLayout([], [], [], [], 0)
    global_of_node: Dict[int, int] = {}
    for w, (pieces, node) in enumerate(zip(word_pieces, word_node)):
        if len(layout.long_tokens) + len(pieces) > max_long:
            layout.truncated_by = "long"
            break
        new_node = node >= 0 and node not in global_of_node
        if new_node and len(layout.kept_nodes) >= max_global:
            layout.truncated_by = "global"
            break
        if new_node:
            global_of_node[node] = len(layout.kept_nodes)
            layout.kept_nodes.append(node)
        seg = global_of_node[node] if node >= 0 else -1
        layout.long_tokens.extend(pieces)
        layout.word_of_piece.extend([w] * len(pieces))
        layout.long_segment.extend([seg] * len(pieces))
        layout.num_words = w + 1
    return layout


def enumerate_ngram_ids(words: Sequence[str], max_n: int = MAX_NGRAM) -> Tuple[np.ndarray, List[str]]:
    """Give every n-gram (n = 1..max_n) of ``words`` the id of its lower-cased text.

    N-grams are visited word by word, shorter first (``(w=0,n=1), (0,2), ..., (1,1), ...``); a text seen for
    the first time gets the next id, so equal texts (case-insensitively) share an id: the uncased
    de-duplication of predictions and the matching of gold phrases compare ids.

    Returns:
        (ids int32 [len(words), max_n], phrases): ``ids[w, n-1]`` is the id of words ``w..w+n-1``, -1
        where that runs past the end; ``phrases[id]`` is the normalised text (words lower-cased, joined by
        single spaces, as :func:`etc_fairseq.finetune.openkp.metrics.normalize_phrase`).
    """
    lower = [w.lower() for w in words]
    ids = np.full((len(words), max_n), -1, dtype=np.int32)
    index: Dict[str, int] = {}
    phrases: List[str] = []
    for w in range(len(words)):
        for n in range(1, max_n + 1):
            if w + n > len(words):
                break
            text = " ".join(lower[w : w + n])
            pid = index.get(text)
            if pid is None:
                pid = index[text] = len(phrases)
                phrases.append(text)
            ids[w, n - 1] = pid
    return ids, phrases


def gold_phrase_ids(keyphrases: Sequence, phrases: Sequence[str]) -> Tuple[List[int], int]:
    """The ngram id of each distinct, non-empty gold keyphrase (official normalisation), or
    :data:`GOLD_NOT_IN_DOCUMENT`.

    Args:
        keyphrases: the record's KeyPhrases (word lists).
        phrases: :func:`enumerate_ngram_ids`' phrase texts of the kept words.
    Returns:
        (ids, too_long): one id per distinct normalised gold phrase, in order; how many have more than
        :data:`MAX_NGRAM` words (never predictable; they count for recall).
    """
    index = {p: i for i, p in enumerate(phrases)}
    gold = dedup(clean_phrases(keyphrases))
    ids = [index.get(g, GOLD_NOT_IN_DOCUMENT) for g in gold]
    too_long = sum(1 for g in gold if len(g.split()) > MAX_NGRAM)
    return ids, too_long


# ----------------------------------------------------------------------------------------------------------
# the converter
# ----------------------------------------------------------------------------------------------------------


@dataclass
class SplitStats:
    records: int = 0
    examples: int = 0
    skipped_duplicate_url: int = 0
    skipped_no_keyphrase_in_document: int = 0
    skipped_empty: int = 0
    truncated_by_long: int = 0
    truncated_by_global: int = 0
    words_dropped: int = 0
    nodes_dropped: int = 0
    words_outside_nodes: int = 0
    overlapping_node_words: int = 0
    gold_phrases: int = 0
    gold_not_in_document: int = 0
    gold_longer_than_max_ngram: int = 0
    long_tokens: int = 0
    global_tokens: int = 0
    empty_urls: List[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.examples} examples from {self.records} records; skipped: {self.skipped_duplicate_url} repeated "
            f"urls, {self.skipped_no_keyphrase_in_document} without a keyphrase in the kept text, {self.skipped_empty} "
            f"empty; truncated: {self.truncated_by_long} by the long length, {self.truncated_by_global} by the "
            f"global length ({self.words_dropped} words, {self.nodes_dropped} nodes dropped); "
            f"{self.words_outside_nodes} words outside every node, {self.overlapping_node_words} overlapping; gold: "
            f"{self.gold_phrases} phrases, {self.gold_not_in_document} not in the kept text "
            f"({self.gold_longer_than_max_ngram} longer than {MAX_NGRAM} words)"
        )


def split_examples(path: Path, tokenizer, stats: SplitStats, *, max_long: int, max_global: int,
                   skip_without_keyphrase: bool, require_keyphrases: bool) -> Iterator[Tuple[Dict[str, np.ndarray], dict]]:
    """The examples of one OpenKP jsonl as ``(arrays, side record)`` pairs, counting into ``stats``."""
    from etc_fairseq.structure.global_tokens import GlobalTokenType, global_token_id

    seen_urls = set()
    node_id = global_token_id(tokenizer.dictionary, GlobalTokenType.VDOM_NODE, role_ids=tokenizer.global_ids)
    for where, rec in iter_records(path, require_keyphrases):
        stats.records += 1
        if rec.url in seen_urls:
            stats.skipped_duplicate_url += 1
            continue
        seen_urls.add(rec.url)
        word_node, uncovered, overlapping = word_nodes(len(rec.words), rec.nodes)
        word_pieces = [tokenizer.encode_word(w, first=(i == 0)) for i, w in enumerate(rec.words)]
        layout = layout_document(word_pieces, word_node, max_long, max_global)
        words = rec.words[: layout.num_words]
        ngram_ids, phrases = enumerate_ngram_ids(words)
        gold, too_long = gold_phrase_ids(rec.keyphrases or [], phrases)
        if not layout.long_tokens:
            stats.skipped_empty += 1
            stats.empty_urls.append(rec.url)
            continue
        if skip_without_keyphrase and not any(g >= 0 for g in gold):
            stats.skipped_no_keyphrase_in_document += 1
            continue
        stats.examples += 1
        stats.words_outside_nodes += uncovered
        stats.overlapping_node_words += overlapping
        if layout.truncated_by == "long":
            stats.truncated_by_long += 1
        elif layout.truncated_by == "global":
            stats.truncated_by_global += 1
        stats.words_dropped += len(rec.words) - layout.num_words
        stats.nodes_dropped += sum(1 for n in rec.nodes if n.end > n.start) - len(layout.kept_nodes)
        stats.gold_phrases += len(gold)
        stats.gold_not_in_document += sum(1 for g in gold if g < 0)
        stats.gold_longer_than_max_ngram += too_long
        stats.long_tokens += len(layout.long_tokens)
        stats.global_tokens += len(layout.kept_nodes)
        g = len(layout.kept_nodes)
        arrays = {
            "long_tokens": np.asarray(layout.long_tokens, dtype=np.int64),
            "global_tokens": np.full(g, node_id, dtype=np.int64),
            "global_types": np.full(g, int(GlobalTokenType.VDOM_NODE), dtype=np.int64),
            "long_segment": np.asarray(layout.long_segment, dtype=np.int64),
            "word_of_piece": np.asarray(layout.word_of_piece, dtype=np.int32),
            "ngram_ids": ngram_ids,
            # -1 = no gold phrase (also the batch padding); a document without any keeps one -1 entry
            # (fairseq's indexed dataset cannot map an all-empty field)
            "gold_phrases": np.asarray(gold or [-1], dtype=np.int32),
            "node_features": np.asarray([rec.nodes[i].features for i in layout.kept_nodes], dtype=np.float64).reshape(g, NUM_VISUAL_FEATURES),
        }
        side = {"url": rec.url, "words": words}
        if rec.keyphrases is not None:
            side["gold"] = dedup(clean_phrases(rec.keyphrases))
        yield arrays, side


def prepare_openkp(inputs: Dict[str, Path], out_dir: Path, tokenizer, *, max_long: int = DEFAULT_MAX_LONG_LEN,
                   max_global: int = DEFAULT_MAX_GLOBAL_LEN, overwrite: bool = False,
                   log_every: int = 1000) -> Dict[str, SplitStats]:
    """Convert each ``split -> file`` of ``inputs`` into ``out_dir`` (written atomically).

    ``train`` skips examples without a keyphrase in the kept text; ``train``/``valid`` require KeyPhrases,
    ``test`` (the official evaluation file) does not.
    """
    check_split_names(list(inputs))
    if max_long < 1 or max_global < 1:
        raise ConfigError(f"--max-long-len and --max-global-len must be >= 1, got {max_long}, {max_global}")
    for split, path in inputs.items():
        check_input_file(Path(path), f"an OpenKP jsonl file (--{split})")
    results = {}
    options = dict(max_long_len=max_long, max_global_len=max_global, max_ngram=MAX_NGRAM)
    with prepared_directory(out_dir, tokenizer, overwrite) as tmp:
        for split, path in inputs.items():
            stats = SplitStats()
            examples = split_examples(
                Path(path), tokenizer, stats, max_long=max_long, max_global=max_global,
                skip_without_keyphrase=(split == "train"), require_keyphrases=(split != "test"),
            )
            writer = write_split(tmp, split, field_specs(), examples, log_every)
            logger.info(f"{path} ({split}): {stats.line()}")
            if stats.examples == 0:
                raise InputFormatError(f"{path}: no usable example ({stats.line()})")
            counts = {k: v for k, v in stats.__dict__.items()}
            writer.finalize(source=str(path), tokenizer=str(tokenizer.stats), **options, **counts)
            results[split] = stats
        write_summary(tmp, "openkp", tokenizer, {split: vars(st) for split, st in results.items()}, **options)
    return results


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    add_split_arguments(p, "input (official OpenKP jsonl, gzip allowed)", {
        "train": "OpenKPTrain.jsonl", "valid": "OpenKPDev.jsonl", "test": "OpenKPEvalPublic.jsonl (no KeyPhrases)"})
    g = add_output_arguments(p)
    g.add_argument("--max-long-len", type=positive_int, default=DEFAULT_MAX_LONG_LEN, help=f"long tokens (default {DEFAULT_MAX_LONG_LEN})")
    g.add_argument("--max-global-len", type=positive_int, default=DEFAULT_MAX_GLOBAL_LEN, help=f"global tokens = VDOM nodes (default {DEFAULT_MAX_GLOBAL_LEN})")
    WordPieceTokenizer.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    inputs = splits_from_args(args)
    tokenizer = WordPieceTokenizer.from_args(args)
    results = prepare_openkp(inputs, args.out, tokenizer, max_long=args.max_long_len,
                             max_global=args.max_global_len, overwrite=args.overwrite, log_every=args.log_every)
    print_summary(args.out, results, lambda stats: stats.line(), notes=[f"tokenizer: {tokenizer.stats}"])
    return 0


PREPARE = Subcommand(
    name="openkp",
    help="official OpenKP jsonl -> ETC fine-tuning data (long = word pieces, global = VDOM nodes)",
    description="Convert the official OpenKP jsonl files (url, text, VDOM, KeyPhrases) for the etc_openkp task: "
    "long input = all word pieces, global input = one token per VDOM node, raw visual features per node, "
    "n-gram ids for keyphrase candidates (1-5 words). Truncates at whole words to whichever of "
    "--max-long-len / --max-global-len binds first (counted). Writes DIR/dict.txt, DIR/{split}.* and DIR/prepare.json atomically.",
    add_arguments=_add_arguments,
    run=_run,
)
