"""The words of a worker's event lines that more than one place writes or reads.

Who answers the refund calls is named in the lines (`STRIPE`, `EMULATOR`, `MOCK`); the
gate's events, the refund call and the outcome read the same from every column and every
engine (the standalone and Temporal workers, mock runs, the MCP desk). The demo's
snapshot tests pin these words: change them here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlock import PaymentsAuthError
from workers.protocol import ColumnOutcome

# Who answers a worker's refund calls, as its events name it: Stripe test mode (live),
# the loopback emulator (offline) or the in-memory model (mock). Labels only.
STRIPE = "Stripe"
EMULATOR = "the emulator"
MOCK = "the mock"


def send_text(answerer: str, amount: int, key: str) -> str:
    """The event line for a refund call, naming who it goes to (a mock call is no POST)."""
    if answerer == MOCK:
        return f"refund ${amount / 100:.2f} in memory (key {key})"
    return f"POST /v1/refunds ${amount / 100:.2f} to {answerer} (Idempotency-Key {key})"


def key_refused_reason(e: PaymentsAuthError) -> str:
    """A refused key as an outcome's reason: it settles nothing."""
    return f"the key was refused (HTTP {e.http_status}) on {e.operation}; nothing settled"


def outcome_text(outcome: ColumnOutcome, answerer: str = STRIPE) -> str:
    """The `outcome` event's line: the status, the refund it names and the reason."""
    reason = outcome.reason
    if reason and answerer != STRIPE:
        # The gate says "at Stripe" of whatever answers refund calls: name it here.
        reason = reason.replace("at Stripe", f"at {answerer}")
    text = f"outcome: {outcome.status}"
    if outcome.refund_id:
        text += f" ({outcome.refund_id})"
    if reason:
        text += f": {reason}"
    return text


def gate_event_text(kind: str, d: Mapping[str, Any], *, answerer: str = STRIPE) -> str | None:
    """A gate event in words for a column's event list, or None for events not shown.

    `answerer` names who answers refund calls (`STRIPE`, `EMULATOR` or `MOCK`).
    """
    short = _short_id(str(d.get("action_id", "")))
    if kind == "journaled":
        claim = d.get("claim")
        if claim == "held":
            return f"intent {short} was already journaled; another worker holds its claim"
        if claim == "settled":
            return f"intent {short} was already journaled, with its outcome"
        return f"journaled intent {short} and took the claim"
    if kind == "claim":
        return f"took the claim on {short} (attempt {d.get('attempt')})"
    if kind == "claim-wait":
        return f"waiting for the claim of {d.get('owner')}: {float(d.get('seconds', 0)):.1f} s left"
    if kind == "check":
        name = d.get("name")
        if name == "lookup":
            found = d.get("found")
            return (
                f"lookup: found its own refund {found}"
                if found
                else "lookup: no refund names this action"
            )
        if name == "world_unchanged":
            return (
                "world check: refunds unchanged since the decision"
                if d.get("passed")
                else "world check: the payment's refunds CHANGED since the decision"
            )
        if name == "approval":
            return "approval: ok" if d.get("passed") else f"approval: {d.get('problem')}"
    if kind == "sending":
        return "journaled `sending`; claim renewed"
    if kind == "before-send":
        return send_text(answerer, int(d.get("amount", 0)), short)
    if kind == "after-answer":
        return f"{answerer} answered: refund {d.get('external_id')}"
    if kind == "answer":
        return f"{answerer} refused: {d.get('code')}: {d.get('message')}"
    if kind in ("answer-unsettled", "read-unsettled"):
        return f"no settled answer from {answerer} ({d.get('error')}); will look it up"
    if kind == "settled":
        return f"receipt written: {d.get('status')}"
    if kind == "left-to-recovery":
        return f"left to recovery: {d.get('reason')}"
    if kind == "in-flight-wait":
        return (
            f"the refund call may still land at {answerer}: looking it up for "
            f"{float(d.get('seconds', 0)):.1f} s before anything else (never resent meanwhile)"
        )
    if kind == "unknown":
        return f"unknown: {d.get('reason')}; from now on only looked up, never resent"
    if kind == "recover-error":
        return f"recovery of {short} failed: {d.get('error')}; going on with the others"
    return None


def _short_id(action_id: str) -> str:
    """An action id cut for an event line: the head of a random or hashed id, the
    distinctive tail of one made of names (`temporal:<namespace>:<workflow>:<activity>`)."""
    if ":" in action_id:
        return "…" + action_id[-24:] if len(action_id) > 24 else action_id
    return action_id[:12] + "…"
