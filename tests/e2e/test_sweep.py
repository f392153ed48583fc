"""The sweeps: interlock right and truthful everywhere, the others where they fail.

The crash-point sweep kills the worker at every point; the fault sweep answers its first
refund call every way Stripe can, with the outage while that call is held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interlock import Timing
from interlock.testing import CrashPoint
from interlock_demo.reports.sweep import REWRITE_ROW, Cell, interlock_failures, table
from scenarios import (
    FAULTS,
    SWEEP_CRASH_POINTS,
    SWEEP_FAULTS,
    SWEEP_OUTAGES,
    fault_scenario,
    scenario,
    sweep_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
# Runs at a time for the offline sweeps. A cell mostly waits (claims, held calls, the
# restart), so at the command's default of 3 two cores sat idle: on a 2-core machine at load
# 11, 6 at a time took the two sweeps from 138 s to 82 s, every assertion the same.
PARALLEL = "6"


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
        (CrashPoint.BEFORE_SEND, "hand-refund", 0, 1),
        (CrashPoint.BEFORE_SEND, "none", 1, 0),
        (CrashPoint.IN_FLIGHT, "revoke", 1, 0),
        (CrashPoint.AFTER_ANSWER, "hand-refund", 1, 1),
        (CrashPoint.AFTER_DECISION, "revoke", 0, 0),
        (CrashPoint.DURING_RECOVERY, "hand-refund", 0, 1),
    ],
)
def test_wanted_follows_the_rule(crash: CrashPoint, outage: str, agent: int, hand: int) -> None:
    """A cell wants the agent's refund once only if it reached Stripe first or nobody acted."""
    sc = sweep_scenario(crash, outage)  # type: ignore[arg-type]
    assert (sc.wanted_agent_refunds, sc.wanted_hand_refunds) == (agent, hand)


@pytest.mark.parametrize(
    ("fault", "outage", "agent", "hand"),
    [
        ("timeout-then-lands", "hand-refund", 1, 1),
        ("in-progress-409", "revoke", 1, 0),
        ("5xx-after-commit", "revoke", 1, 0),
        ("429", "none", 1, 0),
        ("429", "hand-refund", 0, 1),
        ("429", "revoke", 0, 0),
        ("read-401-on-recovery", "hand-refund", 1, 1),
    ],
)
def test_fault_cell_wanted_follows_the_rule(fault: str, outage: str, agent: int, hand: int) -> None:
    """A call Stripe began executing reached it before the outage: its refund is wanted once;
    a rate-limited call never began, so only a resend with nobody acting may refund."""
    sc = fault_scenario(fault, outage)  # type: ignore[arg-type]
    assert (sc.wanted_agent_refunds, sc.wanted_hand_refunds) == (agent, hand)
    assert scenario(sc.id) == sc


def test_fault_cells_are_named_in_words() -> None:
    """An unknown fault or outage is a KeyError naming the cell, not a crash later."""
    with pytest.raises(KeyError, match="no fault sweep cell"):
        scenario("sweep-fault/teapot-418/none")
    with pytest.raises(KeyError, match="no fault sweep cell"):
        fault_scenario("429", "flood")  # type: ignore[arg-type]


@pytest.mark.parametrize("stripe_timeout", [1.0, 10.0, 30.0])
def test_holds_end_after_the_client_gave_up_and_inside_the_in_flight_window(
    stripe_timeout: float,
) -> None:
    """Every held call outlasts the client's deadline where it must (so the answer is a
    timeout) and ends inside the gate's in-flight window (docs/design.md §4's 5 s assumption)."""
    timing = Timing(claim_ttl_s=stripe_timeout + 5, stripe_timeout_s=stripe_timeout)
    for spec in FAULTS.values():
        hold_s = spec.hold_for(stripe_timeout) / 1000
        assert hold_s < timing.in_flight_s, spec.id
        if spec.stage == "before_commit":
            assert hold_s > stripe_timeout, spec.id


def _cell(column: str, **kw: object) -> Cell:
    base: dict[str, object] = {
        "crash_point": None,
        "outage": "none",
        "column": column,
        "ok": True,
        "truthful": True,
        "wanted": {"agent_refunds": 1, "hand_refunds": 0, "refunded_total": 2000},
        "got": {"agent_refunds": 1, "hand_refunds": 0, "refunded_total": 2000},
        "reported": "adopted",
        "reason": None,
        "error": None,
        "fault": "lost-answer",
    }
    base.update(kw)
    return Cell(**base)  # type: ignore[arg-type]


def test_an_overspent_lease_or_a_verify_problem_fails_interlock() -> None:
    """Right money and a truthful report are not enough: the lease must hold its cap and
    verify() must find nothing."""
    fine = _cell("interlock", lease={"cap": 2000, "spent": 2000, "reserved": 0}, verified=True)
    over = _cell("interlock", lease={"cap": 2000, "spent": 2000, "reserved": 2000}, verified=True)
    unverified = _cell(
        "interlock", lease={"cap": 2000, "spent": 2000, "reserved": 0}, verified=False
    )
    assert interlock_failures([fine, over, unverified]) == [over, unverified]
    assert "LEASE OVERSPENT" in table([over])


def test_a_rewritten_store_is_right_only_when_the_anchor_caught_it() -> None:
    """The rewrite's row: interlock's cell fails unless verify() with the anchor named the
    rewritten receipt, whatever the money; its table cell says which."""
    base = {"fault": None, "crash_point": CrashPoint.AFTER_OUTCOME, "tamper": REWRITE_ROW}
    found = _cell("interlock", verified=True, caught=True, **base)
    missed = _cell("interlock", verified=True, caught=False, **base)
    other = _cell("standard", **base)
    assert interlock_failures([found, missed, other]) == [missed]
    assert "caught by the anchor" in table([found])
    assert "the rewrite was NOT caught" in table([missed])
    assert table([found]).splitlines()[2].startswith(f"| {REWRITE_ROW} (after-outcome) | none |")


def test_the_table_shows_pending_as_unknown_and_every_report() -> None:
    """A pending report claims nothing and reads as unknown; each worker's report is shown."""
    text = table([_cell("interlock", reports=("pending", "adopted"))])
    assert text.splitlines()[0].startswith("| fault | outage | wanted |")
    assert "reported unknown (pending) → adopted" in text


def test_during_recovery_kills_twice() -> None:
    """The during-recovery cell dies before the send and again in the restarted worker."""
    assert sweep_scenario(CrashPoint.DURING_RECOVERY, "none").kills == (
        CrashPoint.BEFORE_SEND,
        CrashPoint.DURING_RECOVERY,
    )


def _why(result: subprocess.CompletedProcess[str]) -> str:
    """A failed sweep in words, for its assertion (a string: pytest shortens any other
    message to a few hundred characters): the end of its progress, then each cell that
    ended in an error and each interlock cell not right and truthful, whole, one JSON line
    each (what the table's one word per cell does not say)."""
    try:
        cells = json.loads(result.stdout)["cells"]
    except (ValueError, KeyError, TypeError):
        return f"{result.stderr[-3000:]}\nstdout: {result.stdout[:2000]}"
    bad = [
        c
        for c in cells
        if c["error"] is not None
        or (c["column"] == "interlock" and not (c["ok"] and c["truthful"]))
    ]
    return "\n".join([result.stderr[-2000:], *(json.dumps(c, sort_keys=True) for c in bad)])


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_offline_sweep_interlock_right_and_truthful_everywhere(tmp_path: Path) -> None:
    """Every cell is a real offline run; interlock is right and truthful in all of them."""
    result = _sweep(tmp_path, "--offline", "--json", "--parallel", PARALLEL)
    assert result.returncode == 0, _why(result)
    doc = json.loads(result.stdout)
    everything = doc["cells"]
    cells = [c for c in everything if c["tamper"] is None]
    rewritten = [c for c in everything if c["tamper"] is not None]
    assert len(cells) == len(SWEEP_CRASH_POINTS) * len(SWEEP_OUTAGES) * 3
    assert all(c["error"] is None for c in everything), [c for c in everything if c["error"]]
    assert all(c["fault"] is None for c in everything)
    interlock = [c for c in everything if c["column"] == "interlock"]
    assert all(c["ok"] and c["truthful"] for c in interlock), [
        c for c in interlock if not (c["ok"] and c["truthful"])
    ]
    # The store rewritten after its run by a writer holding the key: the anchor names the
    # rewritten receipt, though the journal's own signatures and heads all verify.
    assert [c["column"] for c in rewritten] == ["standard", "interlock", "checked"]
    [caught] = [c for c in rewritten if c["column"] == "interlock"]
    assert (caught["tamper"], caught["crash_point"], caught["reported"]) == (
        REWRITE_ROW,
        "after-outcome",
        "sent",
    )
    assert caught["verified"] is True and caught["caught"] is True, caught
    assert [p for p in caught["problems"] if "altered after it was anchored" in p], caught
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


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_offline_fault_sweep_interlock_right_and_truthful_everywhere(tmp_path: Path) -> None:
    """Every fault x outage x column is a real offline run at short timings; interlock is
    right and truthful in each, its lease within its cap and verify() clean, and the
    others' failures show as they are."""
    result = _sweep(tmp_path, "--offline", "--faults", "--json", "--parallel", PARALLEL)
    assert result.returncode == 0, _why(result)
    cells = json.loads(result.stdout)["cells"]
    assert len(cells) == len(SWEEP_FAULTS) * len(SWEEP_OUTAGES) * 3
    assert all(c["error"] is None for c in cells), [c for c in cells if c["error"]]
    assert {c["fault"] for c in cells} == set(SWEEP_FAULTS)
    interlock = [c for c in cells if c["column"] == "interlock"]
    assert all(c["ok"] and c["truthful"] and c["verified"] for c in interlock), [
        c for c in interlock if not (c["ok"] and c["truthful"] and c["verified"])
    ]
    for c in interlock:
        lease = c["lease"]
        assert lease["spent"] + lease["reserved"] <= lease["cap"], c
    key = {(c["fault"], c["outage"], c["column"]): c for c in cells}
    # The first fault-axis bug: held past the timeout, a hand refund meanwhile, then it
    # lands. Interlock waits the call out and adopts instead of refusing.
    held = key[("timeout-then-lands", "hand-refund", "interlock")]
    assert held["reported"] == "adopted"
    assert held["got"] == {"agent_refunds": 1, "hand_refunds": 1, "refunded_total": 4000}
    # A rate-limited call never began: the standard restart refunds after the hand refund.
    standard = key[("429", "hand-refund", "standard")]
    assert not standard["ok"] and standard["reports"] == ["unknown", "sent"]
    assert key[("429", "hand-refund", "interlock")]["reported"] == "refused"
    # The standard restart's resend meets the first call still running: a 409, honestly unknown.
    busy = key[("in-progress-409", "none", "standard")]
    assert busy["reports"] == ["unknown", "unknown"] and "in-progress" in busy["reason"]
    assert busy["ok"] and busy["truthful"]
    # The hand-written check stops over its own refund that landed: a false alarm.
    checked = key[("timeout-then-lands", "none", "checked")]
    assert checked["ok"] and not checked["truthful"] and checked["reported"] == "stopped"
    # A refused key settles nothing; once the key is fixed, recovery adopts.
    for outage in SWEEP_OUTAGES:
        key_cell = key[("read-401-on-recovery", outage, "interlock")]
        assert key_cell["reports"] == ["pending", "adopted"], key_cell
        assert key[("read-401-on-recovery", outage, "checked")]["reports"][0] == "unknown"


def test_fault_sweep_needs_the_emulator(tmp_path: Path) -> None:
    """Mock runs cannot give Stripe's faulty answers: --faults with --mock is a usage error."""
    result = _sweep(tmp_path, "--mock", "--faults")
    assert result.returncode == 2
    assert "--faults needs --offline" in result.stderr
