"""The payments interface the gate, the workers and the result cards share.

A `Payments` implementation reads a payment with all its refunds and creates refunds.
`interlock.StripePayments` is the one over the official Stripe SDK; the demo has one over
its in-memory payments model. Amounts are integer cents throughout.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

_TEST_KEY = re.compile(r"(?:sk|rk)_test_[A-Za-z0-9_]+")


def is_test_key(key: str) -> bool:
    """Whether `key` has the shape of a Stripe test secret or restricted key."""
    return _TEST_KEY.fullmatch(key) is not None


@dataclass(frozen=True)
class Refund:
    """One refund as the provider reports it.

    `COUNTING_STATUSES`: the statuses in which a refund counts against the payment
    (`counts`); a failed or canceled one does not.
    """

    COUNTING_STATUSES: ClassVar[frozenset[str]] = frozenset(
        {"pending", "requires_action", "succeeded"}
    )
    id: str
    amount: int
    status: str
    payment_intent: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    created: int = 0
    # Its payment's currency, lowercase ("" when the provider's answer did not say).
    currency: str = ""

    @property
    def counts(self) -> bool:
        """Whether this refund counts against the payment (not failed or canceled)."""
        return self.status in self.COUNTING_STATUSES


@dataclass(frozen=True)
class Payment:
    """A payment with every one of its refunds (all pages), newest refund first."""

    id: str
    amount: int
    currency: str
    status: str
    refunds: tuple[Refund, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    latest_charge: str | None = None

    @property
    def amount_refunded(self) -> int:
        """Cents refunded so far by refunds that count."""
        return sum(r.amount for r in self.refunds if r.counts)

    @property
    def amount_left(self) -> int:
        """Cents that can still be refunded."""
        return self.amount - self.amount_refunded


def refunds_fingerprint(refunds: Iterable[Refund]) -> str:
    """A fingerprint of the refunds that count against a payment.

    It covers the id and amount of each refund whose status is pending, requires_action
    or succeeded, in id order, so that a failed or canceled refund does not register and
    a refund moving from pending to succeeded is not a change.
    """
    counted = sorted((r.id, r.amount) for r in refunds if r.counts)
    text = json.dumps(counted, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@runtime_checkable
class Payments(Protocol):
    """Reads payments and creates refunds; errors are `PaymentsError` subclasses."""

    def create_payment(
        self, amount: int, *, currency: str = "usd", metadata: Mapping[str, str] | None = None
    ) -> Payment:
        """Create and confirm a test payment (card `pm_card_visa`)."""
        ...

    def get_payment(self, payment_intent: str) -> Payment:
        """Read a payment and all its refunds, every page."""
        ...

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        """Every refund of a payment, newest first, every page."""
        ...

    def list_refunds_since(self, created_gte: int) -> list[Refund]:
        """Every refund on the account created at or after `created_gte` (Unix seconds, the
        provider's clock), newest first, every page: what `verify()` reads account-wide."""
        ...

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        """Create a refund; `idempotency_key` goes to the provider's idempotency layer."""
        ...


@dataclass(frozen=True)
class Transfer:
    """One transfer to a connected account as the provider reports it.

    A transfer takes hold when it is created (Stripe has no pending state for one); a
    reversal is not modelled, so every listed transfer counts.
    """

    id: str
    amount: int
    currency: str
    destination: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    created: int = 0


def transfers_fingerprint(transfers: Iterable[Transfer]) -> str:
    """A fingerprint of a connected account's transfers: each one's id and amount, in id order."""
    seen = sorted((t.id, t.amount) for t in transfers)
    text = json.dumps(seen, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@runtime_checkable
class Transfers(Protocol):
    """Creates and lists transfers to connected accounts; errors are `PaymentsError` subclasses."""

    def list_transfers(self, destination: str) -> list[Transfer]:
        """Every transfer to the connected account `destination`, newest first, every page."""
        ...

    def create_transfer(
        self,
        destination: str,
        amount: int,
        *,
        currency: str = "usd",
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Transfer:
        """Create a transfer; `idempotency_key` goes to the provider's idempotency layer."""
        ...
