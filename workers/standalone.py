"""The standalone worker process: one column's worker for one case.

    python -m workers.standalone CASE_FILE

It prints one JSON event per line on stdout, flushed at once (events carry its pid and a
monotonic timestamp), and with `INTERLOCK_CRASH=<point>` it SIGKILLs itself at that
point after flushing. It exits by itself when its supervisor goes away (stdin reaches EOF
or its parent changes), so even a SIGKILLed supervisor leaves no worker behind.

Environment: `INTERLOCK_HOME`, `INTERLOCK_STORE` (the journal), `INTERLOCK_CRASH`,
`INTERLOCK_AGENT` (`scripted`, `anthropic`, or `none`: act on a saved decision, no
model), `INTERLOCK_STRIPE_BASE` (offline: the emulator's address), `STRIPE_SECRET_KEY`,
`ANTHROPIC_API_KEY` (only when a real model is asked), `INTERLOCK_RECEIPT_KEY` (only
interlock's), and the timing and emulated switches that `interlock` reads. The engine
gives it nothing else (`interlock_demo.settings.worker_env`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # `stripe` probes `requests` and `aiohttp` when imported, to pick default HTTP clients
    # that a worker never uses (interlock hands it its own). With both installed that
    # doubles the restart path's imports (docs/design.md §7: restart to first Stripe call under
    # 0.3 s), so this worker process treats them as absent.
    for _unused in ("requests", "aiohttp"):
        sys.modules.setdefault(_unused, None)  # type: ignore[arg-type]

from interlock import (
    InterlockError,
    Owner,
    Store,
    StoreError,
    StripePayments,
    Switches,
    Timing,
    make_stripe_client,
    open_store,
)
from workers.agent import AgentError, AnthropicModel, Model, ScriptedModel
from workers.columns import (
    CRASH_POINTS,
    EMULATOR,
    STRIPE,
    Case,
    DecisionBox,
    DecisionFile,
    Emit,
    WorkerContext,
    run_worker,
)

# `INTERLOCK_AGENT` of a worker started to act on a saved decision: no model, no key.
AGENT_NONE = "none"
EXIT_ERROR = 1
EXIT_USAGE = 2
# sysexits' EX_IOERR: the journal cannot be used (disk full, corrupt file); nothing was sent
# against it.
EXIT_STORE = 74
EXIT_ORPHANED = 75
_PARENT_POLL_S = 0.5


def emit(kind: str, text: str, **data: Any) -> None:
    """Write one event line and flush it, so it reaches the supervisor before any kill."""
    line = {"t": time.monotonic(), "pid": os.getpid(), "kind": kind, "text": text, **data}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _watch_supervisor() -> None:
    """Exit when the supervisor is gone: stdin reaches EOF, or the parent changes."""
    parent = os.getppid()

    def stdin_eof() -> None:
        # os.read holds no interpreter-level lock, so this thread cannot block shutdown.
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        os._exit(EXIT_ORPHANED)

    def parent_gone() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=stdin_eof, name="stdin-eof", daemon=True).start()
    threading.Thread(target=parent_gone, name="parent-watch", daemon=True).start()


def _crash_hook(point: str | None) -> Any:
    def crash(at: str) -> None:
        if at == point:
            emit("crash", f"SIGKILL at {at}", crash_point=at)
            os.kill(os.getpid(), signal.SIGKILL)

    return crash


def decision_path(home: Path, case: Case) -> Path:
    """Where the standard and checked workers save a case's decision under `home`."""
    return home / "decisions" / f"{case.case_id}-{case.column}.json"


def _model_factory(case: Case) -> Any:
    def make() -> Model:
        agent = os.environ.get("INTERLOCK_AGENT", "scripted")
        if agent == AGENT_NONE:
            raise AgentError(
                "this worker was started to act on a saved decision, without the model or "
                "its key, but finds none saved; run the case again"
            )
        if agent == "anthropic":
            key = os.environ.get("ANTHROPIC_API_KEY", "")
            if not key:
                raise AgentError("ANTHROPIC_API_KEY is not set; the live agent needs it")
            return AnthropicModel(key)
        return ScriptedModel(case.amount)

    return make


def _supervised_crash_point() -> tuple[bool, str | None]:
    """Start watching the supervisor, then read `INTERLOCK_CRASH`: (usable, crash point).

    A point that is not one of `CRASH_POINTS` is named on stderr with the known ones, and
    comes back unusable: the worker then exits with `EXIT_USAGE`.
    """
    _watch_supervisor()
    crash_at = os.environ.get("INTERLOCK_CRASH") or None
    if crash_at is not None and crash_at not in CRASH_POINTS:
        print(
            f"INTERLOCK_CRASH={crash_at!r} is not one of {', '.join(CRASH_POINTS)}", file=sys.stderr
        )
        return False, crash_at
    return True, crash_at


def _home_store_and_payments(timing: Timing) -> tuple[Path, Store, StripePayments]:
    """The worker's INTERLOCK_HOME, its journal and its Stripe client, from the environment."""
    key = os.environ.get("STRIPE_SECRET_KEY", "")
    client = make_stripe_client(
        key, timeout_s=timing.stripe_timeout_s, base_url=os.environ.get("INTERLOCK_STRIPE_BASE")
    )
    home = Path(os.environ.get("INTERLOCK_HOME", ".interlock"))
    # A PostgreSQL URL or a SQLite path; the demo always says which.
    store = open_store(os.environ.get("INTERLOCK_STORE") or home / "interlock.sqlite3")
    return home, store, StripePayments(client)


def _context_factory(
    payments: StripePayments,
    store: Store,
    timing: Timing,
    switches: Switches,
    crash_at: str | None,
) -> Callable[[Case, DecisionBox, Emit, Callable[[float], None]], WorkerContext]:
    """What a worker's context is made from, less the case, its decision box, emit, sleep."""
    crash = _crash_hook(crash_at)

    def make(
        case: Case, box: DecisionBox, emit_: Emit, sleep: Callable[[float], None]
    ) -> WorkerContext:
        return WorkerContext(
            case=case,
            payments=payments,
            store=store,
            box=box,
            emit=emit_,
            crash=crash,
            model=_model_factory(case),
            timing=timing,
            switches=switches,
            owner=Owner.current(f"{case.column}-{os.getpid()}"),
            clock=time.time,
            sleep=sleep,
            answerer=EMULATOR if os.environ.get("INTERLOCK_STRIPE_BASE") else STRIPE,
        )

    return make


def main(argv: list[str] | None = None) -> int:
    """Run one worker; returns its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m workers.standalone CASE_FILE", file=sys.stderr)
        return EXIT_USAGE
    usable, crash_at = _supervised_crash_point()
    if not usable:
        return EXIT_USAGE
    try:
        case = Case.from_dict(json.loads(Path(args[0]).read_text()))
        timing = Timing.from_env()
        switches = Switches.from_env()
        home, store, payments = _home_store_and_payments(timing)
        context = _context_factory(payments, store, timing, switches, crash_at)
        box = DecisionFile(decision_path(home, case))
        ctx = context(case, box, emit, time.sleep)
        emit(
            "start",
            f"{case.column} worker started" + (f" (crash point: {crash_at})" if crash_at else ""),
            crash_point=crash_at,
        )
        run_worker(ctx)
    except StoreError as e:
        emit("store-error", f"the journal cannot be used: {e.problem}", path=e.path)
        return EXIT_STORE
    except (InterlockError, AgentError, OSError, ValueError, KeyError) as e:
        emit("error", f"{type(e).__name__}: {e}")
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
