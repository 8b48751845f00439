"""``docs/huggingface.md`` runs as written: its blocks in page order (```bash through bash ``set -e``, ```python
in one namespace), from a working directory holding stand-ins at the paths the page names: Google's checkpoint
``etc_base_2x_pretrain`` = ``tests/fixtures/official/separate`` (written by Google's TensorFlow code), and
``bert-base-uncased`` = a tiny random BERT whose WordPiece vocabulary is trained on the Wikipedia sample.
Blocks marked ``docs-test: not run`` are skipped (installing, downloading). Nothing is downloaded: the sample
comes from the fixtures' cache. ``etc-lift`` runs as a fork of a warm interpreter (``tests/forkserver.py``)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from doc_blocks import parse_blocks, parse_marker
from forkserver import write_wrappers
from test_hf_trainer import tiny_bert

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "huggingface.md"


def test_page_runs_as_written(tmp_path, monkeypatch, capsys, etc_cache_dir, wiki_dump):
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    shutil.copytree(REPO / "tests" / "fixtures" / "official" / "separate", tmp_path / "etc_base_2x_pretrain")
    (tmp_path / "etc_base_2x_pretrain" / "official_io.npz").unlink()
    texts = []
    for doc in iter_wikipedia_documents(wiki_dump):
        texts.extend(doc.paragraphs)
        if len(texts) > 200:
            break
    tiny_bert(tmp_path / "bert-base-uncased", texts)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ETC_FAIRSEQ_CACHE", str(etc_cache_dir))
    # the page's etc-lift commands, each a fork of a warm interpreter (tests/forkserver.py), found first on PATH
    bin_dir = write_wrappers(tmp_path / "bin", ["etc-lift"])
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")

    blocks, problems = parse_blocks(PAGE.read_text(encoding="utf-8"), "docs/huggingface.md")
    assert not problems
    namespace = {"__name__": "__docs__"}
    ran = {"bash": 0, "python": 0}
    for block in blocks:
        if block.lang not in ran:
            continue
        if block.marker is not None:
            assert parse_marker(block.marker)[0] == "not run", block.where
            continue
        if block.lang == "bash":
            proc = subprocess.run(["bash", "-e", "-c", block.text], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert proc.returncode == 0, f"{block.where}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            print(proc.stdout)
        else:
            exec(compile(block.text, block.where, "exec"), namespace)
        ran[block.lang] += 1
    assert ran == {"bash": 3, "python": 8}
    out = capsys.readouterr().out
    # what the page says the reader sees
    assert "model.safetensors" in out and "tokenizer.json" in out
    assert "'global_input_ids'" in out and "'long_segment'" in out
    assert "training documents, the longest" in out
    assert namespace["classifier"].config.id2label[namespace["predicted"]] in out.splitlines()
    assert len([line for line in out.splitlines() if line.strip() and line.split()[-1].replace(".", "").isdigit()
                and len(line) == 19]) >= 3  # the fill-mask lines
    assert "dense vs blocked:" in out and "torch.bfloat16" in out
    assert namespace["fresh"].config.encoder_layers == 2 and " parameters" in out
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "etc_classifier" / "model.safetensors"))
    b = load_file(str(tmp_path / "etc_classifier_again" / "model.safetensors"))
    assert sorted(a) == sorted(b) and all((a[k] == b[k]).all() for k in a)
