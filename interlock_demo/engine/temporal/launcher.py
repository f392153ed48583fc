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
import functools
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock_demo.core.run import Run
from interlock_demo.engine import _ProcessColumn
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
from interlock_demo.settings import DemoConfig
from workers.protocol import ColumnOutcome

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.client import WorkflowHandle

    from workers.temporal_workflows import RefundTimeouts

_DESCRIBE_EVERY_S = 0.25
# After the last worker exits, the closing event is already in the history.
_CLOSE_DEADLINE_S = 10.0


def temporal_column(
    runtime: TemporalRuntime, run: Run, config: DemoConfig
) -> Callable[..., TemporalColumn]:
    """This run's column constructor (`_ProcessColumn`'s arguments); notes Temporal's settings."""
    timeouts = refund_timeouts(config)
    settings = {
        **runtime.settings(),
        "refund_start_to_close_s": timeouts.start_to_close_s,
        "heartbeat_timeout_s": timeouts.heartbeat_s,
    }
    run.update(None, lambda: run.settings.__setitem__("temporal", settings))
    return functools.partial(TemporalColumn, runtime=runtime, timeouts=timeouts)


class TemporalColumn(_ProcessColumn):
    """A column run as a `RefundCase` workflow, its workers real processes, killed for real."""

    def __init__(
        self, *args: Any, runtime: TemporalRuntime, timeouts: RefundTimeouts, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.runtime = runtime
        self.timeouts = timeouts
        self._follower: concurrent.futures.Future[None] | None = None
        self._closed = threading.Event()
        self._closing: Closing | None = None

    @property
    def workflow_id(self) -> str:
        """The column's workflow id."""
        assert self.case is not None
        return f"refund-case-{self.case.case_id}"

    @property
    def task_queue(self) -> str:
        """The column's own task queue."""
        assert self.case is not None
        return f"interlock-demo-{self.case.case_id}"

    def asks_model(self) -> bool:
        """Whether the next worker may be asked to run ask_model: its result is not yet in
        the workflow's history (a restart in the refund activity never asks)."""
        return not self.runtime.call(self._model_answered())

    async def _model_answered(self) -> bool:
        handle = self.runtime.client.get_workflow_handle(self.workflow_id)
        return model_answered([event async for event in handle.fetch_history_events()])

    def run(self) -> None:
        """Run the column; a workflow left open (a failed or stopped run) is terminated."""
        try:
            super().run()
        finally:
            self._finish()

    def argv(self, case_file: Path) -> list[str]:
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
            self.task_queue,
            "--workflow-id",
            self.workflow_id,
        ]

    def launch(self, crash_point: str | None) -> int | None:
        """Start the workflow before the first worker; after the last, wait for it to close."""
        if self._follower is None:
            self._start_workflow()
        code = super().launch(crash_point)
        if crash_point is None and code == 0:
            self._take_outcome()
        return code

    def _start_workflow(self) -> None:
        from workers.temporal_workflows import CaseInput, RefundCase

        assert self.case is not None
        params = CaseInput(
            case=self.case.to_dict(),
            refund_start_to_close_s=self.timeouts.start_to_close_s,
            heartbeat_timeout_s=self.timeouts.heartbeat_s,
        )
        self.runtime.call(
            self.runtime.client.start_workflow(
                RefundCase.run, params, id=self.workflow_id, task_queue=self.task_queue
            )
        )
        self._follower = self.runtime.submit(self._follow())

    def _take_outcome(self) -> None:
        if not self._closed.wait(_CLOSE_DEADLINE_S):
            raise ColumnFailed(
                f"the last worker exited but workflow {self.workflow_id} did not close "
                f"within {_CLOSE_DEADLINE_S:g} s"
            )
        closing = self._closing
        assert closing is not None
        result = closing.result
        if closing.status != "completed" or result is None:
            raise ColumnFailed(f"workflow {self.workflow_id} {closing.status}: {closing.text}")
        outcome = ColumnOutcome.from_wire(result)
        col = self.col

        def set_outcome() -> None:
            col.outcome = outcome
            action = outcome.action_id
            if action and action not in col.action_ids:
                col.action_ids.append(action)

        self.run_.update(col.name, set_outcome)

    def _finish(self) -> None:
        follower = self._follower
        if follower is None:
            return
        if not self._closed.is_set():
            with contextlib.suppress(Exception):
                self.runtime.call(
                    self._terminate("the demo run ended before the workflow closed"), timeout=5.0
                )
        follower.cancel()

    async def _terminate(self, reason: str) -> None:
        await self.runtime.client.get_workflow_handle(self.workflow_id).terminate(reason=reason)

    # -- reading Temporal ------------------------------------------------------------------

    async def _follow(self) -> None:
        """Follow the workflow's history to its close, polling describe() meanwhile."""
        handle = self.runtime.client.get_workflow_handle(self.workflow_id)
        poller = asyncio.create_task(self._poll_describe(handle))
        activities = Activities()
        try:
            async for event in handle.fetch_history_events(wait_new_event=True):
                payloads = result_payloads(event)
                result = await self._decode(payloads) if payloads else None
                read = read_event(
                    event,
                    activities,
                    result,
                    workflow_id=self.workflow_id,
                    task_queue=self.task_queue,
                )
                if isinstance(read, Closing):
                    self._event(read.note.kind, read.note.text)
                    self._closing = read
                    self._closed.set()
                    break
                if read is not None:
                    self._event(read.kind, read.text)
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    def _event(self, kind: str, text: str) -> None:
        self.run_.add_event(self.col.name, kind, text, None)

    async def _decode(self, payloads: list[Payload]) -> Any:
        values = await self.runtime.client.data_converter.decode(payloads)
        return values[0] if values else None

    async def _poll_describe(self, handle: WorkflowHandle[Any, Any]) -> None:
        """Show each retry: the history has no event per failed attempt; describe() does."""
        seen: set[tuple[str, int]] = set()
        while True:
            desc = await handle.describe()
            for note in retry_notes(desc.raw_description.pending_activities, seen):
                self._event(note.kind, note.text)
            await asyncio.sleep(_DESCRIBE_EVERY_S)
