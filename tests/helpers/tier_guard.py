"""Test helper: keeps a test tier free of child processes and listening sockets.

An audit hook (`sys.addaudithook`) sees every process start (`subprocess.Popen`, fork,
exec, spawn) and every `socket.bind` in this interpreter. While a guarded test runs (its
setup, call and teardown), such an event is refused at once, with an error that names the
tier to move the test to, and recorded, so that the test fails even if the code under test
swallows the error. Python cannot remove an audit hook, so the hook stays installed and
does nothing outside a guarded test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Every way this interpreter can start a process, and the one way it can listen.
FORBIDDEN = frozenset(
    {
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "pty.spawn",
        "socket.bind",
    }
)


class TierViolation(RuntimeError):
    """A guarded test started a process or bound a socket."""


class _Guard:
    def __init__(self) -> None:
        self.test: str | None = None
        self.seen: list[str] = []

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.test is None or event not in FORBIDDEN:
            return
        what = f"{event}{_detail(event, args)}"
        self.seen.append(what)
        raise TierViolation(
            f"{self.test} did {what}: the unit tier starts no process and binds no socket; "
            "move the test to tests/loopback (in-process servers) or tests/e2e (processes)"
        )


def _detail(event: str, args: tuple[Any, ...]) -> str:
    if event == "socket.bind" and len(args) > 1:
        return f" {args[1]!r}"
    if event == "subprocess.Popen" and len(args) > 1:
        return f" {args[1]!r}"[:120]
    return ""


_guard = _Guard()
sys.addaudithook(_guard.audit)


@contextmanager
def guarding(test: str) -> Iterator[list[str]]:
    """Refuse processes and sockets while the block runs; yields what was refused."""
    _guard.test, _guard.seen = test, []
    try:
        yield _guard.seen
    finally:
        _guard.test = None


def take_refused() -> list[str]:
    """What the guard refused so far in this test, forgotten once taken (for its own test)."""
    taken = list(_guard.seen)
    _guard.seen.clear()
    return taken
