"""The shared on-disk format of the fine-tuning datasets (etc_fairseq/data/structured.py), atomic outputs
(etc_fairseq/prepare/atomic.py) and the lazily loaded subcommand registry (etc_fairseq/commands.py)."""
import argparse
import json

import numpy as np
import pytest
import torch

from etc_fairseq.data.structured import FieldSpec, StructuredDataset, StructuredWriter, read_meta
from etc_fairseq.prepare.atomic import atomic_directory, atomic_file

LABELS = FieldSpec("sentence_labels", dtype="int8", pad=-100, length="global")
FEATS = FieldSpec("node_features", dtype="float64", pad=0.0, length="global")
START = FieldSpec("answer_start", dtype="int64", pad=-1, length="own")


def _examples():
    # two examples of different lengths; node_features is 2-D (trailing shape 3)
    return [
        dict(long_tokens=[5, 6, 7, 8, 9], global_tokens=[0, 0], global_types=[3, 3],
             long_segment=[0, 0, 0, 1, 1], global_parent=[-1, -1], long_links=[[1, -1]] * 5,
             sentence_labels=[1, 0], node_features=[[0.5, -1.0, 2.0], [0.0, 0.25, 1e-3]], answer_start=[3]),
        dict(long_tokens=[10, 11], global_tokens=[0], global_types=[1],
             long_segment=[0, 0], global_parent=[-1], long_links=[[-1, -1]] * 2,
             sentence_labels=[1], node_features=[[1.0, 2.0, 3.0]], answer_start=[0]),
    ]


def _write(tmp_path, split="train"):
    specs = [LABELS, FEATS, START, FieldSpec("long_segment", pad=-1, role="structure", length="long"),
             FieldSpec("global_parent", pad=-1, role="structure", length="global"),
             FieldSpec("long_links", pad=-1, role="structure", length="long")]
    w = StructuredWriter(tmp_path, split, specs)
    for i, ex in enumerate(_examples()):
        w.add(ex, side={"id": f"ex{i}"})
    w.finalize(truncated=0)
    return tmp_path


def test_round_trip_dtypes_shapes_and_side_data(tmp_path):
    d = _write(tmp_path)
    meta = read_meta(d, "train")
    assert meta["num_examples"] == 2 and meta["truncated"] == 0
    assert meta["fields"]["node_features"] == {"dtype": "float64", "trailing_shape": [3]}
    assert meta["fields"]["long_links"]["trailing_shape"] == [2]
    ds = StructuredDataset(d, "train", [LABELS, FEATS, START], pad_idx=1)
    assert len(ds) == 2 and ds.sizes.tolist() == [5, 2] and ds.num_tokens(0) == 7
    item = ds[0]
    assert item["node_features"].dtype == np.float64
    np.testing.assert_array_equal(item["node_features"], np.array(_examples()[0]["node_features"]))
    np.testing.assert_array_equal(item["long_links"], np.array(_examples()[0]["long_links"]))
    assert [json.loads(x)["id"] for x in (d / "train.side.jsonl").read_text().splitlines()] == ["ex0", "ex1"]


def test_collater_pads_each_field_with_its_value(tmp_path):
    ds = StructuredDataset(_write(tmp_path), "train", [LABELS, FEATS, START], pad_idx=1)
    b = ds.collater([ds[1], ds[0]])
    ni = b["net_input"]
    assert ni["src_tokens"].tolist() == [[10, 11, 1, 1, 1], [5, 6, 7, 8, 9]]
    assert ni["global_tokens"].tolist() == [[0, 1], [0, 0]]
    assert ni["global_types"].tolist() == [[1, 0], [3, 3]]
    assert ni["structure"]["long_segment"].tolist() == [[0, 0, -1, -1, -1], [0, 0, 0, 1, 1]]
    assert ni["structure"]["long_links"].shape == (2, 5, 2)
    assert b["target"]["sentence_labels"].tolist() == [[1, -100], [1, 0]]
    assert b["target"]["node_features"].dtype == torch.float32
    assert b["target"]["node_features"][0, 1].tolist() == [0.0, 0.0, 0.0]
    assert b["target"]["answer_start"].tolist() == [[0], [3]]
    assert b["id"].tolist() == [1, 0] and b["ntokens"] == 7 and b["nsentences"] == 2
    fixed = StructuredDataset(tmp_path, "train", [LABELS, FEATS, START], pad_idx=1,
                              max_long_len=8, max_global_len=4, pad_to_fixed_length=True)
    fb = fixed.collater([fixed[0]])
    assert fb["net_input"]["src_tokens"].shape == (1, 8) and fb["net_input"]["global_tokens"].shape == (1, 4)
    assert fb["target"]["sentence_labels"].shape == (1, 4)


def test_errors_name_the_file_and_field(tmp_path):
    d = _write(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"valid\.meta\.json.*splits present: \['train'\]"):
        StructuredDataset(d, "valid", [], pad_idx=1)
    with pytest.raises(ValueError, match="'missing_field' was not prepared"):
        StructuredDataset(d, "train", [FieldSpec("missing_field")], pad_idx=1)
    # an optional field (one a task added after the data was prepared) loads where it is absent
    optional = StructuredDataset(d, "train", [LABELS, FieldSpec("missing_field", required=False)], pad_idx=1)
    batch = optional.collater([optional[0]])
    assert "missing_field" not in batch["target"] and "sentence_labels" in batch["target"]
    with pytest.raises(ValueError, match="long length 5 > 4"):
        StructuredDataset(d, "train", [], pad_idx=1, max_long_len=4)
    (d / "train.answer_start.idx").unlink()
    with pytest.raises(FileNotFoundError, match=r"train\.answer_start\.idx: missing"):
        StructuredDataset(d, "train", [START], pad_idx=1)
    (tmp_path / "w").mkdir()
    w = StructuredWriter(tmp_path / "w", "x", [LABELS])
    with pytest.raises(ValueError, match=r"missing fields \['sentence_labels'\]"):
        w.add(dict(long_tokens=[1], global_tokens=[0], global_types=[0]))
    w.add(dict(long_tokens=[1], global_tokens=[0], global_types=[0], sentence_labels=[1]))
    with pytest.raises(ValueError, match="side data must be given for every example"):
        w.add(dict(long_tokens=[1], global_tokens=[0], global_types=[0], sentence_labels=[1]), side={"id": 1})


def test_atomic_directory_and_file_leave_nothing_half_written(tmp_path):
    dest = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_directory(dest) as tmp:
            (tmp / "a.bin").write_bytes(b"partial")
            raise RuntimeError("killed mid-way")
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    with atomic_directory(dest) as tmp:
        (tmp / "a.bin").write_bytes(b"ok")
    assert (dest / "a.bin").read_bytes() == b"ok"
    with pytest.raises(FileExistsError, match="already exists"):
        with atomic_directory(dest):
            pass
    with atomic_directory(dest, overwrite=True) as tmp:
        (tmp / "b.bin").write_bytes(b"new")
    assert sorted(p.name for p in dest.iterdir()) == ["b.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    f = tmp_path / "pred.json"
    with pytest.raises(RuntimeError):
        with atomic_file(f) as fh:
            fh.write("{")
            raise RuntimeError("boom")
    assert not f.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomic_file(f) as fh:
        fh.write("{}")
    assert f.read_text() == "{}"


def test_subcommand_registry_and_one_line_errors(capsys):
    from etc_fairseq.cli.common import build_parser, run_cli
    from etc_fairseq.commands import Subcommand, dataset_subcommands, finetune_datasets, load_subcommands

    from etc_fairseq.errors import InputFormatError

    def boom(args):
        if args.input == "bug":  # a plain ValueError is a bug: its traceback is shown
            raise ValueError("planted bug")
        raise InputFormatError(f"{args.input}: line 3: field 'answer' must be a string")

    sc = Subcommand("demo", "a demo", "demo", lambda p: p.add_argument("--input"), boom)
    parser = build_parser("etc-demo", "demo", [sc])
    assert run_cli(parser, ["demo", "--input", "f.json"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "etc-demo demo: error: f.json: line 3: field 'answer' must be a string"
    with pytest.raises(InputFormatError):
        run_cli(parser, ["--debug", "demo", "--input", "f.json"])
    with pytest.raises(ValueError, match="planted bug"):
        run_cli(parser, ["demo", "--input", "bug"])
    with pytest.raises(TypeError, match="must be a Subcommand"):
        load_subcommands(["argparse"], "ArgumentParser")
    from etc_fairseq.cli import prepare

    assert finetune_datasets() == ["hotpotqa", "nextsent", "nq", "openkp", "structured", "wikihop"]
    names = {sc.name for sc in prepare.SUBCOMMANDS + dataset_subcommands("etc-prepare")}
    assert names == {"mlm", "article-classification", "pretrain", "hotpotqa", "nextsent", "nq", "openkp", "structured", "wikihop"}
    for command in ("etc-predict", "etc-evaluate"):
        assert [sc.name for sc in dataset_subcommands(command)] == finetune_datasets()
    with pytest.raises(KeyError, match="no dataset subcommands"):
        dataset_subcommands("etc-lift")
