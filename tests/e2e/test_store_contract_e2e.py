"""The store contract where it needs a server or processes: on PostgreSQL, and a race.

Every test of `tests/unit/test_store_contract.py`, and the receipt log's contract in
`tests/unit/test_receipt_log.py`, runs here again on PostgreSQL (a pgserver for the
session, or INTERLOCK_TEST_PG_DSN): the same rules over its rows, locks and transactions.
Then two recoverers race for one abandoned action on each backend, as real processes
(threads for memory, which lives in one process), against the loopback emulator; and
sibling decisions (one decision made twice in one model turn) run at once, on threads and
as processes one of which is SIGKILLed mid-send, through the real `stripe` SDK.
"""

from __future__ import annotations

import inspect
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    UNSIGNED_APPROVALS,
    Approvers,
    Gate,
    Intent,
    Owner,
    Store,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.e2e.test_store_processes import HELPERS, Child
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import TIMING
from tests.helpers.siblings import submit_siblings
from tests.unit import test_receipt_log as receipt_log
from tests.unit import test_store_contract as contract
from tests.unit.test_store_contract import AMOUNT, GRACE, Backend, _lease, open_backend

# The contract's tests, collected here too: they take `backend`, which here is PostgreSQL.
globals().update({n: f for n, f in vars(contract).items() if n.startswith("test_")})
# And the receipt log's contract: those of its tests that take `backend` (its attacks on a
# SQLite file, which take `world`, run in the unit tier alone).
globals().update(
    {
        n: f
        for n, f in vars(receipt_log).items()
        if n.startswith("test_") and "backend" in inspect.signature(f).parameters
    }
)


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
    from interlock import Gate, StripeRefund, Timing

    barrier = threading.Barrier(2)
    reports: list[dict[str, object]] = []
    failures: list[BaseException] = []

    def run(worker_id: str) -> None:
        events: list[str] = []
        gate = Gate(
            store,
            StripeRefund(_payments(emulator)),
            timing=Timing(claim_ttl_s=8, stripe_timeout_s=3),
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


def _siblings(
    backend: Backend, payments: StripePayments, n: int
) -> tuple[Store, str, list[Intent]]:
    """A payment with room for `n` refunds, a lease whose cap is above their sum, and `n`
    identical decisions on it (one fingerprint): the store, the payment and the intents."""
    payment = payments.create_payment(AMOUNT * (n + 2))
    store = backend.make()
    lease = _lease(store, time.time(), cap=(n + 1) * AMOUNT, target=payment.id)
    seen = refunds_fingerprint(payments.list_refunds(payment.id))
    at = time.time()
    intents = [
        Intent(new_action_id(), "refund", payment.id, AMOUNT, lease.id, seen, created_at=at + i)
        for i in range(n)
    ]
    return store, payment.id, intents


@pytest.mark.parametrize("n", [2, 8])
def test_sibling_submits_on_threads_refund_once_through_the_stripe_sdk(
    any_backend: Backend, emulator: StripeEmulator, n: int
) -> None:
    """`n` identical decisions submitted at once on threads through one gate, over the real
    `stripe` SDK and the loopback emulator, the cap above their sum: one refund, the others
    refused because the refunds changed."""
    payments = _payments(emulator)
    store, payment, intents = _siblings(any_backend, payments, n)

    outcomes = submit_siblings(store, StripeRefund(payments), intents, TIMING)

    assert sorted(o.status for o in outcomes) == ["refused"] * (n - 1) + ["sent"]
    assert {o.reason for o in outcomes if o.status == "refused"} == {REASON_WORLD_CHANGED}
    assert len(payments.list_refunds(payment)) == 1
    assert emulator.model.requests.count(("POST", "refunds")) == 1
    assert verify(store, payments).ok


@pytest.mark.parametrize("any_backend", ["sqlite", "postgres"], indirect=True)
def test_sibling_processes_refund_once_when_the_sender_is_killed_mid_send(
    any_backend: Backend,
    emulator: StripeEmulator,
    tmp_path: Path,
    spawn: list[Child],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two sibling decisions submitted at once by two processes: both read the payment
    before either commits (a first attempt reads first). One commits and sends; its create
    is held at Stripe, already made, and it is SIGKILLed. The other's one commit then finds
    the payment's turn taken since its look (without that fence both would send): nothing
    of it is written, it is journaled behind the first and waits its turn. A recovery
    adopts the first's refund; the sibling reads again and is refused: one refund, verify
    clean."""
    assert any_backend.location is not None
    payments = _payments(emulator)
    store, payment, intents = _siblings(any_backend, payments, 2)
    # The workers trust the approver's public key only, as a deployed worker does.
    keys = tmp_path / "approvers.pem"
    keys.write_bytes(APPROVER.public_pem())
    monkeypatch.setenv(Approvers.ENV_NAME, str(keys))
    children = []
    for i, intent in enumerate(intents):
        child = Child(
            [
                str(HELPERS / "sibling_worker.py"),
                any_backend.location,
                emulator.url,
                f"sibling-{i}",
                json.dumps(intent.to_dict()),
            ],
            tmp_path / f"sibling-{i}.stderr",
        )
        spawn.append(child)
        children.append(child)
    for child in children:
        assert child.line() == "ready"
    held = emulator.model.add_fault("hold", hold_ms=20_000, stage="after_commit")
    for child in children:
        child.send("go")

    said = [child.line() for child in children]

    assert said == ["read", "read"], said
    reader, waiter = children
    first, second = intents
    reader.send("continue")
    assert held.committed.wait(30), "the reader's create never reached the emulator"
    reader.proc.kill()
    assert reader.finish() == -9
    waiter.send("continue")
    assert waiter.line() == "busy"
    assert [h.record for h in store.history(second.action_id)] == ["intent"]
    recovery = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=8, stripe_timeout_s=3),
        owner=Owner.current("recovery"),
        approvers=APPROVERS,
    )
    adopted = recovery.recover_action(first.action_id)
    assert adopted.status == "adopted"
    report = json.loads(waiter.line())
    assert waiter.finish() == 0

    assert (report["action_id"], report["status"]) == (second.action_id, "refused")
    assert report["reason"] == REASON_WORLD_CHANGED
    refunds = payments.list_refunds(payment)
    assert [r.metadata[ACTION_METADATA_KEY] for r in refunds] == [first.action_id]
    assert verify(store, payments).ok


@pytest.fixture
def spawn() -> Iterator[list[Child]]:
    """Children started by a test; each is killed (if still running) and reaped afterwards."""
    children: list[Child] = []
    yield children
    for child in children:
        child.close()
