"""SentencePiece helpers: deterministic training, and encoding document files to space-separated pieces.

Reproducibility: sentencepiece samples ``input_sentence_size`` sentences itself with its own random
generator when ``shuffle_input_sentence`` is on. Instead, :func:`train_spm` picks the training lines here
(a seeded Python sample when there are more than the cap) and streams exactly those lines to sentencepiece
with its own sampling switched off (its seed is set too). The model is received in memory rather than
written by sentencepiece, so it does not record input or output paths. Unigram training splits its EM
steps over threads and the float sums depend on the split, so the thread count is a fixed argument (not the
machine's CPU count). Same lines + same arguments -> byte-identical ``.model`` files (checked in
``tests/test_prepare.py``).
"""
from __future__ import annotations

import io
import logging
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from etc_fairseq.errors import ExternalToolError, MissingFileError

from .documents import PathLike, open_text

from etc_fairseq.progress import progress

logger = logging.getLogger(__name__)

WORD_START = "\u2581"  # "▁": sentencepiece's marker for a piece that begins a word


class SpmTrainingError(ExternalToolError):
    """sentencepiece refused the training data or arguments."""


def _spm():
    # Imported lazily so that importing etc_fairseq.prepare does not require sentencepiece.
    import sentencepiece

    return sentencepiece


def train_spm(
    inputs: Sequence[PathLike],
    model_prefix: PathLike,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    input_sentence_size: int = 2_000_000,
    seed: int = 1,
    max_sentence_length: int = 16384,
    num_threads: int = 4,
    verbose: bool = False,
) -> Path:
    """Train a sentencepiece model on the non-blank lines of text files.

    Args:
        inputs: text files (one sentence/paragraph per line; blank lines are ignored).
        model_prefix: output prefix; writes ``<prefix>.model`` and ``<prefix>.vocab`` (piece TAB score).
        vocab_size: number of pieces, including sentencepiece's ``<unk>``, ``<s>``, ``</s>``.
        model_type: ``unigram`` (default), ``bpe``, ``char`` or ``word``.
        character_coverage: share of characters covered by the vocabulary (rarer ones map to ``<unk>``).
        input_sentence_size: at most this many lines are used; above it a seeded random sample is drawn.
        seed: seed for that sample and for sentencepiece's own generator.
        max_sentence_length: longest line (in bytes) sentencepiece accepts; Wikipedia paragraphs reach
            several KB and would otherwise be silently skipped.
        num_threads: trainer threads. Part of the result (see the module docstring): keep it fixed to
            reproduce a model.
        verbose: let sentencepiece print its training log to stderr.
    Returns:
        path of the ``.model`` file.
    Raises:
        SpmTrainingError: no training text, or sentencepiece rejected the arguments (e.g. a vocabulary
            larger than the text supports); the message carries sentencepiece's reason.
    """
    spm = _spm()
    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    n_total, lines = _sample_lines(inputs, input_sentence_size, seed)
    if not lines:
        raise SpmTrainingError(f"no text to train sentencepiece on in {', '.join(map(str, inputs))}")
    logger.info("training sentencepiece (%s, vocab %d) on %d of %d lines", model_type, vocab_size, len(lines), n_total)
    spm.set_random_generator_seed(seed)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=proto,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=0,  # use every line given: the sampling was done above
            shuffle_input_sentence=False,
            max_sentence_length=max_sentence_length,
            num_threads=num_threads,
            minloglevel=0 if verbose else 2,
        )
    except (RuntimeError, OSError) as e:
        raise SpmTrainingError(
            f"sentencepiece training on {len(lines)} lines from {', '.join(map(str, inputs))} failed: {e}"
        ) from None
    model = model_prefix.with_name(model_prefix.name + ".model")
    _write_atomic(model, proto.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
    _write_atomic(model.with_suffix(".vocab"), vocab.encode("utf-8"))
    logger.info("sentencepiece model %s trained in %.1f s", model, time.monotonic() - t0)
    return model


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _sample_lines(inputs: Sequence[PathLike], cap: int, seed: int) -> Tuple[int, List[str]]:
    """The non-blank input lines: all of them, or a seeded sample of ``cap`` (``cap <= 0``: no cap).

    A reservoir sample over the stream, so memory is bounded by ``cap`` lines (sentencepiece holds its
    training lines in memory anyway), returned in input order so that the result depends only on which
    lines were picked.

    Returns:
        (number of non-blank input lines, the chosen lines).
    """
    rng = random.Random(seed)
    reservoir: List[Tuple[int, str]] = []
    total = 0
    for path in inputs:
        with open_text(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                if cap <= 0 or len(reservoir) < cap:
                    reservoir.append((total, line))
                else:
                    j = rng.randrange(total + 1)
                    if j < cap:
                        reservoir[j] = (total, line)
                total += 1
    reservoir.sort()
    return total, [line for _, line in reservoir]


def load_spm(model: PathLike):
    """Load a sentencepiece model.

    Args:
        model: the ``.model`` file.
    Returns:
        a ``sentencepiece.SentencePieceProcessor``.
    Raises:
        FileNotFoundError / SpmTrainingError: missing or unreadable model file (message names it).
    """
    model = Path(model)
    if not model.is_file():
        raise MissingFileError(f"{model}: no such sentencepiece model file")
    sp = _spm().SentencePieceProcessor()
    try:
        sp.load(str(model))
    except (RuntimeError, OSError) as e:
        raise SpmTrainingError(f"{model}: not a sentencepiece model ({e})") from None
    return sp


def encode_pieces(sp, text: str) -> List[str]:
    """Encode one text to sentencepiece pieces.

    Args:
        sp: a loaded processor (:func:`load_spm`).
        text: one line of text.
    Returns:
        the pieces (strings; none contains whitespace, since sentencepiece turns spaces into "▁").
    """
    return sp.encode(text, out_type=str)


def wrap_pieces(pieces: Sequence[str], max_len: int) -> List[List[str]]:
    """Cut a piece sequence into chunks of at most ``max_len`` pieces, at word starts where possible.

    Why: fairseq's ``--sample-break-mode complete`` never splits a line, so one line longer than
    ``--tokens-per-sample`` becomes an over-long sample; wrapping keeps every line trainable.

    Args:
        pieces: the pieces of one line.
        max_len: chunk limit; ``<= 0`` means no limit.
    Returns:
        a list of non-empty chunks whose concatenation is ``pieces``.
    """
    if max_len <= 0 or len(pieces) <= max_len:
        return [list(pieces)] if pieces else []
    chunks: List[List[str]] = []
    start = 0
    n = len(pieces)
    while n - start > max_len:
        end = start + max_len
        # Back off to the last word start in the chunk's second half; a word longer than that is cut.
        cut = end
        for i in range(end, start + max_len // 2, -1):
            if pieces[i].startswith(WORD_START):
                cut = i
                break
        chunks.append(list(pieces[start:cut]))
        start = cut
    chunks.append(list(pieces[start:]))
    return chunks


@dataclass
class EncodeStats:
    """What :func:`encode_document_file` wrote.

    Attributes:
        docs: documents (blank-line separated groups).
        paragraphs: input paragraph lines.
        lines: output lines with pieces (>= paragraphs when long ones were wrapped).
        pieces: total pieces written.
        wrapped: paragraphs that were split over several lines.
        unk: pieces that are not in the model's vocabulary (rendered characters outside the coverage).
    """

    docs: int = 0
    paragraphs: int = 0
    lines: int = 0
    pieces: int = 0
    wrapped: int = 0
    unk: int = 0


def encode_document_file(
    sp,
    src: PathLike,
    dst: PathLike,
    max_line_pieces: int = 0,
    batch_lines: int = 2000,
) -> EncodeStats:
    """Encode a document file (BERT layout) to space-separated pieces, keeping the layout.

    Each paragraph becomes one line of pieces (several when longer than ``max_line_pieces``); the blank
    lines between documents are kept, which is what fairseq's ``--sample-break-mode complete_doc`` uses.

    Args:
        sp: a loaded processor.
        src: input text file, one paragraph per line, blank line between documents.
        dst: output file (replaced).
        max_line_pieces: wrap longer paragraphs at word starts (see :func:`wrap_pieces`); ``0`` = never.
        batch_lines: lines encoded per sentencepiece call (its batch API is much faster than one call per line).
    Returns:
        :class:`EncodeStats`.
    """
    stats = EncodeStats()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    unk_id = sp.unk_id()
    in_doc = False

    def flush(batch: List[Optional[str]], out) -> None:
        nonlocal in_doc
        texts = [b for b in batch if b is not None]
        encoded = iter(sp.encode(texts, out_type=int) if texts else [])
        for item in batch:
            if item is None:  # document boundary
                if in_doc:
                    out.write("\n")
                    stats.docs += 1
                in_doc = False
                continue
            ids = next(encoded)
            if not ids:
                continue
            pieces = [sp.id_to_piece(i) for i in ids]
            stats.unk += sum(1 for i in ids if i == unk_id)
            chunks = wrap_pieces(pieces, max_line_pieces)
            stats.paragraphs += 1
            stats.wrapped += len(chunks) > 1
            for c in chunks:
                out.write(" ".join(c))
                out.write("\n")
                stats.lines += 1
                stats.pieces += len(c)
            in_doc = True

    with open_text(src) as f, open(dst, "w", encoding="utf-8") as out:
        batch: List[Optional[str]] = []
        for line in progress(f, desc=f"encoding {Path(src).name}", unit="line"):
            line = line.strip()
            batch.append(line if line else None)
            if len(batch) >= batch_lines:
                flush(batch, out)
                batch = []
        flush(batch, out)
    if in_doc:
        stats.docs += 1
    return stats


def copy_model(model: PathLike, dst_prefix: PathLike) -> Path:
    """Copy ``X.model`` (and ``X.vocab`` when present) to ``<dst_prefix>.model`` / ``.vocab``.

    Args:
        model: source ``.model`` file.
        dst_prefix: destination prefix.
    Returns:
        the copied ``.model`` path.
    """
    model = Path(model)
    dst_prefix = Path(dst_prefix)
    dst_prefix.parent.mkdir(parents=True, exist_ok=True)
    out = dst_prefix.with_name(dst_prefix.name + ".model")
    if model.resolve() != out.resolve():
        shutil.copyfile(model, out)
    vocab = model.with_suffix(".vocab")
    if vocab.is_file() and vocab.resolve() != out.with_suffix(".vocab").resolve():
        shutil.copyfile(vocab, out.with_suffix(".vocab"))
    return out


def reuse_or_train_spm(
    spm_model: Optional[PathLike], train_files: Sequence[PathLike], model_prefix: PathLike, **train_options
) -> Path:
    """The sentencepiece model of a prepare run: ``spm_model`` copied to ``model_prefix`` (:func:`copy_model`)
    when one is given, else one trained on ``train_files`` (:func:`train_spm` with ``train_options``).

    Returns:
        path of ``<model_prefix>.model``.
    """
    if spm_model is not None:
        model = copy_model(spm_model, model_prefix)
        logger.info("reusing sentencepiece model %s", spm_model)
        return model
    return train_spm(train_files, model_prefix, **train_options)


def iter_pieces_lines(sp, lines: Iterable[str]) -> Iterable[str]:
    """Encode lines lazily to space-separated piece strings (blank lines stay blank).

    Args:
        sp: a loaded processor.
        lines: text lines.
    Yields:
        one output line (without newline) per input line.
    """
    for line in lines:
        line = line.strip()
        yield " ".join(encode_pieces(sp, line)) if line else ""
