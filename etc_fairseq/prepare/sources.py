"""Document sources: any mix of Wikipedia dumps and BERT-layout text files, as one filtered stream.

Every ``etc-prepare`` subcommand reads its inputs through :func:`iter_documents`, so a new input format
only needs a reader here.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from .documents import Document, DocumentFilter, InputFormatError, PathLike, detect_input_format, read_text_documents
from .wikipedia import WikiStats, iter_wikipedia_documents

from etc_fairseq.progress import progress

logger = logging.getLogger(__name__)


@dataclass
class SourceStats:
    """Counts over all inputs of one :func:`iter_documents` call.

    Attributes:
        docs: documents yielded.
        paragraphs: paragraphs in those documents.
        chars: characters in those paragraphs.
        skipped: reason -> documents (or pages, for dumps) skipped, summed over inputs.
        per_input: input path -> documents yielded from it.
    """

    docs: int = 0
    paragraphs: int = 0
    chars: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)
    per_input: Dict[str, int] = field(default_factory=dict)

    def add_skips(self, counts: Dict[str, int]) -> None:
        """Add ``reason -> count`` entries to ``skipped``."""
        for k, v in counts.items():
            if v:
                self.skipped[k] = self.skipped.get(k, 0) + v


def check_inputs(paths: Sequence[PathLike]) -> List[Path]:
    """Fail early, with the file's name, when an input is missing or not a regular file.

    Args:
        paths: input paths.
    Returns:
        the paths as ``Path`` objects.
    Raises:
        InputFormatError: a path does not exist or is a directory.
    """
    out = []
    for p in paths:
        p = Path(p).expanduser()
        if not p.exists():
            raise InputFormatError(
                f"{p}: no such input file (expected a MediaWiki XML dump .xml/.xml.bz2, or a text file with one "
                "paragraph per line and a blank line between documents)"
            )
        if not p.is_file():
            raise InputFormatError(f"{p}: is not a regular file (expected a dump or a text file)")
        out.append(p)
    if not out:
        raise InputFormatError("no input files given")
    return out


def iter_documents(
    paths: Sequence[PathLike],
    doc_filter: Optional[DocumentFilter] = None,
    max_docs: Optional[int] = None,
    stats: Optional[SourceStats] = None,
    progress_every: int = 1000,
    progress_seconds: float = 5.0,
) -> Iterator[Document]:
    """Stream documents from dumps and text files, in the order given.

    Args:
        paths: inputs; each is detected as a Wikipedia dump or a BERT-layout text file
            (:func:`~etc_fairseq.prepare.documents.detect_input_format`).
        doc_filter: length filters applied to every document (Wikipedia pages are also cleaned and
            redirects/disambiguation/non-article pages skipped).
        max_docs: stop after this many documents (over all inputs).
        stats: a :class:`SourceStats` to fill in.
        progress_every / progress_seconds: log "N docs" after every ``progress_every`` documents, and at
            least every ``progress_seconds`` while documents keep coming.
    Yields:
        :class:`Document` objects.
    Raises:
        InputFormatError (and its subclass DumpFormatError): a missing, unreadable or malformed input.
    """
    paths = check_inputs(paths)
    stats = stats if stats is not None else SourceStats()
    doc_filter = doc_filter if doc_filter is not None else DocumentFilter()
    last_log = time.monotonic()
    for path in paths:
        fmt = detect_input_format(path)
        logger.info("reading %s (%s)", path, "MediaWiki XML dump" if fmt == "wikipedia" else "text, one paragraph per line")
        wiki_stats = WikiStats()
        before = dict(doc_filter.counts)
        if fmt == "wikipedia":
            docs = iter_wikipedia_documents(path, doc_filter=doc_filter, stats=wiki_stats)
        else:
            docs = doc_filter(read_text_documents(path))
        n_here = 0
        try:
            for doc in progress(docs, desc=f"reading {path.name}", unit="doc"):
                if max_docs is not None and stats.docs >= max_docs:
                    break
                stats.docs += 1
                stats.paragraphs += len(doc.paragraphs)
                stats.chars += doc.num_chars
                n_here += 1
                now = time.monotonic()
                if stats.docs % progress_every == 0 or now - last_log >= progress_seconds:
                    logger.info("%d docs processed (%d paragraphs)", stats.docs, stats.paragraphs)
                    last_log = now
                yield doc
        finally:
            close = getattr(docs, "close", None)
            if close is not None:
                close()
        stats.per_input[str(path)] = n_here
        if fmt == "wikipedia":
            stats.add_skips(wiki_stats.skipped)
        else:
            stats.add_skips(
                {k: v - before.get(k, 0) for k, v in doc_filter.counts.items() if k != "short_paragraphs"}
            )
        stats.add_skips({"short_paragraphs": doc_filter.counts.get("short_paragraphs", 0) - before.get("short_paragraphs", 0)})
        if max_docs is not None and stats.docs >= max_docs:
            logger.info("stopping at --max-docs %d", max_docs)
            break
    logger.info("%d docs read (%d paragraphs, %d characters)", stats.docs, stats.paragraphs, stats.chars)
