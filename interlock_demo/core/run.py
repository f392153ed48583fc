"""The run model: what a run is, as every view sees it.

The engine writes it; views (the Textual app, the headless JSON printer, the HTTP
endpoint) subscribe and read snapshots. Nothing here imports Textual. `to_json()` is the
`interlock-demo/run@2` document of docs/design.md §6; amounts are integer cents, times are
seconds since the run started. An event carries its `data` (the fields its worker, the gate
or the engine gave it), which is what views read; its `text` is those fields in words.
"""

from __future__ import annotations

import copy
import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, TypeVar

from interlock import new_action_id
from interlock.testing.crash_points import CrashPoint
from interlock_demo.core.columns import column_kind
from workers.protocol import ColumnOutcome

SCHEMA = "interlock-demo/run@2"

Listener = Callable[["Run", str | None], None]

# The phases a presenter steps through, one press each (presenter mode in the app).
PHASES = ("decision", "kill", "outage", "restart", "result")


@dataclass(frozen=True)
class Clock:
    """Where a run reads the time: `monotonic` for its timeline, `wall` for its timestamps.

    The engine and the app take one, so a test (a snapshot) can run on a clock it controls.
    """

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


SYSTEM_CLOCK = Clock()


def new_run_id() -> str:
    """A fresh run id, `run_` and 12 hex digits."""
    return "run_" + secrets.token_hex(6)


@dataclass(frozen=True)
class Ids:
    """Where a run's ids come from: the run's own, the mock Stripe's objects, the actions.

    The engine and the app take one, so a test (a snapshot) can hand out ids it can
    predict. `object_id(prefix)` names the in-memory payments model's objects (`pi_...`,
    `re_...`; None leaves them to the model's own ids, which the run model need not know);
    `action_id()` names the gate's actions, minted by workers and by a re-approval. Real
    Stripe and worker processes mint their own and never read this.
    """

    run_id: Callable[[], str] = new_run_id
    object_id: Callable[[str], str] | None = None
    action_id: Callable[[], str] = new_action_id


SYSTEM_IDS = Ids()


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
            # `held` just changed: whoever waits on the condition for it looks again.
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: self._opened > index)
            finally:
                self._waiting[phase] -= 1


class ColumnState(str, Enum):
    """Where a column is in its script; the run@2 `state` is the value."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    KILLED = "killed"
    WAITING = "waiting"
    RESTARTING = "restarting"
    DONE = "done"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """The state in words, for a status line."""
        return _STATE_LABELS[self]

    @property
    def held(self) -> bool:
        """Whether a room must be able to read this state before the next replaces it."""
        return self in (ColumnState.KILLED, ColumnState.RESTARTING)


_STATE_LABELS = {
    ColumnState.IDLE: "idle",
    ColumnState.STARTING: "creating the payment and the approval",
    ColumnState.RUNNING: "running",
    ColumnState.KILLED: "killed",
    ColumnState.WAITING: "waiting for the claim",
    ColumnState.RESTARTING: "restarting",
    ColumnState.DONE: "done",
    ColumnState.ERROR: "error",
}


class Finding(str, Enum):
    """What a judged column came to against the truth table, and what a run came to (its
    columns' worst): the run@2 `verdict` is the value, and every view that says it prints
    these words.

    Right and wrong are the money, the column's `ok`: whether Stripe holds what the
    scenario wanted. The truth table predicts some columns wrong (the standard agent after
    a hand refund pays twice); one that ends so is wrong as predicted, which is the demo's
    point, not a failure of the run. Whether the report was true beside right money (a
    false alarm) is the column's `truthful`, said apart.
    """

    # From best to worst: a run's is its columns' worst.
    RIGHT = "right"
    WRONG = "wrong (as predicted)"
    NOT_AS_PREDICTED = "not as predicted"

    def __str__(self) -> str:
        return self.value

    @property
    def as_predicted(self) -> bool:
        """Whether it ended as the truth table says."""
        return self is not Finding.NOT_AS_PREDICTED

    @classmethod
    def worst(cls, findings: Iterable[Finding | None]) -> Finding | None:
        """The worst of `findings`; None when one of them is None (not judged yet, or not
        against the truth table) or there are none."""
        found: list[Finding] = []
        for finding in findings:
            if finding is None:
                return None
            found.append(finding)
        return max(found, key=list(cls).index, default=None)


class RunEventKind(str, Enum):
    """The kinds of event the engine itself adds to a column.

    A worker's own kinds are `workers.protocol.EventKind` (and the gate's `gate_kind`).
    """

    SETUP = "setup"
    OUTAGE = "outage"
    FAULT = "fault"
    KEY_FIXED = "key-fixed"
    REAPPROVE = "reapprove"
    # A line a worker process wrote that is not an event.
    OUTPUT = "output"
    # A worker started cold because its column's fork server could not give it.
    COLD_START = "cold-start"
    # The Temporal engine's reading of the workflow: its start, the model's decision as
    # recorded, an activity's completion or failure, a retry (from describe()), the close.
    TEMPORAL_STARTED = "temporal-started"
    TEMPORAL_DECISION = "temporal-decision"
    TEMPORAL_ACTIVITY = "temporal-activity"
    TEMPORAL_RETRY = "temporal-retry"
    TEMPORAL_CLOSED = "temporal-closed"

    def __str__(self) -> str:
        return self.value


_R = TypeVar("_R", bound="JsonFields")


class JsonFields:
    """A frozen dataclass of plain values whose run@2 JSON is its fields, by name."""

    def to_json(self) -> dict[str, Any]:
        """As run@2 JSON."""
        record: Any = self  # a dataclass: its subclasses are
        return dataclasses.asdict(record)

    @classmethod
    def from_json(cls: type[_R], data: Mapping[str, Any]) -> _R:
        """Read back from run@2 JSON."""
        record: Any = cls
        names = [f.name for f in dataclasses.fields(record)]
        return cls(**{name: data[name] for name in names})


@dataclass(frozen=True)
class ClaimWait:
    """A column waiting out a dead worker's claim, in run time (seconds since the start).

    In mock runs the wait is `simulated`: shown, not waited.
    """

    start: float
    until: float
    seconds: float
    simulated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The wait as run@2 JSON (`from`, `until`, `seconds`, and `simulated` when it is)."""
        data: dict[str, Any] = {"from": self.start, "until": self.until, "seconds": self.seconds}
        if self.simulated:
            data["simulated"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClaimWait:
        """Read a wait back from run@2 JSON."""
        return cls(
            start=float(data["from"]),
            until=float(data["until"]),
            seconds=float(data["seconds"]),
            simulated=bool(data.get("simulated", False)),
        )


@dataclass(frozen=True)
class Wanted(JsonFields):
    """What should be in Stripe at the end, whatever the column does (the scenario's goal)."""

    text: str
    agent_refunds: int
    hand_refunds: int
    refunded_total: int


@dataclass(frozen=True)
class Expected(JsonFields):
    """What the truth table predicts this column ends with (docs/design.md §2)."""

    agent_refunds: int
    hand_refunds: int
    refunded_total: int
    outcome: str
    note: str


@dataclass(frozen=True)
class RefundRow(JsonFields):
    """One refund of the column's payment as Stripe has it; `by` is `agent` or `hand`."""

    id: str
    amount: int
    status: str
    metadata: Mapping[str, str]
    by: str


@dataclass(frozen=True)
class StripeCard:
    """The column's payment read back from Stripe at the end: its refunds and their total."""

    refunds: tuple[RefundRow, ...]
    refunded_total: int

    def to_json(self) -> dict[str, Any]:
        """As run@2 JSON."""
        return {
            "refunds": [r.to_json() for r in self.refunds],
            "refunded_total": self.refunded_total,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StripeCard:
        """Read a payment's card back from run@2 JSON."""
        return cls(
            refunds=tuple(RefundRow.from_json(r) for r in data["refunds"]),
            refunded_total=int(data["refunded_total"]),
        )


@dataclass
class Event:
    """One thing that happened in a column: its kind and fields, and those in words.

    `data` holds the event's fields as plain JSON values (a gate event's are its
    `interlock.GateEvent` fields); views and reports read them, never `text`, so the
    words can change without changing what a view shows.
    """

    t: float
    kind: str
    text: str
    pid: int | None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The event as run@2 JSON."""
        return {
            "t": round(self.t, 3),
            "kind": self.kind,
            "text": self.text,
            "pid": self.pid,
            "data": dict(self.data),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        """Read an event back from run@2 JSON."""
        return cls(
            t=float(data["t"]),
            kind=str(data["kind"]),
            text=str(data["text"]),
            pid=_optional_int(data["pid"]),
            data=dict(data["data"]),
        )


@dataclass
class WorkerInfo:
    """One worker process (or, in mock mode, one simulated worker)."""

    pid: int | None
    crash_point: CrashPoint | None
    started_at: float
    exit_code: int | None = None
    ended_at: float | None = None
    simulated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The worker as run@2 JSON."""
        data: dict[str, Any] = {
            "pid": self.pid,
            "exit_code": self.exit_code,
            "crash_point": None if self.crash_point is None else self.crash_point.value,
            "started_at": round(self.started_at, 3),
            "ended_at": None if self.ended_at is None else round(self.ended_at, 3),
        }
        if self.simulated:
            data["simulated"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerInfo:
        """Read a worker back from run@2 JSON."""
        crash_point = data["crash_point"]
        ended_at = data["ended_at"]
        return cls(
            pid=_optional_int(data["pid"]),
            crash_point=None if crash_point is None else CrashPoint(crash_point),
            started_at=float(data["started_at"]),
            exit_code=_optional_int(data["exit_code"]),
            ended_at=None if ended_at is None else float(ended_at),
            simulated=bool(data.get("simulated", False)),
        )


@dataclass
class Column:
    """One column of a run: its case, its workers, its events and its result card."""

    name: str
    title: str
    state: ColumnState = ColumnState.IDLE
    case_id: str | None = None
    payment_intent: str | None = None
    lease_id: str | None = None
    workers: list[WorkerInfo] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    outcome: ColumnOutcome | None = None
    stripe: StripeCard | None = None
    wanted: Wanted | None = None
    expected: Expected | None = None
    ok: bool | None = None
    truthful: bool | None = None
    as_predicted: bool | None = None
    deviations: list[str] = field(default_factory=list)
    receipt: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    claim_wait: ClaimWait | None = None
    # When (run time) the claim the column's last real worker renewed before sending ends.
    claim_until: float | None = None
    action_ids: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def finding(self) -> Finding | None:
        """The column's end against the truth table, in words (the run@2 `verdict`).

        Derived from `as_predicted` and `ok`, so a document written before it was a field
        reads back with it. None while the column is not judged, for a sweep cell (no row
        of the truth table), and once a person re-approved (the table no longer applies).
        """
        if self.as_predicted is None or (self.outcome is not None and self.outcome.reapproves):
            return None
        if not self.as_predicted:
            return Finding.NOT_AS_PREDICTED
        return Finding.RIGHT if self.ok else Finding.WRONG

    def to_json(self) -> dict[str, Any]:
        """The column as run@2 JSON."""
        data: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "state": self.state.value,
            "payment_intent": self.payment_intent,
            "lease_id": self.lease_id,
            "workers": [w.to_json() for w in self.workers],
            "events": [e.to_json() for e in self.events],
            "outcome": None if self.outcome is None else self.outcome.to_wire(),
            "stripe": None if self.stripe is None else self.stripe.to_json(),
            "wanted": {} if self.wanted is None else self.wanted.to_json(),
            "expected": {} if self.expected is None else self.expected.to_json(),
            "ok": self.ok,
            "truthful": self.truthful,
            "as_predicted": self.as_predicted,
            "verdict": _value(self.finding),
            "deviations": list(self.deviations),
            "error": self.error,
            "claim_wait": None if self.claim_wait is None else self.claim_wait.to_json(),
        }
        if column_kind(self.name).signs_receipts:
            data["receipt"] = self.receipt
            data["verify"] = self.verify
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Column:
        """Read a column back from run@2 JSON.

        What the JSON does not carry (the case id, the claim's end, the action ids) is left
        unset: a column read back is for reading, not for an engine to go on with.
        """
        outcome, stripe, claim_wait = data["outcome"], data["stripe"], data["claim_wait"]
        wanted, expected, error = data["wanted"], data["expected"], data["error"]
        return cls(
            name=str(data["name"]),
            title=str(data["title"]),
            state=ColumnState(data["state"]),
            payment_intent=_optional_str(data["payment_intent"]),
            lease_id=_optional_str(data["lease_id"]),
            workers=[WorkerInfo.from_json(w) for w in data["workers"]],
            events=[Event.from_json(e) for e in data["events"]],
            outcome=None if outcome is None else ColumnOutcome.from_wire(outcome),
            stripe=None if stripe is None else StripeCard.from_json(stripe),
            wanted=Wanted.from_json(wanted) if wanted else None,
            expected=Expected.from_json(expected) if expected else None,
            ok=_optional_bool(data["ok"]),
            truthful=_optional_bool(data["truthful"]),
            as_predicted=_optional_bool(data["as_predicted"]),
            deviations=[str(d) for d in data["deviations"]],
            receipt=data.get("receipt"),
            verify=data.get("verify"),
            claim_wait=None if claim_wait is None else ClaimWait.from_json(claim_wait),
            error=None if error is None else str(error),
        )


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
    run_id: str = field(default_factory=new_run_id)
    status: str = "running"
    started_at: str = ""
    finished_at: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    pacer: Pacer | None = field(default=None, repr=False)
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)
    _t0: float = field(default=0.0, repr=False)
    _elapsed: float | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _listeners: list[Listener] = field(default_factory=list, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        self._t0 = self.clock.monotonic()
        if not self.started_at:
            self.started_at = _iso(self.clock.wall())

    # -- reading -------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the run started."""
        return self.clock.monotonic() - self._t0

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
        return self.snapshot().as_predicted is True

    def snapshot(self) -> RunSnapshot:
        """The run as it is now, copied under its lock: what views read and render."""
        with self._lock:
            return RunSnapshot(
                run_id=self.run_id,
                mode=self.mode,
                engine=self.engine,
                scenario=self.scenario,
                title=self.title,
                status=self.status,
                emulated=tuple(self.emulated),
                settings=copy.deepcopy(self.settings),
                started_at=self.started_at,
                finished_at=self.finished_at,
                elapsed_s=self.elapsed_s,
                now=self.now(),
                error=self.error,
                notes=tuple(self.notes),
                columns=tuple(copy.deepcopy(c) for c in self.columns),
            )

    def to_json(self) -> dict[str, Any]:
        """The run as an `interlock-demo/run@2` document."""
        return self.snapshot().to_json()

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

    def add_event(
        self,
        column: str,
        kind: str,
        text: str,
        pid: int | None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Append an event to a column, with its fields (`data`) and their words (`text`)."""
        col = self.column(column)
        fields = dict(data or {})
        self.update(column, lambda: col.events.append(Event(self.now(), kind, text, pid, fields)))

    def set_state(self, column: str, state: ColumnState) -> None:
        """Move a column to another state."""
        col = self.column(column)

        def change() -> None:
            col.state = state

        self.update(column, change)

    def finish(self, *, error: str | None = None) -> None:
        """Mark the run finished (or failed with `error`); its elapsed time stops here."""

        def change() -> None:
            self._elapsed = self.now()
            self.finished_at = _iso(self.clock.wall())
            self.status = "failed" if error else "finished"
            self.error = error

        self.update(None, change)
        self._done.set()


@dataclass(frozen=True)
class RunSnapshot:
    """A run at one moment: a copy no engine thread changes while a view reads it."""

    run_id: str
    mode: str
    engine: str
    scenario: str
    title: str
    status: str
    emulated: tuple[str, ...]
    settings: Mapping[str, Any]
    started_at: str
    finished_at: str | None
    elapsed_s: float
    # Seconds since the run started, when the copy was taken (a countdown's "now").
    now: float
    error: str | None
    notes: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def finished(self) -> bool:
        """Whether the run had ended (finished or failed) when the copy was taken."""
        return self.status != "running"

    def column(self, name: str) -> Column | None:
        """The column with this name, if the run has it."""
        return next((c for c in self.columns if c.name == name), None)

    @property
    def verdict(self) -> Finding | None:
        """What the run came to against the truth table: its columns' worst finding, once
        every column has one (None until then, and for a run the table does not cover)."""
        return Finding.worst(c.finding for c in self.columns)

    @property
    def as_predicted(self) -> bool | None:
        """Whether every column ended as the truth table says (None: see `verdict`)."""
        verdict = self.verdict
        return None if verdict is None else verdict.as_predicted

    def to_json(self) -> dict[str, Any]:
        """The run as an `interlock-demo/run@2` document."""
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
            "as_predicted": self.as_predicted,
            "verdict": _value(self.verdict),
            "columns": [c.to_json() for c in self.columns],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSnapshot:
        """Read an `interlock-demo/run@2` document (as `to_json` wrote it) back.

        Raises `ValueError` for another schema, and `KeyError` or `TypeError` for a document
        that lacks a field or holds one of the wrong shape. `now` is the run's elapsed time:
        a document has no clock.
        """
        if data.get("schema") != SCHEMA:
            raise ValueError(
                f"not an {SCHEMA} document (its schema is {data.get('schema')!r}): read a "
                "run as `interlock-demo --headless --json` prints it"
            )
        elapsed_s = float(data["elapsed_s"])
        return cls(
            run_id=str(data["run_id"]),
            mode=str(data["mode"]),
            engine=str(data["engine"]),
            scenario=str(data["scenario"]),
            title=str(data["title"]),
            status=str(data["status"]),
            emulated=tuple(str(e) for e in data["emulated"]),
            settings=dict(data["settings"]),
            started_at=str(data["started_at"]),
            finished_at=_optional_str(data["finished_at"]),
            elapsed_s=elapsed_s,
            now=elapsed_s,
            error=_optional_str(data["error"]),
            notes=tuple(str(n) for n in data["notes"]),
            columns=tuple(Column.from_json(c) for c in data["columns"]),
        )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _value(finding: Finding | None) -> str | None:
    return None if finding is None else finding.value


def _optional_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)
