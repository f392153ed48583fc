"""The standalone worker process: one column's worker for one case.

    python -m workers.standalone CASE_FILE

It reads the case, builds the worker's context from its environment (`workers.process`,
which names the variables), runs the column's worker once (`workers.run`) and exits with
one of `workers.protocol`'s exit codes. It prints one JSON event per line on stdout,
flushed at once (events carry its pid and a monotonic timestamp), and with
`INTERLOCK_CRASH=<point>` it SIGKILLs itself at that point after flushing. It exits by
itself when its supervisor goes away (stdin reaches EOF or its parent changes), so even a
SIGKILLed supervisor leaves no worker behind. The standard and checked workers keep their
decision in a file under `INTERLOCK_HOME` (`workers.protocol.case.decision_path`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    # `stripe` imports `requests`, `httpx` and `aiohttp` when imported, to pick default HTTP
    # clients that a worker never uses (interlock hands it its own; the Anthropic SDK is on
    # httpx2). With them installed that is most of the restart path's imports (docs/design.md
    # §7: restart to first Stripe call under 0.2 s), so this worker process treats them as
    # absent.
    from workers.stripe_sdk import hold_back_for_good

    hold_back_for_good()

from interlock import InterlockError, StoreError
from workers.agent import AgentError
from workers.context import DecisionFile
from workers.process import (
    context_factory,
    emit,
    journal_and_payments,
    supervised_crash_point,
    worker_timing,
)
from workers.protocol import EXIT_ERROR, EXIT_STORE, EXIT_USAGE, EventKind
from workers.protocol.case import Case, decision_path
from workers.protocol.switches import Switches
from workers.run import run_worker


def main(argv: list[str] | None = None) -> int:
    """Run one worker; returns its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m workers.standalone CASE_FILE", file=sys.stderr)
        return EXIT_USAGE
    usable, crash_at = supervised_crash_point()
    if not usable:
        return EXIT_USAGE
    try:
        case = Case.from_dict(json.loads(Path(args[0]).read_text()))
        timing = worker_timing()
        switches = Switches.from_env()
        home, store, payments = journal_and_payments(timing)
        context = context_factory(payments, store, timing, switches, crash_at)
        box = DecisionFile(decision_path(home, case))
        ctx = context(case, box, emit, time.sleep)
        emit(
            EventKind.START,
            f"{case.column} worker started" + (f" (crash point: {crash_at})" if crash_at else ""),
            crash_point=crash_at,
            # Its parent: the supervisor for a cold start, the column's fork server otherwise.
            parent=os.getppid(),
        )
        run_worker(ctx)
    except StoreError as e:
        emit(EventKind.STORE_ERROR, f"the journal cannot be used: {e.problem}", path=e.path)
        return EXIT_STORE
    except (InterlockError, AgentError, OSError, ValueError, KeyError) as e:
        emit(EventKind.ERROR, f"{type(e).__name__}: {e}")
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
