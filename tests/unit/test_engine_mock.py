"""Mock mode: the same scenarios in-process, simulated crashes, waits shown and not waited.

The engine runs the same worker code on the in-memory payments model; nothing is spawned.
The expectations are the hand-written docs/design.md §3 table of the end-to-end tests
(`tests/helpers/headless.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

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
