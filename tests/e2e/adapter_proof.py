"""The crash proof both framework guards share (`test_adapter_pydantic_ai.py`,
`test_adapter_openai_agents.py`).

A real agent process (`tests/helpers/adapter_agent.py`, the framework's own offline test
model, the real `stripe` SDK against the loopback emulator) decides a $20 refund and
stops for approval, saving the framework's own state. A second process resumes from it
and is SIGKILLed inside the guarded tool at a named gate event (it prints the event
first, so the test waits on that line, never on time). Meanwhile a person may refund by
hand or revoke the approval. A third process resumes from the same saved state, as the
framework resumes (after Stripe's answer, as a restarted worker does in the guides:
`gate.recover()` first, then the same resume), and the test reads what Stripe holds and
what the model was told.

A row mostly waits (each process's start, the dead worker's claim), so `prove_all` runs
every row at once, each on its own emulator, store and folder, and keeps what each raised
for its test to raise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    Lease,
    SQLiteStore,
    StripePayments,
    make_stripe_client,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY, isolate_env
from tests.helpers.headless import Lines, reap

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "tests" / "helpers" / "adapter_agent.py"
DEADLINE_S = 60.0


@dataclass(frozen=True)
class Case:
    """One row of the truth table: where it dies, what a person does, what Stripe wants."""

    crash: str
    outage: str | None
    refunds: int  # at Stripe afterwards
    own: int  # of them, the agent's own
    status: str  # the action's recorded outcome
    words: str  # in the tool's answer, as the model quoted it
    # Restarted as the guides show (`gate.recover()` first, then the framework's resume):
    # the dead worker's action, finished by recover() with this status.
    recovered: str | None = None


CASES = {
    "hand-refund": Case(
        "before-send", "hand-refund", 1, 0, "refused", f"not done, refused: {REASON_WORLD_CHANGED}"
    ),
    "revoked": Case("before-send", "revoke", 0, 0, "refused", "not done, refused: "),
    # Restarted as the guides show: recover() adopts the refund, the resume is told done.
    # (The rows above resume without recover(): the resumed call reaches the same action.)
    "after-answer": Case(
        "after-answer", None, 1, 1, "adopted", "done: refunded $20.00", recovered="adopted"
    ),
}
# Killed at its first check, before the one commit of a first attempt: nothing was
# journaled, so there is no claim to wait out; the resumed call reads again and sees the
# hand refund. The rule is the gate's, not the framework's: one guard runs it.
BEFORE_COMMIT = {
    "before-commit": Case(
        "check", "hand-refund", 1, 0, "refused", f"not done, refused: {REASON_WORLD_CHANGED}"
    ),
}


def _start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "STRIPE_SECRET_KEY": TEST_KEY, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(HELPER), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(args: list[str]) -> dict[str, Any]:
    proc = _start(args)
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        reap(proc)
    assert proc.returncode == 0, f"exit {proc.returncode}: {err[-3000:]}"
    return dict(json.loads(out.strip().splitlines()[-1]))


def prove(framework: str, scenario: str, emulator: StripeEmulator, tmp: Path) -> None:
    """Run `scenario` through `framework`'s guard across a SIGKILL; assert the truth table."""
    case = {**CASES, **BEFORE_COMMIT}[scenario]
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=2.0, base_url=emulator.url))
    store = SQLiteStore(tmp / "interlock.sqlite3")
    payment = payments.create_payment(10_000).id
    lease = store.grant_lease(
        Lease(
            f"lease_{payment}", "refund", payment, 2_000, time.time() + 3600, "support", time.time()
        )
    )
    state = tmp / "state.json"
    common = [str(state), str(tmp / "interlock.sqlite3"), emulator.url, payment, lease.id]
    assert _finish([framework, "decide", *common])["saved"]
    assert payments.list_refunds(payment) == []

    doomed = _start([framework, "resume", *common, case.crash])
    try:
        assert doomed.stdout is not None
        Lines(doomed.stdout, DEADLINE_S).until(f"crash-point {case.crash}")
        assert doomed.wait(timeout=DEADLINE_S) == -9
    finally:
        reap(doomed)
    if case.crash == "check":
        assert store.actions() == [], "nothing is journaled before the one commit"

    if case.outage == "hand-refund":
        payments.create_refund(payment, 2_000, idempotency_key=None, metadata={})
    elif case.outage == "revoke":
        store.revoke_lease(lease.id, "support")

    report = _finish([framework, "restart" if case.recovered else "resume", *common])
    refunds = payments.list_refunds(payment)
    own = [r for r in refunds if ACTION_METADATA_KEY in r.metadata]
    assert (len(refunds), len(own)) == (case.refunds, case.own), refunds
    [action_id] = report["action_ids"]
    assert action_id.startswith(f"{framework}:")
    if case.recovered:  # recover() finished it before the run resumed; the call was told so
        assert report["recovered"] == [[action_id, case.recovered]]
        assert "found at Stripe, so nothing was sent twice" in report["final"]
    else:
        assert report["recovered"] == []
    assert all(r.metadata[ACTION_METADATA_KEY] == action_id for r in own)
    assert case.words in report["final"], report["final"]
    if case.refunds != case.own or not own:
        assert "done: refunded" not in report["final"]
    recorded = store.action(action_id)
    assert recorded is not None and recorded.settlement is not None
    assert recorded.settlement.status == case.status
    checked = verify(store, payments)
    assert checked.ok, checked.problems
    store.close()


def prove_all(
    framework: str, tmp: Path, scenarios: tuple[str, ...] = tuple(CASES)
) -> dict[str, BaseException | None]:
    """`prove` every row of `scenarios` at once, each in a thread with its own emulator and
    folder under `tmp`; what each row raised (None when it held), by scenario. The
    processes see what a test's would (`isolate_env`): a module fixture runs before the
    tests' own isolation."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate_env(monkeypatch, tmp)
        return _prove_all(framework, tmp, scenarios)


def _prove_all(
    framework: str, tmp: Path, scenarios: tuple[str, ...]
) -> dict[str, BaseException | None]:
    outcomes: dict[str, BaseException | None] = {}

    def one(scenario: str) -> None:
        folder = tmp / scenario
        folder.mkdir()
        try:
            with StripeEmulator() as emulator:
                prove(framework, scenario, emulator, folder)
        except BaseException as e:  # raised again by the row's own test
            outcomes[scenario] = e
        else:
            outcomes[scenario] = None

    threads = [threading.Thread(target=one, args=(scenario,)) for scenario in scenarios]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes
