"""Run the project's fault and bad-input suites, or its reliability harness, and print the figures
docs/reliability.md quotes.

    python scripts/reliability_report.py            # the default suites (about 5 minutes on 2 cores)
    python scripts/reliability_report.py --fast     # without the SIGKILL resume runs (tests/test_resume.py)
    python scripts/reliability_report.py tests/test_reliability_inputs.py   # chosen files
    python scripts/reliability_report.py --cases    # every case of tests/reliability_harness.py (about 2 minutes)
    python scripts/reliability_report.py --cases --ci -v   # the suite's subset, one line per case

Suites: each test id is one bad input or one fault (the files are parametrized that way), and every case asserts
the exit status, a one-line error naming the file or flag, and that nothing was written or lost; so "passed" is
the number of inputs that got a clear error with nothing lost. The report is a table per file and a total,
plus the same as JSON with ``--json FILE``. Exit status: 0 when every case passed, 1 otherwise.

Cases (``--cases``): the harness builds its real inputs (the Wikipedia sample prepared for pre-training, an
etc_tiny model pre-trained on it for 20 updates, structured data and models fine-tuned from it, as the test
suite's fixtures do) under a temporary directory, runs every case and prints the table of outcomes (one-line
errors, tracebacks, accepted, silently wrong, inputs lost, code run, ...). Exit status 0 when every bad input
got a one-line error and every good one was accepted, with nothing lost and nothing run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: the fault and bad-input suites, in the order docs/reliability.md describes them
SUITES = (
    "tests/test_reliability_inputs.py",
    "tests/test_bad_input.py",
    "tests/test_bad_input_finetune.py",
    "tests/test_reliability_checkpoints.py",
    "tests/test_resume.py",
)
SLOW = ("tests/test_resume.py",)


def _module_name(test_file: str) -> str:
    """``tests/test_x.py`` -> ``tests.test_x`` (how junit names the module)."""
    return str(Path(test_file).with_suffix("")).replace(os.sep, ".")


def run_suites(files, extra_args=()) -> dict:
    """Run ``files`` in one pytest process with a junit report; returns ``{file: counts}`` and the wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "report.xml"
        cmd = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra_args]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if not junit.is_file():
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"pytest wrote no report (exit status {proc.returncode})")
        root = ET.parse(junit).getroot()
    per_file: "OrderedDict[str, dict]" = OrderedDict((f, dict(cases=0, passed=0, failed=0, skipped=0, seconds=0.0)) for f in files)
    for tc in root.iter("testcase"):
        # junit names the test module in "classname" ("tests.test_x" or "tests.test_x.TestClass")
        module = tc.get("classname", "")
        key = next((f for f in files if module == _module_name(f) or module.startswith(_module_name(f) + ".")), module)
        row = per_file.setdefault(key, dict(cases=0, passed=0, failed=0, skipped=0, seconds=0.0))
        row["cases"] += 1
        row["seconds"] += float(tc.get("time", 0.0))
        if tc.find("skipped") is not None:
            row["skipped"] += 1
        elif tc.find("failure") is not None or tc.find("error") is not None:
            row["failed"] += 1
        else:
            row["passed"] += 1
    return {"files": per_file, "wall_seconds": wall, "pytest_exit_status": proc.returncode}


def run_harness(ci: bool, verbose: bool, json_path) -> int:
    """``--cases``: build the harness's inputs, run its cases, print the table (see the module docstring)."""
    sys.path.insert(0, str(REPO / "tests"))
    import conftest
    import reliability_harness as harness

    from etc_fairseq.prepare.pretrain import prepare_pretraining
    from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

    harness.warm_imports()
    cache = Path(os.environ.get("ETC_FAIRSEQ_CACHE", REPO / ".cache")).expanduser()
    with tempfile.TemporaryDirectory(prefix="etc-reliability-") as tmp:
        work = Path(tmp)
        pre = prepare_pretraining([fetch_wikipedia_sample(cache)], work / "pretrain", tokenizer="spm",
                                  vocab_size=1000, **conftest.PRETRAIN_FIXTURE_ARGS)
        argv = [str(pre.bin_dir), *conftest.ETC_TINY_PRETRAIN_ARGS, "--save-dir", str(work / "pretrained")]
        status, out, err = harness._in_child(lambda: harness._cli("fairseq-train", argv), harness.TIME_LIMIT)
        if status != 0:
            raise SystemExit(f"pre-training the harness's model failed:\n{(out + err)[-3000:]}")
        fx = harness.build_fixtures(work, Path(pre.bin_dir), work / "pretrained" / "checkpoint_last.pt")
        cases = [c for c in harness.CASES if c.ci or not ci]
        t0 = time.monotonic()
        outcomes = harness.run_cases(fx, cases)
        wall = time.monotonic() - t0
    if verbose:
        print(harness.outcome_lines(outcomes))
    print(harness.table(outcomes))
    print(f"({len(outcomes)} cases in {wall:.0f} s)")
    if json_path:
        json_path.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n", encoding="utf-8")
    good = all(o.outcome in ("one-line error", "accepted") and not o.input_lost and not o.code_run for o in outcomes)
    return 0 if good else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help=f"test files (default: {' '.join(SUITES)})")
    p.add_argument("--fast", action="store_true", help=f"leave out {', '.join(SLOW)}")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--cases", action="store_true", help="run the harness's cases (tests/reliability_harness.py)")
    p.add_argument("--ci", action="store_true", help="with --cases: only the subset the test suite runs")
    p.add_argument("-v", "--verbose", action="store_true", help="with --cases: one line per case")
    args = p.parse_args(argv)
    if args.cases:
        return run_harness(args.ci, args.verbose, args.json)
    files = args.files or [f for f in SUITES if not (args.fast and f in SLOW)]
    report = run_suites(files)
    total = dict(cases=0, passed=0, failed=0, skipped=0)
    print(f"{'file':42s} {'cases':>6s} {'passed':>7s} {'failed':>7s} {'skipped':>8s} {'seconds':>8s}")
    for f, row in report["files"].items():
        print(f"{f:42s} {row['cases']:6d} {row['passed']:7d} {row['failed']:7d} {row['skipped']:8d} {row['seconds']:8.1f}")
        for k in total:
            total[k] += row[k]
    print(f"{'total':42s} {total['cases']:6d} {total['passed']:7d} {total['failed']:7d} {total['skipped']:8d} "
          f"{report['wall_seconds']:8.1f} (wall)")
    report["total"] = total
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0 if total["failed"] == 0 and report["pytest_exit_status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
