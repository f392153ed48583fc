"""The Temporal engine's workflow and activities: one `RefundCase` workflow per column.

    RefundCase(case)
      1. ask_model: the model reads the payment and decides. The decision is the
         activity's result, so it is recorded in the workflow's history.
      2. refund: the column's worker code (`workers.columns.run_worker`), with the
         decision from the history and Temporal's attempt number. A start-to-close
         timeout, a heartbeat timeout and a retry policy: when the worker dies, Temporal
         notices the missing heartbeat and retries the activity on the next worker.
      The workflow's result is the refund activity's outcome.

The columns, as Temporal runs them:
- standard (Temporal alone): plain activity retry; the Idempotency-Key is derived from
  the case, so Stripe deduplicates a retry while it keeps the key.
- interlock (Temporal + Interlock): the gate inside the refund activity; a retry attempt
  finds the case's journaled action and runs `gate.recover` for it.
- checked (Temporal + the hand-written check): before a retry attempt, the same
  re-check as standalone's (`workers.columns`, about ten lines): re-read the payment's
  refunds and the approval, and stop if either changed.

The refund activity heartbeats on every event and while the gate waits for a claim, so
the heartbeat timeout only has to cover one Stripe request (`RefundTimeouts`); ask_model
heartbeats from a thread while the model answers. Either way Temporal notices a dead
worker one heartbeat timeout after its last beat.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from interlock import Timing
    from workers.agent import Decision
    from workers.columns import (
        RECORDED_DECISION,
        Case,
        DecisionBox,
        Emit,
        WorkerContext,
        _decide,
        run_worker,
    )

WORKFLOW = "RefundCase"
ACTIVITY_ASK_MODEL = "ask_model"
ACTIVITY_REFUND = "refund"
# docs/design.md §5: the refund activity has a 15 s start-to-close timeout with the demo's 15 s
# claim; other claims scale it (the tests' 6 s claim gives 6 s).
DEMO_START_TO_CLOSE_S = 15.0
DEMO_CLAIM_TTL_S = 15.0
# The heartbeat timeout covers one Stripe request plus this much local work.
HEARTBEAT_SLACK_S = 2.0
# The real model may take a while; a thread heartbeats for ask_model meanwhile.
ASK_MODEL_TIMEOUT_S = 120.0
REFUND_MAX_ATTEMPTS = 5


class TimeoutsError(ValueError):
    """The refund activity's timeouts cannot hold the gate's wait for a claim."""


@dataclass(frozen=True)
class RefundTimeouts:
    """The refund activity's timeouts, in seconds, derived from the gate's timing.

    `heartbeat_s` covers one Stripe request and the local steps around it (the activity
    heartbeats between requests and while waiting), so a dead worker is noticed after
    that long. A retry attempt then waits for the dead worker's claim: at most the
    claim's renewal minus the heartbeat timeout, and then reads Stripe once, which must
    fit in `start_to_close_s`.
    """

    start_to_close_s: float
    heartbeat_s: float

    @classmethod
    def for_timing(cls, timing: Timing, start_to_close_s: float | None = None) -> RefundTimeouts:
        """The timeouts for this timing; `start_to_close_s` overrides the scaled 15 s."""
        if start_to_close_s is None:
            start_to_close_s = DEMO_START_TO_CLOSE_S * timing.claim_ttl_s / DEMO_CLAIM_TTL_S
        timeouts = cls(start_to_close_s, timing.stripe_timeout_s + HEARTBEAT_SLACK_S)
        needed = timeouts.longest_claim_wait_s(timing) + timing.stripe_timeout_s
        if start_to_close_s < needed:
            raise TimeoutsError(
                f"a {start_to_close_s:g} s start-to-close timeout for the refund activity "
                f"cannot hold a retry's wait for the claim and one Stripe request "
                f"({needed:g} s with claim TTL {timing.claim_ttl_s:g} s and Stripe timeout "
                f"{timing.stripe_timeout_s:g} s); raise INTERLOCK_ACTIVITY_TIMEOUT or leave "
                "it unset"
            )
        return timeouts

    def longest_claim_wait_s(self, timing: Timing) -> float:
        """How long a retry attempt may wait for the dead attempt's claim."""
        return max(0.0, timing.renewal_s - self.heartbeat_s)


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
            return {"status": "no-refund", "reason": decision.get("text"), "refund_id": None}
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
        return outcome


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
        # The key workers.columns derives from the case for the standard and checked columns.
        return {"decision": self.decision.to_dict(), "key": f"refund-{self.case.case_id}"}

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
_TEMPORAL_TEXT = {
    "decision-saved": "the decision is in the workflow's history (ask_model's result)",
    "resume": "read the decision from the workflow's history; retrying the refund",
}

# Builds a column's worker context for one activity: case, decision box, emit, sleep.
ContextFactory = Callable[[Case, DecisionBox, Emit, Callable[[float], None]], WorkerContext]


class CaseActivities:
    """The RefundCase activities of one worker process, around the column's worker code."""

    def __init__(self, context: ContextFactory, emit: Emit) -> None:
        self._context = context
        self._emit_line = emit

    def _emit(self, kind: str, text: str, **data: Any) -> None:
        self._emit_line(kind, _TEMPORAL_TEXT.get(kind, text), **data)
        activity.heartbeat(kind)

    def _sleep(self, seconds: float) -> None:
        activity.heartbeat("waiting")
        time.sleep(seconds)

    @activity.defn(name=ACTIVITY_ASK_MODEL)
    def ask_model(self, case: dict[str, Any]) -> dict[str, Any]:
        """Ask the model about the case; the decision becomes this activity's result."""
        c = Case.from_dict(case)
        ctx = self._context(c, HistoryBox(c, None, 1), self._emit, self._sleep)
        with _pulse(activity.info().heartbeat_timeout):
            return _decide(ctx).to_dict()

    @activity.defn(name=ACTIVITY_REFUND)
    def refund(self, args: RefundInput) -> dict[str, Any]:
        """Send the decided refund through the column's path; retried by Temporal."""
        attempt = activity.info().attempt
        case = Case.from_dict(args.case)
        decision = Decision.from_dict(args.decision)
        ctx = self._context(case, HistoryBox(case, decision, attempt), self._emit, self._sleep)
        ctx.extra[RECORDED_DECISION] = decision
        self._emit(
            "activity",
            f"refund activity, attempt {attempt}" + (" (Temporal's retry)" if attempt > 1 else ""),
            attempt=attempt,
        )
        return run_worker(ctx)
