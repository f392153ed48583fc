"""`verify()`: check the receipt chain, the store against it, and Stripe against both.

It reports problems; it never repairs and never writes. Stripe's refund list is the evidence: every
`sent`/`adopted` receipt must name a refund that exists with that amount and metadata,
and every refund that names one of the store's actions must be recorded by that action's
receipt (a send the receipts do not show is a problem).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from interlock._effects import ACTION_METADATA_KEY
from interlock._errors import PaymentsError
from interlock._journal import SettledAction, Store
from interlock._payments import Payments, Refund
from interlock._receipts import ChainCheck, receipt_key


@dataclass(frozen=True)
class VerifyResult:
    """What `verify()` found: `ok` when there are no problems."""

    chain_length: int
    signed: bool
    problems: list[str] = field(default_factory=list)
    checked_refunds: int = 0

    @property
    def ok(self) -> bool:
        """True when the chain holds and Stripe agrees with the receipts."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {
            "ok": self.ok,
            "chain_length": self.chain_length,
            "signed": self.signed,
            "problems": list(self.problems),
            "checked_refunds": self.checked_refunds,
        }


@dataclass(frozen=True)
class _Facts:
    """What the checks need of one receipt (its body is not kept)."""

    seq: int
    outcome: object
    external_id: object
    amount: object
    reason: object

    @classmethod
    def of(cls, seq: int, body: Mapping[str, Any] | None) -> _Facts:
        """The facts of a receipt's parsed body (all None when it has none)."""
        b = body or {}
        return cls(seq, b.get("outcome"), b.get("external_id"), b.get("amount"), b.get("reason"))


def verify(
    store: Store,
    payments: Payments | None = None,
    *,
    actions: Iterable[str] | None = None,
    signing_key: bytes | None = None,
) -> VerifyResult:
    """Check the receipt chain, the store against it, and Stripe against both.

    The chain: hashes, order, signatures (with a key, an unsigned receipt is a
    downgrade). The store as a whole: every settled action has its receipt and the
    receipt records that outcome (a deleted tail shows here). Given `payments`, Stripe:
    every `sent`/`adopted` receipt names a refund that exists with that amount and
    metadata, and every refund naming one of the actions is recorded by its receipt.
    `actions` limits the Stripe cross-check (a run's own); by default it covers every
    action in the store. The chain and the settled actions are read side by side, a batch
    at a time, both in receipt order, so memory stays bounded however large the store;
    nothing is ever written. A store file that fails its integrity check is reported as
    that alone.
    """
    key = signing_key if signing_key is not None else receipt_key()
    damaged = store.integrity_problems()
    if damaged:
        # Nothing read from a damaged file can be trusted: report the damage alone.
        return VerifyResult(0, False, damaged, 0)
    chain = ChainCheck(key)
    problems = _store_problems(store, chain)
    signed = chain.length > 0 and chain.all_signed
    checked = 0
    if payments is not None:
        scope = list(actions) if actions is not None else store.actions()
        cross, checked = _cross_check(store, payments, scope)
        problems.extend(cross)
    return VerifyResult(chain.length, signed, chain.problems + problems, checked)


def _store_problems(store: Store, chain: ChainCheck) -> list[str]:
    """Feed the chain its receipts and match each with the action settled by it.

    `store.settled()` comes in receipt order (actions without a receipt number first), so
    one pass over both streams pairs them; only a receipt that no action claims is looked
    up on its own.
    """
    problems: list[str] = []
    settled = store.settled()
    row = next(settled, None)
    for r in store.receipts():
        f = _Facts.of(r.seq, chain.feed(r))
        claimed = False
        # A number that cannot be read counts as none, wherever the store sorted it.
        while row is not None and (row.receipt_seq is None or row.receipt_seq <= r.seq):
            if row.receipt_seq is None or row.settlement is None:
                problems.append(_unreceipted(row))
                claimed = claimed or (row.receipt_seq == r.seq and row.action_id == r.action_id)
            elif row.receipt_seq < r.seq or row.action_id != r.action_id:
                problems.append(_gone(row.action_id, row.settlement.status, row.receipt_seq))
            else:
                claimed = True
                if f.outcome != row.settlement.status:
                    problems.append(
                        f"action {row.action_id}: settled {row.settlement.status}, but its "
                        f"receipt records {f.outcome}"
                    )
            row = next(settled, None)
        if not claimed:
            problems.append(_unclaimed(store, r.seq, r.action_id))
    while row is not None:
        if row.receipt_seq is None or row.settlement is None:
            problems.append(_unreceipted(row))
        else:
            problems.append(_gone(row.action_id, row.settlement.status, row.receipt_seq))
        row = next(settled, None)
    return problems


def _unreceipted(row: SettledAction) -> str:
    if row.settlement is None:
        return f"action {row.action_id}: {row.problem}"
    return f"action {row.action_id}: settled {row.settlement.status} with no receipt"


def _gone(action_id: str, status: str, seq: int | None) -> str:
    return (
        f"action {action_id}: settled {status}, but its receipt {seq} is gone "
        "(deleted, or the chain's tail was cut)"
    )


def _unclaimed(store: Store, seq: int, action_id: str) -> str:
    """A receipt its action does not point to: a second one, or its action is not settled."""
    where = f"receipt {seq} ({action_id})"
    try:
        state = store.action(action_id)
    except (ValueError, KeyError, TypeError) as e:
        return f"{where}: its action cannot be read ({e})"
    if state is None or state.settlement is None:
        return f"{where}: its action is not settled in the journal"
    if state.receipt is not None:
        return f"{where}: a second receipt for one action (it is settled by {state.receipt.seq})"
    return f"{where}: its action is settled, but does not name this receipt"


def _cross_check(store: Store, payments: Payments, scope: Iterable[str]) -> tuple[list[str], int]:
    problems: list[str] = []
    targets: dict[str, list[str]] = {}
    for aid in sorted(set(scope)):
        state = store.action(aid)
        if state is None:
            problems.append(f"action {aid}: not in the store")
            continue
        targets.setdefault(state.intent.target, []).append(aid)
    checked = 0
    for target, aids in sorted(targets.items()):
        try:
            refunds = payments.list_refunds(target)
        except PaymentsError as e:
            problems.append(f"could not read the refunds of {target}: {e}")
            continue
        checked += len(refunds)
        by_id = {r.id: r for r in refunds}
        facts = {aid: _receipt_facts(store, aid) for aid in aids}
        for aid in aids:
            f = facts[aid]
            if f is not None:
                problems.extend(_receipt_matches(aid, f, by_id))
        for refund in refunds:
            named = refund.metadata.get(ACTION_METADATA_KEY)
            if named is None or named not in facts or not refund.counts:
                continue
            problems.extend(_refund_recorded(refund, named, facts[named]))
    return problems, checked


def _receipt_facts(store: Store, action_id: str) -> _Facts | None:
    """The facts of the receipt an action is settled by (None when it has none)."""
    state = store.action(action_id)
    receipt = None if state is None else state.receipt
    if receipt is None:
        return None
    try:
        body = json.loads(receipt.body_text)
    except (ValueError, TypeError):
        body = None
    return _Facts.of(receipt.seq, body if isinstance(body, Mapping) else None)


def _receipt_matches(action_id: str, f: _Facts, refunds: dict[str, Refund]) -> list[str]:
    if f.outcome not in ("sent", "adopted"):
        return []
    where = f"receipt {f.seq} ({action_id}, {f.outcome})"
    refund = refunds.get(str(f.external_id))
    if refund is None:
        return [f"{where}: names refund {f.external_id}, which Stripe does not have"]
    problems = []
    if refund.amount != f.amount:
        problems.append(
            f"{where}: Stripe's refund {refund.id} is {refund.amount}, the receipt says {f.amount}"
        )
    if refund.metadata.get(ACTION_METADATA_KEY) != action_id:
        problems.append(
            f"{where}: Stripe's refund {refund.id} does not name this action in its metadata"
        )
    if not refund.counts:
        problems.append(f"{where}: Stripe's refund {refund.id} is {refund.status}")
    return problems


def _refund_recorded(refund: Refund, action_id: str, f: _Facts | None) -> list[str]:
    if f is None:
        return [
            f"refund {refund.id} ({refund.amount}) at Stripe names action {action_id}, which has "
            "no receipt: a send the receipts do not show"
        ]
    if f.outcome in ("sent", "adopted") and f.external_id == refund.id:
        return []
    return [
        f"refund {refund.id} ({refund.amount}) at Stripe names action {action_id}, whose receipt "
        f"records {f.outcome}"
        + (f" ({f.reason})" if f.reason else "")
        + ": a send the receipts do not show"
    ]
