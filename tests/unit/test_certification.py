"""`interlock.testing`: the certification harness, on the Stripe refund.

The harness runs every crash point x provider answer x outage on fresh worlds. The refund
must come out right and truthful in every cell; deliberately broken effects (one that
adopts any agent refund, one whose lookup is its process's memory) must not, so the
harness can fail. The same over a webhook on
loopback is `tests/loopback/test_webhook_effects.py`.
"""

from __future__ import annotations

import uuid

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    Found,
    Intent,
    Observation,
    StripeRefund,
    refunds_fingerprint,
)
from interlock.testing import (
    ANSWERS,
    CRASH_POINTS,
    OUTAGES,
    Cell,
    InProcessPayments,
    cells,
    certify,
    run_cell,
)


class RefundWorld:
    """A $100 payment in the in-memory Stripe model, and a $20 refund decided on it."""

    def __init__(self) -> None:
        self.payments = InProcessPayments()

    def new_effect(self) -> StripeRefund:
        return StripeRefund(self.payments)

    def decide(self, lease_id: str) -> Intent:
        pi = self.payments.create_payment(10_000).id
        seen = self.payments.list_refunds(pi)
        return Intent(f"act_{uuid.uuid4().hex}", "refund", pi, 2_000, lease_id,
                      refunds_fingerprint(seen))  # fmt: skip

    def change(self, intent: Intent) -> None:
        self.payments.create_refund(intent.target, 2_000)

    def count(self, intent: Intent) -> int:
        return sum(
            1
            for r in self.payments.list_refunds(intent.target)
            if r.counts and r.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        )


class AdoptsAnyAgentRefund(StripeRefund):
    """A broken refund effect: its lookup takes any refund an agent made on the payment
    (one that names some action) for this action's own."""

    def observe(self, intent: Intent) -> Observation:
        """The payment's refunds, with the first agent refund as "our own"."""
        refunds = self.payments.list_refunds(intent.target)
        agents = [r for r in refunds if r.counts and r.metadata.get(ACTION_METADATA_KEY)]
        own = agents[0] if agents else None
        return Observation(
            fingerprint=refunds_fingerprint(refunds),
            own=None if own is None else Found(own.id, own.amount, own.counts, own.status),
            seen=[],
        )


class AdoptingWorld(RefundWorld):
    """The refund world with the broken lookup."""

    def new_effect(self) -> StripeRefund:
        return AdoptsAnyAgentRefund(self.payments)


class RemembersWhatItSent:
    """A broken refund effect: its lookup is the process's memory of what it sent, over a
    provider that does not replay answers per key (it creates with no idempotency key).
    It finds its own send only while the process that sent it lives."""

    kind = "refund"

    def __init__(self, payments: InProcessPayments) -> None:
        self.payments = payments
        self.sent: dict[str, Found] = {}

    def observe(self, intent: Intent) -> Observation:
        """The payment's refunds, and "our own" from memory."""
        refunds = self.payments.list_refunds(intent.target)
        return Observation(refunds_fingerprint(refunds), self.sent.get(intent.action_id), [])

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """A refund naming the action, remembered once its answer arrives."""
        refund = self.payments.create_refund(
            intent.target, intent.amount, metadata={ACTION_METADATA_KEY: intent.action_id}
        )
        found = Found(refund.id, refund.amount, refund.counts, refund.status, intent.target)
        self.sent[intent.action_id] = found
        return found


class MemoryLookupWorld(RefundWorld):
    """The refund world with the lookup in process memory."""

    def new_effect(self) -> RemembersWhatItSent:  # type: ignore[override]
        return RemembersWhatItSent(self.payments)


def test_the_stripe_refund_is_certified_in_every_cell() -> None:
    """Every crash point x answer x outage: the refund ends as wanted and the report is true."""
    report = certify(RefundWorld)

    print(report.table())
    assert len(report.results) == len(CRASH_POINTS) * len(ANSWERS) * len(OUTAGES) == 144
    report.assert_certified()
    # The cells exercise what they name: lost answers were adopted, refusals failed.
    by_cell = {str(r.cell): r for r in report.results}
    assert by_cell["no-crash/lost/none"].reported == "adopted"
    assert by_cell["no-crash/late/change"].reported == "adopted"
    assert by_cell["no-crash/refused/none"].reported == "failed"
    assert by_cell["before-send/ok/change"].reported == "refused"
    # An in-progress request still runs when the resend arrives, and the provider answers
    # the resend with its first answer (one refund); a late one has finished by then.
    assert by_cell["no-crash/in-progress/none"].conflicts > 0
    assert by_cell["no-crash/in-progress/none"].got == 1
    assert by_cell["no-crash/late/none"].conflicts == 0
    claiming = [r for r in report.results if r.reported in ("sent", "adopted")]
    assert claiming and all(r.names_its_own for r in claiming)
    assert all(r.second_ok for r in report.results)


@pytest.mark.parametrize("cell", cells(answers=("lost", "late"), outages=("change",)), ids=str)
def test_one_test_per_cell_is_a_parametrize_away(cell: Cell) -> None:
    """`cells()` and `run_cell()` give one CI test per cell."""
    run_cell(RefundWorld, cell).assert_certified()


def test_an_effect_that_adopts_any_agent_refund_is_not_certified() -> None:
    """A lookup that takes another action's refund (a neighbour on the same payment, its
    action id one character away) for its own: its claiming reports name a refund that is
    not this action's, and the harness says so."""
    report = certify(AdoptingWorld)

    assert report.failures, report.table()
    by_cell = {str(r.cell): r for r in report.failures}
    assert "no-crash/ok/none" in by_cell
    assert not by_cell["no-crash/ok/none"].truthful
    with pytest.raises(AssertionError, match="UNTRUTHFUL"):
        report.assert_certified()


def test_an_effect_whose_lookup_is_its_process_memory_is_not_certified() -> None:
    """Each restart builds the effect anew, as a new process does, and a resend reaches the
    provider's own key handling: a lookup that only remembers what its process sent loses
    it with the process (a restart after the answer refuses its own refund, or sends it
    again), and a provider that replays nothing per key pays the resend twice."""
    report = certify(MemoryLookupWorld)

    by_cell = {str(r.cell): r for r in report.results}
    after_answer = by_cell["after-answer/ok/none"]
    assert not (after_answer.right and after_answer.truthful), after_answer.line()
    paid_twice = by_cell["no-crash/in-progress/none"]
    assert paid_twice.got == 2 and not paid_twice.right, paid_twice.line()
    assert by_cell["no-crash/ok/none"].right and by_cell["no-crash/ok/none"].truthful
    with pytest.raises(AssertionError, match=r"WRONG|UNTRUTHFUL"):
        report.assert_certified()


def test_a_world_with_one_shared_effect_is_told_what_to_give() -> None:
    """A world that offers one `effect` object (the old shape) cannot give a restart a new
    one: certify says what to add instead of reusing it."""

    class OneEffectWorld(RefundWorld):
        def __init__(self) -> None:
            super().__init__()
            self.effect = StripeRefund(self.payments)

        new_effect = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"give OneEffectWorld a method new_effect\(self\)"):
        certify(OneEffectWorld, only=cells()[:1])
