"""``docs/structured.md`` runs as written: its ```python blocks in order in one namespace, then its ```bash block
through bash (``set -e``), from a working directory laid out as the pretraining section of docs/fairseq.md leaves it
(``runs/etc_pretraining/{data,checkpoints}``, from the session fixtures on the real Wikipedia sample) with
``user_dir`` as in the repository root. Nothing is downloaded (the sample comes from the fixtures' cache)."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from doc_blocks import parse_blocks
from forkserver import write_wrappers

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "structured.md"


def blocks(text: str, lang: str):
    """The page's ``lang`` blocks, in order, but those marked ``docs-test: not run`` (tests/doc_blocks.py)."""
    found, problems = parse_blocks(text, str(PAGE))
    assert problems == []
    return [b.text for b in found if b.lang == lang and not (b.marker or "").startswith("not run")]


def test_page_documents_every_record_field():
    from etc_fairseq.finetune.structured.schema import GLOBAL_KEYS, RECORD_KEYS
    from etc_fairseq.structure import GlobalTokenType

    text = PAGE.read_text(encoding="utf-8")
    table = text.split("## The record", 1)[1].split("## The relative labels", 1)[0]
    for key in RECORD_KEYS + GLOBAL_KEYS:
        assert f"`{key}`" in table or f"`globals[i].{key}`" in table, key
    for t in GlobalTokenType:
        assert f"`{t.name}`" in table, t.name


def test_tutorial_runs_as_written(tmp_path, monkeypatch, capsys, etc_cache_dir, pretrain_prepared, etc_tiny_checkpoint):
    runs = tmp_path / "runs"
    shutil.copytree(pretrain_prepared.out_dir, runs / "etc_pretraining" / "data")
    (runs / "etc_pretraining" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(etc_tiny_checkpoint, runs / "etc_pretraining" / "checkpoints" / "checkpoint_last.pt")
    (tmp_path / "user_dir").symlink_to(REPO / "user_dir")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ETC_FAIRSEQ_CACHE", str(etc_cache_dir))

    text = PAGE.read_text(encoding="utf-8")
    namespace = {"__name__": "__docs__"}
    for i, block in enumerate(blocks(text, "python")):
        exec(compile(block, f"{PAGE.name} python block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "   9  belongs " in out and "  13  child " in out  # the label table: 2k+1 = 9 positions (0..8), then the structure labels
    assert len(namespace["docs"]) == 16 and "CONSTRUCTED" in text
    batch = namespace["batch"]
    assert tuple(namespace["long_features"].shape[:2]) == tuple(batch["src_tokens"].shape)
    assert tuple(namespace["global_features"].shape[:2]) == tuple(batch["global_tokens"].shape)
    assert batch["global_tokens"].shape[1] == max(len(d.to_json()["globals"]) for d in namespace["docs"][:2])
    train = [json.loads(x) for x in (runs / "structured" / "train.jsonl").read_text().splitlines()]
    assert len(train) == 12 and all(r["label"] in ("first_longer", "second_longer") for r in train)
    assert any(g["type"] == "CANDIDATE" and g.get("links") for r in train for g in r["globals"])

    (script,) = blocks(text, "bash")
    # the page's commands, each a fork of a warm interpreter (tests/forkserver.py), found first on PATH
    bin_dir = write_wrappers(tmp_path / "bin", ["etc-prepare", "fairseq-train", "fairseq-validate", "etc-predict",
                                                "etc-evaluate", "etc-show"])
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    info = json.loads((runs / "structured" / "data" / "prepare.json").read_text())
    assert info["label_level"] == "record" and info["classes"] == ["first_longer", "second_longer"]
    validated = [x for x in log.splitlines() if "valid on 'valid' subset" in x][-1]
    accuracy = float(re.search(r"\| accuracy ([0-9.]+)", validated).group(1))
    evaluated = json.loads([x for x in proc.stdout.splitlines() if x.startswith('{"accuracy"')][-1])
    assert evaluated["labelled"] == 4 and evaluated["missing"] == 0
    assert abs(evaluated["accuracy"] - accuracy) < 1e-3  # etc-evaluate = fairseq-validate
    png = runs / "structured" / "example.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
