"""Run an effect through the gate inside a Temporal activity (needs the `temporal` extra).

Temporal retries an activity whose worker died, timed out or raised; the first copy may
still be running (a start-to-close timeout does not stop it). The gate makes that retry
safe: every attempt of one activity names the same action, so a retry finds its journaled
intent, waits for the first copy's claim, looks up the first copy's refund at Stripe
instead of sending twice, and re-checks the approval and the refunds the decision saw.

- **One action per activity, not per attempt.** `activity_action_id()` derives the action
  id from the namespace, the workflow id and the activity id (never the attempt number);
  it is printable ASCII of at most 200 characters, as `Intent` requires (ids that would
  not fit are hashed). A reset workflow, or a new run under the same workflow id,
  schedules the same activity ids again and so names the same actions: it gets their
  recorded outcomes and refunds nothing twice. Build the intent from the activity's input
  only (the decision recorded in the workflow's history): a retry must journal the same
  decision, or the gate refuses it (`ActionError`, below).
- **Heartbeats while it waits.** `ActivityGate` wraps a `Gate` and runs it with a
  `sleep` and an `on_event` that heartbeat, the details naming the gate's last event (`{"event":
  "claim-wait", "owner": ..., "seconds": ...}`), so a worker killed while it waits for a
  claim or for a send in flight is noticed one heartbeat timeout later. Nothing beats
  during one Stripe request: `ActivityTimeouts` gives a heartbeat timeout that covers one,
  and a start-to-close timeout that holds a retry's wait for the dead copy's claim, one
  read and one send.
- **An outcome Temporal can retry or not.** `ActivityGate.send` returns the `Outcome` when
  the refund exists (`sent`, or `adopted`: an earlier attempt made it) and otherwise raises
  `temporalio.exceptions.ApplicationError`, its `type` one of `ERROR_REFUSED`,
  `ERROR_FAILED`, `ERROR_PENDING` and `ERROR_UNKNOWN`, and its first detail the outcome
  as `outcome_data` gives it:

  ============== =========== ==========================================================
  status         retryable   why
  ============== =========== ==========================================================
  refused        no          the approval or the refunds changed; a person decides
  failed         no          Stripe said no; the same request gets the same answer
  pending        yes         left to recovery (a claim that ran short, a read that
                             failed): the next attempt carries on, never sending twice
  unknown        no          Stripe answered 5xx: the refund may exist and the action is
                             never resent, so a retry could only look again; a person
                             checks Stripe (or a later `gate.recover()` adopts the refund
                             once it shows)
  ============== =========== ==========================================================

  Unknown is an error rather than a result, so a workflow that only reads the refund id
  cannot take it for a refund; catch it by its type to wait for a person instead. An
  action id already journaled with another decision raises a non-retryable
  `ApplicationError` of type `ActionError`. Other errors pass through unchanged and
  Temporal retries them as it retries any exception: a broken store (`StoreError`) or a
  refused key (`PaymentsAuthError`, which leaves the action pending; list it in the retry
  policy's `non_retryable_error_types` if a person must fix the key first).

A restarted worker process calls `gate.recover()` before it starts its `Worker`, as the
example does: it finishes every action a dead worker left (adopting a refund that reached
Stripe, looking up an unknown one), even one whose activity Temporal will not run again;
a retry of the dead worker's activity is then answered from the journal.

In a workflow, `outcome_of(error)` reads the outcome back from the `ActivityError` that
`execute_activity` raises. Run the gate in a synchronous activity (`def`, with an
`activity_executor`): it blocks on the store and on Stripe.

The example (`docs/guides/temporal.md`'s), offline against the loopback emulator and Temporal's dev
server (`python -m interlock stripe-emulator --port 12111` and `temporal server start-dev`)::

    import asyncio
    import os
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import dataclass

    from temporalio import activity, workflow
    from temporalio.client import Client
    from temporalio.exceptions import ActivityError
    from temporalio.worker import Worker

    with workflow.unsafe.imports_passed_through():
        import interlock
        from interlock.temporal import (
            ActivityGate,
            ActivityTimeouts,
            activity_action_id,
            outcome_data,
            outcome_of,
        )

    TIMING = interlock.Timing(claim_ttl_s=15, stripe_timeout_s=10)


    @dataclass
    class Refund:
        payment_intent: str
        amount: int
        lease_id: str
        fingerprint: str  # of the refunds the model saw when it decided


    class Refunds:
        def __init__(self, gate: ActivityGate) -> None:
            self.gate = gate

        @activity.defn
        def refund(self, r: Refund) -> dict:
            intent = interlock.Intent(
                action_id=activity_action_id(),  # the same on every attempt of this activity
                kind="refund",
                target=r.payment_intent,
                amount=r.amount,
                lease_id=r.lease_id,
                fingerprint=r.fingerprint,
            )
            return outcome_data(self.gate.send(intent))  # sent or adopted, else it raises


    @workflow.defn
    class RefundWorkflow:
        @workflow.run
        async def run(self, r: Refund) -> dict:
            t = ActivityTimeouts.for_timing(TIMING)
            try:
                return await workflow.execute_activity_method(
                    Refunds.refund,
                    r,
                    start_to_close_timeout=t.start_to_close_timeout,
                    heartbeat_timeout=t.heartbeat_timeout,
                )
            except ActivityError as e:  # refused, failed, unknown (or pending, out of attempts)
                if (outcome := outcome_of(e)) is None:
                    raise
                return outcome


    async def main() -> None:
        stripe = interlock.make_stripe_client(
            "sk_test_MadeUp", timeout_s=TIMING.stripe_timeout_s, base_url="http://127.0.0.1:12111"
        )
        payments = interlock.StripePayments(stripe)
        store = interlock.SQLiteStore("interlock.sqlite3")
        payment = payments.create_payment(10_000)  # $100, and an approval for $20 back
        support = interlock.Approver.generate("support")  # the approver's key stays with them
        lease = store.grant_lease(
            support.grant(kind="refund", target=payment.id, cap=2_000, expires_in_s=3600)
        )
        ask = Refund(payment.id, 2_000, lease.id, interlock.refunds_fingerprint(payment.refunds))
        approvers = interlock.Approvers.of(support)  # what a worker is given: public keys
        gate = interlock.Gate(
            store, interlock.StripeRefund(payments), timing=TIMING, approvers=approvers
        )
        gate.recover()  # a worker's first step: finish what a dead worker left (none here)
        refunds = Refunds(ActivityGate(gate))
        client = await Client.connect("127.0.0.1:7233")
        with ThreadPoolExecutor() as pool:
            async with Worker(
                client,
                task_queue="refunds",
                workflows=[RefundWorkflow],
                activities=[refunds.refund],
                activity_executor=pool,
            ):
                for _ in range(2):  # the same workflow id twice: the second gets the first's refund
                    print(
                        await client.execute_workflow(
                            RefundWorkflow.run,
                            ask,
                            id=f"refund-{payment.id}",
                            task_queue="refunds",
                        ),
                        flush=True,
                    )


    if __name__ == "__main__":
        asyncio.run(main())
        os._exit(0)  # temporalio's threads can abort the interpreter's teardown (sdk-python#300)

It prints the same refund twice: the second run under that workflow id names the same
action and gets the first one's outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError
except ImportError as e:  # pragma: no cover - exercised in a subprocess without temporalio
    raise ImportError(
        "interlock.temporal needs temporalio: pip install './packaging/interlock[temporal]' "
        "(the core of interlock works without it)"
    ) from e

from interlock._core.config import Timing
from interlock._core.errors import ActionError
from interlock._core.events import Event
from interlock._core.gate import EventSink, Gate, Outcome
from interlock._core.journal import MAX_ID_LENGTH, Intent

__all__ = [  # noqa: RUF022 - sorted case-insensitively, as interlock's own __all__
    "action_id_for",
    "activity_action_id",
    "ActivityGate",
    "ActivityTimeouts",
    "ERROR_FAILED",
    "ERROR_PENDING",
    "ERROR_REFUSED",
    "ERROR_UNKNOWN",
    "outcome_data",
    "outcome_of",
]

ERROR_REFUSED = "InterlockRefused"
"""`ApplicationError.type` of a refused action (not retryable)."""
ERROR_FAILED = "InterlockFailed"
"""`ApplicationError.type` of an action Stripe said no to (not retryable)."""
ERROR_PENDING = "InterlockPending"
"""`ApplicationError.type` of an action left to recovery (retryable: the next attempt
carries on)."""
ERROR_UNKNOWN = "InterlockUnknown"
"""`ApplicationError.type` of an action whose create got a 5xx (not retryable: a person
checks Stripe)."""
_OUTCOME_ERRORS = frozenset({ERROR_REFUSED, ERROR_FAILED, ERROR_PENDING, ERROR_UNKNOWN})
# What an action id derived from the activity starts with; `!` marks a hashed one, and
# never appears in a plain one (`quote` encodes it).
_PREFIX = "temporal"
_HASHED_HEAD = 120
# Between two heartbeats there is at most one Stripe request and this much local work
# (store commits, the checks).
_LOCAL_S = 2.0


def action_id_for(namespace: str, workflow_id: str | None, activity_id: str) -> str:
    """The action id of an activity: the same for every attempt, distinct per activity.

    `temporal:<namespace>:<workflow id>:<activity id>`, each part percent-encoded where it
    is not a letter, digit or one of `_.-~` (so `:` inside an id cannot make two ids meet,
    and whitespace or non-ASCII cannot reach an HTTP header). An activity started without
    a workflow has an empty workflow part. Longer than 200 characters, it becomes
    `temporal!<its first 120 characters>!<sha256 of it>`.
    """
    parts = (namespace, workflow_id or "", activity_id)
    plain = ":".join([_PREFIX, *(quote(p, safe="") for p in parts)])
    if len(plain) <= MAX_ID_LENGTH:
        return plain
    digest = hashlib.sha256(plain.encode("ascii")).hexdigest()
    return f"{_PREFIX}!{plain[len(_PREFIX) + 1 :][:_HASHED_HEAD]}!{digest}"


def activity_action_id() -> str:
    """The action id of the running activity (see `action_id_for`); call it inside one."""
    try:
        info = activity.info()
    except RuntimeError:
        raise RuntimeError(
            "interlock.temporal.activity_action_id() was called outside a Temporal activity; "
            "call it inside the activity, or use action_id_for(namespace, workflow_id, "
            "activity_id)"
        ) from None
    # `namespace` is newer than `workflow_namespace`; an activity without a workflow has
    # only the former.
    namespace = getattr(info, "namespace", None) or info.workflow_namespace or ""
    return action_id_for(namespace, info.workflow_id, info.activity_id)


@dataclass(frozen=True)
class ActivityTimeouts:
    """The activity's heartbeat and start-to-close timeouts for a gate's timing.

    `heartbeat_s`: one Stripe request (nothing beats during it) plus the local steps
    around it; the refunds of a payment are listed 100 to a request, so for payments with
    more refunds than that raise it by a Stripe timeout per page.

    `start_to_close_s`: what a retry may need after a worker died in a send: wait out the
    dead copy's claim (a whole renewal plus the grace), or a sibling action's on the same
    payment (its turn), then read the payment once and send once. An answer that settles
    nothing can take longer (the gate looks its refund up until the send's in-flight
    window closes); then the attempt times out and the next one carries on, never sending
    twice.
    """

    heartbeat_s: float
    start_to_close_s: float

    @classmethod
    def for_timing(cls, timing: Timing | None = None) -> ActivityTimeouts:
        """The timeouts for this timing (default: `Timing.from_env()`)."""
        t = timing if timing is not None else Timing.from_env()
        return cls(
            heartbeat_s=t.stripe_timeout_s + _LOCAL_S,
            start_to_close_s=t.renewal_s + t.grace_s + 2 * t.stripe_timeout_s + _LOCAL_S,
        )

    @property
    def heartbeat_timeout(self) -> timedelta:
        """`heartbeat_s` for `workflow.execute_activity`."""
        return timedelta(seconds=self.heartbeat_s)

    @property
    def start_to_close_timeout(self) -> timedelta:
        """`start_to_close_s` for `workflow.execute_activity`."""
        return timedelta(seconds=self.start_to_close_s)


class ActivityGate:
    """A `Gate` for Temporal activities: heartbeats while it waits, errors Temporal sorts.

    Wraps the gate it is given: make one per worker (`ActivityGate(Gate(store, effect,
    timing=...))`). Every `send` runs a copy of that gate (`Gate.with_events`) with all of
    its options and its receipt log but two, its event sink and its sleep, which also
    heartbeat, so concurrent activities heartbeat their own details; the given `on_event`
    still receives every gate event, before the heartbeat that carries it, and the log's
    timer reports to it alone.
    """

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def send(self, intent: Intent) -> Outcome:
        """Run `intent` through the gate in the running activity; see the module docstring.

        Returns the outcome when the refund exists (`sent`, `adopted`); raises
        `ApplicationError` for `refused`, `failed`, `pending` and unknown.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "ActivityGate.send blocks on the store and on Stripe: call it in a synchronous "
                "activity (def, run with an activity_executor), not in an async one"
            )
        options = self.gate.options
        beats = _Heartbeats(options.on_event, options.sleep)
        # The wrapped gate's resolved monotonic clock stays: the heartbeating sleep waits
        # in real time exactly when the given one does. Its receipt log stays too: one per
        # worker, whose timer never heartbeats (it runs after the activity has returned).
        gate = self.gate.with_events(beats.event, beats.sleep)
        # A gate given traced (`interlock.otel.traced`) traces its copy the same way.
        tracing = getattr(self.gate, "_interlock_tracing", None)
        if tracing is not None:
            gate = tracing.copy_onto(gate)
        try:
            outcome = gate.submit(intent)
        except ActionError as e:
            raise ApplicationError(str(e), type=ActionError.__name__, non_retryable=True) from e
        if outcome.status in ("sent", "adopted"):
            return outcome
        raise _error(outcome)


class _Heartbeats:
    """The gate's event sink and sleep for one activity: both heartbeat.

    While the gate sleeps (a claim wait, a send in flight) each beat repeats the details
    of its last event, so Temporal shows what it waits for.
    """

    def __init__(self, on_event: EventSink | None, sleep: Callable[[float], None]) -> None:
        self._on_event = on_event
        self._sleep = sleep
        self._last: dict[str, Any] = {"event": "start"}

    def event(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)
        plain = {
            k: v for k, v in event.data.items() if v is None or isinstance(v, (str, int, float))
        }
        self._last = {"event": event.kind.value, **plain}
        activity.heartbeat(self._last)

    def sleep(self, seconds: float) -> None:
        activity.heartbeat(self._last)
        self._sleep(seconds)


def outcome_data(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON-ready data: what `send`'s errors carry as their first detail.

    Keys: `action_id`, `status`, `reason`, `external_id` (the refund), `amount`, `code`,
    `unknown` and `receipt` (the receipt's hash, or None).
    """
    return {
        "action_id": outcome.action_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "external_id": outcome.external_id,
        "amount": outcome.amount,
        "code": outcome.code,
        "unknown": outcome.unknown,
        "receipt": None if outcome.receipt is None else outcome.receipt.hash,
    }


def outcome_of(error: BaseException) -> dict[str, Any] | None:
    """The outcome an `ActivityGate.send` error carries, from it or from its causes.

    In a workflow, pass the `ActivityError` that `execute_activity` raised: its cause is
    the `ApplicationError`. None when no error in the chain came from `send`.
    """
    seen: BaseException | None = error
    while seen is not None:
        if (
            isinstance(seen, ApplicationError)
            and seen.type in _OUTCOME_ERRORS
            and seen.details
            and isinstance(seen.details[0], dict)
        ):
            return dict(seen.details[0])
        seen = seen.__cause__
    return None


def _error(outcome: Outcome) -> ApplicationError:
    """The ApplicationError for an outcome that is not a refund, retryable or not."""
    aid = outcome.action_id
    data = outcome_data(outcome)
    if outcome.status == "refused":
        message = (
            f"refused: {outcome.reason} (action {aid}); nothing was sent, and a retry would "
            "refuse again: a person decides, and may approve it again as a new action"
        )
        return ApplicationError(message, data, type=ERROR_REFUSED, non_retryable=True)
    if outcome.status == "failed":
        message = (
            f"failed: Stripe answered {outcome.code}: {outcome.reason} (action {aid}); a retry "
            "would get the same answer"
        )
        return ApplicationError(message, data, type=ERROR_FAILED, non_retryable=True)
    if outcome.unknown:
        message = (
            f"{outcome.reason} (action {aid}). A retry could only look it up again, so this "
            "activity is not retried: a person checks Stripe for a refund whose metadata names "
            "the action (a later gate.recover() adopts it once it shows)"
        )
        return ApplicationError(message, data, type=ERROR_UNKNOWN, non_retryable=True)
    message = (
        f"pending: {outcome.reason} (action {aid}); the next attempt carries on under the "
        "same action and never sends twice"
    )
    return ApplicationError(message, data, type=ERROR_PENDING)
