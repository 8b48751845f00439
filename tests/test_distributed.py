"""Data-parallel training on CPU (gloo) through fairseq's own launcher (``--distributed-world-size 2 --cpu``),
with the opt-in fixes of etc_fairseq/fairseq_fixes/cpu_distributed.py (``ETC_FAIRSEQ_FIXES=cpu_distributed``): 2 processes x batch B give the loss curve of 1 process x
batch B with ``--update-freq 2``, and a 2-process run resumes from its checkpoint (rank 0 reads it and
broadcasts it to rank 1 through the weights-only receive path).

Real data: the Wikipedia pre-training fixture ``pretrain_data``."""
import io
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

FIELDS = ("loss", "mlm_loss", "mlm_accuracy", "gnorm", "wpb", "bsz")
LINE = re.compile(r"train_inner \| epoch \d+: +\d+ / \d+ (.*)")


def train(data, save_dir, *extra):
    # dropout off: dropout masks are drawn per process, the only legitimate difference between the runs
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", USER_DIR, "--task", "etc_pretraining",
           "--criterion", "cpc_mlm", "--arch", "etc_tiny", "--max-long-len", "128", "--max-global-len", "16",
           "--dropout", "0", "--attention-dropout", "0", "--optimizer", "adam", "--lr", "1e-3",
           "--lr-scheduler", "fixed", "--cpu", "--seed", "1", "--log-format", "simple", "--log-interval", "1",
           "--num-workers", "0", "--batch-size", "2", "--disable-validation", "--no-epoch-checkpoints",
           "--save-dir", str(save_dir), *extra]
    proc = run_python(cmd[1:], cwd=REPO, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1", ETC_FAIRSEQ_FIXES="cpu_distributed"))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def curve(log):
    """{num_updates: {field: float}}"""
    out = {}
    for m in LINE.finditer(log):
        fields = dict(kv.split("=", 1) for kv in m.group(1).split(", "))
        out[int(fields["num_updates"])] = {k: float(fields[k]) for k in FIELDS}
    return out


def assert_same_curve(a, b, updates):
    for n in updates:
        for k in FIELDS:
            assert a[n][k] == pytest.approx(b[n][k], abs=2e-3), (n, k, a[n], b[n])


def test_two_processes_equal_update_freq_two_and_resume(pretrain_data, tmp_path):
    one = curve(train(pretrain_data, tmp_path / "one", "--update-freq", "2", "--max-update", "4"))
    assert sorted(one) == [1, 2, 3, 4]
    assert all(one[n]["bsz"] == 4 for n in one)  # 2 batches of 2 per update

    two_dir = tmp_path / "two"
    dist = ["--distributed-world-size", "2", "--ddp-backend", "legacy_ddp"]
    log = train(pretrain_data, two_dir, *dist, "--max-update", "2", "--save-interval-updates", "2")
    assert "CPU: spawning 2 processes (gloo" in log
    first = curve(log)
    assert sorted(first) == [1, 2]
    assert_same_curve(first, one, [1, 2])

    log = train(pretrain_data, two_dir, *dist, "--max-update", "4", "--save-interval-updates", "2")
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 2 updates\)", log), log[-3000:]
    resumed = curve(log)
    assert sorted(resumed) == [3, 4]
    assert_same_curve(resumed, one, [3, 4])
    # the curve moves (the comparison can fail)
    assert len({one[n]["loss"] for n in one}) >= 3


def test_torchrun_environment_on_cpu(monkeypatch):
    """torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*: fairseq computes rank % torch.cuda.device_count()
    (ZeroDivisionError on CPU), then torch.cuda.set_device(LOCAL_RANK); the fixed function uses device 0
    and switches nccl to gloo."""
    from etc_fairseq import fairseq_fixes

    fairseq_fixes.install(["cpu_distributed"])
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils as dist_utils

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # the no-CUDA path, also on a GPU machine
    for k, v in dict(MASTER_ADDR="localhost", MASTER_PORT="29512", WORLD_SIZE="4", RANK="3", LOCAL_RANK="1").items():
        monkeypatch.setenv(k, v)
    cfg = DistributedTrainingConfig(distributed_world_size=4, tpu=False)  # (tpu is an interpolation otherwise)
    dist_utils.infer_init_method(cfg)
    assert (cfg.distributed_init_method, cfg.distributed_world_size, cfg.distributed_rank, cfg.device_id) == (
        "env://", 4, 3, 0)
    assert cfg.distributed_no_spawn and cfg.distributed_backend == "gloo"


def test_broadcast_encoding_survives_weights_only_load():
    """What rank 0 sends on resume (a checkpoint state with an omegaconf cfg, tensors split out into
    fairseq _TensorPlaceholder objects) is weights-only loadable after encoding and decodes to the same."""
    from fairseq.distributed.utils import _split_tensors_from_obj, _TensorPlaceholder
    from omegaconf import OmegaConf

    from etc_fairseq.fairseq_fixes.checkpoint_broadcast import decode_after_broadcast, encode_for_broadcast

    state = {"cfg": OmegaConf.create({"model": {"_name": "etc", "encoder_layers": 2}, "task": {"data": "x"}}),
             "model": {"w": torch.ones(2, 3)}, "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 5}},
             "optimizer_history": [{"num_updates": 2, "lr_scheduler_state": {"best": None}}],
             "shape": torch.Size([2, 3]), "pair": (1, "a")}
    tensors = []
    split = _split_tensors_from_obj(state, tensors)
    raw = io.BytesIO()
    torch.save(split, raw)
    with pytest.raises(Exception, match="Unsupported global|omegaconf|_TensorPlaceholder|WeightsUnpickler"):
        torch.load(io.BytesIO(raw.getvalue()), weights_only=True)  # why fairseq's broadcast fails on rank > 0

    buf = io.BytesIO()
    torch.save(encode_for_broadcast(split), buf)
    back = decode_after_broadcast(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert OmegaConf.to_container(back["cfg"]) == OmegaConf.to_container(state["cfg"])
    assert back["model"]["w"] == _TensorPlaceholder(index=0) and len(tensors) == 1
    # broadcast_tensors sends [{"size": torch.Size, ...}] through the same path: sizes stay torch.Size
    meta = [{"size": torch.Size([2, 3]), "dtype": torch.float16, "device": torch.device("cpu")}]
    buf = io.BytesIO()
    torch.save(encode_for_broadcast(meta), buf)
    got = decode_after_broadcast(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert got == meta and type(got[0]["size"]) is torch.Size
    assert back["pair"] == (1, "a") and back["extra_state"] == state["extra_state"]
    assert back["optimizer_history"] == state["optimizer_history"]


def test_torchrun_world_size_is_taken_from_the_environment(monkeypatch):
    """With at most one GPU fairseq's --distributed-world-size defaults to 1 and infer_init_method then ignores
    torchrun's variables: every process would train alone. The fixed call_main takes WORLD_SIZE."""
    from types import SimpleNamespace

    from etc_fairseq import fairseq_fixes

    fairseq_fixes.install(["cpu_distributed"])
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils as dist_utils

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    for k, v in dict(MASTER_ADDR="localhost", MASTER_PORT="29513", WORLD_SIZE="2", RANK="1", LOCAL_RANK="1").items():
        monkeypatch.setenv(k, v)
    seen = []
    monkeypatch.setattr(dist_utils, "distributed_main", lambda i, main, cfg, kwargs: seen.append(cfg.distributed_training))
    cfg = SimpleNamespace(distributed_training=DistributedTrainingConfig(distributed_world_size=1, tpu=False),
                          common=SimpleNamespace(cpu=True, tpu=False))
    dist_utils.call_main(cfg, main=None)
    (dt,) = seen
    assert (dt.distributed_world_size, dt.distributed_rank, dt.distributed_init_method, dt.distributed_backend) == (
        2, 1, "env://", "gloo")
