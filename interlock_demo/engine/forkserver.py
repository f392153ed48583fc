"""A column's fork server, from the supervisor's side: start it, ask it for a worker.

`ForkServer` starts `python -m workers.zygote` with the column (it imports what the
column's worker imports, once) and asks it for each worker of the column. The worker it
forks is a real process of its own: a new session, its own pid, the pipes and log file
the supervisor made for it, exactly as a cold start would wire them. It is the fork
server's child, so the fork server reaps it and reports its exit code on the worker's own
status socket (`ForkedWorker.wait`); the supervisor signals it by pid through psutil as it
does any worker (docs/design.md §7 says why the fork server reaps).

Anything wrong with the fork server (it died, refused, or did not answer within
`FORK_ANSWER_S`) raises `ForkServerError`, whose words say what: the supervisor then
starts that worker cold and says so.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from interlock_demo.settings.private import PRIVATE_UMASK, open_private
from workers.protocol.forkserver import MAX_MESSAGE, MODULE, TITLE_ROOM, decode, encode

# How long a fork server may take to import (once) and to answer a fork, on a loaded
# machine, before its column gives up on it and cold-starts: a cold start costs less.
FORK_ANSWER_S = 30.0
# How long a fork server whose socket closed is given to be reaped, for its exit code.
GONE_EXIT_S = 2.0


class ForkServerError(Exception):
    """The fork server cannot give this worker; the words say why (for the cold start's line)."""


class ForkedWorker:
    """A worker the fork server forked: its pid, and its exit code once reaped."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self._status = status

    def wait(self) -> int | None:
        """Block until the fork server reaps the worker; its exit code, or None when the
        fork server went away first (and the exit code with it)."""
        try:
            self._status.settimeout(None)
            data = self._status.recv(MAX_MESSAGE)
            code = decode(data).get("exit") if data else None
        except (OSError, ValueError):
            code = None
        finally:
            self._status.close()
        return code if isinstance(code, int) else None


class ForkServer:
    """One column's fork server process."""

    def __init__(
        self,
        column: str,
        env: Mapping[str, str],
        log_path: Path,
        *,
        python: str = sys.executable,
    ) -> None:
        """`env` is the fork server's own environment (each worker gets the one its fork
        request carries); its stderr goes to `log_path`."""
        self.column = column
        self.env = dict(env)
        self.log_path = log_path
        self.python = python
        self.ready_s: float | None = None
        self.broken: str | None = None
        self._control: socket.socket | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The fork server's pid, once started."""
        return None if self._popen is None else self._popen.pid

    def start(self) -> ForkServer:
        """Start the fork server; it imports in the background while the column sets up."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = open_private(self.log_path, "ab")
        try:
            self._popen = subprocess.Popen(
                [self.python, "-m", MODULE, str(theirs.fileno()), self.column, TITLE_ROOM],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        except OSError as e:
            ours.close()
            self.broken = f"it could not start: {e}"
            return self
        finally:
            log.close()
            theirs.close()
        self._control = ours
        return self

    def fork(
        self,
        argv: list[str],
        env: Mapping[str, str],
        fds: tuple[int, int, int],
        *,
        cwd: str | None = None,
        umask: int = PRIVATE_UMASK,
        title: str | None = None,
    ) -> ForkedWorker:
        """A worker forked with `fds` (stdin, stdout, stderr) as its 0, 1 and 2, running
        `workers.standalone` with `argv` (the arguments after the module), `env`, `cwd`
        and `umask`, shown by `ps` and psutil as `title` (its cold command line); a
        `ForkServerError` when the fork server cannot give one."""
        with self._lock:
            control = self._control
            if self.broken is not None or control is None:
                raise ForkServerError(self.broken or "it was not started")
            try:
                if self.ready_s is None:
                    self.ready_s = self._ready(control)
                fields = {"argv": list(argv), "env": dict(env), "cwd": cwd, "umask": umask}
                request = encode({**fields, "title": title})
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    socket.send_fds(control, [request], [theirs.fileno(), *fds])
                    theirs.close()
                    ours.settimeout(FORK_ANSWER_S)
                    answer = self._answer(ours)
                except BaseException:
                    theirs.close()
                    ours.close()
                    raise
            except ForkServerError as e:
                self._break(str(e))
                raise
            except (OSError, ValueError) as e:
                self._break(f"it stopped answering ({type(e).__name__}: {e})")
                raise ForkServerError(self.broken) from e
        pid = answer.get("pid")
        if not isinstance(pid, int):
            ours.close()
            why = answer.get("error") or f"its child exited {answer.get('exit')} before it ran"
            raise ForkServerError(f"it could not fork: {why}")
        return ForkedWorker(pid, ours)

    def _ready(self, control: socket.socket) -> float:
        control.settimeout(FORK_ANSWER_S)
        try:
            message = self._answer(control)
        finally:
            control.settimeout(None)
        ready = message.get("ready")
        if not isinstance(ready, (int, float)):
            raise ForkServerError(str(message.get("error") or f"it said {message!r}"))
        return float(ready)

    def _answer(self, sock: socket.socket) -> dict[str, object]:
        try:
            data = sock.recv(MAX_MESSAGE)
        except TimeoutError:
            raise ForkServerError(f"it did not answer within {FORK_ANSWER_S:g} s") from None
        if not data:
            raise ForkServerError("it is gone" + self._exit())
        return decode(data)

    def _exit(self) -> str:
        """How the fork server ended, once its end of the socket closed: it closes when the
        process exits, a moment before the exit can be reaped, so the exit is waited for
        (bounded: a server that closed its socket and lives on is named without it)."""
        if self._popen is None:
            return ""
        try:
            code = self._popen.wait(timeout=GONE_EXIT_S)
        except subprocess.TimeoutExpired:
            return ""
        return f" (exit {code})"

    def _break(self, why: str) -> None:
        self.broken = why
        self._shut()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the fork server: it SIGKILLs and reaps any worker it still has, then exits."""
        with self._lock:
            self._shut(timeout)

    def _shut(self, timeout: float = 5.0) -> None:
        if self._control is not None:
            self._control.close()  # its end reads EOF: it kills its children and exits
            self._control = None
        popen = self._popen
        if popen is None:
            return
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
