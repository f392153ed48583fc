"""The crash-point sweep: interlock right and truthful everywhere, the others where they fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios import SWEEP_CRASH_POINTS, SWEEP_OUTAGES, sweep_scenario

ROOT = Path(__file__).resolve().parent.parent


def _sweep(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STRIPE_SECRET_KEY", "ANTHROPIC_API_KEY", "INTERLOCK_CRASH")
    }
    env.update(
        {
            "INTERLOCK_HOME": str(tmp_path / "home"),
            "INTERLOCK_CLAIM_TTL": "6",
            "INTERLOCK_STRIPE_TIMEOUT": "1",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", "sweep", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _by_key(
    cells: list[dict[str, object]],
) -> dict[tuple[object, object, object], dict[str, object]]:
    return {(c["crash_point"], c["outage"], c["column"]): c for c in cells}


@pytest.mark.parametrize(
    ("crash", "outage", "agent", "hand"),
    [
        ("before-send", "hand-refund", 0, 1),
        ("before-send", "none", 1, 0),
        ("in-flight", "revoke", 1, 0),
        ("after-answer", "hand-refund", 1, 1),
        ("after-decision", "revoke", 0, 0),
        ("during-recovery", "hand-refund", 0, 1),
    ],
)
def test_wanted_follows_the_rule(crash: str, outage: str, agent: int, hand: int) -> None:
    """A cell wants the agent's refund once only if it reached Stripe first or nobody acted."""
    sc = sweep_scenario(crash, outage)  # type: ignore[arg-type]
    assert (sc.wanted_agent_refunds, sc.wanted_hand_refunds) == (agent, hand)


def test_during_recovery_kills_twice() -> None:
    """The during-recovery cell dies before the send and again in the restarted worker."""
    assert sweep_scenario("during-recovery", "none").kills == ("before-send", "during-recovery")


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_offline_sweep_interlock_right_and_truthful_everywhere(tmp_path: Path) -> None:
    """Every cell is a real offline run; interlock is right and truthful in all of them."""
    result = _sweep(tmp_path, "--offline", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    cells = doc["cells"]
    assert len(cells) == len(SWEEP_CRASH_POINTS) * len(SWEEP_OUTAGES) * 3
    assert all(c["error"] is None for c in cells), [c for c in cells if c["error"]]
    interlock = [c for c in cells if c["column"] == "interlock"]
    assert all(c["ok"] and c["truthful"] for c in interlock), [
        c for c in interlock if not (c["ok"] and c["truthful"])
    ]
    key = _by_key(cells)
    # The standard agent refunds twice when support refunded by hand during the outage.
    standard = key[("before-send", "hand-refund", "standard")]
    assert not standard["ok"]
    assert standard["got"] == {"agent_refunds": 1, "hand_refunds": 1, "refunded_total": 4000}
    # The hand-written check stops on its own refund: right money, untruthful report.
    checked = key[("after-answer", "none", "checked")]
    assert checked["ok"] and not checked["truthful"] and checked["reported"] == "stopped"
    # A fresh decision is never re-checked by hand: revoked approval, refund anyway.
    assert not key[("after-decision", "revoke", "checked")]["ok"]
    # The kill in flight lands after Stripe committed: interlock adopts its own refund.
    assert key[("in-flight", "none", "interlock")]["reported"] == "adopted"
    assert "sweep:" in result.stderr


def test_mock_sweep_prints_a_table(tmp_path: Path) -> None:
    """The mock sweep prints the Markdown table and the interlock verdict, exit 0."""
    result = _sweep(tmp_path, "--mock")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| crash point | outage | wanted | standard | interlock | checked |")
    assert sum(1 for line in lines if line.startswith("| ")) == 1 + 24  # header + cells
    assert "interlock: right and truthful in every cell" in result.stdout
