"""Each column as a `RefundCase` workflow, its workers real processes, killed for real.

For each column, at the same time: create the payment and the approval (as standalone),
start a `RefundCase` workflow on the column's own task queue, start a worker process
(`workers.temporal_worker`) with the scenario's crash point, see it die (exit -9) in the
refund activity, do the outage action, start a new worker process, let Temporal retry
the refund activity on it, and end the column when the workflow closes. The result card
re-reads Stripe (and, for interlock, the receipt and `verify()`), as standalone's does.

During the run the column also shows what Temporal itself says (`history`): the
workflow's history, followed to its close, and `describe()`, polled for each retry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from interlock.testing import CrashPoint, PaymentsModel
from interlock_demo.core.run import Run
from interlock_demo.engine.column import ColumnScript
from interlock_demo.engine.process import ProcessLauncher
from interlock_demo.engine.temporal.history import (
    Activities,
    Closing,
    model_answered,
    read_event,
    result_payloads,
    retry_notes,
)
from interlock_demo.engine.temporal.probe import refund_timeouts
from interlock_demo.engine.temporal.runtime import NAMESPACE, TemporalRuntime
from interlock_demo.errors import ColumnFailed
from interlock_demo.settings.config import DemoConfig
from workers.protocol import ColumnOutcome
from workers.protocol.case import Case
from workers.protocol.words import EMULATOR, STRIPE, said_at

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.client import WorkflowHandle

    from workers.temporal_workflows import RefundTimeouts

_DESCRIBE_EVERY_S = 0.25
# After the last worker exits, the closing event is already in the history.
_CLOSE_DEADLINE_S = 10.0


def temporal_launchers(
    runtime: TemporalRuntime, run: Run, config: DemoConfig, process: ProcessLauncher
) -> Callable[[], TemporalLauncher]:
    """One `TemporalLauncher` per column of this run, each spawning through `process`;
    notes Temporal's settings in the run."""
    timeouts = refund_timeouts(config)
    settings = {
        **runtime.settings(),
        "refund_start_to_close_s": timeouts.start_to_close_s,
        "heartbeat_timeout_s": timeouts.heartbeat_s,
    }
    run.update(None, lambda: run.settings.__setitem__("temporal", settings))
    return lambda: TemporalLauncher(process, runtime, timeouts)


def workflow_id(case: Case) -> str:
    """The column's workflow id."""
    return f"refund-case-{case.case_id}"


def task_queue(case: Case) -> str:
    """The column's own task queue."""
    return f"interlock-demo-{case.case_id}"


class TemporalLauncher:
    """A column run as a `RefundCase` workflow; its workers are processes, killed for real.

    It starts the workflow before the first worker, spawns each worker through the
    `ProcessLauncher` it holds (with the Temporal worker's command line), takes the
    column's outcome from the workflow's result after the last, and terminates a workflow
    the column left open. One per column.
    """

    def __init__(
        self, process: ProcessLauncher, runtime: TemporalRuntime, timeouts: RefundTimeouts
    ) -> None:
        """`process` spawns the workers; `timeouts` are the refund activity's."""
        self.process = process
        self.runtime = runtime
        self.timeouts = timeouts
        self._follower: concurrent.futures.Future[None] | None = None
        self._workflow_id: str | None = None
        self._closed = threading.Event()
        self._closing: Closing | None = None

    def launch(self, script: ColumnScript, crash_point: CrashPoint | None) -> int | None:
        """Start the workflow before the first worker; after the last, wait for it to close."""
        case = script.case
        assert case is not None
        if self._follower is None:
            self._start_workflow(script, case)
        code = self.process.run_worker(
            script, crash_point, self.argv(case), asks_model=self.asks_model(case)
        )
        if crash_point is None and code == 0:
            self._take_outcome(script, case)
        return code

    def fault_model(self) -> PaymentsModel:
        """The emulator the process launcher's workers call, as for standalone columns."""
        return self.process.fault_model()

    def wait_held(self, event: threading.Event, limit: float) -> bool:
        """As the process launcher waits, whose run's stop it shares."""
        return self.process.wait_held(event, limit)

    def finish(self, script: ColumnScript) -> None:
        """Terminate the workflow if the column ended before it closed (a failed or stopped
        run), and stop following it."""
        follower, wid = self._follower, self._workflow_id
        if follower is None or wid is None:
            return
        if not self._closed.is_set():
            with contextlib.suppress(Exception):
                self.runtime.call(
                    self._terminate(wid, "the demo run ended before the workflow closed"),
                    timeout=5.0,
                )
        follower.cancel()

    def argv(self, case: Case) -> list[str]:
        """The Temporal worker's command line: the case itself is in the workflow's input."""
        return [
            sys.executable,
            "-m",
            "workers.temporal_worker",
            "--address",
            self.runtime.address,
            "--namespace",
            NAMESPACE,
            "--task-queue",
            task_queue(case),
            "--workflow-id",
            workflow_id(case),
        ]

    def asks_model(self, case: Case) -> bool:
        """Whether the next worker may be asked to run ask_model: its result is not yet in
        the workflow's history (a restart in the refund activity never asks)."""
        return not self.runtime.call(self._model_answered(workflow_id(case)))

    async def _model_answered(self, wid: str) -> bool:
        handle = self.runtime.client.get_workflow_handle(wid)
        return model_answered([event async for event in handle.fetch_history_events()])

    def _start_workflow(self, script: ColumnScript, case: Case) -> None:
        from workers.temporal_workflows import CaseInput, RefundCase

        params = CaseInput(
            case=case.to_dict(),
            refund_start_to_close_s=self.timeouts.start_to_close_s,
            heartbeat_timeout_s=self.timeouts.heartbeat_s,
        )
        wid = workflow_id(case)
        self.runtime.call(
            self.runtime.client.start_workflow(
                RefundCase.run, params, id=wid, task_queue=task_queue(case)
            )
        )
        self._workflow_id = wid
        self._follower = self.runtime.submit(self._follow(script, case))

    def _take_outcome(self, script: ColumnScript, case: Case) -> None:
        wid = workflow_id(case)
        if not self._closed.wait(_CLOSE_DEADLINE_S):
            raise ColumnFailed(
                f"the last worker exited but workflow {wid} did not close "
                f"within {_CLOSE_DEADLINE_S:g} s"
            )
        closing = self._closing
        assert closing is not None
        result = closing.result
        if closing.status != "completed" or result is None:
            raise ColumnFailed(f"workflow {wid} {closing.status}: {closing.text}")
        script.record_outcome(ColumnOutcome.from_wire(result))

    async def _terminate(self, wid: str, reason: str) -> None:
        await self.runtime.client.get_workflow_handle(wid).terminate(reason=reason)

    # -- reading Temporal ------------------------------------------------------------------

    async def _follow(self, script: ColumnScript, case: Case) -> None:
        """Follow the workflow's history to its close, polling describe() meanwhile."""
        handle = self.runtime.client.get_workflow_handle(workflow_id(case))
        poller = asyncio.create_task(self._poll_describe(script, handle))
        activities = Activities()
        try:
            async for event in handle.fetch_history_events(wait_new_event=True):
                payloads = result_payloads(event)
                result = self._worded(await self._decode(payloads)) if payloads else None
                read = read_event(
                    event,
                    activities,
                    result,
                    workflow_id=workflow_id(case),
                    task_queue=task_queue(case),
                )
                if isinstance(read, Closing):
                    script.event(read.note.kind, read.note.text)
                    self._closing = read
                    self._closed.set()
                    break
                if read is not None:
                    script.event(read.kind, read.text)
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def _decode(self, payloads: list[Payload]) -> Any:
        values = await self.runtime.client.data_converter.decode(payloads)
        return values[0] if values else None

    def _worded(self, result: Any) -> Any:
        """A result as the column says it. An outcome's reason is the library's, worded for
        Stripe ("found its own refund at Stripe"); the workers say it of what answered
        them (offline, the emulator), and so do the history's lines and the column's outcome."""
        if not isinstance(result, dict) or not result.get("reason"):
            return result
        answerer = EMULATOR if self.process.stripe_base else STRIPE
        return {**result, "reason": said_at(result["reason"], answerer)}

    async def _poll_describe(self, script: ColumnScript, handle: WorkflowHandle[Any, Any]) -> None:
        """Show each retry: the history has no event per failed attempt; describe() does."""
        seen: set[tuple[str, int]] = set()
        while True:
            desc = await handle.describe()
            for note in retry_notes(desc.raw_description.pending_activities, seen):
                script.event(note.kind, note.text)
            await asyncio.sleep(_DESCRIBE_EVERY_S)
