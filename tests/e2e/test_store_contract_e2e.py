"""The store contract where it needs a server or processes: on PostgreSQL, and a race.

Every test of `tests/unit/test_store_contract.py` runs here again on PostgreSQL (a pgserver
for the session, or INTERLOCK_TEST_PG_DSN): the same rules over its rows, locks and
transactions. Then two recoverers race for one abandoned action on each backend, as real
processes (threads for memory, which lives in one process), against the loopback emulator.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Intent,
    Owner,
    Store,
    StripePayments,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.e2e.test_store_processes import HELPERS, Child
from tests.unit import test_store_contract as contract
from tests.unit.test_store_contract import AMOUNT, GRACE, Backend, _lease, open_backend

# The contract's tests, collected here too: they take `backend`, which here is PostgreSQL.
globals().update({n: f for n, f in vars(contract).items() if n.startswith("test_")})


@pytest.fixture(params=["postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The PostgreSQL store, in a schema of its own; its handles are closed afterwards."""
    yield from open_backend(request, tmp_path)


@pytest.fixture(params=[*contract.BACKENDS, "postgres"])
def any_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each store kind in turn, PostgreSQL included."""
    yield from open_backend(request, tmp_path)


def _payments(emulator: StripeEmulator) -> StripePayments:
    # The gate rig's plan is a 1 s Stripe timeout, and a gate refuses a longer client.
    return StripePayments(make_stripe_client(TEST_KEY, timeout_s=1.0, base_url=emulator.url))


def test_racing_recoverers_send_once(
    any_backend: Backend, emulator: StripeEmulator, tmp_path: Path, spawn: list[Child]
) -> None:
    """Two recoverers (processes; threads on memory) race for one abandoned action: one send."""
    backend = any_backend
    payments = _payments(emulator)
    payment = payments.create_payment(5_000)
    store = backend.make()
    lease = _lease(store, time.time(), target=payment.id)
    intent = Intent(
        new_action_id(),
        "refund",
        payment.id,
        AMOUNT,
        lease.id,
        refunds_fingerprint(payments.list_refunds(payment.id)),
        created_at=time.time(),
    )
    # A worker on this host that journaled its claim and died before `sending`.
    dead = Owner("crashed-worker", 2**22 + 7, 0.0, socket.gethostname())
    assert store.begin(intent, dead, 60.0, GRACE).status == "taken"
    # The winner's answer is held a little, so the loser surely meets the winner's claim.
    emulator.model.add_fault("hold", hold_ms=700, commit=True)

    if backend.location is None:
        reports = _race_in_threads(store, emulator)
    else:
        workers = [
            spawn_child(spawn, tmp_path, wid, backend.location, emulator.url)
            for wid in ("recoverer-a", "recoverer-b")
        ]
        for w in workers:
            assert w.line() == "ready"
        for w in workers:
            w.send("go")
        reports = [json.loads(w.line()) for w in workers]
        assert [w.finish() for w in workers] == [0, 0]

    refunds = payments.list_refunds(payment.id)
    assert len(refunds) == 1 and refunds[0].metadata[ACTION_METADATA_KEY] == intent.action_id
    assert emulator.model.requests.count(("POST", "refunds")) == 1
    assert sorted(r["sends"] for r in reports) == [0, 1], reports
    check = backend.make()
    assert [(r.action_id, r.outcome) for r in check.receipts()] == [(intent.action_id, "sent")]
    stored = check.lease(lease.id)
    assert stored is not None and (stored.spent, dict(stored.reservations)) == (AMOUNT, {})
    assert verify(check, payments).ok


def spawn_child(
    spawn: list[Child], tmp_path: Path, worker_id: str, location: str, base_url: str
) -> Child:
    """A recoverer process on the store at `location`, waiting at its start barrier."""
    child = Child(
        [str(HELPERS / "recoverer.py"), location, base_url, worker_id],
        tmp_path / f"{worker_id}.stderr",
    )
    spawn.append(child)
    return child


def _race_in_threads(store: Store, emulator: StripeEmulator) -> list[dict[str, object]]:
    from interlock import Gate, StripeRefund, Switches, Timing

    barrier = threading.Barrier(2)
    reports: list[dict[str, object]] = []
    failures: list[BaseException] = []

    def run(worker_id: str) -> None:
        events: list[str] = []
        gate = Gate(
            store,
            StripeRefund(_payments(emulator)),
            timing=Timing(claim_ttl_s=8, stripe_timeout_s=3),
            switches=Switches(),
            owner=Owner.current(worker_id),
            on_event=lambda event: events.append(event.kind),
            approvers=UNSIGNED_APPROVALS,
        )
        try:
            barrier.wait(timeout=10)
            gate.recover()
            reports.append({"worker": worker_id, "sends": events.count("before-send")})
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in ("thread-a", "thread-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert failures == []
    return reports


@pytest.fixture
def spawn() -> Iterator[list[Child]]:
    """Children started by a test; each is killed (if still running) and reaped afterwards."""
    children: list[Child] = []
    yield children
    for child in children:
        child.close()
