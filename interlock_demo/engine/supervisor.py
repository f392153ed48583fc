"""Worker processes: spawn, read their events, see them die, kill them all on the way out.

Each worker is an explicit state machine (starting, running, exited, killed) with one
callback per transition. It is spawned in a new session with a pipe on stdin (its
lifeline: when the supervisor dies the pipe closes and the worker exits) and JSON event
lines on stdout. One reader thread per child reads the lines and then reaps it: the owner
of the Popen waits on it, psutil only signals and inspects. Stopping kills the whole tree.

Given a column's fork server (`engine.forkserver`), a worker is forked from it instead,
wired the same way; the fork server is its parent and reaps it, and the reader thread
waits for the exit code the fork server reports. When the fork server cannot give a
worker, it is started cold and `cold_reason` says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import IO, Any

import psutil

from interlock_demo.core.run import RunEventKind
from interlock_demo.engine.forkserver import ForkedWorker, ForkServer, ForkServerError
from interlock_demo.settings.private import PRIVATE_UMASK, open_private
from workers.protocol import EXIT_ORPHANED, SIGKILL_EXIT

# The module a fork server runs (`workers.zygote` forks it); other commands start cold.
STANDALONE = "workers.standalone"
# How long a worker whose fork server died is waited for, once SIGKILLed (init reaps it).
ORPHAN_WAIT_S = 5.0


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
        fork_server: ForkServer | None = None,
    ) -> None:
        """`fork_server` forks the worker when given, and `argv` is then
        `python -m workers.standalone ...`: the fork server runs that module's `main` with
        the arguments after it."""
        self.argv = argv
        self.env = dict(env)
        self.on_event = on_event
        self.on_state = on_state
        self.log_path = log_path
        self.cwd = cwd
        self.state = WorkerState.STARTING
        self.exit_code: int | None = None
        self.pid: int | None = None
        self.fork_server = fork_server
        # Why a worker that had a fork server was started cold instead; None otherwise.
        self.cold_reason: str | None = None
        self._forked: ForkedWorker | None = None
        self._stdin: IO[bytes] | None = None
        self._stdout: IO[bytes] | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._done = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def forked(self) -> bool:
        """Whether the fork server forked this worker (rather than a cold start)."""
        return self._forked is not None

    def start(self) -> WorkerProcess:
        """Spawn the process in a new session (forked from the fork server when there is
        one that works, else cold) and start its reader."""
        if self.fork_server is not None:
            try:
                self._fork(self.fork_server)
            except ForkServerError as e:
                self.cold_reason = f"the fork server cannot give a worker: {e}"
                with open_private(self.log_path, "a") as log:
                    log.write(f"interlock-demo: {self.cold_reason}; starting it cold\n")
        if self._forked is None:
            self._spawn()
        self._transition(WorkerState.RUNNING)
        self._reader = threading.Thread(target=self._read, name=f"worker-{self.pid}", daemon=True)
        self._reader.start()
        return self

    def _fork(self, server: ForkServer) -> None:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        log = open_private(self.log_path, "ab")
        try:
            if self.argv[1:3] != ["-m", STANDALONE]:
                raise ForkServerError(f"it forks {STANDALONE} only, not {self.argv[1:3]}")
            self._forked = server.fork(
                self.argv[3:],
                self.env,
                (stdin_r, stdout_w, log.fileno()),
                cwd=self.cwd,
                umask=PRIVATE_UMASK,
                title=" ".join(self.argv),
            )
        except BaseException:
            os.close(stdin_w)
            os.close(stdout_r)
            raise
        finally:
            # The worker has its own copies now; ours would keep its stdin from EOF.
            os.close(stdin_r)
            os.close(stdout_w)
            log.close()
        self.pid = self._forked.pid
        self._stdin = open(stdin_w, "wb", buffering=0)  # noqa: SIM115 - closed by the reader
        self._stdout = open(stdout_r, "rb")  # noqa: SIM115 - closed by the reader

    def _spawn(self) -> None:
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
        self._stdin, self._stdout = self._popen.stdin, self._popen.stdout

    def _read(self) -> None:
        assert self._stdout is not None
        stream: IO[bytes] = self._stdout
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
        self.exit_code = self._reap()
        if self._stdin is not None:
            self._stdin.close()
        self._transition(
            WorkerState.KILLED if self.exit_code == SIGKILL_EXIT else WorkerState.EXITED
        )
        self._done.set()

    def _reap(self) -> int:
        if self._popen is not None:
            return self._popen.wait()
        assert self._forked is not None and self.pid is not None
        code = self._forked.wait()
        if code is None:
            # The fork server died first and took the exit code with it; the worker exits
            # by itself once its parent is gone (EXIT_ORPHANED), and is made sure of here.
            kill_tree(self.pid)
            with contextlib.suppress(psutil.Error):
                psutil.Process(self.pid).wait(ORPHAN_WAIT_S)
            return EXIT_ORPHANED
        return code

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
        self._fork_servers: list[ForkServer] = []
        self._lock = threading.Lock()
        self._stopped = False

    def fork_server(self, server: ForkServer) -> ForkServer:
        """Start a column's fork server, which `stop()` stops after the workers."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the supervisor is stopping; no new fork servers")
            self._fork_servers.append(server)
            return server.start()

    def spawn(self, worker: WorkerProcess) -> WorkerProcess:
        """Start a worker, unless the supervisor is stopping.

        The start runs outside the lock: a column's first worker waits for its fork
        server's imports, and another column's restart must not wait behind it. A `stop()`
        that comes during the start finds the worker listed; if it came before the start
        gave the worker a pid, the worker is killed here once it has one.
        """
        with self._lock:
            if self._stopped:
                raise RuntimeError("the supervisor is stopping; no new workers")
            self._workers.append(worker)
        worker.start()
        with self._lock:
            stopped = self._stopped
        if stopped:
            worker.kill()
        return worker

    @property
    def stopped(self) -> bool:
        """Whether `stop()` was called."""
        return self._stopped

    def stop(self, timeout: float = 5.0) -> None:
        """Kill every worker's tree and wait for each reaper, then stop the fork servers."""
        with self._lock:
            self._stopped = True
            workers = list(self._workers)
            servers = list(self._fork_servers)
        for w in workers:
            w.kill()
        for w in workers:
            w.wait(timeout)
        for s in servers:
            s.close(timeout)
