"""The reliability harness (tests/reliability_harness.py) at the suite's size: its ``ci`` cases -- one per kind of
broken input and command, and the unchanged inputs they are compared with -- on the Wikipedia fixtures. Every bad
input must be refused in one line naming its file and field; no traceback, hang, lost input or payload run; every
good input accepted with the right result. ``python scripts/reliability_report.py --cases`` runs them all and
prints the table docs/reliability.md quotes; a test below holds that table's rows to the cases it lists."""
import re
from pathlib import Path

import pytest

import reliability_harness as harness

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fixtures(pretrain_data, etc_tiny_checkpoint, tmp_path_factory):
    harness.warm_imports()
    return harness.build_fixtures(tmp_path_factory.mktemp("harness"), pretrain_data, etc_tiny_checkpoint)


CI_CASES = [c for c in harness.CASES if c.ci]


def test_the_suite_runs_a_case_of_every_group_and_good_and_bad_inputs():
    assert {c.group for c in CI_CASES} == {c.group for c in harness.CASES} - {
        "checkpoint, fairseq-train --restore-file", "checkpoint, etc-predict", "prepared data, etc-predict"}
    assert any(c.names is None for c in CI_CASES) and any(c.names is not None for c in CI_CASES)
    assert len({c.name for c in harness.CASES}) == len(harness.CASES)


@pytest.mark.parametrize("case", CI_CASES, ids=[c.name for c in CI_CASES])
def test_case(case, fixtures):
    outcome = harness.run_case(case, fixtures)
    want = "one-line error" if case.names is not None else "accepted"
    assert (outcome.outcome, outcome.input_lost, outcome.code_run) == (want, False, False), outcome


def test_a_bug_keeps_its_traceback_while_a_refusal_is_one_line(fixtures, monkeypatch):
    """The harness tells a bug from a refusal: a plain ValueError raised inside fairseq-validate's main (a bug
    planted in the task) is a traceback, not a tidy line; the same place raising an EtcError is one line."""
    from etc_fairseq.errors import InputFormatError
    from etc_fairseq.finetune.structured import task

    case = next(c for c in harness.CASES if c.name == "unchanged checkpoint / fairseq-validate")
    for error, want in ((ValueError("DATA/x: planted bug"), "traceback"),
                        (InputFormatError("DATA/x: planted refusal"), "one-line error")):
        def planted(*args, error=error, **kwargs):
            raise error
        monkeypatch.setattr(task, "hold_label_info", planted)
        bad = harness.Case(case.name, case.group, case.make, names=r"DATA/x: planted")
        assert harness.run_case(bad, fixtures).outcome == want


def test_the_docs_table_lists_the_harness_groups():
    """docs/reliability.md quotes the table of ``scripts/reliability_report.py --cases``: one row per group of
    CASES, with as many cases as CASES holds (the outcomes come from the run shown there)."""
    text = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| ([^|]+?) \| (\d+) \|", text, re.M))
    groups = {}
    for c in harness.CASES:
        groups[c.group] = groups.get(c.group, 0) + 1
    for group, n in groups.items():
        assert rows.get(group) == str(n), (group, n, rows.get(group))
    assert rows.get("total") == str(len(harness.CASES))
