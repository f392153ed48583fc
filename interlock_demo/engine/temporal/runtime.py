"""Temporal for the engine: the dev server, a client, and an asyncio loop on its own thread.

temporalio is imported when the runtime starts, not when this module is imported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from interlock_demo.engine.temporal.devserver import DevServer, claim_database
from interlock_demo.engine.temporal.probe import INSTALL_HINT, temporal_binary
from interlock_demo.errors import DevServerError
from interlock_demo.settings.paths import Paths

if TYPE_CHECKING:
    from temporalio.client import Client

NAMESPACE = "default"
# The dev server answers a client within about 0.3 s here; this is the give-up point.
SERVER_START_DEADLINE_S = 15.0
_CONNECT_RETRY_S = 0.05
_SERVER_START_TRIES = 3
_CALL_TIMEOUT_S = 10.0

T = TypeVar("T")


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

        db_path, log_path, self._lock = claim_database(self.folder)
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
