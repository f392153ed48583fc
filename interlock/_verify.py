"""`verify()`: check the receipt chain, the store against it, and Stripe against both.

It reports problems; it never repairs and never writes. Stripe's refund list is the evidence: every
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
    action with a receipt and every action still without an outcome. Receipts are read a
    batch at a time, so memory stays bounded; nothing is ever written.
    """
    key = signing_key if signing_key is not None else receipt_key()
    chain = ChainCheck(key)
    facts: dict[str, _Facts] = {}
    seq_action: dict[int, str] = {}
    for r in store.receipts():
        body = chain.feed(r)
        seq_action[r.seq] = r.action_id
        if r.action_id in facts:
            chain.problems.append(
                f"receipt {r.seq} ({r.action_id}): a second receipt for one action"
            )
        b = body or {}
        facts[r.action_id] = _Facts(
            r.seq, b.get("outcome"), b.get("external_id"), b.get("amount"), b.get("reason")
        )
    problems = chain.problems
    problems.extend(_store_problems(store, facts, seq_action))
    signed = chain.length > 0 and chain.all_signed
    checked = 0
    if payments is not None:
        scope = set(actions) if actions is not None else set(facts) | set(store.pending())
        cross, checked = _cross_check(store, payments, facts, scope)
        problems.extend(cross)
    return VerifyResult(chain.length, signed, problems, checked)


def _store_problems(
    store: Store, facts: dict[str, _Facts], seq_action: dict[int, str]
) -> list[str]:
    problems: list[str] = []
    settled: set[str] = set()
    for s in store.settled():
        settled.add(s.action_id)
        where = f"action {s.action_id}"
        if s.settlement is None:
            problems.append(f"{where}: {s.problem}")
            continue
        status = s.settlement.status
        if s.receipt_seq is None:
            problems.append(f"{where}: settled {status} with no receipt")
        elif seq_action.get(s.receipt_seq) != s.action_id:
            problems.append(
                f"{where}: settled {status}, but its receipt {s.receipt_seq} is gone "
                "(deleted, or the chain's tail was cut)"
            )
        elif facts[s.action_id].outcome != status:
            problems.append(
                f"{where}: settled {status}, but its receipt records {facts[s.action_id].outcome}"
            )
    for aid, f in facts.items():
        if aid not in settled:
            problems.append(f"receipt {f.seq} ({aid}): its action is not settled in the journal")
    return problems


def _cross_check(
    store: Store, payments: Payments, facts: dict[str, _Facts], scope: set[str]
) -> tuple[list[str], int]:
    problems: list[str] = []
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
            f = facts.get(aid)
            if f is not None:
                problems.extend(_receipt_matches(aid, f, by_id))
        for refund in refunds:
            named = refund.metadata.get(ACTION_METADATA_KEY)
            if named is None or named not in aids or not refund.counts:
                continue
            problems.extend(_refund_recorded(refund, named, facts.get(named)))
    return problems, checked


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
