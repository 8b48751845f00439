"""examples/official_etc/run.sh at tiny scale: official ETC fixture -> etc-lift -> etc-prepare hotpotqa
--from-model -> fairseq-train --finetune-from-model without model flags -> etc-predict -> etc-evaluate (the
official HotpotQA metric). Keeps the recipe and its README (examples/official_etc/README.md, whose command
blocks are marked as run here) from drifting away from the code."""
import json
import os
import re
import subprocess
from pathlib import Path

from forkserver import write_wrappers

REPO = Path(__file__).resolve().parents[1]


def test_official_etc_recipe_runs_end_to_end(wiki_dump, etc_cache_dir, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, MAX_UPDATE="2", BATCH_SIZE="3", OUT=str(out), ETC_FAIRSEQ_CACHE=str(etc_cache_dir),
               ETC_VENV=str(tmp_path / "venv"), CUDA_VISIBLE_DEVICES="")
    # the script's $ETC_VENV/bin/python: python -m / a script as a fork of a warm interpreter (tests/forkserver.py)
    write_wrappers(tmp_path / "venv" / "bin", [])
    proc = subprocess.run(["bash", str(REPO / "examples" / "official_etc" / "run.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    # the converted fixture computes what the official TensorFlow code computed
    m = re.search(r"max \|ours - official\|: long ([\d.e+-]+), global ([\d.e+-]+)", log)
    assert m and float(m.group(1)) < 1e-5 and float(m.group(2)) < 1e-5
    # the data carries the official sentence token ([unused0], official id 1)
    vocab = (REPO / "tests/fixtures/official/separate/vocab_bert_uncased_english.txt").read_text().split("\n")
    dict_lines = [line.split()[0] for line in (out / "model" / "dict.txt").read_text().splitlines()]
    info = json.loads((out / "data" / "prepare.json").read_text())
    assert info["from_model"] == str(out / "model") and info["tokenizer"] == "wordpiece"
    assert info["global_token_ids"]["SENTENCE"] == 4 + dict_lines.index(vocab[1]) == 4 + dict_lines.index("[unused0]")
    # fairseq-train took every model field from the lifted checkpoint (the script passes none)
    assert re.search(r"\d+ model fields from the config stored in .*model\.pt", log)
    assert re.search(r"num_updates 2\b", log)
    # the official metric's keys, over the 5 dev records
    metrics = json.loads((out / "dev_metrics.json").read_text())
    assert metrics["n"] == 5 and {"em", "f1", "sp_em", "sp_f1", "joint_em", "joint_f1"} <= set(metrics)
    # the README shows the commands the script runs
    readme = (REPO / "examples" / "official_etc" / "README.md").read_text()
    for command in ("etc-lift", "etc-prepare hotpotqa --from-model", "fairseq-train", "--finetune-from-model",
                    "etc-predict hotpotqa", "etc-evaluate hotpotqa"):
        assert command in readme, command
