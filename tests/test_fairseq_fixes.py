"""etc_fairseq/fairseq_fixes: what installs which fix, and for each fix fairseq's own function failing where the
replacement works (the behaviour each module's docstring names). End-to-end runs of the fixes through
``fairseq-train`` / ``fairseq-validate`` are in test_reliability_checkpoints.py, test_resume.py,
test_distributed*.py, test_hydra_configs.py and test_tpu_compat.py."""
import errno
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import etc_fairseq.register  # noqa: F401  (installs the default fixes in this process)
from etc_fairseq import fairseq_fixes
from etc_fairseq.errors import CheckpointLoadError, ConfigError
from etc_fairseq.fairseq_fixes.patching import fix_of, original

REPO = Path(__file__).resolve().parents[1]

#: (module, function) each fix replaces
TARGETS = {
    "checkpoint_load": [("fairseq.checkpoint_utils", "load_checkpoint_to_cpu")],
    "checkpoint_copy": [("fairseq.file_io", "PathManager.copy")],
    "training_start": [("fairseq.checkpoint_utils", "load_checkpoint")],
    "checkpoint_broadcast": [("fairseq.distributed.utils", "_broadcast_object_slow")],
    "unused_parameters": [("fairseq.models", "DistributedFairseqModel")],
    "yaml_architecture": [("fairseq.dataclass.initialize", "add_defaults")],
    "one_line_errors": [("fairseq.distributed.utils", "call_main")],
    "cpu_distributed": [("fairseq.distributed.utils", "_infer_torch_distributed_launch_init"),
                        ("fairseq.distributed.utils", "all_gather_list")],
}

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from etc_fairseq.fairseq_fixes.patching import fix_of
targets = {targets!r}
out = {{}}
for fix, functions in targets.items():
    for module, attribute in functions:
        obj = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        out[module + "." + attribute] = fix_of(obj)
print(json.dumps(out))
"""


def fixes_after_importing(*modules, env=None):
    import json
    import os

    proc = subprocess.run([sys.executable, "-c", PROBE.format(targets=TARGETS), *modules], capture_output=True,
                          text=True, cwd=REPO, env=dict(os.environ, **(env or {})), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_package_or_a_data_reader_patches_nothing_and_registration_installs_the_defaults():
    nothing = fixes_after_importing("etc_fairseq.fairseq_fixes", "etc_fairseq.data.structured",
                                    "etc_fairseq.data.pretraining_corpus", "etc_fairseq.models", "etc_fairseq.hub")
    assert set(nothing.values()) == {None}, nothing
    registered = fixes_after_importing("etc_fairseq.register")
    for fix, functions in TARGETS.items():
        for module, attribute in functions:
            want = fix if fix in fairseq_fixes.DEFAULT_FIXES else None
            assert registered[f"{module}.{attribute}"] == want, (fix, attribute)
    opted = fixes_after_importing("etc_fairseq.register", env={"ETC_FAIRSEQ_FIXES": "cpu_distributed"})
    assert opted["fairseq.distributed.utils.call_main"] == "cpu_distributed"


def test_an_unknown_opt_in_fix_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("ETC_FAIRSEQ_FIXES", "cpu_distributed,gpu_magic")
    with pytest.raises(ConfigError, match="ETC_FAIRSEQ_FIXES=.*unknown fix 'gpu_magic'.*cpu_distributed, xla"):
        fairseq_fixes.install()


def test_installing_twice_wraps_once():
    from fairseq import checkpoint_utils

    before = checkpoint_utils.load_checkpoint_to_cpu
    fairseq_fixes.install([])
    assert checkpoint_utils.load_checkpoint_to_cpu is before and fix_of(before) == "checkpoint_load"


# ---------------------------------------------------------------------------------------------------------
# each fix: fairseq's function fails where the replacement works
# ---------------------------------------------------------------------------------------------------------


def test_checkpoint_load_refuses_a_config_that_fairseq_would_build(tmp_path):
    """fairseq loads a checkpoint naming any model (wav2vec2 eval()s its conv_feature_layers string)."""
    from fairseq import checkpoint_utils

    path = tmp_path / "foreign.pt"
    torch.save({"cfg": {"model": {"_name": "wav2vec2", "conv_feature_layers": "[(512, 10, 5)]"},
                        "task": {"_name": "audio_pretraining"}},
                "model": {"w": torch.ones(2)}, "extra_state": {}, "last_optimizer_state": None,
                "optimizer_history": [{"criterion_name": "c", "optimizer_name": "o", "num_updates": 0,
                                       "lr_scheduler_state": {"best": None}}]}, path)
    assert original("fairseq.checkpoint_utils", "load_checkpoint_to_cpu")(str(path))["cfg"]["model"]["_name"] == "wav2vec2"
    with pytest.raises(CheckpointLoadError, match=r"foreign\.pt: cfg\.model\._name='wav2vec2' is not an ETC model"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))


def _interrupted_after(n_bytes):
    """A copy function that writes ``n_bytes`` and then fails as a full disk does."""
    def copy(fsrc, fdst, *args, **kwargs):
        fdst.write(fsrc.read(n_bytes))
        raise OSError(errno.ENOSPC, "No space left on device")
    return copy


def test_checkpoint_copy_interrupted_leaves_the_old_checkpoint_last(tmp_path, monkeypatch):
    from fairseq.file_io import PathManager

    src, dst = tmp_path / "checkpoint_3_300.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"N" * 100_000)
    monkeypatch.setattr(shutil, "copyfileobj", _interrupted_after(1000))
    monkeypatch.setattr(shutil, "_fastcopy_sendfile", lambda fsrc, fdst: _interrupted_after(1000)(fsrc, fdst))
    dst.write_bytes(b"old")
    with pytest.raises(OSError):
        original("fairseq.file_io", "PathManager.copy")(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"N" * 1000  # fairseq's copy: a truncated checkpoint_last.pt
    dst.write_bytes(b"old")
    with pytest.raises(OSError):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == [src.name, dst.name]


def test_training_start_refuses_to_start_over_existing_checkpoints(tmp_path):
    """fairseq starts at update 0 when checkpoint_last.pt is missing, whatever else the directory holds."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.configs import CheckpointConfig

    (tmp_path / "checkpoint_1_200.pt").write_bytes(b"")
    cfg = CheckpointConfig(save_dir=str(tmp_path))
    started = []
    trainer = types.SimpleNamespace(
        checkpoint_suffix="", is_data_parallel_master=True, load_checkpoint=lambda *a, **k: None,
        get_train_iterator=lambda epoch, **k: started.append(epoch) or types.SimpleNamespace(epoch=epoch),
        lr_step=lambda epoch: None)
    extra_state, itr = original("fairseq.checkpoint_utils", "load_checkpoint")(cfg, trainer)
    assert extra_state is None and started == [1]  # fairseq: update 0, over checkpoint_1_200.pt
    with pytest.raises(CheckpointLoadError, match=r"holds checkpoint_1_200\.pt but no checkpoint_last\.pt; starting "
                                                  r"at update 0 would overwrite them"):
        checkpoint_utils.load_checkpoint(cfg, trainer)
    assert started == [1]


def test_unused_parameters_with_task_heads_is_refused_before_ddp_is_built(monkeypatch):
    from fairseq import models
    from fairseq.models import distributed_fairseq_model

    built = []
    monkeypatch.setattr(distributed_fairseq_model, "DistributedDataParallel",
                        lambda **kwargs: built.append(kwargs) or kwargs["module"])
    monkeypatch.setattr(distributed_fairseq_model, "ModuleProxyWrapper", lambda m: m)
    args = types.SimpleNamespace(find_unused_parameters=True, ddp_backend="pytorch_ddp", tpu=False, device_id=0,
                                 broadcast_buffers=False, bucket_cap_mb=25, gradient_as_bucket_view=False,
                                 ddp_comm_hook="none")
    model = torch.nn.Module()
    model.task_heads = torch.nn.ModuleDict({"candidates": torch.nn.Linear(2, 1)})
    original("fairseq.models", "DistributedFairseqModel")(args, model, None, torch.device("cpu"))
    assert built and built[0]["find_unused_parameters"]  # fairseq builds it; DDP fails in the first backward
    with pytest.raises(ConfigError, match="--find-unused-parameters does not work with the etc fine-tuning tasks"):
        models.DistributedFairseqModel(args, model, None, torch.device("cpu"))


def test_yaml_architecture_builds_the_named_size():
    from fairseq.dataclass.initialize import add_defaults

    theirs = OmegaConf.create({"model": {"_name": "etc_tiny"}})
    original("fairseq.dataclass.initialize", "add_defaults")(theirs)
    assert theirs.model.encoder_layers == 12  # fairseq: EtcConfig's defaults, whatever the name says
    ours = OmegaConf.create({"model": {"_name": "etc_tiny"}})
    add_defaults(ours)
    assert (ours.model.encoder_layers, ours.model.encoder_embed_dim) == (2, 64)


def test_cpu_distributed_torchrun_launch_without_cuda(monkeypatch):
    """fairseq computes rank % torch.cuda.device_count() (ZeroDivisionError without CUDA); the opt-in fix
    (installed here) sets device 0 and gloo (its other parts: test_distributed.py)."""
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils as dist_utils

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    for k, v in dict(MASTER_ADDR="localhost", MASTER_PORT="29514", WORLD_SIZE="2", RANK="1", LOCAL_RANK="1").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ZeroDivisionError):
        original("fairseq.distributed.utils", "_infer_torch_distributed_launch_init")(
            DistributedTrainingConfig(distributed_world_size=2, tpu=False))
    fairseq_fixes.install(["cpu_distributed"])
    cfg = DistributedTrainingConfig(distributed_world_size=2, tpu=False)
    dist_utils._infer_torch_distributed_launch_init(cfg)
    assert (cfg.device_id, cfg.distributed_rank, cfg.distributed_backend) == (0, 1, "gloo")
