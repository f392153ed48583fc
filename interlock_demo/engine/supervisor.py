"""Worker processes: spawn, read their events, see them die, kill them all on the way out.

Each worker is an explicit state machine (starting, running, exited, killed) with one
callback per transition. It is spawned in a new session with a pipe on stdin (its
lifeline: when the supervisor dies the pipe closes and the worker exits) and JSON event
lines on stdout. One reader thread per child reads the lines and then reaps it: the owner
of the Popen waits on it, psutil only signals and inspects. Stopping kills the whole tree.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import IO, Any

import psutil

from interlock_demo.core.run import RunEventKind
from interlock_demo.settings.private import PRIVATE_UMASK, open_private
from workers.protocol import SIGKILL_EXIT


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it; reaping stays with the Popen's owner.

    The descendants are listed before any signal (a killed parent's children move to
    init), and signalled first so none is left to start another. A process already gone
    is skipped; the parent is still killed when its children cannot be listed. psutil
    checks each pid still names the process it found, so a reused pid is never signalled.
    """
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    try:
        family = parent.children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for p in [*family, parent]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)


class WorkerState(Enum):
    """Where a worker process is in its life."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    KILLED = "killed"


class WorkerProcess:
    """One worker process, its event stream and its exit."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        *,
        on_event: Callable[[dict[str, Any]], None],
        on_state: Callable[[WorkerProcess, WorkerState], None],
        log_path: Path,
        cwd: str | None = None,
    ) -> None:
        self.argv = argv
        self.env = dict(env)
        self.on_event = on_event
        self.on_state = on_state
        self.log_path = log_path
        self.cwd = cwd
        self.state = WorkerState.STARTING
        self.exit_code: int | None = None
        self.pid: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._done = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self) -> WorkerProcess:
        """Spawn the process in a new session and start its reader."""
        log = open_private(self.log_path, "ab")
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        finally:
            log.close()
        self.pid = self._popen.pid
        self._transition(WorkerState.RUNNING)
        self._reader = threading.Thread(target=self._read, name=f"worker-{self.pid}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._popen is not None and self._popen.stdout is not None
        stream: IO[bytes] = self._popen.stdout
        for raw in stream:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"kind": RunEventKind.OUTPUT.value, "text": line[:200]}
            if isinstance(event, dict):
                self.on_event(event)
        stream.close()
        self.exit_code = self._popen.wait()
        if self._popen.stdin is not None:
            self._popen.stdin.close()
        self._transition(
            WorkerState.KILLED if self.exit_code == SIGKILL_EXIT else WorkerState.EXITED
        )
        self._done.set()

    def _transition(self, state: WorkerState) -> None:
        self.state = state
        self.on_state(self, state)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the exit (and every event before it); the exit code, or None on timeout."""
        if not self._done.wait(timeout):
            return None
        return self.exit_code

    def kill(self) -> None:
        """SIGKILL the process and everything it started."""
        if self.pid is None or self._done.is_set():
            return
        kill_tree(self.pid)


class Supervisor:
    """Every worker process of a run; `stop()` kills them all and waits for the reapers."""

    def __init__(self) -> None:
        self._workers: list[WorkerProcess] = []
        self._lock = threading.Lock()
        self._stopped = False

    def spawn(self, worker: WorkerProcess) -> WorkerProcess:
        """Start a worker, unless the supervisor is stopping."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the supervisor is stopping; no new workers")
            self._workers.append(worker)
            return worker.start()

    @property
    def stopped(self) -> bool:
        """Whether `stop()` was called."""
        return self._stopped

    def stop(self, timeout: float = 5.0) -> None:
        """Kill every worker's tree and wait for each reaper."""
        with self._lock:
            self._stopped = True
            workers = list(self._workers)
        for w in workers:
            w.kill()
        for w in workers:
            w.wait(timeout)
