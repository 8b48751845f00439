"""Streaming reader for MediaWiki XML dumps (``pages-articles``; bz2, gzip or plain).

:func:`iter_pages` yields raw :class:`Page` records; :func:`iter_wikipedia_documents` turns article pages
into cleaned :class:`~etc_fairseq.prepare.documents.Document` objects (markup policy: see
:mod:`etc_fairseq.prepare.wikitext`). Memory stays flat: each ``<page>`` element is cleared once read and
detached from the root. Tags are matched without their XML namespace, so every export schema version works.
"""
from __future__ import annotations

import logging
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, Optional

from .documents import Document, DocumentFilter, InputFormatError, PathLike, open_binary
from .wikitext import is_disambiguation, is_redirect_text, wikitext_to_paragraphs

logger = logging.getLogger(__name__)


class DumpFormatError(InputFormatError):
    """A dump is not well-formed XML or not a MediaWiki export."""


@dataclass
class Page:
    """One ``<page>`` of a dump.

    Attributes:
        title: page title.
        ns: namespace number (0 = articles).
        page_id: the page id, or -1 when absent.
        redirect: the page is a redirect (``<redirect>`` element or ``#REDIRECT`` text).
        text: wikitext of the last revision in the page ("" when absent).
    """

    title: str
    ns: int
    page_id: int
    redirect: bool
    text: str


@dataclass
class WikiStats:
    """Counts of what a dump read produced and skipped (``skipped`` maps reason -> pages)."""

    pages: int = 0
    articles: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        """Count one page skipped for ``reason``."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self) -> str:
        """One line for logs, e.g. ``206 pages, 103 articles kept; skipped: redirect=100, ...``."""
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())) or "none"
        return f"{self.pages} pages, {self.articles} articles kept; skipped: {skipped}"


def _local(tag: str) -> str:
    """Tag name without its ``{namespace}`` prefix."""
    return tag.rsplit("}", 1)[-1]


def _child(elem: ET.Element, name: str) -> Optional[ET.Element]:
    for c in elem:
        if _local(c.tag) == name:
            return c
    return None


def _namespace_of_title(title: str, namespaces: Dict[str, int]) -> int:
    """Namespace from a title prefix, for old dumps without ``<ns>`` elements."""
    if ":" in title:
        prefix = title.split(":", 1)[0].strip().lower()
        if prefix in namespaces:
            return namespaces[prefix]
    return 0


def iter_pages(path: PathLike) -> Iterator[Page]:
    """Stream every page of a MediaWiki XML dump.

    Args:
        path: the dump (``.xml``, ``.xml.bz2``, ``.xml.gz``; compression is detected from the content).
    Yields:
        :class:`Page` records in file order.
    Raises:
        DumpFormatError: malformed XML (the message names the file, line and column), a compressed stream
            that is corrupt, or a root element that is not ``<mediawiki>``.
        InputFormatError: the file is missing or unreadable.
    """
    path = Path(path)
    namespaces: Dict[str, int] = {}
    root: Optional[ET.Element] = None
    with open_binary(path) as f:
        try:
            for event, elem in ET.iterparse(f, events=("start", "end")):
                if event == "start":
                    if root is None:
                        root = elem
                        if _local(elem.tag) != "mediawiki":
                            raise DumpFormatError(
                                f"{path}: not a MediaWiki XML dump (root element is <{_local(elem.tag)}>, expected <mediawiki>)"
                            )
                    continue
                name = _local(elem.tag)
                if name == "namespace":
                    key = elem.get("key")
                    if key is not None and elem.text:
                        namespaces[elem.text.strip().lower()] = int(key)
                elif name == "page":
                    yield _page_from_element(elem, namespaces)
                    # Clearing the element frees its text; removing it from the root frees the element
                    # itself (the root otherwise keeps a reference to every page read so far).
                    elem.clear()
                    try:
                        root.remove(elem)  # pages are children of the root, which has only a few left
                    except ValueError:
                        pass
        except ET.ParseError as e:
            line, col = getattr(e, "position", (None, None))
            where = f"line {line}, column {col}" if line is not None else "unknown position"
            reason = re.sub(r":? ?line \d+, column \d+$", "", str(e)) or "syntax error"  # the position is said once
            raise DumpFormatError(f"{path}: malformed XML at {where}: {reason}") from None
        except (OSError, EOFError) as e:
            # bz2/gzip raise these for corrupt or truncated streams.
            raise DumpFormatError(f"{path}: cannot decompress or read the dump ({e})") from None
    if root is None:
        raise DumpFormatError(f"{path}: empty file, expected a MediaWiki XML dump")


def _page_from_element(page: ET.Element, namespaces: Dict[str, int]) -> Page:
    title_el = _child(page, "title")
    title = (title_el.text or "").strip() if title_el is not None else ""
    ns_el = _child(page, "ns")
    if ns_el is not None and (ns_el.text or "").strip().lstrip("-").isdigit():
        ns = int(ns_el.text.strip())
    else:
        ns = _namespace_of_title(title, namespaces)
    id_el = _child(page, "id")
    page_id = int(id_el.text) if id_el is not None and (id_el.text or "").strip().isdigit() else -1
    text = ""
    # History dumps hold several revisions; the last one is the current text.
    for rev in page:
        if _local(rev.tag) == "revision":
            t = _child(rev, "text")
            if t is not None:
                text = t.text or ""
    redirect = _child(page, "redirect") is not None or is_redirect_text(text)
    return Page(title=title, ns=ns, page_id=page_id, redirect=redirect, text=text)


def iter_wikipedia_documents(
    path: PathLike,
    doc_filter: Optional[DocumentFilter] = None,
    namespaces=(0,),
    skip_disambiguation: bool = True,
    stats: Optional[WikiStats] = None,
    progress_seconds: float = 10.0,
) -> Iterator[Document]:
    """Stream cleaned articles from a dump.

    Args:
        path: the dump file.
        doc_filter: minimum-length filters (:class:`DocumentFilter`); ``None`` keeps every non-empty article.
        namespaces: page namespaces to keep (0 = main/article namespace).
        skip_disambiguation: drop disambiguation pages (lists of links, not prose).
        stats: a :class:`WikiStats` to fill in (pass one to read the counts afterwards).
        progress_seconds: log a progress line at most this often.
    Yields:
        :class:`Document` objects (title, cleaned paragraphs).
    Raises:
        DumpFormatError / InputFormatError: see :func:`iter_pages`.
    """
    stats = stats if stats is not None else WikiStats()
    doc_filter = doc_filter if doc_filter is not None else DocumentFilter()
    last_log = time.monotonic()
    for page in iter_pages(path):
        stats.pages += 1
        now = time.monotonic()
        if now - last_log >= progress_seconds:
            logger.info("%s: %s", path, stats.summary())
            last_log = now
        if page.ns not in namespaces:
            stats.skip("namespace")
            continue
        if page.redirect:
            stats.skip("redirect")
            continue
        if skip_disambiguation and is_disambiguation(page.title, page.text):
            stats.skip("disambiguation")
            continue
        paragraphs = wikitext_to_paragraphs(page.text)
        if not paragraphs:
            stats.skip("empty")
            continue
        before = dict(doc_filter.counts)
        doc = doc_filter.apply(Document(page.title, paragraphs))
        if doc is None:
            # Attribute the skip to the filter reason that just fired.
            for k, v in doc_filter.counts.items():
                if k != "short_paragraphs" and v != before.get(k, 0):
                    stats.skip(k)
            continue
        stats.articles += 1
        yield doc
    logger.info("%s: %s", path, stats.summary())
