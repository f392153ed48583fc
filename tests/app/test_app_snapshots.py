"""Snapshot tests of the terminal app at fixed sizes, with deterministic mock runs.

Mock runs hand out random ids (payments, refunds, actions, runs) and real times. Here the
app's engine gets a clock and an id source (`Deterministic`) whose ids come from counters
per column thread, and whose clock moves a quarter second per reading in each column, so
the same run draws the same screen every time. Nothing is patched. Update the SVGs with
`pytest tests/app/test_app_snapshots.py --snapshot-update` and look at them before
committing (`tests/app/__snapshots__/test_app_snapshots/`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from interlock_demo.core.columns import OPTIONAL, ColumnKind
from interlock_demo.core.run import ClaimWait, Clock, ColumnState, Ids, Run
from interlock_demo.settings.config import resolve
from interlock_demo.views.tui.app import DemoApp, make_app
from interlock_demo.views.tui.widgets import ColumnPane
from scenarios import SCENARIOS
from tests.helpers.pacing import HoldingPacer

SIZE = (160, 45)
RUN_TIMEOUT_S = 30.0
# "Seconds since the run started" as the app's own thread reads them while a run is going
# (held after the kill), and as the run's thread reads them when it finishes (after every
# column's last event). Threads that act after the end (a re-approval) count on from there.
APP_THREAD_NOW = 3.5
FINISHED_AT = 12.0

Snap = Callable[..., bool]
RunBefore = Callable[[Pilot[Any]], Awaitable[None]]


class Deterministic:
    """Ids and times that depend only on which thread asks (a run's column), and how often.

    `clock` and `ids` are what the app's engine is given. One run per app: the app's thread
    reads 0 s once, when the run starts (pressing enter), and `APP_THREAD_NOW` ever after.
    """

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._started = False
        self.clock = Clock(monotonic=self.monotonic)
        self.ids = Ids(run_id=self.run_id, object_id=self.new_id, action_id=self.new_action_id)

    def _next(self, kind: str) -> tuple[str, int]:
        name = threading.current_thread().name
        with self._lock:
            self._counts[(kind, name)] += 1
            return name, self._counts[(kind, name)]

    def new_id(self, prefix: str) -> str:
        """A Stripe-style id as long as the real ones (24 characters after the prefix)."""
        thread, n = self._next(f"id-{prefix}")
        digest = hashlib.sha256(f"{prefix}/{thread}/{n}".encode()).digest()
        body = base64.urlsafe_b64encode(digest).decode()[:24]
        return f"{prefix}_{body.replace('-', 'x').replace('_', 'z')}"

    def new_action_id(self) -> str:
        """An action id shaped like `act_` + 32 hex digits."""
        thread, n = self._next("act")
        return "act_" + hashlib.sha256(f"act/{thread}/{n}".encode()).hexdigest()[:32]

    def run_id(self) -> str:
        """Run ids: run_000000000001, run_000000000002, ..."""
        _, n = self._next("run")
        return f"run_{n:012d}"

    def monotonic(self) -> float:
        """A column's thread (`run_...-<column>`) moves 0.25 s per reading; the run's thread
        (`run-run_...`) reads `FINISHED_AT`, the app's `APP_THREAD_NOW` once the run started,
        and any other (a re-approval's) counts on from `FINISHED_AT`."""
        thread = threading.current_thread()
        if thread is threading.main_thread():
            with self._lock:
                started, self._started = self._started, True
            return APP_THREAD_NOW if started else 0.0
        if thread.name.startswith("run-run_"):
            return FINISHED_AT
        _, n = self._next("now")
        return 0.25 * n + (0.0 if thread.name.startswith("run_") else FINISHED_AT)


@pytest.fixture
def deterministic() -> Deterministic:
    """The clock and the ids of one deterministic run (pass it to `mock_app`)."""
    return Deterministic()


class Hold:
    """Holds each column of a mock run right after its first worker was killed.

    The engine's `hold` pacer with the phases up to the kill open (views see no presenter
    mode); `mock_app` gives it to its app's engine.
    """

    def __init__(self) -> None:
        self.pacer = HoldingPacer("outage")

    def wait_for(self, columns: int) -> bool:
        """Block until `columns` columns are held; False if one does not come in time."""
        return self.pacer.wait_until_waiting("outage", columns, RUN_TIMEOUT_S)


@pytest.fixture
def hold() -> Iterator[Hold]:
    """Mock runs stop after the kill until `hold.pacer` is released (at the latest, at teardown)."""
    h = Hold()
    yield h
    h.pacer.release()


def mock_app(
    home: Path,
    *,
    optional: frozenset[ColumnKind] = OPTIONAL,
    deterministic: Deterministic | None = None,
    hold: Hold | None = None,
) -> DemoApp:
    """A mock-mode app with unpaced runs and no held states (timers would race), under `home`.

    With `deterministic`, its engine reads that clock and those ids; with `hold`, its runs
    stop after the kill.
    """
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(home)})
    if deterministic is None:
        app = make_app(config, optional=optional)
    else:
        app = make_app(config, optional=optional, clock=deterministic.clock, ids=deterministic.ids)
    app.engine.mock_pace_s = 0.0
    app.engine.kill_beat_s = 0.0
    if hold is not None:
        app.engine.hold = hold.pacer
    app.phase_hold_s = 0.0
    return app


async def run_to_end(pilot: Pilot[Any], key: str) -> Run:
    """Pick a scenario, run it, and wait (with a deadline) until its end is drawn."""
    await pilot.press(key, "enter")
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, DemoApp)
    run = app.run_on_screen
    assert run is not None
    assert await asyncio.to_thread(run.wait, RUN_TIMEOUT_S), "the run did not finish"
    await pilot.pause()
    assert run.error is None, run.error
    return run


def finished(key: str, theme: str | None = None) -> RunBefore:
    """A run_before that runs the scenario behind `key` to its end."""

    async def run_before(pilot: Pilot[Any]) -> None:
        if theme is not None:
            pilot.app.theme = theme
        await run_to_end(pilot, key)

    return run_before


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The INTERLOCK_HOME of the app under test."""
    return tmp_path / "home"


def test_idle_offline(snap_compare: Snap, home: Path) -> None:
    """The idle screen in offline mode: the rehearsal banner and three empty columns."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home)})
    app = make_app(config, optional=OPTIONAL)
    app.temporal_missing = None  # the same screen whether or not the Temporal extra is here
    assert snap_compare(app, terminal_size=SIZE)


def test_idle_mock(snap_compare: Snap, home: Path) -> None:
    """The idle screen in mock mode: striped banner, MOCK title and a badge on every column."""
    assert snap_compare(mock_app(home), terminal_size=SIZE)


def test_running_after_the_kill(
    snap_compare: Snap, home: Path, deterministic: Deterministic, hold: Hold
) -> None:
    """A run going: each column's first worker was just killed, the outage not yet done."""
    app = mock_app(home, deterministic=deterministic, hold=hold)

    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot.press("enter")
        assert await asyncio.to_thread(hold.wait_for, 3), "the run never reached the kill"
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
    run = app.run_on_screen
    assert run is not None and not run.finished
    hold.pacer.release()
    assert run.wait(RUN_TIMEOUT_S)


SIZES = {"160x45": SIZE, "100x30": (100, 30), "80x24": (80, 24)}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("sid", list(SCENARIOS))
def test_finished(
    snap_compare: Snap, home: Path, deterministic: Deterministic, sid: str, size: str
) -> None:
    """A finished mock run of each scenario at each projector size: at 160x45 three columns
    with full cards, at 100x30 side by side with compact cards, at 80x24 the Standard column
    alone; the wanted line, the pids' lines, verify() and the whole verdict strip in each."""
    assert snap_compare(
        mock_app(home, deterministic=deterministic),
        terminal_size=SIZES[size],
        run_before=finished(SCENARIOS[sid].key),
    )


def test_finished_without_the_checked_column(
    snap_compare: Snap, home: Path, deterministic: Deterministic
) -> None:
    """Without the checked column the two other columns share the width."""
    app = mock_app(home, optional=frozenset(), deterministic=deterministic)
    assert snap_compare(app, terminal_size=SIZE, run_before=finished("1"))


def test_reapproved(snap_compare: Snap, home: Path, deterministic: Deterministic) -> None:
    """After interlock refused, a re-approval: a sent refund and a receipt naming the refusal."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_to_end(pilot, "1")
        await pilot.press("a")
        await asyncio.wait_for(pilot.app.workers.wait_for_complete(), RUN_TIMEOUT_S)
        await pilot.pause()

    assert snap_compare(
        mock_app(home, deterministic=deterministic), terminal_size=SIZE, run_before=run_before
    )


def test_finished_light_theme(snap_compare: Snap, home: Path, deterministic: Deterministic) -> None:
    """The same finished run in Textual's light theme, for a bright room."""
    app = mock_app(home, deterministic=deterministic)
    assert snap_compare(app, terminal_size=SIZE, run_before=finished("1", "textual-light"))


@pytest.mark.parametrize(
    ("column", "presses"), [("interlock", 1), ("checked", 2)], ids=["interlock", "checked"]
)
def test_finished_80x24_the_column(
    snap_compare: Snap, home: Path, deterministic: Deterministic, column: str, presses: int
) -> None:
    """At 80x24, the right key shows the next column alone (once: Interlock, twice: the
    checked column), with its compact card; the verdict strip stays."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_to_end(pilot, "1")
        await pilot.press(*["right"] * presses)
        await pilot.pause()
        shown = [p.column_name for p in pilot.app.query(ColumnPane) if p.display]
        assert shown == [column]

    assert snap_compare(
        mock_app(home, deterministic=deterministic), terminal_size=(80, 24), run_before=run_before
    )


def test_zoomed_at_160x45(snap_compare: Snap, home: Path, deterministic: Deterministic) -> None:
    """z zooms the chosen column to the whole width (right: Interlock), with its full card;
    the message names the column shown, and the key bar fits beside the palette's key."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_to_end(pilot, "1")
        await pilot.press("z", "right")
        await pilot.pause()

    assert snap_compare(
        mock_app(home, deterministic=deterministic), terminal_size=SIZE, run_before=run_before
    )


@pytest.mark.parametrize("size", [SIZE, (100, 30), (80, 24)], ids=["160x45", "100x30", "80x24"])
def test_countdown_mid_wait(
    snap_compare: Snap, home: Path, deterministic: Deterministic, hold: Hold, size: tuple[int, int]
) -> None:
    """Interlock mid-wait for the dead worker's claim: large seconds left, the caption, the bar.

    A mock run is held after the kill and the Interlock column is shown a real (not
    simulated) wait of 16 s that began at 3.0 s, read at the app's 3.5 s: 15.5 s left.
    """
    app = mock_app(home, deterministic=deterministic, hold=hold)

    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot.press("enter")
        assert await asyncio.to_thread(hold.wait_for, 3), "the run never reached the kill"
        await pilot.pause()
        run = app.run_on_screen
        assert run is not None
        snapshot = run.snapshot()
        col = snapshot.columns[1]  # a copy: the run itself does not change
        col.state = ColumnState.WAITING
        col.claim_wait = ClaimWait(start=3.0, until=19.0, seconds=16.0)
        app.query_one("#col-interlock", ColumnPane).show(snapshot, col)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
    run = app.run_on_screen
    assert run is not None and not run.finished
    hold.pacer.release()
    assert run.wait(RUN_TIMEOUT_S)


async def presenter_at_the_outage(pilot: Pilot[Any]) -> Run:
    """Presenter mode, enter, then two presses (decision, kill): wait until every column has
    shown its kill and the run waits for space before the outage."""
    app = pilot.app
    assert isinstance(app, DemoApp)
    await pilot.press("p", "enter")
    await pilot.pause()
    run = app.run_on_screen
    assert run is not None and run.pacer is not None
    for _ in range(2):
        await pilot.press("space")
    pacer = run.pacer

    def held_at_outage() -> bool:
        return (
            pacer.next_phase == "outage"
            and pacer.held
            and all(any(e.kind == "crash" for e in c.events) for c in run.columns)
        )

    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not held_at_outage():
        assert time.monotonic() < deadline, "the run never waited at the outage"
        await pilot.pause(0.02)
    await pilot.pause()
    return run


def release(app: DemoApp) -> None:
    """Let the presenter's run on screen go through to its end."""
    run = app.run_on_screen
    assert run is not None and run.pacer is not None
    run.pacer.release()
    assert run.wait(RUN_TIMEOUT_S)


def test_presenter_waiting_for_the_outage(
    snap_compare: Snap, home: Path, deterministic: Deterministic
) -> None:
    """Presenter mode after two presses: decision and kill shown, the run waits for space."""
    app = mock_app(home, deterministic=deterministic)

    async def run_before(pilot: Pilot[Any]) -> None:
        await presenter_at_the_outage(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
    release(app)


# The dead worker's claim ends this long after the app's clock reading, in the header.
CLAIM_LEFT_S = 14.0


@pytest.mark.parametrize("size", ["100x30", "80x24"])
def test_presenter_claim_end_below_160(
    snap_compare: Snap, home: Path, deterministic: Deterministic, size: str
) -> None:
    """Presenter mode below 160, waiting before the outage: the step and the claim's end
    ("claim ends in 14 s") whole on the header's second line.

    A mock worker renews no claim on the host's clock, so the test gives the Interlock
    column the claim's end the engine records for a real worker's renewed claim.
    """
    app = mock_app(home, deterministic=deterministic)

    async def run_before(pilot: Pilot[Any]) -> None:
        run = await presenter_at_the_outage(pilot)
        col = run.column("interlock")
        run.update(col.name, lambda: setattr(col, "claim_until", APP_THREAD_NOW + CLAIM_LEFT_S))
        await pilot.pause()
        rows = [strip.text for strip in app.screen._compositor.render_strips()]
        step = "PRESENTER space: outage (waiting) · claim ends in 14 s"
        assert any(row.strip() == step for row in rows), rows[:4]

    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)
    release(app)
