"""The code blocks of the project's markdown pages, for the docs tests (``tests/test_docs_commands.py``).

Pages: ``README.md``, ``docs/*.md`` and ``examples/*/README.md``. A page shows code only in fenced blocks
whose opening fence names a language (```` ```bash ````, ```` ```python ````, ```` ```text ```` for output,
pictures and transcripts, ...). Blocks in ``COMMAND_LANGS`` are what a reader runs: each one is either run
by a test, in page order, or carries a marker, an HTML comment on the line just above its fence:

    <!-- docs-test: not run: REASON -->            (a GPU, a TPU, an official file that cannot be had here)
    <!-- docs-test: run by tests/test_x.py -->     (another test runs it; that test names the page;
                                                    ": NOTE" may follow the test's name)

Pure text functions, no project imports, so they can be tested on exact small strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

#: fence languages a reader runs (shell commands and Python code)
COMMAND_LANGS = ("bash", "sh", "shell", "console", "python")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s+")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page.

    ``page``: the page's path as given; ``line``: 1-based line of the opening fence; ``lang``: the fence's
    language ("" when none); ``text``: the lines between the fences, de-indented by the fence's indent,
    ending in a newline; ``marker``: the text of a ``<!-- docs-test: ... -->`` comment on the line just
    above the fence (blank lines between are not allowed), else None."""

    page: str
    line: int
    lang: str
    text: str
    marker: Optional[str] = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.lang in COMMAND_LANGS


def parse_blocks(text: str, page: str = "<page>") -> Tuple[List[Block], List[str]]:
    """Split a markdown page into its fenced code blocks.

    Returns ``(blocks, problems)``; each problem is one line ``page:line: what is wrong``: a fence without a
    language, a fence never closed, an indented (4-space) code block outside a list (commands would hide
    there from the docs tests), a ``docs-test`` marker that is not directly above a fence."""
    lines = text.split("\n")
    blocks: List[Block] = []
    problems: List[str] = []
    i = 0
    prev_blank = True  # the line before the current one is blank (or the page starts)
    in_list = False  # the current paragraph run belongs to a list item (its indented lines are not code)
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
            start = i
            body = []
            i += 1
            closed = False
            while i < len(lines):
                close = re.match(r"^ {0,3}(`{3,}|~{3,})\s*$", lines[i])
                if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                    closed = True
                    break
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i].lstrip())
                i += 1
            if not closed:
                problems.append(f"{page}:{start + 1}: code fence never closed")
                break
            marker = None
            if start > 0:
                mm = _MARKER.match(lines[start - 1])
                if mm:
                    marker = mm.group(1)
            if not lang:
                problems.append(f"{page}:{start + 1}: code fence without a language (```bash, ```python, ```text, ...)")
            blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marker))
            i += 1
            prev_blank = False
            continue
        if _MARKER.match(line):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not _FENCE.match(nxt):
                problems.append(f"{page}:{i + 1}: docs-test marker not directly above a code fence")
        stripped = line.strip()
        if not stripped:
            prev_blank = True
            i += 1
            continue
        if _LIST_ITEM.match(line) and not line.startswith("    "):
            in_list = True
        elif not line.startswith((" ", "\t")):
            in_list = False
        if prev_blank and (line.startswith("    ") or line.startswith("\t")) and not in_list:
            problems.append(f"{page}:{i + 1}: indented code block: use a fenced block with a language")
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(("    ", "\t"))):
                i += 1
            prev_blank = True
            continue
        prev_blank = False
        i += 1
    return blocks, problems


def doc_pages(repo: Path) -> List[Path]:
    """The pages the docs tests cover: README.md, docs/*.md, examples/*/README.md (sorted)."""
    pages = [repo / "README.md"] + sorted((repo / "docs").glob("*.md")) + sorted((repo / "examples").glob("*/README.md"))
    return [p for p in pages if p.is_file()]


def parse_marker(marker: str) -> Tuple[str, str]:
    """``"not run: REASON"`` -> ``("not run", REASON)``; ``"run by tests/test_x.py"`` (optionally followed by
    ``": NOTE"``) -> ``("run by", "tests/test_x.py")``.

    Raises ValueError for anything else or an empty reason."""
    m = re.fullmatch(r"not run:\s*(.+)", marker)
    if m:
        return "not run", m.group(1).strip()
    m = re.fullmatch(r"run by\s+(tests/test_\w+\.py)(?::\s*\S.*)?", marker)
    if m:
        return "run by", m.group(1)
    raise ValueError(f"unknown docs-test marker {marker!r}: expected 'not run: REASON' or 'run by tests/test_x.py'")
