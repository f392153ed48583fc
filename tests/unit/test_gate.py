"""Unit tests for the gate, in-process against the in-memory Stripe model.

Crashes are simulated: the gate's event sink raises `Crash` at a named step and the
crashed gate is abandoned; a restart is a new `Gate` with a new `Owner`. A fake clock
whose `sleep` advances it makes claim waits take no real time (the rig is shared with the
property tests: `tests/helpers/gate_rig.py`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    ActionError,
    ConfigError,
    Effect,
    Gate,
    Intent,
    IntentError,
    KeyList,
    MemoryStore,
    Outcome,
    Owner,
    PaymentsUnsettledError,
    Refund,
    SigningKey,
    SQLiteStore,
    Store,
    StoreError,
    StripeRefund,
    Timing,
    verify,
)
from interlock._core.claims import Claim
from interlock.testing import Emulate24h, InProcessPayments, NoLookup, PaymentsModel
from tests.helpers.approvals import APPROVERS
from tests.helpers.gate_rig import (
    AMOUNT,
    PAYMENT,
    TIMING,
    Crash,
    Event,
    GateWorld,
    gone_owner,
    remote_owner,
)

CAP = 2_000
KEY = SigningKey.generate()


def _trusting(key: SigningKey) -> KeyList:
    """A key list naming `key` alone."""
    trusted = KeyList()
    trusted.add(key.public)
    return trusted


class World(GateWorld):
    """A $100 payment, a $20 refund lease on it, a store, a fake clock and an event log."""

    def __init__(
        self,
        store: Callable[[Callable[[], float]], Store] | None = None,
        payments: InProcessPayments | None = None,
    ):
        super().__init__(store, payments)
        self.lease = self.grant(CAP)

    def decide(self, amount: int = AMOUNT, lease_id: str | None = None) -> Intent:
        """The model's decision on this world's lease, unless another is named."""
        return super().decide(amount, lease_id or self.lease.id)

    def crash(
        self,
        intent: Intent,
        at: str,
        owner: Owner | None = None,
        emulate: Callable[[Effect], Effect] | None = None,
    ) -> Claim:
        """Submit `intent` and die at `at`; returns the claim the dead worker left."""
        with pytest.raises(Crash):
            self.gate(owner or gone_owner(), crash_at=at, emulate=emulate).submit(intent)
        state = self.store.action(intent.action_id)
        assert state is not None and state.claim is not None
        return state.claim

    def crash_recovering(self, intent: Intent, at: str, owner: Owner) -> Claim:
        """The claim a recovery leaves when its worker dies before `sending`: `intent` is
        journaled with the claim of a worker gone right after commit 1, and a recovering
        gate of `owner` takes it and dies at `at` (`claim`, `check`)."""
        self.store.begin(intent, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)
        with pytest.raises(Crash):
            self.gate(owner, crash_at=at).recover_action(intent.action_id)
        state = self.store.action(intent.action_id)
        assert state is not None and state.claim is not None
        return state.claim

    def hand_refund(self) -> Refund:
        """Support refunds $20 by hand: no idempotency key, no metadata."""
        return self.payments.create_refund(self.pi, AMOUNT)

    def of(self, worker: str, kind: str) -> list[Event]:
        """The events of one kind one worker emitted."""
        return [e for e in self.events if e.worker == worker and e.kind == kind]


@pytest.fixture
def world() -> World:
    """A fresh world on a MemoryStore."""
    return World()


# -- the truth table's interlock column --------------------------------------------------


def test_hand_refund_during_outage_is_refused_because_refunds_changed(world: World) -> None:
    """A hand refund made while the worker was dead before sending makes recovery refuse."""
    intent = world.decide()
    world.crash(intent, "before-send")
    hand = world.hand_refund()

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "refused"
    assert outcome.reason == REASON_WORLD_CHANGED
    assert [r.id for r in world.refunds()] == [hand.id]
    assert outcome.receipt is not None and outcome.receipt.outcome == "refused"
    world_check = next(c for c in outcome.receipt.checks if c["name"] == "world_unchanged")
    assert world_check["passed"] is False
    assert verify(world.store, world.payments).ok


def test_revoked_during_outage_is_refused_and_nothing_is_refunded(world: World) -> None:
    """A revocation while the worker was dead before sending makes recovery refuse."""
    intent = world.decide()
    world.crash(intent, "before-send")
    world.store.revoke_lease(world.lease.id, "support")

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "refused"
    assert outcome.reason is not None and outcome.reason.startswith("approval revoked")
    assert world.refunds() == []
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == 0 and dict(lease.reservations) == {}
    assert verify(world.store, world.payments).ok


def test_lease_expired_during_outage_is_refused(world: World) -> None:
    """A lease that expires while the worker was dead before sending makes recovery refuse."""
    intent = world.decide()
    world.crash(intent, "before-send")
    world.clock.now = world.lease.expires_at + 1

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert (outcome.status, outcome.reason) == ("refused", "approval expired")
    assert world.refunds() == []


def test_after_answer_crash_is_adopted_on_recovery(world: World) -> None:
    """A crash right after Stripe's answer leaves one refund, which recovery adopts."""
    intent = world.decide()
    world.crash(intent, "after-answer")
    [refund] = world.agent_refunds(intent.action_id)
    posts = world.model.requests.count(("POST", "refunds"))

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert (outcome.status, outcome.external_id, outcome.amount) == ("adopted", refund.id, AMOUNT)
    assert world.model.requests.count(("POST", "refunds")) == posts
    assert len(world.refunds()) == 1
    assert verify(world.store, world.payments).ok


@pytest.mark.parametrize(
    ("where", "looked_up"), [(None, "at Stripe"), ("in the test's ledger", "in the test's ledger")]
)
def test_the_lookup_check_says_where_the_effect_looked(where: str | None, looked_up: str) -> None:
    """A receipt's lookup check names where its effect read the refunds: at Stripe for a
    `StripeRefund` that names no other place, else the place it names (a stand-in's)."""
    world = World()
    effect = (
        StripeRefund(world.payments) if where is None else StripeRefund(world.payments, where=where)
    )
    gate = Gate(
        world.store,
        effect,
        timing=TIMING,
        clock=world.clock,
        sleep=world.clock.sleep,
        monotonic=world.clock.monotonic,
        approvers=APPROVERS,
    )

    outcome = gate.submit(world.decide())

    state = world.store.action(outcome.action_id)
    assert state is not None and state.receipt is not None
    (lookup,) = [c for c in state.receipt.checks if c["name"] == "lookup"]
    assert (
        lookup["expected"]
        == f"a refund {looked_up} naming this action and matching it, if one exists"
    )


def test_after_answer_with_emulated_24h_is_still_one_refund_adopted(world: World) -> None:
    """With the key emulated as pruned, the lookup alone keeps recovery from a second refund."""
    emulate = partial(Emulate24h, name="INTERLOCK_EMULATE_24H")
    intent = world.decide()
    world.crash(intent, "after-answer", emulate=emulate)

    [outcome] = world.gate(Owner.current("restart"), emulate=emulate).recover()

    assert outcome.status == "adopted"
    assert len(world.refunds()) == 1
    assert outcome.receipt is not None
    assert outcome.receipt.body["emulated"] == ["INTERLOCK_EMULATE_24H"]
    assert verify(world.store, world.payments).ok


def test_emulated_24h_retry_uses_a_key_stripe_has_not_seen(world: World) -> None:
    """Under emulate-24h a recovery that must send does so under a fresh key (the switch bites)."""
    intent = world.decide()
    world.crash(intent, "before-send", emulate=Emulate24h)

    world.gate(Owner.current("restart"), emulate=Emulate24h).recover()

    [before_send] = world.of("restart", "before-send")
    assert before_send.data["idempotency_key"] != intent.action_id
    assert len(world.agent_refunds(intent.action_id)) == 1


def test_after_answer_with_no_lookup_refuses_and_verify_reports_the_refund(world: World) -> None:
    """Without the lookup recovery refuses its own refund, and verify() reports that refund."""
    intent = world.decide()
    world.crash(intent, "after-answer", emulate=NoLookup)
    [refund] = world.agent_refunds(intent.action_id)

    [outcome] = world.gate(Owner.current("restart"), emulate=NoLookup).recover()

    assert (outcome.status, outcome.reason) == ("refused", REASON_WORLD_CHANGED)
    assert len(world.refunds()) == 1
    result = verify(world.store, world.payments)
    assert not result.ok
    [problem] = result.problems
    assert refund.id in problem and "a send the receipts do not show" in problem


def test_verify_reports_the_refund_of_an_action_left_without_an_outcome(world: World) -> None:
    """A refund of an action that crashed after the answer and was not recovered is reported."""
    intent = world.decide()
    world.crash(intent, "after-answer")
    [refund] = world.agent_refunds(intent.action_id)

    result = verify(world.store, world.payments)

    assert result.problems == [
        f"refund {refund.id} ({AMOUNT}) at Stripe names action {intent.action_id}, which has "
        "no receipt: a send the receipts do not show"
    ]
    world.gate(Owner.current("restart")).recover()
    assert verify(world.store, world.payments).ok


# -- crashed owners: replaced at once, or waited out ---------------------------------------


@pytest.mark.parametrize("crash_at", ["claim", "check"])
def test_gone_owner_before_sending_is_replaced_at_once(world: World, crash_at: str) -> None:
    """An owner whose process is gone and that never journaled `sending` is taken over at once."""
    intent = world.decide()
    claim = world.crash_recovering(intent, crash_at, owner=gone_owner())
    assert claim.live(world.clock()) and not claim.sending
    restart_at = world.clock()

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "sent"
    assert world.of("restart", "claim-wait") == []
    [took] = world.of("restart", "claim")
    assert took.t == restart_at
    assert len(world.agent_refunds(intent.action_id)) == 1


@pytest.mark.parametrize(
    ("crash_at", "owner"),
    [
        ("sending", gone_owner),
        ("before-send", gone_owner),
        ("claim", remote_owner),
        ("claim", lambda: Owner.current("paused")),
    ],
    ids=["gone-after-sending", "gone-before-send", "other-host", "live-on-this-host"],
)
def test_owner_that_may_still_send_is_waited_out(
    world: World, crash_at: str, owner: Callable[[], Owner]
) -> None:
    """An owner that journaled `sending`, or is not provably gone, is waited out to expiry."""
    intent = world.decide()
    claim = (
        world.crash_recovering(intent, crash_at, owner())
        if crash_at == "claim"
        else world.crash(intent, crash_at, owner=owner())
    )

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "sent"
    [wait] = world.of("restart", "claim-wait")
    assert wait.data["expires_at"] == claim.expires_at
    [took] = world.of("restart", "claim")
    [before_send] = world.of("restart", "before-send")
    assert took.t >= claim.expires_at and before_send.t >= claim.expires_at
    assert len(world.agent_refunds(intent.action_id)) == 1


def test_recover_without_waiting_reports_a_held_action_as_pending(world: World) -> None:
    """`recover(wait=False)` leaves an action whose claim may cover a send pending, untouched."""
    intent = world.decide()
    world.crash(intent, "sending")
    requests = list(world.model.requests)

    [outcome] = world.gate(Owner.current("restart")).recover(wait=False)

    assert outcome.status == "pending" and not outcome.settled
    # The dead owner's send may have landed: one lookup is allowed, never a create.
    assert world.model.requests[len(requests) :] in ([], [("GET", "refunds")])
    assert world.store.pending() == [intent.action_id]


def test_a_sibling_waits_for_the_payments_turn_and_recovery_runs_it_after(world: World) -> None:
    """A second decision on the payment while the first may still be sending (its worker on
    another host, silent) is journaled without a claim and waits for the first's turn; a
    recovery that cannot wait leaves it pending naming the first; one that waits runs the
    first, then the second, which reads again and is refused: one refund, the cap unused."""
    lease = world.grant(3 * AMOUNT)
    first, second = world.decide(lease_id=lease.id), world.decide(lease_id=lease.id)
    claim = world.crash(first, "sending", owner=remote_owner("first"))
    with pytest.raises(Crash):
        world.gate(Owner.current("sibling"), crash_at="turn-wait").submit(second)
    [journaled] = world.of("sibling", "journaled")
    [wait] = world.of("sibling", "turn-wait")
    assert journaled.data["claim"] == "busy"
    assert (wait.data["holder"], wait.data["target"], wait.data["sending"]) == (
        first.action_id,
        world.pi,
        True,
    )
    assert wait.data["seconds"] == pytest.approx(claim.expires_at + TIMING.grace_s - wait.t)

    held, busy = world.gate(Owner.current("early")).recover(wait=False)

    assert (held.action_id, held.status, busy.action_id, busy.status) == (
        first.action_id,
        "pending",
        second.action_id,
        "pending",
    )
    assert busy.reason is not None and first.action_id in busy.reason
    assert busy.reason.endswith("recovery runs this one after it")
    assert world.refunds() == []

    sent, refused = world.gate(Owner.current("restart")).recover()

    assert (sent.action_id, sent.status) == (first.action_id, "sent")
    assert (refused.action_id, refused.status) == (second.action_id, "refused")
    assert refused.reason == REASON_WORLD_CHANGED
    assert [r.metadata[ACTION_METADATA_KEY] for r in world.refunds()] == [first.action_id]
    assert verify(world.store, world.payments).ok


def test_claim_running_short_before_the_send_sends_nothing(world: World) -> None:
    """A worker that lost time after commit 2 and has under timeout + 5 s of claim sends nothing."""
    intent = world.decide()

    def stall(_data: Mapping[str, Any]) -> None:
        world.clock.now += 2

    first = world.gate(Owner.current("first"), hooks={"sending": stall}).submit(intent)

    assert first.status == "pending"
    assert world.of("first", "before-send") == []
    assert world.refunds() == []
    [outcome] = world.gate(Owner.current("restart")).recover()
    assert outcome.status == "sent" and len(world.refunds()) == 1


def test_worker_that_lost_its_claim_before_commit_3_records_nothing(world: World) -> None:
    """A worker paused past its claim after Stripe answered writes no outcome; recovery adopts."""
    intent = world.decide()

    def pause(_data: Mapping[str, Any]) -> None:
        world.clock.now += 60

    first = world.gate(Owner.current("first"), hooks={"after-answer": pause}).submit(intent)

    assert first.status == "pending" and first.receipt is None
    assert list(world.store.receipts()) == []
    [outcome] = world.gate(Owner.current("restart")).recover()
    [refund] = world.refunds()
    assert (outcome.status, outcome.external_id) == ("adopted", refund.id)


def test_stale_refusal_of_a_worker_that_lost_its_claim_is_fenced(world: World) -> None:
    """A paused worker's refusal cannot overwrite the send of the worker that took over."""
    intent = world.decide()
    paused, resume = threading.Event(), threading.Event()
    stale: list[Outcome] = []

    def hold(data: Mapping[str, Any]) -> None:
        if data.get("name") == "lookup":
            paused.set()
            assert resume.wait(10)

    # A recovery holds its claim from commit 1 through its checks (a first attempt holds
    # none before its one commit).
    world.store.begin(intent, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)

    def run_stale() -> None:
        stale_gate = world.gate(Owner.current("stale"), hooks={"check": hold})
        stale.append(stale_gate.recover_action(intent.action_id))

    thread = threading.Thread(target=run_stale, daemon=True)
    thread.start()
    assert paused.wait(10)
    world.clock.now += TIMING.claim_ttl_s

    def revoke_and_resume(_data: Mapping[str, Any]) -> None:
        world.store.revoke_lease(world.lease.id, "support")
        resume.set()
        thread.join(10)
        assert not thread.is_alive()

    [taken] = world.gate(
        Owner.current("taker"), hooks={"after-answer": revoke_and_resume}
    ).recover()

    [refund] = world.refunds()
    assert [
        e.data["passed"] for e in world.of("stale", "check") if e.data["name"] == "approval"
    ] == [False]
    assert stale[0].status == "pending"
    assert (taken.status, taken.external_id) == ("sent", refund.id)
    assert verify(world.store, world.payments).ok


@pytest.mark.parametrize("status", ["failed", "canceled"])
def test_own_refund_that_did_not_take_effect_is_failed_and_never_resent(
    world: World, status: str
) -> None:
    """Its own refund, later failed or canceled, settles `failed` (refund_failed): no resend.

    Resending under the same key would get Stripe's replay of the old success.
    """
    intent = world.decide()
    world.crash(intent, "after-answer")
    [own] = world.agent_refunds(intent.action_id)
    world.model.set_refund_status(own.id, status)
    creates = world.model.requests.count(("POST", "refunds"))

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert (outcome.status, outcome.code, outcome.external_id) == (
        "failed",
        "refund_failed",
        own.id,
    )
    assert world.model.requests.count(("POST", "refunds")) == creates
    assert [r.status for r in world.refunds()] == [status]
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == 0 and not lease.reservations
    assert verify(world.store, world.payments).ok


# -- outcomes of Stripe's answers ---------------------------------------------------------


def test_definite_4xx_is_recorded_as_failed(world: World) -> None:
    """An amount the lease allows but the payment cannot cover ends `failed` with Stripe's code."""
    world.payments.create_refund(world.pi, PAYMENT - 1_000)
    intent = world.decide()

    outcome = world.gate(Owner.current("first")).submit(intent)

    assert outcome.status == "failed"
    assert outcome.code
    assert outcome.reason is not None and "greater than unrefunded amount" in outcome.reason
    assert world.agent_refunds() == []
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == 0 and dict(lease.reservations) == {}
    assert outcome.receipt is not None and outcome.receipt.outcome == "failed"
    assert verify(world.store, world.payments).ok


@pytest.mark.parametrize(
    ("fault", "stage", "count"),
    # A lost answer is lost twice: the transport sends a dropped create once more.
    [("error_500", "after_commit", 1), ("drop", None, 2), ("garbled_2xx", None, 1)],
)
def test_answer_that_hides_a_made_refund_is_adopted_once(
    world: World, fault: str, stage: str | None, count: int
) -> None:
    """A 500 saved after the refund was made, a lost answer, or a garbled 2xx: adopted, once.

    The gate does not resend while the call may still land: it looks up, finds its own
    refund, and adopts it.
    """
    world.model.add_fault(fault, count=count, **({"stage": stage} if stage else {}))
    intent = world.decide()

    outcome = world.gate(Owner.current("first")).submit(intent)

    [refund] = world.refunds()
    assert (outcome.status, outcome.external_id) == ("adopted", refund.id)
    assert refund.metadata[ACTION_METADATA_KEY] == intent.action_id
    assert world.model.requests.count(("POST", "refunds")) == count
    assert outcome.receipt is not None
    assert len(outcome.receipt.body["unsettled_answers"]) == 1
    assert verify(world.store, world.payments).ok


@pytest.mark.parametrize("stage", ["before_execution", "no_refund"])
def test_5xx_with_no_refund_stays_unknown_and_is_never_resent(world: World, stage: str) -> None:
    """A 5xx makes the action unknown: pending, reservation kept, only ever looked up.

    Stripe replays a saved 500 to every retry under the key and may reconcile it later, so
    neither the gate nor recovery resends it, refuses it or records it failed.
    """
    world.model.add_fault("error_500", stage=stage)
    intent = world.decide()

    first = world.gate(Owner.current("first")).submit(intent)
    world.clock.now += 60
    [again] = world.gate(Owner.current("restart")).recover()

    for outcome in (first, again):
        assert (outcome.status, outcome.unknown) == ("pending", True)
        assert outcome.reason is not None and "unknown" in outcome.reason
    assert world.model.requests.count(("POST", "refunds")) == 1
    assert world.refunds() == []
    state = world.store.action(intent.action_id)
    assert state is not None and state.unknown is not None and state.settlement is None
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.reservations == {intent.action_id: AMOUNT}
    # A later reconciliation at Stripe shows up in the next recovery's lookup.
    world.payments.create_refund(
        world.pi,
        AMOUNT,
        idempotency_key="reconciled",
        metadata={ACTION_METADATA_KEY: intent.action_id},
    )
    world.clock.now += 60
    [late] = world.gate(Owner.current("later")).recover()
    assert late.status == "adopted"
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == AMOUNT and not lease.reservations
    assert verify(world.store, world.payments).ok


class _HeldFirstRefund(PaymentsModel):
    """A model that holds the first refund request inside 'Stripe' until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = True

    def _create_refund(self, ident: str, a: Mapping[str, Any]) -> dict[str, Any]:
        if self._first:
            self._first = False
            self.entered.set()
            assert self.release.wait(10)
        return super()._create_refund(ident, a)


class _FirstRequestTimesOut(InProcessPayments):
    """The client's deadline passes on the first refund request while Stripe still runs it."""

    model: _HeldFirstRefund

    def __init__(self, model: _HeldFirstRefund) -> None:
        super().__init__(model)
        self.in_flight: threading.Thread | None = None
        self.landed: list[Refund] = []

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        if self.in_flight is not None:
            return super().create_refund(
                payment_intent, amount, idempotency_key=idempotency_key, metadata=metadata
            )
        call = super().create_refund

        def run() -> None:
            self.landed.append(
                call(payment_intent, amount, idempotency_key=idempotency_key, metadata=metadata)
            )

        self.in_flight = threading.Thread(target=run, daemon=True)
        self.in_flight.start()
        assert self.model.entered.wait(10)
        raise PaymentsUnsettledError("create refund", "timed out")

    def land(self) -> None:
        """Let the held first request finish at 'Stripe'."""
        assert self.in_flight is not None
        self.model.release.set()
        self.in_flight.join(10)
        assert not self.in_flight.is_alive()


def test_late_landing_is_adopted_while_the_gate_waits_out_its_in_flight_window() -> None:
    """A create whose deadline passed while Stripe still runs it is never resent meanwhile.

    The gate only polls the lookup during the in-flight window; the late refund lands and
    is adopted. No second create, no refusal.
    """
    payments = _FirstRequestTimesOut(_HeldFirstRefund())
    world = World(payments=payments)
    intent = world.decide()

    def poll(_data: Mapping[str, Any]) -> None:
        payments.land()

    outcome = world.gate(Owner.current("first"), hooks={"in-flight-wait": poll}).submit(intent)

    [refund] = world.refunds()
    assert payments.landed == [refund]
    assert (outcome.status, outcome.external_id) == ("adopted", refund.id)
    assert world.model.requests.count(("POST", "refunds")) == 1
    assert verify(world.store, world.payments).ok


def test_409_after_the_window_closed_is_waited_out_too_and_the_landing_adopted() -> None:
    """A request still running past the window gets the resend a 409: maybe sent again.

    The gate waits that window out as well; the first request lands and is adopted.
    """
    payments = _FirstRequestTimesOut(_HeldFirstRefund())
    world = World(payments=payments)
    intent = world.decide()

    def on_unsettled(data: Mapping[str, Any]) -> None:
        if data["http_status"] == 409:
            payments.land()

    outcome = world.gate(Owner.current("first"), hooks={"answer-unsettled": on_unsettled}).submit(
        intent
    )

    assert [e.data["http_status"] for e in world.of("first", "answer-unsettled")] == [None, 409]
    [refund] = world.refunds()
    assert payments.landed == [refund]
    assert (outcome.status, outcome.external_id) == ("adopted", refund.id)
    assert verify(world.store, world.payments).ok


def test_unsettled_sends_past_max_sends_are_left_to_recovery_which_finishes(world: World) -> None:
    """After `max_sends` unsettled answers (429s) the action is left pending; recovery sends once.

    Each resend waits out the window of the one before and re-checks first.
    """
    world.model.add_fault("error_429", count=3)
    intent = world.decide()

    first = world.gate(Owner.current("first")).submit(intent)
    assert first.status == "pending"
    assert world.refunds() == []

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "sent"
    assert world.of("restart", "claim-wait") != []
    assert len(world.agent_refunds(intent.action_id)) == 1
    assert verify(world.store, world.payments).ok


# -- cost of the send path ------------------------------------------------------------------


# -- a first attempt's one commit: what it is fenced on --------------------------------------


def test_a_sibling_that_takes_the_turn_after_the_look_makes_the_first_read_again(
    world: World,
) -> None:
    """Two identical decisions (two tool calls of one turn): the second runs whole while the
    first sits between its checks and its one commit. The first's commit finds the turn
    taken since its look, writes nothing, and takes the three-commit path: it reads again,
    after the sibling's refund, and is refused. Without the fence both would send."""
    world.lease = world.grant(2 * AMOUNT)
    first, second = world.decide(), world.decide()
    done: list[Outcome] = []

    def sibling(data: Mapping[str, Any]) -> None:
        if data.get("name") == "approval" and not done:
            done.append(world.gate(Owner.current("sibling")).submit(second))

    outcome = world.gate(Owner.current("first"), hooks={"check": sibling}).submit(first)

    [refund] = world.refunds()
    assert (done[0].status, done[0].external_id) == ("sent", refund.id)
    assert (outcome.status, outcome.reason) == ("refused", REASON_WORLD_CHANGED)
    assert [e.data["name"] for e in world.of("first", "check")].count("lookup") == 2
    assert [e.data["claim"] for e in world.of("first", "journaled")] == ["taken"]
    assert world.model.requests.count(("POST", "refunds")) == 1
    assert verify(world.store, world.payments).ok


def test_one_decision_submitted_twice_at_once_is_sent_once(world: World) -> None:
    """The same action id submitted again while the first submit sits before its one commit
    (a retry, a framework running a call twice): the first's commit finds the action
    journaled, writes nothing and reports the refund the action has: one refund."""
    intent = world.decide()
    again: list[Outcome] = []

    def retry(data: Mapping[str, Any]) -> None:
        if data.get("name") == "approval" and not again:
            again.append(world.gate(Owner.current("retry")).submit(intent))

    outcome = world.gate(Owner.current("first"), hooks={"check": retry}).submit(intent)

    [refund] = world.refunds()
    assert (again[0].status, again[0].external_id) == ("sent", refund.id)
    assert (outcome.status, outcome.external_id) == ("sent", refund.id)
    assert world.model.requests.count(("POST", "refunds")) == 1
    assert [h.record for h in world.store.history(intent.action_id)].count("intent") == 1
    assert verify(world.store, world.payments).ok


def test_an_approval_revoked_between_the_check_and_the_one_commit_is_refused(
    world: World,
) -> None:
    """Revoked after the gate checked it, before the first attempt's one commit: the commit
    checks the stored lease again and refuses; nothing is sent, and the receipt's approval
    check says why."""
    intent = world.decide()

    def revoke(data: Mapping[str, Any]) -> None:
        if data.get("name") == "approval":
            world.store.revoke_lease(world.lease.id, "support")

    outcome = world.gate(Owner.current("first"), hooks={"check": revoke}).submit(intent)

    assert (outcome.status, outcome.reason) == ("refused", "approval revoked by support")
    assert world.refunds() == [] and ("POST", "refunds") not in world.model.requests
    assert outcome.receipt is not None
    [approval] = [c for c in outcome.receipt.checks if c["name"] == "approval"]
    assert (approval["passed"], approval["observed"]) == (False, "approval revoked by support")
    lease = world.store.lease(world.lease.id)
    assert lease is not None and dict(lease.reservations) == {}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_first_attempt_costs_two_commits_one_list_and_one_create(kind: str, tmp_path: Path) -> None:
    """A first attempt makes exactly 2 durable commits and 2 Stripe calls: a list and a create."""
    world = World(
        store=(lambda c: MemoryStore(clock=c))
        if kind == "memory"
        else (lambda c: SQLiteStore(tmp_path / "j.db", clock=c))
    )
    store = world.store
    intent = world.decide()
    commits, requests = store.commits, len(world.model.requests)

    outcome = world.gate(Owner.current("first")).submit(intent)

    assert outcome.status == "sent"
    assert store.commits - commits == 2
    assert world.model.requests[requests:] == [("GET", "refunds"), ("POST", "refunds")]
    store.close()


def test_recovering_a_settled_action_returns_the_record_without_calling_stripe(
    world: World,
) -> None:
    """Recovery of a settled action, or a resubmission, returns the recorded outcome, no calls."""
    intent = world.decide()
    sent = world.gate(Owner.current("first")).submit(intent)
    requests = list(world.model.requests)
    other = world.gate(Owner.current("restart"))

    again = other.recover_action(intent.action_id)
    resubmitted = other.submit(intent)

    assert other.recover() == []
    for outcome in (again, resubmitted):
        assert (outcome.status, outcome.external_id) == ("sent", sent.external_id)
        assert outcome.receipt is not None and sent.receipt is not None
        assert outcome.receipt.hash == sent.receipt.hash
    assert world.model.requests == requests
    assert len(list(world.store.receipts())) == 1


# -- leases ---------------------------------------------------------------------------------


def test_two_actions_on_one_lease_cannot_together_exceed_its_cap(world: World) -> None:
    """A reservation held by a crashed send counts against the cap for every other action."""
    lease = world.grant(3_000)
    first = world.decide(lease_id=lease.id)
    world.crash(first, "sending")

    second = world.gate(Owner.current("second")).submit(world.decide(lease_id=lease.id))
    assert second.status == "refused"
    assert second.reason == "amount 2000 exceeds what the approval has left (1000 of 3000)"

    [recovered] = world.gate(Owner.current("restart")).recover()
    assert recovered.status == "sent"
    third = world.gate(Owner.current("third")).submit(world.decide(1_000, lease_id=lease.id))
    fourth = world.gate(Owner.current("fourth")).submit(world.decide(100, lease_id=lease.id))

    assert third.status == "sent" and fourth.status == "refused"
    assert sum(r.amount for r in world.agent_refunds()) == 3_000
    after = world.store.lease(lease.id)
    assert after is not None and after.spent == 3_000 and dict(after.reservations) == {}


def test_a_refusal_releases_the_reservation(world: World) -> None:
    """A recovery that refuses gives its reservation back, so a new action may use the lease."""
    intent = world.decide()
    world.crash(intent, "before-send")
    reserved = world.store.lease(world.lease.id)
    assert reserved is not None and dict(reserved.reservations) == {intent.action_id: AMOUNT}
    world.hand_refund()
    [refused] = world.gate(Owner.current("restart")).recover()

    retry = world.gate(Owner.current("next")).submit(world.decide())

    assert refused.status == "refused" and retry.status == "sent"
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == AMOUNT and dict(lease.reservations) == {}


def test_revocation_after_the_approval_check_is_caught_by_commit_2(world: World) -> None:
    """Revoking between the approval check and `sending` refuses atomically: nothing is sent."""
    intent = world.decide()

    def revoke(data: Mapping[str, Any]) -> None:
        if data.get("name") == "approval":
            world.store.revoke_lease(world.lease.id, "support")

    outcome = world.gate(Owner.current("first"), hooks={"check": revoke}).submit(intent)

    assert outcome.status == "refused"
    assert outcome.reason == "approval revoked by support"
    assert world.of("first", "sending") == []
    assert world.refunds() == []
    assert outcome.receipt is not None
    assert outcome.receipt.checks[-1] == {
        "name": "approval",
        "expected": f"approval {world.lease.id} live and covering {AMOUNT}",
        "observed": "approval revoked by support",
        "passed": False,
    }


def test_reapprove_sends_under_the_new_lease_naming_the_refused_action(world: World) -> None:
    """After a refusal a person re-approves: the new action sends and its receipt names the old."""
    intent = world.decide()
    world.crash(intent, "before-send")
    world.hand_refund()
    gate = world.gate(Owner.current("restart"))
    [refused] = gate.recover()
    assert refused.status == "refused"
    new_lease = world.grant(CAP)

    outcome = gate.reapprove(intent.action_id, new_lease.id, "support")

    assert outcome.status == "sent" and outcome.action_id != intent.action_id
    assert [r.id for r in world.agent_refunds(outcome.action_id)] == [outcome.external_id]
    assert world.agent_refunds(intent.action_id) == []
    assert outcome.receipt is not None
    body = outcome.receipt.body
    assert body["lease_id"] == new_lease.id
    assert body["context"] == {"reapproves": intent.action_id, "approved_by": "support"}
    lease = world.store.lease(new_lease.id)
    assert lease is not None and lease.spent == AMOUNT
    assert verify(world.store, world.payments).ok


def test_reapprove_refuses_an_action_that_was_not_refused(world: World) -> None:
    """Only a refused (or unknown) action can be approved again."""
    intent = world.decide()
    gate = world.gate(Owner.current("first"))
    gate.submit(intent)

    with pytest.raises(ActionError, match="only a refused or unknown action"):
        gate.reapprove(intent.action_id, world.grant(CAP).id, "support")


def test_reapprove_of_an_unknown_action_whose_refund_landed_adopts_it(world: World) -> None:
    """A 500 after the refund was made, the worker killed after the unknown mark: re-approving
    adopts that refund for the original action and sends nothing ($20 for one decision)."""
    world.model.add_fault("error_500", stage="after_commit")
    intent = world.decide()
    world.crash(intent, "unknown")
    creates = world.model.requests.count(("POST", "refunds"))

    outcome = world.gate(Owner.current("person")).reapprove(
        intent.action_id, world.grant(CAP).id, "support"
    )

    [refund] = world.agent_refunds()
    assert (outcome.action_id, outcome.status, outcome.external_id) == (
        intent.action_id,
        "adopted",
        refund.id,
    )
    assert world.model.requests.count(("POST", "refunds")) == creates
    assert sum(r.amount for r in world.refunds()) == AMOUNT
    assert world.store.pending() == [] and len(world.store.actions()) == 1
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == AMOUNT and not lease.reservations
    assert verify(world.store, world.payments).ok


def test_reapprove_of_a_refused_action_whose_refund_exists_sends_nothing(world: World) -> None:
    """A refusal its own refund outlived (the paused-worker limit) is not approved again."""
    intent = world.decide()
    world.crash(intent, "before-send")
    world.hand_refund()
    [refused] = world.gate(Owner.current("restart")).recover()
    assert refused.status == "refused"
    world.payments.create_refund(
        world.pi,
        AMOUNT,
        idempotency_key=intent.action_id,
        metadata={ACTION_METADATA_KEY: intent.action_id},
    )

    with pytest.raises(ActionError, match="its own refund re_"):
        world.gate(Owner.current("person")).reapprove(
            intent.action_id, world.grant(CAP).id, "support"
        )
    assert len(world.agent_refunds()) == 1 and len(world.store.actions()) == 1


@pytest.mark.parametrize("amount", [5_000, 1_000])
def test_a_refund_naming_the_action_with_another_amount_is_a_conflict(
    world: World, amount: int
) -> None:
    """A refund carrying this action's metadata for another amount is never adopted or resent:
    pending, unknown, code `conflict`, nothing spent against the cap."""
    intent = world.decide()
    foreign = world.payments.create_refund(
        world.pi, amount, metadata={ACTION_METADATA_KEY: intent.action_id}
    )
    creates = world.model.requests.count(("POST", "refunds"))

    first = world.gate(Owner.current("first")).submit(intent)
    world.clock.now += 60
    [again] = world.gate(Owner.current("restart")).recover()

    for outcome in (first, again):
        assert (outcome.status, outcome.unknown, outcome.code) == ("pending", True, "conflict")
        assert outcome.reason is not None and foreign.id in outcome.reason
        assert f"is for {amount}, the intent is for {AMOUNT}" in outcome.reason
    assert world.model.requests.count(("POST", "refunds")) == creates
    assert [r.id for r in world.refunds()] == [foreign.id]
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == 0
    state = world.store.action(intent.action_id)
    assert state is not None and state.settlement is None
    assert state.unknown is not None and state.unknown.startswith("conflict: ")
    # verify() reports the refund no receipt records.
    assert any(foreign.id in p for p in verify(world.store, world.payments).problems)


class _AnswersAnotherAmount(InProcessPayments):
    """A create whose answer is a refund for another amount than was asked."""

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        return super().create_refund(
            payment_intent, 5_000, idempotency_key=idempotency_key, metadata=metadata
        )


def test_a_create_answered_with_another_amount_is_a_conflict_and_never_resent() -> None:
    """The create's own answer is held to the intent too: pending conflict, one create."""
    world = World(payments=_AnswersAnotherAmount())
    intent = world.decide()

    first = world.gate(Owner.current("first")).submit(intent)
    world.clock.now += 60
    [again] = world.gate(Owner.current("restart")).recover()

    assert (first.status, first.code) == ("pending", "conflict")
    assert (again.status, again.code) == ("pending", "conflict")
    assert world.model.requests.count(("POST", "refunds")) == 1
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.spent == 0


class _CreateOutlastsTheClaim(InProcessPayments):
    """A create that runs past the claim: meanwhile support refunds by hand and another
    process's recovery takes the claim and refuses; then the refund is made."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], object] | None = None

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        return super().create_refund(
            payment_intent, amount, idempotency_key=idempotency_key, metadata=metadata
        )


def test_a_gate_fenced_out_after_its_refund_reports_the_refund_not_the_other_refusal() -> None:
    """A gate that got its refund back after another process refused reports what it holds:
    pending, code `conflict`, naming its refund, never the other gate's `refused`."""
    payments = _CreateOutlastsTheClaim()
    world = World(payments=payments)
    intent = world.decide()
    refusals: list[Outcome] = []

    def meanwhile() -> None:
        world.clock.now += 20  # the create took longer than the claim and its grace
        payments.model.clear_faults()
        InProcessPayments(world.model).create_refund(world.pi, AMOUNT)
        refusals.extend(world.gate(Owner.current("other")).recover())

    payments.meanwhile = meanwhile
    outcome = world.gate(Owner.current("first")).submit(intent)

    assert [o.status for o in refusals] == ["refused"]
    [refund] = world.agent_refunds(intent.action_id)
    assert (outcome.status, outcome.code, outcome.external_id) == ("pending", "conflict", refund.id)
    assert outcome.reason is not None and "another gate recorded refused" in outcome.reason
    assert refund.id in outcome.reason


# -- the journal's guards -------------------------------------------------------------------


def test_one_action_id_names_one_decision(world: World) -> None:
    """Resubmitting an action id with a different decision is refused, not sent."""
    intent = world.decide()
    world.gate(Owner.current("first")).submit(intent)
    changed = Intent(**{**intent.to_dict(), "amount": 1_000})

    with pytest.raises(ActionError, match="different decision"):
        world.gate(Owner.current("other")).submit(changed)
    assert len(world.refunds()) == 1


def test_submit_refuses_an_intent_of_another_kind(world: World) -> None:
    """A gate for refunds does not journal an intent of another kind."""
    intent = Intent(**{**world.decide().to_dict(), "kind": "payout"})

    with pytest.raises(ActionError, match="this gate sends refund"):
        world.gate(Owner.current("first")).submit(intent)
    assert world.store.action(intent.action_id) is None


# -- config and receipts --------------------------------------------------------------------


def test_timing_refuses_a_timeout_less_than_5_s_inside_the_claim() -> None:
    """Timing(6, 2) is refused with a ConfigError naming both values; Timing(6, 1) is accepted."""
    with pytest.raises(ConfigError) as caught:
        Timing(6, 2)
    message = str(caught.value)
    assert "claim TTL 6 s" in message and "Stripe timeout 2 s" in message
    assert isinstance(caught.value, ValueError)
    # The window before a send: timeout + 5 s + the slack (2 s by default).
    assert Timing(6, 1).send_window_s == 8
    assert Timing(6, 1).renewal_s == 9


@pytest.mark.parametrize(
    ("variable", "raw", "says"),
    [
        ("INTERLOCK_SEND_SLACK", "1e9", "send slack of 1e+09 s is refused: at most 60 s"),
        ("INTERLOCK_SEND_SLACK", "2000", "send slack of 2000 s is refused: at most 60 s"),
        ("INTERLOCK_CLAIM_GRACE", "2000", "claim grace of 2000 s is refused: at most 60 s"),
    ],
)
def test_timing_refuses_a_grace_or_slack_past_a_minute(variable: str, raw: str, says: str) -> None:
    """A slack of 1e9 s (a claim held for decades) or 2000 meant as milliseconds is refused,
    naming the unit and the variable; a minute is still accepted."""
    with pytest.raises(ConfigError) as caught:
        Timing.from_env({variable: raw})
    message = str(caught.value)
    assert says in message
    assert "in seconds, not milliseconds" in message and variable in message
    assert Timing.from_env({variable: "60"}).claim_ttl_s == 40


def test_timing_refuses_a_renewal_past_the_one_day_cap() -> None:
    """A day's claim with a long timeout and slack would renew past the one-day cap: refused,
    since cutting the renewal to the cap would not cover the send window."""
    day = 24 * 3600.0
    with pytest.raises(ConfigError, match="past the cap of 86400 s"):
        Timing(day, day - 5, slack_s=60)
    timing = Timing(day, day - 60, slack_s=50)
    assert timing.renewal_s <= day and timing.renewal_s >= timing.send_window_s


def test_signed_receipts_verify_with_their_key_only(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Receipts signed with the gate's key verify under its public key alone, and fail
    under a key list that does not name it or with none."""
    monkeypatch.delenv("INTERLOCK_VERIFY_KEYS", raising=False)
    gate = world.gate(Owner.current("first"), signing_key=KEY)
    gate.submit(world.decide(1_000))
    gate.submit(world.decide(1_000))

    good = verify(world.store, world.payments, keys=_trusting(KEY))
    bad = verify(world.store, world.payments, keys=_trusting(SigningKey.generate()))
    none = verify(world.store, world.payments)

    assert good.ok and good.signed and good.chain_length == 2, good.problems
    assert good.formats == {"ed25519": 2}
    assert len(bad.problems) == 2
    assert all(f"signed by key {KEY.key_id}, which the key list does not name" in p
               for p in bad.problems)  # fmt: skip
    assert len(none.problems) == 2
    assert all("but no key list was given to check it" in p for p in none.problems)


def test_receipt_keys_from_the_environment_sign_and_verify(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With INTERLOCK_SIGNING_KEY naming the key's file the gate signs, and with
    INTERLOCK_VERIFY_KEYS naming a key list verify() checks with it."""
    KEY.save(tmp_path / "signing-key.pem")
    _trusting(KEY).save(tmp_path / "keys.json")
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", str(tmp_path / "signing-key.pem"))
    monkeypatch.setenv("INTERLOCK_VERIFY_KEYS", str(tmp_path / "keys.json"))
    outcome = world.gate(Owner.current("first")).submit(world.decide())

    assert outcome.receipt is not None and outcome.receipt.signed
    assert outcome.receipt.body["key_id"] == KEY.key_id
    assert verify(world.store, world.payments).ok
    assert not verify(world.store, world.payments, keys=_trusting(SigningKey.generate())).ok


def test_a_receipt_secret_alone_stops_the_gate_in_words(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """INTERLOCK_RECEIPT_KEY (the HMAC secret receipts were signed with before) without a
    signing key: the gate refuses to start, and says how to make and set the key."""
    monkeypatch.delenv("INTERLOCK_SIGNING_KEY", raising=False)
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", "env-key")

    with pytest.raises(ConfigError) as refused:
        world.gate(Owner.current("first"))

    words = str(refused.value)
    assert "INTERLOCK_RECEIPT_KEY is set, but receipts are now signed with an Ed25519 key" in words
    assert "keygen" in words and "INTERLOCK_SIGNING_KEY" in words


def test_a_secret_as_the_signing_key_stops_the_gate_in_words(world: World) -> None:
    """Bytes as `signing_key` (how the HMAC secret was given) are refused in words."""
    with pytest.raises(ConfigError, match="not a shared secret"):
        world.gate(Owner.current("first"), signing_key=b"key-one")  # type: ignore[arg-type]


def test_unsigned_receipts_say_so(world: World) -> None:
    """Without a key receipts are marked unsigned and carry no signature."""
    outcome = world.gate(Owner.current("first")).submit(world.decide())

    assert outcome.receipt is not None
    assert outcome.receipt.body["signed"] is False and outcome.receipt.signature is None
    result = verify(world.store, world.payments)
    assert result.ok and not result.signed


# -- inputs, kinds and recovery that goes on ----------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("amount", -2_000, "must be positive"),
        ("amount", 0, "must be positive"),
        ("amount", 10**10, "below"),
        ("amount", True, "integer number of cents"),
        ("amount", 20.0, "integer number of cents"),
        ("action_id", "act_é", "printable ASCII"),
        ("action_id", "act_1\r\nX-Evil: 1", "printable ASCII"),
        ("action_id", "act with space", "printable ASCII"),
        ("action_id", "a" * 201, "at most 200"),
        ("lease_id", "", "non-empty"),
        ("target", "pi_\x00", "printable ASCII"),
        ("kind", " ", "kind of action"),
    ],
)
def test_a_bad_intent_is_refused_before_anything_is_journaled(
    world: World, field: str, value: object, says: str
) -> None:
    """A negative amount or an id that cannot go into a header raises IntentError naming it.

    Before, a negative amount reserved a negative sum (raising the lease's cap) and a CR/LF
    id failed after commit 2 and then blocked every later recovery.
    """
    good = world.decide()
    commits = world.store.commits

    with pytest.raises(IntentError) as caught:
        replace(good, **{field: value})

    assert caught.value.field == field and says in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert world.store.commits == commits and world.store.pending() == []


def test_recover_action_refuses_an_action_of_another_kind(world: World) -> None:
    """`recover_action` never drives an action of another kind through this gate's effect."""
    other = replace(world.decide(), kind="webhook")
    world.store.begin(other, gone_owner(), 6.0, 2.0)
    gate = world.gate(Owner.current("refunds"))

    with pytest.raises(ActionError, match="is a webhook, this gate sends refund"):
        gate.recover_action(other.action_id)

    assert gate.recover() == []
    assert world.store.pending() == [other.action_id]
    assert world.model.requests.count(("POST", "refunds")) == 0


def test_recover_reports_an_action_that_raises_and_goes_on(tmp_path: Path) -> None:
    """An unreadable journaled action (written before inputs were checked) stops nothing.

    It is reported (an event and a pending outcome naming the error); the next action is
    recovered.
    """
    world = World(lambda clock: SQLiteStore(tmp_path / "j.db", clock=clock))
    bad, good = world.decide(), world.decide()
    for intent in (bad, good):
        world.store.begin(intent, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)
    conn = sqlite3.connect(tmp_path / "j.db")
    with conn:
        conn.execute(
            "UPDATE actions SET intent=json_set(intent, '$.action_id', 'act_\r\nX: y')"
            " WHERE action_id=?",
            (bad.action_id,),
        )
    conn.close()

    outcomes = world.gate(Owner.current("restart")).recover()

    by_id = {o.action_id: o for o in outcomes}
    assert by_id[bad.action_id].status == "pending"
    assert "IntentError" in str(by_id[bad.action_id].reason)
    assert by_id[good.action_id].status == "sent"
    assert [e.data["action_id"] for e in world.of("restart", "recover-error")] == [bad.action_id]


# -- claims: epochs, the same owner, grace, taking early -----------------------------------


def test_the_same_owner_cannot_retake_its_own_claim_while_its_send_may_be_in_flight(
    world: World,
) -> None:
    """A `recover()` in the same process, during the gate's own in-flight window, waits.

    Before, the same owner re-took its own `sending` claim at once, read the world while
    its request was still running and could refuse.
    """
    world.model.add_fault("drop", count=2)  # the send and the transport's one resend
    owner = Owner.current("one-process")
    intent = world.decide()
    seen: list[Outcome] = []

    def meanwhile(_data: Mapping[str, Any]) -> None:
        seen.append(world.gate(owner).recover_action(intent.action_id, wait=False))

    outcome = world.gate(owner, hooks={"in-flight-wait": meanwhile}).submit(intent)

    assert [o.status for o in seen] == ["pending"]
    assert outcome.status == "adopted"
    assert len(world.agent_refunds(intent.action_id)) == 1


def test_two_gates_of_one_identity_are_fenced_by_epoch(world: World) -> None:
    """A gate delayed between its checks and commit 2 cannot send after another took over.

    Both gates share one owner identity (threads of one process); the second takes the
    expired claim (a new epoch) and sends; the first's commit 2 then fails on the epoch.
    The first is a recovery (a first attempt holds no claim before its one commit).
    """
    owner = Owner.current("shared-id")
    intent = world.decide()
    world.store.begin(intent, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)
    second: list[Outcome] = []

    def stall(data: Mapping[str, Any]) -> None:
        if data.get("name") == "approval" and not second:
            world.clock.now += TIMING.claim_ttl_s + 1
            second.append(world.gate(owner).recover_action(intent.action_id))

    first = world.gate(owner, hooks={"check": stall}).recover_action(intent.action_id)

    assert second[0].status == "sent"
    assert first.status in ("pending", "sent")
    assert first.status == "pending" or first.external_id == second[0].external_id
    assert world.model.requests.count(("POST", "refunds")) == 1
    assert len(world.agent_refunds(intent.action_id)) == 1


@pytest.mark.parametrize(
    "timing", [Timing(), Timing(15, 10), Timing(6, 1)], ids=["library", "stage", "tests"]
)
def test_no_send_a_claim_allowed_can_land_after_it_stops_blocking(timing: Timing) -> None:
    """The check behind the wait on stage (docs/design.md, *Claims*): a send may start at any
    instant from its `sending` mark to the last one with the send window left on the claim,
    and land up to the in-flight window after it. Every such landing comes while the claim
    still blocks (its expiry plus the grace, as `Claim.blocks` says). A take at the mark
    plus the in-flight window alone, 5 s sooner on stage, would come before a landing: a
    worker delayed a moment between its mark and its call (then killed) still lands later.
    So a dead owner's `sending` claim is waited out to its expiry plus the grace."""
    mark = 1_000.0
    claim = Claim(gone_owner(), mark, mark + timing.renewal_s, sending=True, epoch=1)
    last_start = claim.expires_at - timing.send_window_s
    starts = [mark + (last_start - mark) * k / 100 for k in range(101)]

    latest_landing = max(start + timing.in_flight_s for start in starts)
    assert all(claim.blocks(start + timing.in_flight_s, grace_s=timing.grace_s) for start in starts)
    assert not claim.blocks(claim.expires_at + timing.grace_s, grace_s=timing.grace_s)
    assert latest_landing > mark + timing.in_flight_s


def test_a_sending_claim_is_waited_out_to_its_expiry_plus_the_grace(world: World) -> None:
    """Nobody takes a `sending` claim until expiry + grace (a clock step, an overrun)."""
    intent = world.decide()
    claim = world.crash(intent, "before-send", owner=remote_owner())
    assert claim.sending

    world.clock.now = claim.expires_at + TIMING.grace_s - 0.5
    [held] = world.gate(Owner.current("early")).recover(wait=False)
    world.clock.now = claim.expires_at + TIMING.grace_s
    [taken] = world.gate(Owner.current("later")).recover(wait=False)

    assert held.status == "pending"
    assert taken.status == "sent"


def test_a_dead_owner_whose_refund_landed_is_adopted_without_waiting(world: World) -> None:
    """After-answer: the lookup finds the dead worker's refund, so its claim is taken at once."""
    intent = world.decide()
    claim = world.crash(intent, "after-answer")
    started = world.clock()

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "adopted"
    assert world.clock() == started < claim.expires_at
    assert world.of("restart", "claim-wait") == []
    assert [e.data["early"] for e in world.of("restart", "claim")] == [True]
    assert world.model.requests.count(("POST", "refunds")) == 1


def test_a_dead_owner_whose_send_did_not_land_is_still_waited_out(world: World) -> None:
    """A dead owner with `sending` and no refund found: its request may still land, so wait."""
    intent = world.decide()
    claim = world.crash(intent, "before-send")

    [outcome] = world.gate(Owner.current("restart")).recover()

    assert outcome.status == "sent"
    [send] = world.of("restart", "before-send")
    assert send.t >= claim.expires_at + TIMING.grace_s


# -- a store that cannot be used ------------------------------------------------------------


def test_a_full_disk_is_a_store_error_and_nothing_is_sent(tmp_path: Path) -> None:
    """SQLITE_FULL surfaces as StoreError saying the disk is full; no refund call is made."""
    world = World(lambda clock: SQLiteStore(tmp_path / "j.db", clock=clock))
    # A decision too large for the pages the "disk" has left.
    intent = replace(world.decide(), context={"notes": "x" * 100_000})
    store = world.store
    assert isinstance(store, SQLiteStore)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages}")

    with pytest.raises(StoreError) as caught:
        world.gate(Owner.current("first")).submit(intent)

    assert "disk is full" in str(caught.value)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert world.model.requests.count(("POST", "refunds")) == 0


def _honest_store(path: Path, actions: int) -> tuple[int, bytearray]:
    """A store file with `actions` settled sends; its page size and bytes."""
    world = World(lambda clock: SQLiteStore(path, clock=clock))
    for _ in range(actions):
        world.gate(Owner.current("honest")).submit(world.decide(1, world.grant(1).id))
    world.store.close()
    conn = sqlite3.connect(path)
    (page,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    return page, bytearray(path.read_bytes())


def _root(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()
    conn.close()
    return int(root)


def test_a_corrupt_page_the_send_path_reads_stops_it_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    """A corrupt action table is a StoreError at commit 1: no refund call is ever made.

    (Checking every page on open would make opening, on every worker restart, grow with
    the file; the pages a send depends on are checked by SQLite as commits 1 and 2 read
    them, and `verify()` checks the whole file.)
    """
    path = tmp_path / "j.db"
    page, data = _honest_store(path, 30)
    root = _root(path, "actions")
    data[(root - 1) * page : root * page] = b"\xff" * page
    path.write_bytes(bytes(data))
    world = World(lambda clock: SQLiteStore(path, clock=clock))
    creates = world.model.requests.count(("POST", "refunds"))

    with pytest.raises(StoreError) as caught:
        world.gate(Owner.current("after")).submit(world.decide(1, world.grant(1).id))

    assert "corrupt" in str(caught.value) and "nothing was sent" in str(caught.value)
    assert world.model.requests.count(("POST", "refunds")) == creates
    result = verify(world.store)
    assert not result.ok and result.problems[0].startswith("the file is corrupt")


def test_verify_reports_a_corrupt_page_no_send_reads(tmp_path: Path) -> None:
    """Damage to an old journal page is not on the send path; `verify()` reports it."""
    path = tmp_path / "j.db"
    page, data = _honest_store(path, 60)
    root = _root(path, "journal")
    node = data[(root - 1) * page : root * page]
    assert node[0] == 0x05, "the journal should span pages under an interior root"
    first_cell = int.from_bytes(node[12:14], "big")
    leftmost_leaf = int.from_bytes(node[first_cell : first_cell + 4], "big")
    data[(leftmost_leaf - 1) * page : leftmost_leaf * page] = b"\xff" * page
    path.write_bytes(bytes(data))
    store = SQLiteStore.open_read_only(path)

    result = verify(store)
    store.close()

    assert not result.ok
    assert result.problems and all(p.startswith("the file is corrupt") for p in result.problems)
