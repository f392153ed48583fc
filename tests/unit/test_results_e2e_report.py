"""`interlock-demo e2e-report`: the report reads each run@2 document through core/.

The documents are real mock runs (in-process, milliseconds); a test that needs a refund
in a state the mock does not reach edits the document, as a run on live Stripe could
have produced it.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import RunSnapshot
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.exit_codes import ExitCode
from interlock_demo.reports import e2e_report
from interlock_demo.reports.e2e_report import CaseRun
from interlock_demo.settings.config import resolve

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _mock_doc(tmp_path: Path, scenario: str) -> dict[str, Any]:
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config)
    try:
        return engine.run(RunChoice(config, scenario, optional=OPTIONAL)).to_json()
    finally:
        engine.close()


@pytest.fixture(scope="module")
def hand_refund(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished mock run of hand-refund with the checked column."""
    return _mock_doc(tmp_path_factory.mktemp("mock"), "hand-refund")


def _row(report: str, case: str, column: str) -> list[str]:
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [case, column]:
            return cells
    raise AssertionError(f"no row for {case}/{column}")


def test_a_refund_that_requires_action_counts_against_the_payment(
    tmp_path: Path, hand_refund: dict[str, Any]
) -> None:
    """A hand refund waiting in requires_action is money out, as the gate counts it: the
    report shows it beside the agent's, and the money tie compares it too."""
    doc = copy.deepcopy(hand_refund)
    standard = doc["columns"][0]
    [hand] = [r for r in standard["stripe"]["refunds"] if r["by"] == "hand"]
    hand["status"] = "requires_action"
    run = CaseRun("standalone", "hand-refund", ExitCode.OK, RunSnapshot.from_json(doc), tmp_path)
    report = e2e_report.render([run], generated_at=WHEN, parallel=1)
    cell = _row(report, "hand-refund", "standard")[2]
    assert cell.startswith("1 agent + 1 hand, $40.00;"), cell


def test_a_failed_refund_does_not_count(tmp_path: Path, hand_refund: dict[str, Any]) -> None:
    """A refund Stripe failed or canceled is not money out: the report leaves it out."""
    doc = copy.deepcopy(hand_refund)
    standard = doc["columns"][0]
    [hand] = [r for r in standard["stripe"]["refunds"] if r["by"] == "hand"]
    hand["status"] = "failed"
    standard["stripe"]["refunded_total"] -= hand["amount"]
    run = CaseRun("standalone", "hand-refund", ExitCode.OK, RunSnapshot.from_json(doc), tmp_path)
    report = e2e_report.render([run], generated_at=WHEN, parallel=1)
    assert _row(report, "hand-refund", "standard")[2].startswith("1 agent, $20.00;")


def test_exit_code_names_the_worst_run(tmp_path: Path, hand_refund: dict[str, Any]) -> None:
    """All as predicted is 0; a deviation 1; a run without its JSON 3 (it could not finish)."""
    fine = CaseRun(
        "standalone", "hand-refund", ExitCode.OK, RunSnapshot.from_json(hand_refund), tmp_path
    )
    deviating = copy.deepcopy(hand_refund)
    deviating["columns"][1]["as_predicted"] = False
    off = CaseRun(
        "temporal", "hand-refund", ExitCode.DEVIATION, RunSnapshot.from_json(deviating), tmp_path
    )
    lost = CaseRun.read("temporal", "revoked", ExitCode.UNFINISHED, tmp_path)
    assert e2e_report.exit_code([fine]) == ExitCode.OK
    assert e2e_report.exit_code([fine, off]) == ExitCode.DEVIATION
    assert e2e_report.exit_code([fine, off, lost]) == ExitCode.UNFINISHED


def test_the_report_says_right_or_wrong_as_predicted(
    tmp_path: Path, hand_refund: dict[str, Any]
) -> None:
    """Each cell and each run say what they came to in the run JSON's words: the standard
    agent's $40 is wrong, as predicted; a column the truth table predicted otherwise is not
    as predicted, in bold, and its run names it."""
    deviating = copy.deepcopy(hand_refund)
    deviating["columns"][2]["as_predicted"] = False
    runs = [
        CaseRun(
            "standalone", "hand-refund", ExitCode.OK, RunSnapshot.from_json(hand_refund), tmp_path
        ),
        CaseRun(
            "temporal",
            "hand-refund",
            ExitCode.DEVIATION,
            RunSnapshot.from_json(deviating),
            tmp_path,
        ),
    ]
    report = e2e_report.render(runs, generated_at=WHEN, parallel=1)
    standard = _row(report, "hand-refund", "standard")
    assert standard[2].endswith("; wrong (as predicted)"), standard
    assert _row(report, "hand-refund", "interlock")[2].endswith("; right")
    checked = _row(report, "hand-refund", "checked")
    assert checked[2].endswith("; right"), checked
    assert checked[3].endswith("; **not as predicted**"), checked
    (summary,) = [line for line in report.splitlines() if line.startswith("| hand-refund | `")]
    assert "wrong (as predicted)" in summary.split("|")[2], summary
    assert "not as predicted in checked" in summary.split("|")[3], summary


def test_stdout_that_is_not_a_run_is_a_problem_named_in_words(tmp_path: Path) -> None:
    """JSON on stdout that is not a run@2 document makes the run unfinished, saying why."""
    (tmp_path / "stdout.json").write_text('{"schema": "something/else"}')
    run = CaseRun.read("standalone", "revoked", ExitCode.OK, tmp_path)
    assert run.run is None
    assert run.problem is not None and "not an interlock-demo/run@2 document" in run.problem
    assert e2e_report.exit_code([run]) == ExitCode.UNFINISHED


def test_the_differences_quote_the_lines_their_fields_pick(tmp_path: Path) -> None:
    """The after-answer section quotes the checked column's stopping re-check and
    interlock's lookup that found its refund, chosen by their fields, whatever their words."""
    doc = _mock_doc(tmp_path, "after-answer")
    for col in doc["columns"]:
        for event in col["events"]:
            event["text"] = f"«{event['text'][::-1]}»"
    run = CaseRun("standalone", "after-answer", ExitCode.OK, RunSnapshot.from_json(doc), tmp_path)
    report = e2e_report.render([run], generated_at=WHEN, parallel=1)
    [checked] = [c for c in doc["columns"] if c["name"] == "checked"]
    [interlock] = [c for c in doc["columns"] if c["name"] == "interlock"]
    [stop] = [e["text"] for e in checked["events"] if e["data"].get("failed_check")]
    [found] = [e["text"] for e in interlock["events"] if e["data"].get("found")]
    assert f'said "{stop}"' in report
    assert found in report
    assert "(no re-check line)" not in report and "(no lookup line)" not in report
