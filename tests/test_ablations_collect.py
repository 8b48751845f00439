"""examples/ablations/collect.py reads the logs examples/ablations/run.sh writes.

The logs are written here by fairseq's own progress bar (the ``simple`` format fairseq-train and
fairseq-validate print validation lines with), with random metric values; the collected means, spreads,
final values and learning curves must be those of the values written.
"""
import json
import logging
import random
import statistics
from pathlib import Path

import pytest

from examples.ablations import collect


def _write_log(path: Path, rows, epoch=1, noise=True):
    """Write one validation line per ``rows`` entry (a stats dict) with fairseq's SimpleProgressBar, between
    other log lines, as fairseq-train / fairseq-validate do."""
    from fairseq.logging import progress_bar

    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    log = progress_bar.logger
    old_level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        for stats in rows:
            if noise:  # a training progress line as fairseq-train logs it (tag train_inner)
                bar = progress_bar.SimpleProgressBar(range(250), epoch=1, log_interval=10)
                for i, _ in enumerate(bar):
                    if i == 9:
                        bar.log({"loss": 5.1, "accuracy": stats["accuracy"] / 2, "num_updates": stats["num_updates"]},
                                tag="train_inner", step=10)
                        break
            bar = progress_bar.SimpleProgressBar([], epoch=epoch, prefix="valid on 'valid' subset")
            bar.print(stats, tag="valid", step=stats.get("num_updates"))
        log.info("done training in 12.0 seconds")
    finally:
        log.removeHandler(handler)
        handler.close()
        log.setLevel(old_level)


def _meta(run_dir: Path, long_len: int, rng):
    d = run_dir / f"data-structure-{long_len}"
    d.mkdir(parents=True)
    counts = {"records": 300, "mean_long_tokens": rng.uniform(400, 2000), "longer_than_512": 300,
              "mean_answer_distance": 700.0, "answers_dropped": rng.randrange(5), "truncated": 3,
              "overlap_accuracy": 22.5, "overlap_mrr": 40.5, "random_accuracy": 2.7, "random_mrr": 11.2}
    (d / "valid.meta.json").write_text(json.dumps({"counts": counts}))
    return counts


def test_collect_reads_fairseq_logs(tmp_path):
    rng = random.Random(7)
    seeds = ["1", "2", "3"]
    written = {}  # (arm, seed) -> list of stats
    arms = ["structure", "flat", "noglobals", "roberta512", "nocpc", "nohardg2l", "long512", "long4096"]
    for arm in arms:
        for s in seeds:
            rows = []
            for u in (50, 100, 150):
                rows.append({"loss": round(rng.uniform(3, 6), 3), "accuracy": round(rng.uniform(0, 60), 3),
                             "mrr": round(rng.uniform(5, 70), 3), "lost": round(rng.uniform(0, 5), 3),
                             "wps": 0, "num_updates": u})
            written[arm, s] = rows
            _write_log(tmp_path / "ft" / f"{arm}-{s}.log", rows)
    mlm = {}
    for arm in ("lifted", "scratch"):
        for s in seeds:
            row = {"loss": 7.0, "mlm_loss": round(rng.uniform(6, 10), 3), "mlm_accuracy": round(rng.uniform(5, 20), 3)}
            mlm[arm, s] = row
            _write_log(tmp_path / "lift" / f"{arm}-{s}.valid.log", [row], noise=False)
    for n in (512, 2048, 8192):
        for s in seeds:
            row = {"mlm_loss": round(rng.uniform(6, 10), 3), "mlm_accuracy": round(rng.uniform(5, 20), 3), "cpc_loss": "nan"}
            mlm[f"long{n}", s] = row
            _write_log(tmp_path / "extrapolation" / f"long{n}-{s}.log", [row], noise=False)
    counts = {n: _meta(tmp_path, n, rng) for n in (512, 2048, 4096)}

    out, png = tmp_path / "results.json", tmp_path / "results.png"
    rc = collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "length", "cpc", "g2l", "lift",
                       "extrapolation", "--seeds", *seeds, "--long", "2048", "--extra-lengths", "512", "4096",
                       "--extrapolation-lengths", "512", "2048", "8192", "--out", str(out), "--png", str(png),
                       "--markdown", str(tmp_path / "table.md")])
    assert rc == 0
    res = json.loads(out.read_text())
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def check(arm_json, arm):
        finals = [written[arm, s][-1] for s in seeds]
        assert arm_json["accuracy"]["mean"] == pytest.approx(statistics.mean(f["accuracy"] for f in finals))
        assert arm_json["accuracy"]["std"] == pytest.approx(statistics.stdev(f["accuracy"] for f in finals))
        assert arm_json["mrr"]["mean"] == pytest.approx(statistics.mean(f["mrr"] for f in finals))
        assert {s: arm_json["seeds"][s]["accuracy"] for s in seeds} == {s: written[arm, s][-1]["accuracy"] for s in seeds}
        assert [p["updates"] for p in arm_json["curve"]] == [50, 100, 150]
        assert [p["updates"] for p in arm_json["train_first_epoch"]] == [50, 100, 150]
        assert arm_json["train_first_epoch"][1]["accuracy"]["mean"] == pytest.approx(
            statistics.mean(written[arm, s][1]["accuracy"] / 2 for s in seeds))
        for i, p in enumerate(arm_json["curve"]):
            assert p["accuracy"]["mean"] == pytest.approx(statistics.mean(written[arm, s][i]["accuracy"] for s in seeds))
            assert p["accuracy"]["min"] == min(written[arm, s][i]["accuracy"] for s in seeds)

    ab = res["ablations"]
    assert list(ab["structure"]["arms"]) == ["structure", "flat", "noglobals", "roberta512"]
    for arm in ("structure", "flat", "noglobals", "roberta512"):
        check(ab["structure"]["arms"][arm], arm)
    check(ab["cpc"]["arms"]["nocpc"], "nocpc")
    check(ab["g2l"]["arms"]["nohardg2l"], "nohardg2l")
    assert list(ab["length"]["arms"]) == ["long512", "long2048", "long4096"]
    check(ab["length"]["arms"]["long512"], "long512")
    check(ab["length"]["arms"]["long2048"], "structure")  # the main length is the structure arm itself
    check(ab["length"]["arms"]["long4096"], "long4096")
    for arm in ("lifted", "scratch"):
        vals = [mlm[arm, s]["mlm_loss"] for s in seeds]
        assert ab["lift"]["arms"][arm]["mlm_loss"]["mean"] == pytest.approx(statistics.mean(vals))
        assert ab["lift"]["arms"][arm]["mlm_loss"]["std"] == pytest.approx(statistics.stdev(vals))
    for n in (512, 2048, 8192):
        vals = [mlm[f"long{n}", s]["mlm_accuracy"] for s in seeds]
        assert ab["extrapolation"]["arms"][f"long{n}"]["mlm_accuracy"]["mean"] == pytest.approx(statistics.mean(vals))
    assert res["nextsent_valid"]["2048"]["overlap_accuracy"] == counts[2048]["overlap_accuracy"]
    # the README table: one row per arm (4 + 3 + 2 + 2 + 2 + 3) plus one baseline row per length
    table = (tmp_path / "table.md").read_text().splitlines()
    assert len(table) == 2 + 16 + 3
    flat = ab["structure"]["arms"]["flat"]
    row = next(r for r in table if r.startswith("| structure | flat:"))
    assert f"{flat['accuracy']['mean']:.2f} +- {flat['accuracy']['std']:.2f}" in row
    assert " ".join(f"{written['flat', s][-1]['accuracy']:.2f}" for s in seeds) in row
    assert res["nextsent_valid"]["512"]["answers_dropped"] == counts[512]["answers_dropped"]


def test_collect_names_the_bad_log(tmp_path, capsys):
    rng = random.Random(1)
    _meta(tmp_path, 2048, rng)
    _write_log(tmp_path / "ft" / "structure-1.log", [{"loss": 4.0, "accuracy": 10.0, "mrr": 20.0, "num_updates": 5}])
    (tmp_path / "ft" / "flat-1.log").write_text("Traceback (most recent call last):\n  RuntimeError: boom\n")
    rc = collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "--seeds", "1",
                       "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not (tmp_path / "r.json").exists()
    assert err.startswith("error: ") and "flat-1.log" in err and "valid on" in err and len(err.splitlines()) == 1
    # only the g2l ablation's arms are read when only it is asked for: noglobals/roberta512 logs are not needed
    _write_log(tmp_path / "ft" / "nohardg2l-1.log", [{"loss": 4.0, "accuracy": 30.0, "mrr": 40.0, "num_updates": 5}])
    assert collect.main(["--run-dir", str(tmp_path), "--ablations", "g2l", "--seeds", "1",
                         "--out", str(tmp_path / "r.json")]) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["ablations"]["g2l"]["arms"]["nohardg2l"]["accuracy"] == {"mean": 30.0, "std": 0.0, "min": 30.0, "max": 30.0}
    # --arms: only the arms that ran (the missing flat / roberta512 logs are then not needed), in display order
    _write_log(tmp_path / "ft" / "noglobals-1.log", [{"loss": 4.5, "accuracy": 6.0, "mrr": 19.0, "num_updates": 5}])
    assert collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "--seeds", "1", "--arms", "noglobals",
                         "structure", "--out", str(tmp_path / "r.json")]) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert list(res["ablations"]["structure"]["arms"]) == ["structure", "noglobals"]
    assert res["ablations"]["structure"]["arms"]["noglobals"]["accuracy"]["mean"] == 6.0
    assert collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "--seeds", "1", "--arms", "flatt",
                         "--out", str(tmp_path / "r.json")]) == 1
    assert "--arms: unknown fine-tuning arm 'flatt'" in capsys.readouterr().err


def test_collect_one_arm(tmp_path):
    rows = [{"loss": 5.0, "accuracy": 2.0, "mrr": 10.0, "num_updates": 100},
            {"loss": 4.0, "accuracy": 7.5, "mrr": 20.0, "num_updates": 200}]
    _write_log(tmp_path / "ft" / "structure-1.log", rows)
    out = tmp_path / "one.json"
    assert collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "--arm", "structure",
                         "--seeds", "1", "--out", str(out)]) == 0
    arm = json.loads(out.read_text())["structure"]
    assert [(p["updates"], p["accuracy"]["mean"]) for p in arm["curve"]] == [(100, 2.0), (200, 7.5)]
    assert arm["seeds"]["1"]["accuracy"] == 7.5


def test_collect_names_the_probe(tmp_path):
    """Results on data prepared with ``etc-prepare nextsent --probe`` say so in the JSON and in every
    accuracy row of the table; data of the task itself (no probe in prepare.json) do not."""
    rng = random.Random(3)
    rows = [{"loss": 5.0, "accuracy": 40.0, "mrr": 60.0, "num_updates": 100}]
    _write_log(tmp_path / "ft" / "structure-1.log", rows)
    _meta(tmp_path, 1024, rng)
    prep = tmp_path / "data-structure-1024" / "prepare.json"

    def run():
        out, md = tmp_path / "r.json", tmp_path / "t.md"
        assert collect.main(["--run-dir", str(tmp_path), "--ablations", "structure", "--arms", "structure",
                             "--seeds", "1", "--long", "1024", "--out", str(out), "--markdown", str(md)]) == 0
        return json.loads(out.read_text()), md.read_text().splitlines()

    prep.write_text(json.dumps({"dataset": "nextsent", "probe": None}))
    res, table = run()
    assert "probe" not in res and "PROBE" not in res["task"]
    assert not any("probe" in r for r in table)
    prep.write_text(json.dumps({"dataset": "nextsent", "probe": "copy"}))
    res, table = run()
    assert res["probe"] == "copy" and "PROBE copy" in res["task"]
    row = next(r for r in table if r.startswith("| structure | structure:"))
    assert "held-out accuracy % / MRR % (copy probe)" in row


def test_one_arm_keeps_the_support_accuracy_when_logged(tmp_path):
    rows = {s: [{"loss": 4.0, "accuracy": 10.0 * int(s), "mrr": 30.0, "lost": 1.0, "support_accuracy": 40.0 + int(s),
                 "num_updates": u} for u in (100, 200)] for s in ("1", "2")}
    for s, r in rows.items():
        _write_log(tmp_path / "ft" / f"support1-{s}.log", r)
    _write_log(tmp_path / "ft" / "structure-1.log", [{"loss": 4.0, "accuracy": 5.0, "mrr": 20.0, "num_updates": 100}])
    out = tmp_path / "one.json"
    assert collect.main(["--run-dir", str(tmp_path), "--arm", "support1", "--ablations", "x", "--seeds", "1", "2",
                         "--out", str(out)]) == 0
    arm = json.loads(out.read_text())["support1"]
    assert {s: v["support_accuracy"] for s, v in arm["seeds"].items()} == {"1": 41.0, "2": 42.0}
    assert arm["accuracy"]["mean"] == 15.0 and arm["label"] == collect.ARM_LABELS["support1"]
    assert collect.main(["--run-dir", str(tmp_path), "--arm", "structure", "--ablations", "x", "--seeds", "1",
                         "--out", str(out)]) == 0
    assert "support_accuracy" not in json.loads(out.read_text())["structure"]["seeds"]["1"]


def test_one_arm_of_a_task_without_mrr(tmp_path):
    """A WikiHop run of examples/wikihop/run.sh: fairseq-train's validation lines (accuracy, no MRR), then
    fairseq-validate's line for the best checkpoint (no num_updates), which is not a point of the curve."""
    for s, accs in (("1", (25.0, 60.0)), ("2", (30.0, 70.0))):
        path = tmp_path / "ft" / f"as-{s}.log"
        _write_log(path, [{"loss": 2.0, "accuracy": a, "num_updates": u} for a, u in zip(accs, (100, 200))])
        _write_log(tmp_path / "best.log", [{"loss": 1.5, "accuracy": 99.0}], noise=False)
        path.write_text(path.read_text() + (tmp_path / "best.log").read_text())
    out = tmp_path / "one.json"
    assert collect.main(["--run-dir", str(tmp_path), "--arm", "as", "--seeds", "1", "2",
                         "--out", str(out)]) == 0
    arm = json.loads(out.read_text())["as"]
    assert {s: v["accuracy"] for s, v in arm["seeds"].items()} == {"1": 60.0, "2": 70.0}
    assert [(p["updates"], p["accuracy"]["mean"]) for p in arm["curve"]] == [(100, 27.5), (200, 65.0)]
    assert "mrr" not in arm and "mrr" not in arm["seeds"]["1"] and "mrr" not in arm["curve"][0]
    _write_log(tmp_path / "ft" / "bad-1.log", [{"loss": 1.5, "accuracy": 99.0}], noise=False)
    assert collect.main(["--run-dir", str(tmp_path), "--arm", "bad", "--ablations", "x", "--seeds", "1",
                         "--out", str(out)]) == 1
