"""The standard column: the common agent pattern, nothing re-checked.

1. Ask the model; save its decision and the Idempotency-Key derived from the case to a
   local file (fsync) before the send.
2. Send the refund under that key.
3. Record that it was made.

A restarted worker finds the file and retries the send under the same key: Stripe
replays its first answer while it keeps the key (24 hours). The checked column is this
path with a re-check before the retry (`workers.checked`).
"""

from __future__ import annotations

from collections.abc import Callable

from interlock import (
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    format_amount,
)
from interlock.testing import CrashPoint
from workers.agent import Decision
from workers.context import WorkerContext, ask_model
from workers.protocol import ColumnOutcome, EventKind
from workers.protocol.case import Case
from workers.protocol.words import key_refused_reason, send_text

# A step before the retry of a saved decision: an outcome stops the worker there, None
# lets the retry go on.
BeforeRetry = Callable[[WorkerContext, Decision], ColumnOutcome | None]


def idempotency_key(case: Case) -> str:
    """The Stripe Idempotency-Key the standard and checked columns derive from the case."""
    return f"refund-{case.case_id}"


# Whether it acts through a gate (and so reaches the gate's own crash points, `gate_only`).
GATED = False


def run(ctx: WorkerContext, before_retry: BeforeRetry | None = None) -> ColumnOutcome:
    """Send the case's refund on the saved decision, or decide, save and send it."""
    case = ctx.case
    saved = ctx.box.load()
    if saved is not None and saved.get("done"):
        done = saved["done"]
        ctx.emit(EventKind.RESUME, "the saved record says the refund was made; nothing to do")
        return ColumnOutcome("sent", refund_id=done.get("refund_id"))
    if saved is None:
        decision = ask_model(ctx)
        if not decision.refund:
            return ColumnOutcome("no-refund", reason=decision.text)
        saved = {"decision": decision.to_dict(), "key": idempotency_key(case)}
        ctx.box.save(saved)
        ctx.emit(EventKind.DECISION_SAVED, "saved the decision to a local file (fsync)")
        ctx.crash(CrashPoint.AFTER_JOURNAL)
        retry = False
    else:
        decision = Decision.from_dict(saved["decision"])
        ctx.emit(EventKind.RESUME, "read the saved decision; retrying the refund", retrying=True)
        ctx.crash(CrashPoint.DURING_RECOVERY)
        retry = True
        if before_retry is not None:
            stopped = before_retry(ctx, decision)
            if stopped is not None:
                return stopped
    key = str(saved["key"])
    if retry and ctx.switches.emulate_24h:
        # Emulated: Stripe pruned the key after 24 h, so the retry's key is one it has not seen.
        key += "-after-24h"
    ctx.crash(CrashPoint.AFTER_SENDING)
    ctx.crash(CrashPoint.BEFORE_SEND)
    amount = int(decision.amount or 0)
    currency = decision.payment_seen.get("currency")
    ctx.emit(EventKind.SEND, send_text(ctx.answerer, amount, currency, key), key=key)
    try:
        refund = ctx.payments.create_refund(
            case.payment_intent, amount, idempotency_key=key, metadata=case.metadata
        )
    except PaymentsUnsettledError as e:
        # The common pattern has no answer for this: it reports what it knows, nothing more.
        ctx.emit(EventKind.ANSWER, f"no settled answer from {ctx.answerer}: {e.detail}")
        return ColumnOutcome("unknown", reason=e.detail)
    except PaymentsAuthError as e:
        return key_refused(ctx, e)
    except PaymentsRejectedError as e:
        ctx.emit(EventKind.ANSWER, f"{ctx.answerer} refused: {e.code}: {e.provider_message}")
        return ColumnOutcome("failed", reason=f"{e.code}: {e.provider_message}")
    ctx.emit(
        EventKind.ANSWER,
        f"{ctx.answerer} answered: refund {refund.id} "
        f"{format_amount(refund.amount, refund.currency or None)}",
        refund_id=refund.id,
    )
    ctx.crash(CrashPoint.AFTER_ANSWER)
    saved["done"] = {"refund_id": refund.id}
    ctx.box.save(saved)
    ctx.crash(CrashPoint.AFTER_OUTCOME)
    return ColumnOutcome("sent", refund_id=refund.id)


def key_refused(ctx: WorkerContext, e: PaymentsAuthError) -> ColumnOutcome:
    """A refused key settles nothing: report it as unknown, naming the key problem.

    It is a configuration error: whether the refund exists is not known from here, so the
    report claims nothing; whoever fixes the key runs the worker again.
    """
    reason = key_refused_reason(e)
    ctx.emit(EventKind.KEY_REFUSED, f"{reason}: fix the key and run the worker again")
    return ColumnOutcome("unknown", reason=reason)
