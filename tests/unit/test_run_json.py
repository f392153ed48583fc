"""The run@2 document reads back into the run model: `from_json` is `to_json`'s inverse.

Reports (e2e-report, results) read run documents a headless process printed; they read them
through core/ this way, so a field is named in one place.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from interlock import ConfigError, GateEvent
from interlock.testing import CrashPoint, event_problem
from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import (
    SCHEMA,
    ClaimWait,
    Column,
    ColumnState,
    Event,
    RunSnapshot,
    WorkerInfo,
)
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.settings.config import resolve
from scenarios import TRUTH
from workers.protocol import GATE_CHECK, GATE_PREFIX, ColumnOutcome

CASES: dict[str, tuple[str, dict[str, bool]]] = {
    "hand-refund": ("hand-refund", {}),
    "revoked": ("revoked", {}),
    "after-answer": ("after-answer", {}),
    "after-answer+emulate-24h": ("after-answer", {"emulate_24h": True}),
    "after-answer+no-lookup": ("after-answer", {"no_lookup": True}),
}


def _mock_doc(home: Path, scenario: str, switches: dict[str, bool]) -> dict[str, Any]:
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(home)}, **switches)
    engine = Engine(config)
    try:
        return engine.run(RunChoice(config, scenario, optional=OPTIONAL)).to_json()
    finally:
        engine.close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_mock_run_reads_back_as_it_was_written(tmp_path: Path, case: str) -> None:
    """Every scenario's document, emulated rows included, survives from_json unchanged."""
    scenario, switches = CASES[case]
    doc = _mock_doc(tmp_path / "home", scenario, switches)
    assert doc["status"] == "finished" and doc["error"] is None
    snapshot = RunSnapshot.from_json(doc)
    assert snapshot.to_json() == doc
    interlock = snapshot.column("interlock")
    assert interlock is not None and interlock.state is ColumnState.DONE
    assert interlock.receipt is not None and interlock.verify is not None


def test_what_a_mock_run_leaves_empty_reads_back_too() -> None:
    """A real worker's pid and exit code, a claim wait (waited and simulated), an error and
    an outcome naming a re-approval: the fields a mock run leaves at null read back."""
    column = Column(
        name="interlock",
        title="Interlock",
        state=ColumnState.ERROR,
        workers=[WorkerInfo(4242, CrashPoint.BEFORE_SEND, 0.5, exit_code=-9, ended_at=1.25)],
        events=[Event(0.5, "start", "worker started", 4242, {"crash_point": "before-send"})],
        outcome=ColumnOutcome("refused", "approval revoked", None, "act_1", reapproves="act_0"),
        claim_wait=ClaimWait(1.0, 16.0, 15.0),
        error="the worker could not start",
    )
    data = column.to_json()
    assert Column.from_json(data).to_json() == data
    simulated = ClaimWait(1.0, 16.0, 15.0, simulated=True)
    assert ClaimWait.from_json(simulated.to_json()) == simulated


def test_run_at_2_events_carry_their_fields(tmp_path: Path) -> None:
    """Each event of a run@2 document has its fields beside its words: the decision's
    amount, the kill's crash point, the outage, the gate's events as `GateEvent` names
    them, and the outcome the worker reported."""
    doc = _mock_doc(tmp_path / "home", "revoked", {})
    assert doc["schema"] == "interlock-demo/run@2"
    for col in doc["columns"]:
        events = col["events"]
        assert all(set(e) == {"t", "kind", "text", "pid", "data"} for e in events)

        def fields(kind: str) -> list[dict[str, Any]]:
            return [e["data"] for e in events if e["kind"] == kind]  # noqa: B023

        assert [d["amount"] for d in fields("decision")] == [2000]
        assert [d["crash_point"] for d in fields("crash")] == ["before-send"]
        assert [d["outage"] for d in fields("outage")] == ["revoke"]
        assert fields("outcome")[-1] == col["outcome"]
    interlock = next(c for c in doc["columns"] if c["name"] == "interlock")
    for e in interlock["events"]:
        if e["kind"].startswith(GATE_PREFIX):
            kind = GateEvent(e["kind"].removeprefix(GATE_PREFIX))
            assert event_problem(kind, e["data"]) is None, e
    approval = [e["data"] for e in interlock["events"] if e["kind"] == GATE_CHECK][-1]
    assert (approval["name"], approval["passed"]) == ("approval", False)
    checked = next(c for c in doc["columns"] if c["name"] == "checked")
    assert [e["data"].get("failed_check") for e in checked["events"] if e["kind"] == "recheck"] == [
        "approval"
    ]


RIGHT, WRONG, DEVIATION = "right", "wrong (as predicted)", "not as predicted"
# What each case comes to, written out from docs/design.md §3 by hand: the run's verdict
# and each column's (right and wrong are the money; a false alarm is `truthful`'s to say).
VERDICTS: dict[str, tuple[str, dict[str, str]]] = {
    "hand-refund": (WRONG, {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT}),
    "revoked": (WRONG, {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT}),
    "after-answer": (RIGHT, {"standard": RIGHT, "interlock": RIGHT, "checked": RIGHT}),
    "after-answer+emulate-24h": (
        WRONG,
        {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT},
    ),
    "after-answer+no-lookup": (RIGHT, {"standard": RIGHT, "interlock": RIGHT, "checked": RIGHT}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_says_what_it_came_to_and_each_column_too(tmp_path: Path, case: str) -> None:
    """The document says, for the run and for each column, whether it came out right, wrong
    as the truth table predicts, or not as predicted; the emulated rows predict their own."""
    scenario, switches = CASES[case]
    doc = _mock_doc(tmp_path / "home", scenario, switches)
    run_verdict, columns = VERDICTS[case]
    assert (doc["as_predicted"], doc["verdict"]) == (True, run_verdict)
    assert {c["name"]: c["verdict"] for c in doc["columns"]} == columns


def test_a_deviation_is_not_as_predicted_in_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column the truth table predicted otherwise is "not as predicted", and so is the run
    it is in, whatever the other columns came to."""
    row = TRUTH[("revoked", "")]
    monkeypatch.setitem(TRUTH, ("revoked", ""), {**row, "interlock": row["standard"]})
    doc = _mock_doc(tmp_path / "home", "revoked", {})
    assert (doc["as_predicted"], doc["verdict"]) == (False, DEVIATION)
    verdicts = {c["name"]: c["verdict"] for c in doc["columns"]}
    assert verdicts == {"standard": WRONG, "interlock": DEVIATION, "checked": RIGHT}


def test_a_document_written_before_the_verdicts_reads_back_with_them(tmp_path: Path) -> None:
    """A run@2 document without the verdict fields (as `results/` holds them) reads back,
    and its verdicts follow from each column's `as_predicted` and `ok`."""
    doc = _mock_doc(tmp_path / "home", "hand-refund", {})
    older = copy.deepcopy(doc)
    del older["as_predicted"], older["verdict"]
    for col in older["columns"]:
        del col["verdict"]
    assert RunSnapshot.from_json(older).to_json() == doc


def test_no_verdict_where_the_truth_table_does_not_apply() -> None:
    """A column not judged yet (or a sweep cell's, which no row predicts) and one a person
    re-approved have no verdict, and neither has a run with such a column."""
    judged = Column(name="standard", title="Standard", as_predicted=True, ok=False)
    unjudged = Column(name="checked", title="Checked")
    reapproved = Column(
        name="interlock",
        title="Interlock",
        outcome=ColumnOutcome("sent", None, "re_2", "act_2", reapproves="act_1"),
        as_predicted=True,
        ok=False,
    )
    assert judged.to_json()["verdict"] == WRONG
    assert unjudged.to_json()["verdict"] is None
    assert reapproved.to_json()["verdict"] is None
    for other in (unjudged, reapproved):
        run = RunSnapshot.from_json(
            {**_empty_run(), "columns": [judged.to_json(), other.to_json()]}
        )
        assert (run.as_predicted, run.verdict) == (None, None)
        assert (run.to_json()["as_predicted"], run.to_json()["verdict"]) == (None, None)


def _empty_run() -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "run_id": "run_000000000000",
        "mode": "mock",
        "engine": "standalone",
        "scenario": "hand-refund",
        "title": "Hand refund during the outage",
        "status": "finished",
        "emulated": [],
        "settings": {},
        "started_at": "2026-01-01T00:00:00.000+00:00",
        "finished_at": None,
        "elapsed_s": 0.0,
        "error": None,
        "notes": [],
        "columns": [],
    }


def test_another_document_is_refused_in_words() -> None:
    """A document of another schema is a ValueError that says what to read instead."""
    with pytest.raises(ValueError, match=f"not an {SCHEMA} document"):
        RunSnapshot.from_json({"schema": "interlock-demo/run@0"})


def test_a_worker_killed_at_an_unknown_crash_point_is_refused_in_words() -> None:
    """A document naming a crash point no worker has is refused, naming the crash points."""
    data = WorkerInfo(4242, CrashPoint.BEFORE_SEND, 0.5, exit_code=-9, ended_at=1.25).to_json()
    data["crash_point"] = "before-lunch"
    with pytest.raises(ConfigError, match=r"unknown crash point 'before-lunch'.*before-send"):
        WorkerInfo.from_json(data)
