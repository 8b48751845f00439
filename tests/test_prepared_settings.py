"""What ``etc-prepare`` records (``prepare.json``: lengths; with ``--arch`` / ``--from-model`` the structure
settings) is taken up by ``fairseq-train``, ``fairseq-validate`` and ``etc-predict``, or refused in one line
naming the flag to pass (``etc_fairseq/data/prepared.py``):

- the rules as pure functions, on exact small inputs;
- every fine-tuning task and ``etc_pretraining``, set up in-process from a directory holding only
  ``dict.txt`` and ``prepare.json`` (the task reads nothing else before loading a split);
- one real run: a nextsent model trained with no length flag on data prepared at 512 / 64 records those
  lengths in its checkpoint (and its criterion's metrics in ``--tensorboard-logdir``'s event files), and ``fairseq-validate`` and ``etc-predict`` run it on data prepared at
  1024 / 128 without ``--model-overrides`` (relative positions take any length); a smaller explicit
  ``--max-global-len`` is refused naming the flag; a model with absolute positions too short is refused.
"""
import json
from pathlib import Path

import pytest
import torch
from forkserver import run_python

from etc_fairseq.data import prepared

REPO = Path(__file__).resolve().parents[1]
FINETUNE_TASKS = ("etc_hotpotqa", "etc_wikihop", "etc_nq", "etc_openkp", "etc_nextsent")


# -- the rules --------------------------------------------------------------------------------------------
def test_lengths_left_at_defaults_take_the_prepared_ones_and_a_smaller_flag_is_refused():
    defaults = {"max_long_len": 4096, "max_global_len": 256}
    take, longer = prepared.take_prepared_lengths(
        {"max_long_len": 4096, "max_global_len": 256}, defaults, {"max_long_len": 512, "max_global_len": 300}, "P", False)
    assert (take, longer) == ({"max_long_len": 512, "max_global_len": 300}, {})
    # explicit and larger: kept (every example fits); explicit and equal: nothing to do
    assert prepared.take_prepared_lengths({"max_long_len": 1024, "max_global_len": 64}, defaults,
                                          {"max_long_len": 512, "max_global_len": 64}, "P", False) == ({}, {})
    with pytest.raises(ValueError) as e:
        prepared.take_prepared_lengths({"max_long_len": 4096, "max_global_len": 64}, defaults,
                                       {"max_long_len": 4096, "max_global_len": 78}, "D/prepare.json", False)
    assert str(e.value) == ("--max-global-len 64 is below the length the data was prepared with (78, recorded in "
                            "D/prepare.json): pass --max-global-len 78 (or leave it out), or prepare the data again "
                            "with --max-global-len 64")
    # a checkpoint's trained lengths: kept when the data fits, else left to the model
    assert prepared.take_prepared_lengths({"max_long_len": 512, "max_global_len": 256}, defaults,
                                          {"max_long_len": 1024, "max_global_len": 64}, "P", True) == (
        {}, {"max_long_len": 1024})


def test_a_checkpoint_runs_longer_data_only_where_its_model_can():
    longer, trained = {"max_long_len": 1024}, {"max_long_len": 512}
    assert prepared.lengths_for_model(longer, trained, None, False, "P") == {"max_long_len": 1024}
    assert prepared.lengths_for_model(longer, trained, 4096, False, "P") == {"max_long_len": 1024}
    with pytest.raises(ValueError, match=r"^P: the data was prepared with --max-long-len 1024, longer than the "
                       r"checkpoint's 512, and its absolute position tables hold 600 positions: prepare the data "
                       r"again with --max-long-len 512$"):
        prepared.lengths_for_model(longer, trained, 600, False, "P")
    with pytest.raises(ValueError, match=r"--pad-to-fixed-length .*again with --max-long-len 512$"):
        prepared.lengths_for_model(longer, trained, None, True, "P")


def test_structure_settings_must_match_the_recorded_ones():
    recorded = {"arch": "etc_tiny", "local_radius": 16, "relative_pos_max_distance": 4, "fixed_block_len": 16}
    prepared.check_arch({"local_radius": 16, "relative_pos_max_distance": 4, "fixed_block_len": 16}, recorded, "P")
    prepared.check_arch({"local_radius": None}, recorded, "P")  # a model without these fields (a baseline)
    with pytest.raises(ValueError) as e:
        prepared.check_arch({"local_radius": 84, "relative_pos_max_distance": 12, "fixed_block_len": 16}, recorded, "P")
    assert str(e.value) == ("P: the data was prepared for --arch etc_tiny: local_radius 16, relative_pos_max_distance 4, "
                            "but the model has local_radius 84, relative_pos_max_distance 12: pass --arch etc_tiny (or "
                            "--local-radius 16 --relative-pos-max-distance 4), or prepare the data again with the "
                            "model's --arch")


def test_a_broken_summary_is_named(tmp_path):
    (tmp_path / "prepare.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"prepare.json: not a valid prepare.json of etc-prepare \(expected a JSON object\)"):
        prepared.read_summary(tmp_path / "prepare.json")


# -- every task, in-process ---------------------------------------------------------------------------------
def _data_dir(root: Path, dict_src: Path, **summary) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "dict.txt").write_text(dict_src.read_text())
    (root / "prepare.json").write_text(json.dumps(summary))
    return root


def _cfg(argv):
    """fairseq-train's composed config for ``argv`` (parsed as fairseq-train parses it)."""
    import etc_fairseq.register  # noqa: F401
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))


@pytest.mark.parametrize("task", FINETUNE_TASKS)
def test_every_finetuning_task_takes_up_the_prepared_lengths(task, tmp_path, pretrain_data):
    from fairseq import tasks

    data = _data_dir(tmp_path / "d", pretrain_data / "dict.txt", max_long_len=384, max_global_len=300)
    cfg = _cfg([str(data), "--task", task, "--arch", "etc_tiny"])
    t = tasks.setup_task(cfg.task)
    assert (t.cfg.max_long_len, t.cfg.max_global_len) == (384, 300)
    assert (cfg.task.max_long_len, cfg.task.max_global_len) == (384, 300)  # what the checkpoint records
    cfg = _cfg([str(data), "--task", task, "--arch", "etc_tiny", "--max-long-len", "256"])
    with pytest.raises(ValueError, match=r"^--max-long-len 256 is below .*pass --max-long-len 384"):
        tasks.setup_task(cfg.task)


@pytest.mark.parametrize("task", FINETUNE_TASKS + ("etc_pretraining",))
def test_every_task_refuses_a_model_of_another_radius(task, tmp_path, pretrain_data):
    from fairseq import tasks

    settings = dict(arch="etc_tiny", local_radius=16, relative_pos_max_distance=4, fixed_block_len=16)
    if task == "etc_pretraining":  # the bin/ of etc-prepare pretrain; prepare.json is next to it
        _data_dir(tmp_path / "out", pretrain_data / "dict.txt", **settings)
        data = tmp_path / "out" / "bin"
        data.mkdir()
        (data / "dict.txt").write_text((pretrain_data / "dict.txt").read_text())
    else:
        data = _data_dir(tmp_path / "d", pretrain_data / "dict.txt", **settings)
    good = _cfg([str(data), "--task", task, "--arch", "etc_tiny"])
    tasks.setup_task(good.task).build_model(good.model)
    bad = _cfg([str(data), "--task", task, "--arch", "etc_tiny", "--local-radius", "8"])
    with pytest.raises(ValueError, match=r"prepared for --arch etc_tiny: local_radius 16, but the model has "
                       r"local_radius 8: pass --arch etc_tiny \(or --local-radius 16\)"):
        tasks.setup_task(bad.task).build_model(bad.model)


# -- one real run ------------------------------------------------------------------------------------------
def _prepare(wiki_dump, pretrain_data, out, long_len, global_len):
    from etc_fairseq.cli.prepare import main as prepare_main

    assert prepare_main([
        "nextsent", "--dump", str(wiki_dump), "--train", "4", "--valid", "3", "--seed", "2", "--out", str(out),
        "--pretrain-dir", str(pretrain_data), "--max-long-len", str(long_len), "--max-global-len", str(global_len),
        "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1",
    ]) == 0


def _fairseq(module, *argv):
    return run_python(["-m", f"fairseq_cli.{module}", *map(str, argv)], cwd=REPO, timeout=600)


def test_train_validate_and_predict_take_up_the_prepared_lengths(tmp_path, wiki_dump, pretrain_data):
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.finetune.common.runner import load_checkpoint

    short, long_ = tmp_path / "short", tmp_path / "long"
    _prepare(wiki_dump, pretrain_data, short, 512, 64)
    _prepare(wiki_dump, pretrain_data, long_, 1024, 128)
    common = ["--user-dir", REPO / "user_dir", "--task", "etc_nextsent", "--criterion", "etc_nextsent", "--cpu",
              "--num-workers", "0"]
    save = tmp_path / "ckpt"
    train = ["--arch", "etc_tiny", "--batch-size", "4", "--required-batch-size-multiple", "1", "--optimizer",
             "adam", "--lr", "1e-3", "--max-update", "1", "--disable-validation", "--no-epoch-checkpoints",
             "--save-dir", save]
    refused = _fairseq("train", short, *common, *train, "--max-global-len", "32")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--max-global-len 32 is below the length the data was prepared with (64, recorded in "
        f"{short}/prepare.json): pass --max-global-len 64 (or leave it out), or prepare the data again with "
        "--max-global-len 32"), refused.stderr[-2000:]
    tb = tmp_path / "tb"  # tensorboardX comes with the package: our criterion's metrics reach the event files
    run = _fairseq("train", short, *common, *train, "--tensorboard-logdir", tb)  # no length flag: 512 / 64
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    from etc_fairseq.cli.curves import read_curves

    logged = read_curves(tb)["train"]
    assert {"loss", "accuracy", "mrr", "lost"} <= set(logged) and logged["loss"][0][0] == 1, logged
    ckpt = save / "checkpoint_last.pt"
    task_cfg = torch.load(ckpt)["cfg"]["task"]
    assert (task_cfg["max_long_len"], task_cfg["max_global_len"]) == (512, 64)

    valid = _fairseq("validate", long_, *common, "--path", ckpt, "--valid-subset", "valid", "--batch-size", "4")
    assert valid.returncode == 0, (valid.stdout + valid.stderr)[-3000:]
    log = valid.stdout + valid.stderr
    assert "running at the prepared lengths {'max_long_len': 1024, 'max_global_len': 128}" in log, log[-3000:]
    assert "| valid on 'valid' subset" in log, log[-3000:]

    model, task, _ = load_checkpoint(ckpt, long_)
    assert (task.cfg.max_long_len, task.cfg.max_global_len) == (1024, 128)
    model, task, _ = load_checkpoint(ckpt, short)
    assert (task.cfg.max_long_len, task.cfg.max_global_len) == (512, 64)
    pred = tmp_path / "pred.json"
    assert predict_main(["nextsent", "--path", str(ckpt), "--data", str(long_), "--split", "valid",
                         "--output", str(pred), "--device", "cpu"]) == 0
    assert len(json.loads(pred.read_text())) == len(json.loads((long_ / "valid.records.json").read_text())) == 3

    # absolute position embeddings of 512 rows: data prepared at 1024 is refused, naming the flag
    state = torch.load(ckpt)
    state["cfg"]["model"].update(use_absolute_positions=True, max_positions=512)
    absolute = tmp_path / "absolute.pt"
    torch.save(state, absolute)
    with pytest.raises(ValueError, match=r"prepared with --max-long-len 1024, longer than the checkpoint's 512, and "
                       r"its absolute position tables hold 512 positions: prepare the data again with --max-long-len 512"):
        load_checkpoint(absolute, long_)


# -- the vocabulary: the data's dict.txt against the checkpoint training starts from ---------------------------
def test_a_checkpoint_of_another_vocabulary_is_refused_in_one_line(tmp_path, pretrain_data, etc_tiny_checkpoint):
    from fairseq import tasks

    from etc_fairseq.checkpoint_io import CheckpointLoadError
    from etc_fairseq.fairseq_fixes.training_start import check_vocabulary, checkpoint_to_load

    same = _data_dir(tmp_path / "same", pretrain_data / "dict.txt")
    cfg = _cfg([str(same), "--task", "etc_nextsent", "--arch", "etc_tiny"])
    check_vocabulary(etc_tiny_checkpoint, tasks.setup_task(cfg.task).build_model(cfg.model), str(same))
    other = tmp_path / "other"  # a dictionary of 10 fewer words
    other.mkdir()
    (other / "dict.txt").write_text("".join((pretrain_data / "dict.txt").read_text().splitlines(True)[:-10]))
    cfg = _cfg([str(other), "--task", "etc_nextsent", "--arch", "etc_tiny"])
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    n = model.encoder.sentence_encoder.embed_tokens.weight.shape[0]
    with pytest.raises(CheckpointLoadError) as e:
        check_vocabulary(etc_tiny_checkpoint, model, str(other))
    assert str(e.value).startswith(f"{etc_tiny_checkpoint}: a vocabulary of {n + 10} embeddings, but the task's "
                                   f"dictionary ({other}/dict.txt + <mask>) gives {n}; prepare the data with that")
    with pytest.raises(CheckpointLoadError, match=r"checkpoint_last.pt of --save-dir, which fairseq resumes"):
        check_vocabulary(etc_tiny_checkpoint, model, str(other), resuming=True)

    # which file fairseq-train loads: checkpoint_last.pt of --save-dir wins over --finetune-from-model
    cfg = _cfg([str(other), "--task", "etc_nextsent", "--arch", "etc_tiny", "--save-dir", str(tmp_path / "run"),
                "--finetune-from-model", str(etc_tiny_checkpoint)])
    assert checkpoint_to_load(cfg.checkpoint) == etc_tiny_checkpoint
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint_last.pt").write_bytes(b"")
    assert checkpoint_to_load(cfg.checkpoint) == tmp_path / "run" / "checkpoint_last.pt"
