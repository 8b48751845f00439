"""Checkpoints are data, not code: every fairseq load path of ours reads them weights-only; crafted pickles
are refused before they run; truncated files are detected and the previous checkpoint stays usable; the
checkpoint format version is upgraded or refused (etc_fairseq/fairseq_fixes/, EtcModel.upgrade_state_dict_named).

Real data: the Wikipedia pre-training fixture (``pretrain_data``) and checkpoints written by a real
``fairseq-train`` run on it. The malicious checkpoints are CONSTRUCTED from those real checkpoints."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from forkserver import run_python

from etc_fairseq.errors import CheckpointLoadError

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

TRAIN = ["--user-dir", USER_DIR, "--task", "etc_pretraining", "--criterion", "cpc_mlm", "--arch", "etc_tiny",
         "--max-long-len", "128", "--max-global-len", "16", "--optimizer", "adam", "--lr", "1e-3",
         "--lr-scheduler", "fixed", "--cpu", "--seed", "1", "--log-format", "simple", "--log-interval", "1",
         "--num-workers", "0", "--batch-size", "2", "--disable-validation", "--no-epoch-checkpoints",
         "--save-interval-updates", "1"]


def fairseq(module, *args, env=None):
    """Run a fairseq command line as a fresh process (a fork of a warm interpreter); returns
    (returncode, stdout + stderr)."""
    proc = run_python(["-m", module, *args], cwd=REPO, timeout=600, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def cli(module_name, argv, monkeypatch):
    """Run a fairseq CLI entry point in this process (same code path as the command, no interpreter start),
    with ``ETC_FAIRSEQ_DEBUG=1``: a refusal escapes as its exception (the command prints it as one line)."""
    import importlib

    module = importlib.import_module(module_name)
    monkeypatch.setattr(sys, "argv", [module_name, *argv])
    monkeypatch.setenv("ETC_FAIRSEQ_DEBUG", "1")
    module.cli_main()


@pytest.fixture(scope="module")
def trained(pretrain_data, tmp_path_factory):
    """Checkpoints of a real 2-update fairseq-train run: checkpoint_1_1.pt, checkpoint_1_2.pt, checkpoint_last.pt."""
    save = tmp_path_factory.mktemp("reliability_ckpt") / "ckpt"
    rc, log = fairseq("fairseq_cli.train", str(pretrain_data), *TRAIN, "--max-update", "2", "--save-dir", str(save))
    assert rc == 0, log[-3000:]
    assert sorted(p.name for p in save.glob("*.pt")) == ["checkpoint_1_1.pt", "checkpoint_1_2.pt", "checkpoint_last.pt"]
    return save


class RunsCode:
    """Pickles as a call to os.system (what a malicious checkpoint looks like). CONSTRUCTED."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def evil_copy(good: Path, dest: Path, marker: Path, legacy: bool) -> Path:
    state = torch.load(good, weights_only=True)
    state["extra_state"]["payload"] = RunsCode(marker)
    torch.save(state, dest, _use_new_zipfile_serialization=not legacy)
    return dest


def test_our_checkpoints_load_weights_only_with_no_allowlist(trained):
    from etc_fairseq.checkpoint_io import unsafe_globals

    for path in trained.glob("*.pt"):
        assert unsafe_globals(path) == [], path
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert isinstance(state["cfg"], dict) and state["model"]["encoder.version"].item() == 1


def test_fairseq_validate_refuses_code_running_checkpoint(trained, pretrain_data, tmp_path):
    marker = tmp_path / "pwned"
    evil = evil_copy(trained / "checkpoint_last.pt", tmp_path / "evil.pt", marker, legacy=False)
    assert not marker.exists()
    rc, log = fairseq("fairseq_cli.validate", str(pretrain_data), "--user-dir", USER_DIR, "--task", "etc_pretraining",
                      "--path", str(evil), "--cpu", "--max-tokens", "2048", "--num-workers", "0")
    assert rc == 1 and "Traceback" not in log, log[-2000:]
    assert re.search(rf"^fairseq-validate: error: {re.escape(str(evil))}: refusing to load checkpoint: its pickle "
                     r"references posix\.system", log, re.M), log[-2000:]
    assert not marker.exists()


def test_restore_file_refuses_legacy_format_payload_even_with_force_no_weights_only(
        trained, pretrain_data, tmp_path, monkeypatch):
    """fairseq-train --restore-file with a legacy (pre-zip) pickle, which cannot be scanned statically, and
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 set: still read weights-only, refused, the command never runs."""
    from etc_fairseq.checkpoint_io import CheckpointLoadError

    marker = tmp_path / "pwned"
    evil = evil_copy(trained / "checkpoint_last.pt", tmp_path / "evil_legacy.pt", marker, legacy=True)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(CheckpointLoadError, match=rf"{re.escape(str(evil))}: refusing to load checkpoint: .*posix\.system"):
        cli("fairseq_cli.train", [str(pretrain_data), *TRAIN, "--max-update", "3", "--save-dir", str(tmp_path / "s"),
                                  "--restore-file", str(evil)], monkeypatch)
    assert not marker.exists()
    assert os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"  # the user's environment is left as it was


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_checkpoints_are_detected(trained, tmp_path, fraction):
    from fairseq import checkpoint_utils

    from etc_fairseq.checkpoint_io import CheckpointLoadError

    data = (trained / "checkpoint_1_2.pt").read_bytes()
    bad = tmp_path / "checkpoint_last.pt"
    bad.write_bytes(data[: int(len(data) * fraction)])
    shutil.copy(trained / "checkpoint_1_1.pt", tmp_path / "checkpoint_1_1.pt")
    with pytest.raises(CheckpointLoadError, match=rf"{re.escape(str(bad))}: truncated or corrupt checkpoint.*checkpoint_1_1\.pt"):
        checkpoint_utils.load_checkpoint_to_cpu(str(bad))


def test_truncated_last_checkpoint_stops_resume_and_previous_one_resumes(trained, pretrain_data, tmp_path, monkeypatch):
    from etc_fairseq.checkpoint_io import CheckpointLoadError

    save = tmp_path / "ckpt"
    shutil.copytree(trained, save)
    last = save / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    argv = [str(pretrain_data), *TRAIN, "--max-update", "3", "--save-dir", str(save)]
    with pytest.raises(CheckpointLoadError, match=r"checkpoint_last\.pt: truncated or corrupt.*checkpoint_1_2\.pt"):
        cli("fairseq_cli.train", argv, monkeypatch)
    # the previous good checkpoint: resume from it explicitly
    rc, log = fairseq("fairseq_cli.train", *argv, "--restore-file", str(save / "checkpoint_1_2.pt"))
    assert rc == 0, log[-3000:]
    assert re.search(r"Loaded checkpoint .*checkpoint_1_2\.pt \(epoch 1 @ 2 updates\)", log), log[-3000:]
    assert re.search(r"train_inner \| .*num_updates=3", log)
    assert torch.load(last, weights_only=True)["optimizer_history"][-1]["num_updates"] == 3


def test_checkpoint_copy_is_atomic(tmp_path, monkeypatch):
    """checkpoint_last.pt is written by PathManager.copy: a failure mid-copy leaves the old file intact."""
    import etc_fairseq.register  # noqa: F401
    from fairseq.file_io import PathManager

    src, dst = tmp_path / "new.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"N" * 3_000_000)
    dst.write_bytes(b"old")

    def dies_half_way(fsrc, fdst, length=0):
        fdst.write(fsrc.read(1_000_000))
        raise OSError("No space left on device (simulated)")

    monkeypatch.setattr(shutil, "copyfileobj", dies_half_way)
    with pytest.raises(OSError, match="simulated"):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt", "new.pt"]  # no temporary left
    monkeypatch.undo()
    assert PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == src.read_bytes()


# ------------------------------------------------------------------------------------------------------
# format version
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(pretrain_data):
    from etc_fairseq.models import EtcModel, config_for_arch
    from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

    task = EtcPretrainingTask.setup_task(EtcPretrainingConfig(data=str(pretrain_data), max_long_len=128,
                                                              max_global_len=16, seed=1))
    return EtcModel.build_model(config_for_arch("etc_tiny"), task)


def test_version_1_checkpoint_upgrades_through_registered_steps(tiny, trained, monkeypatch):
    """A CONSTRUCTED version-2 format (the LM-head bias renamed) proves the upgrade machinery: a real
    version-1 checkpoint from fairseq-train is upgraded step by step and loads strictly."""
    import etc_fairseq.models.etc as etc

    state = torch.load(trained / "checkpoint_last.pt", weights_only=True)["model"]
    assert state["encoder.version"].item() == 1
    bias = state["encoder.lm_head.bias"].clone()

    def v1_to_v2(sd, prefix):
        sd[prefix + "encoder.lm_head.output_bias"] = sd.pop(prefix + "encoder.lm_head.bias")

    monkeypatch.setattr(etc, "ETC_FORMAT_VERSION", 2)
    monkeypatch.setitem(etc.FORMAT_UPGRADES, 1, v1_to_v2)
    sd = dict(state)
    tiny.upgrade_state_dict_named(sd, "")
    assert sd["encoder.version"].item() == 2
    assert "encoder.lm_head.bias" not in sd and torch.equal(sd["encoder.lm_head.output_bias"], bias)
    # without a registered step the old version is refused, not silently loaded
    monkeypatch.delitem(etc.FORMAT_UPGRADES, 1)
    with pytest.raises(CheckpointLoadError, match="format version 1; no upgrade from 1"):
        tiny.upgrade_state_dict_named(dict(state), "")


def test_current_and_unversioned_checkpoints_load(tiny, trained):
    state = torch.load(trained / "checkpoint_last.pt", weights_only=True)["model"]
    sd = dict(state)
    del sd["encoder.version"]  # a checkpoint written before the version buffer existed
    tiny.upgrade_state_dict_named(sd, "")
    assert sd["encoder.version"].item() == 1
    tiny.load_state_dict(sd, strict=True)
    for k, v in tiny.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_newer_version_fails_clearly_in_fairseq_validate(trained, pretrain_data, tmp_path, monkeypatch):
    state = torch.load(trained / "checkpoint_last.pt", weights_only=True)
    state["model"]["encoder.version"] = torch.tensor([2.0])
    newer = tmp_path / "newer.pt"
    torch.save(state, newer)
    with pytest.raises(CheckpointLoadError, match=rf"{re.escape(str(newer))}: etc-fairseq format version 2, newer than "
                                                  r"this installation reads \(1\)"):
        cli("fairseq_cli.validate", [str(pretrain_data), "--user-dir", USER_DIR, "--task", "etc_pretraining", "--path",
                                     str(newer), "--cpu", "--max-tokens", "2048", "--num-workers", "0"], monkeypatch)


@pytest.mark.parametrize("content", [b"", b"plain text, not a checkpoint\n", b"\x80\x02}q\x00.", b"PK\x03\x04" + b"\0" * 64])
def test_non_checkpoint_files_are_reported_as_such(content, tmp_path):
    from fairseq import checkpoint_utils

    from etc_fairseq.checkpoint_io import CheckpointLoadError

    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointLoadError, match=rf"{re.escape(str(path))}: truncated or corrupt checkpoint, not loaded"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))


def test_hub_interface_refuses_code_running_checkpoint(trained, pretrain_data, tmp_path):
    """EtcModel.from_pretrained (etc_fairseq/models/loading.py) on the CONSTRUCTED malicious checkpoint."""
    from etc_fairseq.models import EtcModel

    marker = tmp_path / "pwned"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    evil_copy(trained / "checkpoint_last.pt", model_dir / "model.pt", marker, legacy=False)
    with pytest.raises(Exception, match=r"posix\.system") as e:
        EtcModel.from_pretrained(str(model_dir), "model.pt", str(pretrain_data))
    assert "model.pt" in str(e.value)
    assert not marker.exists()
    # the real checkpoint loads through the same path
    shutil.copy(trained / "checkpoint_last.pt", model_dir / "good.pt")
    hub = EtcModel.from_pretrained(str(model_dir), "good.pt", str(pretrain_data))
    assert int(hub.model.encoder.version.item()) == 1


# ------------------------------------------------------------------------------------------------------
# the config gate: a weights-only checkpoint that names another model (issue 15 item 1)
# ------------------------------------------------------------------------------------------------------

#: wav2vec2 eval()s this string when it builds its feature extractor. CONSTRUCTED attack.
def wav2vec2_payload(marker: Path) -> str:
    return f"__import__('os').system('touch {marker}') or [(512, 10, 5)]"


def config_copy(good: Path, dest: Path, edit) -> Path:
    """A copy of a real checkpoint with ``edit(cfg)`` applied to its (plain-dict) config: no pickle
    payload at all, so the weights-only scan has nothing to find."""
    state = torch.load(good, weights_only=True)
    edit(state["cfg"])
    torch.save(state, dest)
    return dest


def wav2vec2_checkpoint(trained: Path, dest: Path, marker: Path) -> Path:
    def edit(cfg):
        cfg["model"] = {"_name": "wav2vec2", "conv_feature_layers": wav2vec2_payload(marker)}

    return config_copy(trained / "checkpoint_last.pt", dest, edit)


def test_wav2vec2_checkpoint_passes_the_pickle_scan(trained, tmp_path):
    """Why the config gate exists: the attack file is a plain weights-only checkpoint."""
    from etc_fairseq.checkpoint_io import load_checkpoint, unsafe_globals

    evil = wav2vec2_checkpoint(trained, tmp_path / "evil.pt", tmp_path / "pwned")
    assert unsafe_globals(evil) == []
    assert load_checkpoint(evil)["cfg"]["model"]["_name"] == "wav2vec2"
    assert not (tmp_path / "pwned").exists()


REFUSED_WAV2VEC2 = r"checkpoint {}: cfg\.model\._name='wav2vec2' is not an ETC model \(expected one of etc, etc_base, .*etc_tiny"


def test_fairseq_validate_refuses_wav2vec2_config(trained, pretrain_data, tmp_path):
    marker = tmp_path / "PWNED"
    evil = wav2vec2_checkpoint(trained, tmp_path / "evil.pt", marker)
    rc, log = fairseq("fairseq_cli.validate", str(pretrain_data), "--user-dir", USER_DIR, "--task", "etc_pretraining",
                      "--path", str(evil), "--cpu", "--max-tokens", "2048", "--num-workers", "0")
    assert rc != 0
    assert re.search(REFUSED_WAV2VEC2.format(re.escape(str(evil))), log), log[-2000:]
    assert not marker.exists()


def test_etc_predict_refuses_wav2vec2_config_in_one_line(trained, pretrain_data, tmp_path):
    marker = tmp_path / "PWNED"
    evil = wav2vec2_checkpoint(trained, tmp_path / "evil.pt", marker)
    out = tmp_path / "pred.json"
    proc = run_python(["-m", "etc_fairseq.cli.predict", "wikihop", "--path", str(evil),
                       "--data", str(pretrain_data), "--output", str(out), "--device", "cpu"], cwd=REPO, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"etc-predict wikihop: error: " + REFUSED_WAV2VEC2.format(re.escape(str(evil))) + r".*\)", last), last
    assert "Traceback" not in proc.stderr
    assert not marker.exists() and not out.exists()


def test_from_pretrained_refuses_wav2vec2_config(trained, pretrain_data, tmp_path):
    from etc_fairseq.checkpoint_io import CheckpointLoadError
    from etc_fairseq.models import EtcModel

    marker = tmp_path / "PWNED"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    evil = wav2vec2_checkpoint(trained, model_dir / "model.pt", marker)
    with pytest.raises(CheckpointLoadError, match=REFUSED_WAV2VEC2.format(re.escape(str(evil)))):
        EtcModel.from_pretrained(str(model_dir), "model.pt", str(pretrain_data))
    assert not marker.exists()


def _set(section, key, value):
    def edit(cfg):
        cfg[section][key] = value
    return edit


def _replace(section, value):
    def edit(cfg):
        cfg[section] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set("model", "conv_feature_layers", "[(512, 10, 5)]"),
     r"cfg\.model\.conv_feature_layers is not a field of EtcConfig \(unknown config field"),
    (_set("model", "encoder_layers", '__import__("os").system("true") or 2'),
     r"cfg\.model\.encoder_layers='__import__\(\"os\"\).* is not of the field's type \(expected int\)"),
    (_set("model", "encoder_layers", 2.0), r"cfg\.model\.encoder_layers=2\.0 is not of the field's type \(expected int\)"),
    (_set("model", "dropout", True), r"cfg\.model\.dropout=True is not of the field's type \(expected float\)"),
    (_set("model", "shared_kv", "False"), r"cfg\.model\.shared_kv='False' is not of the field's type \(expected bool\)"),
    (_set("model", "activation_fn", "swish2"), r"cfg\.model\.activation_fn='swish2' is not of the field's type \(expected one of 'relu'"),
    (_set("model", "relative_structure_labels", ["belongs"]), r"cfg\.model\.relative_structure_labels=\['belongs'\] .*expected str"),
    (_set("model", "_name", "roberta_base"), r"cfg\.model\._name='roberta_base' is not an ETC model"),
    (_replace("model", None), r"cfg\.model is a NoneType, not a dataclass config"),
    (_set("task", "_name", "audio_pretraining"), r"cfg\.task\._name='audio_pretraining' is not a task etc-fairseq builds \(expected one of .*etc_pretraining"),
    (_set("task", "max_long_len", "128"), r"cfg\.task\.max_long_len='128' is not of the field's type \(expected int\)"),
    (_set("task", "normalize", True), r"cfg\.task\.normalize is not a field of EtcPretrainingConfig"),
    (_set("criterion", "_name", "ctc"), r"cfg\.criterion\._name='ctc' is not a criterion etc-fairseq builds"),
    (_set("common", "user_dir", "${oc.env:HOME}"), r"cfg\.common\.user_dir='\$\{oc\.env:HOME\}' is an omegaconf resolver call"),
])
def test_config_gate_refuses_unknown_models_fields_and_types(trained, tmp_path, edit, message):
    """Each CONSTRUCTED edit of a real checkpoint's config is refused before anything is built, in one
    line naming the file and the field; the untouched checkpoint passes the same gate."""
    from fairseq import checkpoint_utils

    from etc_fairseq.errors import CheckpointLoadError
    from etc_fairseq.models.checkpoint_config import load_model_checkpoint

    good = trained / "checkpoint_last.pt"
    load_model_checkpoint(good)
    bad = config_copy(good, tmp_path / "bad.pt", edit)
    with pytest.raises(CheckpointLoadError, match=rf"^checkpoint {re.escape(str(bad))}: {message}") as e:
        load_model_checkpoint(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(CheckpointLoadError, match=message):  # and in fairseq's loader, which every path uses
        checkpoint_utils.load_checkpoint_to_cpu(str(bad))


def test_config_gate_refuses_argparse_args(trained, tmp_path):
    """An argparse-era ``args`` (fairseq builds from it in preference to ``cfg``) is refused outright; it
    needs argparse.Namespace, which only etc-lift's reader allows."""
    import argparse

    from etc_fairseq.checkpoint_io import CheckpointLoadError, load_checkpoint
    from etc_fairseq.models.checkpoint_config import validate_checkpoint_config

    state = torch.load(trained / "checkpoint_last.pt", weights_only=True)
    state["args"] = argparse.Namespace(arch="fconv", encoder_layers="__import__('os').system('true')")
    path = tmp_path / "args.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointLoadError, match=r"its pickle references argparse\.Namespace"):
        load_checkpoint(path)
    with pytest.raises(CheckpointLoadError, match=r"argparse-era 'args' config \(arch='fconv'\)"):
        validate_checkpoint_config(load_checkpoint(path, legacy_configs=True), path)


# ------------------------------------------------------------------------------------------------------
# resuming without losing work (issue 15 item 5)
# ------------------------------------------------------------------------------------------------------


def test_checkpoint_last_has_the_mode_of_the_other_checkpoints(trained):
    """fairseq creates checkpoints with open() (0666 minus the umask); checkpoint_last.pt, our atomic copy,
    used to be 0600 (mkstemp)."""
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in trained.glob("*.pt")}
    assert set(modes.values()) == {0o666 & ~umask}, modes


def test_intact_checkpoint_is_named_when_the_newest_ones_are_broken(trained, tmp_path):
    from fairseq import checkpoint_utils

    from etc_fairseq.checkpoint_io import CheckpointLoadError

    save = tmp_path / "ckpt"
    shutil.copytree(trained, save)
    for name in ("checkpoint_1_1.pt", "checkpoint_1_2.pt", "checkpoint_last.pt"):  # oldest first
        os.utime(save / name, (time_of(name), time_of(name)))
    for name in ("checkpoint_last.pt", "checkpoint_1_2.pt"):
        data = (save / name).read_bytes()
        (save / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointLoadError, match=r"checkpoint_last\.pt: truncated or corrupt checkpoint, not loaded .*"
                       r"the newest intact checkpoint next to it is checkpoint_1_1\.pt: resume from it with "
                       rf"--restore-file {re.escape(str(save / 'checkpoint_1_1.pt'))}$"):
        checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))


def time_of(name: str) -> float:
    """A fixed modification time per file name, oldest for checkpoint_1_1.pt."""
    return 1_700_000_000 + {"checkpoint_1_1.pt": 1, "checkpoint_1_2.pt": 2, "checkpoint_last.pt": 3}[name]


def test_no_restart_at_update_0_over_numbered_checkpoints(trained, pretrain_data, tmp_path, monkeypatch):
    """The old advice "move the broken file away" made the same command start at update 0 and overwrite
    checkpoint_1_*.pt. Now it is refused, naming the checkpoint to restore; following that advice resumes
    at update 2; temporaries of an interrupted save are removed when training starts."""
    from etc_fairseq.checkpoint_io import CheckpointLoadError

    save = tmp_path / "ckpt"
    shutil.copytree(trained, save)
    (save / "checkpoint_last.pt").rename(tmp_path / "broken.pt")
    before = {p.name: p.read_bytes() for p in save.glob("*.pt")}
    argv = [str(pretrain_data), *TRAIN, "--max-update", "3", "--save-dir", str(save)]
    with pytest.raises(CheckpointLoadError) as e:
        cli("fairseq_cli.train", argv, monkeypatch)
    msg = str(e.value)
    assert re.fullmatch(
        rf"{re.escape(str(save))}: holds checkpoint_1_1\.pt, checkpoint_1_2\.pt but no checkpoint_last\.pt; starting at "
        rf"update 0 would overwrite them\. Resume with --restore-file (\S+), or train in another --save-dir \(or pass "
        r"a --reset-\* option to start over here on purpose\)", msg), msg
    advised = re.search(r"--restore-file (\S+),", msg).group(1)
    assert advised == str(save / "checkpoint_1_2.pt")
    assert {p.name: p.read_bytes() for p in save.glob("*.pt")} == before  # nothing overwritten
    (save / ".checkpoint_last.pt.tmp-k1ll3d").write_bytes(b"half a copy")  # CONSTRUCTED leftovers of a kill
    (save / "checkpoint_1_3.pt.tmp").write_bytes(b"half a save")
    rc, log = fairseq("fairseq_cli.train", *argv, "--restore-file", advised)
    assert rc == 0, log[-3000:]
    assert re.search(r"Loaded checkpoint .*checkpoint_1_2\.pt \(epoch 1 @ 2 updates\)", log), log[-3000:]
    assert sorted(p.name for p in save.iterdir()) == ["checkpoint_1_1.pt", "checkpoint_1_2.pt", "checkpoint_1_3.pt",
                                                      "checkpoint_last.pt"]
    assert (save / "checkpoint_1_2.pt").read_bytes() == before["checkpoint_1_2.pt"]


def test_missing_restore_file_is_refused(pretrain_data, tmp_path, monkeypatch):
    from etc_fairseq.checkpoint_io import CheckpointLoadError

    missing = tmp_path / "checkpoint_9_9.pt"
    with pytest.raises(CheckpointLoadError, match=rf"^--restore-file {re.escape(str(missing))}: no such checkpoint "
                       r"\(fairseq-train would silently start at update 0\)$"):
        cli("fairseq_cli.train", [str(pretrain_data), *TRAIN, "--max-update", "1", "--save-dir", str(tmp_path / "s"),
                                  "--restore-file", str(missing)], monkeypatch)
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").iterdir())


def test_reset_option_starts_over_on_purpose(trained, pretrain_data, tmp_path):
    save = tmp_path / "ckpt"
    shutil.copytree(trained, save)
    (save / "checkpoint_last.pt").unlink()
    rc, log = fairseq("fairseq_cli.train", str(pretrain_data), *TRAIN, "--max-update", "1", "--save-dir", str(save),
                      "--reset-dataloader")
    assert rc == 0, log[-3000:]
    assert "No existing checkpoint found" in log and re.search(r"train_inner \| .*num_updates=1,", log)


KILL_DURING_COPY = """
import shutil, sys, time
import etc_fairseq.register  # noqa: F401  (installs the atomic copy)
from fairseq.file_io import PathManager

def slow(fsrc, fdst, length=0):
    fdst.write(fsrc.read(1_000_000))
    fdst.flush()
    print("copying", flush=True)
    time.sleep(60)

shutil.copyfileobj = slow
PathManager.copy(sys.argv[1], sys.argv[2], overwrite=True)
"""


def test_sigkill_during_checkpoint_last_copy_leaves_a_temporary_that_the_next_save_removes(trained, tmp_path):
    import signal

    from fairseq.file_io import PathManager

    import etc_fairseq.register  # noqa: F401

    src, dst = tmp_path / "checkpoint_1_2.pt", tmp_path / "checkpoint_last.pt"
    shutil.copy(trained / "checkpoint_1_2.pt", src)
    shutil.copy(trained / "checkpoint_1_1.pt", dst)
    old = dst.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", KILL_DURING_COPY, str(src), str(dst)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    assert proc.stdout.readline().strip() == "copying"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    left = list(tmp_path.glob(".checkpoint_last.pt.tmp-*"))
    assert len(left) == 1 and left[0].stat().st_size == 1_000_000
    assert dst.read_bytes() == old  # the previous checkpoint_last.pt is intact
    assert PathManager.copy(str(src), str(dst), overwrite=True)  # the next save
    assert list(tmp_path.glob(".checkpoint_last.pt.tmp-*")) == []
    assert dst.read_bytes() == src.read_bytes()
    assert dst.stat().st_mode & 0o777 == src.stat().st_mode & 0o777
