"""The bad-input and bad-output matrix of issue 15 (items 2, 3, 4) and issue 18 (7, error gaps): every case
runs one real command line (``etc-prepare``, ``etc-predict``, ``etc-evaluate``, ``etc-show``, ``etc-lift``,
in-process through their ``main``) on tiny CONSTRUCTED inputs and must

- end with the expected exit status (1: a refused input or output; 2: a refused flag value, from argparse),
- print exactly one line on stderr, ``PROG [SUB]: error: ...``, naming the file or flag at fault (no traceback),
- write nothing: every input byte-for-byte unchanged, no output and no hidden staging file left behind.

Each case is one test id, so ``scripts/reliability_report.py`` counts inputs and clear errors from the ids.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from etc_fairseq.cli.evaluate import main as evaluate_main
from etc_fairseq.cli.lift import main as lift_main
from etc_fairseq.cli.predict import main as predict_main
from etc_fairseq.cli.prepare import main as prepare_main
from etc_fairseq.cli.show import main as show_main

MAINS = {"etc-prepare": prepare_main, "etc-predict": predict_main, "etc-evaluate": evaluate_main,
         "etc-show": show_main, "etc-lift": lift_main}

# ---------------------------------------------------------------------------------------------------------
# tiny CONSTRUCTED records in the official formats (field names from the official files)
# ---------------------------------------------------------------------------------------------------------
WIKIHOP = {"id": "WH_0", "query": "located_in the old mill", "candidates": ["paris", "london"],
           "supports": ["The old mill stands in london near the river. It is old."], "answer": "london"}
HOTPOT = {"_id": "HP_0", "question": "Where is the old mill?", "answer": "london", "type": "bridge",
          "supporting_facts": [["Mill", 0]], "context": [["Mill", ["The old mill stands in london.", " It is old."]]]}
NQ = {"example_id": 1, "question_text": "where is the old mill", "document_url": "https://constructed.example/mill",
      "document_text": "<P> The old mill stands in london </P>",
      "long_answer_candidates": [{"start_token": 0, "end_token": 7, "top_level": True}],
      "annotations": [{"long_answer": {"start_token": 0, "end_token": 7, "candidate_index": 0},
                       "short_answers": [{"start_token": 5, "end_token": 6}], "yes_no_answer": "NONE"}]}
_NODE = [48.0, 620.0, 40.0, 40.0, 1.0, 0.0, 0.0, 1.0, 16.0, 0.0]
OPENKP = {"url": "http://constructed.example/0", "text": "the old mill stands in london",
          "VDOM": json.dumps([{"Id": 0, "text": "the old mill stands in london", "start_idx": 0, "end_idx": 6,
                               "feature": _NODE + _NODE}]),
          "KeyPhrases": [["old", "mill"]]}
RECORDS = {"wikihop": WIKIHOP, "hotpotqa": HOTPOT, "nq": NQ, "openkp": OPENKP}
JSON_LIST = ("wikihop", "hotpotqa")
ID_FIELD = {"wikihop": "id", "hotpotqa": "_id", "nq": "example_id", "openkp": "url"}
#: a few lines of real-looking text for the text-corpus converters (refused before they are read)
CORPUS = "The old mill stands in London near the river.\nIt was built in 1820 and is still in use.\n"


def write_records(path: Path, dataset: str, records: List[dict], gz: bool = False) -> Path:
    """``records`` in ``dataset``'s file format (a JSON list, or JSON lines), optionally gzipped."""
    text = json.dumps(records) if dataset in JSON_LIST else "".join(json.dumps(r) + "\n" for r in records)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# ---------------------------------------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One command line and what its refusal must look like.

    Attributes:
        prog: ``etc-prepare`` etc.; argv: its arguments.
        words: strings the one error line must contain (file paths, flag names, what was wrong).
        status: expected exit status (1 refused input/output, 2 refused flag value).
        keep: paths (files or directories) that must be unchanged afterwards.
        absent: paths that must not exist afterwards (the outputs).
    """

    prog: str
    argv: List[str]
    words: List[str]
    status: int = 1
    keep: List[Path] = field(default_factory=list)
    absent: List[Path] = field(default_factory=list)


def snapshot(path: Path) -> Dict[str, str]:
    """Relative path -> sha256 of every file under ``path`` (or of ``path`` itself)."""
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def hidden_leftovers(root: Path) -> List[str]:
    """Staging files and directories (``.NAME.tmp-*``, ``.NAME.old-*``) anywhere under ``root``."""
    return [str(p) for p in root.rglob(".*") if ".tmp" in p.name or ".old-" in p.name]


def run_refused(run: Run, capsys) -> str:
    """Run ``run`` and check the promise; returns the error line."""
    before = {p: snapshot(p) for p in run.keep}
    capsys.readouterr()
    try:
        rc = MAINS[run.prog](run.argv)
    except SystemExit as e:  # argparse
        rc = e.code
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == run.status, (rc, err)
    assert len(err) == 1, err
    line = err[0]
    assert "Traceback" not in line and line.startswith(run.prog) and ": error: " in line, line
    for w in run.words:
        assert str(w) in line, (str(w), line)
    for p, snap in before.items():
        assert p.exists() and snapshot(p) == snap, f"{p} changed"
    for p in run.absent:
        assert not p.exists(), f"{p} was written"
    return line


# ---------------------------------------------------------------------------------------------------------
# cases: each builds its inputs under tmp and returns the Run
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Env:
    tmp: Path
    pretrain_data: Path

    def tok(self) -> List[str]:
        """The tokenizer options of the fine-tuning converters (the conftest pretraining data's)."""
        return ["--pretrain-dir", str(self.pretrain_data)]

    def spm(self) -> List[str]:
        info = json.loads((self.pretrain_data / "pretrain.json").read_text())
        return ["--spm-model", str(self.pretrain_data / info["tokenizer_files"]["spm_model"])]

    def good(self, dataset: str, name: str = "in.json") -> Path:
        return write_records(self.tmp / name, dataset, [RECORDS[dataset]])

    def dict_file(self, text: str, name: str = "dict.txt") -> Path:
        p = self.tmp / name
        p.write_text(text, encoding="utf-8")
        return p

    def data_dir_with_dict(self, text: str) -> Path:
        d = self.tmp / "data"
        shutil.copytree(self.pretrain_data, d)
        (d / "dict.txt").write_text(text, encoding="utf-8")
        return d


CASES: Dict[str, Callable[[Env], Run]] = {}


def case(name: str):
    def register(fn):
        CASES[name] = fn
        return fn

    return register


FINETUNE = ("hotpotqa", "wikihop", "nq", "openkp")
CORPUS_SUBS = ("mlm", "pretrain", "article-classification")

# -- issue 15.2: no output may replace, delete or hide an input; --overwrite deletes only our own outputs --
for _ds in FINETUNE:
    @case(f"out-holds-input-{_ds}")
    def _(env, ds=_ds):
        d = env.tmp / "d"
        d.mkdir()
        src = env.good(ds, "d/in.json")
        out = d
        return Run("etc-prepare", [ds, "--train", str(src), "--out", str(out), "--overwrite", *env.tok()],
                   ["--out", "--train", str(src), "holds the input"], keep=[d])

for _sub in CORPUS_SUBS:
    @case(f"out-holds-input-{_sub}")
    def _(env, sub=_sub):
        d = env.tmp / "d"
        d.mkdir()
        corpus = d / "corpus.txt"
        corpus.write_text(CORPUS, encoding="utf-8")
        return Run("etc-prepare", [sub, "--input", str(corpus), "--out", str(d), "--overwrite"],
                   ["--out", "--input", str(corpus), "holds the input"], keep=[d])


@case("out-is-input-wikihop")
def _(env):
    src = env.good("wikihop", "x.json")
    return Run("etc-prepare", ["wikihop", "--valid", str(src), "--out", str(src), "--overwrite", *env.tok()],
               ["--out", "--valid", str(src), "is the input"], keep=[src])


@case("out-is-input-other-spelling-hotpotqa")
def _(env):
    src = env.good("hotpotqa", "x.json")
    out = env.tmp / "." / "sub" / ".." / "x.json"
    return Run("etc-prepare", ["hotpotqa", "--train", str(src), "--out", str(out), "--overwrite", *env.tok()],
               ["is the input", str(src)], keep=[src])


@case("out-holds-srcdict-wikihop")
def _(env):
    d = env.tmp / "d"
    d.mkdir()
    shutil.copyfile(env.pretrain_data / "dict.txt", d / "dict.txt")
    src = env.good("wikihop")
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--srcdict", str(d / "dict.txt"), *env.spm(),
                               "--out", str(d), "--overwrite"], ["--srcdict", "holds the input"], keep=[d])


@case("overwrite-foreign-directory-wikihop")
def _(env):
    d = env.tmp / "results"
    d.mkdir()
    (d / "notes.txt").write_text("the user's own notes\n")
    src = env.good("wikihop")
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(d), "--overwrite", *env.tok()],
               [str(d), "not written by etc-prepare", "prepare.json"], keep=[d, src])


@case("overwrite-foreign-directory-pretrain")
def _(env):
    d = env.tmp / "results"
    d.mkdir()
    (d / "notes.txt").write_text("the user's own notes\n")
    corpus = env.tmp / "corpus.txt"
    corpus.write_text(CORPUS * 50, encoding="utf-8")
    return Run("etc-prepare", ["pretrain", "--input", str(corpus), "--out", str(d), "--overwrite"],
               [str(d), "not written by etc-prepare"], keep=[d, corpus])


@case("overwrite-a-file-openkp")
def _(env):
    f = env.tmp / "model.pt"
    f.write_bytes(b"a file etc-prepare did not write")
    src = env.good("openkp")
    return Run("etc-prepare", ["openkp", "--train", str(src), "--out", str(f), "--overwrite", *env.tok()],
               [str(f), "not a directory etc-prepare wrote"], keep=[f, src])


@case("predict-output-is-checkpoint")
def _(env):
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"the only copy of a fine-tuned model")
    return Run("etc-predict", ["wikihop", "--path", str(ckpt), "--data", str(env.pretrain_data), "--output", str(ckpt)],
               ["--output", "--path", str(ckpt), "is the input"], keep=[ckpt])


@case("predict-output-replaces-file-of-data-dir")
def _(env):
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"x")
    data = env.tmp / "data"
    shutil.copytree(env.pretrain_data, data)
    return Run("etc-predict", ["wikihop", "--path", str(ckpt), "--data", str(data), "--output", str(data / "dict.txt")],
               ["--output", "already exists inside the input", "--data"], keep=[ckpt, data])


@case("predict-output-is-directory")
def _(env):
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"x")
    out = env.tmp / "preds"
    out.mkdir()
    return Run("etc-predict", ["hotpotqa", "--path", str(ckpt), "--data", str(env.pretrain_data), "--output", str(out)],
               ["--output", str(out), "is a directory"], keep=[ckpt, out])


@case("predict-report-is-output-hotpotqa")
def _(env):
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"x")
    out = env.tmp / "preds.json"
    return Run("etc-predict", ["hotpotqa", "--path", str(ckpt), "--data", str(env.pretrain_data), "--output", str(out),
                               "--report", str(out)], ["--report", "--output", "its own path"], absent=[out])


for _ds, _flag in (("hotpotqa", "--gold"), ("hotpotqa", "--predictions"), ("nq", "--gold"), ("wikihop", "--gold"),
                   ("openkp", "--predictions")):
    @case(f"evaluate-output-is{_flag[1:]}-{_ds}")
    def _(env, ds=_ds, flag=_flag):
        gold = env.good(ds, "gold.json")
        preds = env.tmp / "preds.json"
        preds.write_text("{}")
        victim = gold if flag == "--gold" else preds
        return Run("etc-evaluate", [ds, "--predictions", str(preds), "--gold", str(gold), "--output", str(victim)],
                   ["--output", flag, str(victim), "is the input"], keep=[gold, preds])


@case("show-out-is-input")
def _(env):
    data = env.tmp / "data"
    shutil.copytree(env.pretrain_data, data)
    return Run("etc-show", [str(data), "--out", str(data), "--arch", "etc_tiny"],
               ["--out", str(data), "is a directory"], keep=[data])


# -- issue 15.3: silent garbage refused --------------------------------------------------------------------
for _ds in FINETUNE:
    @case(f"empty-srcdict-{_ds}")
    def _(env, ds=_ds):
        empty = env.dict_file("")
        src = env.good(ds)
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(src), "--srcdict", str(empty), *env.spm(), "--out", str(out)],
                   [str(empty), "empty dictionary"], keep=[empty, src], absent=[out])

for _sub in ("mlm", "pretrain"):
    @case(f"empty-srcdict-{_sub}")
    def _(env, sub=_sub):
        empty = env.dict_file("")
        corpus = env.tmp / "corpus.txt"
        corpus.write_text(CORPUS * 50, encoding="utf-8")
        out = env.tmp / "out"
        return Run("etc-prepare", [sub, "--input", str(corpus), "--srcdict", str(empty), *env.spm(), "--out", str(out)],
                   [str(empty), "empty dictionary"], keep=[empty, corpus], absent=[out])


@case("srcdict-only-comments-wikihop")
def _(env):
    bad = env.dict_file("hello\n")
    src = env.good("wikihop")
    out = env.tmp / "out"
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--srcdict", str(bad), *env.spm(), "--out", str(out)],
               [f"{bad}:1", "<symbol> <count>"], keep=[bad], absent=[out])


for _ds in FINETUNE:
    @case(f"non-utf8-input-{_ds}")
    def _(env, ds=_ds):
        path = env.tmp / "in.json"
        good = (json.dumps([RECORDS[ds]]) if ds in JSON_LIST else json.dumps(RECORDS[ds]) + "\n").encode()
        path.write_bytes(good.replace(b"old", b"\xff\xfeld", 1))  # inside a string: still valid JSON syntax
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(path), "--out", str(out), *env.tok()],
                   [str(path), "not UTF-8"], keep=[path], absent=[out])


for _value in ("-2", "0"):
    @case(f"predict-batch-size{_value}")
    def _(env, value=_value):
        out = env.tmp / "preds.json"
        return Run("etc-predict", ["wikihop", "--path", "x.pt", "--data", str(env.pretrain_data), "--output", str(out),
                                   "--batch-size", value], ["--batch-size", value, "positive"], status=2, absent=[out])


@case("wikihop-max-long-len-0")
def _(env):
    src = env.good("wikihop")
    out = env.tmp / "out"
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(out), "--max-long-len", "0", *env.tok()],
               ["--max-long-len", "positive"], status=2, absent=[out])


@case("wikihop-empty-list")
def _(env):
    src = write_records(env.tmp / "in.json", "wikihop", [])
    out = env.tmp / "out"
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(out), *env.tok()],
               [str(src), "no WikiHop records"], keep=[src], absent=[out])


@case("wikihop-duplicate-candidates")
def _(env):
    src = write_records(env.tmp / "in.json", "wikihop", [{**WIKIHOP, "candidates": ["paris", "london", "London "]}])
    out = env.tmp / "out"
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(out), *env.tok()],
               [str(src), "'WH_0'", "'candidates'", "repeats candidate 1"], keep=[src], absent=[out])


for _ds in FINETUNE:
    @case(f"duplicate-record-ids-{_ds}")
    def _(env, ds=_ds):
        src = write_records(env.tmp / "in.json", ds, [RECORDS[ds], RECORDS[ds]])
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(src), "--out", str(out), *env.tok()],
                   [str(src), f"field '{ID_FIELD[ds]}'", "duplicate id"], keep=[src], absent=[out])


for _sub, _flag, _value in (
    ("mlm", "--vocab-size", "-5"), ("pretrain", "--min-sentences", "0"), ("pretrain", "--valid-fraction", "1.5"),
    ("article-classification", "--max-example-pieces", "0"), ("mlm", "--max-docs", "-1"),
    ("nq", "--doc-stride", "0"), ("openkp", "--max-global-len", "-1"), ("hotpotqa", "--max-examples", "0"),
    ("nextsent", "--distractors", "-1"), ("wikihop", "--log-every", "-3"),
):
    @case(f"bad-flag-{_sub}{_flag}{_value}")
    def _(env, sub=_sub, flag=_flag, value=_value):
        out = env.tmp / "out"
        src = ["--input", str(env.tmp / "c.txt")] if sub in CORPUS_SUBS else (
            ["--input", str(env.tmp / "c.txt")] if sub == "nextsent" else ["--train", str(env.tmp / "in.json")])
        return Run("etc-prepare", [sub, *src, "--out", str(out), flag, value], [flag, value], status=2, absent=[out])


# -- issue 15.4: one line instead of a traceback -----------------------------------------------------------
DUP_DICT = "the 10\nmill 5\nthe 3\n"
for _ds in FINETUNE:
    @case(f"duplicate-dict-entry-{_ds}")
    def _(env, ds=_ds):
        bad = env.dict_file(DUP_DICT)
        src = env.good(ds)
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(src), "--srcdict", str(bad), *env.spm(), "--out", str(out)],
                   [f"{bad}:3", "duplicate symbol 'the'", "line 1"], keep=[bad], absent=[out])

for _sub in ("mlm", "pretrain", "article-classification"):
    @case(f"duplicate-dict-entry-{_sub}")
    def _(env, sub=_sub):
        bad = env.dict_file(DUP_DICT)
        corpus = env.tmp / "corpus.txt"
        corpus.write_text(CORPUS * 50, encoding="utf-8")
        out = env.tmp / "out"
        return Run("etc-prepare", [sub, "--input", str(corpus), "--srcdict", str(bad), *env.spm(), "--out", str(out)],
                   [f"{bad}:3", "duplicate symbol"], keep=[bad, corpus], absent=[out])


@case("duplicate-dict-entry-predict")
def _(env):
    data = env.data_dir_with_dict(DUP_DICT)
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"not read: the data is checked first")
    out = env.tmp / "preds.json"
    return Run("etc-predict", ["wikihop", "--path", str(ckpt), "--data", str(data), "--output", str(out)],
               [f"{data / 'dict.txt'}:3", "duplicate symbol"], keep=[data, ckpt], absent=[out])


@case("duplicate-dict-entry-show")
def _(env):
    data = env.data_dir_with_dict(DUP_DICT)
    out = env.tmp / "x.png"
    return Run("etc-show", [str(data), "--out", str(out), "--arch", "etc_tiny"],
               [f"{data / 'dict.txt'}:3", "duplicate symbol"], keep=[data], absent=[out])


for _sub in CORPUS_SUBS:
    @case(f"workers-0-{_sub}")
    def _(env, sub=_sub):
        out = env.tmp / "out"
        return Run("etc-prepare", [sub, "--input", str(env.tmp / "c.txt"), "--out", str(out), "--workers", "0"],
                   ["--workers", "positive"], status=2, absent=[out])


# an output location under a regular file (ENOTDIR): what a read-only or impossible location gives, as root too
@case("out-under-a-file-wikihop")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    src = env.good("wikihop")
    out = f / "out"
    return Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(out), *env.tok()],
               [str(out), "--out", f"{f} is not a directory"], keep=[f, src])


@case("out-under-a-file-mlm")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    corpus = env.tmp / "corpus.txt"
    corpus.write_text(CORPUS)
    out = f / "out"
    return Run("etc-prepare", ["mlm", "--input", str(corpus), "--out", str(out)],
               [str(out), f"{f} is not a directory"], keep=[f, corpus])


@case("output-under-a-file-predict")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    ckpt = env.tmp / "checkpoint_best.pt"
    ckpt.write_bytes(b"x")
    out = f / "preds.json"
    return Run("etc-predict", ["nq", "--path", str(ckpt), "--data", str(env.pretrain_data), "--output", str(out)],
               [str(out), f"{f} is not a directory"], keep=[f, ckpt])


@case("output-under-a-file-evaluate")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    gold = env.good("hotpotqa", "gold.json")
    preds = env.tmp / "preds.json"
    preds.write_text(json.dumps({"answer": {"HP_0": "london"}, "sp": {"HP_0": [["Mill", 0]]}}))
    out = f / "metrics.json"
    return Run("etc-evaluate", ["hotpotqa", "--predictions", str(preds), "--gold", str(gold), "--output", str(out)],
               [str(out), f"{f} is not a directory"], keep=[f, gold, preds])


@case("out-under-a-file-show")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    out = f / "x.png"
    return Run("etc-show", [str(env.pretrain_data), "--out", str(out), "--arch", "etc_tiny"],
               [str(out), f"{f} is not a directory"], keep=[f])


@case("out-under-a-file-lift")
def _(env):
    f = env.tmp / "afile"
    f.write_text("x")
    src = env.tmp / "roberta.pt"
    src.write_bytes(b"x")
    out = f / "etc.pt"
    return Run("etc-lift", [str(src), "--arch", "etc_tiny", "--out", str(out)],
               [str(out), f"{f} is not a directory"], keep=[f, src])


for _ds in FINETUNE:
    @case(f"directory-as-input-prepare-{_ds}")
    def _(env, ds=_ds):
        d = env.tmp / "train.json"
        d.mkdir()
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(d), "--out", str(out), *env.tok()],
                   [str(d), "is a directory"], absent=[out])

for _ds in ("hotpotqa", "wikihop", "nq", "openkp", "nextsent"):
    @case(f"directory-as-predictions-{_ds}")
    def _(env, ds=_ds):
        d = env.tmp / "preds"
        d.mkdir()
        gold = env.good(ds, "gold.json") if ds in RECORDS else env.tmp / "gold.json"
        return Run("etc-evaluate", [ds, "--predictions", str(d), "--gold", str(gold)], [str(d), "is a directory"])

for _ds in ("nq", "openkp"):
    @case(f"directory-as-gold-{_ds}")
    def _(env, ds=_ds):
        d = env.tmp / "gold"
        d.mkdir()
        preds = env.tmp / "preds.json"
        preds.write_text('{"predictions": []}' if ds == "nq" else "")
        return Run("etc-evaluate", [ds, "--predictions", str(preds), "--gold", str(d)], [str(d), "is a directory"])


def _truncated_gz(env: Env, ds: str, name: str) -> Path:
    full = gzip.compress(("".join(json.dumps({**RECORDS[ds], ID_FIELD[ds]: (i if ds == "nq" else f"u{i}")}) + "\n"
                                  for i in range(20))).encode())
    path = env.tmp / name
    path.write_bytes(full[: len(full) * 2 // 3])
    return path


for _ds in ("nq", "openkp"):
    @case(f"truncated-gzip-prepare-{_ds}")
    def _(env, ds=_ds):
        src = _truncated_gz(env, ds, "train.jsonl.gz")
        out = env.tmp / "out"
        return Run("etc-prepare", [ds, "--train", str(src), "--out", str(out), *env.tok()],
                   [str(src), "truncated or corrupt"], keep=[src], absent=[out])


@case("truncated-gzip-evaluate-nq-gold")
def _(env):
    gold = _truncated_gz(env, "nq", "dev.jsonl.gz")
    preds = env.tmp / "preds.json"
    preds.write_text('{"predictions": []}')
    return Run("etc-evaluate", ["nq", "--predictions", str(preds), "--gold", str(gold)],
               [str(gold), "truncated or corrupt"], keep=[gold])


@case("predict-device-tpu9")
def _(env):
    out = env.tmp / "p.json"
    return Run("etc-predict", ["wikihop", "--path", "x.pt", "--data", "d", "--output", str(out), "--device", "tpu9"],
               ["--device", "tpu9", "cpu, cuda or cuda:N"], status=2, absent=[out])


@case("predict-device-cuda-99")
def _(env):
    out = env.tmp / "p.json"
    return Run("etc-predict", ["wikihop", "--path", "x.pt", "--data", "d", "--output", str(out), "--device", "cuda:99"],
               ["--device", "cuda:99"], status=2, absent=[out])


@case("show-cell-size-400")
def _(env):
    out = env.tmp / "x.png"
    return Run("etc-show", [str(env.pretrain_data), "--out", str(out), "--arch", "etc_tiny", "--cell-size", "400"],
               ["cell size 400 px", "--cell-size", "at most"], absent=[out])


# -- issue 18.7 error gaps: predictions and gold that are not UTF-8 ------------------------------------------
for _ds, _which in (("wikihop", "predictions"), ("openkp", "predictions"), ("nq", "predictions"), ("openkp", "gold")):
    @case(f"non-utf8-{_which}-{_ds}")
    def _(env, ds=_ds, which=_which):
        gold = env.good(ds, "gold.json")
        preds = env.tmp / "preds.json"
        preds.write_text({"wikihop": '{"WH_0": "london"}', "nq": '{"predictions": []}',
                          "openkp": json.dumps({"url": OPENKP["url"], "KeyPhrases": [["old", "mill"]]}) + "\n"}[ds])
        victim = preds if which == "predictions" else gold
        victim.write_bytes(victim.read_bytes().replace(b"o", b"\xe9", 1))
        return Run("etc-evaluate", [ds, "--predictions", str(preds), "--gold", str(gold)],
                   [str(victim), "not UTF-8"], keep=[gold, preds])


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_in_one_line_and_nothing_written(name, tmp_path, pretrain_data, capsys):
    run = CASES[name](Env(tmp_path, pretrain_data))
    run_refused(run, capsys)
    assert hidden_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------
# faults while writing: a full disk, injected where the data is written (no root-proof read-only directory
# exists for tests that run as root); the message names the output, nothing half-written, the old output kept
# ---------------------------------------------------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_while_preparing_keeps_the_previous_output(tmp_path, pretrain_data, capsys, monkeypatch):
    env = Env(tmp_path, pretrain_data)
    src = env.good("wikihop")
    out = tmp_path / "out"
    assert prepare_main(["wikihop", "--train", str(src), "--out", str(out), *env.tok()]) == 0
    from etc_fairseq.data.structured import StructuredWriter

    monkeypatch.setattr(StructuredWriter, "add", _no_space)
    line = run_refused(Run("etc-prepare", ["wikihop", "--train", str(src), "--out", str(out), "--overwrite", *env.tok()],
                           [str(out), "No space left on device", "nothing was written"], keep=[out, src]), capsys)
    assert line.startswith("etc-prepare wikihop: error: ")
    assert hidden_leftovers(tmp_path) == []


def test_full_disk_while_writing_a_file(tmp_path, pretrain_data, capsys, monkeypatch):
    """etc-evaluate --output and etc-show --out (both through the one atomic file writer, as etc-predict)."""
    import os

    gold = write_records(tmp_path / "gold.json", "hotpotqa", [HOTPOT])
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({"answer": {"HP_0": "london"}, "sp": {"HP_0": [["Mill", 0]]}}))
    metrics = tmp_path / "metrics.json"
    metrics.write_text("the previous metrics")
    png = tmp_path / "x.png"
    monkeypatch.setattr(os, "fsync", _no_space)
    run_refused(Run("etc-evaluate", ["hotpotqa", "--predictions", str(preds), "--gold", str(gold), "--output", str(metrics)],
                    [str(metrics), "No space left on device"], keep=[gold, preds, metrics]), capsys)
    run_refused(Run("etc-show", [str(pretrain_data), "--out", str(png), "--arch", "etc_tiny", "--max-tokens", "16"],
                    [str(png), "No space left on device"], absent=[png]), capsys)
    assert hidden_leftovers(tmp_path) == []


def test_overwrite_replaces_an_own_output_and_refuses_hiding_inputs(tmp_path, pretrain_data, capsys):
    """The positive side of 15.2: --overwrite does replace a directory etc-prepare wrote (prepare.json)."""
    env = Env(tmp_path, pretrain_data)
    src = env.good("wikihop")
    out = tmp_path / "out"
    assert prepare_main(["wikihop", "--train", str(src), "--out", str(out), *env.tok()]) == 0
    (out / "valid.meta.json").write_text("a stale file of the previous run")
    assert prepare_main(["wikihop", "--train", str(src), "--out", str(out), "--overwrite", *env.tok()]) == 0
    assert (out / "prepare.json").is_file() and not (out / "valid.meta.json").exists()
    assert hidden_leftovers(tmp_path) == []


def test_device_cuda_without_cuda_is_refused_in_one_line(capsys):
    """``--device cuda`` is refused where CUDA is absent; where it is present the same value is accepted."""
    import argparse

    import torch

    from etc_fairseq.finetune.common.runner import device_name

    if torch.cuda.is_available():
        assert device_name("cuda") == "cuda"
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="CUDA is not available"):
            device_name("cuda")
        with pytest.raises(SystemExit) as e:
            predict_main(["wikihop", "--path", "x.pt", "--data", "d", "--output", "p.json", "--device", "cuda"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--device" in err[0] and "CUDA is not available" in err[0]


def test_unwritable_output_directory_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """A directory the user may not write into (simulated: tests run as root, where chmod does not bite)."""
    import os

    real_access = os.access
    locked = tmp_path / "readonly"
    locked.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == locked else real_access(p, mode, **kw))
    gold = write_records(tmp_path / "gold.json", "hotpotqa", [HOTPOT])
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({"answer": {"HP_0": "london"}, "sp": {"HP_0": [["Mill", 0]]}}))
    out = locked / "sub" / "metrics.json"
    run_refused(Run("etc-evaluate", ["hotpotqa", "--predictions", str(preds), "--gold", str(gold), "--output", str(out)],
                    [str(out), f"{locked} is not writable"], keep=[gold, preds], absent=[locked / "sub"]), capsys)


@pytest.mark.parametrize("task", ["etc_pretraining", "etc_wikihop"])
def test_fairseq_task_dictionary_error_names_file_and_line(task, tmp_path, pretrain_data):
    """fairseq-validate / fairseq-train build our tasks with setup_task: a duplicate dict.txt entry is one
    error naming the file and the line (fairseq prints its traceback around it)."""
    import etc_fairseq.register  # noqa: F401
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    from etc_fairseq.guards import InputFormatError

    data = Env(tmp_path, pretrain_data).data_dir_with_dict(DUP_DICT)
    cfg = TASK_DATACLASS_REGISTRY[task](data=str(data))
    with pytest.raises(InputFormatError) as e:
        TASK_REGISTRY[task].setup_task(cfg)
    assert str(e.value).startswith(f"{data / 'dict.txt'}:3: duplicate symbol 'the'") and "\n" not in str(e.value)
