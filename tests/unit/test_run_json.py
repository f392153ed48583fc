"""The run@2 document reads back into the run model: `from_json` is `to_json`'s inverse.

Reports (e2e-report, results) read run documents a headless process printed; they read them
through core/ this way, so a field is named in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock import CrashPoint, GateEvent
from interlock.testing import event_problem
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
from interlock_demo.settings import resolve
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
        return engine.run(RunChoice(config, scenario, checked=True)).to_json()
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


def test_another_document_is_refused_in_words() -> None:
    """A document of another schema is a ValueError that says what to read instead."""
    with pytest.raises(ValueError, match=f"not an {SCHEMA} document"):
        RunSnapshot.from_json({"schema": "interlock-demo/run@0"})
