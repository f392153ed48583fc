"""`verify()`: check the receipt chain and, given a payments reader, Stripe against it.

It reports problems; it never repairs. Stripe's refund list is the evidence: every
`sent`/`adopted` receipt must name a refund that exists with that amount and metadata,
and every refund that names one of the store's actions must be recorded by that action's
receipt (a send the receipts do not show is a problem).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from interlock._effects import ACTION_METADATA_KEY
from interlock._errors import PaymentsError
from interlock._journal import Store
from interlock._payments import Payments, Refund
from interlock._receipts import Receipt, chain_problems, receipt_key


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


def verify(
    store: Store,
    payments: Payments | None = None,
    *,
    actions: Iterable[str] | None = None,
    signing_key: bytes | None = None,
) -> VerifyResult:
    """Check the whole receipt chain, and Stripe against the receipts of `actions`.

    `actions` limits the Stripe cross-check to those actions (a run's own); by default
    every action with a receipt and every action still without an outcome, whose refund
    at Stripe is a send no receipt shows. `signing_key` defaults to `INTERLOCK_RECEIPT_KEY`.
    """
    key = signing_key if signing_key is not None else receipt_key()
    receipts = store.receipts()
    problems = chain_problems(receipts, key)
    signed = bool(receipts) and all(_signed(r) for r in receipts)
    checked = 0
    if payments is not None:
        scope = (
            set(actions)
            if actions is not None
            else {r.action_id for r in receipts} | set(store.pending())
        )
        cross, checked = _cross_check(store, payments, receipts, scope)
        problems.extend(cross)
    return VerifyResult(len(receipts), signed, problems, checked)


def _signed(r: Receipt) -> bool:
    try:
        return r.signed
    except ValueError:
        return False


def _cross_check(
    store: Store, payments: Payments, receipts: list[Receipt], scope: set[str]
) -> tuple[list[str], int]:
    problems: list[str] = []
    by_action: dict[str, Receipt] = {}
    for r in receipts:
        if r.action_id in scope:
            by_action[r.action_id] = r
    targets: dict[str, list[str]] = {}
    for aid in sorted(scope):
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
        for aid in aids:
            receipt = by_action.get(aid)
            if receipt is None:
                continue
            problems.extend(_receipt_matches(receipt, by_id))
        for refund in refunds:
            named = refund.metadata.get(ACTION_METADATA_KEY)
            if named is None or named not in aids or not refund.counts:
                continue
            problems.extend(_refund_recorded(refund, named, by_action.get(named)))
    return problems, checked


def _receipt_matches(receipt: Receipt, refunds: dict[str, Refund]) -> list[str]:
    body = receipt.body
    if body.get("outcome") not in ("sent", "adopted"):
        return []
    where = f"receipt {receipt.seq} ({receipt.action_id}, {body.get('outcome')})"
    refund = refunds.get(str(body.get("external_id")))
    if refund is None:
        return [f"{where}: names refund {body.get('external_id')}, which Stripe does not have"]
    problems = []
    if refund.amount != body.get("amount"):
        problems.append(
            f"{where}: Stripe's refund {refund.id} is {refund.amount}, "
            f"the receipt says {body.get('amount')}"
        )
    if refund.metadata.get(ACTION_METADATA_KEY) != receipt.action_id:
        problems.append(
            f"{where}: Stripe's refund {refund.id} does not name this action in its metadata"
        )
    if not refund.counts:
        problems.append(f"{where}: Stripe's refund {refund.id} is {refund.status}")
    return problems


def _refund_recorded(refund: Refund, action_id: str, receipt: Receipt | None) -> list[str]:
    if receipt is None:
        return [
            f"refund {refund.id} ({refund.amount}) at Stripe names action {action_id}, which has "
            "no receipt: a send the receipts do not show"
        ]
    body = receipt.body
    if body.get("outcome") in ("sent", "adopted") and body.get("external_id") == refund.id:
        return []
    return [
        f"refund {refund.id} ({refund.amount}) at Stripe names action {action_id}, whose receipt "
        f"records {body.get('outcome')}"
        + (f" ({body.get('reason')})" if body.get("reason") else "")
        + ": a send the receipts do not show"
    ]
