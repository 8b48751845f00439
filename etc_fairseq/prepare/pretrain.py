"""ETC pre-training corpus: documents -> sentences (BERT layout) -> sentencepiece or GPT-2 BPE -> fairseq binary.

Output layout of :func:`prepare_pretraining` (``out`` = the output directory)::

    out/raw/{train,valid}.txt      one sentence per line, one blank line between documents (BERT's
                                   pre-training format); paragraph boundaries are not kept
    out/raw/{train,valid}.titles   one document title per line, in the same order
    out/spm.model, out/spm.vocab   (--tokenizer spm) the sentencepiece model, trained on raw/train.txt or copied
    out/gpt2/{encoder.json,vocab.bpe}  (--tokenizer gpt2) copies of the GPT-2 BPE files used
    out/model/                     (--from-model DIR) copies of DIR's dict.txt, tokenizer files and
                                   etc_tokenizer.json (an etc-lift output: the corpus is cut with the converted
                                   model's own tokenizer, ids follow its dict.txt, and bin/pretrain.json records
                                   the global token ids it was pretrained with as ``global_token_ids``)
    out/tok/{train,valid}.txt      the same layout, tokenized: sentencepiece pieces or GPT-2 ids (decimal);
                                   a sentence longer than --max-sentence-pieces is cut at word starts over
                                   several lines, each of which is a sentence from then on
    out/bin/dict.txt               fairseq dictionary (built from tok/train.txt, or the --srcdict given)
    out/bin/{train,valid}.bin/.idx fairseq-preprocess (mmap) output: ONE ITEM PER SENTENCE (= per non-blank
                                   line of tok/), in document order, no separator items; fairseq appends
                                   an eos to each item
    out/bin/{train,valid}.docs.npy int64 [num_docs + 1]: document i is items docs[i] .. docs[i+1]-1
    out/bin/pretrain.json          format version, tokenizer kind, tokenizer files (relative to bin/), counts
    out/prepare.json               arguments and statistics; written last, so it marks a finished run

Documents with fewer than ``min_sentences`` sentences (the paper: 7) are dropped and counted, before the
train/valid split. Sentences come from :func:`etc_fairseq.prepare.sentences.split_sentences` applied to each
paragraph of each cleaned document. Read the result with
:class:`etc_fairseq.data.pretraining_corpus.PretrainingCorpus`.

GPT-2 BPE (RoBERTa's vocabulary): give ``encoder.json`` and ``vocab.bpe``, and RoBERTa's own ``dict.txt`` as
``srcdict`` so that ids match a RoBERTa checkpoint (needed to lift its weights). Without ``srcdict`` a
dictionary is built from the training text, which is only right for training from scratch.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from etc_fairseq.data.indexed import load_dictionary, load_split
from etc_fairseq.errors import ConfigError
from etc_fairseq.guards import load_json_file
from etc_fairseq.data.pretraining_corpus import FORMAT, META_FILE
from etc_fairseq.data.pretraining_corpus import TOKENIZERS as CORPUS_TOKENIZERS

from .binarize import binarize
from .documents import Document, DocumentFilter, NotEnoughDocumentsError, PathLike
from .mlm import check_given_files, prepare_output_dir, run_arguments, staged_output_dir, spool_and_split, write_json_atomic
from .sentences import split_sentences
from .sources import SourceStats, iter_documents
from .gpt2 import wrap_tokens
from .spm import EncodeStats, encode_document_file, load_spm, reuse_or_train_spm

from etc_fairseq.progress import progress

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid")
TOKENIZERS = ("spm", "gpt2")
DEFAULT_MIN_SENTENCES = 7
DEFAULT_MAX_SENTENCE_PIECES = 256
#: the etc_tokenizer.json fields that name tokenizer files (copied into out/model/ with --from-model)
_TOKENIZER_FILE_FIELDS = ("vocab", "merges", "model", "encoder_json", "vocab_bpe")


@dataclass
class SentenceStats:
    """Counts of :func:`iter_sentence_documents`.

    Attributes:
        docs_read: documents that came in (after the character filters).
        docs_kept: documents yielded.
        docs_dropped: documents with fewer than ``min_sentences`` sentences.
        sentences_kept / sentences_dropped: sentences in kept / dropped documents.
    """

    docs_read: int = 0
    docs_kept: int = 0
    docs_dropped: int = 0
    sentences_kept: int = 0
    sentences_dropped: int = 0


def iter_sentence_documents(
    docs: Iterable[Document],
    min_sentences: int = DEFAULT_MIN_SENTENCES,
    max_docs: Optional[int] = None,
    stats: Optional[SentenceStats] = None,
) -> Iterator[Document]:
    """Split every paragraph into sentences; keep documents with at least ``min_sentences``.

    Args:
        docs: documents of paragraphs.
        min_sentences: drop documents with fewer sentences (counted in ``stats``).
        max_docs: stop after yielding this many documents.
        stats: a :class:`SentenceStats` to fill in.
    Yields:
        ``Document(title, sentences)``: the document's sentences in order (its ``paragraphs`` field holds
        sentences; paragraph boundaries are dropped).
    """
    stats = stats if stats is not None else SentenceStats()
    for doc in docs:
        if max_docs is not None and stats.docs_kept >= max_docs:
            break
        stats.docs_read += 1
        sentences = [s for p in doc.paragraphs for s in split_sentences(p)]
        if len(sentences) < min_sentences:
            stats.docs_dropped += 1
            stats.sentences_dropped += len(sentences)
            continue
        stats.docs_kept += 1
        stats.sentences_kept += len(sentences)
        yield Document(doc.title, sentences)


def strip_document_breaks(src: PathLike, dst: PathLike) -> np.ndarray:
    """Copy the non-blank lines of a BERT-layout file to ``dst``; return the document offsets.

    Args:
        src: one item per line, blank line(s) between documents.
        dst: the same lines without the blank ones (fairseq-preprocess input: one item per line).
    Returns:
        int64 ``[num_docs + 1]``: document ``i`` is lines ``offsets[i] .. offsets[i+1]-1`` of ``dst``.
    """
    offsets = [0]
    n = 0
    with open(src, "r", encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            if line.strip():
                out.write(line if line.endswith("\n") else line + "\n")
                n += 1
            elif n > offsets[-1]:
                offsets.append(n)
    if n > offsets[-1]:
        offsets.append(n)
    return np.asarray(offsets, dtype=np.int64)


def count_token(bin_dir: PathLike, split: str, index: int) -> int:
    """How many times dictionary id ``index`` occurs in a binarized split (e.g. ``<unk>``), eos included."""
    ds = load_split(bin_dir, split)
    dtype = getattr(getattr(ds, "_index", None), "dtype", None)
    path = Path(bin_dir) / f"{split}.bin"
    if dtype is None:  # not fairseq's mmap format: count item by item
        return int(sum(int((ds[i] == index).sum()) for i in range(len(ds))))
    data = np.memmap(path, dtype=dtype, mode="r")
    total = 0
    step = 1 << 24
    for a in range(0, len(data), step):
        total += int(np.count_nonzero(data[a : a + step] == index))
    del data, ds
    return total


@dataclass
class PretrainSplitSummary:
    """Statistics of one split.

    Attributes:
        docs: documents.
        sentences: sentences from the splitter.
        items: binarized items (sentences after over-long ones were cut; = non-blank lines of ``tok/``).
        long_sentences: sentences longer than ``max_sentence_pieces``, cut into several items.
        pieces: tokens (sentencepiece pieces or GPT-2 tokens), eos not counted.
        chars: characters of the sentences.
        unk: ``<unk>`` tokens in the binarized split (pieces outside the sentencepiece vocabulary, or symbols
            missing from a given ``srcdict``).
    """

    docs: int = 0
    sentences: int = 0
    items: int = 0
    long_sentences: int = 0
    pieces: int = 0
    chars: int = 0
    unk: int = 0


#: the document filters' reasons (:class:`~etc_fairseq.prepare.documents.DocumentFilter`) in words, with their flags
_FILTER_REASONS = {
    "too_short": "shorter than {min_doc_chars} characters (--min-doc-chars)",
    "too_few_paragraphs": "without a paragraph of {min_paragraph_chars} characters (--min-paragraph-chars)",
}


def dropped_documents(skipped: Dict[str, int], sentence_drops: int, min_sentences: int, min_doc_chars: int,
                      min_paragraph_chars: int) -> str:
    """Why documents were dropped, one count per reason: the character filters (``skipped``, read from the
    inputs; page-level skips of a dump such as redirects are not documents and are left out) and
    ``--min-sentences`` (``sentence_drops``). E.g. ``"1 shorter than 200 characters (--min-doc-chars), 2 with
    fewer than 7 sentences (--min-sentences)"``; ``"none"`` when nothing was dropped."""
    values = {"min_doc_chars": min_doc_chars, "min_paragraph_chars": min_paragraph_chars}
    parts = [f"{skipped[k]} {text.format(**values)}" for k, text in _FILTER_REASONS.items() if skipped.get(k)]
    if sentence_drops:
        parts.append(f"{sentence_drops} with fewer than {min_sentences} sentences (--min-sentences)")
    return ", ".join(parts) or "none"


@dataclass
class PretrainSummary:
    """What :func:`prepare_pretraining` produced (also written to ``out/prepare.json``).

    Attributes:
        out_dir / bin_dir: output and fairseq data directories.
        tokenizer: ``spm`` or ``gpt2``; tokenizer_files: name -> path of the tokenizer's files in ``out_dir``.
        vocab_size: fairseq dictionary size.
        min_sentences / max_sentence_pieces: the options used.
        docs_read / docs_kept / docs_dropped: documents after the character filters, kept, and dropped for
            having fewer than ``min_sentences`` sentences.
        splits: split name -> :class:`PretrainSplitSummary`; skipped: reason -> count while reading inputs.
    """

    out_dir: str
    bin_dir: str
    tokenizer: str
    tokenizer_files: Dict[str, str]
    vocab_size: int
    min_sentences: int
    max_sentence_pieces: int
    docs_read: int = 0
    docs_kept: int = 0
    docs_dropped: int = 0
    splits: Dict[str, PretrainSplitSummary] = field(default_factory=dict)
    skipped: Dict[str, int] = field(default_factory=dict)
    inputs: List[str] = field(default_factory=list)
    args: Dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        """The summary as indented JSON."""
        return json.dumps(asdict(self), indent=2)

    def format(self) -> str:
        """A human-readable multi-line summary (what the CLI prints)."""
        lines = [f"prepared ETC pre-training data in {self.out_dir} ({self.seconds:.1f} s)"]
        dropped = dropped_documents(self.skipped, self.docs_dropped, self.min_sentences,
                                    int(self.args.get("min_doc_chars", 0)), int(self.args.get("min_paragraph_chars", 0)))
        lines.append(f"  documents: {self.docs_kept} kept; dropped: {dropped}")
        for name, s in self.splits.items():
            cut = f"{s.long_sentences} over {self.max_sentence_pieces} pieces cut" if self.max_sentence_pieces else "none cut"
            lines.append(
                f"  {name:5s}: {s.docs} docs, {s.sentences:,} sentences ({cut}), {s.items:,} items, "
                f"{s.pieces:,} pieces, {s.unk} unk"
            )
        lines.append(f"  tokenizer: {self.tokenizer}, fairseq dict {self.vocab_size} entries")
        if self.skipped:
            lines.append("  skipped while reading: " + ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())))
        lines.append(f"  fairseq data: {self.bin_dir}  (one item per sentence; {{split}}.docs.npy = document offsets)")
        return "\n".join(lines)


def _from_model(from_model, tokenizer, spm_model, srcdict, gpt2_encoder_json, gpt2_vocab_bpe):
    """The ``--from-model`` directory's tokenizer: (WordPieceTokenizer, corpus tokenizer kind, spm model,
    dict.txt, GPT-2 files). SentencePiece and GPT-2 BPE models take the ``spm`` / ``gpt2`` paths with their
    own files; WordPiece and byte-level BPE are corpus kinds of their own."""
    from etc_fairseq.tokenization import TOKENIZER_DESCRIPTION

    from .tokenizer import WordPieceTokenizer

    if spm_model or srcdict or gpt2_encoder_json or gpt2_vocab_bpe or tokenizer != "spm":
        raise ConfigError("--from-model already names the dictionary and tokenizer; drop --tokenizer, --spm-model, "
                         "--srcdict and --gpt2-*")
    tok = WordPieceTokenizer.from_model(from_model)
    desc = load_json_file(Path(from_model) / TOKENIZER_DESCRIPTION, "the tokenizer description etc-lift writes")
    d = Path(from_model)
    if tok.kind == "sentencepiece":
        return tok, "spm", d / desc["model"], tok.dict_path, None, None
    if tok.kind == "gpt2_bpe":
        return tok, "gpt2", None, tok.dict_path, d / desc["encoder_json"], d / desc["vocab_bpe"]
    return tok, tok.kind, None, tok.dict_path, None, None


def encode_with_source(tokenizer, kind: str, src: PathLike, dst: PathLike, max_line_pieces: int = 0) -> EncodeStats:
    """Like :func:`~etc_fairseq.prepare.spm.encode_document_file`, with a ``--from-model`` tokenizer
    (:class:`~etc_fairseq.tokenization.SourceTokenizer` of kind ``wordpiece`` or ``byte_level_bpe``): each
    sentence line becomes its pieces (``dict.txt`` spelling), cut at word starts (a WordPiece word continues
    at ``##``, a byte-level word starts at ``Ġ``) when longer than ``max_line_pieces``."""
    from etc_fairseq.data.pretraining_corpus import GPT2_SPACE

    stats = EncodeStats()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    in_doc = False
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in progress(f, desc=f"encoding {Path(src).name}", unit="line"):
            line = line.strip()
            if not line:  # document boundary
                if in_doc:
                    out.write("\n")
                    stats.docs += 1
                in_doc = False
                continue
            pieces = tokenizer.tokenize(line).pieces
            if not pieces:
                continue
            if kind == "wordpiece":
                starts = [not p.startswith("##") for p in pieces]
            else:
                starts = [i == 0 or p.startswith(GPT2_SPACE) for i, p in enumerate(pieces)]
            stats.unk += sum(1 for p in pieces if p == "<unk>")
            chunks = wrap_tokens(pieces, starts, max_line_pieces)
            stats.paragraphs += 1
            stats.wrapped += len(chunks) > 1
            for c in chunks:
                out.write(" ".join(c) + "\n")
                stats.lines += 1
                stats.pieces += len(c)
            in_doc = True
    if in_doc:
        stats.docs += 1
    return stats


def _check_args(tokenizer, min_sentences, max_sentence_pieces, spm_model, srcdict, gpt2_encoder_json, gpt2_vocab_bpe,
                from_model=False):
    if tokenizer not in TOKENIZERS and not (from_model and tokenizer in CORPUS_TOKENIZERS):
        raise ConfigError(f"--tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if min_sentences < 1:
        raise ConfigError(f"--min-sentences must be >= 1, got {min_sentences}")
    if max_sentence_pieces < 0:
        raise ConfigError(f"--max-sentence-pieces must be >= 0 (0 = never split), got {max_sentence_pieces}")
    if tokenizer == "gpt2":
        if gpt2_encoder_json is None or gpt2_vocab_bpe is None:
            raise ConfigError("--tokenizer gpt2 needs --gpt2-encoder-json and --gpt2-vocab-bpe (GPT-2's encoder.json and vocab.bpe)")
        if spm_model is not None:
            raise ConfigError("--spm-model is for --tokenizer spm, not gpt2")
    check_given_files((("--spm-model", spm_model), ("--srcdict", srcdict), ("--gpt2-encoder-json", gpt2_encoder_json),
                       ("--gpt2-vocab-bpe", gpt2_vocab_bpe)), srcdict)


@staged_output_dir
def prepare_pretraining(
    inputs: Sequence[PathLike],
    out_dir: PathLike,
    tokenizer: str = "spm",
    min_sentences: int = DEFAULT_MIN_SENTENCES,
    max_sentence_pieces: int = DEFAULT_MAX_SENTENCE_PIECES,
    vocab_size: int = 8000,
    spm_model: Optional[PathLike] = None,
    srcdict: Optional[PathLike] = None,
    gpt2_encoder_json: Optional[PathLike] = None,
    gpt2_vocab_bpe: Optional[PathLike] = None,
    valid_fraction: Optional[float] = 0.05,
    valid_docs: Optional[int] = None,
    max_docs: Optional[int] = None,
    workers: int = 1,
    seed: int = 1,
    min_paragraph_chars: int = 30,
    min_doc_chars: int = 200,
    spm_model_type: str = "unigram",
    character_coverage: float = 0.9995,
    spm_input_sentence_size: int = 2_000_000,
    overwrite: bool = False,
    in_process: bool = True,
    from_model: Optional[PathLike] = None,
) -> PretrainSummary:
    """Prepare an ETC pre-training corpus (see the module docstring for the output layout).

    Args:
        inputs: Wikipedia dumps (.xml, .xml.bz2, .xml.gz) and/or text files (one paragraph or one sentence per
            line, blank line between documents).
        out_dir: output directory (must be empty or absent unless ``overwrite``).
        tokenizer: ``spm`` (train a sentencepiece model on the train split, or reuse ``spm_model``) or
            ``gpt2`` (GPT-2 byte-level BPE from ``gpt2_encoder_json`` / ``gpt2_vocab_bpe``).
        min_sentences: drop documents with fewer sentences (paper: 7).
        max_sentence_pieces: cut longer sentences at word starts into several sentences (0 = never).
        vocab_size: sentencepiece vocabulary size (``spm`` without ``spm_model``).
        spm_model: reuse this sentencepiece model.
        srcdict: reuse this fairseq ``dict.txt`` (for ``gpt2``: RoBERTa's ``dict.txt``).
        gpt2_encoder_json / gpt2_vocab_bpe: GPT-2's BPE files.
        valid_fraction / valid_docs: the validation share or count, by document (after filtering).
        max_docs: use only the first N documents that pass all filters (``min_sentences`` included).
        workers: fairseq-preprocess workers, and GPT-2 encoding processes.
        seed: seed for the split and sentencepiece's line sample.
        min_paragraph_chars / min_doc_chars: character filters (:class:`DocumentFilter`).
        spm_model_type / character_coverage / spm_input_sentence_size: sentencepiece training options.
        overwrite: replace an existing output directory.
        in_process: run fairseq-preprocess in this process rather than a subprocess.
        from_model: an ``etc-lift`` output directory: cut the text with its tokenizer, binarize with its
            ``dict.txt`` and record its pretrained global token ids (replaces ``tokenizer``, ``spm_model``,
            ``srcdict`` and the GPT-2 files).
    Returns:
        :class:`PretrainSummary`.
    Raises:
        InputFormatError / MissingFileError: bad inputs or files (messages name them).
        OutputExistsError: ``out_dir`` holds an earlier run.
        ConfigError: bad arguments; NotEnoughDocumentsError: fewer than 2 documents left after filtering.
        SpmTrainingError / BinarizeError: from the sentencepiece / fairseq steps.
    """
    args = run_arguments(locals())
    t0 = time.monotonic()
    source = None
    if from_model is not None:
        source, tokenizer, spm_model, srcdict, gpt2_encoder_json, gpt2_vocab_bpe = _from_model(
            from_model, tokenizer, spm_model, srcdict, gpt2_encoder_json, gpt2_vocab_bpe)
    _check_args(tokenizer, min_sentences, max_sentence_pieces, spm_model, srcdict, gpt2_encoder_json, gpt2_vocab_bpe,
                from_model=source is not None)
    out = prepare_output_dir(out_dir, overwrite)

    # 1. documents -> sentences -> raw/{train,valid}.txt
    src_stats = SourceStats()
    sent_stats = SentenceStats()
    doc_filter = DocumentFilter(min_paragraph_chars=min_paragraph_chars, min_doc_chars=min_doc_chars)
    docs = iter_sentence_documents(
        iter_documents(inputs, doc_filter=doc_filter, stats=src_stats), min_sentences, max_docs, sent_stats
    )
    try:
        raw = spool_and_split(docs, out / "raw", valid_fraction, valid_docs, seed)
    except (ConfigError, NotEnoughDocumentsError) as e:
        dropped = dropped_documents(src_stats.skipped, sent_stats.docs_dropped, min_sentences, min_doc_chars,
                                    min_paragraph_chars)
        raise type(e)(
            f"{e} (after filtering {', '.join(map(str, inputs))}: {sent_stats.docs_kept} kept; dropped: {dropped})"
        ) from None
    logger.info(
        "%d documents kept, %d sentences; dropped: %s",
        sent_stats.docs_kept,
        sent_stats.sentences_kept,
        dropped_documents(src_stats.skipped, sent_stats.docs_dropped, min_sentences, min_doc_chars, min_paragraph_chars),
    )
    splits = {s: PretrainSplitSummary(docs=raw[s].docs, sentences=raw[s].paragraphs, chars=raw[s].chars) for s in SPLITS}

    # 2. tokenize -> tok/{train,valid}.txt (same layout)
    tok_files: Dict[str, Path] = {}
    enc: Dict[str, EncodeStats] = {}
    if source is not None:
        (out / "model").mkdir()
        desc = load_json_file(source.model_dir / "etc_tokenizer.json", "the tokenizer description etc-lift writes")
        for name in ["dict.txt", "etc_tokenizer.json"] + [desc[k] for k in _TOKENIZER_FILE_FIELDS if desc.get(k)]:
            shutil.copyfile(source.model_dir / name, out / "model" / name)
        tok_files["model_dir"] = out / "model"
    if tokenizer in ("wordpiece", "byte_level_bpe"):
        for s in SPLITS:
            enc[s] = encode_with_source(source.source, tokenizer, out / "raw" / f"{s}.txt", out / "tok" / f"{s}.txt",
                                        max_sentence_pieces)
    elif tokenizer == "spm":
        model = reuse_or_train_spm(spm_model, [out / "raw" / "train.txt"], out / "spm", vocab_size=vocab_size,
                                   model_type=spm_model_type, character_coverage=character_coverage,
                                   input_sentence_size=spm_input_sentence_size, seed=seed)
        tok_files["spm_model"] = model
        sp = load_spm(model)
        for s in SPLITS:
            enc[s] = encode_document_file(sp, out / "raw" / f"{s}.txt", out / "tok" / f"{s}.txt", max_sentence_pieces)
    else:
        from .gpt2 import encode_gpt2_document_file, load_gpt2_bpe

        load_gpt2_bpe(gpt2_encoder_json, gpt2_vocab_bpe)  # fail early, naming the file, on bad files
        (out / "gpt2").mkdir()
        tok_files["gpt2_encoder_json"] = out / "gpt2" / "encoder.json"
        tok_files["gpt2_vocab_bpe"] = out / "gpt2" / "vocab.bpe"
        shutil.copyfile(gpt2_encoder_json, tok_files["gpt2_encoder_json"])
        shutil.copyfile(gpt2_vocab_bpe, tok_files["gpt2_vocab_bpe"])
        for s in SPLITS:
            enc[s] = encode_gpt2_document_file(
                tok_files["gpt2_encoder_json"],
                tok_files["gpt2_vocab_bpe"],
                out / "raw" / f"{s}.txt",
                out / "tok" / f"{s}.txt",
                max_line_tokens=max_sentence_pieces,
                workers=workers,
            )
    for s in SPLITS:
        e = enc[s]
        if e.docs != splits[s].docs:
            raise RuntimeError(f"{s}: encoding saw {e.docs} documents, the text has {splits[s].docs}")
        if e.paragraphs != splits[s].sentences:  # e.g. a "sentence" of characters the normalizer removes
            logger.warning("%s: %d sentences encoded to no tokens and were left out", s, splits[s].sentences - e.paragraphs)
        splits[s].items, splits[s].pieces, splits[s].long_sentences = e.lines, e.pieces, e.wrapped
        if e.wrapped:
            logger.info("%s: %d sentences longer than %d pieces were split at word starts", s, e.wrapped, max_sentence_pieces)

    # 3. one item per sentence -> fairseq-preprocess; document offsets beside it
    offsets = {}
    for s in SPLITS:
        offsets[s] = strip_document_breaks(out / "tok" / f"{s}.txt", out / "tok" / f".{s}.items")
    bin_dir = binarize(
        out / "bin",
        trainpref=out / "tok" / ".train.items",
        validpref=out / "tok" / ".valid.items",
        srcdict=srcdict,
        workers=workers,
        in_process=in_process,
    )
    for s in SPLITS:
        (out / "tok" / f".{s}.items").unlink()
    dictionary = load_dictionary(bin_dir / "dict.txt")
    for s in SPLITS:
        ds = load_split(bin_dir, s, dictionary)  # keep a reference while reading sizes (see load_split)
        n_items, n_tokens = len(ds), int(ds.sizes.sum())
        del ds
        if n_items != splits[s].items or len(offsets[s]) != splits[s].docs + 1 or offsets[s][-1] != n_items:
            raise RuntimeError(
                f"{s}: fairseq binarized {n_items} items, expected {splits[s].items} sentences in {splits[s].docs} documents"
            )
        if n_tokens - n_items != splits[s].pieces:
            raise RuntimeError(f"{s}: fairseq binarized {n_tokens - n_items} tokens, the text has {splits[s].pieces}")
        np.save(bin_dir / f"{s}.docs.npy", offsets[s])
        splits[s].unk = count_token(bin_dir, s, dictionary.unk())
    rel = {k: str(Path("..") / Path(v).relative_to(out)) for k, v in tok_files.items()}
    meta = {
        "format": FORMAT,
        "tokenizer": tokenizer,
        "tokenizer_files": rel,
        "global_token_ids": dict(source.global_ids) if source is not None else {},
        "min_sentences": min_sentences,
        "max_sentence_pieces": max_sentence_pieces,
        "splits": {s: {"docs": splits[s].docs, "sentences": splits[s].items, "pieces": splits[s].pieces} for s in SPLITS},
    }
    write_json_atomic(bin_dir / META_FILE, json.dumps(meta, indent=2))

    summary = PretrainSummary(
        out_dir=str(out),
        bin_dir=str(bin_dir),
        tokenizer=tokenizer,
        tokenizer_files={k: str(v) for k, v in tok_files.items()},
        vocab_size=len(dictionary),
        min_sentences=min_sentences,
        max_sentence_pieces=max_sentence_pieces,
        docs_read=sent_stats.docs_read,
        docs_kept=sent_stats.docs_kept,
        docs_dropped=sent_stats.docs_dropped,
        splits=splits,
        skipped=dict(src_stats.skipped),
        inputs=[str(p) for p in inputs],
        args=args,
        seconds=round(time.monotonic() - t0, 2),
    )
    write_json_atomic(out / "prepare.json", summary.to_json())
    logger.info("pre-training data ready in %s (%.1f s)", out, summary.seconds)
    return summary
