"""A Temporal worker process with one guarded refund activity (tests/e2e/test_temporal_helper.py).

    python -m tests.helpers.temporal_gate_worker ADDRESS TASK_QUEUE STORE STRIPE_BASE

It runs `GuardedRefund` workflows and their `guarded_refund` activity, which sends
through `interlock.temporal.ActivityGate` at the short timings (claim 6 s, Stripe timeout
1 s). Each gate event is printed as one JSON line on stdout (flushed at once, with the
activity's attempt), so the test knows where the activity is when it SIGKILLs the
process. It runs until its stdin reaches EOF (the test closes it) or it is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from interlock import (
        UNSIGNED_APPROVALS,
        Event,
        Gate,
        Intent,
        Owner,
        SQLiteStore,
        StripePayments,
        StripeRefund,
        Timing,
        make_stripe_client,
    )
    from interlock.temporal import ActivityGate, ActivityTimeouts, activity_action_id, outcome_of

TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
WORKFLOW = "GuardedRefund"
# Heartbeats reach the server within this long, as the demo's workers set it.
THROTTLE = timedelta(milliseconds=500)


@dataclass
class RefundRequest:
    """The decided refund, as the workflow's input holds it."""

    payment_intent: str
    amount: int
    lease_id: str
    fingerprint: str


def emit(kind: str, **data: Any) -> None:
    """One JSON line on stdout, flushed before anything else can happen."""
    sys.stdout.write(json.dumps({"kind": kind, "pid": os.getpid(), **data}) + "\n")
    sys.stdout.flush()


class Refunds:
    """The activity, around one ActivityGate."""

    def __init__(self, gate: ActivityGate) -> None:
        self.gate = gate

    @activity.defn(name="guarded_refund")
    def guarded_refund(self, r: RefundRequest) -> dict[str, Any]:
        """Send the refund through the gate under the activity's action id."""
        intent = Intent(
            activity_action_id(), "refund", r.payment_intent, r.amount, r.lease_id, r.fingerprint
        )
        emit("attempt", attempt=activity.info().attempt, action_id=intent.action_id)
        outcome = self.gate.send(intent)
        return {"status": outcome.status, "external_id": outcome.external_id}


@workflow.defn(name=WORKFLOW)
class GuardedRefund:
    """One guarded refund; the outcome, whether the activity returned or raised it."""

    @workflow.run
    async def run(self, r: RefundRequest) -> dict[str, Any]:
        """The activity's result, or the outcome its error carries."""
        t = ActivityTimeouts.for_timing(TIMING)
        try:
            result: dict[str, Any] = await workflow.execute_activity_method(
                Refunds.guarded_refund,
                r,
                start_to_close_timeout=t.start_to_close_timeout,
                heartbeat_timeout=t.heartbeat_timeout,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=500), maximum_attempts=3
                ),
            )
        except ActivityError as e:
            recorded = outcome_of(e)
            if recorded is None:
                raise
            return recorded
        return result


def _on_event(event: Event) -> None:
    emit("gate-" + event.kind, attempt=activity.info().attempt)


async def _serve(address: str, task_queue: str, gate: ActivityGate) -> None:
    client = await Client.connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def watch_stdin() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()
    with ThreadPoolExecutor(max_workers=2) as pool:
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[GuardedRefund],
            activities=[Refunds(gate).guarded_refund],
            activity_executor=pool,
            max_cached_workflows=0,
            identity=f"{os.getpid()}@test",
            max_heartbeat_throttle_interval=THROTTLE,
            default_heartbeat_throttle_interval=THROTTLE,
        ):
            emit("ready")
            await stop.wait()


def main() -> None:
    """Serve until stdin reaches EOF."""
    address, task_queue, store_path, stripe_base = sys.argv[1:5]
    payments = StripePayments(
        make_stripe_client(
            "sk_test_MadeUp", timeout_s=TIMING.stripe_timeout_s, base_url=stripe_base
        )
    )
    gate = ActivityGate(
        Gate(
            SQLiteStore(store_path),
            StripeRefund(payments),
            timing=TIMING,
            owner=Owner.current(f"worker-{os.getpid()}"),
            on_event=_on_event,
            approvers=UNSIGNED_APPROVALS,
        )
    )
    asyncio.run(_serve(address, task_queue, gate))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # temporalio's threads can abort the interpreter's teardown (sdk-python#300).
    os._exit(0)
