"""Irreversible effects the gate can guard: your own, the Stripe refund and transfer.

An `Effect` does three things: one read that serves both the lookup of our own earlier
send and the fingerprint of the target's state (`observe`), and the send itself, with an
idempotency key and metadata naming the action (`send`).

A found send is the action's own only when it matches the intent: its target and amount,
and for a transfer the effect's currency (a refund is always in its payment's currency,
so the target settles it). The gate sends nothing else under the action's key and
metadata, so a send that names the action and differs is someone else's, a conflict
that is never adopted.

An effect never sends an intent it cannot send as decided: `accepts(intent)` says why not
(a transfer effect in EUR cannot send a USD decision), and a gate leaves such an action
to a gate whose effect can. A refund is in its payment's currency, so a refund effect
reads that currency in `observe` and the gate refuses an intent in another one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from interlock._core.errors import ConfigError
from interlock._core.journal import Intent
from interlock._core.money import currency_problem
from interlock._core.payments import (
    Payments,
    Refund,
    Transfer,
    Transfers,
    refunds_fingerprint,
    transfers_fingerprint,
)

# The metadata key that names the interlock action on every refund the gate sends.
ACTION_METADATA_KEY = "interlock_action"
# What else a send's metadata carries, from its first attempt on (docs/receipts.md): the
# digest of the approval the gate checked, and the hash of the latest signed tree head of
# the receipt log, so the provider's list (another trust domain) vouches for the log.
GRANT_METADATA_KEY = "interlock_grant"
HEAD_METADATA_KEY = "interlock_head"
# Where an effect's sends are looked up, in a receipt's words, unless it says otherwise.
AT_STRIPE = "at Stripe"


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
    target: str | None = None
    currency: str | None = None

    def mismatch(self, intent: Intent, currency: str | None = None) -> str | None:
        """How this send differs from what `intent` decided (in `currency`, when the effect
        sends in one, else the intent's own), or None when it matches."""
        if self.target is not None and self.target != intent.target:
            return f"is on {self.target}, the intent is on {intent.target}"
        if self.amount != intent.amount:
            return f"is for {self.amount}, the intent is for {intent.amount}"
        wanted = currency or intent.currency
        if wanted is not None and self.currency is not None and self.currency != wanted:
            return f"is in {self.currency}, the intent is in {wanted}"
        return None


@dataclass(frozen=True)
class Observation:
    """One read of the target: its fingerprint, our own earlier send if any, what was seen.

    `own` always matches the intent; `conflict` is a send that names the action and does
    not match it (set only when no matching one was found).
    """

    fingerprint: str
    own: Found | None
    seen: list[dict[str, Any]]
    conflict: Found | None = None
    # The target's currency when the read learned it (a refund's payment): an intent in
    # another currency is refused.
    currency: str | None = None


class Effect(Protocol):
    """An irreversible action the gate can look up, observe and send.

    An effect may also say `where` its sends are looked up, in the words of the lookup
    check its receipts record ("at Stripe" when it does not say); its `currency`, when it
    sends in one (a gate stamps it on an intent that has none); and `accepts(intent)`,
    why it cannot send an intent as decided, or None when it can (read with `accepts`
    below: an effect without one accepts every intent of its kind).

    What the gate guards against is emulated only by an `EmulatedEffect` (below); no
    member of any other effect, whatever its name, changes the gate's lookup or its key.
    """

    kind: str

    def observe(self, intent: Intent) -> Observation:
        """Read the target once: the fingerprint and our own earlier send, if any."""
        ...

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Do it, with this idempotency key and metadata naming the action."""
        ...


class EmulatedEffect:
    """A real effect wrapped to emulate what the gate guards against: the base of
    `interlock.testing`'s `NoLookup` and `Emulate24h`, never of a production effect.

    The gate asks an effect these three things only when it is one of these, by class, so
    a user's effect that happens to have an `idempotency_key` method or an `emulated`
    attribute changes nothing. Wrappers stack: what one does not emulate, the effect it
    wraps answers (its reads and sends, and `where`, `currency`, `accepts`, `deadline_s`,
    `sent_on`..., which it has exactly when that effect has them).
    """

    def __init__(self, effect: Effect, name: str) -> None:
        self.effect = effect
        self.kind = effect.kind
        inner = effect if isinstance(effect, EmulatedEffect) else None
        # Every receipt records these names, so no receipt of an emulated run passes for
        # a real one.
        self.emulated: tuple[str, ...] = (*(inner.emulated if inner else ()), name)

    def observe(self, intent: Intent) -> Observation:
        """The wrapped effect's read."""
        return self.effect.observe(intent)

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """The wrapped effect's send, under the key the gate gives."""
        return self.effect.send(intent, idempotency_key)

    def lookup_skipped(self) -> str | None:
        """Why the gate goes without its lookup of its own earlier send (its lookup check
        records `skipped: ...`), or None."""
        inner = self.effect
        return inner.lookup_skipped() if isinstance(inner, EmulatedEffect) else None

    def idempotency_key(self, intent: Intent, *, attempt: int, sends: int) -> str:
        """The key of a send (`attempt`: the claim's take, from 1; `sends`: the sends
        before it in that take): the action id, unless an emulation says otherwise."""
        inner = self.effect
        if isinstance(inner, EmulatedEffect):
            return inner.idempotency_key(intent, attempt=attempt, sends=sends)
        return intent.action_id

    def __getattr__(self, name: str) -> Any:
        # Only what the class and the instance lack reaches here; `effect` itself is
        # looked up in the instance's dict so that a half-built wrapper cannot recurse.
        effect = self.__dict__.get("effect")
        if effect is None:
            raise AttributeError(name)
        return getattr(effect, name)


def accepts(effect: Effect, intent: Intent) -> str | None:
    """Why `effect` cannot send `intent` as decided, or None when it can (an effect that
    does not define `accepts` can send every intent of its kind)."""
    check = getattr(effect, "accepts", None)
    return None if check is None else check(intent)


class StripeRefund:
    """A Stripe refund as an `Effect`, over any `Payments` (live, test or emulated).

    `where` names where `payments` keeps the refunds, as the lookup check of every receipt
    says it: "at Stripe", or a stand-in's place ("at the emulator", "in memory") when the
    payments are one, so that a receipt never claims a read it did not make.
    """

    kind = "refund"

    def __init__(self, payments: Payments, *, where: str = AT_STRIPE) -> None:
        self.payments = payments
        self.where = where
        # Each payment's currency, once read: it never changes.
        self._currencies: dict[str, str] = {}

    @property
    def deadline_s(self) -> float | None:
        """The longest one send may run, when the payments know it (`StripePayments` does).

        A gate compares it with its Stripe timeout: its claims are sized by that timeout.
        """
        deadline = getattr(self.payments, "deadline_s", None)
        return None if deadline is None else float(deadline)

    def observe(self, intent: Intent) -> Observation:
        """List the payment's refunds once: our own (by metadata) and the fingerprint.

        Our own refund is found whatever its status, if it matches the intent; one that
        counts is preferred. One naming the action that does not match is a conflict.
        For an intent in a currency, the payment's currency is read too (from its refunds,
        else the payment itself, once per payment) for the gate to compare.
        """
        currency = self._currencies.get(intent.target)
        if intent.currency is not None and currency is None:
            payment = self.payments.get_payment(intent.target)
            refunds, currency = list(payment.refunds), payment.currency.lower()
        else:
            refunds = self.payments.list_refunds(intent.target)
        currency = currency or next((r.currency for r in refunds if r.currency), None)
        if currency is not None:
            self._currencies[intent.target] = currency
        named = [
            _found(r) for r in refunds if r.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        ]
        mine = [f for f in named if f.mismatch(intent) is None]
        others = [f for f in named if f.mismatch(intent) is not None]
        return Observation(
            fingerprint=refunds_fingerprint(refunds),
            own=_best(mine),
            seen=[_seen(r) for r in refunds],
            conflict=None if mine else _best(others),
            currency=currency,
        )

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Create the refund with the action named in its metadata."""
        refund = self.payments.create_refund(
            intent.target,
            intent.amount,
            idempotency_key=idempotency_key,
            metadata={**intent.metadata, ACTION_METADATA_KEY: intent.action_id},
        )
        return _found(refund)

    def sent_on(self, target: str) -> list[Sent]:
        """Every refund on the payment `target`, as `verify()` reads them."""
        return [_refund_sent(r) for r in self.payments.list_refunds(target)]

    def sent_since(self, created_gte: int) -> list[Sent]:
        """Every refund on the account created at or after `created_gte`."""
        return [_refund_sent(r) for r in self.payments.list_refunds_since(created_gte)]


def _found(r: Refund) -> Found:
    # A refund whose body names no payment is not taken as naming another one.
    return Found(r.id, r.amount, r.counts, r.status, r.payment_intent or None, r.currency or None)


def _best(found: list[Found]) -> Found | None:
    return next((f for f in found if f.counts), found[0] if found else None)


def _seen(r: Refund) -> dict[str, Any]:
    return {
        "id": r.id,
        "amount": r.amount,
        "status": r.status,
        "action": r.metadata.get(ACTION_METADATA_KEY),
    }


class CustomEffect:
    """Any irreversible call as an `Effect`, from three functions of yours.

    - `send(intent, idempotency_key) -> Found`: do it once, carrying the idempotency key
      (the provider must replay its first answer to a resend under that key) and the
      action id (`intent.action_id`) where `lookup` can find it again;
    - `lookup(intent) -> Iterable[Found]`: every send at the provider that names *this*
      action (by the key or the action id it carried), whatever its status; `counts` on
      each says whether it took hold (False: it happened and failed, and the gate records
      `failed` rather than send again under the same key);
    - `state(intent) -> str`: the fingerprint of what the decision was based on, computed
      as the decision's `Intent.fingerprint` was; the gate refuses when it moved;
    - `deadline_s`: the longest one `send` may run, in seconds (your client's total
      timeout). The gate sizes its claims by its own Stripe timeout and refuses an effect
      whose send may outlast it, so a send cannot land after another worker took over.

    A send that names the action and differs from the intent (`Found.mismatch`: another
    target or amount) is a conflict the gate never adopts. `lookup` and `state` raise
    `PaymentsUnsettledError` when they cannot tell; `send` raises it when the answer
    settled nothing and `PaymentsRejectedError` for a definite no.
    `interlock.testing.certify` proves the three right together.

    For `verify()` to check the provider against the receipts, give also `sent_on(target)`
    and `sent_since(created_gte)` (see `ListsSends`): every send on a target, and every
    send on the account since a time, each a `Sent` naming the action its metadata names.
    Without them verify reports the effect's actions as not checked.
    """

    def __init__(
        self,
        *,
        kind: str,
        send: Callable[[Intent, str], Found],
        lookup: Callable[[Intent], Iterable[Found]],
        state: Callable[[Intent], str],
        deadline_s: float,
        sent_on: Callable[[str], Iterable[Sent]] | None = None,
        sent_since: Callable[[int], Iterable[Sent]] | None = None,
    ) -> None:
        if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)):
            raise TypeError(f"deadline_s must be a number of seconds, got {deadline_s!r}")
        if not math.isfinite(deadline_s) or deadline_s <= 0:
            raise ValueError(
                f"deadline_s must be a finite number of seconds above 0, got {deadline_s!r}: "
                "give the total timeout your send runs under"
            )
        self.kind = kind
        self.deadline_s = float(deadline_s)
        self._send = send
        self._lookup = lookup
        self._state = state
        self._sent_on = sent_on
        self._sent_since = sent_since

    def observe(self, intent: Intent) -> Observation:
        """The state, then the action's own sends: a send that lands in between is still found."""
        fingerprint = self._state(intent)
        named = list(self._lookup(intent))
        return _observation(intent, fingerprint, named, [_found_seen(f) for f in named])

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Your `send`."""
        return self._send(intent, idempotency_key)

    def sent_on(self, target: str) -> list[Sent]:
        """Your `sent_on`; a `ConfigError` when you gave none."""
        if self._sent_on is None:
            raise _not_listed(self.kind, "sent_on")
        return list(self._sent_on(target))

    def sent_since(self, created_gte: int) -> list[Sent]:
        """Your `sent_since`; a `ConfigError` when you gave none."""
        if self._sent_since is None:
            raise _not_listed(self.kind, "sent_since")
        return list(self._sent_since(created_gte))


class StripeTransfer:
    """A Stripe transfer to a connected account as an `Effect`, over any `Transfers`.

    `Intent.target` is the destination account (`acct_...`) and `Intent.amount` its cents;
    the fingerprint is `transfers_fingerprint` of the account's transfers as seen. It
    sends in one `currency` and accepts only intents in it: a USD gate and an EUR gate on
    one store each send only their own.
    """

    kind = "transfer"

    def __init__(self, transfers: Transfers, *, currency: str = "usd") -> None:
        self.transfers = transfers
        self.currency = currency.lower()
        problem = currency_problem(self.currency)
        if problem is not None:
            raise ValueError(f"currency {problem}")

    def accepts(self, intent: Intent) -> str | None:
        """Why this effect cannot send `intent`: it is in another currency, or records none
        (journaled by an older version: which currency it was decided in is not known)."""
        if intent.currency == self.currency:
            return None
        if intent.currency is None:
            return (
                f"records no currency (journaled by an older version), and this gate sends "
                f"{self.currency.upper()}: a person checks which currency it was decided in"
            )
        return (
            f"is in {intent.currency.upper()}, this gate sends {self.currency.upper()}: "
            f"a gate whose transfers are in {intent.currency.upper()} sends it"
        )

    @property
    def deadline_s(self) -> float | None:
        """The longest one send may run, when the client knows it (`StripePayments` does)."""
        deadline = getattr(self.transfers, "deadline_s", None)
        return None if deadline is None else float(deadline)

    def observe(self, intent: Intent) -> Observation:
        """List the account's transfers once: our own (by metadata) and the fingerprint."""
        transfers = self.transfers.list_transfers(intent.target)
        named = [
            _transfer_found(t)
            for t in transfers
            if t.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        ]
        seen = [
            {
                "id": t.id,
                "amount": t.amount,
                "currency": t.currency,
                "action": t.metadata.get(ACTION_METADATA_KEY),
            }
            for t in transfers
        ]
        return _observation(
            intent, transfers_fingerprint(transfers), named, seen, currency=self.currency
        )

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Create the transfer with the action named in its metadata."""
        transfer = self.transfers.create_transfer(
            intent.target,
            intent.amount,
            currency=self.currency,
            idempotency_key=idempotency_key,
            metadata={**intent.metadata, ACTION_METADATA_KEY: intent.action_id},
        )
        return _transfer_found(transfer)

    def sent_on(self, target: str) -> list[Sent]:
        """Every transfer to the account `target`, as `verify()` reads them."""
        return [_transfer_sent(t) for t in self.transfers.list_transfers(target)]

    def sent_since(self, created_gte: int) -> list[Sent]:
        """Every transfer on the platform's account created at or after `created_gte`, when
        the client can list them (`StripePayments` and `InProcessPayments` can)."""
        since = getattr(self.transfers, "list_transfers_since", None)
        if since is None:
            raise _not_listed(self.kind, "sent_since")
        return [_transfer_sent(t) for t in since(created_gte)]


def _transfer_found(t: Transfer) -> Found:
    return Found(t.id, t.amount, True, "succeeded", t.destination or None, t.currency.lower())


def _observation(
    intent: Intent,
    fingerprint: str,
    named: list[Found],
    seen: list[dict[str, Any]],
    *,
    currency: str | None = None,
) -> Observation:
    mine = [f for f in named if f.mismatch(intent, currency) is None]
    others = [f for f in named if f.mismatch(intent, currency) is not None]
    return Observation(fingerprint, _best(mine), seen, None if mine else _best(others))


def _found_seen(f: Found) -> dict[str, Any]:
    return {"id": f.external_id, "amount": f.amount, "status": f.status, "target": f.target}


# -- what verify reads: an effect's sends as listed at the provider -----------------------


@dataclass(frozen=True)
class Sent:
    """One send as its provider lists it, for `verify()`: its id, amount and target, the
    action its metadata names (None: no interlock action), and whether it took hold."""

    external_id: str
    amount: int
    action: str | None
    target: str | None
    counts: bool = True
    status: str = "succeeded"
    head: str | None = None
    """The tree head's hash its metadata carries (`HEAD_METADATA_KEY`), if any."""


@runtime_checkable
class ListsSends(Protocol):
    """The optional part of an `Effect` that `verify()` reads: what it sent, listed at the
    provider, on one target and account-wide. `StripeRefund`, `StripeTransfer` and a
    `CustomEffect` given `sent_on`/`sent_since` have it. Both raise a `PaymentsError` when
    the provider cannot be read, a `ConfigError` when the effect cannot list that way."""

    kind: str

    def sent_on(self, target: str) -> list[Sent]:
        """Every send on `target`, whatever its status or the action it names."""
        ...

    def sent_since(self, created_gte: int) -> list[Sent]:
        """Every send on the account created at or after `created_gte` (Unix seconds)."""
        ...


def _not_listed(kind: str, how: str) -> ConfigError:
    """An effect that cannot list its sends in the way `verify()` asked."""
    return ConfigError(
        f"the {kind} effect cannot list its sends ({how}): give it {how} "
        "(CustomEffect takes sent_on= and sent_since=)"
    )


def _refund_sent(r: Refund) -> Sent:
    return Sent(
        r.id, r.amount, r.metadata.get(ACTION_METADATA_KEY), r.payment_intent, r.counts, r.status,
        r.metadata.get(HEAD_METADATA_KEY),
    )  # fmt: skip


def _transfer_sent(t: Transfer) -> Sent:
    return Sent(
        t.id, t.amount, t.metadata.get(ACTION_METADATA_KEY), t.destination or None,
        head=t.metadata.get(HEAD_METADATA_KEY),
    )  # fmt: skip
