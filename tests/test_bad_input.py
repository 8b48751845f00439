"""Bad input never gives a traceback from deep inside, never a silent loss, never a half-written output.

Converters: ``etc-prepare mlm / pretrain / article-classification`` on empty, binary, truncated, malformed,
non-UTF-8 and enormous inputs; killed (SIGKILL) and failing (injected error) runs. Loaders: the
``etc_pretraining`` corpus and ``StructuredDataset`` on truncated and corrupt prepared directories;
``etc-lift`` on files that are not checkpoints.

Real text: the Wikipedia sample (``wiki_dump``); the bad files are CONSTRUCTED from it (cut, re-encoded,
concatenated) or are plain constructed bytes where the content does not matter (empty file, NUL bytes)."""
import bz2
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from etc_fairseq.cli.prepare import main as prepare_main

REPO = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ["mlm", "pretrain", "article-classification"]


def assert_one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if ": error: " in l]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def assert_no_output(out: Path):
    """Neither the output directory nor a leftover staging directory exists."""
    assert not out.exists()
    assert not [p.name for p in out.parent.glob(f".{out.name}.*")]


@pytest.fixture(scope="module")
def real_docs(wiki_dump):
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for d in iter_wikipedia_documents(wiki_dump):
        if len(d.paragraphs) >= 4:
            docs.append(d)
        if len(docs) == 6:
            break
    return docs


@pytest.fixture(scope="module")
def bad_inputs(wiki_dump, real_docs, tmp_path_factory):
    """name -> (file, what the error must say). All CONSTRUCTED from the real dump except empty/binary."""
    d = tmp_path_factory.mktemp("bad_inputs")
    raw = wiki_dump.read_bytes()
    xml = bz2.decompress(raw)
    files = {}
    (d / "empty.txt").write_bytes(b"")
    files["empty"] = (d / "empty.txt", ["need at least 2 documents", "empty.txt"])
    (d / "binary.txt").write_bytes(("\n".join(real_docs[0].paragraphs)).encode()[:500] + b"\x00\x01\x02" + b"rest\n")
    files["binary"] = (d / "binary.txt", ["binary.txt: line 1: NUL byte at column 501", "not a UTF-8 text file"])
    (d / "cut.xml.bz2").write_bytes(raw[: len(raw) // 3])
    files["truncated_bz2"] = (d / "cut.xml.bz2", ["cut.xml.bz2: cannot decompress or read the dump"])
    (d / "cut.xml").write_bytes(xml[: len(xml) // 3])
    files["truncated_xml"] = (d / "cut.xml", ["cut.xml: malformed XML at line"])
    (d / "tags.xml").write_bytes(xml[:20000].replace(b"</title>", b"</titel>", 1))
    files["mismatched_tag_xml"] = (d / "tags.xml", ["tags.xml: malformed XML at line", "mismatched tag"])
    files["missing"] = (d / "missing.txt", ["missing.txt: no such input file"])
    (d / "a_directory").mkdir()
    files["directory"] = (d / "a_directory", ["a_directory: is not a regular file"])
    return files


@pytest.mark.parametrize("sub", SUBCOMMANDS)
@pytest.mark.parametrize("case", ["empty", "binary", "truncated_bz2", "truncated_xml", "mismatched_tag_xml",
                                  "missing", "directory"])
def test_converters_reject_bad_inputs_in_one_line(sub, case, bad_inputs, tmp_path, capsys):
    path, needles = bad_inputs[case]
    if sub == "article-classification" and case == "empty":
        needles = ["needs that many documents", "empty.txt"]
    out = tmp_path / "out"
    assert prepare_main(["-q", sub, "--input", str(path), "--out", str(out), "--vocab-size", "100"]) == 1
    assert_one_line_error(capsys, f"etc-prepare {sub}: error:", *needles)
    assert_no_output(out)


def test_non_utf8_and_enormous_inputs_are_counted_not_fatal(real_docs, tmp_path, capsys, caplog):
    """Real paragraphs re-encoded as Latin-1 (non-UTF-8 bytes) and one enormous document (all paragraphs of
    the real documents joined into a single ~100 KB line): pretrain succeeds, replacements and cut sentences
    are counted and logged."""
    latin = tmp_path / "latin1.txt"
    docs = real_docs[:5]
    with open(latin, "wb") as f:
        for i, d in enumerate(docs):
            text = "\n".join(d.paragraphs) + "\n\n"
            f.write(text.encode("latin-1", errors="replace") if i < 2 else text.encode("utf-8"))
            if i < 2:
                f.write("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e is a French dessert served cold.\n\n".encode("latin-1"))
    huge = tmp_path / "huge.txt"
    para = " ".join(p for d in real_docs for p in d.paragraphs)
    while len(para) < 100_000:
        para = para + " " + para
    huge.write_text(para + "\n", encoding="utf-8")
    out = tmp_path / "out"
    caplog.set_level("INFO")
    rc = prepare_main(["pretrain", "--input", str(latin), str(huge), "--out", str(out), "--vocab-size", "300",
                       "--valid-docs", "1", "--min-sentences", "3", "--max-sentence-pieces", "64"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    assert "Traceback" not in captured.err
    log = caplog.text  # (logging may already be configured by earlier tests: read the records, not stderr)
    def undecodable(line):
        try:
            line.decode("utf-8")
            return False
        except UnicodeDecodeError:
            return True

    bad = [i for i, l in enumerate(latin.read_bytes().split(b"\n"), 1) if undecodable(l)]
    assert len(bad) >= 3
    assert f"latin1.txt: {len(bad)} lines had bytes that are not UTF-8 (first at line {bad[0]})" in log, log[-3000:]
    summary = json.loads((out / "prepare.json").read_text())
    cut = summary["splits"]["train"]["long_sentences"] + summary["splits"]["valid"]["long_sentences"]
    assert cut > 0 and "sentences longer than 64 pieces were split" in log
    assert summary["out_dir"] == str(out) and ".tmp-" not in json.dumps(summary)  # paths name the final directory
    assert_no_output(tmp_path / "never")  # (sanity of the helper)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_failure_mid_way_leaves_no_output_and_keeps_the_previous_one(wiki_dump, tmp_path, capsys, monkeypatch):
    from etc_fairseq.prepare import pretrain
    from etc_fairseq.prepare.binarize import BinarizeError

    out = tmp_path / "out"
    args = ["-q", "pretrain", "--input", str(wiki_dump), "--out", str(out), "--max-docs", "4", "--valid-docs", "1",
            "--vocab-size", "300"]

    def fails(*a, **k):
        raise BinarizeError("fairseq-preprocess failed (injected by the test)")

    monkeypatch.setattr(pretrain, "binarize", fails)
    assert prepare_main(args) == 1
    assert_one_line_error(capsys, "injected by the test")
    assert_no_output(out)  # the raw/, spm/ and tok/ files written before the failure are gone too

    monkeypatch.undo()
    assert prepare_main(args) == 0
    good = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(pretrain, "binarize", fails)
    assert prepare_main(args + ["--overwrite", "--seed", "5"]) == 1
    capsys.readouterr()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == good  # untouched


def test_sigkill_mid_way_leaves_no_output(wiki_dump, tmp_path):
    """SIGKILL etc-prepare pretrain while it works (after it has read documents): the output directory never
    appears; only a hidden staging directory is left, and the next run is not disturbed by it."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "etc_fairseq.cli.prepare", "pretrain", "--input", str(wiki_dump), "--out", str(out),
           "--max-docs", "30", "--valid-docs", "2", "--vocab-size", "500"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "documents kept" in line:  # raw text written, tokenization under way
            proc.send_signal(signal.SIGKILL)
            break
    proc.stdout.close()
    assert proc.wait(timeout=60) == -signal.SIGKILL, "".join(seen)[-3000:]
    assert not out.exists()
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
    assert len(staging) == 1 and (staging[0] / "raw" / "train.txt").is_file()  # it was killed mid-way


# ------------------------------------------------------------------------------------------------------
# prepared data: etc_pretraining corpus
# ------------------------------------------------------------------------------------------------------


def corrupt_copy(src: Path, dst: Path, name: str, how):
    shutil.copytree(src, dst)
    how(dst / name)
    return dst


def truncate(fraction):
    def f(p: Path):
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * fraction)])
    return f


def overwrite(data: bytes):
    def f(p: Path):
        p.write_bytes(data)
    return f


PRETRAIN_CORRUPTIONS = {
    "bin_truncated": ("train.bin", truncate(0.9), r"train\.bin: \d+ bytes, its index train\.idx needs \d+"),
    "bin_empty": ("train.bin", truncate(0.0), r"train\.bin: 0 bytes"),
    "idx_truncated": ("train.idx", truncate(0.5), r"train\.idx: \d+ bytes, the header announces 2622 items"),
    "idx_garbage": ("train.idx", overwrite(b"not an index"), r"train\.idx: not a fairseq mmap index"),
    "docs_garbage": ("train.docs.npy", overwrite(b"\x93NUMPY garbage"), r"train\.docs\.npy: not a readable \.npy"),
    "docs_wrong": ("train.docs.npy", lambda p: np.save(p, np.array([0, 5, 3])), r"train\.docs\.npy: not document offsets"),
    "meta_garbage": ("pretrain.json", overwrite(b"{not json"), r"pretrain\.json: not valid JSON"),
    "meta_missing": ("pretrain.json", lambda p: p.unlink(), r"pretrain\.json: no such file"),
}


@pytest.mark.parametrize("case", sorted(PRETRAIN_CORRUPTIONS))
def test_pretraining_corpus_rejects_corrupt_data(case, pretrain_data, tmp_path):
    from etc_fairseq.data.pretraining_corpus import PretrainingCorpus

    name, how, pattern = PRETRAIN_CORRUPTIONS[case]
    bad = corrupt_copy(pretrain_data, tmp_path / "bin", name, how)
    with pytest.raises((ValueError, FileNotFoundError), match=pattern):
        PretrainingCorpus.load(bad, "train")
    assert PretrainingCorpus.load(pretrain_data, "train").num_sentences == 2622  # the original is fine


def test_etc_pretraining_task_reports_truncated_data(pretrain_data, tmp_path):
    from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

    bad = corrupt_copy(pretrain_data, tmp_path / "bin", "valid.bin", truncate(0.99))
    task = EtcPretrainingTask.setup_task(EtcPretrainingConfig(data=str(bad), max_long_len=128, max_global_len=16, seed=1))
    task.load_dataset("train")
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}/valid\.bin: \d+ bytes, its index valid\.idx needs"):
        task.load_dataset("valid")


# ------------------------------------------------------------------------------------------------------
# prepared data: StructuredDataset
# ------------------------------------------------------------------------------------------------------


@pytest.fixture
def structured(pretrain_data, tmp_path):
    """A small structured split (CONSTRUCTED examples over real token ids from the pre-training corpus)."""
    from etc_fairseq.data.pretraining_corpus import PretrainingCorpus
    from etc_fairseq.data.structured import FieldSpec, StructuredWriter

    corpus = PretrainingCorpus.load(pretrain_data, "train")
    spec = FieldSpec(name="label", role="target", length="own", dtype="int64")
    (tmp_path / "data").mkdir()
    w = StructuredWriter(tmp_path / "data", "valid", [spec])
    for i in range(5):
        sents = corpus.document(i)[:3]
        w.add({"long_tokens": np.concatenate(sents), "global_tokens": np.full(len(sents), 4),
               "global_types": np.zeros(len(sents)), "label": np.array([i % 2])}, side={"id": f"doc{i}"})
    w.finalize()
    return tmp_path / "data", spec


STRUCTURED_CORRUPTIONS = {
    "bin_truncated": ("valid.long_tokens.bin", truncate(0.5), r"valid\.long_tokens\.bin: \d+ bytes, its index"),
    "idx_truncated": ("valid.global_types.idx", truncate(0.6), r"valid\.global_types\.idx: \d+ bytes, the header announces 5"),
    "idx_missing": ("valid.label.idx", lambda p: p.unlink(), r"valid\.label\.idx: missing"),
    "meta_garbage": ("valid.meta.json", overwrite(b'{"num_examples": 5,'), r"valid\.meta\.json: not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(STRUCTURED_CORRUPTIONS))
def test_structured_dataset_rejects_corrupt_data(case, structured, tmp_path):
    from etc_fairseq.data.structured import StructuredDataset

    data, spec = structured
    assert len(StructuredDataset(data, "valid", [spec], pad_idx=1)) == 5
    name, how, pattern = STRUCTURED_CORRUPTIONS[case]
    bad = corrupt_copy(data, tmp_path / "bad", name, how)
    with pytest.raises((ValueError, FileNotFoundError), match=pattern):
        StructuredDataset(bad, "valid", [spec], pad_idx=1)


def test_structured_side_file_errors_name_the_line(structured):
    from etc_fairseq.data.structured import read_side

    data, _ = structured
    side = data / "valid.side.jsonl"
    assert [r["id"] for r in read_side(data, "valid")] == [f"doc{i}" for i in range(5)]
    lines = side.read_text().splitlines()
    lines[3] = lines[3][:-3]
    side.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"valid\.side\.jsonl:4: not valid JSON"):
        read_side(data, "valid")
    side.write_bytes(b'{"id": "doc0"}\n{"id": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"valid\.side\.jsonl:2: not UTF-8"):
        read_side(data, "valid")


# ------------------------------------------------------------------------------------------------------
# etc-lift
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"hello, not a checkpoint\n", b"PK\x03\x04" + b"\x00" * 64, b"\x80\x02}q\x00."])
def test_etc_lift_rejects_non_checkpoints_in_one_line(content, tmp_path, capsys):
    from etc_fairseq.cli.lift import main as lift_main

    path = tmp_path / "model.pt"
    path.write_bytes(content)
    out = tmp_path / "etc.pt"
    assert lift_main([str(path), "--arch", "etc_tiny", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("etc-lift: error: ") and str(path) in err
    assert not out.exists()


def _lift_error(argv, capsys) -> str:
    from etc_fairseq.cli.lift import main as lift_main

    assert lift_main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("etc-lift: error: ")
    return err.strip()


def test_etc_lift_never_writes_over_its_inputs(tmp_path, capsys):
    """--out equal to the RoBERTa checkpoint or to --dict (also through another spelling of the path) is
    refused before anything is read, --overwrite or not; the inputs are unchanged."""
    ckpt = tmp_path / "roberta.pt"
    ckpt.write_bytes(b"the user's only copy")
    dict_txt = tmp_path / "dict.txt"
    dict_txt.write_text("a 1\n")
    for out, flag, victim in ((ckpt, "SOURCE", ckpt), (tmp_path / "." / "roberta.pt", "SOURCE", ckpt), (dict_txt, "--dict", dict_txt)):
        err = _lift_error([str(ckpt), "--arch", "etc_tiny", "--dict", str(dict_txt), "--out", str(out), "--overwrite"], capsys)
        assert err == (f"etc-lift: error: --out {out} is the input {flag} {victim}: an output may never replace an "
                       "input; write elsewhere")
    assert ckpt.read_bytes() == b"the user's only copy" and dict_txt.read_text() == "a 1\n"


def test_etc_lift_overwrite_replaces_only_its_own_outputs(tmp_path, capsys):
    ckpt = tmp_path / "roberta.pt"
    ckpt.write_bytes(b"not read: the refusal comes first")
    other = tmp_path / "notes.pt"
    other.write_bytes(b"something else the user keeps here")
    err = _lift_error([str(ckpt), "--arch", "etc_tiny", "--out", str(other), "--overwrite"], capsys)
    assert err == f"etc-lift: error: --out {other} exists and is not a checkpoint etc-lift wrote; --overwrite replaces only those"
    assert other.read_bytes() == b"something else the user keeps here"
    err = _lift_error([str(ckpt), "--arch", "etc_tiny", "--out", str(tmp_path), "--overwrite"], capsys)
    assert err == f"etc-lift: error: --out {tmp_path}: is a directory; give the file to write"


@pytest.mark.parametrize("flag, value, message", [
    ("--local-radius", "-1", "--local-radius -1: must be >= 0"),
    ("--max-global-positions", "-5", "--max-global-positions -5: must be >= 0"),
    ("--dropout", "1.5", r"--dropout 1.5: a dropout probability must be in [0, 1)"),
])
def test_etc_lift_refuses_impossible_model_flags(flag, value, message, tmp_path, capsys):
    ckpt = tmp_path / "roberta.pt"
    ckpt.write_bytes(b"not read: the refusal comes first")
    out = tmp_path / "etc.pt"
    assert _lift_error([str(ckpt), "--arch", "etc_tiny", flag, value, "--out", str(out)], capsys) == f"etc-lift: error: {message}"
    assert not out.exists()


def test_etc_lift_on_a_full_disk_leaves_nothing_behind(tmp_path, monkeypatch):
    """The save is cut by ENOSPC after part of the file (CONSTRUCTED: torch.save writes 1 kB, then fails
    the way a full disk fails): one clear error, no x.pt.tmp, no x.pt."""
    import errno

    import torch

    from etc_fairseq.lift import LiftError
    from etc_fairseq.models.lifting import save_etc_checkpoint
    from etc_fairseq.models import config_for_arch

    def full_disk(obj, f, *args, **kwargs):
        with open(f, "wb") as h:
            h.write(b"\0" * 1024)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "x.pt"
    with pytest.raises(LiftError, match=rf"^{re.escape(str(out))}: cannot write the ETC checkpoint \(No space left on device\); nothing was written$"):
        save_etc_checkpoint(out, {"w": torch.zeros(2)}, config_for_arch("etc_tiny"))
    assert list(tmp_path.iterdir()) == []
