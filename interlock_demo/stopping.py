"""One Ctrl-C stops a command at once: SIGINT, SIGTERM and SIGHUP alike.

Python's own Ctrl-C raises `KeyboardInterrupt` wherever the main thread is and prints its
traceback, and a thread pool then still finishes what it was given; SIGTERM and SIGHUP end
the process at once with nothing stopped; and a command a script starts in the background
gets SIGINT ignored, so Ctrl-C never reaches it. While `stop_signals()` holds, the first of
the three signals (ignored at the start or not) calls what the command registered with
`on_stop` (kill the runs going, start no more), then raises `Stopped` in the main thread,
so the command unwinds through its `finally` blocks; later ones are ignored, so a second
Ctrl-C cannot break that cleanup. Where a command knows what finished and what did not,
it catches `Stopped` and raises it again with those words (`Stopped.having`); the CLI
prints them on one line and exits with the command's stop code:

    interlock-demo sweep stopped by Ctrl-C: 12 of 72 cells finished, 9 stopped, 51 not
    started; nothing written

The headless run (`views.headless`) and the app keep handlers of their own: a headless
run still prints its JSON, and the app gives the terminal back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

# The signals that stop a command; SIGHUP (the terminal closed) is not on every platform.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGHUP", "SIGINT", "SIGTERM") if hasattr(signal, name)
)


def signal_words(signum: int) -> str:
    """A stop signal as the person who sent it knows it: `Ctrl-C` for SIGINT."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class Stopped(KeyboardInterrupt):
    """A stop signal ended the command before it finished.

    A `KeyboardInterrupt`, so that whatever lets one through (`except Exception`, a thread
    pool's wait, asyncio's loop) lets this through too. `done` says what finished and what
    did not, once a command has said it.
    """

    def __init__(self, signum: int, done: str | None = None) -> None:
        super().__init__(signum, done)
        self.signum = signum
        self.done = done

    def having(self, done: str) -> Stopped:
        """The same stop, with `done` added to what it says finished and what did not."""
        return Stopped(self.signum, f"{self.done}; {done}" if self.done else done)

    def line(self, command: str) -> str:
        """The one line `command` ends with."""
        done = f": {self.done}" if self.done else ""
        return f"{command} stopped by {signal_words(self.signum)}{done}"


class _Stop:
    """The stop of this process's command: one at a time, as signals are the process's."""

    def __init__(self) -> None:
        self.holding = False
        self.received: int | None = None
        # Each callback, and whether `Stopped` is raised in the main thread after it.
        self.callbacks: list[tuple[Callable[[], object], bool]] = []

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return  # the stop is under way: a second Ctrl-C must not break its cleanup
        self.received = signum
        interrupt = all(interrupts for _, interrupts in self.callbacks)
        for callback, _ in reversed(self.callbacks):
            callback()
        if interrupt:
            raise Stopped(signum)


_STOP = _Stop()


@contextmanager
def stop_signals() -> Iterator[None]:
    """Stop the body on the first stop signal (see the module docstring).

    Nested, the outermost holds; off the main thread, where no handler can be set, it
    changes nothing.
    """
    if _STOP.holding or threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOP.holding, _STOP.received = True, None
    previous = {s: signal.signal(s, _STOP.on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _STOP.holding = False


@contextmanager
def on_stop(callback: Callable[[], object], *, interrupt: bool = True) -> Iterator[None]:
    """While the body runs, a stop signal calls `callback` (in the main thread, the latest
    registered first), then raises `Stopped` there.

    The callback runs inside a signal handler, wherever the main thread is: it must not
    take a lock the main thread may hold. `interrupt=False` is for a body that ends by
    itself once `callback` has run, such as an asyncio loop whose task it cancels (raised
    inside the loop, `Stopped` would land in whichever task runs); the body then raises
    `stopped()`. Register from the main thread.
    """
    entry = (callback, interrupt)
    _STOP.callbacks.append(entry)
    try:
        yield
    finally:
        _STOP.callbacks.remove(entry)


def stopped() -> Stopped | None:
    """The stop under way, if a stop signal has come since `stop_signals()` began."""
    return None if _STOP.received is None else Stopped(_STOP.received)
