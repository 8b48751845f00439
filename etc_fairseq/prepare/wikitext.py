"""Wikitext -> plain paragraphs, with mwparserfromhell.

Policy (what survives, and why):

- Kept: running text, the visible text of internal links (``[[a|b]]`` -> ``b``), titles of bracketed
  external links, the contents of formatting tags (bold, italics, ``<sup>``, ``<blockquote>``...), list
  items (each becomes its own paragraph), and the inline text of a few templates that carry running text
  (``{{lang|..}}``, ``{{nowrap|..}}``, ``{{convert|..}}``).
- Dropped: every other template (infoboxes, citations, navboxes), ``<ref>`` and other non-prose tags
  (tables, galleries, math, code), comments, file/image/category links, interlanguage links, bare URLs.
- Headings are *not* kept as text: a heading ends the current paragraph, so sections stay as paragraph
  breaks and no short heading lines pollute the paragraph stream. Sections whose content is not prose
  (References, External links, See also, Further reading, Notes, Bibliography, ...) are dropped together
  with their sub-sections.
- Paragraphs are lines of the rendered text: wikitext writes one paragraph per line and one list item per
  line, so each non-blank line becomes one whitespace-normalised paragraph.
"""
from __future__ import annotations

import html
import re
from typing import List, Optional

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument,
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Tag,
    Template,
    Text,
    Wikilink,
)
from mwparserfromhell.wikicode import Wikicode

from .documents import normalize_whitespace

# Tags whose content is not running prose.
DROP_TAGS = frozenset(
    """ref references table gallery math chem ce score timeline imagemap syntaxhighlight source pre
    code graph mapframe maplink hiero includeonly noinclude templatedata categorytree inputbox
    indicator section div""".split()
)
# ``div`` is dropped because in articles it almost only wraps layout boxes (columns of references,
# image galleries), not prose.

# Link namespaces that render as media or metadata rather than text.
DROP_LINK_NAMESPACES = frozenset({"file", "image", "media", "category"})

# Section titles (lower-cased) whose content is lists of references and links, not prose.
END_SECTIONS = frozenset(
    {
        "references",
        "notes",
        "footnotes",
        "citations",
        "sources",
        "bibliography",
        "works cited",
        "external links",
        "further reading",
        "see also",
        "notes and references",
        "references and notes",
        "reference",
        "external link",
        "sources and further reading",
    }
)

_INTERWIKI_RE = re.compile(r"^[a-z][a-z\-]{1,11}:")
_EMPTY_PARENS_RE = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_LEADING_SEP_IN_PARENS_RE = re.compile(r"\(\s*(?:[,;:]\s*)+")
_REPEATED_SEP_RE = re.compile(r"([,;])(?:\s*[,;])+")
# Runs of apostrophes are bold/italic markup the parser left unmatched: "Iliad'''s" -> "Iliad's".
_APOSTROPHE_RUN_RE = re.compile(r"'{2,}")
_HAS_WORD_RE = re.compile(r"\w")
_SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+([,.;:!?)])")
_SPACE_AFTER_OPEN_RE = re.compile(r"\(\s+")
_REDIRECT_RE = re.compile(r"^\s*#\s*redirect", re.IGNORECASE)
_DISAMBIG_RE = re.compile(
    r"\{\{\s*(?:disambiguation|disambig|disamb|dab|hndis|geodis|set index article|sia)\s*(?:\||\}\})",
    re.IGNORECASE,
)

# Fast path before parsing (see _prestrip): references, comments and top-level templates.
_REF_OR_COMMENT_RE = re.compile(r"<ref\b[^>]*/>|<ref\b[^>]*>.*?</ref\s*>|<!--.*?-->", re.DOTALL | re.IGNORECASE)
_BRACES_RE = re.compile(r"\{\{|\}\}")
# Behaviour switches such as __TOC__ / __NOEDITSECTION__ are page settings, not text.
_BEHAVIOUR_SWITCH_RE = re.compile(r"__[A-Z]+__")
_KEPT_TEMPLATE_RE = re.compile(
    r"\s*(?:nowrap|nobr|small|smaller|big|sic|lang|lang-[a-z\-]+|convert|cvt)\s*(?:\||\}\})", re.IGNORECASE
)


def is_redirect_text(wikitext: str) -> bool:
    """Whether a page's wikitext is a redirect (``#REDIRECT [[...]]``).

    Args:
        wikitext: raw page text.
    Returns:
        True for redirects.
    """
    return bool(_REDIRECT_RE.match(wikitext))


def is_disambiguation(title: str, wikitext: str) -> bool:
    """Whether a page is a disambiguation page (its title says so, or it uses a disambiguation template).

    Args:
        title: page title.
        wikitext: raw page text.
    Returns:
        True for disambiguation pages, which are lists of links rather than prose.
    """
    # A regex over the raw text, not a parse: parsing every page twice would double the cleaning cost.
    return title.endswith("(disambiguation)") or bool(_DISAMBIG_RE.search(wikitext))


def _template_text(t: Template) -> Optional[Wikicode]:
    """The running text of the few inline templates worth keeping, else None (the template is dropped)."""
    name = str(t.name).strip().lower().replace("_", " ")

    def param(key) -> Optional[Wikicode]:
        return t.get(key).value if t.has(key) else None

    if name in ("nowrap", "nobr", "small", "smaller", "big", "sic", "nowrap begin"):
        return param("1")
    if name == "lang":
        return param("2")
    if name.startswith("lang-"):
        return param("1")
    if name in ("convert", "cvt"):
        value, unit = param("1"), param("2")
        if value is not None and unit is not None:
            return mwparserfromhell.parse(f"{value} {unit}")
    return None


def _render(code: Wikicode, out: List[str]) -> None:
    """Append the visible prose of ``code`` to ``out`` (see the module docstring for the policy)."""
    skip_level = 0  # > 0 while inside a dropped end section of that heading level
    for node in code.nodes:
        if isinstance(node, Heading):
            title = normalize_whitespace(_to_text(node.title)).lower().rstrip(":")
            if skip_level and node.level > skip_level:
                continue
            skip_level = node.level if title in END_SECTIONS else 0
            out.append("\n\n")
            continue
        if skip_level:
            continue
        if isinstance(node, Text):
            out.append(node.value)
        elif isinstance(node, Wikilink):
            _render_wikilink(node, out)
        elif isinstance(node, Tag):
            _render_tag(node, out)
        elif isinstance(node, HTMLEntity):
            out.append(node.normalize())
        elif isinstance(node, ExternalLink):
            if node.title is not None and node.brackets:
                _render(node.title, out)
        elif isinstance(node, Template):
            inner = _template_text(node)
            if inner is not None:
                _render(inner, out)
        elif isinstance(node, (Comment, Argument)):
            pass
        # Any other node type (new in a future mwparserfromhell) is dropped rather than rendered raw.


def _render_wikilink(node: Wikilink, out: List[str]) -> None:
    title = str(node.title).strip()
    visible_colon = title.startswith(":")  # [[:Category:X]] is a visible link, not a categorisation
    bare = title.lstrip(":")
    namespace = bare.split(":", 1)[0].strip().lower() if ":" in bare else ""
    if not visible_colon and namespace in DROP_LINK_NAMESPACES:
        return
    if node.text is None:
        if not visible_colon and _INTERWIKI_RE.match(bare) and namespace not in ("wikipedia", "help", "portal"):
            return  # interlanguage link ([[de:Foo]]): metadata, not text
        out.append(bare)
        return
    text = node.text
    if not str(text).strip():
        # The "pipe trick": [[Foo (bar)|]] displays as "Foo".
        out.append(re.sub(r"\s*\(.*?\)\s*$", "", bare.split(":", 1)[-1]))
        return
    _render(text, out)


def _render_tag(node: Tag, out: List[str]) -> None:
    tag = str(node.tag).strip().lower()
    if tag in DROP_TAGS:
        return
    if tag == "br":
        out.append(" ")
        return
    if tag == "hr":
        out.append("\n\n")
        return
    if node.wiki_markup and tag in ("li", "dt", "dd"):
        return  # list markers (*, #, ;, :): the item text follows as plain nodes
    if node.contents is not None:
        _render(node.contents, out)


def _to_text(code) -> str:
    parts: List[str] = []
    _render(code if isinstance(code, Wikicode) else mwparserfromhell.parse(str(code)), parts)
    return "".join(parts)


def _apostrophes(m: "re.Match") -> str:
    """Keep one apostrophe where a possessive or contraction follows ("'s", "'t"), drop the rest."""
    nxt = m.string[m.end() : m.end() + 2]
    keep = len(nxt) >= 1 and nxt[0] in "st" and (len(nxt) == 1 or not nxt[1].isalnum())
    return "'" if keep else ""


def _tidy(line: str) -> str:
    """Whitespace and punctuation left over where markup was removed ("Einstein (; 1879)" etc.)."""
    line = normalize_whitespace(line)
    line = _APOSTROPHE_RUN_RE.sub(_apostrophes, line)
    line = _REPEATED_SEP_RE.sub(r"\1", line)
    line = _EMPTY_PARENS_RE.sub("", line)
    line = _LEADING_SEP_IN_PARENS_RE.sub("(", line)
    line = _SPACE_AFTER_OPEN_RE.sub("(", line)
    line = _SPACE_BEFORE_PUNCT_RE.sub(r"\1", line)
    return normalize_whitespace(line)


def _prestrip(wikitext: str) -> str:
    """Remove references, comments, behaviour switches and top-level templates (except the kept inline ones).

    Why: mwparserfromhell's Python tree builder spends most of its time on citation templates inside
    ``<ref>`` and on infoboxes, all of which are dropped anyway. Cutting them out of the string first makes
    cleaning about 3x faster; the parser still handles everything left (nested or unbalanced markup included).

    Args:
        wikitext: raw wikitext.
    Returns:
        wikitext without those spans (an unclosed ``{{`` is left for the parser).
    """
    text = _BEHAVIOUR_SWITCH_RE.sub("", _REF_OR_COMMENT_RE.sub("", wikitext))
    out: List[str] = []
    depth = 0
    pos = start = 0
    for m in _BRACES_RE.finditer(text):
        if m.group() == "{{":
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0 and not _KEPT_TEMPLATE_RE.match(text, start + 2):
                out.append(text[pos:start])
                pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def wikitext_to_paragraphs(wikitext: str) -> List[str]:
    """Convert one page's wikitext to plain-text paragraphs.

    Args:
        wikitext: raw wikitext (as found in a dump's ``<text>`` element, XML entities already decoded).
    Returns:
        non-empty, whitespace-normalised paragraphs in page order (no length filter applied here).
    """
    code = mwparserfromhell.parse(_prestrip(wikitext))
    parts: List[str] = []
    _render(code, parts)
    # Entities hidden inside text that the parser did not see as entities (rare double escaping).
    text = html.unescape("".join(parts))
    paragraphs = []
    for line in text.split("\n"):
        line = _tidy(line)
        # Table/template residue that slipped through as plain text starts with these characters.
        if not line or line[0] in "|!{}" or line.startswith("[[") or not _HAS_WORD_RE.search(line):
            continue
        paragraphs.append(line)
    return paragraphs
