"""bench/peers.py's Temporal workflow and activities (a module of their own: Temporal's
workflow sandbox imports the workflow's module again, so it holds nothing else).

`OneActivity` runs one activity and returns its result: `gated`, a refund through the
library's `interlock.temporal.ActivityGate` (the gate's journal, claim, checks and receipt,
heartbeating on each event), or `plain`, the same refund made directly with an
idempotency key derived from the activity, as an activity without Interlock makes it.
Both are synchronous activities on the worker's thread pool, with the same timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from interlock import Intent, Payments, Timing
    from interlock.temporal import ActivityGate, ActivityTimeouts, activity_action_id

TASK_QUEUE = "interlock-bench-peers"
TIMING = Timing()
GATED = "gated"
PLAIN = "plain"


@dataclass
class Ask:
    """A decided refund, and which activity makes it (`GATED` or `PLAIN`)."""

    activity: str
    payment_intent: str
    amount: int
    lease_id: str
    fingerprint: str
    metadata: dict[str, str] = field(default_factory=dict)


class Activities:
    """The two activities, over one gate and the payments it refunds through."""

    def __init__(self, gate: ActivityGate, payments: Payments) -> None:
        self.gate = gate
        self.payments = payments

    @activity.defn(name=GATED)
    def gated(self, ask: Ask) -> str:
        """The refund through the gate, under the activity's action id; its refund id."""
        intent = Intent(
            action_id=activity_action_id(),
            kind="refund",
            target=ask.payment_intent,
            amount=ask.amount,
            lease_id=ask.lease_id,
            fingerprint=ask.fingerprint,
            metadata=ask.metadata,
        )
        return self.gate.send(intent).external_id or ""

    @activity.defn(name=PLAIN)
    def plain(self, ask: Ask) -> str:
        """The refund made directly, keyed by the activity; its refund id."""
        refund = self.payments.create_refund(
            ask.payment_intent, ask.amount, idempotency_key=activity_action_id()
        )
        return refund.id


@workflow.defn
class OneActivity:
    """One activity, the one the ask names, with the gate's timeouts for both."""

    @workflow.run
    async def run(self, ask: Ask) -> str:
        """The activity's result: the refund's id."""
        t = ActivityTimeouts.for_timing(TIMING)
        result: str = await workflow.execute_activity(
            ask.activity,
            ask,
            start_to_close_timeout=t.start_to_close_timeout,
            heartbeat_timeout=t.heartbeat_timeout,
        )
        return result
