"""A store writer with the library and no approver's key cannot make a worker send.

The issue's case, across real processes on one SQLite store: a writer process adds a $480
lease in support's name and an intent under it; a worker process that holds only the
approvers' public keys (`INTERLOCK_APPROVERS`) recovers it, sends nothing and records a
refusal naming the missing signature; `verify` with the public keys reports the store
unsound, and `python -m interlock verify --approvers` exits 1 saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import SQLiteStore, StripePayments, make_stripe_client, refunds_fingerprint, verify
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.e2e.test_store_processes import HELPERS, Child
from tests.helpers.approvals import APPROVER, APPROVERS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spawn() -> Iterator[list[Child]]:
    """Children started by the test; each is killed (if still running) and reaped after."""
    children: list[Child] = []
    yield children
    for child in children:
        child.close()


def test_a_forged_480_dollar_approval_is_refused_by_a_worker_and_reported_by_verify(
    emulator: StripeEmulator, tmp_path: Path, spawn: list[Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's $480 lease and intent: the worker's recovery refuses it naming the bad
    signature, nothing reaches Stripe, and verify calls the store unsound."""
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=3.0, base_url=emulator.url))
    payment = payments.create_payment(50_000)
    store_path = tmp_path / "journal.sqlite3"
    SQLiteStore(store_path).close()
    keys = tmp_path / "approvers.pem"
    keys.write_bytes(APPROVER.public_pem())
    fingerprint = refunds_fingerprint(payments.list_refunds(payment.id))

    forger = subprocess.run(
        [sys.executable, str(HELPERS / "forger.py"), str(store_path), payment.id, fingerprint],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "INTERLOCK_APPROVERS"},
        check=True,
        timeout=60,
    )
    forged = json.loads(forger.stdout)
    monkeypatch.setenv("INTERLOCK_APPROVERS", str(keys))
    worker = Child(
        [str(HELPERS / "recoverer.py"), str(store_path), emulator.url, "worker"],
        tmp_path / "worker.stderr",
    )
    spawn.append(worker)
    assert worker.line() == "ready"
    worker.send("go")
    report = json.loads(worker.line())
    assert worker.finish() == 0

    assert report["sends"] == 0
    [outcome] = report["outcomes"]
    assert (outcome["action_id"], outcome["status"]) == (forged["action_id"], "refused")
    assert payments.list_refunds(payment.id) == []
    assert emulator.model.requests.count(("POST", "refunds")) == 0
    store = SQLiteStore(store_path)
    try:
        state = store.action(forged["action_id"])
        assert state is not None and state.settlement is not None
        assert "lease_forged is not signed" in (state.settlement.reason or "")
        result = verify(store, payments, approvers=APPROVERS)
    finally:
        store.close()
    assert not result.ok
    assert any("lease_forged is not signed" in p for p in result.problems), result.problems
    cli = subprocess.run(
        [sys.executable, "-m", "interlock", "verify", str(store_path), "--approvers", str(keys)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    assert cli.returncode == 1, cli.stderr
    assert "lease_forged is not signed" in cli.stdout
