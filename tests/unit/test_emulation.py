"""The gate reads no switch: what it guards against is emulated only by wrapping its effect
in `interlock.testing`'s `NoLookup` and `Emulate24h`, and its receipts say so.

The truth table's emulated rows, run through the demo's workers, are the e2e tests of
`--no-lookup` and `--emulate-24h` (tests/e2e/test_engine_e2e.py, tests/e2e/test_cli.py);
these run the wrappers on the in-process rig.
"""

from __future__ import annotations

import pytest

from interlock import (
    REASON_WORLD_CHANGED,
    ActionError,
    Effect,
    Found,
    Intent,
    ListsSends,
    Observation,
    Owner,
    StripeRefund,
    StripeTransfer,
    verify,
)
from interlock.testing import Emulate24h, InProcessPayments, NoLookup, PaymentsModel
from tests.helpers.gate_rig import AMOUNT, Crash, GateWorld, gone_owner


def _crash(world: GateWorld, at: str, wrap: type[NoLookup | Emulate24h] | None = None) -> Intent:
    """A decision whose first worker dies at `at`, its gate's effect wrapped in `wrap`."""
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at=at, emulate=wrap).submit(intent)
    return intent


@pytest.mark.parametrize("switch", ["INTERLOCK_NO_LOOKUP", "INTERLOCK_EMULATE_24H"])
def test_the_gate_ignores_the_demos_switches_in_its_environment(
    monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """With a switch set where the gate runs, recovery still looks its refund up and adopts
    it, and a resend still carries the action's own key: the receipt emulates nothing."""
    monkeypatch.setenv(switch, "1")
    world = GateWorld()
    landed = _crash(world, "after-answer")
    unsent = _crash(world, "before-send")

    outcomes = {o.action_id: o for o in world.gate(Owner.current("restart")).recover()}

    adopted = outcomes[landed.action_id]
    assert adopted.status == "adopted" and adopted.receipt is not None
    assert adopted.receipt.body["emulated"] == []
    (lookup,) = [c for c in adopted.receipt.checks if c["name"] == "lookup"]
    assert lookup["observed"] == adopted.external_id
    assert outcomes[unsent.action_id].status == "sent"
    keys = [e.data["idempotency_key"] for e in world.events if e.kind == "before-send"]
    assert keys == [landed.action_id, unsent.action_id, unsent.action_id]
    assert verify(world.store, world.payments).ok


def test_no_lookup_refuses_its_own_refund_and_the_receipt_says_the_lookup_was_skipped() -> None:
    """The truth table's row "the gate without its lookup": refused, the lookup check
    recorded as skipped (no lookup event), the emulation named, and verify() reports it."""
    world = GateWorld()
    intent = _crash(world, "after-answer", NoLookup)
    world.events.clear()

    [outcome] = world.gate(Owner.current("restart"), emulate=NoLookup).recover()

    assert (outcome.status, outcome.reason) == ("refused", REASON_WORLD_CHANGED)
    assert outcome.receipt is not None
    assert outcome.receipt.body["emulated"] == ["NoLookup"]
    (lookup,) = [c for c in outcome.receipt.checks if c["name"] == "lookup"]
    assert (lookup["expected"], lookup["observed"]) == ("skipped: NoLookup is set", None)
    checked = [e.data["name"] for e in world.events if e.kind == "check"]
    assert "lookup" not in checked and "world_unchanged" in checked
    assert not verify(world.store, world.payments).ok
    assert len(world.agent_refunds(intent.action_id)) == 1


def test_a_reapproval_under_no_lookup_still_finds_the_refund() -> None:
    """`NoLookup` turns off the send path's lookup only: re-approving the refusal finds the
    action's own refund (evidence wins) and sends nothing."""
    world = GateWorld()
    intent = _crash(world, "after-answer", NoLookup)
    gate = world.gate(Owner.current("restart"), emulate=NoLookup)
    gate.recover()

    with pytest.raises(ActionError, match=r"its own refund .* exists at Stripe"):
        gate.reapprove(intent.action_id, world.grant(AMOUNT).id, "support")

    assert len(world.refunds()) == 1


def test_emulate_24h_keeps_the_first_sends_key_and_changes_every_later_one() -> None:
    """The action's first send carries its id; a later take's sends and a resend within one
    each carry a key of their own."""
    intent = Intent("act_1", "refund", "pi_1", AMOUNT, "lease_1", "fp")
    effect = Emulate24h(StripeRefund(InProcessPayments(PaymentsModel())))

    keys = [effect.idempotency_key(intent, attempt=a, sends=s) for a, s in [(1, 0), (1, 1), (2, 0)]]

    assert keys[0] == "act_1"
    assert len(set(keys)) == 3


class _Bare:
    """An effect with only what the protocol requires."""

    kind = "webhook"

    def observe(self, intent: Intent) -> Observation:
        return Observation("fp", None, [])

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        return Found("wh_1", intent.amount)


def test_a_wrapper_is_its_effect_in_everything_it_does_not_emulate() -> None:
    """The wrapped effect's kind and optional parts pass through, exactly as it has them;
    stacked wrappers name every emulation, the innermost first."""
    transfers = StripeTransfer(InProcessPayments(PaymentsModel()), currency="eur")
    wrapped = Emulate24h(NoLookup(transfers))

    assert (wrapped.kind, wrapped.currency) == ("transfer", "eur")
    assert wrapped.accepts(Intent("a", "transfer", "acct_1", 1, "l", "fp", currency="usd"))
    assert isinstance(wrapped, ListsSends)
    assert wrapped.emulated == ("NoLookup", "Emulate24h")
    assert wrapped.lookup_skipped() == "NoLookup is set"
    # The key, too, is the innermost emulation's that has one, through the outer wrapper.
    assert (
        NoLookup(Emulate24h(transfers)).idempotency_key(
            Intent("a", "transfer", "acct_1", 1, "l", "fp"), attempt=2, sends=0
        )
        != "a"
    )

    bare: Effect = NoLookup(_Bare(), name="quiet")
    assert not hasattr(bare, "where") and not hasattr(bare, "currency")
    assert not isinstance(bare, ListsSends)
    assert bare.send(Intent("a", "webhook", "t", 5, "l", "fp"), "k") == Found("wh_1", 5)


class _NamesLikeAnEmulation(StripeRefund):
    """A user's refund effect whose own members happen to share the emulations' names."""

    emulated = ("something of its own",)
    lookup_skipped = "a note of its own"

    def idempotency_key(self, intent: Intent, *, attempt: int, sends: int) -> str:
        return f"its-own-{attempt}-{sends}"


def test_an_effect_that_is_not_an_emulation_cannot_change_the_key_or_skip_the_lookup() -> None:
    """Only an `interlock.testing` emulation (by class) changes the gate's key or lookup: a
    user's effect with members of the same names is looked up, resent under the action's
    own id, and its receipts emulate nothing."""
    world = GateWorld()
    landed = _crash(world, "after-answer")
    unsent = _crash(world, "before-send")
    world.events.clear()
    gate = world.gate(
        Owner.current("restart"), emulate=lambda _: _NamesLikeAnEmulation(world.payments)
    )

    outcomes = {o.action_id: o for o in gate.recover()}

    adopted = outcomes[landed.action_id]
    assert adopted.status == "adopted" and adopted.receipt is not None
    assert adopted.receipt.body["emulated"] == []
    (lookup,) = [c for c in adopted.receipt.checks if c["name"] == "lookup"]
    assert lookup["observed"] == adopted.external_id
    assert outcomes[unsent.action_id].status == "sent"
    keys = [e.data["idempotency_key"] for e in world.events if e.kind == "before-send"]
    assert keys == [unsent.action_id]
    assert verify(world.store, world.payments).ok
