"""Workers in-process on the in-memory payments model: the mock launcher and its clock.

The same worker code as the processes run (`workers.run.run_worker`), with the crash
simulated (`SimulatedCrash` at the crash point, exit -9 reported) and waits shown, not
waited: each column's clock skips what the worker sleeps, and a claim wait's event says
it was simulated. `pace_s` spaces the events out so an audience can follow them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from interlock import Approvers, Owner
from interlock.testing import CrashPoint, PaymentsModel
from interlock_demo.core.run import WorkerInfo
from interlock_demo.engine.column import FAULTS_NEED_THE_EMULATOR, ColumnScript
from interlock_demo.errors import ColumnFailed
from interlock_demo.settings.approver import support_approver
from interlock_demo.settings.receipt_key import receipt_anchors, receipt_key
from scenarios import REFUND_AMOUNT
from workers.agent import ScriptedModel
from workers.context import MemoryBox, SimulatedCrash, WorkerContext
from workers.protocol import GATE_CLAIM_WAIT, SIGKILL_EXIT, EventKind
from workers.protocol.words import MOCK
from workers.run import run_worker


class MockClock:
    """A column's clock in mock mode: sleeping moves it forward at once."""

    def __init__(self, start: float) -> None:
        """The clock reads `start` (wall-clock seconds) until something sleeps."""
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        """The clock's time."""
        with self._lock:
            return self._t

    def sleep(self, seconds: float) -> None:
        """Move the clock forward by `seconds`, without waiting."""
        with self._lock:
            self._t += max(0.0, seconds)


class MockLauncher:
    """Runs a column's workers in-process: the crash is simulated, waits are not waited.

    One per column: it keeps the column's decision box (the 'file' that survives the
    simulated crash) and clock across its workers.
    """

    def __init__(
        self,
        model: PaymentsModel,
        clock: MockClock,
        *,
        new_action_id: Callable[[], str],
        pace_s: float = 0.0,
    ) -> None:
        """`model` is the in-memory Stripe the column's payments run on (an in-flight
        kill arms its hold there); `new_action_id` names the interlock worker's actions."""
        self.model = model
        self.clock = clock
        self.new_action_id = new_action_id
        self.pace_s = pace_s
        self.box = MemoryBox()
        self.launched = 0

    def launch(self, script: ColumnScript, crash_point: CrashPoint | None) -> int | None:
        """Run the column's worker once in this thread; SIGKILL_EXIT if it 'died'."""
        case = script.case
        assert case is not None
        self.launched += 1
        col = script.column
        info = WorkerInfo(
            pid=None, crash_point=crash_point, started_at=script.run.now(), simulated=True
        )
        script.worker_started(info)

        def crash(at: CrashPoint) -> None:
            if at is crash_point:
                self._on_event(
                    script,
                    {
                        "kind": EventKind.CRASH,
                        "text": f"simulated SIGKILL at {at}",
                        "crash_point": at,
                    },
                )
                raise SimulatedCrash(at)

        if crash_point is not None and crash_point.held:
            self.model.add_fault(
                "hold", payment_intent=case.payment_intent, on_commit=lambda: crash(crash_point)
            )

        def emit(kind: str, text: str, **data: Any) -> None:
            self._on_event(script, {"kind": kind, "text": text, **data})

        ctx = WorkerContext(
            case=case,
            payments=script.payments,
            store=script.store,
            box=self.box,
            emit=emit,
            crash=crash,
            model=lambda: ScriptedModel(REFUND_AMOUNT),
            timing=script.config.timing,
            switches=script.config.switches,
            owner=Owner(f"mock-{col.name}-{self.launched}", 0, 0.0, "mock"),
            clock=self.clock.now,
            sleep=self.clock.sleep,
            monotonic=self.clock.now,
            answerer=MOCK,
            new_action_id=self.new_action_id,
            crash_point=crash_point,
            # The engine's own approver: a mock worker runs in its process, with no files.
            approvers=Approvers.of(support_approver(script.config)),
            # This process's receipt key and the run's anchor in memory, as the approver's.
            signing_key=receipt_key(script.config),
            anchors=receipt_anchors(script.config, script.store),
        )
        self._on_event(
            script, {"kind": EventKind.START, "text": f"{col.name} worker started (simulated)"}
        )
        try:
            run_worker(ctx)
            code = 0
        except SimulatedCrash:
            code = SIGKILL_EXIT

        script.worker_ended(info, code)
        return code

    def fault_model(self) -> PaymentsModel:
        """Fault cells need the emulator's real HTTP path: never in mock mode."""
        raise ColumnFailed(FAULTS_NEED_THE_EMULATOR)

    def wait_held(self, event: threading.Event, limit: float) -> bool:
        """No call is held in mock mode: fault cells never run here."""
        raise ColumnFailed(FAULTS_NEED_THE_EMULATOR)

    def finish(self, script: ColumnScript) -> None:
        """Nothing to let go of: the workers ran in this thread."""

    def _on_event(self, script: ColumnScript, ev: dict[str, Any]) -> None:
        """Record the event, then pause for the audience (presentation pacing only).

        A claim wait is simulated here: the mock clock skips it, so the event says so
        instead of counting down a wait that does not happen.
        """
        if ev.get("kind") == GATE_CLAIM_WAIT:
            seconds = float(ev.get("seconds", 0.0))
            ev = {
                **ev,
                "text": f"simulated: waits out the dead worker's claim, {seconds:.1f} s on "
                "the mock clock (no real time passes)",
            }
        script.on_worker_event(ev, None)
        if self.pace_s > 0:
            time.sleep(self.pace_s)
