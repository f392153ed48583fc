"""How a column is judged at the end: its refunds in Stripe against what was wanted, what
the truth table predicted, and whether its report told the truth.

One home for the rules every view and report applies: which refunds count (the
library's `Refund.COUNTING_STATUSES`), whose a refund is (`agent` when it carries the
case's metadata, else `hand`), `ok` (Stripe holds what was wanted), `truthful`
(`interlock.testing.truthful`) and which way an untrue report was wrong, the deviations
from the truth table, which check stopped a column and whether a resend was answered
with a replay (both read from its events' fields).
The words a judged column or run comes to are the run model's `Finding`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from interlock import Refund
from interlock.testing import truthful as is_truthful
from interlock_demo.core.run import Column, Event, RefundRow, RunEventKind, StripeCard, Wanted
from scenarios import Expectation, Outage
from workers.protocol import GATE_CHECK, ColumnOutcome, EventKind

AGENT = "agent"
HAND = "hand"


def counts(status: str) -> bool:
    """Whether a refund in this status counts against the payment (not failed/canceled)."""
    return status in Refund.COUNTING_STATUSES


def stripe_card(refunds: Iterable[Refund], case_id: str) -> StripeCard:
    """The column's refunds as Stripe has them, each marked agent or hand, and their total."""
    rows = tuple(
        RefundRow(
            id=r.id,
            amount=r.amount,
            status=r.status,
            metadata=dict(r.metadata),
            by=AGENT if r.metadata.get("case") == case_id else HAND,
        )
        for r in refunds
    )
    return StripeCard(rows, sum(r.amount for r in rows if counts(r.status)))


def counting(card: StripeCard) -> list[RefundRow]:
    """The refunds of the card that count."""
    return [r for r in card.refunds if counts(r.status)]


def tally(card: StripeCard) -> tuple[int, int]:
    """How many counting refunds are the agent's and how many were made by hand."""
    rows = counting(card)
    return sum(r.by == AGENT for r in rows), sum(r.by == HAND for r in rows)


def untruth(col: Column) -> str | None:
    """Which way the column's report was untrue, in words; None when it was true or has
    not been judged. Beside right money it is a false alarm: the money is right, the
    report is not."""
    if col.truthful is not False:
        return None
    own = col.stripe is not None and any(r.by == AGENT for r in col.stripe.refunds)
    if own:
        return "a false alarm (its own refund exists)"
    return "it claims a refund that is not there"


def failed_check(col: Column) -> str | None:
    """The check that last stopped the column's worker, as the gate names its checks
    (`world_unchanged`, `approval`): the gate's failed `check` or the checked worker's
    re-check; None when none failed."""
    for e in reversed(col.events):
        if e.kind == GATE_CHECK and e.data.get("passed") is False:
            return str(e.data.get("name"))
        if e.kind == EventKind.RECHECK and e.data.get("failed_check"):
            return str(e.data["failed_check"])
    return None


def revoked(col: Column) -> bool:
    """Whether support revoked the column's approval (its outage event says so)."""
    return any(
        e.kind == RunEventKind.OUTAGE and Outage(e.data["outage"]).revokes for e in col.events
    )


def replay(col: Column) -> Event | None:
    """The answer to a resend that named a refund an earlier answer of the column had
    named: the provider replayed its first answer under the same Idempotency-Key, so the
    resend made no second refund (the control scenario's standard column). None when no
    answer repeated one. Read from the answers' `refund_id`, so every mode reads it alike."""
    named: set[str] = set()
    for e in col.events:
        refund_id = e.data.get("refund_id") if e.kind == EventKind.ANSWER else None
        if refund_id is None:
            continue
        if refund_id in named:
            return e
        named.add(str(refund_id))
    return None


def replay_note(col: Column, answerer: str) -> str | None:
    """Why a column that sent again has one refund, in words naming who answered the
    refund calls (`answerer`, the mode's): None when no resend was answered with a replay."""
    if replay(col) is None:
        return None
    return f"sent twice: {answerer} replayed its first answer under the same key, no second refund"


@dataclass(frozen=True)
class Verdict:
    """A column's judgement: what Stripe holds, and how that compares."""

    stripe: StripeCard
    ok: bool
    truthful: bool
    deviations: tuple[str, ...]


def judge(
    card: StripeCard,
    outcome: ColumnOutcome | None,
    wanted: Wanted,
    expected: Expectation | None,
    *,
    reapproved: bool = False,
) -> Verdict:
    """Judge a column from its Stripe card and its report.

    After a re-approval the truth table no longer applies (the person changed the case),
    so only `ok` and `truthful` are judged. A sweep cell has no `expected` row.
    """
    agent, hand = tally(card)
    agent_ids = {r.id for r in counting(card) if r.by == AGENT}
    status = None if outcome is None else outcome.status
    # Truthful: it says a refund of its own exists exactly when one does, and names it.
    # Pending or unknown claims nothing either way (docs/design.md §3). The rule is
    # interlock.testing's, which certifies effects in-process.
    truthful = is_truthful(
        str(status),
        len(agent_ids),
        names_its_own=outcome is not None and outcome.refund_id in agent_ids,
    )
    deviations: list[str] = []
    if expected is not None and not reapproved:
        if (agent, hand) != (expected.agent_refunds, expected.hand_refunds):
            deviations.append(
                f"Stripe has {agent} agent and {hand} hand refunds; the truth table says "
                f"{expected.agent_refunds} and {expected.hand_refunds}"
            )
        if status != expected.outcome:
            deviations.append(
                f"the column reported {status!r}; the truth table says {expected.outcome!r}"
            )
        reason = "" if outcome is None else outcome.reason or ""
        if expected.reason_contains and expected.reason_contains not in reason:
            deviations.append(f"the reason does not say {expected.reason_contains!r}")
    ok = (agent, hand) == (wanted.agent_refunds, wanted.hand_refunds)
    return Verdict(card, ok, truthful, tuple(deviations))
