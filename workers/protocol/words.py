"""The words of a worker's event lines that more than one place writes.

Who answers the refund calls is named in the lines (`STRIPE`, `EMULATOR`, `MOCK`); the
gate's events, the refund call and the outcome read the same from every column and every
engine (the standalone and Temporal workers, mock runs, the MCP desk). These functions
only render an event's fields in words: each line travels with its fields (the run@2
event's `data`), which is what the views and reports read, so rewording a line here
changes no phase line and no verdict. The snapshot tests show these words on screen.
"""

from __future__ import annotations

from interlock import Event, GateEvent, PaymentsAuthError, format_amount
from workers.protocol import ColumnOutcome

# Who answers a worker's refund calls, as its events name it: Stripe test mode (live),
# the loopback emulator (offline) or the in-memory model (mock). Labels only.
STRIPE = "Stripe"
EMULATOR = "the emulator"
MOCK = "the mock"
# Where the money was read in each, said alike on screen, in the run JSON and in reports.
MONEY_AT = {STRIPE: "at Stripe", EMULATOR: "at the emulator", MOCK: "in memory"}


def said_at(reason: str | None, answerer: str) -> str | None:
    """A reason as the gate words it ("at Stripe"), said of whatever answered refund calls."""
    return reason.replace("at Stripe", MONEY_AT[answerer]) if reason else reason


def send_text(answerer: str, amount: int, currency: str | None, key: str) -> str:
    """The event line for a refund call, naming who it goes to (a mock call is no POST)."""
    money = format_amount(amount, currency)
    if answerer == MOCK:
        return f"refund {money} in memory (key {key})"
    return f"POST /v1/refunds {money} to {answerer} (Idempotency-Key {key})"


def key_refused_reason(e: PaymentsAuthError) -> str:
    """A refused key as an outcome's reason: it settles nothing."""
    return f"the key was refused (HTTP {e.http_status}) on {e.operation}; nothing settled"


def outcome_text(outcome: ColumnOutcome, answerer: str = STRIPE) -> str:
    """The `outcome` event's line: the status, the refund it names and the reason."""
    reason = said_at(outcome.reason, answerer)
    text = f"outcome: {outcome.status}"
    if outcome.refund_id:
        text += f" ({outcome.refund_id})"
    if reason:
        text += f": {reason}"
    return text


def gate_event_text(event: Event, *, answerer: str = STRIPE) -> str | None:
    """A gate event in words for a column's event list, or None for events not shown.

    `answerer` names who answers refund calls (`STRIPE`, `EMULATOR` or `MOCK`).
    """
    kind, d = event.kind, event.data
    short = _short_id(str(d.get("action_id", "")))
    if kind is GateEvent.JOURNALED:
        claim = d.get("claim")
        if claim == "held":
            return f"intent {short} was already journaled; another worker holds its claim"
        if claim == "settled":
            return f"intent {short} was already journaled, with its outcome"
        if claim == "busy":
            return f"journaled intent {short}; another action on the payment runs first"
        return f"journaled intent {short} and took the claim"
    if kind is GateEvent.CLAIM:
        return f"took the claim on {short} (attempt {d.get('attempt')})"
    if kind is GateEvent.CLAIM_WAIT:
        return f"waiting for the claim of {d.get('owner')}: {float(d.get('seconds', 0)):.1f} s left"
    if kind is GateEvent.TURN_WAIT:
        return (
            f"waiting for action {_short_id(str(d.get('holder', '')))} on the same payment to "
            f"finish ({float(d.get('seconds', 0)):.1f} s at most), then reading it again"
        )
    if kind is GateEvent.CHECK:
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
        if name == "approval_signature":
            # The key id stays in the receipt: one line names who signed.
            signed = "approval " + str(d.get("signed")).split(" (key ", 1)[0]
            return signed if d.get("passed") else f"approval: {d.get('problem')}"
        if name == "approval":
            return "approval: ok" if d.get("passed") else f"approval: {d.get('problem')}"
    if kind is GateEvent.SENDING:
        return "journaled `sending`; the claim covers the call"
    if kind is GateEvent.BEFORE_SEND:
        return send_text(answerer, int(d.get("amount", 0)), d.get("currency"), short)
    if kind is GateEvent.AFTER_ANSWER:
        return f"{answerer} answered: refund {d.get('external_id')}"
    if kind is GateEvent.ANSWER:
        return f"{answerer} refused: {d.get('code')}: {d.get('message')}"
    if kind in (GateEvent.ANSWER_UNSETTLED, GateEvent.READ_UNSETTLED):
        return f"no settled answer from {answerer} ({d.get('error')}); will look it up"
    if kind is GateEvent.SETTLED:
        return f"receipt written: {d.get('status')}"
    if kind is GateEvent.LEFT_TO_RECOVERY:
        return f"left to recovery: {d.get('reason')}"
    if kind is GateEvent.IN_FLIGHT_WAIT:
        return (
            f"the refund call may still land at {answerer}: looking it up for "
            f"{float(d.get('seconds', 0)):.1f} s before anything else (never resent meanwhile)"
        )
    if kind is GateEvent.UNKNOWN:
        return f"unknown: {d.get('reason')}; from now on only looked up, never resent"
    if kind is GateEvent.RECOVER_ERROR:
        return f"recovery of {short} failed: {d.get('error')}; going on with the others"
    if kind is GateEvent.LOGGED and d.get("problem"):
        # A head signed and anchored is the usual, shown on the card; a failure is not.
        return f"receipt log: {d.get('problem')}"
    return None


def _short_id(action_id: str) -> str:
    """An action id cut for an event line: the head of a random or hashed id, the
    distinctive tail of one made of names (`temporal:<namespace>:<workflow>:<activity>`)."""
    if ":" in action_id:
        return "…" + action_id[-24:] if len(action_id) > 24 else action_id
    return action_id[:12] + "…"
