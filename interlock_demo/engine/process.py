"""Workers as real processes, killed with a real SIGKILL: the live and offline launcher.

Each launch writes the column's case file, builds the worker's environment for that
launch (`worker.worker_env`: the model's key only while no decision is saved), spawns
`workers.standalone` through the run's `Supervisor` and waits for its exit. A held
crash point (`CrashPoint.IN_FLIGHT`) is the supervisor's own: it arms a hold on the
emulator this engine started and kills the worker while Stripe holds the answer to its
refund.

Each column gets a fork server (`engine.forkserver`) at its first launch: the column's
workers are forked from it, pre-imported, and a worker it cannot give is started cold
with a `cold-start` event saying why. `run_worker` is the part the Temporal launcher
reuses with its own command line (always cold: the fork server forks standalone workers).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from interlock.testing import CrashPoint, Fault, PaymentsModel
from interlock_demo.core.columns import column_kind
from interlock_demo.core.run import RunEventKind, WorkerInfo
from interlock_demo.engine.column import (
    FAULTS_NEED_THE_EMULATOR,
    WORKER_GRACE_S,
    ColumnScript,
)
from interlock_demo.engine.forkserver import ForkServer
from interlock_demo.engine.supervisor import Supervisor, WorkerProcess, WorkerState
from interlock_demo.errors import ColumnFailed
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.private import open_private
from interlock_demo.settings.receipt_key import prepare_receipt_signing
from interlock_demo.settings.worker import worker_env
from workers.protocol import EventKind
from workers.protocol.case import Case, decision_path

# How long Stripe's answer to an in-flight refund is held while the kill lands.
IN_FLIGHT_HOLD_MS = 500
# How often a wait for a held call looks whether the run was stopped.
STOP_POLL_S = 0.1


class ProcessLauncher:
    """Runs a column's workers as processes of one run's supervisor."""

    def __init__(
        self,
        config: DemoConfig,
        supervisor: Supervisor,
        stripe_base: str | None,
        emulator: PaymentsModel | None,
        *,
        fork_servers: bool = True,
    ) -> None:
        """`emulator` is the model of the emulator this engine started at `stripe_base`,
        or None when the workers call another Stripe (no faults, no in-flight kills).
        `fork_servers=False` starts every worker cold (a benchmark's baseline)."""
        self.config = config
        self.supervisor = supervisor
        self.stripe_base = stripe_base
        self.emulator = emulator
        self.fork_servers = fork_servers
        self._servers: dict[str, ForkServer] = {}
        self._servers_lock = threading.Lock()

    def launch(self, script: ColumnScript, crash_point: CrashPoint | None) -> int | None:
        """Run `workers.standalone` on the script's case to its end; its exit code."""
        assert script.case is not None
        return self.run_worker(
            script,
            crash_point,
            self.argv(script.case),
            asks_model=self.asks_model(script),
            fork_server=self.fork_server(script) if self.fork_servers else None,
        )

    def fork_server(self, script: ColumnScript) -> ForkServer:
        """The column's fork server, started at its first launch; the first worker waits
        for its imports (about what its own cold start would take), later ones do not.

        Its environment is the column's worker environment without the model's key or a
        crash point: each worker gets its own in its fork request.
        """
        name = script.column.name
        with self._servers_lock:
            server = self._servers.get(name)
            if server is None:
                env = worker_env(
                    self.config, self.stripe_base, column=name, asks_model=False, crash_point=None
                )
                server = ForkServer(name, env, self.config.paths.logs / f"forkserver-{name}.log")
                self._servers[name] = self.supervisor.fork_server(server)
            return server

    def fault_model(self) -> PaymentsModel:
        """The emulator this engine started; a fault cell cannot run against another."""
        if self.emulator is None:
            raise ColumnFailed(FAULTS_NEED_THE_EMULATOR)
        return self.emulator

    def finish(self, script: ColumnScript) -> None:
        """Stop the column's fork server; the run's supervisor reaps every worker."""
        with self._servers_lock:
            server = self._servers.pop(script.column.name, None)
        if server is not None:
            server.close()

    def wait_held(self, event: threading.Event, limit: float) -> bool:
        """Wait up to `limit` s for `event` of a call the emulator holds; False past it.

        A stopped run stops waiting at once (`ColumnFailed`): the emulator holds a call
        for seconds, and a Ctrl-C must not wait that out.
        """
        deadline = time.monotonic() + limit
        while not event.wait(min(STOP_POLL_S, max(0.0, deadline - time.monotonic()))):
            if self.supervisor.stopped:
                raise ColumnFailed("the run was stopped")
            if time.monotonic() >= deadline:
                return False
        return True

    def case_file(self, case: Case) -> Path:
        """Where a launch writes the case it runs."""
        return self.config.paths.cases / f"{case.case_id}.json"

    def argv(self, case: Case) -> list[str]:
        """The standalone worker's command line: it reads the case from its case file."""
        return [sys.executable, "-m", "workers.standalone", str(self.case_file(case))]

    def asks_model(self, script: ColumnScript) -> bool:
        """Whether the next worker will ask the model: this case has no saved decision yet.

        Only such a worker gets the model's key. Interlock's decision is its journaled
        intent; the others' is the decision file the worker saves before its send.
        """
        assert script.case is not None
        if column_kind(script.column.name).signs_receipts:
            return not script.store.actions(script.case.metadata)
        return not decision_path(self.config.paths.demo, script.case).exists()

    def run_worker(
        self,
        script: ColumnScript,
        crash_point: CrashPoint | None,
        argv: list[str],
        *,
        asks_model: bool,
        fork_server: ForkServer | None = None,
    ) -> int | None:
        """Spawn one worker process with `argv` (forked from `fork_server` when it can),
        feed its events to the script, and wait.

        Killed at `crash_point` by itself, or by the supervisor for a held one. Raises
        `ColumnFailed` when it outlives its time limit or the run was stopped.
        """
        case = script.case
        assert case is not None
        config = self.config
        case_file = self.case_file(case)
        with open_private(case_file, "w") as f:
            f.write(json.dumps(case.to_dict()))
        if column_kind(script.column.name).signs_receipts:
            prepare_receipt_signing(config.paths)
        env = worker_env(
            config,
            self.stripe_base,
            column=script.column.name,
            asks_model=asks_model,
            crash_point=None if crash_point is None or crash_point.held else crash_point,
        )
        in_flight = None
        if crash_point is not None and crash_point.held:
            if self.emulator is None:
                raise ColumnFailed("in-flight kills need the emulator the engine started itself")
            # Stripe's answer is held after the refund is committed; the kill lands meanwhile.
            in_flight = self.emulator.add_fault(
                "hold", hold_ms=IN_FLIGHT_HOLD_MS, payment_intent=case.payment_intent
            )
        info = WorkerInfo(pid=None, crash_point=crash_point, started_at=script.run.now())

        def on_state(worker: WorkerProcess, state: WorkerState) -> None:
            if state is WorkerState.RUNNING:
                info.pid = worker.pid  # not shown yet: the column has no `info` until now
                if worker.cold_reason is not None:
                    script.event(
                        RunEventKind.COLD_START,
                        f"worker {worker.pid} started cold: {worker.cold_reason}",
                        worker_pid=worker.pid,
                        reason=worker.cold_reason,
                    )
                script.worker_started(info)
            elif state in (WorkerState.KILLED, WorkerState.EXITED):
                script.worker_ended(info, worker.exit_code)

        worker = WorkerProcess(
            argv,
            env,
            on_event=lambda ev: script.on_worker_event(ev, ev.get("pid") or worker.pid),
            on_state=on_state,
            log_path=config.paths.logs / f"{case.case_id}.log",
            fork_server=fork_server,
        )
        self.supervisor.spawn(worker)
        if in_flight is not None:
            self._kill_in_flight(script, worker, in_flight)
        limit = config.timing.renewal_s + config.timing.claim_ttl_s + WORKER_GRACE_S
        code = worker.wait(limit)
        while code is None and script.presenter_holds():
            code = worker.wait(limit)  # its events wait for the presenter, not the worker
        if code is None:
            worker.kill()
            raise ColumnFailed(f"worker {worker.pid} did not finish within {limit:g} s")
        if self.supervisor.stopped:
            raise ColumnFailed("the run was stopped")
        return code

    def _kill_in_flight(self, script: ColumnScript, worker: WorkerProcess, fault: Fault) -> None:
        limit = WORKER_GRACE_S
        if not self.wait_held(fault.committed, limit):
            worker.kill()
            raise ColumnFailed(f"the worker's refund did not reach the emulator within {limit:g} s")
        script.event(
            EventKind.CRASH,
            f"SIGKILL while the refund request is in flight (pid {worker.pid})",
            crash_point=CrashPoint.IN_FLIGHT.value,
            worker_pid=worker.pid,
        )
        worker.kill()
