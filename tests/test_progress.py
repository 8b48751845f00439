"""Progress bars (``etc_fairseq/progress.py``): drawn on stderr only when it is a terminal, off with
``--no-progress-bar`` or ``ETC_NO_PROGRESS_BAR=1``; shown by a real conversion (``etc-prepare nextsent``:
documents read, examples written) and absent from a piped run."""
import io
import sys

import pytest

from etc_fairseq import progress as progress_module
from etc_fairseq.progress import ENV_VAR, bars_enabled, progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def _bars_on(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    progress_module.set_enabled(True)
    yield
    progress_module.set_enabled(True)


def _terminal(monkeypatch) -> Terminal:
    """stderr replaced by a terminal (in the test body: pytest's capture resets stderr between phases)."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_a_bar_only_on_a_terminal_and_not_when_switched_off(monkeypatch):
    terminal = _terminal(monkeypatch)
    assert list(progress(range(5), desc="counting", unit="ex")) == [0, 1, 2, 3, 4]
    assert "counting" in terminal.getvalue() and "5/5" in terminal.getvalue()
    assert bars_enabled() and not bars_enabled(io.StringIO())  # a pipe or file: no bar
    monkeypatch.setenv(ENV_VAR, "1")
    assert not bars_enabled()
    monkeypatch.setenv(ENV_VAR, "0")
    assert bars_enabled()
    progress_module.set_enabled(False)
    before = terminal.getvalue()
    assert list(progress(range(3), desc="quiet")) == [0, 1, 2]
    assert terminal.getvalue() == before


def test_a_conversion_shows_its_progress_unless_told_not_to(monkeypatch, tmp_path, wiki_dump, pretrain_data):
    from etc_fairseq.cli.prepare import main as prepare_main

    terminal = _terminal(monkeypatch)
    argv = ["nextsent", "--dump", str(wiki_dump), "--max-articles", "20", "--train", "4", "--valid", "2", "--seed", "2",
            "--pretrain-dir", str(pretrain_data), "--max-long-len", "256", "--max-global-len", "32",
            "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1"]
    assert prepare_main(argv + ["--out", str(tmp_path / "a")]) == 0
    shown = terminal.getvalue()
    assert "reading " in shown and "doc" in shown, shown[-2000:]  # the dump's documents
    assert "writing train" in shown and "4/4" in shown, shown[-2000:]  # the examples, with their total
    terminal.seek(0)
    terminal.truncate()
    assert prepare_main(argv + ["--out", str(tmp_path / "b"), "--no-progress-bar"]) == 0
    assert "writing train" not in terminal.getvalue() and "reading " not in terminal.getvalue()
