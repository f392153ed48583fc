"""Your own effect (`CustomEffect`) and the Stripe transfer, each certified in every cell.

`StripeTransfer` on the in-process fake must be right and truthful over every crash point
x answer x outage. A send that names the action and differs must not pass. (The webhook of
tests/helpers/webhook.py as a `CustomEffect` is `tests/loopback/test_webhook_effects.py`.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    ConfigError,
    CustomEffect,
    Found,
    Gate,
    Intent,
    MemoryStore,
    PaymentsRejectedError,
    SigningKey,
    StripeTransfer,
    Timing,
    Transfers,
    transfers_fingerprint,
)
from interlock.testing import InProcessPayments, certify


class TransferWorld:
    """A fresh connected account in the in-memory Stripe model, and $20 decided to it."""

    def __init__(self) -> None:
        self.payments = InProcessPayments()

    def new_effect(self) -> StripeTransfer:
        return StripeTransfer(self.payments)

    def decide(self, lease_id: str) -> Intent:
        account = f"acct_{uuid.uuid4().hex[:16]}"
        seen = transfers_fingerprint(self.payments.list_transfers(account))
        return Intent(f"act_{uuid.uuid4().hex}", "transfer", account, 2_000, lease_id, seen)

    def change(self, intent: Intent) -> None:
        self.payments.create_transfer(intent.target, 2_000)

    def count(self, intent: Intent) -> int:
        return sum(
            t.metadata.get(ACTION_METADATA_KEY) == intent.action_id
            for t in self.payments.list_transfers(intent.target)
        )


class EuroTransferWorld(TransferWorld):
    """The same world, its transfers in euros."""

    def new_effect(self) -> StripeTransfer:
        return StripeTransfer(self.payments, currency="eur")


def test_a_transfer_in_euros_is_certified_under_an_approval_in_euros() -> None:
    """The harness's wrapper shows the gate its effect's currency, so the intents are
    journaled in eur, and it grants its approvals in eur: an EUR transfer effect is
    certified as the USD one is."""
    stores: list[MemoryStore] = []

    def keep(clock: Callable[[], float]) -> MemoryStore:
        stores.append(MemoryStore(clock=clock))
        return stores[-1]

    report = certify(EuroTransferWorld, store=keep)

    report.assert_certified()
    assert len(report.results) == 144
    journaled = {stores[0].action(a).intent.currency for a in stores[0].actions()}  # type: ignore[union-attr]
    assert journaled == {"eur"}


def test_a_send_naming_the_action_that_differs_is_a_conflict_never_adopted() -> None:
    """A lookup that returns a send of another amount: not our own, a conflict."""
    other = Found("dlv_other", 5, target="ord_1")
    effect = CustomEffect(
        kind="webhook",
        send=lambda intent, key: other,
        lookup=lambda intent: [other],
        state=lambda intent: "sha256:x",
        deadline_s=1,
    )
    intent = Intent("act_1", "webhook", "ord_1", 1, "lease-1", "sha256:x")

    looked = effect.observe(intent)

    assert looked.own is None
    assert looked.conflict == other


def _webhook(deadline_s: float) -> CustomEffect:
    return CustomEffect(
        kind="webhook",
        send=lambda intent, key: Found("dlv_1", 1),
        lookup=lambda intent: [],
        state=lambda intent: "sha256:x",
        deadline_s=deadline_s,
    )


def test_a_custom_send_that_may_outlast_the_plan_is_refused_before_anything_runs() -> None:
    """The gate sizes its claims by its Stripe timeout: a send allowed 31 s under a 30 s
    plan could land after another worker took over, so the gate is never built."""
    timing = Timing(claim_ttl_s=40, stripe_timeout_s=30)

    with pytest.raises(ConfigError, match=r"\(31 s per call\) is longer than .* \(30 s\)"):
        Gate(
            MemoryStore(),
            _webhook(31),
            timing=timing,
            signing_key=SigningKey.generate(),
            approvers=UNSIGNED_APPROVALS,
        )
    assert Gate(
        MemoryStore(),
        _webhook(30),
        timing=timing,
        signing_key=SigningKey.generate(),
        approvers=UNSIGNED_APPROVALS,
    )


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
def test_a_custom_effect_needs_a_finite_deadline(bad: object) -> None:
    """No deadline, or one that is not a finite positive number, is refused in words."""
    with pytest.raises((TypeError, ValueError), match="deadline_s must be"):
        _webhook(bad)  # type: ignore[arg-type]


def test_a_custom_lookup_prefers_a_send_that_took_hold() -> None:
    """Of two sends naming the action, the one that counts is its own."""
    failed, held = Found("a", 1, counts=False, status="failed"), Found("b", 1)
    effect = CustomEffect(
        kind="webhook",
        send=lambda intent, key: held,
        lookup=lambda intent: [failed, held],
        state=lambda intent: "sha256:x",
        deadline_s=1,
    )

    looked = effect.observe(Intent("act_1", "webhook", "ord_1", 1, "lease-1", "sha256:x"))

    assert looked.own == held and looked.conflict is None


def test_the_stripe_transfer_is_certified_in_every_cell() -> None:
    """Every crash point x answer x outage: the transfer ends as wanted, reported truly."""
    report = certify(TransferWorld)

    print(report.table())
    assert len(report.results) == 144
    report.assert_certified()
    by_cell = {str(r.cell): r for r in report.results}
    assert by_cell["no-crash/lost/none"].reported == "adopted"
    assert by_cell["no-crash/refused/none"].reported == "failed"
    assert by_cell["before-send/ok/change"].reported == "refused"


def test_a_transfer_naming_the_action_in_another_currency_is_a_conflict() -> None:
    """Same account, same amount, this action's metadata, but euros where the effect sends
    dollars: not the action's own, so it is never adopted."""
    world = TransferWorld()
    intent = world.decide("lease-1")
    euros = world.payments.create_transfer(
        intent.target,
        intent.amount,
        currency="eur",
        metadata={ACTION_METADATA_KEY: intent.action_id},
    )

    looked = world.new_effect().observe(intent)

    assert looked.own is None
    assert looked.conflict is not None and looked.conflict.external_id == euros.id
    assert looked.conflict.mismatch(intent, "usd") == "is in eur, the intent is in usd"
    in_euros = StripeTransfer(world.payments, currency="EUR").observe(intent)
    assert in_euros.own is not None and in_euros.own.external_id == euros.id


def test_in_process_payments_are_transfers_too() -> None:
    """The fake implements the `Transfers` protocol."""
    assert isinstance(InProcessPayments(), Transfers)


def test_a_transfer_resent_under_its_key_is_replayed_not_made_again() -> None:
    """Stripe's idempotency layer covers transfers as it covers refunds."""
    payments = InProcessPayments()

    first = payments.create_transfer("acct_MadeUp1", 700, idempotency_key="k1")
    again = payments.create_transfer("acct_MadeUp1", 700, idempotency_key="k1")

    assert again == first
    assert [t.id for t in payments.list_transfers("acct_MadeUp1")] == [first.id]


def test_a_key_reused_for_another_transfer_is_refused() -> None:
    """Same key, other parameters: Stripe's idempotency_error, nothing made."""
    payments = InProcessPayments()
    payments.create_transfer("acct_MadeUp1", 700, idempotency_key="k1")

    with pytest.raises(PaymentsRejectedError, match="same parameters"):
        payments.create_transfer("acct_MadeUp1", 800, idempotency_key="k1")
    assert len(payments.list_transfers("acct_MadeUp1")) == 1


def test_transfers_are_listed_by_destination_across_pages() -> None:
    """250 transfers to one account, interleaved with others: every one found, newest first."""
    payments = InProcessPayments()
    made, elsewhere = [], []
    for i in range(250):
        made.append(payments.create_transfer("acct_MadeUpA", 100 + i).id)
        elsewhere.append(payments.create_transfer("acct_MadeUpB", 100).id)

    listed = payments.list_transfers("acct_MadeUpA")

    assert [t.id for t in listed] == made[::-1]
    assert all(t.destination == "acct_MadeUpA" for t in listed)
    # A page before a cursor, and a cursor of another destination: Stripe's 404.
    page = payments.model.list_transfers(
        {"destination": "acct_MadeUpA", "ending_before": made[10], "limit": "3"}
    )
    assert [t["id"] for t in page.body["data"]] == made[13:10:-1]
    other = payments.model.list_transfers(
        {"destination": "acct_MadeUpA", "starting_after": elsewhere[5]}
    )
    assert other.status == 404


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"amount": "100", "currency": "usd"}, "Missing required param: destination"),
        ({"amount": "100", "currency": "usd", "destination": "cus_1"}, "No such destination"),
        ({"amount": "0", "currency": "usd", "destination": "acct_1"}, "greater than or equal"),
        ({"amount": "100", "destination": "acct_1"}, "Missing required param: currency"),
        ({"amount": "1", "currency": "usd", "destination": "acct_1", "x": "1"}, "unknown"),
        (
            {"amount": "1", "currency": "usd", "destination": "acct_1", "transfer_group": "g"},
            "does not model parameter transfer_group",
        ),
    ],
)
def test_a_bad_transfer_is_refused_in_stripes_words(params: dict[str, str], words: str) -> None:
    """Strict params, as Stripe's: a clear 400 and no transfer."""
    payments = InProcessPayments()

    reply = payments.model.post("transfers", dict(params))

    assert reply.status == 400
    assert words in reply.body["error"]["message"]
    assert payments.model.list_transfers({}).body["data"] == []


def test_a_send_landing_between_the_two_reads_is_still_found() -> None:
    """The state is read before the lookup: a held send that lands right after the first
    read is found as our own, never seen only as a change (a refusal while it exists)."""
    intent = Intent("act_1", "webhook", "ord_1", 1, "lease-1", "sha256:before")
    landed: list[Found] = []

    def first_read() -> bool:
        # The held send lands just after whichever read comes first.
        if landed:
            return False
        landed.append(Found("dlv_1", 1, target="ord_1"))
        return True

    effect = CustomEffect(
        kind="webhook",
        send=lambda i, key: landed[0],
        lookup=lambda i: [] if first_read() else list(landed),
        state=lambda i: "sha256:before" if first_read() else "sha256:after",
        deadline_s=1,
    )

    looked = effect.observe(intent)

    assert looked.own == Found("dlv_1", 1, target="ord_1")
    assert looked.fingerprint == "sha256:before"
