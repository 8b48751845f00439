"""Documents: the unit every preparation step works on, and their plain-text file format.

A :class:`Document` is a title and a list of paragraphs (plain text, one paragraph is one line when written).
On disk, documents use the BERT pre-training layout: one paragraph per line, one blank line between documents.
Titles are not stored in that layout; readers of text files make them up from the file name and position.

Everything here streams (generators in, generators out) so that a large dump never has to be held in memory;
only the train/valid assignment needs the number of documents, which is why the pipeline spools documents to
a file first (see :func:`choose_valid_indices`).
"""
from __future__ import annotations

import bz2
import gzip
import io
import logging
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Set, TextIO, Union

from etc_fairseq.errors import ConfigError, InputFormatError, MissingFileError  # noqa: F401  (InputFormatError re-exported)

logger = logging.getLogger(__name__)


class NotEnoughDocumentsError(InputFormatError):
    """Too few documents are left after the filters to make what was asked for."""

PathLike = Union[str, Path]

_WS_RE = re.compile(r"\s+")


@dataclass
class Document:
    """One document.

    Attributes:
        title: a human-readable identifier (article title, or ``file#index`` for text inputs).
        paragraphs: plain-text paragraphs, each non-empty and without newlines.
    """

    title: str
    paragraphs: List[str]

    @property
    def num_chars(self) -> int:
        """Total characters over all paragraphs (no separators counted)."""
        return sum(len(p) for p in self.paragraphs)


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace (newlines, tabs, NBSP...) to one space and strip the ends.

    Args:
        text: any string.
    Returns:
        the string on one line.
    """
    return _WS_RE.sub(" ", text).strip()


# --------------------------------------------------------------------------------------------------------
# opening files
# --------------------------------------------------------------------------------------------------------


def sniff_compression(path: PathLike) -> Optional[str]:
    """Tell a compressed file by its magic bytes rather than its name (dumps get renamed).

    Args:
        path: an existing file.
    Returns:
        ``"bz2"``, ``"gzip"`` or ``None`` for uncompressed.
    Raises:
        InputFormatError: the file does not exist or cannot be read.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(3)
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputFormatError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise InputFormatError(f"{path}: cannot read ({e})") from None
    if head == b"BZh":
        return "bz2"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    return None


def open_binary(path: PathLike):
    """Open a possibly bz2/gzip-compressed file for binary reading.

    Args:
        path: the file.
    Returns:
        a binary file object yielding the decompressed bytes.
    """
    kind = sniff_compression(path)
    if kind == "bz2":
        return bz2.open(path, "rb")
    if kind == "gzip":
        return gzip.open(path, "rb")
    return open(path, "rb")


def open_text(path: PathLike) -> TextIO:
    """Open a possibly compressed UTF-8 text file for reading.

    Args:
        path: the file.
    Returns:
        a text file object; undecodable bytes are replaced rather than raising mid-stream.
    """
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace")


def detect_input_format(path: PathLike) -> str:
    """Decide whether an input is a MediaWiki XML dump or a plain-text document file.

    The extension decides when it is telling (``.xml``, ``.xml.bz2``, ``.xml.gz``); otherwise the first
    non-blank characters are read: a dump starts with ``<mediawiki`` (possibly after an XML declaration).

    Args:
        path: the input file.
    Returns:
        ``"wikipedia"`` or ``"text"``.
    Raises:
        InputFormatError: the file is missing or unreadable.
    """
    path = Path(path)
    sniff_compression(path)  # raises a clear error for missing files
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".xml"] or (suffixes[-2:-1] == [".xml"] and suffixes[-1] in (".bz2", ".gz")):
        return "wikipedia"
    try:
        with open_binary(path) as f:
            head = f.read(4096)
    except (OSError, EOFError) as e:
        raise InputFormatError(f"{path}: cannot read ({e})") from None
    head = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if head.startswith(b"<?xml"):
        end = head.find(b"?>")
        head = head[end + 2 :].lstrip() if end >= 0 else b""
    if head.startswith(b"<mediawiki"):
        return "wikipedia"
    return "text"


# --------------------------------------------------------------------------------------------------------
# the text layout: one paragraph per line, blank line between documents
# --------------------------------------------------------------------------------------------------------


def read_text_documents(path: PathLike, title_prefix: Optional[str] = None) -> Iterator[Document]:
    """Stream documents from a file in the BERT layout (one paragraph per line, blank line between docs).

    Several blank lines count as one separator; leading/trailing blank lines are ignored; each line is
    whitespace-normalised.

    Args:
        path: the text file (optionally bz2/gzip-compressed).
        title_prefix: titles are ``f"{title_prefix}#{index}"``; defaults to the file name.
    Yields:
        :class:`Document` objects, in file order.
    Raises:
        InputFormatError: the file is missing, unreadable, truncated (compressed) or binary (a NUL byte; the
            message names the line). Lines with bytes that are not UTF-8 are decoded with U+FFFD
            replacements, counted, and the count logged as a warning with the first line number.
    """
    path = Path(path)
    prefix = title_prefix if title_prefix is not None else path.name
    paragraphs: List[str] = []
    index = 0
    bad_lines, first_bad = 0, 0
    try:
        with open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                if b"\0" in raw:
                    column = raw.index(b"\0") + 1
                    raise InputFormatError(
                        f"{path}: line {lineno}: NUL byte at column {column}: this is binary data, not a "
                        "UTF-8 text file with one paragraph per line"
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    # counted and reported below; the bytes become U+FFFD
                    bad_lines += 1
                    if bad_lines == 1:
                        first_bad = lineno
                        logger.warning("%s: line %d: byte %d is not UTF-8 (%s); undecodable bytes are replaced by "
                                       "U+FFFD and counted", path, lineno, e.start + 1, e.reason)
                    text = raw.decode("utf-8", errors="replace")
                line = normalize_whitespace(text)
                if line:
                    paragraphs.append(line)
                elif paragraphs:
                    yield Document(f"{prefix}#{index}", paragraphs)
                    index += 1
                    paragraphs = []
    except (OSError, EOFError) as e:  # e.g. a truncated .bz2/.gz
        raise InputFormatError(f"{path}: cannot read or decompress ({e})") from None
    if bad_lines:
        logger.warning("%s: %d lines had bytes that are not UTF-8 (first at line %d); they were replaced by U+FFFD",
                       path, bad_lines, first_bad)
    if paragraphs:
        yield Document(f"{prefix}#{index}", paragraphs)


class DocumentWriter:
    """Write documents in the BERT layout, counting what was written.

    Use as a context manager; ``num_docs`` / ``num_paragraphs`` / ``num_chars`` hold the totals.
    A blank line goes *between* documents only, so the file ends with the last paragraph line.
    """

    def __init__(self, path: PathLike):
        """Args: path: the output file (parent directories are created; an existing file is replaced)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self.num_docs = 0
        self.num_paragraphs = 0
        self.num_chars = 0

    def write(self, doc: Document) -> None:
        """Append one document.

        Args:
            doc: a document with at least one paragraph; paragraphs are whitespace-normalised so that a
                stray newline cannot split a paragraph or fake a document boundary.
        """
        paragraphs = [p for p in (normalize_whitespace(p) for p in doc.paragraphs) if p]
        if not paragraphs:
            return
        if self.num_docs:
            self._f.write("\n")
        for p in paragraphs:
            self._f.write(p)
            self._f.write("\n")
        self.num_docs += 1
        self.num_paragraphs += len(paragraphs)
        self.num_chars += sum(len(p) for p in paragraphs)

    def close(self) -> None:
        """Flush and close the file."""
        self._f.close()

    def __enter__(self) -> "DocumentWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_text_documents(docs: Iterable[Document], path: PathLike) -> int:
    """Write documents to ``path`` in the BERT layout.

    Args:
        docs: documents to write (empty ones are skipped).
        path: output file.
    Returns:
        the number of documents written.
    """
    with DocumentWriter(path) as w:
        for d in docs:
            w.write(d)
    return w.num_docs


# --------------------------------------------------------------------------------------------------------
# filtering and splitting
# --------------------------------------------------------------------------------------------------------


@dataclass
class DocumentFilter:
    """Minimum-length filters applied to every document source, with counts of what they dropped.

    Attributes:
        min_paragraph_chars: paragraphs shorter than this (after cleaning) are dropped. Short lines in
            cleaned wikitext are mostly list items, captions and leftovers of removed markup.
        min_doc_chars: documents with fewer characters (after paragraph filtering) are dropped.
        min_paragraphs: documents with fewer paragraphs (after paragraph filtering) are dropped.
        counts: reason -> number of documents dropped for it, plus ``"short_paragraphs"``.
    """

    min_paragraph_chars: int = 0
    min_doc_chars: int = 0
    min_paragraphs: int = 1
    counts: Dict[str, int] = field(default_factory=dict)

    def _count(self, reason: str, n: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n

    def apply(self, doc: Document) -> Optional[Document]:
        """Filter one document.

        Args:
            doc: the document.
        Returns:
            the document with short paragraphs removed, or ``None`` when the whole document is dropped.
        """
        kept = [p for p in doc.paragraphs if len(p) >= self.min_paragraph_chars]
        if len(kept) < len(doc.paragraphs):
            self._count("short_paragraphs", len(doc.paragraphs) - len(kept))
        if len(kept) < max(self.min_paragraphs, 1):
            self._count("too_few_paragraphs")
            return None
        if sum(len(p) for p in kept) < self.min_doc_chars:
            self._count("too_short")
            return None
        return Document(doc.title, kept)

    def __call__(self, docs: Iterable[Document]) -> Iterator[Document]:
        """Filter a stream of documents.

        Args:
            docs: input documents.
        Yields:
            the documents that pass, with short paragraphs removed.
        """
        for d in docs:
            out = self.apply(d)
            if out is not None:
                yield out


def choose_valid_indices(
    num_docs: int,
    valid_fraction: Optional[float] = None,
    valid_docs: Optional[int] = None,
    seed: int = 1,
) -> Set[int]:
    """Pick which documents (by position) go to the validation split.

    Deterministic for a given ``(num_docs, fraction/count, seed)``: a seeded shuffle of ``range(num_docs)``
    and its first ``k`` entries. With a fraction, ``k = round(fraction * num_docs)`` clamped to
    ``[1, num_docs - 1]`` so that neither split is empty (fairseq needs both) whenever ``num_docs >= 2``.

    Args:
        num_docs: number of documents.
        valid_fraction: share of documents for validation, in ``(0, 1)``; used when ``valid_docs`` is None.
        valid_docs: exact number of validation documents (must leave at least one for training).
        seed: random seed.
    Returns:
        the set of validation document indices.
    Raises:
        ConfigError: bad fraction/count; NotEnoughDocumentsError: fewer than 2 documents.
    """
    if num_docs < 2:
        raise NotEnoughDocumentsError(f"need at least 2 documents to make a train and a valid split, got {num_docs}")
    if valid_docs is not None:
        if not 1 <= valid_docs < num_docs:
            raise ConfigError(f"--valid-docs must be between 1 and {num_docs - 1} (there are {num_docs} documents), got {valid_docs}")
        k = valid_docs
    else:
        fraction = 0.05 if valid_fraction is None else valid_fraction
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"--valid-fraction must be in (0, 1), got {fraction}")
        k = min(max(int(round(fraction * num_docs)), 1), num_docs - 1)
    order = list(range(num_docs))
    random.Random(seed).shuffle(order)
    return set(order[:k])
