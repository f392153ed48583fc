"""Irreversible effects the gate can guard, and the Stripe refund.

An `Effect` does three things: one read that serves both the lookup of our own earlier
send and the fingerprint of the target's state (`observe`), and the send itself, with an
idempotency key and metadata naming the action (`send`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from interlock._journal import Intent
from interlock._payments import Payments, Refund, refunds_fingerprint

# The metadata key that names the interlock action on every refund the gate sends.
ACTION_METADATA_KEY = "interlock_action"


@dataclass(frozen=True)
class Found:
    """An earlier send of ours, found at the provider.

    `counts` is False when the send happened but did not take effect (a refund that
    failed or was canceled): the gate records `failed` and never sends under that key
    again, since the provider would replay the old success.
    """

    external_id: str
    amount: int
    counts: bool = True
    status: str = "succeeded"


@dataclass(frozen=True)
class Observation:
    """One read of the target: its fingerprint, our own earlier send if any, what was seen."""

    fingerprint: str
    own: Found | None
    seen: list[dict[str, Any]]


class Effect(Protocol):
    """An irreversible action the gate can look up, observe and send."""

    kind: str

    def observe(self, intent: Intent) -> Observation:
        """Read the target once: the fingerprint and our own earlier send, if any."""
        ...

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Do it, with this idempotency key and metadata naming the action."""
        ...


class StripeRefund:
    """A Stripe refund as an `Effect`, over any `Payments` (live, test or emulated)."""

    kind = "refund"

    def __init__(self, payments: Payments) -> None:
        self.payments = payments

    def observe(self, intent: Intent) -> Observation:
        """List the payment's refunds once: our own (by metadata) and the fingerprint.

        Our own refund is found whatever its status; one that counts is preferred.
        """
        refunds = self.payments.list_refunds(intent.target)
        mine = [r for r in refunds if r.metadata.get(ACTION_METADATA_KEY) == intent.action_id]
        own = next((r for r in mine if r.counts), mine[0] if mine else None)
        return Observation(
            fingerprint=refunds_fingerprint(refunds),
            own=None if own is None else Found(own.id, own.amount, own.counts, own.status),
            seen=[_seen(r) for r in refunds],
        )

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Create the refund with the action named in its metadata."""
        refund = self.payments.create_refund(
            intent.target,
            intent.amount,
            idempotency_key=idempotency_key,
            metadata={**intent.metadata, ACTION_METADATA_KEY: intent.action_id},
        )
        return Found(refund.id, refund.amount, refund.counts, refund.status)


def _seen(r: Refund) -> dict[str, Any]:
    return {
        "id": r.id,
        "amount": r.amount,
        "status": r.status,
        "action": r.metadata.get(ACTION_METADATA_KEY),
    }
