"""Stop signals for the library's own commands (`python -m interlock`, `serve_emulator`).

Python leaves SIGTERM and SIGHUP to end the process at once, with nothing closed, and a
command a script starts in the background gets SIGINT ignored, so Ctrl-C never stops it.
While `stop_signals_interrupt()` holds, SIGINT, SIGTERM and SIGHUP alike raise
`Interrupted` in the main thread, once: a second Ctrl-C must not cut short the cleanup
the first one started.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# SIGHUP (the terminal closed) is not on every platform.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGHUP", "SIGINT", "SIGTERM") if hasattr(signal, name)
)


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the command: a `KeyboardInterrupt` naming its signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def words(self) -> str:
        """The signal as the person who sent it knows it: `Ctrl-C` for SIGINT."""
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Raise `Interrupted` in the main thread on the first stop signal, ignore the rest,
    until the body ends; off the main thread, where no handler can be set, do nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if received:
            return
        received.append(signum)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
