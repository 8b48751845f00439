"""Bad input to every fine-tuning converter (etc-prepare hotpotqa / wikihop / nq / openkp), through the CLI:
each case must end with exit status 1, exactly one error line naming the input file (and, where a record is
at fault, its position or id and the field), no traceback, and no output directory (not even a partial one).
Each dataset's own test file has further, dataset-specific cases (tests/test_<dataset>.py)."""
import json

import pytest

from etc_fairseq.cli.prepare import main as prepare_main

# the two JSON-list formats and the two JSON-lines formats
JSON_LIST = ("hotpotqa", "wikihop")
JSONL = ("nq", "openkp")

# A record missing its document text, per dataset (CONSTRUCTED; field names from the official formats).
MISSING_FIELD = {
    "hotpotqa": ({"_id": "q1", "question": "Who?", "answer": "x", "supporting_facts": [], "type": "bridge"}, "context"),
    "wikihop": ({"id": "w1", "query": "country x", "candidates": ["a", "b"], "answer": "a"}, "supports"),
    "nq": ({"example_id": 1, "question_text": "who", "long_answer_candidates": [], "annotations": []}, "document"),
    "openkp": ({"url": "http://example.org/a", "text": "some words", "KeyPhrases": [["words"]]}, "VDOM"),
}


def _write(path, dataset, records):
    if dataset in JSON_LIST:
        path.write_text(json.dumps(records), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _run(dataset, path, out, pretrain_data, capsys):
    rc = prepare_main([dataset, "--train", str(path), "--out", str(out), "--pretrain-dir", str(pretrain_data)])
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


def _check(rc, err, path, out, *words):
    assert rc == 1
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("etc-prepare ") and str(path) in err[0], err[0]
    for w in words:
        assert w.lower() in err[0].lower(), (w, err[0])
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("dataset", JSON_LIST + JSONL)
def test_malformed_json(dataset, tmp_path, pretrain_data, capsys):
    path = tmp_path / "in.json"
    good = MISSING_FIELD[dataset][0]
    text = json.dumps([good]) if dataset in JSON_LIST else json.dumps(good) + "\n"
    path.write_text(text[: len(text) // 2], encoding="utf-8")  # cut in the middle: a partial download
    out = tmp_path / "out"
    _check(*_run(dataset, path, out, pretrain_data, capsys), path, out, "json")


@pytest.mark.parametrize("dataset", JSON_LIST + JSONL)
def test_non_utf8_bytes(dataset, tmp_path, pretrain_data, capsys):
    path = tmp_path / "in.json"
    good = json.dumps(MISSING_FIELD[dataset][0]).encode()
    path.write_bytes((b"[" + good + b"]" if dataset in JSON_LIST else good + b"\n").replace(b"x", b"\xff\xfe", 1))
    out = tmp_path / "out"
    _check(*_run(dataset, path, out, pretrain_data, capsys), path, out)


@pytest.mark.parametrize("dataset", JSON_LIST + JSONL)
def test_missing_field_is_named(dataset, tmp_path, pretrain_data, capsys):
    record, field = MISSING_FIELD[dataset]
    path = tmp_path / "in.json"
    _write(path, dataset, [record])
    out = tmp_path / "out"
    _check(*_run(dataset, path, out, pretrain_data, capsys), path, out, field)


@pytest.mark.parametrize("dataset", JSON_LIST + JSONL)
def test_mistyped_top_level_or_empty_file(dataset, tmp_path, pretrain_data, capsys):
    path = tmp_path / "in.json"
    path.write_text('{"not": "a list"}' if dataset in JSON_LIST else "[1, 2, 3]\n", encoding="utf-8")
    out = tmp_path / "out"
    _check(*_run(dataset, path, out, pretrain_data, capsys), path, out)
    empty = tmp_path / "empty.json"
    empty.write_text("", encoding="utf-8")
    _check(*_run(dataset, empty, out, pretrain_data, capsys), empty, out)


@pytest.mark.parametrize("dataset", JSON_LIST + JSONL)
def test_missing_input_file(dataset, tmp_path, pretrain_data, capsys):
    path = tmp_path / "does_not_exist.json"
    out = tmp_path / "out"
    _check(*_run(dataset, path, out, pretrain_data, capsys), path, out)
