"""The gate's ambiguous answers, through the real `stripe` SDK against the loopback emulator.

Each test arms one emulator fault on the refund create, runs `Gate.submit` with the
smallest useful timing (claim TTL 6 s, Stripe deadline 1 s), and checks what matters:
exactly one refund at the emulator, an outcome that tells the truth about it, never
`failed` for an answer that settled nothing, and `verify()` agreeing with Stripe.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    Outcome,
    Owner,
    PaymentsAuthError,
    PaymentsUnsettledError,
    PostgresStore,
    Refund,
    SQLiteStore,
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

AMOUNT = 2000
DEADLINE_S = 1.0
WAIT_S = 15.0


@dataclass
class Rig:
    """One payment, one approval, a gate over the emulator, and the events it emitted."""

    emulator: StripeEmulator
    payments: StripePayments
    store: SQLiteStore
    gate: Gate
    payment_intent: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def intent(self) -> Intent:
        """A fresh decision to refund AMOUNT, made on the payment's refunds as they are."""
        refunds = self.payments.list_refunds(self.payment_intent)
        return Intent(
            action_id=new_action_id(),
            kind="refund",
            target=self.payment_intent,
            amount=AMOUNT,
            lease_id=f"lease-{self.payment_intent}",
            fingerprint=refunds_fingerprint(refunds),
        )

    def refunds(self) -> list[Refund]:
        """The payment's refunds as the emulator holds them."""
        return self.payments.list_refunds(self.payment_intent)

    def creates(self) -> int:
        """Refund-create requests the emulator received."""
        return self.emulator.model.requests.count(("POST", "refunds"))

    def unsettled_statuses(self) -> list[int | None]:
        """The HTTP status of every create answer that settled nothing (None: no answer)."""
        return [d["http_status"] for kind, d in self.events if kind == "answer-unsettled"]


def _handler_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "process_request_thread" in t.name}


@pytest.fixture
def rig(emulator: StripeEmulator, tmp_path: Path) -> Iterator[Rig]:
    """A gate with Timing(6, 1) over the real SDK (1 s deadline) and a SQLite store."""
    before = _handler_threads()
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=DEADLINE_S, base_url=emulator.url)
    )
    payment = payments.create_payment(5000)
    store = SQLiteStore(tmp_path / "journal.sqlite3")
    now = time.time()
    store.grant_lease(
        Lease(
            id=f"lease-{payment.id}",
            kind="refund",
            target=payment.id,
            cap=AMOUNT,
            expires_at=now + 3600,
            granted_by="test",
            granted_at=now,
        )
    )
    events: list[tuple[str, dict[str, Any]]] = []
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=DEADLINE_S),
        on_event=lambda event: events.append((event.kind, dict(event.data))),
        approvers=UNSIGNED_APPROVALS,
    )
    yield Rig(emulator, payments, store, gate, payment.id, events)
    store.close()
    payments.close()  # its kept-alive connection holds an emulator thread until closed
    # A held request answers into a closed socket after the test; let it finish here.
    deadline = time.monotonic() + WAIT_S
    for t in _handler_threads() - before:
        t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), "an emulator request thread did not finish"


def _assert_one_truthful_refund(rig: Rig, outcome: Outcome) -> Refund:
    """Exactly one refund exists, it names the action, and the outcome records it."""
    refunds = rig.refunds()
    assert len(refunds) == 1, refunds
    refund = refunds[0]
    assert refund.amount == AMOUNT
    assert refund.metadata[ACTION_METADATA_KEY] == outcome.action_id
    assert outcome.status in ("sent", "adopted")
    assert outcome.external_id == refund.id
    state = rig.store.action(outcome.action_id)
    assert state is not None and state.settlement is not None
    assert state.settlement.status == outcome.status
    assert state.settlement.external_id == refund.id
    assert [r.outcome for r in list(rig.store.receipts())] == [outcome.status]
    result = verify(rig.store, rig.payments)
    assert result.ok, result.problems
    return refund


def test_timeout_after_the_refund_landed_adopts_it(rig: Rig) -> None:
    """A create that commits but answers after the deadline is found by the lookup and adopted."""
    fault = rig.emulator.model.add_fault("hold", hold_ms=1500, commit=True)

    outcome = rig.gate.submit(rig.intent())

    assert fault.committed.is_set()
    assert rig.unsettled_statuses() == [None], "the first answer should be a client timeout"
    assert outcome.status == "adopted"
    assert rig.creates() == 1, "nothing may be sent again once the lookup found the refund"
    _assert_one_truthful_refund(rig, outcome)
    assert outcome.receipt is not None
    answers = outcome.receipt.body["unsettled_answers"]
    assert [(a["step"], a["idempotency_key"]) for a in answers] == [("send", outcome.action_id)]


def test_request_held_past_the_deadline_lands_in_the_window_and_is_adopted(rig: Rig) -> None:
    """A create still running at Stripe when the client gives up is not resent meanwhile.

    It commits 3 s later, inside the in-flight window (start + 1 s + 5 s), while the gate
    polls its lookup: adopted, one create, never refused or failed.
    """
    fault = rig.emulator.model.add_fault("hold", hold_ms=3000, stage="before_commit")
    intent = rig.intent()

    outcome = rig.gate.submit(intent)

    assert fault.committed.is_set()
    assert rig.unsettled_statuses() == [None], rig.events
    assert outcome.status == "adopted"
    assert rig.creates() == 1
    _assert_one_truthful_refund(rig, outcome)


def test_409_while_the_first_request_still_runs_is_waited_out_and_adopted(rig: Rig) -> None:
    """A resend after the window meets the first request still running: 409, maybe sent.

    The gate waits that window out too; the first request lands and is adopted. One refund,
    two creates, never `failed`.
    """
    fault = rig.emulator.model.add_fault("hold", hold_ms=8000, stage="before_commit")
    intent = rig.intent()

    outcome = rig.gate.submit(intent)

    assert fault.committed.is_set()
    assert rig.unsettled_statuses() == [None, 409], rig.events
    assert outcome.status == "adopted"
    assert all(kind != "answer" for kind, _ in rig.events), "no answer may be taken as definite"
    assert rig.creates() == 2
    _assert_one_truthful_refund(rig, outcome)


def test_500_after_commit_is_replayed_so_the_lookup_adopts(rig: Rig) -> None:
    """A 500 saved under the key after the refund committed is settled by the lookup."""
    fault = rig.emulator.model.add_fault("error_500", commit=True)
    intent = rig.intent()

    outcome = rig.gate.submit(intent)

    assert fault.committed.is_set()
    assert rig.unsettled_statuses() == [500]
    assert outcome.status == "adopted"
    assert rig.creates() == 1
    _assert_one_truthful_refund(rig, outcome)
    # The key now replays the 500: resending could never have settled this action. (A
    # resend carries what the first create carried, evidence included; other parameters
    # under the key would be an idempotency error instead.)
    (sent,) = rig.payments.list_refunds(intent.target)
    assert sent.metadata[ACTION_METADATA_KEY] == intent.action_id
    with pytest.raises(PaymentsUnsettledError) as replay:
        rig.payments.create_refund(
            intent.target,
            intent.amount,
            idempotency_key=intent.action_id,
            metadata=dict(sent.metadata),
        )
    assert replay.value.http_status == 500


@pytest.mark.parametrize("stage", ["before_execution", "no_refund"])
def test_500_with_no_refund_is_unknown_and_never_resent(rig: Rig, stage: str) -> None:
    """A 500 makes the action unknown: pending with its reservation, one create, no refund.

    Stripe replays a saved 500 under the key and may reconcile the request later, so the
    gate neither resends, refuses nor records a failure.
    """
    fault = rig.emulator.model.add_fault("error_500", stage=stage)
    intent = rig.intent()

    outcome = rig.gate.submit(intent)

    assert fault.started.is_set() and not fault.committed.is_set()
    assert rig.unsettled_statuses() == [500]
    assert (outcome.status, outcome.unknown) == ("pending", True)
    assert rig.creates() == 1 and rig.refunds() == []
    state = rig.store.action(intent.action_id)
    assert state is not None and state.unknown is not None and state.settlement is None
    lease = rig.store.lease(intent.lease_id)
    assert lease is not None and lease.reservations == {intent.action_id: intent.amount}


def test_dropped_connection_after_commit_adopts_the_refund(rig: Rig) -> None:
    """A connection dropped after the refund committed, and dropped again on the
    transport's one resend under the same key: the lookup settles it, one refund."""
    fault = rig.emulator.model.add_fault("drop", count=2)

    outcome = rig.gate.submit(rig.intent())

    assert fault.committed.is_set() and fault.fired == 2
    assert rig.unsettled_statuses() == [None]
    assert outcome.status == "adopted"
    assert rig.creates() == 2  # the send and its resend; the resend was a replay
    _assert_one_truthful_refund(rig, outcome)


def test_a_lost_answer_is_recovered_by_the_transports_resend(rig: Rig) -> None:
    """Dropped once after the refund committed: the transport sends the create once more
    on a new connection under the same key, and Stripe's replay is the answer: sent, one
    refund, nothing unsettled."""
    fault = rig.emulator.model.add_fault("drop")

    outcome = rig.gate.submit(rig.intent())

    assert fault.committed.is_set() and fault.fired == 1
    assert rig.unsettled_statuses() == []
    assert outcome.status == "sent"
    assert rig.creates() == 2
    _assert_one_truthful_refund(rig, outcome)


def test_each_action_is_one_refund_across_faults(rig: Rig) -> None:
    """Several actions on one payment, each behind a different fault, make one refund each."""
    rig.store.grant_lease(
        Lease(
            id=f"lease-{rig.payment_intent}-more",
            kind="refund",
            target=rig.payment_intent,
            cap=AMOUNT,
            expires_at=time.time() + 3600,
            granted_by="test",
            granted_at=time.time(),
        )
    )
    rig.emulator.model.add_fault("drop", count=2)  # the send and the transport's resend
    first = rig.gate.submit(rig.intent())
    rig.emulator.model.add_fault("error_429")
    second_intent = replace(
        rig.intent(),
        lease_id=f"lease-{rig.payment_intent}-more",
        metadata={"case": uuid.uuid4().hex},
    )
    second = rig.gate.submit(second_intent)

    assert (first.status, second.status) == ("adopted", "sent")
    by_action = {r.metadata[ACTION_METADATA_KEY]: r for r in rig.refunds()}
    assert set(by_action) == {first.action_id, second.action_id}
    assert by_action[second.action_id].metadata["case"] == second_intent.metadata["case"]
    result = verify(rig.store, rig.payments)
    assert result.ok, result.problems
    assert result.chain_length == 2


# -- the reproductions of the fault-axis bugs, through the real SDK --------------------------------


def _hand_refund(rig: Rig) -> None:
    """Support refunds $20 in the dashboard: no metadata, no derived key."""
    rig.emulator.model.post("refunds", {"payment_intent": rig.payment_intent, "amount": "2000"})


@pytest.mark.parametrize("outage", ["hand-refund", "revoke"])
def test_outage_while_its_own_create_is_held_adopts_and_never_overspends(
    rig: Rig, outage: str
) -> None:
    """Support acts while the gate's create is still running at Stripe (past the deadline).

    Before the maybe-sent rule the gate re-read right after the timeout, saw the hand
    refund, refused and released its reservation; its own refund then landed, and a
    second action on the same lease sent again: $40 of agent refunds under a $20 cap.
    Now the request counts as before the outage: adopted, and the cap holds.
    """

    def act() -> None:
        if outage == "hand-refund":
            _hand_refund(rig)
        else:
            rig.store.revoke_lease(f"lease-{rig.payment_intent}", "support")

    rig.emulator.model.add_fault("hold", hold_ms=3000, stage="before_commit", on_start=act)
    intent = rig.intent()

    outcome = rig.gate.submit(intent)

    assert rig.unsettled_statuses() == [None], rig.events
    agent = [r for r in rig.refunds() if ACTION_METADATA_KEY in r.metadata]
    assert len(agent) == 1
    assert len([r for r in rig.refunds() if not r.metadata]) == (outage == "hand-refund")
    assert (outcome.status, outcome.external_id) == ("adopted", agent[0].id)
    lease = rig.store.lease(intent.lease_id)
    assert lease is not None and lease.spent == AMOUNT and not lease.reservations
    # Another decision on the same lease (as a re-approval would make) is refused.
    again = rig.gate.submit(replace(rig.intent(), action_id=new_action_id()))
    assert again.status == "refused"
    assert len([r for r in rig.refunds() if ACTION_METADATA_KEY in r.metadata]) == 1
    assert verify(rig.store, rig.payments).ok


def test_garbled_2xx_over_http_is_adopted_not_failed(rig: Rig) -> None:
    """A 200 whose body is not JSON (the refund was made) settles nothing: adopted, not failed."""
    rig.emulator.model.add_fault("garbled_2xx")

    outcome = rig.gate.submit(rig.intent())

    assert rig.unsettled_statuses() == [200]
    assert outcome.status == "adopted"
    _assert_one_truthful_refund(rig, outcome)


def test_401_on_the_recovery_read_is_raised_and_settles_nothing(rig: Rig) -> None:
    """A refused key on recovery's read is a configuration error, never `refused` for good.

    The dead worker's refund exists; once the key works again, recovery adopts it.
    """
    intent = rig.intent()
    refund = rig.payments.create_refund(
        intent.target,
        intent.amount,
        idempotency_key=intent.action_id,
        metadata={ACTION_METADATA_KEY: intent.action_id},
    )
    # The worker died after Stripe answered: a claim that has long run out.
    past = SQLiteStore(rig.store.path, clock=lambda: time.time() - 100)
    epoch = past.begin(intent, Owner.current("dead"), 6.0, 2.0).epoch
    assert past.mark_sending(intent.action_id, epoch, 9.0).status == "ok"
    past.close()
    rig.emulator.model.add_fault("read_401")

    with pytest.raises(PaymentsAuthError) as caught:
        rig.gate.recover()

    assert caught.value.http_status == 401
    state = rig.store.action(intent.action_id)
    assert state is not None and state.settlement is None
    (outcome,) = rig.gate.recover()
    assert (outcome.status, outcome.external_id) == ("adopted", refund.id)


def test_total_deadline_holds_against_a_server_that_trickles(rig: Rig) -> None:
    """A server that trickles its answer byte by byte cannot keep a 1 s call open.

    A per-read socket timeout restarts with every byte; the watchdog ends the call at the
    deadline (it kept one open for 12.9 s before).
    """
    rig.emulator.model.add_fault("trickle", hold_ms=10_000)
    intent = rig.intent()
    started = time.monotonic()

    with pytest.raises(PaymentsUnsettledError) as caught:
        rig.payments.create_refund(intent.target, intent.amount, idempotency_key=intent.action_id)

    elapsed = time.monotonic() - started
    assert "within 1 s" in caught.value.detail
    # The deadline is 1 s; the bound leaves room for a loaded machine, not for 10 s.
    assert elapsed < 3.0, elapsed


# -- the gate's own clocks and its own knowledge -------------------------------------------


class SteppedClock:
    """The wall clock of this host, which a test steps (an NTP step, a resumed VM)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def _store(kind: str, clock: SteppedClock, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        # SQLite's claims are in this host's wall clock: they step with it.
        return SQLiteStore(tmp_path / "stepped.sqlite3", clock=clock)
    dsn: str = request.getfixturevalue("pg_dsn")
    schema: str = request.getfixturevalue("pg_schema")
    # PostgreSQL's claims are in the database's clock, which this host's step does not move.
    return PostgresStore(dsn, schema=schema)


@pytest.mark.parametrize(
    ("kind", "step_s", "own_sleep"),
    [
        ("sqlite", 3.0, False),
        ("sqlite", 10.0, False),
        ("sqlite", -10.0, False),
        ("postgres", 3.0, False),
        ("postgres", 10.0, False),
        # A gate given a sleep of the user's own (one that logs, or heartbeats) keeps the
        # monotonic window: it was once timed on the wall clock whenever sleep was not
        # time.sleep, and refused and released its reservation while its refund landed.
        ("sqlite", 8.0, True),
        ("postgres", 8.0, True),
    ],
)
def test_a_wall_clock_step_while_its_create_is_held_never_refuses_its_own_refund(
    emulator: StripeEmulator,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    kind: str,
    step_s: float,
    own_sleep: bool,
) -> None:
    """The wall clock steps while the gate's create is still running at Stripe, and support
    refunds by hand meanwhile; the request lands 4.5 s after it started, inside its
    in-flight window (start + 1 s + 5 s). On the wall clock the window closed early (after
    a +3 s step at 3 s) and the gate refused while its refund landed; on the monotonic
    clock it waits the window out and reports its refund: adopted, or (when the step ran
    its SQLite claim out) pending naming it, which recovery then adopts."""
    clock = SteppedClock()
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=DEADLINE_S, base_url=emulator.url)
    )
    payment = payments.create_payment(5000)
    store = _store(kind, clock, tmp_path, request)
    now = store.now()
    lease = store.grant_lease(
        Lease(f"lease-{payment.id}", "refund", payment.id, AMOUNT, now + 3600, "test", now)
    )
    slept: list[float] = []

    def logged_sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=DEADLINE_S),
        clock=clock,
        **({"sleep": logged_sleep} if own_sleep else {}),
        approvers=UNSIGNED_APPROVALS,
    )

    def outage() -> None:
        emulator.model.post("refunds", {"payment_intent": payment.id, "amount": "2000"})
        clock.offset += step_s

    fault = emulator.model.add_fault("hold", hold_ms=4500, stage="before_commit", on_start=outage)
    intent = Intent(
        new_action_id(),
        "refund",
        payment.id,
        AMOUNT,
        lease.id,
        refunds_fingerprint(payments.list_refunds(payment.id)),
    )
    try:
        outcome = gate.submit(intent)

        assert fault.committed.wait(WAIT_S), "the held request never landed"
        agent = [r for r in payments.list_refunds(payment.id) if ACTION_METADATA_KEY in r.metadata]
        assert len(agent) == 1, agent
        assert outcome.status in ("adopted", "pending"), outcome
        assert outcome.external_id == agent[0].id
        if outcome.status == "pending":
            assert kind == "sqlite" and step_s > 0
            time.sleep(0.1)
            clock.offset += 60  # the claim's expiry and grace pass
            (outcome,) = gate.recover()
        assert (outcome.status, outcome.external_id) == ("adopted", agent[0].id)
        stored = store.lease(lease.id)
        assert stored is not None and stored.spent == AMOUNT
        result = verify(store, payments)
        assert result.ok, result.problems
        # The user's sleep is the one the gate waited with.
        assert slept or not own_sleep
    finally:
        store.close()


def test_a_gate_whose_create_outlasts_its_claim_reports_its_refund_not_the_refusal(
    rig: Rig,
) -> None:
    """The create runs past the claim (the host's clock steps 20 s while Stripe holds it);
    meanwhile support refunds by hand and another process's recovery takes the claim and
    refuses. The refund then lands: the first gate reports pending, code `conflict`, naming
    the refund it holds, never the other gate's `refused` as its own."""
    clock = SteppedClock()
    store = SQLiteStore(rig.store.path, clock=clock)
    first = Gate(
        store,
        StripeRefund(rig.payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=DEADLINE_S),
        clock=clock,
        approvers=UNSIGNED_APPROVALS,
    )
    other_store = SQLiteStore(rig.store.path, clock=clock)
    other = Gate(
        other_store,
        StripeRefund(rig.payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=DEADLINE_S),
        owner=Owner.current("other"),
        clock=clock,
        approvers=UNSIGNED_APPROVALS,
    )
    refusals: list[Outcome] = []

    def meanwhile() -> None:
        _hand_refund(rig)
        clock.offset += 20
        # Another process, here a thread with its own store handle: it must not wait on
        # the request this one holds.
        worker = threading.Thread(target=lambda: refusals.extend(other.recover()))
        worker.start()
        worker.join(WAIT_S)

    rig.emulator.model.add_fault("hold", hold_ms=300, stage="before_commit", on_start=meanwhile)
    try:
        outcome = first.submit(rig.intent())

        assert [o.status for o in refusals] == ["refused"], refusals
        agent = [r for r in rig.refunds() if ACTION_METADATA_KEY in r.metadata]
        assert len(agent) == 1
        assert (outcome.status, outcome.code, outcome.external_id) == (
            "pending",
            "conflict",
            agent[0].id,
        )
        assert outcome.reason is not None and "another gate recorded refused" in outcome.reason
        # The record is the other gate's refusal; verify() shows the refund it missed.
        assert any(agent[0].id in p for p in verify(store, rig.payments).problems)
    finally:
        store.close()
        other_store.close()
