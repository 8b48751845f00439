"""``etc-predict`` runs a relative-position model on data prepared longer than it was trained on, with no
``--model-overrides``: a nextsent model trained at 512 long / 64 global tokens predicts data prepared at
1024 / 128 (the lengths ``etc-prepare`` recorded in ``prepare.json``). A model with absolute position
embeddings keeps the trained lengths."""

import json
import subprocess
import sys
from pathlib import Path

import torch

from etc_fairseq.finetune.common.runner import prepared_lengths

REPO = Path(__file__).resolve().parents[1]


def _prepare(wiki_dump, pretrain_data, out, long_len, global_len):
    from etc_fairseq.cli.prepare import main as prepare_main

    assert prepare_main([
        "nextsent", "--dump", str(wiki_dump), "--train", "4", "--valid", "3", "--seed", "2", "--out", str(out),
        "--pretrain-dir", str(pretrain_data), "--max-long-len", str(long_len), "--max-global-len", str(global_len),
        "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1",
    ]) == 0


def test_predict_at_the_prepared_length_without_overrides(tmp_path, wiki_dump, pretrain_data, capsys):
    from etc_fairseq.cli.predict import main as predict_main

    short, long_ = tmp_path / "short", tmp_path / "long"
    _prepare(wiki_dump, pretrain_data, short, 512, 64)
    _prepare(wiki_dump, pretrain_data, long_, 1024, 128)
    assert json.loads((long_ / "prepare.json").read_text())["max_long_len"] == 1024
    save = tmp_path / "ckpt"
    train = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(short), "--user-dir", str(REPO / "user_dir"),
         "--task", "etc_nextsent", "--criterion", "etc_nextsent", "--arch", "etc_tiny", "--max-long-len", "512",
         "--max-global-len", "64", "--batch-size", "4", "--required-batch-size-multiple", "1", "--optimizer", "adam",
         "--lr", "1e-3", "--max-update", "1", "--cpu", "--num-workers", "0", "--disable-validation",
         "--no-epoch-checkpoints", "--save-dir", str(save)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert train.returncode == 0, (train.stdout + train.stderr)[-3000:]
    ckpt = save / "checkpoint_last.pt"
    assert prepared_lengths(ckpt, long_) == {"max_long_len": 1024, "max_global_len": 128}
    assert prepared_lengths(ckpt, short) == {}  # nothing longer than trained

    pred = tmp_path / "pred.json"
    assert predict_main(["nextsent", "--path", str(ckpt), "--data", str(long_), "--split", "valid",
                         "--output", str(pred), "--device", "cpu"]) == 0
    records = json.loads((long_ / "valid.records.json").read_text())
    assert len(json.loads(pred.read_text())) == len(records) == 3

    # absolute position embeddings: the trained lengths stay (the position table is that long)
    state = torch.load(ckpt)
    state["cfg"]["model"]["use_absolute_positions"] = True
    absolute = tmp_path / "absolute.pt"
    torch.save(state, absolute)
    assert prepared_lengths(absolute, long_) == {}
