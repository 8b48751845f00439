"""Every command block of the docs runs as written, in page order, or says why it cannot.

The pages are ``README.md``, ``docs/*.md`` and ``examples/*/README.md`` (``tests/doc_blocks.py`` reads them).
Every ```` ```bash ```` / ```` ```python ```` block is either

- run here: the page's blocks, in order, as one bash script (a Python block is fed to ``python -``), in a
  scratch copy of the repository (its own ``runs/``, as a user's fresh clone after ``scripts/setup.sh``);
  the page is listed in ``PAGES`` below (``PAGES_RUN_BY``: another test runs all of a page's blocks); or
- marked in the page, on the line above its fence: ``<!-- docs-test: not run: REASON -->`` (a GPU, a TPU,
  official files or checkpoints that cannot be had here, the test suite itself) or
  ``<!-- docs-test: run by tests/test_x.py -->`` (that test runs it and names the page).

A new block that is neither run nor marked fails ``test_every_command_block_is_run_or_marked``, so the docs
cannot drift away from the code unnoticed.

Tiny scale, commands unchanged: the scratch copy's ``.venv/bin`` (first on ``PATH``; the recipes'
``run.sh`` use ``.venv/bin`` too) holds one small wrapper per console script. A wrapper logs the call and
runs the real command with the page's arguments followed by the ``SCALE_DOWN`` arguments for that command
(argparse and hydra take the last value given): 2 updates, a few documents, 2 of them held out (every
fairseq-train and fairseq-validate of a pretraining page ends with a pass over them). ``scripts/setup.sh`` finds
the set-up stamp in that ``.venv`` and does nothing (the set-up has run). To keep the ~100 commands cheap, a
wrapper runs its command as a fork of ``tests/forkserver.py`` (torch and fairseq imported once per test
session; the command's own file, arguments, directory, environment and streams; nothing of this project
imported before the fork), and so do ``python -m MODULE`` and ``python SCRIPT``; ``python -`` (a page's
```` ```python ```` block) and ``python -c`` run the real interpreter.

Official inputs that cannot be downloaded here (HotpotQA, WikiHop, NQ, OpenKP files) are stand-ins at the
paths the page names: the CONSTRUCTED files of ``examples/<dataset>/construct.py`` (real Wikipedia text,
written questions). A page that starts "after examples/pretraining" gets that recipe's outputs
(``runs/etc_pretraining/{data,checkpoints/checkpoint_last.pt}``) from the session's tiny pretraining fixtures.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from doc_blocks import COMMAND_LANGS, Block, doc_pages, parse_blocks, parse_marker

REPO = Path(__file__).resolve().parents[1]
REAL_BIN = Path(sys.executable).parent

#: arguments appended to a console command (key: the command, or "command subcommand"), so that each
#: documented command runs as written at tiny scale; the last value of an option wins.
SCALE_DOWN: Dict[str, List[str]] = {
    "fairseq-train": ["--max-update", "2", "--update-freq", "1"],
    "fairseq-hydra-train": ["optimization.max_update=2", "optimization.update_freq=[1]"],
    "etc-prepare pretrain": ["--max-docs", "12", "--vocab-size", "1000", "--valid-docs", "2"],
    "etc-prepare mlm": ["--max-docs", "20", "--vocab-size", "1000"],
    "etc-prepare article-classification": ["--max-docs", "20"],
    "etc-prepare nextsent": ["--train", "8", "--valid", "4"],
    "python examples/wikihop/construct.py": ["--train", "8", "--valid", "4"],
    "python examples/nq/construct.py": ["--train", "6", "--valid", "4"],
    "python examples/openkp/construct.py": ["--train", "6", "--valid", "4"],
}
#: the console scripts the wrappers stand for (each must exist in the test's venv)
CONSOLE_SCRIPTS = ("fairseq-train", "fairseq-validate", "fairseq-hydra-train", "fairseq-preprocess", "etc-prepare",
                   "etc-predict", "etc-evaluate", "etc-lift", "etc-show")


@dataclass(frozen=True)
class PageRun:
    """How a page is run: ``pretrained``: the page starts after examples/pretraining (its data and
    checkpoint are laid out first); ``stand_ins``: official files the page reads, made from CONSTRUCTED ones
    (keys of ``STAND_INS``); ``scale_down``: extra wrapper arguments for this page only."""

    pretrained: bool = False
    stand_ins: Tuple[str, ...] = ()
    scale_down: Dict[str, List[str]] = field(default_factory=dict)


#: the pages this test runs (every other page's command blocks must be marked)
PAGES: Dict[str, PageRun] = {
    "README.md": PageRun(),
    "docs/fairseq.md": PageRun(),
    "docs/finetuning.md": PageRun(pretrained=True, stand_ins=("hotpotqa",)),
    "docs/converting.md": PageRun(pretrained=True),
    "docs/etc-show.md": PageRun(pretrained=True, scale_down={"etc-show": ["--index", "0"]}),
    "docs/python-api.md": PageRun(),
    "examples/etc_tiny_mlm/README.md": PageRun(),
    "examples/pretraining/README.md": PageRun(),
    "examples/lifting/README.md": PageRun(),
    "examples/hotpotqa/README.md": PageRun(pretrained=True, stand_ins=("hotpotqa",)),
    "examples/wikihop/README.md": PageRun(pretrained=True, stand_ins=("wikihop",)),
    "examples/nq/README.md": PageRun(pretrained=True, stand_ins=("nq",)),
    "examples/openkp/README.md": PageRun(pretrained=True, stand_ins=("openkp",)),
    "examples/nextsent/README.md": PageRun(pretrained=True),
}

#: pages whose every command block another test runs, in order (that test names the page)
PAGES_RUN_BY: Dict[str, str] = {
    "docs/structured.md": "tests/test_docs_structured.py",
    "docs/huggingface.md": "tests/test_docs_huggingface.py",
}


# ---------------------------------------------------------------------------------------------------------
# reading the pages (fast checks)
# ---------------------------------------------------------------------------------------------------------

def all_blocks() -> Dict[str, List[Block]]:
    out = {}
    for path in doc_pages(REPO):
        rel = str(path.relative_to(REPO))
        out[rel] = parse_blocks(path.read_text(encoding="utf-8"), rel)[0]
    return out


def test_parse_blocks_exact():
    page = "\n".join([
        "# T",                                   # 1
        "```bash",                               # 2
        "echo one",                              # 3
        "```",                                   # 4
        "<!-- docs-test: not run: needs a GPU -->",  # 5
        "  ```python",                           # 6
        "  print(2)",                            # 7
        "  ```",                                 # 8
        "- a list item",                         # 9
        "",                                      # 10
        "    continued item text, not code",     # 11
        "",                                      # 12
        "para",                                  # 13
        "",                                      # 14
        "    fairseq-train DATA",                # 15
        "",                                      # 16
        "```",                                   # 17
        "out",                                   # 18
        "```",                                   # 19
        "<!-- docs-test: run by tests/test_x.py -->",  # 20
        "",                                      # 21
        "~~~text",                               # 22
        "```not a fence end",                    # 23
        "~~~",                                   # 24
    ])
    blocks, problems = parse_blocks(page, "p.md")
    assert [(b.line, b.lang, b.text, b.marker) for b in blocks] == [
        (2, "bash", "echo one\n", None),
        (6, "python", "print(2)\n", "not run: needs a GPU"),
        (17, "", "out\n", None),
        (22, "text", "```not a fence end\n", None),
    ]
    assert problems == [
        "p.md:15: indented code block: use a fenced block with a language",
        "p.md:17: code fence without a language (```bash, ```python, ```text, ...)",
        "p.md:20: docs-test marker not directly above a code fence",
    ]
    assert [b.is_command for b in blocks] == [True, True, False, False]
    assert parse_marker("not run: needs a GPU") == ("not run", "needs a GPU")
    assert parse_marker("run by tests/test_x.py") == ("run by", "tests/test_x.py")
    assert parse_marker("run by tests/test_x.py: as python -m") == ("run by", "tests/test_x.py")
    for bad in ("not run:", "skip it", "run by test_x.py", "run by tests/test_x.py:"):
        with pytest.raises(ValueError):
            parse_marker(bad)


def test_page_script_and_documented_calls_exact():
    blocks = [
        Block("p.md", 1, "bash", "etc-prepare mlm --out x  # etc-lift in a comment\n# fairseq-train commented out\n"
                                 "for r in a b; do\n  fairseq-validate $r\ndone\nA=1 etc-show x | tee y\n"),
        Block("p.md", 9, "python", "print('fairseq-train')\n"),
        Block("p.md", 12, "bash", "etc-lift never run\n", marker="not run: a GPU"),
        Block("p.md", 15, "text", "fairseq-train output\n"),
    ]
    assert page_script(blocks) == (
        "set -eo pipefail\n"
        "echo '##### docs test: block p.md:1 (bash)'\n"
        "etc-prepare mlm --out x  # etc-lift in a comment\n# fairseq-train commented out\n"
        "for r in a b; do\n  fairseq-validate $r\ndone\nA=1 etc-show x | tee y\n"
        "echo '##### docs test: block p.md:9 (python)'\n"
        "python - <<'DOCS_TEST_PYTHON_EOF'\nprint('fairseq-train')\nDOCS_TEST_PYTHON_EOF\n"
        "echo '##### docs test: page done'\n")
    # the assignment prefix hides etc-show from the count: the count is a lower bound of what must run
    assert documented_calls(blocks) == {"etc-prepare": 1, "fairseq-validate": 1}


def test_pages_fence_every_code_block_with_a_language():
    problems = []
    for path in doc_pages(REPO):
        problems += parse_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))[1]
    assert not problems, "\n".join(problems)


def test_every_command_block_is_run_or_marked():
    wrong = []
    for page, blocks in all_blocks().items():
        for b in blocks:
            if not b.is_command:
                continue
            if b.marker is None and page in PAGES_RUN_BY:
                continue
            if b.marker is None:
                if page not in PAGES:
                    wrong.append(f"{b.where}: a ```{b.lang} block that no test runs: add {page} to PAGES in "
                                 f"tests/test_docs_commands.py, or mark it <!-- docs-test: not run: REASON -->")
                elif b.lang == "console":
                    wrong.append(f"{b.where}: ```console blocks are not run: use ```bash (commands) or ```text (a transcript)")
                continue
            try:
                kind, what = parse_marker(b.marker)
            except ValueError as e:
                wrong.append(f"{b.where}: {e}")
                continue
            if kind == "run by":
                test = REPO / what
                if not test.is_file() or page not in test.read_text(encoding="utf-8"):
                    wrong.append(f"{b.where}: marked 'run by {what}', but that test does not exist or does not name {page}")
    for page in PAGES:
        assert (REPO / page).is_file(), page
    for page, test in PAGES_RUN_BY.items():
        assert page not in PAGES and (REPO / page).is_file(), page
        assert page in (REPO / test).read_text(encoding="utf-8"), f"{test} does not name {page}"
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------------------------------------
# running a page
# ---------------------------------------------------------------------------------------------------------

WRAPPER = """#!{python}
# docs test wrapper: log the call, then run the real command with the scale-down arguments appended
import json, os, sys
name, real, rules = {name!r}, {real!r}, {rules!r}
args = sys.argv[1:]
key = name + " " + args[0] if args and name + " " + args[0] in rules else name
extra = rules.get(key, [])
with open(os.environ["ETC_DOCS_TEST_LOG"], "a") as f:
    f.write(json.dumps([name] + args) + "\\n")
server = os.environ.get("ETC_DOCS_TEST_FORKSERVER")
if server:
    sys.path.insert(0, {tests!r})
    import forkserver
    if name not in ("python", "python3"):
        sys.exit(forkserver.run(server, real, args + extra))
    if args[:1] == ["-m"] and len(args) > 1:
        sys.exit(forkserver.run(server, args[1], args[2:] + extra, module=True))
    if args and not args[0].startswith("-"):
        sys.exit(forkserver.run(server, args[0], args[1:] + extra))
os.execv(real, [real] + args + extra)  # python -, python -c: the real interpreter
"""


def make_scratch_clone(dst: Path) -> None:
    """Copy the repository's files (tracked and untracked-but-not-ignored: what a clone of this working
    tree has) to ``dst``."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                               capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file()
                 and not {".git", ".venv", "runs", ".cache", "__pycache__"} & set(p.relative_to(REPO).parts)]
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def make_wrapper_venv(scratch: Path, rules: Dict[str, List[str]]) -> Path:
    """``scratch/.venv/bin``: a wrapper per console script and ``python``; the stamp ``scripts/setup.sh``
    leaves when it is done (the test runs in a set-up venv, so set-up is a no-op there); an ``activate`` that
    puts the wrappers first on PATH."""
    venv = scratch / ".venv"
    bin_dir = venv / "bin"
    bin_dir.mkdir(parents=True)
    digest = hashlib.sha1((scratch / "setup.py").read_bytes() + (scratch / "scripts" / "setup.sh").read_bytes())
    (venv / f".etc-setup-{digest.hexdigest()[:12]}").touch()  # the name setup.sh checks
    for name in CONSOLE_SCRIPTS + ("python", "python3"):
        real = REAL_BIN / name if name not in ("python", "python3") else Path(sys.executable)
        assert real.exists(), real
        path = bin_dir / name
        path.write_text(WRAPPER.format(python=sys.executable, name=name, real=str(real), rules=rules,
                                       tests=str(Path(__file__).parent)))
        path.chmod(0o755)
    (bin_dir / "activate").write_text(f'export VIRTUAL_ENV="{venv}"\nexport PATH="{bin_dir}:$PATH"\n')
    return bin_dir


def page_script(blocks: List[Block]) -> str:
    """The page's runnable blocks as one bash script, in page order; each starts with a banner line."""
    parts = ["set -eo pipefail"]
    for b in blocks:
        if not b.is_command or b.marker is not None:
            continue
        parts.append(f"echo '##### docs test: block {b.where} ({b.lang})'")
        if b.lang == "python":
            parts.append(f"python - <<'DOCS_TEST_PYTHON_EOF'\n{b.text}DOCS_TEST_PYTHON_EOF")
        else:
            parts.append(b.text.rstrip("\n"))
    parts.append("echo '##### docs test: page done'")
    return "\n".join(parts) + "\n"


COMMAND_RE = re.compile(r"(?m)(?:^|[;&|(]|\bdo|\bthen)\s*((?:fairseq|etc)-[a-z-]+)\b")


def documented_calls(blocks: List[Block]) -> Dict[str, int]:
    """How many times each console command is written in the runnable blocks (outside comments)."""
    counts: Dict[str, int] = {}
    for b in blocks:
        if b.is_command and b.marker is None and b.lang != "python":
            text = "\n".join(line.split(" #")[0] for line in b.text.splitlines() if not line.lstrip().startswith("#"))
            for name in COMMAND_RE.findall(text):
                counts[name] = counts.get(name, 0) + 1
    return counts


# stand-ins for official files: built once per session from the CONSTRUCTED example data

def _construct(example: str, out: Path, dump: Path, *args: str) -> Path:
    subprocess.run([sys.executable, str(REPO / "examples" / example / "construct.py"), "--dump", str(dump),
                    "--out", str(out), *args], check=True, capture_output=True, cwd=REPO, timeout=600)
    return out


def _hotpotqa(raw: Path, scratch: Path) -> None:
    shutil.copyfile(raw / "constructed_train.json", scratch / "hotpot_train_v1.1.json")
    shutil.copyfile(raw / "constructed_dev.json", scratch / "hotpot_dev_distractor_v1.json")


def _wikihop(raw: Path, scratch: Path) -> None:
    (scratch / "qangaroo_v1.1" / "wikihop").mkdir(parents=True)
    for name in ("train.json", "dev.json"):
        shutil.copyfile(raw / name, scratch / "qangaroo_v1.1" / "wikihop" / name)


def _nq(raw: Path, scratch: Path) -> None:
    (scratch / "v1.0" / "train").mkdir(parents=True)
    (scratch / "v1.0" / "dev").mkdir(parents=True)
    shutil.copyfile(raw / "nq-train.jsonl.gz", scratch / "v1.0" / "train" / "nq-train-00.jsonl.gz")
    with gzip.open(scratch / "v1.0" / "dev" / "nq-dev-00.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write((raw / "nq-dev.jsonl").read_text(encoding="utf-8"))


def _openkp(raw: Path, scratch: Path) -> None:
    shutil.copyfile(raw / "train.jsonl", scratch / "OpenKPTrain.jsonl")
    shutil.copyfile(raw / "dev.jsonl", scratch / "OpenKPDev.jsonl")


#: stand-in name -> (construct.py arguments, the function laying the files out in the scratch clone)
STAND_INS = {
    "hotpotqa": ((), _hotpotqa),
    "wikihop": (("--train", "8", "--valid", "4"), _wikihop),
    "nq": (("--train", "6", "--valid", "4"), _nq),
    "openkp": (("--train", "6", "--valid", "4"), _openkp),
}


@pytest.fixture(scope="session")
def constructed_raw(wiki_dump, tmp_path_factory):
    """``get(name)`` -> the directory of ``examples/<name>/construct.py``'s files, built on first use."""
    made: Dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = _construct(name, tmp_path_factory.mktemp(f"constructed_{name}"), wiki_dump, *STAND_INS[name][0])
        return made[name]

    return get


@pytest.fixture(scope="session")
def forkserver_socket():
    """The socket path of the session's ``tests/forkserver.py`` (stopped, with any command it still runs, at
    the end of the session)."""
    import forkserver

    return forkserver.server_socket()


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_commands_run_as_written(page, tmp_path, request, etc_cache_dir, constructed_raw, forkserver_socket):
    run = PAGES[page]
    blocks = all_blocks()[page]
    scratch = tmp_path / "clone"
    make_scratch_clone(scratch)
    rules = {**SCALE_DOWN, **run.scale_down}
    bin_dir = make_wrapper_venv(scratch, rules)
    if run.pretrained:  # the page starts after examples/pretraining: its data and last checkpoint
        data = request.getfixturevalue("pretrain_prepared")
        checkpoint = request.getfixturevalue("etc_tiny_checkpoint")
        shutil.copytree(data.out_dir, scratch / "runs" / "etc_pretraining" / "data")
        (scratch / "runs" / "etc_pretraining" / "checkpoints").mkdir(parents=True)
        shutil.copyfile(checkpoint, scratch / "runs" / "etc_pretraining" / "checkpoints" / "checkpoint_last.pt")
    for name in run.stand_ins:
        STAND_INS[name][1](constructed_raw(name), scratch)
    log = tmp_path / "calls.jsonl"
    log.touch()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", ETC_DOCS_TEST_LOG=str(log),
               ETC_FAIRSEQ_CACHE=str(etc_cache_dir), CUDA_VISIBLE_DEVICES="", ETC_DOCS_TEST_FORKSERVER=forkserver_socket)
    env.pop("VIRTUAL_ENV", None)
    script = tmp_path / "page.sh"
    script.write_text(page_script(blocks))
    proc = subprocess.run(["bash", str(script)], cwd=scratch, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=1200)
    out = proc.stdout
    banners = re.findall(r"##### docs test: (.*)", out)
    if proc.returncode != 0 or not banners or banners[-1] != "page done":
        pytest.fail(f"{page}: failed in {banners[-1] if banners else 'the first block'}:\n{out[-6000:]}", pytrace=False)
    calls = [json.loads(line)[0] for line in log.read_text().splitlines()]
    for name, n in documented_calls(blocks).items():
        assert calls.count(name) >= n, f"{page}: {name} written {n} times, run {calls.count(name)} times"
