"""The reliability harness: broken and hostile inputs run through the real commands, each outcome classified.

Every case builds one bad (or, for comparison, one good) input from real files -- the Wikipedia sample, data
prepared from it, checkpoints trained on it -- by cutting, editing or crafting them (CONSTRUCTED), runs one
command on it (``fairseq-validate`` / ``fairseq-train`` with the plugin, ``etc-predict``, ``etc-prepare``,
``etc-evaluate``, or a call of the Python hub) and records what a user would see. Each case runs in a forked
child of this process (torch, fairseq and etc_fairseq imported once, before the fork), with its stdout and stderr
captured and a time limit; the command runs as its console script would (an exception escaping it prints a
traceback and exits 1).

An outcome is one of

- ``one-line error``: exit status != 0, no traceback, one ``PROG: error: ...`` line naming what the case says
  the message must name (the file, and the field, tensor, option or line at fault);
- ``unnamed``: the same, but the line does not name the file or field;
- ``traceback``: a traceback was printed (for a refusal: it should have been one line; a bug in any case);
- ``accepted``: a good input ran and its result was checked;
- ``wrongly refused``: a good input was refused;
- ``silently wrong``: a bad input ran to the end (exit status 0), or a good one gave a wrong result;
- ``hang``: the time limit was reached;

and, whatever the outcome, ``input lost`` (an input file changed or vanished) and ``code run`` (a payload's
marker file appeared). :func:`run_cases` returns one :class:`Outcome` per case, :func:`table` the summary
that docs/reliability.md quotes (``python scripts/reliability_report.py --cases``).

``CASES`` lists them; ``ci=True`` marks the subset the test suite runs (tests/test_reliability_harness.py),
one per kind of input and command, which fits the suite's budget.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

#: seconds a case may take before it counts as a hang
TIME_LIMIT = 120.0

#: the columns of the table, in order
OUTCOMES = ("one-line error", "unnamed", "traceback", "accepted", "wrongly refused", "silently wrong", "hang")
FLAGS = ("input lost", "code run")


# ---------------------------------------------------------------------------------------------------------
# the real inputs every case starts from
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Fixtures:
    """Real files the cases copy and break.

    Attributes:
        pretrain_bin: ``bin/`` of ``etc-prepare pretrain`` on the Wikipedia sample (its tokenizer and dictionary).
        pretrained: an etc_tiny checkpoint pre-trained on it (``fairseq-train``).
        records: ``train.jsonl`` / ``valid.jsonl``: structured records of real Wikipedia articles (labels and
            answers CONSTRUCTED).
        data: ``{"record": DIR, "span": DIR}`` prepared by ``etc-prepare structured``.
        finetuned: ``{"record": checkpoint, "span": checkpoint}`` fine-tuned on them (2 updates).
        work: a scratch directory for the cases.
    """

    pretrain_bin: Path
    pretrained: Path
    records: Path
    data: Dict[str, Path]
    finetuned: Dict[str, Path]
    work: Path


def structured_records(out: Path, n: int = 16) -> Path:
    """``out/train.jsonl`` (12 records) and ``out/valid.jsonl`` (4) from the first articles of the Wikipedia
    sample: a CLS, paragraphs of sentences, the subject's mentions linked; the label (which of the first two
    paragraphs is longer) and the answer (words 1..3) are CONSTRUCTED."""
    from etc_fairseq.finetune.structured.builder import Document, write_jsonl
    from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for article in iter_wikipedia_documents(fetch_wikipedia_sample()):
        paragraphs = [split_sentences(p)[:4] for p in article.paragraphs[:3]]
        if len(paragraphs) < 3 or not all(paragraphs):
            continue
        doc = Document(article.title)
        for sentences in paragraphs:
            paragraph = doc.paragraph()
            for sentence in sentences:
                paragraph.sentence(" ".join(sentence.split()[:40]))
        doc.entity(article.title).link_mentions(article.title.split()[0])
        first, second = (len(sum((s.split() for s in p), [])) for p in paragraphs[:2])
        doc.label = "first_longer" if first > second else "second_longer"
        doc.answer = (1, 3)
        docs.append(doc)
        if len(docs) == n:
            break
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(docs[:12], out / "train.jsonl")
    write_jsonl(docs[12:], out / "valid.jsonl")
    return out


def build_fixtures(work: Path, pretrain_bin: Path, pretrained: Path) -> Fixtures:
    """Prepare the structured data at the record and span levels and fine-tune ``pretrained`` on each (2
    updates), under ``work``."""
    records = structured_records(work / "records")
    data, finetuned = {}, {}
    for level in ("record", "span"):
        data[level] = work / f"data_{level}"
        _must_succeed(lambda: _cli("etc-prepare", [
            "-q", "structured", "--train", str(records / "train.jsonl"), "--valid", str(records / "valid.jsonl"),
            "--label-level", level, "--pretrain-dir", str(pretrain_bin), "--arch", "etc_tiny",
            "--max-long-len", "512", "--out", str(data[level])]), f"etc-prepare structured ({level})")
        save = work / f"checkpoints_{level}"
        _must_succeed(lambda: _cli("fairseq-train", [str(data[level]), *structured_task(), "--arch", "etc_tiny",
                                                    "--finetune-from-model", str(pretrained), *TRAIN_FLAGS,
                                                    "--max-update", "2", "--save-dir", str(save)]),
                      f"fairseq-train ({level})")
        finetuned[level] = save / "checkpoint_last.pt"
    return Fixtures(pretrain_bin, pretrained, records, data, finetuned, work / "cases")


def _must_succeed(call: Callable[[], Optional[int]], what: str) -> None:
    status, out, err = _in_child(call, TIME_LIMIT)
    if status != 0:
        raise RuntimeError(f"building the harness fixtures: {what} failed (exit {status}):\n{(out + err)[-3000:]}")


def structured_task() -> List[str]:
    return ["--user-dir", USER_DIR, "--task", "etc_structured", "--criterion", "etc_structured"]


TRAIN_FLAGS = ["--optimizer", "adam", "--lr", "5e-4", "--batch-size", "4", "--required-batch-size-multiple", "1",
               "--num-workers", "0", "--no-epoch-checkpoints", "--cpu", "--seed", "1"]


# ---------------------------------------------------------------------------------------------------------
# running one command as its console script would, in a forked child
# ---------------------------------------------------------------------------------------------------------
def _cli(command: str, argv: Sequence[str]) -> Optional[int]:
    """Run ``command`` (an etc-* or fairseq-* console script) with ``argv``; returns its exit status (or None
    for 0); exceptions escape, as from the console script."""
    import importlib

    entry = {
        "etc-prepare": "etc_fairseq.cli.prepare:main", "etc-predict": "etc_fairseq.cli.predict:main",
        "etc-evaluate": "etc_fairseq.cli.evaluate:main", "etc-show": "etc_fairseq.cli.show:main",
        "etc-lift": "etc_fairseq.cli.lift:main",
        "fairseq-train": "fairseq_cli.train:cli_main", "fairseq-validate": "fairseq_cli.validate:cli_main",
    }[command]
    module, function = entry.split(":")
    sys.argv = [command, *map(str, argv)]
    return getattr(importlib.import_module(module), function)()


def _in_child(call: Callable[[], Optional[int]], limit: float):
    """Run ``call`` in a forked child with its stdout/stderr captured; returns (exit status, stdout, stderr);
    the status is None when the time limit was reached (the child is killed)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="etc-harness-") as tmp:
        out_path, err_path = Path(tmp) / "out", Path(tmp) / "err"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = 1
            try:
                with open(out_path, "wb") as o, open(err_path, "wb") as e:
                    os.dup2(o.fileno(), 1)
                    os.dup2(e.fileno(), 2)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
                logging = __import__("logging")
                for handler in logging.getLogger().handlers:  # fairseq's handlers: to the new stderr
                    if hasattr(handler, "setStream"):
                        handler.setStream(sys.stderr)
                for name in ("fairseq", "fairseq_cli", "etc_fairseq"):  # as in a fresh interpreter, whatever an
                    logging.getLogger(name).setLevel(logging.NOTSET)  # in-process command set before the fork
                try:
                    result = call()
                    status = 0 if result is None else int(result)
                except SystemExit as e:
                    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                except BaseException:  # noqa: BLE001 -- what the interpreter does with an uncaught exception
                    traceback.print_exc()
                    status = 1
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
        deadline = time.monotonic() + limit
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                code = None
                break
            time.sleep(0.02)
        return code, out_path.read_text(errors="replace"), err_path.read_text(errors="replace")


# ---------------------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """How a case runs, once its inputs are built.

    Attributes:
        call: runs the command in the child (see :func:`_cli`); returns the exit status.
        inputs: files and directories that must be unchanged afterwards.
        marker: a file a payload would create (it must not exist afterwards).
        check: for a good input: whether the result is right (run in the parent after a 0 exit status).
    """

    call: Callable[[], Optional[int]]
    inputs: Sequence[Path] = ()
    marker: Optional[Path] = None
    check: Optional[Callable[[str, str], bool]] = None


@dataclass
class Case:
    """One input and one command.

    Attributes:
        name: unique id.
        group: the row of the table it counts in.
        make: builds the input under a fresh directory and returns the :class:`Run`.
        names: for a bad input, a regex the error line must match (the file, and the field / tensor /
            option / line at fault); None for a good input (it must run, and ``Run.check`` pass).
        ci: in the subset the test suite runs.
    """

    name: str
    group: str
    make: Callable[[Fixtures, Path], Run]
    names: Optional[str]
    ci: bool = False


@dataclass
class Outcome:
    case: str
    group: str
    outcome: str
    input_lost: bool
    code_run: bool
    status: Optional[int]
    message: str
    seconds: float = 0.0


def _tree_digest(path: Path) -> Optional[str]:
    if not path.exists():
        return None
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        h.update(str(p.relative_to(path) if p != path else p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


_TRACEBACK = "Traceback (most recent call last)"
_ERROR_LINE = re.compile(r"^([\w.-]+(?: [\w.-]+)?): error: (.+)$", re.M)


def classify(case: Case, run: Run, status: Optional[int], out: str, err: str) -> str:
    """The outcome (see the module docstring) of ``case`` from the child's exit status and output."""
    if status is None:
        return "hang"
    if _TRACEBACK in err or _TRACEBACK in out:
        return "traceback"
    if status == 0:
        if case.names is not None:
            return "silently wrong"
        return "accepted" if run.check is None or run.check(out, err) else "silently wrong"
    if case.names is None:
        return "wrongly refused"
    lines = _ERROR_LINE.findall(err)
    if len(lines) == 1 and re.search(case.names, lines[0][1]):
        return "one-line error"
    return "unnamed"


def run_case(case: Case, fx: Fixtures, limit: float = TIME_LIMIT) -> Outcome:
    where = fx.work / re.sub(r"[^\w.-]+", "_", case.name).strip("_")
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    run = case.make(fx, where)
    before = {p: _tree_digest(p) for p in run.inputs}
    t0 = time.monotonic()
    status, out, err = _in_child(run.call, limit)
    seconds = time.monotonic() - t0
    outcome = classify(case, run, status, out, err)
    lost = any(_tree_digest(p) != digest for p, digest in before.items())
    code_run = run.marker is not None and run.marker.exists()
    lines = _ERROR_LINE.findall(err)
    message = lines[-1][1] if lines else (err.strip().splitlines() or [""])[-1]
    return Outcome(case.name, case.group, outcome, lost, code_run, status, message[:400], seconds)


def run_cases(fx: Fixtures, cases: Sequence[Case], limit: float = TIME_LIMIT) -> List[Outcome]:
    return [run_case(c, fx, limit) for c in cases]


def table(outcomes: Sequence[Outcome]) -> str:
    """The summary: one row per group and a total; columns: cases, each outcome, inputs lost, code run."""
    groups: Dict[str, List[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.group, []).append(o)
    head = ["inputs", "cases", *OUTCOMES, *FLAGS]
    rows = []
    for name, items in list(groups.items()) + [("total", list(outcomes))]:
        counts = [sum(o.outcome == k for o in items) for k in OUTCOMES]
        flags = [sum(o.input_lost for o in items), sum(o.code_run for o in items)]
        rows.append([name, len(items), *counts, *flags])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# the inputs
# ---------------------------------------------------------------------------------------------------------
def _load(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _save(state: dict, path: Path) -> Path:
    import torch

    torch.save(state, path)
    return path


def _first_weight(state: dict, dims: int = 2) -> str:
    return next(k for k, v in state["model"].items() if v.is_floating_point() and v.dim() == dims)


def _crafted(edit: Callable[[dict], None]) -> Callable[[Fixtures, Path], Path]:
    """A checkpoint: the fine-tuned record-level one with ``edit`` applied (CONSTRUCTED)."""
    def make(fx: Fixtures, where: Path) -> Path:
        state = _load(fx.finetuned["record"])
        edit(state)
        return _save(state, where / "model.pt")
    return make


def _model_field(name: str, value) -> Callable[[dict], None]:
    def edit(state):
        state["cfg"]["model"][name] = value
    return edit


def _set_first(value: float) -> Callable[[dict], None]:
    def edit(state):
        state["model"][_first_weight(state)].view(-1)[0] = value
    return edit


def _narrow(state: dict) -> None:
    key = [k for k, v in state["model"].items() if v.dim() == 2][3]
    state["model"][key] = state["model"][key][:, :-1].clone()


def _drop(key: str) -> Callable[[dict], None]:
    def edit(state):
        del state[key]
    return edit


def _version(state: dict) -> None:
    import torch

    state["model"]["encoder.version"] = torch.tensor([2.0])


class _RunsCode:
    """Pickles as a call to ``os.system`` (what a malicious checkpoint holds). CONSTRUCTED."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


#: crafted checkpoints: name -> (edit, what the refusal must name)
CHECKPOINTS = {
    "layers-100000": (_model_field("encoder_layers", 100_000), r"model\.pt.*encoder_layers=100000"),
    "width-1000000": (_model_field("encoder_embed_dim", 1_000_000), r"model\.pt.*encoder_embed_dim=1000000"),
    "dropout-nan": (_model_field("dropout", math.nan), r"model\.pt.*cfg\.model\.dropout=nan"),
    "heads-0": (_model_field("encoder_attention_heads", 0), r"model\.pt.*encoder_attention_heads=0"),
    "radius-negative": (_model_field("local_radius", -1), r"model\.pt.*local_radius=-1"),
    "no-optimizer-history": (_drop("optimizer_history"), r"model\.pt.*optimizer_history"),
    "nan-weight": (_set_first(math.nan), r"model\.pt.*tensor model\['encoder\..*'\].*NaN"),
    "inf-weight": (_set_first(math.inf), r"model\.pt.*tensor model\['encoder\..*'\].*infinite"),
    "wrong-shape": (_narrow, r"model\.pt.*size mismatch for encoder\."),
    "newer-format": (_version, r"model\.pt.*format version 2"),
    "foreign-model": (lambda s: s["cfg"].__setitem__("model", {"_name": "wav2vec2", "conv_feature_layers":
                                                               "__import__('os').system('touch PWNED') or [(512,10,5)]"}),
                      r"model\.pt.*cfg\.model\._name='wav2vec2'"),
}


def _checkpoint_case(name: str, command: str, ci: bool) -> Case:
    edit, names = CHECKPOINTS[name]

    def make(fx: Fixtures, where: Path) -> Run:
        ckpt = _crafted(edit)(fx, where)
        data = fx.data["record"]
        marker = where / "PWNED"
        if command == "fairseq-validate":
            call = lambda: _cli(command, [data, *structured_task(), "--path", ckpt, "--batch-size", "4", "--cpu"])  # noqa: E731
        elif command == "etc-predict":
            call = lambda: _cli(command, ["structured", "--path", ckpt, "--data", data, "--split", "valid",  # noqa: E731
                                          "--output", where / "pred.json"])
        elif command.startswith("fairseq-train"):  # --restore-file, --finetune-from-model
            call = lambda: _cli("fairseq-train", [data, *structured_task(), "--arch", "etc_tiny", *TRAIN_FLAGS,  # noqa: E731
                                                  command.split()[1], ckpt, "--max-update", "3",
                                                  "--save-dir", where / "save"])
        else:  # the hub
            call = lambda: _hub(lambda: _from_pretrained(where, data))  # noqa: E731
        return Run(lambda: _in_dir(where, call), inputs=[ckpt, data], marker=marker)

    return Case(f"{name} / {command}", f"checkpoint, {command}", make, names, ci)


def _in_dir(where: Path, call):
    os.chdir(where)  # a payload's relative marker lands here
    return call()


def _from_pretrained(where: Path, data: Path):
    from etc_fairseq.models import EtcModel

    return EtcModel.from_pretrained(str(where), checkpoint_file="model.pt", data_name_or_path=str(data))


def _hub(call) -> int:
    """A Python caller: an EtcError is the documented refusal (printed as the one line the caller sees);
    anything else escapes (a traceback)."""
    from etc_fairseq.errors import EtcError

    try:
        call()
    except EtcError as e:
        print(f"{type(e).__name__}: error: {e}", file=sys.stderr)
        return 1
    return 0


def _payload_case(command: str, ci: bool) -> Case:
    def make(fx: Fixtures, where: Path) -> Run:
        marker = where / "pwned"
        state = _load(fx.finetuned["record"])
        state["extra_state"]["payload"] = _RunsCode(marker)
        ckpt = _save(state, where / "model.pt")
        data = fx.data["record"]
        if command == "fairseq-validate":
            call = lambda: _cli(command, [data, *structured_task(), "--path", ckpt, "--batch-size", "4", "--cpu"])  # noqa: E731
        else:
            call = lambda: _hub(lambda: _from_pretrained(where, data))  # noqa: E731
        return Run(call, inputs=[data], marker=marker)

    return Case(f"pickle payload / {command}", f"checkpoint, {command}", make, r"model\.pt.*posix\.system", ci)


def _good_checkpoint_case(command: str, ci: bool) -> Case:
    def make(fx: Fixtures, where: Path) -> Run:
        ckpt = Path(shutil.copy(fx.finetuned["record"], where / "model.pt"))
        data = fx.data["record"]
        if command == "fairseq-validate":
            call = lambda: _cli(command, [data, *structured_task(), "--path", ckpt, "--batch-size", "4", "--cpu"])  # noqa: E731
            check = lambda out, err: "valid on 'valid' subset" in out + err  # noqa: E731
        elif command == "etc-predict":
            call = lambda: _cli(command, ["structured", "--path", ckpt, "--data", data, "--split", "valid",  # noqa: E731
                                          "--output", where / "pred.json"])
            check = lambda out, err: len(json.loads((where / "pred.json").read_text())) == 4  # noqa: E731
        else:
            def call():
                return _hub(lambda: _from_pretrained(where, data))
            check = None
        return Run(call, inputs=[ckpt, data], check=check)

    return Case(f"unchanged checkpoint / {command}", f"checkpoint, {command}", make, None, ci)


# -- prepared data --------------------------------------------------------------------------------------
def _tampered(level: str, edit: Callable[[Path], None]):
    def make(fx: Fixtures, where: Path) -> Path:
        data = where / "data"
        shutil.copytree(fx.data[level], data)
        edit(data)
        return data
    return make


def _poke_token(data: Path) -> None:
    import numpy as np

    meta = json.loads((data / "valid.meta.json").read_text())
    path = data / "valid.long_tokens.bin"
    values = np.fromfile(path, dtype=meta["fields"]["long_tokens"]["dtype"])
    values[5] = 50_000
    values.tofile(path)


def _edit_summary(key: str, value) -> Callable[[Path], None]:
    def edit(data: Path):
        info = json.loads((data / "prepare.json").read_text())
        info[key] = value
        (data / "prepare.json").write_text(json.dumps(info))
    return edit


def _cut_every_answer(fx: Fixtures, where: Path) -> Path:
    """Span data prepared with ``--max-long-len 64`` from records whose answers are their last words."""
    records = where / "records"
    records.mkdir()
    for split in ("train", "valid"):
        lines = (fx.records / f"{split}.jsonl").read_text().splitlines()
        out = []
        for line in lines:
            rec = json.loads(line)
            rec["answer"] = [len(rec["words"]) - 3, len(rec["words"]) - 2]
            out.append(json.dumps(rec))
        (records / f"{split}.jsonl").write_text("\n".join(out) + "\n")
    data = where / "data"
    status, out, err = _in_child(lambda: _cli("etc-prepare", [
        "-q", "structured", "--train", records / "train.jsonl", "--valid", records / "valid.jsonl",
        "--label-level", "span", "--pretrain-dir", fx.pretrain_bin, "--arch", "etc_tiny", "--max-long-len", "64",
        "--out", data]), TIME_LIMIT)
    assert status == 0, err[-2000:]
    return data


#: tampered prepared directories: name -> (label level, build, what the refusal names)
PREPARED = {
    "token id beyond the dictionary": ("record", _tampered("record", _poke_token),
                                       r"valid\.long_tokens\.bin: item 0 .*holds 50000.*dict\.txt"),
    "prepare.json edited to another label level": ("record", _tampered("record", _edit_summary("label_level", "global")),
                                                   r"prepare\.json: field 'label_level' is 'global'.*'record'"),
    "prepare.json lists 3 classes, the checkpoint 2": (
        "record", _tampered("record", _edit_summary("classes", ["first_longer", "second_longer", "third"])),
        r"prepare\.json: field 'classes' .*third.*trained on"),
    "every answer cut": ("span", _cut_every_answer, r"valid\.meta\.json: every one of the 4 answers .*cut"),
}


def _prepared_case(name: str, command: str, ci: bool, good: bool = False) -> Case:
    level, build, names = PREPARED[name]

    def make(fx: Fixtures, where: Path) -> Run:
        data = build(fx, where)
        ckpt = fx.finetuned[level]
        if command == "fairseq-validate":
            call = lambda: _cli(command, [data, *structured_task(), "--path", ckpt, "--batch-size", "4", "--cpu"])  # noqa: E731
            check = None
        else:
            call = lambda: _cli(command, ["structured", "--path", ckpt, "--data", data, "--split", "valid",  # noqa: E731
                                          "--output", where / "pred.json"])
            check = lambda out, err: len(json.loads((where / "pred.json").read_text())) == 4  # noqa: E731
        return Run(call, inputs=[ckpt, data], check=check)

    return Case(f"{name} / {command}", f"prepared data, {command}", make, None if good else names, ci)


# -- etc-prepare structured, etc-evaluate structured ----------------------------------------------------------
def _first_record(fx: Fixtures) -> dict:
    return json.loads((fx.records / "valid.jsonl").read_text().splitlines()[0])


def _deep(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def _record_file(edit: Callable[[dict], str]):
    def make(fx: Fixtures, where: Path) -> Path:
        path = where / "records.jsonl"
        path.write_text(edit(_first_record(fx)) + "\n", encoding="utf-8")
        return path
    return make


def _with_meta_deep(rec: dict) -> str:
    return json.dumps(rec)[:-1] + ', "meta": ' + _deep() + "}"


def _with_surrogate(rec: dict) -> str:
    rec["words"][3] = "ab\udc80cd"
    return json.dumps(rec)


RECORD_FILES = {
    "JSONL nested 100,000 deep": (_with_meta_deep, r"records\.jsonl:1: JSON nested too deeply"),
    "a lone surrogate in a word": (_with_surrogate, r"records\.jsonl:1: field words\[3\]: .*surrogate"),
    "good records": (json.dumps, None),
}


def _prepare_case(name: str, ci: bool) -> Case:
    edit, names = RECORD_FILES[name]

    def make(fx: Fixtures, where: Path) -> Run:
        path = _record_file(edit)(fx, where)
        out = where / "out"
        call = lambda: _cli("etc-prepare", ["structured", "--train", path, "--label-level", "record",  # noqa: E731
                                            "--pretrain-dir", fx.pretrain_bin, "--arch", "etc_tiny", "--out", out])
        return Run(call, inputs=[path, fx.pretrain_bin], check=lambda o, e: (out / "prepare.json").is_file())

    return Case(f"{name} / etc-prepare structured", "etc-prepare structured", make, names, ci)


def _predictions(level: str) -> Callable[[Fixtures], dict]:
    def make(fx: Fixtures) -> dict:
        recs = [json.loads(line) for line in (fx.records / "valid.jsonl").read_text().splitlines()]
        return {r["id"]: (r["label"] if level == "record" else r["answer"]) for r in recs}
    return make


EVALUATIONS = {
    # name: (label level, predictions file text, gold file text or None (the real one), what the refusal names)
    "predictions nested 100,000 deep": ("record", lambda fx: '{"a": ' + _deep() + "}", None,
                                        r"pred\.json: JSON nested too deeply"),
    "gold nested 100,000 deep": ("record", lambda fx: json.dumps(_predictions("record")(fx)),
                                 lambda fx: _with_meta_deep(_first_record(fx)) + "\n", r"gold\.jsonl:1: JSON nested too deeply"),
    "a lone surrogate in a prediction": ("record", lambda fx: json.dumps({"x\udc80": "first_longer"}), None,
                                         r"pred\.json: field x\\udc80 \(its name\): .*surrogate"),
    "span gold without answers": ("span", lambda fx: json.dumps(_predictions("span")(fx)),
                                  lambda fx: "".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "answer"}) + "\n"
                                                     for line in (fx.records / "valid.jsonl").read_text().splitlines()),
                                  r"gold\.jsonl: no record has an 'answer'.*nothing to score"),
    "correct predictions": ("record", lambda fx: json.dumps(_predictions("record")(fx)), None, None),
}


def _evaluate_case(name: str, ci: bool) -> Case:
    level, predictions, gold, names = EVALUATIONS[name]

    def make(fx: Fixtures, where: Path) -> Run:
        pred = where / "pred.json"
        pred.write_text(predictions(fx), encoding="utf-8", errors="surrogatepass")
        gold_path = where / "gold.jsonl"
        if gold is None:
            shutil.copy(fx.records / "valid.jsonl", gold_path)
        else:
            gold_path.write_text(gold(fx), encoding="utf-8")
        call = lambda: _cli("etc-evaluate", ["structured", "--predictions", pred, "--gold", gold_path,  # noqa: E731
                                             "--label-level", level])
        check = lambda out, err: json.loads(out.strip().splitlines()[-1])["accuracy"] == 100.0  # noqa: E731
        return Run(call, inputs=[pred, gold_path], check=check)

    return Case(f"{name} / etc-evaluate structured", "etc-evaluate structured", make, names, ci)


# -- the hub's extract_features ------------------------------------------------------------------------------
HUB_INPUTS = {
    # name: (a function of (torch, dictionary size) -> the input, what the refusal names)
    "float token ids": (lambda torch, n: torch.tensor([[5.0, 6.0, 7.0]]), r"src_tokens: expected integer token ids.*float32"),
    "a list of floats": (lambda torch, n: [[5.5, 6.0, 7.0]], r"inputs\[0\]: expected integer token ids"),
    "an id beyond the dictionary": (lambda torch, n: torch.tensor([[5, n + 10, 7]]), r"src_tokens: id \d+ at position \[0, 1\] is outside"),
    "a negative id": (lambda torch, n: torch.tensor([[5, -3, 7]]), r"src_tokens: id -3 .*outside"),
    "good ids": (lambda torch, n: torch.tensor([[5, 6, 7]]), None),
}


def _hub_case(name: str, ci: bool) -> Case:
    build, names = HUB_INPUTS[name]

    def make(fx: Fixtures, where: Path) -> Run:
        ckpt = fx.finetuned["record"]

        def call():
            import torch

            hub = EtcModelFromPretrained(ckpt, fx.data["record"])
            inputs = build(torch, len(hub.dictionary))
            return _hub(lambda: print([tuple(f.shape) for f in hub.extract_features(inputs) if f is not None]))

        # the record-level model computes the global side only in its last layer: 3 ids, 1 fixed block
        return Run(call, inputs=[ckpt], check=lambda out, err: "[(1, 1, 64)]" in out)

    return Case(f"{name} / hub extract_features", "hub, extract_features", make, names, ci)


def EtcModelFromPretrained(ckpt: Path, data: Path):
    from etc_fairseq.models import EtcModel

    return EtcModel.from_pretrained(str(ckpt.parent), checkpoint_file=ckpt.name, data_name_or_path=str(data))


# -- fairseq-train with impossible sizes ----------------------------------------------------------------------
TRAIN_FLAGS_CASES = {
    # etc_large's width, so that no machine holds it (at etc_tiny's width 100,000 layers are ~20 GB)
    "--encoder-layers 100000": (["--encoder-layers", "100000", "--encoder-embed-dim", "1024",
                                 "--encoder-ffn-embed-dim", "4096", "--encoder-attention-heads", "16"],
                                r"encoder_layers=100000.*memory available"),
    "--dropout nan": (["--dropout", "nan"], r"dropout=nan: expected a probability"),
    "--encoder-attention-heads 0": (["--encoder-attention-heads", "0"], r"encoder_attention_heads=0"),
}


def _train_flags_case(name: str, ci: bool) -> Case:
    flags, names = TRAIN_FLAGS_CASES[name]

    def make(fx: Fixtures, where: Path) -> Run:
        data = fx.data["record"]
        call = lambda: _cli("fairseq-train", [data, *structured_task(), "--arch", "etc_tiny", *flags, *TRAIN_FLAGS,  # noqa: E731
                                              "--max-update", "1", "--save-dir", where / "save"])
        return Run(call, inputs=[data])

    return Case(f"{name} / fairseq-train", "fairseq-train flags", make, names, ci)


# -- etc-lift: Hugging Face BERT and Google's ETC sources -----------------------------------------------------
OFFICIAL_FIXTURE = REPO / "tests" / "fixtures" / "official" / "separate"


def _tiny_bert(where: Path) -> Path:
    """A Hugging Face BERT directory (BertForMaskedLM, random weights, CONSTRUCTED 60-piece WordPiece vocabulary)."""
    import torch
    import transformers

    src = where / "bert"
    src.mkdir()
    cfg = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(cfg).save_pretrained(src)
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(4)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (src / "vocab.txt").write_text("\n".join(words + [f"w{i}" for i in range(60 - len(words))]) + "\n")
    return src


def _bert_config(**changes) -> Callable[[Path], None]:
    def edit(src: Path) -> None:
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(changes)
        (src / "config.json").write_text(json.dumps(cfg))
    return edit


def _bert_weight(edit: Callable[[Dict[str, "object"]], None]) -> Callable[[Path], None]:
    def change(src: Path) -> None:
        from safetensors.torch import load_file, save_file

        weights = load_file(str(src / "model.safetensors"))
        edit(weights)
        save_file(weights, str(src / "model.safetensors"))
    return change


def _longer_word_table(w: dict) -> None:
    import torch

    key = "bert.embeddings.word_embeddings.weight"
    w[key] = torch.cat([w[key], torch.zeros(40, w[key].shape[1])])


def _integer_weight(w: dict) -> None:
    import torch

    key = "bert.encoder.layer.0.attention.self.query.weight"
    w[key] = w[key].to(torch.int64)


def _vocab_line(index: int, text: str) -> Callable[[Path], None]:
    def edit(src: Path) -> None:
        lines = (src / "vocab.txt").read_text().split("\n")
        lines[index] = text
        (src / "vocab.txt").write_text("\n".join(lines))
    return edit


LIFT_SOURCES = {
    # name: (edit of the tiny BERT directory, extra etc-lift arguments (a function of the case directory and the
    # source), what the refusal names; None: a good input)
    "dropout -0.5": (_bert_config(attention_probs_dropout_prob=-0.5), None,
                     r"config\.json: field 'attention_probs_dropout_prob' = -0\.5"),
    "dropout NaN": (_bert_config(hidden_dropout_prob=float("nan")), None, r"config\.json: field 'hidden_dropout_prob' = nan"),
    "hidden_act a list": (_bert_config(hidden_act=["gelu"]), None, r"config\.json: field 'hidden_act'"),
    "model_type a list": (_bert_config(model_type=["bert"]), None, r"config\.json: field 'model_type'"),
    "layer_norm_eps null": (_bert_config(layer_norm_eps=None), None, r"config\.json: field 'layer_norm_eps'"),
    "hidden_size 10^7": (_bert_config(hidden_size=10 ** 7), None, r"word_embeddings\.weight' has shape .*config\.json"),
    "100,000 layers": (_bert_config(num_hidden_layers=100000), None, r"model\.safetensors: tensor .*layer\.2\..* missing"),
    "word table longer than vocab_size": (_bert_weight(_longer_word_table), None,
                                          r"word_embeddings\.weight' has shape \(100, 32\).*vocab_size 60"),
    "an int64 weight": (_bert_weight(_integer_weight), None, r"query\.weight' is int64"),
    "a vocabulary symbol with a space": (_vocab_line(20, "has space"), None, r"vocab\.txt"),
    "--encoder-dir the source": (None, lambda where, src: ["--encoder-dir", src], r"--encoder-dir .* is the input SOURCE"),
    "--encoder-dir a file": (None, lambda where, src: ["--encoder-dir", src / "vocab.txt"], r"--encoder-dir .*vocab\.txt"),
    "a good BERT": (None, None, None),
}


def _lift_case(name: str, ci: bool) -> Case:
    edit, extra, names = LIFT_SOURCES[name]

    def make(fx: Fixtures, where: Path) -> Run:
        src = _tiny_bert(where)
        if edit is not None:
            edit(src)
        out = where / "out" / "model.pt"
        args = [src, "--out", out, "--arch", "etc_tiny", *(extra(where, src) if extra else [])]
        check = lambda o, e: out.is_file() and (out.parent / "dict.txt").is_file()  # noqa: E731
        return Run(lambda: _cli("etc-lift", args), inputs=[src], check=check)

    return Case(f"{name} / etc-lift", "etc-lift, Hugging Face source", make, names, ci)


def _official_copy(where: Path, config_changes: Dict[str, object]) -> Path:
    src = where / "official"
    shutil.copytree(OFFICIAL_FIXTURE, src)
    cfg = json.loads((src / "etc_config.json").read_text())
    cfg.update(config_changes)
    (src / "etc_config.json").write_text(json.dumps(cfg))
    return src


def _official_outputs_check(out: Path) -> Callable[[str, str], bool]:
    """The hub over etc-lift's checkpoint, given the official code's own inputs, computes its outputs (1e-5)."""
    def check(stdout: str, stderr: str) -> bool:
        import numpy as np
        import torch

        from etc_fairseq.models import EtcModel
        from etc_fairseq.official import OFFICIAL_INPUT_NAMES, forward_official_inputs

        z = np.load(OFFICIAL_FIXTURE / "official_io.npz")
        with torch.no_grad():
            long_out, global_out = forward_official_inputs(EtcModel.from_pretrained(out.parent),
                                                           {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files})
        return (np.abs(long_out.numpy() - z["long_output"]).max() < 1e-5
                and np.abs(global_out.numpy() - z["global_output"]).max() < 1e-5)
    return check


OFFICIAL_SOURCES = {
    # name: (etc_config.json changes, what the refusal names; None: a good input, checked against the official outputs)
    "local_radius 10^9": ({"local_radius": 10 ** 9}, r"etc_config\.json.*local_radius=1000000000: expected at most"),
    "official outputs through the hub": ({}, None),
}


def _official_case(name: str, ci: bool) -> Case:
    changes, names = OFFICIAL_SOURCES[name]

    def make(fx: Fixtures, where: Path) -> Run:
        src = _official_copy(where, changes)
        out = where / "out" / "model.pt"
        return Run(lambda: _cli("etc-lift", [src, "--out", out]), inputs=[src], check=_official_outputs_check(out))

    return Case(f"{name} / etc-lift", "etc-lift, Google's ETC", make, names, ci)


def _cases() -> List[Case]:
    cases: List[Case] = []
    ci_checkpoint = {"layers-100000", "nan-weight", "wrong-shape", "no-optimizer-history"}
    for command in ("fairseq-validate", "etc-predict", "hub", "fairseq-train --restore-file",
                    "fairseq-train --finetune-from-model"):
        for name in CHECKPOINTS:
            ci = (command == "fairseq-validate" and name in ci_checkpoint) or (command, name) in (
                ("hub", "nan-weight"), ("fairseq-train --finetune-from-model", "layers-100000"))
            cases.append(_checkpoint_case(name, command, ci))
    cases += [_payload_case("fairseq-validate", True), _payload_case("hub", False)]
    cases += [_good_checkpoint_case(c, c == "fairseq-validate") for c in ("fairseq-validate", "etc-predict", "hub")]
    for name in PREPARED:
        cases.append(_prepared_case(name, "fairseq-validate", True))
        # predictions on data whose answers were cut are still wanted: a good input for etc-predict
        cases.append(_prepared_case(name, "etc-predict", False, good=name == "every answer cut"))
    cases += [_prepare_case(name, True) for name in RECORD_FILES]
    cases += [_evaluate_case(name, name in ("gold nested 100,000 deep", "span gold without answers", "correct predictions"))
              for name in EVALUATIONS]
    cases += [_hub_case(name, name in ("float token ids", "an id beyond the dictionary", "good ids")) for name in HUB_INPUTS]
    cases += [_train_flags_case(name, name == "--encoder-layers 100000") for name in TRAIN_FLAGS_CASES]
    cases += [_lift_case(name, name in ("dropout -0.5", "word table longer than vocab_size", "--encoder-dir the source",
                                        "a good BERT")) for name in LIFT_SOURCES]
    cases += [_official_case(name, True) for name in OFFICIAL_SOURCES]
    return cases


CASES: List[Case] = _cases()


def outcome_lines(outcomes: Sequence[Outcome]) -> str:
    """One line per case: outcome, flags, seconds and the message (for the report's ``--verbose``)."""
    lines = []
    for o in outcomes:
        flags = "".join(f" [{f}]" for f, on in (("input lost", o.input_lost), ("code run", o.code_run)) if on)
        lines.append(f"{o.outcome:15s}{flags} {o.seconds:5.1f}s  {o.case}: {o.message}")
    return "\n".join(lines)


def warm_imports() -> None:
    """Import what the commands import, once, in this process: every forked case then starts with it."""
    import fairseq_cli.train  # noqa: F401
    import fairseq_cli.validate  # noqa: F401

    import etc_fairseq.cli.evaluate  # noqa: F401
    import etc_fairseq.cli.lift  # noqa: F401
    import etc_fairseq.cli.predict  # noqa: F401
    import etc_fairseq.cli.prepare  # noqa: F401
    import etc_fairseq.register  # noqa: F401
