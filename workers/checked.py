"""The checked column: the standard worker plus a hand-written re-check before the retry.

Before it retries its saved decision, the restarted worker re-reads the payment's refunds
and the approval, and stops if either changed (about ten lines, `recheck`). It cannot
tell a change that was its own earlier refund from anyone else's, so after an answer it
never recorded it stops on a false alarm.
"""

from __future__ import annotations

from interlock import PaymentsAuthError, PaymentsUnsettledError, refunds_fingerprint
from workers import standard
from workers.agent import Decision
from workers.context import WorkerContext
from workers.protocol import CHECK_APPROVAL, CHECK_WORLD, ColumnOutcome, EventKind

# Whether it acts through a gate (and so reaches the gate's own crash points, `gate_only`).
GATED = False


def run(ctx: WorkerContext) -> ColumnOutcome:
    """The standard path, with the re-check (`stop_if_changed`) before a retry."""
    return standard.run(ctx, before_retry=stop_if_changed)


def stop_if_changed(ctx: WorkerContext, decision: Decision) -> ColumnOutcome | None:
    """Before the retry: `stopped` if the refunds or the approval changed, None to go on.

    A re-check that gets no answer is no reason to stop, nor to send: `unknown`.
    """
    try:
        stop = recheck(ctx, decision)
    except PaymentsAuthError as e:
        return standard.key_refused(ctx, e)
    except PaymentsUnsettledError as e:
        ctx.emit(
            EventKind.RECHECK,
            f"could not re-read the refunds: {e.detail}; nothing sent",
            error=e.detail,
        )
        return ColumnOutcome("unknown", reason=f"could not re-check: {e.detail}")
    return None if stop is None else ColumnOutcome("stopped", reason=stop)


def recheck(ctx: WorkerContext, decision: Decision) -> str | None:
    """The hand-written check: stop if the refunds or the approval changed.

    Returns why it stops, or None; its event names the check that stopped it as the gate
    names its own (`failed_check`). A read that fails raises (`PaymentsAuthError`,
    `PaymentsUnsettledError`): then nothing was checked.
    """
    payment = ctx.payments.get_payment(ctx.case.payment_intent)
    lease = ctx.store.lease(ctx.case.lease_id)
    if refunds_fingerprint(payment.refunds) != decision.fingerprint:
        failed, reason = CHECK_WORLD, "the payment's refunds changed since the decision"
    elif lease is None or lease.revoked or lease.expires_at <= ctx.clock():
        failed, reason = CHECK_APPROVAL, "the approval was revoked or expired"
    else:
        ctx.emit(
            EventKind.RECHECK, "re-read the refunds and the approval: unchanged", failed_check=None
        )
        return None
    ctx.emit(
        EventKind.RECHECK,
        f"re-read the refunds and the approval: {reason}; stopping",
        failed_check=failed,
    )
    return reason
