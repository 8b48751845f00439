"""benchmarks/gpu_suite.py cannot rot before a GPU sees it: ``--device cpu --quick`` runs every part CPU allows
(FlexAttention forward-only: torch has no CPU backward for it), in a fresh process, without importing fairseq,
and writes one JSON whose figures are consistent: exactness within the tolerances the suite states, every
attention implementation and peer measured, every model stepped, one compilation per shape, a capacity probe.
The command is the one docs/gpu.md shows. When the smoke part finds no kernel options that compile, the flex
path is skipped everywhere and the model trains with the blocked kernel."""
import json
import subprocess
import sys

from conftest import REPO


def test_quick_cpu_run_writes_one_consistent_json(tmp_path):
    out = tmp_path / "suite.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite", "--device", "cpu", "--quick", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["device"]["type"] == "cpu" and r["versions"]["torch"] and r["versions"]["transformers"]
    assert r["fairseq_imported"] is False  # the GPU machine has no fairseq
    parts = r["parts"]
    assert {p: parts[p]["status"] for p in parts} == {p: "ok" for p in
                                                      ("smoke", "exactness", "attention", "model", "compile", "capacity")}
    assert parts["smoke"]["chosen"] == {} and parts["smoke"]["rows"][0]["model_step_ms"] > 0  # torch's defaults
    for case in parts["exactness"]["cases"]:
        for impl in ("blocked", "flex"):
            assert case["fp32"][impl]["within_tolerance"], (case["long_len"], impl, case["fp32"][impl])
        assert case["fp32"]["blocked"]["backward"] and not case["fp32"]["flex"]["backward"]
        assert any(k.startswith("grad_long_rel") for k in case["fp32"]["blocked"]["max_abs_diff"])
    assert parts["exactness"]["cases"][0]["bf16"]["flex"]["within_tolerance"]
    rows = parts["attention"]["rows"]
    assert {row["impl"] for row in rows} == {"flex", "blocked", "sdpa", "longformer", "bigbird"}
    assert all(row["status"] == "ok" and row["time_ms"] > 0 and row["tflops"] > 0 for row in rows), rows
    assert "plan_build_ms" in next(row for row in rows if row["impl"] == "flex")
    models = {row["model"]: row for row in parts["model"]["rows"]}
    assert set(models) == {"etc_base", "modernbert_base", "bert_base"}
    assert all(row["status"] == "ok" and row["tokens_per_s"] > 0 for row in models.values()), models
    assert models["etc_base"]["attention"] == "blocked" and "per_token_cost_vs_bert_512" in models["etc_base"]
    c = parts["compile"]
    assert (c["compilations_5_batches"], c["compilations_after_new_length"], c["graph_breaks"]) == (1, 2, 0), c
    assert parts["capacity"]["longest_trained"] == 512


def test_isolated_parts_and_flex_skipped_when_no_kernel_options_work(tmp_path):
    """Every smoke try out of time (a limit of 10 ms): the attention part's flex row and the compile part say
    they were skipped, the other rows are measured. ``--isolate`` (the default on CUDA): a part in its own
    process returns its result to the JSON; one that outlives ``--part-limit-s`` is stopped and recorded."""
    def suite(name, *args):
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite", "--device", "cpu", "--quick", "--out",
                               str(out), "--isolate", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(out.read_text())
    done = suite("skipped", "--parts", "smoke", "attention", "compile", "--smoke-try-s", "0.01",
                 "--part-limit-s", "200")
    parts = done["parts"]
    assert list(parts) == ["smoke", "attention", "compile"]  # in the order given
    smoke = parts["smoke"]
    assert smoke["chosen"] is None and len(smoke["rows"]) == 4
    assert all(row["status"].startswith("failed: not done in") for row in smoke["rows"])
    rows = {row["impl"]: row for row in parts["attention"]["rows"]}
    assert parts["attention"]["status"] == "ok" and done["fairseq_imported"] is False
    assert rows["flex"]["status"].startswith("skipped: no kernel options")
    assert all(rows[impl]["status"] == "ok" for impl in ("blocked", "sdpa", "longformer", "bigbird"))
    assert parts["compile"]["skipped"].startswith("skipped: no kernel options")
    stopped = suite("stopped", "--parts", "attention", "--part-limit-s", "1")
    assert stopped["parts"]["attention"]["status"] == "failed: not done in 1 s (stopped)"
