"""The Temporal engine's workflow and activities: one `RefundCase` workflow per column.

    RefundCase(case)
      1. ask_model: the model reads the payment and decides. The decision is the
         activity's result, so it is recorded in the workflow's history.
      2. refund: the column's worker code, with the decision from the history and
         Temporal's attempt number. A start-to-close timeout, a heartbeat timeout and a
         retry policy: when the worker dies, Temporal notices the missing heartbeat and
         retries the activity on the next worker.
      The workflow's result is the refund activity's outcome; for interlock, an outcome
      it raised as a non-retryable error (`interlock.temporal.outcome_of`) too.

The columns, as Temporal runs them:
- standard (Temporal alone): plain activity retry; the Idempotency-Key is derived from
  the case, so Stripe deduplicates a retry while it keeps the key.
- interlock (Temporal + Interlock): the refund through `interlock.temporal.ActivityGate`,
  the library's helper, under the action id derived from the workflow id and the
  activity id: a retry attempt names the same action, waits (heartbeating) for the dead
  attempt's claim, and adopts its refund or re-checks. Refused comes back as a
  non-retryable error, which the workflow turns into its result.
- checked (Temporal + the hand-written check): before a retry attempt, the same
  re-check as standalone's (`workers.checked`, about ten lines): re-read the payment's
  refunds and the approval, and stop if either changed.

The refund activity heartbeats on every event and while the gate waits for a claim, so
the heartbeat timeout only has to cover one Stripe request (`RefundTimeouts`, which
follows `interlock.temporal.ActivityTimeouts`); ask_model
heartbeats from a thread while the model answers. Either way Temporal notices a dead
worker one heartbeat timeout after its last beat.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from interlock import PaymentsAuthError, Timing
    from interlock.temporal import (
        ActivityGate,
        ActivityTimeouts,
        activity_action_id,
        outcome_of,
    )
    from workers.agent import Decision
    from workers.context import (
        RECORDED_DECISION,
        ContextFactory,
        Emit,
        WorkerContext,
        ask_model,
    )
    from workers.interlock import (
        gate_options,
        gate_report,
        key_refused,
        refund_gate,
        refund_intent,
    )
    from workers.protocol import ColumnOutcome, EventKind
    from workers.protocol.case import Case
    from workers.run import report, run_worker, story
    from workers.standard import idempotency_key

WORKFLOW = "RefundCase"
ACTIVITY_ASK_MODEL = "ask_model"
ACTIVITY_REFUND = "refund"
# The real model may take a while; a thread heartbeats for ask_model meanwhile.
ASK_MODEL_TIMEOUT_S = 120.0
REFUND_MAX_ATTEMPTS = 5


class TimeoutsError(ValueError):
    """The refund activity's timeouts cannot hold the gate's wait for a claim."""


@dataclass(frozen=True)
class RefundTimeouts:
    """The refund activity's timeouts, in seconds, derived from the gate's timing.

    Interlock's rule (`interlock.temporal.ActivityTimeouts`), for every column alike:
    the heartbeat timeout covers one Stripe request and the local steps around it (the
    activity heartbeats between requests and while waiting), so a dead worker is noticed
    after that long; the start-to-close timeout holds a retry's wait for the dead
    attempt's claim, one read and one send.
    """

    start_to_close_s: float
    heartbeat_s: float

    @classmethod
    def for_timing(cls, timing: Timing, start_to_close_s: float | None = None) -> RefundTimeouts:
        """The timeouts for this timing; `start_to_close_s` overrides the start-to-close
        timeout, but never below what the rule asks for."""
        rule = ActivityTimeouts.for_timing(timing)
        if start_to_close_s is None:
            start_to_close_s = rule.start_to_close_s
        if start_to_close_s < rule.start_to_close_s:
            raise TimeoutsError(
                f"a {start_to_close_s:g} s start-to-close timeout for the refund activity "
                f"cannot hold a retry's wait for the claim, one read and one send "
                f"({rule.start_to_close_s:g} s with claim TTL {timing.claim_ttl_s:g} s and "
                f"Stripe timeout {timing.stripe_timeout_s:g} s); raise "
                "INTERLOCK_ACTIVITY_TIMEOUT or leave it unset"
            )
        return cls(start_to_close_s, rule.heartbeat_s)


@dataclass(frozen=True)
class CaseInput:
    """The workflow's input: the column's case and the activities' timeouts."""

    case: dict[str, Any]
    refund_start_to_close_s: float
    heartbeat_timeout_s: float


@dataclass(frozen=True)
class RefundInput:
    """The refund activity's input: the case and the decision from the history."""

    case: dict[str, Any]
    decision: dict[str, Any]


@workflow.defn(name=WORKFLOW)
class RefundCase:
    """One support case: ask the model, then send the refund it decided, with retries."""

    @workflow.run
    async def run(self, params: CaseInput) -> dict[str, Any]:
        """The refund activity's outcome, or `no-refund` when the model decided none."""
        decision: dict[str, Any] = await workflow.execute_activity(
            ACTIVITY_ASK_MODEL,
            params.case,
            result_type=dict,
            start_to_close_timeout=timedelta(seconds=ASK_MODEL_TIMEOUT_S),
            heartbeat_timeout=timedelta(seconds=params.heartbeat_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
        if decision.get("amount") is None:
            return ColumnOutcome("no-refund", reason=decision.get("text")).to_wire()
        try:
            outcome: dict[str, Any] = await workflow.execute_activity(
                ACTIVITY_REFUND,
                RefundInput(params.case, decision),
                result_type=dict,
                start_to_close_timeout=timedelta(seconds=params.refund_start_to_close_s),
                heartbeat_timeout=timedelta(seconds=params.heartbeat_timeout_s),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=500),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=5),
                    maximum_attempts=REFUND_MAX_ATTEMPTS,
                ),
            )
        except ActivityError as e:
            # Interlock's refused, failed and unknown end the activity without a retry
            # (and pending once the attempts run out): the outcome is the case's result.
            recorded = outcome_of(e)
            if recorded is None:
                raise
            return _recorded(recorded).to_wire()
        return outcome


def _recorded(recorded: dict[str, Any]) -> ColumnOutcome:
    """A column's report from the outcome an interlock error carries (`outcome_data`)."""
    return ColumnOutcome(
        recorded["status"],
        reason=recorded["reason"],
        refund_id=recorded["external_id"],
        action_id=recorded["action_id"],
    )


class HistoryBox:
    """The standard and checked workers' decision box under Temporal.

    The decision lives in the workflow's history (ask_model's result), not in a file, and
    Temporal's attempt number says whether this is a retry: the first attempt finds
    nothing saved and sends; a retry attempt finds the decision and the key derived from
    the case, as a restarted standalone worker finds them in its file. Saving is a no-op:
    the refund activity's completion is Temporal's record that the refund was made.
    """

    def __init__(self, case: Case, decision: Decision | None, attempt: int) -> None:
        self.case = case
        self.decision = decision
        self.attempt = attempt

    def load(self) -> dict[str, Any] | None:
        """Nothing on the first attempt; the decision and the case's key on a retry."""
        if self.attempt == 1 or self.decision is None:
            return None
        return {"decision": self.decision.to_dict(), "key": idempotency_key(self.case)}

    def save(self, record: dict[str, Any]) -> None:
        """Nothing to save: the history holds the decision and the activity's result."""


@contextmanager
def _pulse(timeout: timedelta | None) -> Iterator[None]:
    """Heartbeat from a thread while the activity waits on one long call (a model turn).

    The heartbeat then says the worker process is alive, not that the call progresses;
    the start-to-close timeout bounds the call.
    """
    if not timeout:
        yield
        return
    context = contextvars.copy_context()  # the activity's context, for activity.heartbeat
    done = threading.Event()

    def beat() -> None:
        while not done.wait(timeout.total_seconds() / 4):
            context.run(activity.heartbeat, "waiting for the model")

    pulse = threading.Thread(target=beat, name="heartbeat", daemon=True)
    pulse.start()
    try:
        yield
    finally:
        done.set()
        pulse.join()


# The worker code's words for a step that Temporal does differently.
_TEMPORAL_TEXT: dict[str, str] = {
    EventKind.DECISION_SAVED: "the decision is in the workflow's history (ask_model's result)",
    EventKind.RESUME: "read the decision from the workflow's history; retrying the refund",
}


class CaseActivities:
    """The RefundCase activities of one worker process, around the column's worker code."""

    def __init__(self, context: ContextFactory, emit: Emit) -> None:
        self._context = context
        self._emit_line = emit

    def _emit(self, kind: str, text: str, **data: Any) -> None:
        self._emit_line(kind, _TEMPORAL_TEXT.get(kind, text), **data)
        activity.heartbeat(str(kind))

    def _sleep(self, seconds: float) -> None:
        activity.heartbeat("waiting")
        time.sleep(seconds)

    @activity.defn(name=ACTIVITY_ASK_MODEL)
    def ask_model(self, case: dict[str, Any]) -> dict[str, Any]:
        """Ask the model about the case; the decision becomes this activity's result."""
        c = Case.from_dict(case)
        ctx = self._context(c, HistoryBox(c, None, 1), self._emit, self._sleep)
        with _pulse(activity.info().heartbeat_timeout):
            return ask_model(ctx).to_dict()

    @activity.defn(name=ACTIVITY_REFUND)
    def refund(self, args: RefundInput) -> dict[str, Any]:
        """Send the decided refund through the column's path; retried by Temporal."""
        attempt = activity.info().attempt
        case = Case.from_dict(args.case)
        decision = Decision.from_dict(args.decision)
        ctx = self._context(case, HistoryBox(case, decision, attempt), self._emit, self._sleep)
        ctx.extra[RECORDED_DECISION] = decision
        self._emit(
            EventKind.ACTIVITY,
            f"refund activity, attempt {attempt}" + (" (Temporal's retry)" if attempt > 1 else ""),
            attempt=attempt,
        )
        if story(case.column).gated:
            return _interlock_refund(ctx, decision).to_wire()
        return run_worker(ctx).to_wire()


def _interlock_refund(ctx: WorkerContext, decision: Decision) -> ColumnOutcome:
    """The interlock column under Temporal: interlock's own helper, nothing of ours."""
    # The activity's context sleeps with a bare "waiting" heartbeat; ActivityGate's own
    # sleep beats with the gate's last event instead, over a plain sleep.
    options = replace(gate_options(ctx), sleep=time.sleep)
    gate = refund_gate(
        ctx.store, ctx.payments, options, answerer=ctx.answerer, switches=ctx.switches
    )
    if ctx.store.actions(ctx.case.metadata):
        # A retried activity: the attempt before may have died between its receipt's
        # commit and numbering it into the log (as the standalone worker's restart does).
        gate.catch_up_log()
    guard = ActivityGate(gate)
    intent = refund_intent(ctx.case, decision, activity_action_id())
    try:
        outcome = gate_report(guard.send(intent))
    except ApplicationError as e:
        recorded = outcome_of(e)
        if recorded is not None:
            report(ctx, _recorded(recorded))
        raise
    except PaymentsAuthError as e:
        # A refused key settles nothing (the action stays pending, its reservation kept):
        # report it, as standalone does, for whoever fixes the key to run the case again.
        outcome = key_refused(ctx, e, intent.action_id)
    report(ctx, outcome)
    return outcome
