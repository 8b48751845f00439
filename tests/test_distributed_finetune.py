"""Data-parallel fine-tuning with fairseq's default ``--ddp-backend pytorch_ddp`` (PyTorch's
DistributedDataParallel, gloo on CPU): for every fine-tuning task, 2 processes x ``--batch-size 2`` train
bit for bit like 1 process x ``--batch-size 2 --update-freq 2`` on the same data order -- the same logged
losses and metrics at every update and identical weights after every saved update.

What made this fail before (docs/distributed.md): parameters without a gradient in a step (the LM and CPC
heads of a fine-tuning model; the half of the last ETC layer whose outputs a task does not read; HotpotQA's
span head in a batch without a span answer) stop DistributedDataParallel ("Expected to have finished
reduction"), and where some other backend let them through, Adam stepped them with a zero gradient on one
side (a dummy batch) and skipped them (no gradient) on the other, so the runs parted after such a step.

One thread per process (``OMP_NUM_THREADS=1``: 2 workers on a 2-core machine). Dropout is off
(``--dropout 0 --attention-dropout 0``; the heads' dropout defaults to 0): fairseq seeds every process alike
per update, so with dropout on, 2 processes draw other masks than 1 process drawing for two batches in
turn. Tolerance: none (exact equality of the weights and of the logged numbers).

Data: each task's CONSTRUCTED files on real Wikipedia text, built with the helpers its own tests use,
prepared with ``etc-prepare`` and trained from scratch on ``etc_tiny`` for 3 updates.
"""
import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from test_nq import nq_examples, write_split  # noqa: F401  (nq_examples is a fixture)
from test_openkp import constructed_page, wiki_docs  # noqa: F401  (wiki_docs is a fixture)
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")
UPDATES = 3
#: logged per update but not a function of the model (time, speed)
NOT_COMPARED = {"wps", "ups", "wall", "train_wall", "gb_free"}
LINE = re.compile(r"train_inner \| epoch \d+: +\d+ / \d+ (.*)")


def _example(name):
    import importlib

    return importlib.import_module(f"examples.{name}.construct")


def _prepare(*argv):
    from etc_fairseq.cli.prepare import main as prepare_main

    assert prepare_main(list(map(str, argv))) == 0


# ------------------------------------------------------------------------------------------------------
# one small prepared data set per task: (data dir, extra fairseq-train arguments)
# ------------------------------------------------------------------------------------------------------


def _wikihop(tmp, wiki_dump, pretrain_data):
    raw = tmp / "raw"
    assert _example("wikihop").main(["--dump", str(wiki_dump), "--out", str(raw), "--train", "8", "--valid", "2",
                                     "--supports", "3", "--seed", "3", "--max-articles", "30",
                                     "--train-articles", "20"]) == 0
    _prepare("wikihop", "--train", raw / "train.json", "--out", tmp / "data", "--pretrain-dir", pretrain_data,
             "--max-long-len", "256", "--max-global-len", "48")
    return tmp / "data", ["--max-long-len", "256", "--max-global-len", "48"]


def _hotpotqa(tmp, wiki_dump, pretrain_data):
    records = _example("hotpotqa").constructed_records(wiki_dump)  # 5: 3 span, 1 yes, 1 no answer
    (tmp / "train.json").write_text(json.dumps(records), encoding="utf-8")
    _prepare("hotpotqa", "--train", tmp / "train.json", "--out", tmp / "data", "--pretrain-dir", pretrain_data)
    return tmp / "data", []


def _nq(tmp, examples, pretrain_data):
    train = write_split(tmp, examples, "nq-train.jsonl", "train", "simplified", gz=False)
    _prepare("nq", "--train", train, "--pretrain-dir", pretrain_data, "--max-long-len", "96",
             "--max-global-len", "48", "--doc-stride", "48", "--out", tmp / "data")
    return tmp / "data", ["--max-long-len", "96", "--max-global-len", "48"]


def _openkp(tmp, docs, pretrain_data):
    with open(tmp / "train.jsonl", "w", encoding="utf-8") as f:
        for i, doc in enumerate(docs[:8]):
            f.write(json.dumps(constructed_page(doc, i, absent_phrase=(i % 4 == 3))) + "\n")
    _prepare("openkp", "--train", tmp / "train.jsonl", "--out", tmp / "data", "--pretrain-dir", pretrain_data,
             "--max-long-len", "192", "--max-global-len", "32")
    return tmp / "data", ["--max-long-len", "192", "--max-global-len", "32"]


def _nextsent(tmp, wiki_dump, pretrain_data):
    _prepare("nextsent", "--dump", wiki_dump, "--train", "8", "--valid", "2", "--seed", "2", "--out", tmp / "data",
             "--pretrain-dir", pretrain_data, "--max-long-len", "384", "--max-global-len", "64",
             "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1")
    return tmp / "data", ["--max-long-len", "384", "--max-global-len", "64"]


@pytest.fixture(scope="module")
def prepared(wiki_dump, pretrain_data, nq_examples, wiki_docs, tmp_path_factory):  # noqa: F811
    """task -> (data dir, task-specific fairseq-train arguments), built on first use."""
    builders = {
        "wikihop": lambda t: _wikihop(t, wiki_dump, pretrain_data),
        "hotpotqa": lambda t: _hotpotqa(t, wiki_dump, pretrain_data),
        "nq": lambda t: _nq(t, nq_examples, pretrain_data),
        "openkp": lambda t: _openkp(t, wiki_docs, pretrain_data),
        "nextsent": lambda t: _nextsent(t, wiki_dump, pretrain_data),
    }
    cache = {}

    def get(task):
        if task not in cache:
            cache[task] = builders[task](tmp_path_factory.mktemp(f"ddp_{task}"))
        return cache[task]

    return get


# ------------------------------------------------------------------------------------------------------
# training and comparison
# ------------------------------------------------------------------------------------------------------


def train(task, data, extra, save_dir, *how):
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", USER_DIR, "--task", f"etc_{task}",
           "--criterion", f"etc_{task}", "--arch", "etc_tiny", *extra, "--dropout", "0", "--attention-dropout", "0",
           "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed", "--cpu", "--seed", "1",
           "--batch-size", "2", "--required-batch-size-multiple", "1", "--num-workers", "0",
           "--max-update", str(UPDATES), "--save-interval-updates", "1", "--no-epoch-checkpoints",
           "--disable-validation", "--log-format", "simple", "--log-interval", "1", "--save-dir", str(save_dir), *how]
    proc = run_python(cmd[1:], cwd=REPO, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", ETC_FAIRSEQ_FIXES="cpu_distributed"))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def curve(log):
    """{num_updates: {field: logged text}} of the train_inner lines (the model's numbers only)."""
    out = {}
    for m in LINE.finditer(log):
        fields = dict(kv.split("=", 1) for kv in m.group(1).split(", "))
        out[int(fields["num_updates"])] = {k: v for k, v in fields.items() if k not in NOT_COMPARED}
    return out


def weights(save_dir):
    """{checkpoint file name: model state} of every checkpoint a run saved (one per update here)."""
    from etc_fairseq.checkpoint_io import load_checkpoint

    return {p.name: load_checkpoint(p)["model"] for p in sorted(Path(save_dir).glob("checkpoint*.pt"))}


@pytest.mark.parametrize("task", ["wikihop", "hotpotqa", "nq", "openkp", "nextsent"])
def test_two_processes_train_like_update_freq_two(task, prepared, tmp_path):
    data, extra = prepared(task)
    one_log = train(task, data, extra, tmp_path / "one", "--update-freq", "2")
    two_log = train(task, data, extra, tmp_path / "two", "--distributed-world-size", "2")
    assert "CPU: spawning 2 processes (gloo" in two_log
    assert "ddp_backend='pytorch_ddp'" in two_log or "'ddp_backend': 'pytorch_ddp'" in two_log

    one, two = curve(one_log), curve(two_log)
    assert sorted(one) == sorted(two) == list(range(1, UPDATES + 1)), (one, two)
    assert one == two  # every logged loss and metric, at every update
    assert len({one[n]["loss"] for n in one}) > 1  # the runs train (the comparison can fail)

    w_one, w_two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert "checkpoint_last.pt" in w_one and len(w_one) >= 2 and sorted(w_one) == sorted(w_two)
    for name in w_one:
        assert w_one[name].keys() == w_two[name].keys()
        differ = [k for k in w_one[name] if not torch.equal(w_one[name][k], w_two[name][k])]
        assert not differ, (name, differ[:5])
    first, last = w_one[min(w_one)], w_one["checkpoint_last.pt"]
    assert any(not torch.equal(first[k], last[k]) for k in last)  # the weights move between saves
    # the model has no parameter its loss never reads: no pre-training heads in a fine-tuning model
    assert not any(k.startswith(("encoder.lm_head.", "cpc_head.")) for k in last)


def test_find_unused_parameters_is_refused_for_a_fine_tuning_model():
    """DDP's unused-parameter search starts from forward's outputs; the task heads run in the criterion, so
    it would mark their parameters ready twice. The wrapped DistributedFairseqModel says so in one line."""
    from types import SimpleNamespace

    import etc_fairseq.register  # noqa: F401
    from fairseq import models

    args = SimpleNamespace(find_unused_parameters=True, ddp_backend="pytorch_ddp", tpu=False)
    model = SimpleNamespace(task_heads={"wikihop_candidates": torch.nn.Linear(2, 1)})
    with pytest.raises(ValueError, match="--find-unused-parameters does not work with the etc fine-tuning tasks"):
        models.DistributedFairseqModel(args, model, None, "cpu")
