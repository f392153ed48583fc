"""What the app must know of its terminal going away, which Textual does not handle.

Closing the terminal window (or killing tmux) hangs the terminal up: the kernel sends
SIGHUP and SIGCONT, and every read or write on it fails from then on. Textual answers any
SIGCONT by starting its terminal mode again, suspended or not: a second input thread then
spins on the dead terminal and, not being a daemon, keeps the process alive at full CPU
after the app has ended. Its output thread dies on the first failed write, and the app's
shutdown then waits forever on that thread's full queue.
"""

from __future__ import annotations

import errno
import signal
import termios
from types import FrameType


def terminal_gone(fd: int) -> bool:
    """Whether the terminal on `fd` has hung up. The kernel marks it hung up before it
    sends the SIGHUP, and answers EIO to it from then on; not a terminal is not gone."""
    try:
        termios.tcgetattr(fd)
    except termios.error as e:
        return bool(e.args) and e.args[0] == errno.EIO
    return False


def resume_only_after_a_suspend() -> None:
    """Let the SIGCONT handler in place (Textual's) run only after a SIGTSTP suspended the
    process; a SIGCONT that resumes nothing (a hang-up's, a stray `kill -CONT`) is ignored.
    Call it once the terminal driver has put its handlers in place."""
    on_stop = signal.getsignal(signal.SIGTSTP)
    on_continue = signal.getsignal(signal.SIGCONT)
    if not (callable(on_stop) and callable(on_continue)):
        return  # no driver of Textual's here (a headless app): nothing resumes
    suspended = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal suspended
        suspended = True  # before on_stop: it stops the process, and SIGCONT arrives in it
        on_stop(signum, frame)

    def resume(signum: int, frame: FrameType | None) -> None:
        nonlocal suspended
        if suspended:
            suspended = False
            on_continue(signum, frame)

    signal.signal(signal.SIGTSTP, stop)
    signal.signal(signal.SIGCONT, resume)
