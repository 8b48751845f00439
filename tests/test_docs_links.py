"""The documentation points only at what the repository holds and describes the kernel the code runs: every
relative link and every backticked repository path in README.md, docs/, examples/
and benchmarks/ exists, nothing names a file outside the repository, and docs/attention.md's chunk sizes are the
kernel's constants."""
import re
from pathlib import Path

import pytest

from etc_fairseq.attention import blocked

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("examples/*/README.md"), *REPO.glob("benchmarks/*.md")])
TOP = ("docs/", "etc_fairseq/", "examples/", "scripts/", "tests/", "benchmarks/", "user_dir/")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_paths_exist_in_the_repository(page):
    text = page.read_text(encoding="utf-8")
    links = [m.group(1) for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
             if not re.match(r"[a-z]+:", m.group(1))]
    paths = [m.group(1) for m in re.finditer(r"`([A-Za-z0-9_./-]+\.(?:md|py|sh|yaml|json|png))`", text)
             if m.group(1).startswith(TOP)]
    assert [t for t in links if not (page.parent / t).exists()] == []
    assert [t for t in paths if not (REPO / t).exists()] == []
    assert not re.search(r"/work/shared|shared/notes|notes/[a-z-]+\.md", text)  # the maintainers' own files


def test_the_docs_describe_the_kernel_that_runs():
    readme = (REPO / "docs" / "attention.md").read_text(encoding="utf-8")
    long_chunk = re.search(r"`Q = (\d+)` consecutive long queries \(`LONG_CHUNK`\)", readme)
    global_chunk = re.search(r"global queries go in chunks of (\d+)", readme)
    assert long_chunk and int(long_chunk.group(1)) == blocked.LONG_CHUNK
    assert global_chunk and int(global_chunk.group(1)) == blocked.GLOBAL_CHUNK
    assert re.search(r"blocks of `r\+1` is `autograd_blocked.py`, kept as a reference", readme)  # only the old one
