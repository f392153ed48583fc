"""Temporal's dev server as a process: `temporal server start-dev` on loopback.

Free ports, its database and log in one folder under `INTERLOCK_HOME/demo/temporal/`,
one database per server (a file lock keeps it), killed as a tree when stopped and, on
Linux, when the thread that started it ends.
"""

from __future__ import annotations

import ctypes
import fcntl
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from interlock_demo.engine.supervisor import kill_tree
from interlock_demo.errors import DevServerError
from interlock_demo.settings.environment import child_env
from interlock_demo.settings.private import PRIVATE_UMASK, open_private, private_dir

_PR_SET_PDEATHSIG = 1
# How many servers may share one INTERLOCK_HOME, each on its own database.
_DATABASES = 8


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
            kill_tree(proc.pid)
        proc.wait()


def claim_database(folder: Path) -> tuple[Path, Path, IO[str]]:
    """A database file no other dev server uses, its log, and the lock that keeps it ours.

    Two demos with one INTERLOCK_HOME (the app and a headless run) must not start two
    servers on one database; the second takes `dev-server-1.sqlite3`, and so on. Closing
    the lock releases the database.
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
