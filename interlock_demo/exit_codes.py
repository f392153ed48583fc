"""The exit codes of `interlock-demo` and its subcommands (docs/design.md §6), defined once.

    0  OK          every column ended as the truth table says; a command did its work
    1  DEVIATION   a column ended otherwise (the run's `deviations` say how)
    2  USAGE       bad usage or configuration; decided before anything ran
    3  UNFINISHED  a run could not finish (its `error` says why, in one line), or a stop
                   signal ended the command first (`interlock_demo.stopping`)

A subcommand whose check is not a run gives 1 its own name, so its code reads as what it
means: `doctor` exits `NOT_READY` when the chosen mode cannot run here; `sweep` exits
`INTERLOCK_WRONG` when interlock is wrong, untruthful or over its cap in some cell;
`results` exits `STEP_FAILED` when one of its steps (a benchmark) failed. They are the
same number as `DEVIATION`: CI tells a failed check from bad usage or an unfinished run.

The worker processes' own exit codes are the worker protocol's (`workers.protocol`);
`describe_exit` puts a process's exit code (a signal's too) in words.
"""

from __future__ import annotations

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    """An exit code of the demo's commands; an `int`, so `sys.exit(code)` takes it."""

    OK = 0
    DEVIATION = 1
    USAGE = 2
    UNFINISHED = 3
    # Names for 1 where the command checks something other than a run.
    NOT_READY = 1
    INTERLOCK_WRONG = 1
    STEP_FAILED = 1


def describe_exit(code: int | None) -> str:
    """An exit code in words: `exit -9 (SIGKILL)`, `exit 0`, `exit -15 (SIGTERM)`."""
    if code is None:
        return "running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"exit {code} ({name})"
    return f"exit {code}"
