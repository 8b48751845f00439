"""End to end through fairseq's own command lines on real Wikipedia text: ``fairseq-train`` (train,
kill-free resume), ``fairseq-validate``, safe checkpoint loading, and a classification head trained
by the stock ``sentence_prediction`` task."""

import re
from pathlib import Path

import torch
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

TINY = [
    "--user-dir", USER_DIR, "--arch", "etc_tiny", "--cpu", "--seed", "1",
    "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed",
    "--log-format", "simple", "--log-interval", "2", "--num-workers", "0",
    "--no-epoch-checkpoints", "--disable-validation",
]


def run_fairseq(module: str, *args: str) -> str:
    proc = run_python(["-m", module, *args], cwd=REPO, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{module} failed:\n{out[-4000:]}"
    return out


def train_losses(log: str):
    """(num_updates, loss) of every ``train_inner`` log line of fairseq's simple format."""
    return [
        (int(m.group(2)), float(m.group(1)))
        for m in re.finditer(r"train_inner \| .*?loss=([\d.]+),.*?num_updates=(\d+)", log)
    ]


def test_masked_lm_train_resume_validate(mlm_data, tmp_path):
    save = tmp_path / "ckpt"
    common = [
        str(mlm_data), *TINY, "--task", "masked_lm", "--criterion", "masked_lm",
        "--tokens-per-sample", "256", "--sample-break-mode", "complete", "--batch-size", "4",
        "--save-dir", str(save),
    ]
    first = run_fairseq("fairseq_cli.train", *common, "--max-update", "4")
    assert train_losses(first)[-1][0] == 4
    ckpt = save / "checkpoint_last.pt"

    # Our checkpoints are plain data: torch's default (weights_only=True) loader accepts them.
    state = torch.load(ckpt)
    assert state["cfg"]["model"]["_name"] == "etc_tiny"
    assert state["model"]["encoder.version"].item() == 1
    assert any(k.startswith("encoder.sentence_encoder.layers.1.self_attn.k_proj.g2l") for k in state["model"])

    resumed = run_fairseq("fairseq_cli.train", *common, "--max-update", "8")
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 4 updates\)", resumed), resumed[-3000:]
    updates = [u for u, _ in train_losses(resumed)]
    assert updates and min(updates) > 4 and updates[-1] == 8

    valid = run_fairseq(
        "fairseq_cli.validate", str(mlm_data), "--user-dir", USER_DIR, "--task", "masked_lm",
        "--criterion", "masked_lm", "--path", str(ckpt), "--cpu", "--batch-size", "4",
        "--tokens-per-sample", "256", "--sample-break-mode", "complete", "--num-workers", "0",
    )
    m = re.search(r"valid on 'valid' subset \| loss ([\d.]+)", valid)
    assert m, valid[-3000:]
    assert 0 < float(m.group(1)) < 20  # log2 of a ~2k vocabulary is ~11: a real, finite MLM loss


def test_sentence_prediction_trains_a_classification_head(classification_data, tmp_path):
    data_dir, num_classes = classification_data
    save = tmp_path / "cls"
    log = run_fairseq(
        "fairseq_cli.train", str(data_dir), *TINY, "--task", "sentence_prediction",
        "--criterion", "sentence_prediction", "--num-classes", str(num_classes),
        "--max-positions", "256", "--batch-size", "8", "--max-update", "24", "--save-dir", str(save),
    )
    losses = [loss for _, loss in train_losses(log)]
    assert len(losses) >= 6
    assert sum(losses[-3:]) / 3 < losses[0], losses
    state = torch.load(save / "checkpoint_last.pt")
    head = state["model"]["classification_heads.sentence_classification_head.out_proj.weight"]
    assert head.shape == (num_classes, 64)
