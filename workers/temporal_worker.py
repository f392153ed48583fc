"""The Temporal worker process: one column's worker, polling that column's task queue.

    python -m workers.temporal_worker --address HOST:PORT --task-queue QUEUE --workflow-id ID

It runs the `RefundCase` workflow and its activities (`workers.temporal_workflows`) for
one case, until that case's workflow closes; then it exits 0 (1 if the workflow failed).
Like `workers.standalone`, it prints one JSON event per line on stdout, flushed at once;
with `INTERLOCK_CRASH=<point>` it SIGKILLs itself at that point, which for the Temporal
engine's scenarios is inside the refund activity; and it exits by itself when its
supervisor goes away (stdin reaches EOF or its parent changes).

Workflows are not cached (`max_cached_workflows=0`): the next workflow task never waits
on a dead worker's sticky queue. Environment: as `workers.process` says.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from interlock import InterlockError
from workers.process import (
    context_factory,
    emit,
    journal_and_payments,
    supervised_crash_point,
    worker_timing,
)
from workers.protocol import EXIT_ERROR, EXIT_USAGE, EventKind
from workers.protocol.switches import Switches
from workers.temporal_workflows import CaseActivities, RefundCase

# Heartbeats reach the server within this long of the event that sent them, so a dead
# worker is noticed one heartbeat timeout after its last event.
HEARTBEAT_THROTTLE = timedelta(milliseconds=500)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workers.temporal_worker")
    p.add_argument("--address", required=True, help="the Temporal frontend, HOST:PORT")
    p.add_argument("--namespace", default="default")
    p.add_argument("--task-queue", required=True, help="the column's own task queue")
    p.add_argument("--workflow-id", required=True, help="the case's RefundCase workflow")
    return p


async def _serve(args: argparse.Namespace, activities: CaseActivities) -> int:
    client = await Client.connect(args.address, namespace=args.namespace)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="activity") as executor:
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[RefundCase],
            activities=[activities.ask_model, activities.refund],
            activity_executor=executor,
            max_concurrent_activities=2,
            max_cached_workflows=0,
            identity=f"{os.getpid()}@{socket.gethostname()}",
            max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        )
        async with worker:
            try:
                await client.get_workflow_handle(args.workflow_id).result()
            except WorkflowFailureError as e:
                emit(EventKind.ERROR, f"the workflow failed: {e.cause}")
                return EXIT_ERROR
    emit(EventKind.DONE, "the case's workflow closed; the worker stops")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one Temporal worker until its case's workflow closes; returns its exit code."""
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    usable, crash_at = supervised_crash_point()
    if not usable:
        return EXIT_USAGE
    try:
        timing = worker_timing()
        _, store, payments = journal_and_payments(timing)
        context = context_factory(payments, store, timing, Switches.from_env(), crash_at)
        emit(
            EventKind.START,
            f"Temporal worker started on task queue {args.task_queue}"
            + (f" (crash point: {crash_at})" if crash_at else ""),
            crash_point=crash_at,
        )
        return asyncio.run(_serve(args, CaseActivities(context, emit)))
    except (InterlockError, OSError, ValueError, RuntimeError) as e:
        emit(EventKind.ERROR, f"{type(e).__name__}: {e}")
        return EXIT_ERROR


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalization: temporalio's core threads can still call into Python
    # while it finalizes, which aborts the process (SIGABRT) after a clean run. Everything
    # the worker did is already durable (journal commits, Stripe, Temporal's history).
    os._exit(code)
