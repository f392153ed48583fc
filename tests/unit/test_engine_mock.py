"""Mock mode: the same scenarios in-process, simulated crashes, waits shown and not waited.

The engine runs the same worker code on the in-memory payments model; nothing is spawned.
The expectations are the hand-written docs/design.md §3 table of the end-to-end tests
(`tests/helpers/headless.py`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from interlock_demo.core.run import Clock, Ids, Pacer
from interlock_demo.engine import Engine, RunRequest
from interlock_demo.settings import resolve
from tests.helpers.headless import ROOT, SCRUBBED, SWITCH, TABLE

RUN_DEADLINE_S = 30.0
FEW_SECONDS = 5.0
CASE_FLAGS: dict[str, dict[str, bool]] = {
    "hand-refund": {},
    "revoked": {},
    "after-answer": {},
    "after-answer+emulate-24h": {"emulate_24h": True},
    "after-answer+no-lookup": {"no_lookup": True},
}


def _mock_run(tmp_path: Path, case: str, checked: bool = True) -> dict[str, Any]:
    config = resolve(
        mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")}, **CASE_FLAGS[case]
    )
    engine = Engine(config)
    try:
        run = engine.start(RunRequest(case.split("+")[0], checked=checked))
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


def test_mock_claim_wait_is_shown_not_waited(tmp_path: Path) -> None:
    """Interlock's restart waits out a 15 s claim on the mock clock: shown, finished at once."""
    doc = _mock_run(tmp_path, "after-answer", checked=False)
    assert doc["settings"]["claim_ttl_s"] == 15
    interlock = doc["columns"][1]
    kinds = [e["kind"] for e in interlock["events"]]
    assert "gate-claim-wait" in kinds
    assert kinds.index("gate-claim-wait") < kinds.index("gate-claim")
    assert doc["elapsed_s"] < FEW_SECONDS
    assert [c["name"] for c in doc["columns"]] == ["standard", "interlock"]


def test_mock_cli_all_scenarios(tmp_path: Path) -> None:
    """`--mock --scenario all` prints a list of runs, each labelled mock, and exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    cmd = [sys.executable, "-m", "interlock_demo.cli", "--headless", "--json", "--mock"]
    done = subprocess.run(
        [*cmd, "--scenario", "all", "--checked"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    docs = json.loads(done.stdout)
    assert [d["scenario"] for d in docs] == ["hand-refund", "revoked", "after-answer"]
    for doc in docs:
        assert doc["mode"] == "mock"
        assert doc["elapsed_s"] < FEW_SECONDS
        _check_columns(doc, doc["scenario"])
    progress = [line for line in done.stderr.splitlines() if line.strip()]
    assert progress and all(line.startswith("MOCK. ") for line in progress)


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
        run = engine.start(RunRequest("hand-refund", checked=True))
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
    hold = Pacer.holding_before("outage")
    assert hold.next_phase == "outage"
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config, hold=hold)
    try:
        run = engine.start(RunRequest("hand-refund", checked=True))
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
