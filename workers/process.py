"""What a worker process sets up around its column's story, read from its environment.

Both process entries use it: `workers.standalone` (one run of one case) and
`workers.temporal_worker` (a Temporal worker for one case's workflow).

- `emit`: one JSON event line on stdout, flushed at once, so it reaches the supervisor
  before any kill.
- `supervised_crash_point`: watch the supervisor (exit when it goes away) and read
  `INTERLOCK_CRASH`.
- `journal_and_payments`: `INTERLOCK_HOME`, the journal and the Stripe client.
- `context_factory`: the worker context of one run, less what the entry decides (the
  case, its decision box, how it reports, how it sleeps).

Environment: `INTERLOCK_HOME`, `INTERLOCK_STORE` (the journal), `INTERLOCK_CRASH`,
`INTERLOCK_AGENT` (`scripted`, `anthropic`, or `none`: act on a saved decision, no
model), `INTERLOCK_STRIPE_BASE` (offline: the emulator's address), `STRIPE_SECRET_KEY`,
`ANTHROPIC_API_KEY` (only when a real model is asked), `INTERLOCK_SIGNING_KEY` (the path
of the gate's receipt key: only interlock's), the whole timing (`worker_timing`: every
`Timing.ENV_NAMES`) and the emulated switches (`workers.protocol.switches`: the interlock
column wraps its effect in them). The gate anchors its receipt log in
`anchor_path(INTERLOCK_HOME)`. The engine gives it nothing else
(`interlock_demo.settings.worker.worker_env`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock import (
    Anchor,
    ConfigError,
    FileAnchor,
    Owner,
    SigningKey,
    Store,
    Timing,
    open_store,
)
from interlock.testing import CrashPoint
from workers import stripe_sdk
from workers.agent import AgentError, AnthropicModel, Model, ScriptedModel
from workers.context import ContextFactory, DecisionBox, Emit, WorkerContext
from workers.protocol import EXIT_ORPHANED, EventKind
from workers.protocol.case import AGENT_NONE, ENV_SIGNING_KEY, Case, anchor_path
from workers.protocol.switches import Switches
from workers.protocol.words import EMULATOR, STRIPE

if TYPE_CHECKING:
    from interlock import StripePayments

_PARENT_POLL_S = 0.5
# The parent this worker watches, when it is not simply the one it has when it starts
# watching: a fork server sets its own pid here before the worker runs, so a fork server
# that dies before the watch starts is still seen as gone.
PARENT: int | None = None


def emit(kind: str, text: str, **data: Any) -> None:
    """Write one event line and flush it, so it reaches the supervisor before any kill."""
    line = {"t": time.monotonic(), "pid": os.getpid(), "kind": kind, "text": text, **data}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def supervised_crash_point() -> tuple[bool, CrashPoint | None]:
    """Start watching the supervisor, then read `INTERLOCK_CRASH`: (usable, crash point).

    From here on the process exits (`EXIT_ORPHANED`) as soon as its supervisor goes away:
    stdin reaches EOF or its parent changes, so even a SIGKILLed supervisor leaves no
    worker behind. A crash point this worker cannot die at (`crash_point_from_env`) is
    named on stderr, and comes back unusable: the worker then exits with `EXIT_USAGE`.
    """
    _watch_supervisor()
    try:
        return True, crash_point_from_env()
    except ConfigError as e:
        print(e, file=sys.stderr)
        return False, None


def crash_point_from_env(env: Mapping[str, str] | None = None) -> CrashPoint | None:
    """The `INTERLOCK_CRASH` this worker kills itself at, or None when it is unset or empty.

    `ConfigError` names the crash points when the word is none of them, and says who
    kills there when it is a point no worker kills itself at (`in-flight`).
    """
    env = os.environ if env is None else env
    word = env.get("INTERLOCK_CRASH") or None
    if word is None:
        return None
    try:
        point = CrashPoint(word)
    except ConfigError as e:
        raise ConfigError(f"INTERLOCK_CRASH: {e}") from None
    if point.held:
        raise ConfigError(
            f"INTERLOCK_CRASH={point}: no worker kills itself there ({point.doc}); "
            "run the scenario through the engine instead"
        )
    return point


def worker_timing(env: Mapping[str, str] | None = None) -> Timing:
    """The timing the engine gave this worker: every one of `Timing.ENV_NAMES`, required.

    The engine plans its waits and kills with the timing it sent (`Timing.to_env`); a
    worker that fell back to the library's defaults (a 40 s claim) for a setting that did
    not arrive would hold claims the engine does not wait for.
    """
    env = os.environ if env is None else env
    missing = [name for name in Timing.ENV_NAMES.values() if not env.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not set: a worker runs with the whole timing its engine "
            "gives it (Timing.to_env writes every setting); set them all, in seconds"
        )
    return Timing.from_env(env)


def journal_and_payments(timing: Timing) -> tuple[Path, Store, StripePayments]:
    """The worker's INTERLOCK_HOME, its journal and its Stripe client, from the environment.

    The journal is `INTERLOCK_STORE` (a PostgreSQL URL or a SQLite path), else the SQLite
    file under the home; the client talks to `INTERLOCK_STRIPE_BASE` when it is set (the
    emulator), else to Stripe, with `timing`'s Stripe timeout.
    """
    stripe_sdk.load()
    from interlock import StripePayments, make_stripe_client

    key = os.environ.get("STRIPE_SECRET_KEY", "")
    client = make_stripe_client(
        key, timeout_s=timing.stripe_timeout_s, base_url=os.environ.get("INTERLOCK_STRIPE_BASE")
    )
    home = Path(os.environ.get("INTERLOCK_HOME", ".interlock"))
    store = open_store(os.environ.get("INTERLOCK_STORE") or home / "interlock.sqlite3")
    return home, store, StripePayments(client)


def context_factory(
    payments: StripePayments,
    store: Store,
    timing: Timing,
    switches: Switches,
    crash_at: CrashPoint | None,
) -> ContextFactory:
    """How this process builds a worker context for a case: its journal, payments, timing,
    switches and crash point, a model from `INTERLOCK_AGENT`, an owner named after the
    column and the pid, the wall clock, and who answers (the emulator when
    `INTERLOCK_STRIPE_BASE` is set, else Stripe), and the gate's receipt key and anchor
    (`receipt_signing`)."""
    crash = _crash_hook(crash_at)
    signing_key, anchors = receipt_signing()

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
            crash_point=crash_at,
            signing_key=signing_key,
            anchors=anchors,
        )

    return make


def receipt_signing(
    env: Mapping[str, str] | None = None,
) -> tuple[SigningKey | None, tuple[Anchor, ...]]:
    """The gate's receipt key, loaded from the file `INTERLOCK_SIGNING_KEY` names (None
    when unset: only the interlock column's worker is given it), and its anchor: the
    file `anchor_path(INTERLOCK_HOME, INTERLOCK_STORE)`, whose folder the engine made."""
    env = os.environ if env is None else env
    path = env.get(ENV_SIGNING_KEY)
    if not path:
        return None, ()
    home = Path(env.get("INTERLOCK_HOME", ".interlock"))
    anchor = anchor_path(home, env.get("INTERLOCK_STORE") or None)
    return SigningKey.load(path), (FileAnchor(anchor),)


def _watch_supervisor() -> None:
    """Exit when the supervisor is gone: stdin reaches EOF, or the parent changes."""
    parent = os.getppid() if PARENT is None else PARENT

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


def _crash_hook(point: CrashPoint | None) -> Callable[[CrashPoint], None]:
    def crash(at: CrashPoint) -> None:
        if at is point:
            emit(EventKind.CRASH, f"SIGKILL at {at}", crash_point=at)
            os.kill(os.getpid(), signal.SIGKILL)

    return crash


def _model_factory(case: Case) -> Callable[[], Model]:
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
