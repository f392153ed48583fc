"""Mock mode: the same scenarios in-process, simulated crashes, waits shown and not waited.

The engine runs the same worker code on the in-memory payments model; nothing is spawned.
The expectations are the hand-written docs/design.md §3 table of the end-to-end tests
(`tests/helpers/headless.py`).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from interlock.testing import CrashPoint
from interlock_demo.core.columns import OPTIONAL, ColumnKind
from interlock_demo.core.run import Clock, Ids
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.settings.config import resolve
from scenarios import SWEEP_CRASH_POINTS, sweep_scenario
from tests.helpers.headless import SWITCH, TABLE
from tests.helpers.pacing import HoldingPacer

RUN_DEADLINE_S = 30.0
FEW_SECONDS = 5.0
CASE_FLAGS: dict[str, dict[str, bool]] = {
    "hand-refund": {},
    "revoked": {},
    "after-answer": {},
    "after-answer+emulate-24h": {"emulate_24h": True},
    "after-answer+no-lookup": {"no_lookup": True},
}


def _mock_run(
    tmp_path: Path, case: str, optional: frozenset[ColumnKind] = OPTIONAL
) -> dict[str, Any]:
    config = resolve(
        mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")}, **CASE_FLAGS[case]
    )
    engine = Engine(config)
    try:
        run = engine.start(RunChoice(config, case.split("+")[0], optional=optional))
        assert run.wait(RUN_DEADLINE_S), "the mock run did not finish"
        return run.to_json()
    finally:
        engine.close()


def _check_columns(doc: dict[str, Any], case: str) -> None:
    assert [c["name"] for c in doc["columns"]] == ["standard", "interlock", "checked"]
    for col in doc["columns"]:
        agent, hand, status, reason = TABLE[case][col["name"]]
        where = f"{case}/{col['name']}"
        refunds = col["stripe"]["refunds"]
        assert sum(r["by"] == "agent" for r in refunds) == agent, where
        assert sum(r["by"] == "hand" for r in refunds) == hand, where
        assert col["stripe"]["refunded_total"] == 2000 * (agent + hand), where
        assert col["outcome"]["status"] == status, where
        if reason is not None:
            assert reason in col["outcome"]["reason"], where
        first, second = col["workers"]
        assert (first["exit_code"], second["exit_code"]) == (-9, 0), where
        assert first["crash_point"] is not None and second["crash_point"] is None, where
        assert first["simulated"] is True and second["simulated"] is True, where
        assert first["pid"] is None and second["pid"] is None, where
        assert col["as_predicted"] is True, (where, col["deviations"])


@pytest.mark.parametrize("case", list(CASE_FLAGS))
def test_mock_scenario_as_predicted(tmp_path: Path, case: str) -> None:
    """Each scenario in mock mode ends as the truth table says, with simulated workers."""
    started = time.monotonic()
    doc = _mock_run(tmp_path, case)
    assert time.monotonic() - started < FEW_SECONDS
    assert doc["mode"] == "mock"
    assert doc["status"] == "finished" and doc["error"] is None
    assert doc["settings"]["stripe"] == "mock"
    assert doc["settings"]["model"] == "scripted proposal"
    assert doc["emulated"] == SWITCH.get(case, [])
    _check_columns(doc, case)
    interlock = doc["columns"][1]
    assert interlock["verify"]["ok"] is (case != "after-answer+no-lookup")
    assert not (tmp_path / "home" / "demo" / "cases").exists()


def test_a_mock_receipt_says_its_lookup_read_memory(tmp_path: Path) -> None:
    """A mock run's receipt says its lookup read the refunds in memory, where they are, not
    at Stripe, which a mock run never calls."""
    doc = _mock_run(tmp_path, "after-answer")
    (lookup,) = [c for c in doc["columns"][1]["receipt"]["checks"] if c["name"] == "lookup"]
    assert lookup["expected"] == (
        "a refund in memory naming this action and matching it, if one exists"
    )


@pytest.mark.parametrize("point", SWEEP_CRASH_POINTS, ids=str)
def test_every_swept_crash_point_kills_every_columns_worker(
    tmp_path: Path, point: CrashPoint
) -> None:
    """Each of the sweep's crash points is reached by every column's worker: it dies there
    (a simulated SIGKILL) at each of the cell's kills, and the last worker finishes."""
    sc = sweep_scenario(point, "none")
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config)
    try:
        run = engine.start(RunChoice(config, sc.id, optional=OPTIONAL))
        assert run.wait(RUN_DEADLINE_S), "the mock run did not finish"
        doc = run.to_json()
    finally:
        engine.close()

    assert doc["error"] is None
    wanted = [*((-9, p.value) for p in sc.kills), (0, None)]
    for col in doc["columns"]:
        assert [(w["exit_code"], w["crash_point"]) for w in col["workers"]] == wanted, col["name"]


def test_mock_claim_wait_is_shown_not_waited(tmp_path: Path) -> None:
    """Interlock's restart waits out a 15 s claim on the mock clock: shown, finished at once."""
    doc = _mock_run(tmp_path, "after-answer", optional=frozenset())
    assert doc["settings"]["claim_ttl_s"] == 15
    interlock = doc["columns"][1]
    kinds = [e["kind"] for e in interlock["events"]]
    assert "gate-claim-wait" in kinds
    assert kinds.index("gate-claim-wait") < kinds.index("gate-claim")
    assert doc["elapsed_s"] < FEW_SECONDS
    assert [c["name"] for c in doc["columns"]] == ["standard", "interlock"]


def test_a_finished_column_keeps_its_claim_wait(tmp_path: Path) -> None:
    """The run JSON of a finished column says how long it waited out the dead claim.

    The card fills when the column finishes; the wait it showed while waiting stays in the
    record (a reader of the JSON asks why the run took 19 s).
    """
    doc = _mock_run(tmp_path, "after-answer", optional=frozenset())
    standard, interlock = doc["columns"]
    assert interlock["state"] == "done"
    wait = interlock["claim_wait"]
    assert wait is not None, "the finished interlock column lost its claim wait"
    assert wait["seconds"] > 0
    assert wait["until"] == pytest.approx(wait["from"] + wait["seconds"])
    assert wait["simulated"] is True
    assert standard["claim_wait"] is None, "the standard column has no claim to wait out"


class CountingIds:
    """Ids from counters, one per kind: `pi_seam1`, `re_seam2`, `act_seam1`, ..."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _next(self, kind: str) -> int:
        with self._lock:
            self.counts[kind] += 1
            return self.counts[kind]

    def ids(self) -> Ids:
        """These counters as an engine's id source."""
        return Ids(
            run_id=lambda: f"run_seam{self._next('run')}",
            object_id=lambda prefix: f"{prefix}_seam{self._next(prefix)}",
            action_id=lambda: f"act_seam{self._next('act')}",
        )


# 2023-11-14T22:13:20Z: far from today, so a timestamp read from the system clock shows.
WALL = 1_700_000_000.0


def test_runs_take_their_ids_and_clock_from_the_engine(tmp_path: Path) -> None:
    """A mock run and its re-approval name the run, the mock Stripe's objects and every
    action from the engine's `Ids`, and time the run on the engine's `Clock`."""
    counting = CountingIds()
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    clock = Clock(monotonic=lambda: 42.0, wall=lambda: WALL)
    engine = Engine(config, clock=clock, ids=counting.ids())
    try:
        run = engine.start(RunChoice(config, "hand-refund", optional=OPTIONAL))
        assert run.wait(RUN_DEADLINE_S), "the mock run did not finish"
        engine.reapprove(run)
        doc = run.to_json()
    finally:
        engine.close()
    assert doc["run_id"] == "run_seam1"
    assert doc["started_at"] == doc["finished_at"] == "2023-11-14T22:13:20.000+00:00"
    assert doc["elapsed_s"] == 0.0
    seam = re.compile(r"[a-z]+_seam\d+")
    for col in doc["columns"]:
        assert seam.fullmatch(col["payment_intent"]), col["payment_intent"]
        assert all(e["t"] == 0.0 for e in col["events"]), col["name"]
        for refund in col["stripe"]["refunds"]:
            assert seam.fullmatch(refund["id"]), refund["id"]
    interlock = doc["columns"][1]
    assert interlock["outcome"]["status"] == "sent"
    assert interlock["outcome"]["reapproves"] == "act_seam1"
    assert interlock["outcome"]["action_id"] == "act_seam2"
    assert counting.counts["act"] == 2
    assert counting.counts["pi"] == 3


def test_a_hold_stops_every_column_before_its_outage_unseen_by_views(tmp_path: Path) -> None:
    """The engine's `hold` pacer keeps each column after its kill, before the outage, until
    released; the run itself has no pacer, so views show no presenter mode."""
    hold = HoldingPacer("outage")
    assert hold.next_phase == "outage"
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config, hold=hold)
    try:
        run = engine.start(RunChoice(config, "hand-refund", optional=OPTIONAL))
        assert hold.wait_until_waiting("outage", 3, RUN_DEADLINE_S), "no column reached the hold"
        assert run.pacer is None and not run.finished
        for col in run.snapshot().columns:
            kinds = [e.kind for e in col.events]
            assert "crash" in kinds and "outage" not in kinds, col.name
        hold.release()
        assert run.wait(RUN_DEADLINE_S), "the run did not finish after the release"
    finally:
        engine.close()
    assert run.all_as_predicted


def test_a_worker_that_exits_instead_of_dying_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that was to be SIGKILLed at its crash point but exited 1 (a read that timed
    out on a loaded machine) fails its column with the worker's own error event in the one
    line, not only its exit code."""
    from interlock_demo.core.run import WorkerInfo
    from interlock_demo.engine.mock import MockLauncher
    from workers.protocol import EventKind

    why = "PaymentsUnsettledError: read payment: no complete answer within 1 s"

    def exits_1(self: MockLauncher, script: Any, crash_point: CrashPoint | None) -> int:
        info = WorkerInfo(
            pid=None, crash_point=crash_point, started_at=script.run.now(), simulated=True
        )
        script.worker_started(info)
        self._on_event(script, {"kind": EventKind.ERROR, "text": why})
        script.worker_ended(info, 1)
        return 1

    monkeypatch.setattr(MockLauncher, "launch", exits_1)
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config)
    try:
        run = engine.start(RunChoice(config, "hand-refund"))
        assert run.wait(RUN_DEADLINE_S), "the mock run did not finish"
    finally:
        engine.close()
    for col in run.columns:
        assert col.error == f"the worker was to die by SIGKILL at before-send but exited 1: {why}"
