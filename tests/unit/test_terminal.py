"""The app's view of its terminal going away: a hung-up terminal is told from a live one,
and a SIGCONT that resumes nothing does not start Textual's terminal mode a second time."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from interlock_demo.views.tui.terminal import resume_only_after_a_suspend, terminal_gone


def test_a_terminal_is_gone_once_its_other_end_closes() -> None:
    """A pty whose master closes is hung up, as a terminal whose window closed; a live
    terminal and a pipe (a browser tab's app reads one) are not."""
    master, slave = os.openpty()
    read_end, write_end = os.pipe()
    try:
        assert not terminal_gone(slave)
        assert not terminal_gone(read_end)
        os.close(master)
        assert terminal_gone(slave)
    finally:
        for fd in (slave, read_end, write_end):
            os.close(fd)


@pytest.fixture
def handlers() -> Iterator[list[str]]:
    """Stand-ins for the terminal driver's SIGTSTP and SIGCONT handlers, recording calls;
    the process's own handlers are put back after."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    calls: list[str] = []

    def stopped(signum: int, frame: FrameType | None) -> None:
        calls.append("suspend")

    def continued(signum: int, frame: FrameType | None) -> None:
        calls.append("resume")

    signal.signal(signal.SIGTSTP, stopped)
    signal.signal(signal.SIGCONT, continued)
    try:
        yield calls
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _deliver(signum: int) -> None:
    """Send `signum` to this thread, the main one; its Python handler has run when this
    returns (pthread_kill runs pending handlers before it returns)."""
    assert threading.current_thread() is threading.main_thread()
    signal.pthread_kill(threading.get_ident(), signum)


def test_a_sigcont_resumes_only_what_a_sigtstp_suspended(handlers: list[str]) -> None:
    """A terminal that hangs up sends SIGCONT with its SIGHUP; Textual's handler would start
    its terminal mode again on it. Only a SIGCONT after a SIGTSTP reaches the handler."""
    resume_only_after_a_suspend()
    _deliver(signal.SIGCONT)
    assert handlers == []
    _deliver(signal.SIGTSTP)
    _deliver(signal.SIGCONT)
    _deliver(signal.SIGCONT)
    assert handlers == ["suspend", "resume"]
