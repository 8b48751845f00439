"""``python -m etc_fairseq.cli.curves``: the scalars fairseq's ``--tensorboard-logdir`` writes (through
tensorboardX, as fairseq does: one directory per split) are read back exactly and drawn as a PNG."""
import struct

import pytest

from etc_fairseq.cli.curves import main, read_curves, read_event_records


def _write(logdir, split, points):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(logdir / split))
    for step, values in points:
        for tag, value in values.items():
            w.add_scalar(tag, value, step)
    w.close()


def test_scalars_read_back_per_split_and_drawn(tmp_path, capsys):
    logdir = tmp_path / "tb"
    _write(logdir, "train_inner", [(10, {"loss": 9.5, "mlm_acc": 1.0}), (20, {"loss": 8.25, "mlm_acc": 3.5})])
    _write(logdir, "valid", [(20, {"loss": 8.75})])
    curves = read_curves(logdir)
    assert curves == {"train_inner": {"loss": [(10, 9.5), (20, 8.25)], "mlm_acc": [(10, 1.0), (20, 3.5)]},
                      "valid": {"loss": [(20, 8.75)]}}
    out = tmp_path / "curves.png"
    assert main([str(logdir), "--out", str(out), "--metrics", "loss", "mlm_acc"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out}: loss, mlm_acc for train_inner, valid" in capsys.readouterr().out


def test_a_truncated_last_record_is_skipped(tmp_path):
    logdir = tmp_path / "tb"
    _write(logdir, "train", [(1, {"loss": 2.0}), (2, {"loss": 1.0})])
    (events,) = (logdir / "train").glob("events.out.tfevents.*")
    records = list(read_event_records(events))
    events.write_bytes(events.read_bytes()[:-6])  # a job killed while writing
    assert list(read_event_records(events)) == records[:-1]
    assert read_curves(logdir)["train"]["loss"] == [(1, 2.0)]
    assert struct.unpack("<Q", events.read_bytes()[:8])[0] == len(records[0])


def test_user_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--out", str(tmp_path / "x.png")]) == 1
    assert "no tensorboard event files (train with fairseq-train --tensorboard-logdir" in capsys.readouterr().err
    _write(tmp_path / "tb", "valid", [(5, {"loss": 1.5})])
    assert main([str(tmp_path / "tb"), "--out", str(tmp_path / "x.png"), "--metrics", "accuracy"]) == 1
    assert "no curve for ['accuracy']; the event files have ['loss']" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
