"""The run model: what a run is, as every view sees it.

The engine writes it; views (the Textual app, the headless JSON printer, the HTTP
endpoint) subscribe and read snapshots. Nothing here imports Textual. `to_json()` is the
`interlock-demo/run@1` document of docs/design.md §6; amounts are integer cents, times are
seconds since the run started.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

SCHEMA = "interlock-demo/run@1"

Listener = Callable[["Run", str | None], None]

# The phases a presenter steps through, one press each (presenter mode in the app).
PHASES = ("decision", "kill", "outage", "restart", "result")


class Pacer:
    """Presenter mode: each column waits before a phase until the presenter opens it.

    The engine calls `wait(phase)` at each phase of each column; the app calls `advance()`
    once per key press. Phases open in order and stay open, so a column that arrives late
    at an open phase goes straight through. `release()` opens everything (quit, stop).
    Headless runs have no pacer and never wait.
    """

    def __init__(self) -> None:
        self._opened = 0
        self._waiting: dict[str, int] = {}
        self._cond = threading.Condition()

    @property
    def next_phase(self) -> str | None:
        """The phase the next press opens, or None when all are open."""
        with self._cond:
            return PHASES[self._opened] if self._opened < len(PHASES) else None

    @property
    def held(self) -> bool:
        """Whether some column is waiting for the presenter right now."""
        with self._cond:
            return any(self._waiting.values())

    def advance(self) -> str | None:
        """Open the next phase; returns its name, or None when all were open."""
        with self._cond:
            if self._opened >= len(PHASES):
                return None
            self._opened += 1
            self._cond.notify_all()
            return PHASES[self._opened - 1]

    def release(self) -> None:
        """Open every phase: nothing waits any more."""
        with self._cond:
            self._opened = len(PHASES)
            self._cond.notify_all()

    def wait(self, phase: str) -> None:
        """Block until `phase` is open."""
        index = PHASES.index(phase)
        with self._cond:
            self._waiting[phase] = self._waiting.get(phase, 0) + 1
            try:
                self._cond.wait_for(lambda: self._opened > index)
            finally:
                self._waiting[phase] -= 1


@dataclass
class Event:
    """One thing that happened in a column."""

    t: float
    kind: str
    text: str
    pid: int | None

    def to_json(self) -> dict[str, Any]:
        """The event as run@1 JSON."""
        return {"t": round(self.t, 3), "kind": self.kind, "text": self.text, "pid": self.pid}


@dataclass
class WorkerInfo:
    """One worker process (or, in mock mode, one simulated worker)."""

    pid: int | None
    crash_point: str | None
    started_at: float
    exit_code: int | None = None
    ended_at: float | None = None
    simulated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The worker as run@1 JSON."""
        data: dict[str, Any] = {
            "pid": self.pid,
            "exit_code": self.exit_code,
            "crash_point": self.crash_point,
            "started_at": round(self.started_at, 3),
            "ended_at": None if self.ended_at is None else round(self.ended_at, 3),
        }
        if self.simulated:
            data["simulated"] = True
        return data


@dataclass
class Column:
    """One column of a run: its case, its workers, its events and its result card."""

    name: str
    title: str
    state: str = "idle"
    case_id: str | None = None
    payment_intent: str | None = None
    lease_id: str | None = None
    workers: list[WorkerInfo] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    outcome: dict[str, Any] | None = None
    stripe: dict[str, Any] | None = None
    wanted: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    ok: bool | None = None
    truthful: bool | None = None
    as_predicted: bool | None = None
    deviations: list[str] = field(default_factory=list)
    receipt: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    # While the column waits out a dead worker's claim: run times `from`, `until`, `seconds`
    # (and `simulated` in mock runs, where the wait is shown and not waited).
    claim_wait: dict[str, Any] | None = None
    # When (run time) the claim the column's last real worker renewed before sending ends.
    claim_until: float | None = None
    action_ids: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The column as run@1 JSON."""
        data: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "state": self.state,
            "payment_intent": self.payment_intent,
            "lease_id": self.lease_id,
            "workers": [w.to_json() for w in self.workers],
            "events": [e.to_json() for e in self.events],
            "outcome": self.outcome,
            "stripe": self.stripe,
            "wanted": self.wanted,
            "expected": self.expected,
            "ok": self.ok,
            "truthful": self.truthful,
            "as_predicted": self.as_predicted,
            "deviations": list(self.deviations),
            "error": self.error,
            "claim_wait": None if self.claim_wait is None else dict(self.claim_wait),
        }
        if self.name == "interlock":
            data["receipt"] = self.receipt
            data["verify"] = self.verify
        return data


@dataclass
class Run:
    """A run of one scenario: its settings, its columns, and its state over time."""

    mode: str
    engine: str
    scenario: str
    title: str
    emulated: list[str]
    settings: dict[str, Any]
    columns: list[Column]
    run_id: str = field(default_factory=lambda: "run_" + secrets.token_hex(6))
    status: str = "running"
    started_at: str = field(default_factory=lambda: _iso(time.time()))
    finished_at: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    pacer: Pacer | None = field(default=None, repr=False)
    _t0: float = field(default_factory=time.monotonic, repr=False)
    _elapsed: float | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _listeners: list[Listener] = field(default_factory=list, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    # -- reading -------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self._t0

    @property
    def elapsed_s(self) -> float:
        """Seconds the run took, or has taken so far; it stops growing when it finished."""
        return self._elapsed if self._elapsed is not None else self.now()

    @property
    def finished(self) -> bool:
        """Whether the run ended (finished or failed)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ended; False on timeout."""
        return self._done.wait(timeout)

    def column(self, name: str) -> Column:
        """The column with this name."""
        return next(c for c in self.columns if c.name == name)

    @property
    def all_as_predicted(self) -> bool:
        """Whether every column ended as the truth table says."""
        return all(c.as_predicted for c in self.columns)

    def to_json(self) -> dict[str, Any]:
        """The run as an `interlock-demo/run@1` document."""
        with self._lock:
            return {
                "schema": SCHEMA,
                "run_id": self.run_id,
                "mode": self.mode,
                "engine": self.engine,
                "scenario": self.scenario,
                "title": self.title,
                "status": self.status,
                "emulated": list(self.emulated),
                "settings": dict(self.settings),
                "started_at": self.started_at,
                "finished_at": self.finished_at,
                "elapsed_s": round(self.elapsed_s, 3),
                "error": self.error,
                "notes": list(self.notes),
                "columns": [c.to_json() for c in self.columns],
            }

    # -- writing (the engine) ------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(run, column_name_or_None)` after every change; returns unsubscribe."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def update(self, column: str | None, change: Callable[[], None]) -> None:
        """Apply a change under the run's lock, then tell the listeners."""
        with self._lock:
            change()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(self, column)

    def add_event(self, column: str, kind: str, text: str, pid: int | None) -> None:
        """Append an event to a column."""
        col = self.column(column)
        self.update(column, lambda: col.events.append(Event(self.now(), kind, text, pid)))

    def set_state(self, column: str, state: str) -> None:
        """Move a column to another state."""
        col = self.column(column)

        def change() -> None:
            col.state = state

        self.update(column, change)

    def finish(self, *, error: str | None = None) -> None:
        """Mark the run finished (or failed with `error`); its elapsed time stops here."""

        def change() -> None:
            self._elapsed = self.now()
            self.finished_at = _iso(time.time())
            self.status = "failed" if error else "finished"
            self.error = error

        self.update(None, change)
        self._done.set()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")
