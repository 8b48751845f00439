"""Every ```python block of ``docs/python-api.md`` runs, in order, in one namespace, from a working
directory laid out as the page's commands lay it out (``runs/etc_pretraining/{data,checkpoints}``,
``runs/classification/{data,checkpoints}``), with tiny models trained by the session fixtures on the real
Wikipedia sample (no other data, nothing downloaded by the page's code)."""

import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "python-api.md"


def python_blocks(text: str):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_page_has_the_promised_examples():
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    code = "\n".join(blocks)
    for api in ("from_pretrained", "truncation=True", "encode_documents", "predict(", "fill_mask(",
                "sentence_classification_head", "extract_features"):
        assert api in code, api


def test_python_blocks_run(tmp_path, monkeypatch, pretrain_prepared, etc_tiny_checkpoint, classification_prepared,
                           etc_tiny_sentence_prediction_checkpoint, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(pretrain_prepared.out_dir, runs / "etc_pretraining" / "data")
    (runs / "etc_pretraining" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(etc_tiny_checkpoint, runs / "etc_pretraining" / "checkpoints" / "checkpoint_last.pt")
    shutil.copytree(classification_prepared.out_dir, runs / "classification" / "data")
    (runs / "classification" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(etc_tiny_sentence_prediction_checkpoint, runs / "classification" / "checkpoints" / "checkpoint_last.pt")
    monkeypatch.chdir(tmp_path)

    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 7
    namespace = {"__name__": "__docs__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{PAGE.name} python block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    # what the page says the reader sees
    assert "pass truncation=True" in out
    assert "SourceTokenizer('sentencepiece', " in out
    filled = [line for line in out.splitlines() if "Anarchism is a political" in line and "<mask>" not in line]
    assert len(filled) >= 3
    assert len(namespace["whole"]) > 8000
    assert 0 <= int(namespace["label"]) < classification_prepared.num_classes
