"""Exact resume after SIGKILL: fairseq-train (etc_pretraining + cpc_mlm, etc_tiny, CPU, fixed seed) killed
in the middle of epoch 1 (at each update of KILL_AT), after a checkpoint was saved, and restarted with the same command,
logs the same per-update metrics from the resume point on as an uninterrupted run.

Real data: the Wikipedia pre-training fixture ``pretrain_data`` (10 training documents)."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

MAX_UPDATE = 6
SAVE_EVERY = 2  # checkpoints at updates 2, 4 (and 6 at the end)
KILL_AT = (3,)  # SIGKILL once the log shows this update: one update after a checkpoint, mid-epoch
# (KILL_AT = (3, 5) kills twice; one kill keeps the test's cost down, both pass)

#: logged fields that must be equal after resuming (timing fields such as wps/wall are excluded)
FIELDS = ("loss", "mlm_loss", "mlm_accuracy", "cpc_loss", "cpc_accuracy", "cpc_candidates", "gnorm", "wpb", "bsz", "lr")
LINE = re.compile(r"train_inner \| epoch (\d+): +(\d+) / (\d+) (.*)")


def command(data, save_dir):
    return [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", USER_DIR, "--task", "etc_pretraining",
            "--criterion", "cpc_mlm", "--arch", "etc_tiny", "--max-long-len", "128", "--max-global-len", "16",
            "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
            "--cpu", "--seed", "7", "--log-format", "simple", "--log-interval", "1", "--num-workers", "0",
            "--batch-size", "2", "--max-update", str(MAX_UPDATE), "--save-interval-updates", str(SAVE_EVERY),
            "--no-epoch-checkpoints", "--disable-validation", "--save-dir", str(save_dir)]


def parse_updates(log: str):
    """{num_updates: (epoch, iteration in epoch, {field: logged string})} from train_inner lines."""
    out = {}
    for m in LINE.finditer(log):
        fields = dict(kv.split("=", 1) for kv in m.group(4).split(", "))
        out[int(fields["num_updates"])] = (int(m.group(1)), int(m.group(2)), {k: fields[k] for k in FIELDS})
    return out


def run(cmd, kill_at_update=None):
    """Run ``cmd``; with ``kill_at_update``, SIGKILL it as soon as that update is logged. Returns (rc, log)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
    lines = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        lines.append(line)
        if kill_at_update is not None and f"num_updates={kill_at_update}," in line:
            proc.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, "fairseq-train took too long"
    proc.stdout.close()
    rc = proc.wait(timeout=60)
    return rc, "".join(lines)


def test_sigkill_mid_epoch_then_same_command_resumes_exactly(pretrain_data, tmp_path):
    rc, log = run(command(pretrain_data, tmp_path / "straight"))
    assert rc == 0, log[-3000:]
    straight = parse_updates(log)
    assert sorted(straight) == list(range(1, MAX_UPDATE + 1))
    epoch, _, total = next(LINE.finditer(log)).group(1, 2, 3)
    assert int(total) > MAX_UPDATE  # every kill is in the middle of epoch 1

    save = tmp_path / "killed"
    cmd = command(pretrain_data, save)
    resumed = {}
    kills, previous_kill = 0, None
    for kill_at in KILL_AT + (None,):
        rc, log = run(cmd, kill_at_update=kill_at)
        updates = parse_updates(log)
        if kill_at is not None:
            assert rc == -signal.SIGKILL, log[-3000:]
            kills += 1
        else:
            assert rc == 0, log[-3000:]
        if previous_kill is not None:
            # started on the directory a kill left behind: resumes from the last checkpoint before the kill
            last_ckpt = SAVE_EVERY * ((previous_kill - 1) // SAVE_EVERY)
            m = re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ (\d+) updates\)", log)
            assert m and int(m.group(1)) == last_ckpt, log[-3000:]
            assert min(updates) == last_ckpt + 1
            assert updates[last_ckpt + 1][1] == straight[last_ckpt + 1][1]  # same iteration in the epoch
        previous_kill = kill_at
        resumed.update(updates)  # later runs overwrite the updates a kill threw away
    assert kills == len(KILL_AT)
    assert sorted(resumed) == list(range(1, MAX_UPDATE + 1))
    for n in range(1, MAX_UPDATE + 1):
        assert resumed[n] == straight[n], f"update {n}: resumed {resumed[n]} != uninterrupted {straight[n]}"
    # the logged metrics are not constant (the comparison can fail)
    assert len({straight[n][2]["loss"] for n in straight}) > 3
