"""Pilot tests of the terminal app: every key, the mock labelling, and runs on screen.

Most runs are mock runs (in-process, a fraction of a second with the pace set to 0). A
mock run can be held right after its workers were killed, so a test can look at a run
that is going. The quit test runs offline, with real worker processes and short timings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.command import Command, CommandList, CommandPalette
from textual.content import Content
from textual.pilot import Pilot
from textual.widgets import Digits, Static
from textual.widgets._footer import FooterKey
from textual.widgets._toast import Toast

from interlock_demo import engine as engine_module
from interlock_demo.core.columns import OPTIONAL, ColumnKind
from interlock_demo.core.run import Column, ColumnState, Event, Run, RunSnapshot, WorkerInfo
from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.views.tui.app import DemoApp, make_app
from interlock_demo.views.tui.commands import DemoCommands
from interlock_demo.views.tui.keys import KeysScreen
from interlock_demo.views.tui.messages import RunChanged
from interlock_demo.views.tui.widgets import (
    ColumnPane,
    MessageLine,
    ModeBanner,
    RunHeader,
    VerdictStrip,
)
from scenarios import SCENARIOS
from tests.helpers.pacing import HoldingPacer

SIZE = (160, 45)
RUN_TIMEOUT_S = 30.0
SHORT_TIMING = {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}
# A claim the restarted worker finds held however late a loaded machine starts it (with
# SHORT_TIMING's, a restart 10 s late found a fraction of a second left, 12 s late none,
# and the countdown went unseen), with the demo's Stripe timeout. A test that uses it
# quits during the wait rather than sit it out.
LONG_CLAIM = {"INTERLOCK_CLAIM_TTL": "60", "INTERLOCK_STRIPE_TIMEOUT": "10"}
# What each column's card must say at the end of each scenario (docs/design.md §3).
VERDICTS = {
    "hand-refund": {"standard": "✗ wrong", "interlock": "✓ right", "checked": "✓ right"},
    "revoked": {"standard": "✗ wrong", "interlock": "✓ right", "checked": "✓ right"},
    "after-answer": {
        "standard": "✓ right",
        "interlock": "✓ right",
        "checked": "⚠ right money, false alarm",
    },
}
REPORTED = {
    "hand-refund": {"standard": "sent", "interlock": "refused", "checked": "stopped"},
    "revoked": {"standard": "sent", "interlock": "refused", "checked": "stopped"},
    "after-answer": {"standard": "sent", "interlock": "adopted", "checked": "stopped"},
}


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The INTERLOCK_HOME of the app under test."""
    return tmp_path / "home"


def mock_config(home: Path) -> DemoConfig:
    """Mock mode, no keys, state under `home`."""
    return resolve(mode="mock", env={"INTERLOCK_HOME": str(home)})


def new_app(
    config: DemoConfig,
    *,
    optional: frozenset[ColumnKind] = frozenset(),
    hold_s: float = 0.0,
    hold: Hold | None = None,
) -> DemoApp:
    """The app as the CLI makes it, with mock runs unpaced and states held `hold_s`; with
    `hold`, its runs stop after the kill until `hold.release()`."""
    app = make_app(config, optional=optional)
    app.engine.mock_pace_s = 0.0
    app.engine.kill_beat_s = 0.0
    app.phase_hold_s = hold_s
    if hold is not None:
        app.engine.hold = hold.pacer
    return app


def plain(widget: Static) -> str:
    """The text a Static or Label shows."""
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


def header(app: DemoApp) -> str:
    """The run header's text."""
    return plain(app.query_one(RunHeader))


def story(app: DemoApp) -> str:
    """The scenario's story line under the header."""
    return plain(app.query_one("#story", Static))


def message(app: DemoApp) -> str:
    """The message line's text."""
    return plain(app.query_one(MessageLine))


def verdicts(app: DemoApp) -> str:
    """The verdict strip's text."""
    return plain(app.query_one(VerdictStrip))


def banner(app: DemoApp) -> str:
    """The mode banner's text, as wide as it is now."""
    return app.query_one(ModeBanner).text


def card_of(app: DemoApp, column: str) -> str:
    """A column's result card as written, its long lines whole (on screen a mock card's
    lines wrap, each row with its MOCK. prefix: the screen tests read those rows)."""
    return app.query_one(f"#col-{column}", ColumnPane).card_text


def pane_part(app: DemoApp, column: str, part: str) -> str:
    """One part of a column pane: title, status, event-lines or card."""
    return plain(app.query_one(f"#col-{column} .{part}", Static))


def screen_text(app: DemoApp) -> str:
    """What the terminal shows right now, as plain text, one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def columns_text(app: DemoApp) -> str:
    """What the columns' part of the screen shows (the message line may name a column)."""
    region = app.query_one("#columns").region
    return "\n".join(screen_text(app).splitlines()[region.y : region.bottom])


def notices(app: DemoApp, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every notification the app shows from now on."""
    seen: list[str] = []
    original = app.notify

    def notify(message: str, *args: Any, **kwargs: Any) -> None:
        seen.append(str(message))
        original(message, *args, **kwargs)

    monkeypatch.setattr(app, "notify", notify)
    return seen


async def settle(pilot: Pilot[Any]) -> None:
    """Let every pending message, layout and scroll be processed."""
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


START_TIMEOUT_S = 10.0


async def start(pilot: Pilot[Any], *keys: str) -> Run:
    """Press `keys`, then enter; returns the run the app put on screen."""
    await pilot.press(*keys, "enter")
    # The run reaches the screen through the app's messages: on a loaded machine one pause
    # is not always enough, so wait for it, with a deadline.
    deadline = time.monotonic() + START_TIMEOUT_S
    while pilot.app.run_on_screen is None and time.monotonic() < deadline:
        await pilot.pause(0.05)
    run = pilot.app.run_on_screen
    assert run is not None, "enter did not start a run"
    return run


async def finish(pilot: Pilot[Any], run: Run) -> None:
    """Wait (with a deadline) until the run ended and the app has drawn its end."""
    assert await asyncio.to_thread(run.wait, RUN_TIMEOUT_S), "the run did not finish"
    await settle(pilot)


class Hold:
    """Holds each column of a run right after its first worker was killed, until released.

    The engine's `hold` pacer with the phases up to the kill open: each column waits
    before its outage, and views see no presenter mode.
    """

    def __init__(self) -> None:
        self.pacer = HoldingPacer("outage")

    def release(self) -> None:
        """Let every held column go on, and every later one through."""
        self.pacer.release()

    async def reached(self, pilot: Pilot[Any], columns: int) -> None:
        """Wait until `columns` columns are held and the app has drawn them."""
        reached = await asyncio.to_thread(
            self.pacer.wait_until_waiting, "outage", columns, RUN_TIMEOUT_S
        )
        assert reached, "the run never reached the hold"
        await settle(pilot)


@pytest.fixture
def hold() -> Iterator[Hold]:
    """A hold for mock runs (pass it to `new_app`), released at the latest at teardown."""
    h = Hold()
    yield h
    h.release()


def standalone_workers() -> list[psutil.Process]:
    """Live `workers.standalone` processes started (directly or not) by this process."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "workers.standalone" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return found


# -- keys ----------------------------------------------------------------------------------


async def test_number_keys_pick_the_scenario_and_the_header_shows_it(home: Path) -> None:
    """Keys 1, 2 and 3 choose the scenario, and the header and the title name it."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        for key, sid in (("2", "revoked"), ("3", "after-answer"), ("1", "hand-refund")):
            await pilot.press(key)
            await settle(pilot)
            sc = SCENARIOS[sid]
            assert app.scenario == sid
            assert f"[{key}] {sc.title}" in header(app)
            assert sc.story in story(app)
            assert app.title.endswith(sc.title)


@pytest.mark.parametrize("sid", list(SCENARIOS))
async def test_enter_runs_the_scenario_and_every_column_shows_its_result(
    home: Path, sid: str
) -> None:
    """Enter runs the chosen scenario in every column; each card ends as the truth table says."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        assert run.scenario == sid
        assert run.error is None
        assert run.all_as_predicted
        assert "finished (MOCK)" in header(app)
        for column in ("standard", "interlock", "checked"):
            card = card_of(app, column)
            assert "RESULT" in card
            assert VERDICTS[sid][column] in card
            assert f"reported: {REPORTED[sid][column]}" in card
            assert "done" in pane_part(app, column, "status")
            # Only the checked column's stop after Stripe answered is a false alarm.
            false_alarm = (sid, column) == ("after-answer", "checked")
            assert ("but its own refund went through" in card) == false_alarm


async def test_m_toggles_mock_and_labels_everything_mock(home: Path, hold: Hold) -> None:
    """m switches to mock: banner, title, badges, "MOCK." lines, "(MOCK)" status; m again leaves."""
    config = resolve(
        mode="live",
        env={
            "INTERLOCK_HOME": str(home),
            "STRIPE_SECRET_KEY": "sk_test_" + "0" * 24,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        },
    )
    app = new_app(config, optional=OPTIONAL, hold=hold)
    async with app.run_test(size=SIZE) as pilot:
        assert banner(app).startswith("LIVE")
        assert "claim 15 s" in banner(app)  # the live settings line
        assert not app.title.startswith("MOCK: ")

        await pilot.press("m")
        await settle(pilot)
        assert app.config.mode == "mock"
        assert "▞▚ MOCK ▞▚" in banner(app)
        assert "LIVE" not in banner(app) and "claim" not in banner(app)
        assert app.title.startswith("MOCK: ")
        for column in ("standard", "interlock", "checked"):
            assert pane_part(app, column, "title").endswith(" MOCK ")

        run = await start(pilot)
        await hold.reached(pilot, 3)
        assert run.mode == "mock"
        assert "running (MOCK)" in header(app)
        assert header(app).startswith("MOCK ")
        for column in ("standard", "interlock", "checked"):
            lines = pane_part(app, column, "event-lines").splitlines()
            assert lines and all(line.startswith("MOCK. ") for line in lines)
            assert pane_part(app, column, "status").startswith("MOCK. ")

        hold.release()
        await finish(pilot, run)
        assert "finished (MOCK)" in header(app)
        assert "LIVE" not in banner(app) and "claim" not in banner(app)
        assert app.title.startswith("MOCK: ")
        for column in ("standard", "interlock", "checked"):
            assert pane_part(app, column, "title").endswith(" MOCK ")
            for part in ("event-lines", "card"):
                lines = pane_part(app, column, part).splitlines()
                assert lines and all(line.startswith("MOCK. ") for line in lines), part

        await pilot.press("m")
        await settle(pilot)
        assert app.config.mode == "live"
        assert banner(app).startswith("LIVE")
        assert not app.title.startswith("MOCK: ")
        for column in ("standard", "interlock", "checked"):
            assert "MOCK" not in pane_part(app, column, "title")


@pytest.mark.parametrize("size", [SIZE, (100, 30), (80, 24)])
async def test_one_banner_text_per_mode(home: Path, size: tuple[int, int]) -> None:
    """The offline banner reads the same at start and after m twice, at any width, and the
    mock one fits 80 columns."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home)})
    app = new_app(config)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        first = banner(app)
        await pilot.press("m")
        await settle(pilot)
        assert banner(app).startswith("▞▚ MOCK ▞▚") and len(banner(app)) <= 78
        await pilot.press("m")
        await settle(pilot)
        assert banner(app) == first
        assert first.startswith("OFFLINE REHEARSAL: local Stripe emulator") and len(first) <= 78


@pytest.mark.parametrize("size", [(160, 45), (100, 30), (80, 24)], ids=str)
async def test_the_app_opens_with_all_three_columns(home: Path, size: tuple[int, int]) -> None:
    """The app as the CLI opens it has the hand-written check column: side by side where
    the width shows three, one of three at a time below that."""
    app = make_app(mock_config(home))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        shown = [p.column_name for p in app.query(ColumnPane) if p.display]
        if size[0] >= 100:
            assert shown == ["standard", "interlock", "checked"]
        else:
            assert shown == ["standard"]
            assert "(1/3)" in plain(app.query_one("#col-standard .title", Static))
        run = await start(pilot)
        await finish(pilot, run)
        assert [c.name for c in run.columns] == ["standard", "interlock", "checked"]


async def test_c_toggles_the_checked_column(home: Path) -> None:
    """c shows the third column (and the next run has it); c again hides it."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        checked = app.query_one("#col-checked", ColumnPane)
        assert not checked.display
        assert "Hand-written check" not in columns_text(app)

        await pilot.press("c")
        await settle(pilot)
        assert checked.display
        assert "checked column" in header(app)
        assert "Hand-written check" in columns_text(app)
        assert message(app) == "Hand-written check shown in the next run."

        run = await start(pilot)
        await finish(pilot, run)
        assert [c.name for c in run.columns] == ["standard", "interlock", "checked"]
        assert "RESULT" in card_of(app, "checked")

        await pilot.press("c")
        await settle(pilot)
        assert not checked.display
        assert "checked column" not in header(app)
        assert "Hand-written check" not in columns_text(app)


@pytest.mark.parametrize("mode", ["mock", "offline"])
async def test_t_says_why_temporal_cannot_run_here(
    home: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Where Temporal cannot run, t says why on the message line and the palette says it too;
    the header stays one line, without that note."""
    app = new_app(resolve(mode=mode, env={"INTERLOCK_HOME": str(home)}))
    if mode == "offline":
        app.temporal_missing = "the Temporal engine needs temporalio"
    why = (
        "the Temporal engine needs temporalio"
        if mode == "offline"
        else "mock runs are simulated in-process, without Temporal"
    )
    async with app.run_test(size=SIZE) as pilot:
        seen = notices(app, monkeypatch)
        await settle(pilot)
        keys = {k.key: k for k in app.query(FooterKey)}
        assert "t" in keys
        assert "t off" not in header(app) and "temporalio" not in header(app)
        palette = {name: help_text for name, help_text, _ in app.palette_commands()}
        assert palette["engine: switch"].endswith(f"(off: {why})")

        await pilot.press("t")
        await settle(pilot)
        assert app.config.engine == "standalone"
        assert app.run_on_screen is None
        assert app.engine.runs == {}
        assert seen == [f"Temporal is off: {why}."]
        assert message(app) == f"Temporal is off: {why}."


async def test_s_saves_an_svg_under_interlock_home_and_says_where(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s writes an SVG of the screen under INTERLOCK_HOME/demo/screenshots and names the file
    (from the working folder, as short as it is still found)."""
    monkeypatch.chdir(home.parent)
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        seen = notices(app, monkeypatch)
        await pilot.press("s")
        await settle(pilot)
        shots = list((home / "demo" / "screenshots").glob("*.svg"))
        assert len(shots) == 1
        assert shots[0].name.startswith("hand-refund-")
        assert shots[0].read_text().startswith("<svg")
        assert "Standard agent" in shots[0].read_text().replace("&#160;", " ")
        # Plain `rsvg-convert` collapses runs of spaces unless the root element says not to.
        root = shots[0].read_text().split(">", 1)[0]
        assert 'xml:space="preserve"' in root
        assert shots[0].stat().st_mode & 0o777 == 0o600
        assert seen == [f"Screenshot saved: home/demo/screenshots/{shots[0].name}"]


@pytest.mark.parametrize("keys", [("z", "z"), ("z", "right", "z"), ("z", "left", "z", "z", "z")])
@pytest.mark.parametrize("size", [SIZE, (100, 30)], ids=["160", "100"])
async def test_s_after_a_zoom_shows_every_columns_events(
    home: Path, size: tuple[int, int], keys: tuple[str, ...]
) -> None:
    """Zoomed in and out (another column chosen on the way), the screen and an s screenshot
    show each column's newest events, the Interlock column's among them."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        (shot,) = (home / "demo" / "screenshots").glob("*.svg")
        svg = shot.read_text().replace("&#160;", " ")
        rows = screen_text(app).splitlines()
        for col in run.columns:
            log = app.query_one(f"#col-{col.name} .events")
            shown = [
                r[log.region.x : log.region.right] for r in rows[log.region.y : log.region.bottom]
            ]
            assert any(re.search(r"\ds outcome", row) for row in shown), (col.name, shown)
        # The outcome event ("outcome: sent", "outcome…"), not the phase line ("outcome  sent").
        events = re.findall(r"outcome[:…]", svg)
        assert len(events) >= len(run.columns), "an event log is blank in the SVG"


async def test_s_saves_an_svg_that_keeps_its_spaces_in_any_renderer(
    home: Path, tmp_path: Path
) -> None:
    """The app's SVG says `xml:space="preserve"`, as the screenshots command's do, so that
    plain `rsvg-convert` keeps the runs of spaces between words on the cards."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await settle(pilot)
    (shot,) = (home / "demo" / "screenshots").glob("*.svg")
    svg = shot.read_text(encoding="utf-8")
    assert 'xml:space="preserve"' in svg.partition(">")[0], svg[:200]
    assert (shot.stat().st_mode & 0o777) == 0o600
    tool = shutil.which("rsvg-convert")
    if tool is None:
        pytest.skip("rsvg-convert is not installed: the SVG was checked, not rendered")
    png = tmp_path / "shot.png"
    subprocess.run([tool, "-o", str(png), str(shot)], check=True, timeout=60)
    assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("zoomed", [False, True], ids=["all", "zoomed"])
@pytest.mark.parametrize("size", [(160, 45), (100, 30), (80, 24)], ids=str)
async def test_the_key_bar_fits_its_width_and_nothing_overlaps(
    home: Path, size: tuple[int, int], zoomed: bool
) -> None:
    """At each projector size, zoomed (z) or not, the footer's keys (the palette's too) sit
    side by side inside the screen: none covers another, none runs off the edge. At 160
    every key is there; zoomed or one column at a time, left and right too."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        await finish(pilot, await start(pilot, "1"))
        if zoomed:
            await pilot.press("z")
            await settle(pilot)
            assert app.zoomed
        keys = [k for k in app.query(FooterKey) if k.display]
        regions = sorted((k.region for k in keys), key=lambda r: r.x)
        assert regions, "no keys in the footer"
        for left, right in itertools.pairwise(regions):
            assert left.right <= right.x, f"{left} overlaps {right} at {size}"
        assert regions[-1].right <= size[0], f"{regions[-1]} runs off the {size[0]} columns"
        shown = {k.key for k in keys}
        assert {"enter", "1", "2", "3", "q", "p", "ctrl+p"} <= shown, shown
        if size[0] >= 160:
            assert {"z", "c", "m", "t", "s"} <= shown, shown
        if zoomed or app.layout_name == "single":
            assert {"left", "right"} <= shown, shown


@pytest.mark.parametrize("key", ["q", "ctrl+c", "ctrl+q"])
async def test_q_quits_at_once_and_leaves_no_worker(home: Path, key: str) -> None:
    """q during an offline run with real workers exits at once, and no worker process is
    left: the run is stopped, not waited for (left alone, it would sit out a minute's claim).
    Ctrl-C (what a presenter presses by reflex) and Textual's ctrl+q do the same, once."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home), **LONG_CLAIM})
    app = new_app(config, optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await _until(pilot, standalone_workers, "a worker process")
        await pilot.press(key)
    assert app.return_value == 0
    assert standalone_workers() == []
    assert await asyncio.to_thread(run.wait, RUN_TIMEOUT_S), "the stopped run did not end"
    assert run.status == "failed"
    assert run.error is not None and run.error.endswith("the run was stopped"), run.error


async def test_a_is_offered_only_after_a_refusal(home: Path) -> None:
    """a is hidden before a run and after a run in which interlock did not refuse."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.check_action("reapprove", ()) is False
        assert "a" not in {k.key for k in app.query(FooterKey)}

        run = await start(pilot, "3")
        await finish(pilot, run)
        outcome = run.column("interlock").outcome
        assert outcome is not None and outcome.status == "adopted"
        assert app.check_action("reapprove", ()) is False
        assert "a" not in {k.key for k in app.query(FooterKey)}
        events = len(run.column("interlock").events)
        await pilot.press("a")
        await settle(pilot)
        assert len(run.column("interlock").events) == events


@pytest.mark.parametrize("sid", ["hand-refund", "revoked"])
async def test_a_reapproves_after_interlock_refused(home: Path, sid: str) -> None:
    """After a refusal, a sends the refund under a new approval; the receipt names the refusal."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        col = run.column("interlock")
        assert col.outcome is not None and col.outcome.status == "refused"
        refused = col.outcome.action_id
        assert app.check_action("reapprove", ()) is True
        assert "a" in {k.key for k in app.query(FooterKey)}

        await pilot.press("a")
        await asyncio.wait_for(app.workers.wait_for_complete(), RUN_TIMEOUT_S)
        await settle(pilot)

        assert col.outcome is not None and col.outcome.status == "sent"
        assert col.outcome.reapproves == refused
        assert col.receipt is not None
        assert col.receipt["outcome"] == "sent"
        assert col.receipt["context"]["reapproves"] == refused
        assert col.lease_id is not None
        card = card_of(app, "interlock")
        assert "reported: sent" in card
        assert f"re-approves the refused {refused[:12]}… (receipt 1)" in card
        assert "Receipt 2 of this run: sent" in card
        assert (
            "Re-approved: a person approved $20 again; Interlock sent a second refund "
            "under the new approval ($40.00 in all, as the person chose)"
            if sid == "hand-refund"
            else "Re-approved: a person approved $20 again"
        ) in card.replace("\nMOCK. ", " ")
        assert col.stripe is not None
        assert col.stripe is not None
        agent_rows = [r for r in col.stripe.refunds if r.by == "agent"]
        assert [r.id for r in agent_rows] == [col.outcome.refund_id]
        assert f"$20.00  agent  {col.outcome.refund_id}" in card
        # The re-approval is support's signed grant, and the card says who signed it.
        assert "✓ approval: ok, signed by support" in card
        (signature,) = [c for c in col.receipt["checks"] if c["name"] == "approval_signature"]
        assert signature["passed"] and signature["observed"].startswith("signed by support")
        assert "a person approves the $20 refund again" in pane_part(
            app, "interlock", "event-lines"
        )
        assert app.check_action("reapprove", ()) is False


# -- runs on screen ------------------------------------------------------------------------


async def test_a_second_start_while_a_run_is_going_is_refused(
    home: Path, hold: Hold, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enter (or another key that changes the run) while a run is going only says why not."""
    app = new_app(mock_config(home), hold=hold)
    async with app.run_test(size=SIZE) as pilot:
        seen = notices(app, monkeypatch)
        run = await start(pilot)
        await hold.reached(pilot, 2)

        await pilot.press("enter")
        await settle(pilot)
        assert len(app.engine.runs) == 1
        assert app.run_on_screen is run
        assert seen == [f"Not started: run {run.run_id} is still going; one run at a time."]

        await pilot.press("2", "m", "c")
        await settle(pilot)
        assert app.scenario == "hand-refund"
        assert app.config.mode == "mock"
        assert not app.optional
        assert seen[1:] == [
            "A run is going: choose a scenario after it finishes.",
            "A run is going: switch mock after it finishes.",
            "A run is going: toggle the checked column after it finishes.",
        ]

        hold.release()
        await finish(pilot, run)
        second = await start(pilot)
        assert second is not run
        await finish(pilot, second)


def _elapsed(app: DemoApp) -> str:
    match = re.search(r"(running|finished)(?: \(MOCK\))? · (\d+\.\d) s", header(app))
    assert match is not None, header(app)
    return match.group(2)


async def test_elapsed_time_grows_while_running_and_stops_when_finished(
    home: Path, hold: Hold
) -> None:
    """The header's clock moves while a run is going and stands still once it finished."""
    app = new_app(mock_config(home), hold=hold)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await hold.reached(pilot, 2)
        first = _elapsed(app)
        await pilot.pause(0.35)
        assert _elapsed(app) != first

        hold.release()
        await finish(pilot, run)
        done = _elapsed(app)
        assert abs(float(done) - run.elapsed_s) <= 0.051
        await pilot.pause(0.35)
        assert _elapsed(app) == done
        await pilot.pause(0.35)
        assert _elapsed(app) == done


async def test_a_late_update_from_an_old_run_does_not_repaint_the_new_one(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RunChanged of an earlier run, arriving after a new run is on screen, is dropped."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        old = await start(pilot, "1")
        await finish(pilot, old)
        new = await start(pilot, "2")
        await finish(pilot, new)
        before = {c: pane_part(app, c, "event-lines") for c in ("standard", "interlock")}
        for col in new.columns:
            assert str(col.payment_intent) in before[col.name]
            assert str(old.column(col.name).payment_intent) not in before[col.name]

        painted: list[str] = []
        show = ColumnPane.show

        def spy(pane: ColumnPane, run: RunSnapshot, col: Column) -> None:
            painted.append(run.run_id)
            show(pane, run, col)

        monkeypatch.setattr(ColumnPane, "show", spy)
        app.post_message(RunChanged(old))
        await settle(pilot)

        assert painted == []
        assert app.run_on_screen is new
        assert {c: pane_part(app, c, "event-lines") for c in before} == before
        assert "[2] Approval revoked" in header(app)


async def test_event_lines_are_appended_never_redrawn(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each update of a column's events keeps the lines already shown and adds to them."""
    app = new_app(mock_config(home))
    app.engine.mock_pace_s = 0.01  # several updates per column, as at the talk
    shown: dict[str, list[str]] = {}
    update = Static.update

    def spy(widget: Static, content: Any = "", *, layout: bool = True) -> None:
        if widget.has_class("event-lines") and widget.parent is not None:
            pane = widget.parent.parent
            assert isinstance(pane, ColumnPane)
            shown.setdefault(pane.column_name, []).append(str(content))
        update(widget, content, layout=layout)

    async with app.run_test(size=SIZE) as pilot:
        monkeypatch.setattr(Static, "update", spy)
        run = await start(pilot)
        await finish(pilot, run)
    for column in ("standard", "interlock"):
        texts = [t for t in shown[column] if t]
        assert len(texts) >= 2, column
        for earlier, later in itertools.pairwise(texts):
            assert later.startswith(earlier) and len(later) > len(earlier)


# -- fits the room -------------------------------------------------------------------------


async def test_the_newest_event_stays_in_view_when_the_card_appears(home: Path) -> None:
    """At 160x45, after the result card took room from the events, their last line is on screen."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    app.engine.mock_pace_s = 0.02  # the card arrives in its own update, after the last event
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        text = screen_text(app)
        assert "outcome: refused: the payment's" in text  # interlock's last event
        assert "outcome: sent" in text  # standard's last event


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_at_80x24_one_column_at_a_time_and_every_verdict_in_the_strip(
    home: Path, theme: str
) -> None:
    """At 80x24: one column at a time, the Standard column (the $40 card) first, left/right
    switch it, and the verdict strip shows all three verdicts at once, with the money and a
    reason, above the footer (where the money was read in the strip's border)."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=(80, 24)) as pilot:
        app.theme = theme
        run = await start(pilot)
        await finish(pilot, run)
        assert "MOCK" in screen_text(app).splitlines()[0]
        shown = [p.column_name for p in app.query(ColumnPane) if p.display]
        assert shown == ["standard"]
        text = screen_text(app)
        assert "◀ Standard agent (1/3) ▶" in text
        assert "$40.00: agent $20 + hand $20" in text
        assert "Wanted in memory: one $20 refund, the hand one." in text  # a mock run
        # Where the money was read is said once, in the strip's border, at this width.
        assert "Refunded in memory" in text
        for line in (
            "Standard   $40.00  ✗ retried blindly: $40.00",
            "Interlock  $20.00  ✓ saw the hand refund: refused",
            "Checked    $20.00  ✓ re-checked, saw the hand refund: stopped",
        ):
            assert line in text, line
        for key, column in (("right", "interlock"), ("right", "checked"), ("left", "interlock")):
            await pilot.press(key)
            await settle(pilot)
            assert [p.column_name for p in app.query(ColumnPane) if p.display] == [column]
            assert VERDICTS["hand-refund"][column] in screen_text(app), column


# Where each mode's money is read back, as docs/stage.md names it.
READ_AT = {"live": "Stripe", "offline": "emulator", "mock": "memory"}


@pytest.mark.parametrize(("size", "compact"), [((80, 24), True), ((160, 45), False)])
async def test_the_card_names_where_the_money_was_read_at_every_width(
    home: Path, size: tuple[int, int], compact: bool
) -> None:
    """The compact card (80x24) and the full one (160x45) name the same place on their RESULT
    line, for a run shown as each mode: Stripe live, the emulator offline, memory in mock,
    and no other mode's place."""
    app = new_app(mock_config(home))
    async with app.run_test(size=size) as pilot:
        run = await start(pilot, "3")
        await finish(pilot, run)
        pane = app.query_one("#col-standard", ColumnPane)
        assert pane.compact is compact
        snapshot = run.snapshot()
        for mode, place in READ_AT.items():
            shown = dataclasses.replace(snapshot, mode=mode)
            col = shown.column("standard")
            assert col is not None
            pane.show(shown, col)
            await settle(pilot)
            card = card_of(app, "standard")
            result = next(line for line in card.splitlines() if "RESULT" in line)
            assert place in result, f"{mode}: {result}"
            others = [p for m, p in READ_AT.items() if m != mode and p in result]
            assert others == [], f"{mode}: {result}"


# Who answers the refund calls in each mode, as the card names who replayed a refund.
ANSWERED_BY = {"live": "Stripe", "offline": "the emulator", "mock": "the mock"}


@pytest.mark.parametrize(
    ("size", "compact"), [((80, 24), True), ((100, 30), True), ((160, 45), False)]
)
async def test_the_control_standard_card_says_the_key_was_replayed(
    home: Path, size: tuple[int, int], compact: bool
) -> None:
    """In the control the standard agent sends again and gets its first refund back: at
    every width its phase lines say the answer was the same refund and the verdict strip
    that one refund came of two sends; the full card says who replayed it under the same
    key, for a run shown as each mode (a compact card, cut at the bottom, leaves it out)."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        run = await start(pilot, "3")
        await finish(pilot, run)
        pane = app.query_one("#col-standard", ColumnPane)
        assert pane.compact is compact
        assert "answer  the same refund" in pane_part(app, "standard", "story")
        standard = next(line for line in verdicts(app).splitlines() if "Standard" in line)
        assert standard.endswith("✓ sent twice, one refund: the key replayed"), standard
        snapshot = run.snapshot()
        for mode, who in ANSWERED_BY.items():
            shown = dataclasses.replace(snapshot, mode=mode)
            col = shown.column("standard")
            assert col is not None
            pane.show(shown, col)
            await settle(pilot)
            card = " ".join(card_of(app, "standard").split())
            replayed = f"sent twice: {who} replayed its first answer under the same key"
            assert (f"{replayed}, no second refund" in card) is not compact, f"{mode}: {card}"
            assert ("replayed" in card) is not compact, f"{mode}: {card}"


@pytest.mark.parametrize(("size", "layout"), [((100, 30), "compact"), ((160, 45), "wide")])
async def test_three_columns_side_by_side_down_to_100_wide(
    home: Path, size: tuple[int, int], layout: str
) -> None:
    """From 100 cells wide the three columns sit side by side (compact cards below 160); the
    header is one line; the footer keeps run, scenarios and quit; z zooms one column."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        assert app.layout_name == layout
        panes = list(app.query(ColumnPane))
        assert [p.column_name for p in panes] == ["standard", "interlock", "checked"]
        assert len({p.region.y for p in panes}) == 1  # one row, side by side
        assert app.query_one(RunHeader).region.height == 1
        text = screen_text(app)
        footer = text.splitlines()[-1]
        for key in ("⏎ Run", "1 Hand refund", "3 After answer", "q Quit"):
            assert key in footer, key
        card = card_of(app, "standard")
        assert ("$40.00: agent $20 + hand $20" in card) == (layout == "compact")
        assert "Standard   $40.00 in memory  ✗ retried blindly: $40.00" in text

        await pilot.press("z")
        await settle(pilot)
        assert [p.column_name for p in app.query(ColumnPane) if p.display] == ["standard"]
        await pilot.press("right")
        await settle(pilot)
        assert [p.column_name for p in app.query(ColumnPane) if p.display] == ["interlock"]
        await pilot.press("z")
        await settle(pilot)
        assert len([p for p in app.query(ColumnPane) if p.display]) == 3


async def test_at_200x50_every_verdict_is_on_screen_at_once(home: Path) -> None:
    """On a large terminal the three columns sit side by side, each verdict visible."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=(200, 50)) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        assert not app.query_one("#columns").has_class("-narrow")
        text = screen_text(app)
        for column in ("standard", "interlock", "checked"):
            verdict = (
                f"{VERDICTS['hand-refund'][column]}   reported: {REPORTED['hand-refund'][column]}"
            )
            assert verdict in text, column


# -- the keys panel ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(160, 45), (80, 24)], ids=str)
async def test_question_mark_lists_every_key_and_escape_closes_it(
    home: Path, size: tuple[int, int]
) -> None:
    """? lists every key of the app, those that do nothing yet (space, a, left/right before a
    run at 160) among them, marked "(not now)"; escape closes the list, and so does ?."""
    app = new_app(mock_config(home))
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
        listed = {row.keys: row for row in app.screen.rows}
        every = {app.get_key_display(b) for b in app.BINDINGS if isinstance(b, Binding)}
        assert every | {"^p", "^q"} <= set(listed), every - set(listed)
        for key in ("space", "a"):
            assert not listed[key].available
        assert listed["←"].available == (size[0] < 100)  # one column at a time at 80
        if size[0] >= 160:  # narrower, the line wraps at words
            text = screen_text(app)
            assert "Presenter mode: let the run go on to its next phase (not now)" in text
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, KeysScreen)
        await pilot.press("question_mark")
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert not isinstance(app.screen, KeysScreen)
        assert app.is_running


async def test_the_palettes_keys_command_opens_the_apps_keys_panel(home: Path) -> None:
    """The palette's one "Keys" command opens the app's list (Textual's own panel, which
    escape does not close and which lists only the keys available that moment, is gone)."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        commands = [c for c in app.get_system_commands(app.screen) if c.title == "Keys"]
        assert len(commands) == 1
        commands[0].callback()
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)


# -- the command palette -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "switch"), [("emulate 24h", "emulate_24h"), ("no lookup", "no_lookup")]
)
async def test_enter_in_the_palette_chooses_the_command(
    home: Path, typed: str, switch: str
) -> None:
    """In the command palette, enter chooses the highlighted command: the switch is set and no
    run starts behind the palette."""
    app = new_app(mock_config(home))
    assert DemoCommands in app.COMMANDS
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*typed)

        def highlighted() -> bool:
            # The palette searches in a worker: wait until it highlights the command.
            hits = app.screen.query_one(CommandList)
            if hits.highlighted is None:
                return False
            option = hits.get_option_at_index(hits.highlighted)
            return isinstance(option, Command) and option.hit.text == f"switch: {typed}"

        await _until(pilot, highlighted, "the palette's hit")
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, CommandPalette)
        assert app.engine.runs == {}, "enter started a run behind the palette"
        assert getattr(app.config.switches, switch) is True
        assert "EMULATED" in banner(app)
        assert message(app).startswith("Emulated switches for the next run:")


async def test_ctrl_c_quits_from_the_palette_and_q_typed_there_does_not(home: Path) -> None:
    """In the command palette q is a letter of the search, not quit; Ctrl-C still quits."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert isinstance(app.screen, CommandPalette)
        await pilot.press("q")
        await settle(pilot)
        assert app.is_running and isinstance(app.screen, CommandPalette)
        await pilot.press("ctrl+c")
    assert app.return_value == 0


async def test_the_palette_shows_the_pip_hint_as_the_message_does(home: Path) -> None:
    """Without the Temporal extra the palette's engine command shows the same install hint
    as `t`'s message, brackets and all."""
    app = new_app(resolve(mode="offline", env={"INTERLOCK_HOME": str(home)}))
    app.temporal_missing = (
        "the Temporal engine needs temporalio: pip install 'interlock-demo[temporal]'"
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await settle(pilot)
        await pilot.press(*"engine")

        def shown() -> bool:
            hits = app.screen.query_one(CommandList)
            return hits.option_count > 0 and isinstance(hits.get_option_at_index(0), Command)

        await _until(pilot, shown, "the palette's hit")
        option = app.screen.query_one(CommandList).get_option_at_index(0)
        assert isinstance(option, Command)
        help_text = Content.from_markup(option.hit.help or "").plain
        assert help_text.endswith("pip install 'interlock-demo[temporal]')"), help_text


async def test_a_long_message_is_not_cut_at_160(home: Path) -> None:
    """A message longer than the screen is wide wraps onto a second line, its end on screen."""
    app = new_app(mock_config(home))
    long = "Live mode needs STRIPE_SECRET_KEY " + "and more words " * 8 + "THE_END."
    async with app.run_test(size=SIZE) as pilot:
        app.notify(long, severity="error")
        await settle(pilot)
        assert "THE_END." in screen_text(app)
        assert app.query_one(MessageLine).region.height == 2


# -- the lesson: the wait, the phases, the verdicts ----------------------------------------


async def test_offline_run_counts_the_claim_wait_down_with_honest_labels(home: Path) -> None:
    """Offline, real workers: while Interlock waits for the dead worker's claim, large digits
    count down every tick under a caption that says why; events and cards name the emulator,
    and Interlock never shows a POST before a kill at before-send."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home), **LONG_CLAIM})
    app = new_app(config, hold_s=0.3)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        pane = app.query_one("#col-interlock", ColumnPane)
        await _until(pilot, lambda: pane.shown_state == "waiting", "the countdown")
        readings: list[float] = []

        def moved() -> bool:
            readings.append(float(str(pane.query_one(Digits).value).rstrip("s")))
            return len(set(readings)) >= 3

        await _until(pilot, moved, f"the countdown moving (it read {readings})")
        assert pane.shown_state == "waiting"
        assert readings == sorted(readings, reverse=True), readings
        caption = pane_part(app, "interlock", "caption")
        assert caption == "waiting: the dead worker's refund request could still land"
        # The standard column does not wait: its card is drawn during Interlock's wait.
        await _until(pilot, lambda: card_of(app, "standard"), "the standard card")
        card = card_of(app, "standard")
        assert "read back from the emulator" in card and "Stripe" not in card
        for col in run.columns:
            texts = [e.text for e in col.events]
            assert not any("Stripe answered" in t for t in texts), col.name
        interlock = [e.text for e in run.column("interlock").events]
        kill = interlock.index("SIGKILL at before-send")
        assert not any("POST /v1/refunds" in t for t in interlock[:kill])
        standard = [e.text for e in run.column("standard").events]
        assert any(t.startswith("the emulator answered: refund") for t in standard)
        await pilot.press("q")
    assert await asyncio.to_thread(run.wait, RUN_TIMEOUT_S), "the stopped run did not end"


@pytest.mark.parametrize("sid", ["hand-refund", "after-answer"])
async def test_mock_says_its_claim_wait_is_simulated_and_names_no_stripe(
    home: Path, sid: str
) -> None:
    """Mock: the claim wait is said to be simulated (no "pid 0" countdown), and no event or
    card says Stripe answered, shows a POST to it or found a refund at it."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        texts = [e.text for c in run.columns for e in c.events]
        assert not any("Stripe" in t or "POST" in t or "(pid 0)" in t for t in texts)
        for col in run.columns:
            assert "Stripe" not in card_of(app, col.name), col.name
        simulated = re.compile(
            r"simulated: waits out the dead worker's claim, \d+\.\d s on the mock clock "
            r"\(no real time passes\)"
        )
        assert any(simulated.fullmatch(t) for t in texts)
        assert "wait  mock clock" in pane_part(app, "interlock", "story")


def interlock_column(
    mode: str, state: ColumnState, workers: list[WorkerInfo], events: list[Event]
) -> tuple[RunSnapshot, Column]:
    """A snapshot of a hand-refund run of `mode` with only the interlock column, as given."""
    col = Column("interlock", "Interlock", state=state, workers=workers)
    col.events = events
    run = Run(
        mode=mode,
        engine="standalone",
        scenario="hand-refund",
        title=SCENARIOS["hand-refund"].title,
        emulated=[],
        settings={},
        columns=[col],
        run_id=f"run_{mode}",
    )
    snapshot = run.snapshot()
    return snapshot, snapshot.columns[0]


class PaneClock:
    """The panes' clock, moved only by the test: a held state lasts exactly as it says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class StatusLog:
    """Every state each column's status line took, with its text and the pane clock's time."""

    def __init__(self, clock: PaneClock) -> None:
        self.clock = clock
        self.shown: dict[str, list[tuple[str, str, float]]] = {}
        self.verdicts_at: float | None = None
        self.seen: list[ColumnPane.StatusShown] = []

    def hook(self, message: Any) -> None:
        """The app's message hook: note each status change."""
        if isinstance(message, ColumnPane.StatusShown):
            if message in self.seen:
                return  # the hook hears a message at each widget it passes
            self.seen.append(message)
            shown = self.shown.setdefault(message.pane.column_name, [])
            if message.state == "idle":
                shown.clear()  # the pane was emptied for the run
            elif not shown or shown[-1][:2] != (message.state, message.text):
                shown.append((message.state, message.text, self.clock.now))


async def play_out_the_holds(pilot: Pilot[Any], clock: PaneClock, hold_s: float) -> None:
    """Move the panes' clock on a hold at a time until every column caught up (a bound on
    the steps, not a wait on time)."""
    app = pilot.app
    assert isinstance(app, DemoApp)
    for _ in range(50):
        panes = list(app.query(ColumnPane))
        if all(p.caught_up for p in panes):
            return
        clock.now += hold_s / 2
        for pane in panes:
            pane.catch_up()
        await settle(pilot)
    raise AssertionError("the columns never caught up")


def pane_app(config: DemoConfig, hold_s: float, clock: PaneClock, **kw: Any) -> DemoApp:
    """An app whose panes hold states `hold_s` on `clock`."""
    app = new_app(config, hold_s=hold_s, **kw)
    app.phase_clock = clock
    return app


def assert_every_kill_held(log: StatusLog, run: Run, hold_s: float) -> None:
    """Each worker a signal ended shows `exit -9 (SIGKILL) · killed`, then `restarting`, each
    for at least `hold_s`, before the next worker's state; the verdicts come after."""
    for col in run.columns:
        shown = log.shown[col.name]
        kills = [w for w in col.workers if w.exit_code is not None and w.exit_code < 0]
        assert kills, f"{col.name}: the scenario kills no worker"
        at = 0
        for worker in kills:
            killed = next(i for i in range(at, len(shown)) if shown[i][0] == "killed")
            state, text, began = shown[killed]
            assert "exit -9 (SIGKILL)" in text and text.endswith("killed"), (col.name, text)
            if worker.pid is not None:
                assert f"pid {worker.pid}" in text, (col.name, text)
            state, text, restarted = shown[killed + 1]
            assert state == "restarting", (col.name, shown)
            assert "exit -9 (SIGKILL)" in text, (col.name, text)
            assert restarted - began >= hold_s, (col.name, shown)
            assert shown[killed + 2][2] - restarted >= hold_s, (col.name, shown)
            at = killed + 2
        assert shown[-1][0] == "done", (col.name, shown)
        assert log.verdicts_at is not None and log.verdicts_at >= shown[-1][2]


@pytest.mark.parametrize("sid", list(SCENARIOS))
@pytest.mark.parametrize("size", [SIZE, (100, 30), (80, 24)], ids=["160", "100", "80"])
async def test_sigkill_and_restarting_stay_on_screen_for_the_hold(
    home: Path, sid: str, size: tuple[int, int]
) -> None:
    """A mock run restarts its killed workers at once, yet every column shows `exit -9
    (SIGKILL) · killed`, then `restarting`, each for the whole hold (on a clock the test
    moves), read from the column's workers; the verdict strip and the cards wait for it."""
    hold_s = 2.0
    clock = PaneClock()
    log = StatusLog(clock)
    app = pane_app(mock_config(home), hold_s, clock, optional=OPTIONAL)
    async with app.run_test(size=size, message_hook=log.hook) as pilot:
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        assert not app.query_one(VerdictStrip).display, "verdicts before the kill was shown"
        for col in run.columns:
            assert card_of(app, col.name) == "", col.name
        await play_out_the_holds(pilot, clock, hold_s)
        assert app.query_one(VerdictStrip).display
        log.verdicts_at = clock.now
        assert_every_kill_held(log, run, hold_s)
        for col in run.columns:
            assert card_of(app, col.name) != "", col.name


async def test_a_kill_heard_of_late_never_draws_an_event_twice(home: Path) -> None:
    """The view hears of a kill (the status holds it) before the restart; the restarted
    worker's events then arrive in one snapshot, the restart queued behind the hold at a
    moment before events already drawn. Each event is still drawn once, in order (in mock
    runs the restarted worker's first line showed twice at 160 and 100)."""
    clock = PaneClock()
    app = pane_app(mock_config(home), 2.0, clock)
    killed = WorkerInfo(pid=None, crash_point=None, started_at=0.0, exit_code=-9, simulated=True)
    restarted = WorkerInfo(pid=None, crash_point=None, started_at=2.7, simulated=True)
    before = [
        Event(0.1, "info", "interlock worker started (simulated)", None),
        Event(0.5, "info", "the worker is gone", None),
        Event(2.7, "info", "support refunds $20.00 by hand", None),
    ]
    after = [
        Event(2.71, "info", "interlock worker started (simulated)", None),
        Event(2.8, "info", "gate.recover(): 1 journaled action without an outcome", None),
        Event(2.9, "info", "outcome: refused", None),
    ]
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one("#col-interlock", ColumnPane)
        pane.show(*interlock_column("mock", ColumnState.KILLED, [killed], before))
        await settle(pilot)
        pane.show(
            *interlock_column("mock", ColumnState.DONE, [killed, restarted], [*before, *after])
        )
        await settle(pilot)
        await play_out_the_holds(pilot, clock, 2.0)
        lines = pane_part(app, "interlock", "event-lines").splitlines()
        texts = [line.split("s ", 1)[1] for line in lines]
        assert texts == [e.text for e in (*before, *after)], lines


@pytest.mark.parametrize("size", [SIZE, (100, 30)], ids=["160", "100"])
async def test_a_long_event_log_shows_its_newest_line_and_no_scrollbar(
    home: Path, size: tuple[int, int]
) -> None:
    """An event log longer than its column keeps its newest line in view, and no scrollbar
    thumb sits in it (on a projector the thumb read as a stray glyph in the log)."""
    app = new_app(mock_config(home))
    worker = WorkerInfo(pid=4242, crash_point=None, started_at=0.0)
    events = [Event(n / 10, "info", f"event number {n}", 4242) for n in range(80)]
    async with app.run_test(size=size) as pilot:
        app.query_one("#col-interlock", ColumnPane).show(
            *interlock_column("offline", ColumnState.RUNNING, [worker], events)
        )
        await settle(pilot)
        log = app.query_one("#col-interlock .events")
        region = log.region
        rows = screen_text(app).splitlines()[region.y : region.bottom]
        shown = [row[region.x : region.right] for row in rows]
        assert "event number 79" in shown[-1], shown[-3:]
        thumb = set("▁▂▃▄▅▆▇█▉▊▋▌▍▎▏▔")
        assert not any(thumb & set(row) for row in shown), shown


@pytest.mark.parametrize("size", [SIZE, (100, 30), (80, 24)], ids=["160", "100", "80"])
async def test_every_row_of_a_mock_card_on_screen_starts_with_mock(
    home: Path, size: tuple[int, int]
) -> None:
    """A mock run's cards and status lines, drawn three side by side (or one at a time),
    have "MOCK." at the start of every row on screen: the rows a long line wraps onto (a
    refund's id) and a status's second line (its state, below 160) too."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        rows = screen_text(app).splitlines()
        checked = 0
        for pane in app.query(ColumnPane):
            if not pane.display:
                continue
            for part in (".status", ".card"):
                region = pane.query_one(part).region
                for row in rows[region.y : region.bottom]:
                    words = row[region.x : region.right].strip()
                    if words:
                        assert words.startswith("MOCK."), (pane.column_name, words)
                        checked += 1
        assert checked >= 4


async def test_offline_status_lines_keep_their_pids_at_100x30(home: Path) -> None:
    """Offline, real workers side by side at 100x30: the status line names each killed
    worker's pid with its exit, killed and then restarting, before the new pid runs."""
    hold_s = 2.0
    clock = PaneClock()
    log = StatusLog(clock)
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home), **SHORT_TIMING})
    app = pane_app(config, hold_s, clock)
    async with app.run_test(size=(100, 30), message_hook=log.hook) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        assert run.error is None, run.error
        await play_out_the_holds(pilot, clock, hold_s)
        log.verdicts_at = clock.now
        assert_every_kill_held(log, run, hold_s)
        for col in run.columns:
            status = pane_part(app, col.name, "status")
            assert status == f"pid {col.workers[-1].pid} · exit 0\ndone", status


async def test_each_phase_is_a_line_of_its_own(home: Path) -> None:
    """Every column tells its phases in short bold lines: decision, SIGKILL, outage, restart,
    checks, outcome, in that order."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        expected = {
            "standard": ["decided", "SIGKILL", "outage", "restart", "checks", "sends", "outcome"],
            "interlock": ["decided", "SIGKILL", "outage", "restart", "wait", "checks", "outcome"],
            "checked": ["decided", "SIGKILL", "outage", "restart", "checks", "outcome"],
        }
        for column, labels in expected.items():
            lines = pane_part(app, column, "story").splitlines()
            assert [line.split()[1] for line in lines] == labels, column
        assert "checks  refunds CHANGED" in pane_part(app, "interlock", "story")
        assert "outcome  refused" in pane_part(app, "interlock", "story")


@pytest.mark.parametrize("sid", list(SCENARIOS))
async def test_the_verdict_strip_gives_money_mark_and_reason(home: Path, sid: str) -> None:
    """When a run ends, one line per column: the money, ✓/⚠/✗ and a short reason."""
    expected = {
        "hand-refund": [
            "Standard   $40.00 in memory  ✗ retried blindly: $40.00",
            "Interlock  $20.00 in memory  ✓ saw the hand refund: refused",
            "Checked    $20.00 in memory  ✓ re-checked, saw the hand refund: stopped",
        ],
        "revoked": [
            "Standard   $20.00 in memory  ✗ retried blindly: $20.00 despite the revocation",
            "Interlock   $0.00 in memory  ✓ saw the revocation: refused",
            "Checked     $0.00 in memory  ✓ re-checked, saw the revocation: stopped",
        ],
        "after-answer": [
            "Standard   $20.00 in memory  ✓ sent twice, one refund: the key replayed",
            "Interlock  $20.00 in memory  ✓ found its own refund: adopted",
            "Checked    $20.00 in memory  ⚠ re-checked, but stopped on its own refund",
        ],
    }
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.query_one(VerdictStrip).display
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        assert verdicts(app).splitlines() == [f" {line}" for line in expected[sid]]


async def assert_the_strip_is_whole_in_every_mode(pilot: Pilot[Any], run: Run) -> None:
    """The verdicts of `run` as each mode words them, as drawn: each line whole (no
    ellipsis, inside the width) on a row of its own, and the strip's top border too."""
    app = pilot.app
    assert isinstance(app, DemoApp)
    strip = app.query_one(VerdictStrip)
    snapshot = run.snapshot()
    for mode in READ_AT:
        strip.show(dataclasses.replace(snapshot, mode=mode))
        await settle(pilot)
        lines = verdicts(app).splitlines()
        top, *rows = screen_text(app).splitlines()[strip.region.y : strip.region.bottom]
        assert len(rows) == len(lines), (mode, rows)
        for line, row in zip(lines, rows, strict=True):
            assert "…" not in row, (mode, row)
            assert cell_len(line) <= app.size.width, (mode, line)
            assert row.rstrip() == line.rstrip(), (mode, row)
        assert "…" not in top, (mode, top)
        assert str(strip.border_title or "") in top, (mode, top)


@pytest.mark.parametrize("sid", list(SCENARIOS))
async def test_the_verdict_strip_is_whole_at_80_columns_in_every_mode(home: Path, sid: str) -> None:
    """At 80x24, each scenario's verdicts (and, after a refusal, the re-approved one) read
    whole in every mode's words: at Stripe (live), at the emulator (offline), in memory."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=(80, 24)) as pilot:
        run = await start(pilot, SCENARIOS[sid].key)
        await finish(pilot, run)
        await assert_the_strip_is_whole_in_every_mode(pilot, run)
        if app.check_action("reapprove", ()):
            await pilot.press("a")
            await asyncio.wait_for(app.workers.wait_for_complete(), RUN_TIMEOUT_S)
            await settle(pilot)
            assert "re-approved" in verdicts(app)
            await assert_the_strip_is_whole_in_every_mode(pilot, run)


async def test_messages_never_cover_a_verdict(home: Path) -> None:
    """At 80x24 after a run, messages go to the message line: no toast over the verdicts."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=(80, 24)) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        before = verdicts(app)
        await pilot.press("s")
        await settle(pilot)
        assert message(app).startswith("Screenshot saved: ")
        await pilot.press("t")
        await settle(pilot)
        assert list(app.screen.query(Toast)) == []
        assert message(app).startswith("Temporal is off: ")
        text = screen_text(app)
        for line in before.splitlines():
            assert line.rstrip() in text


async def test_cards_send_no_mixed_signals(home: Path) -> None:
    """A winning Interlock card shows no red ✗ (the check that refused did its job); an adopted
    one says the lookup found its refund; the checked false alarm is one ⚠ verdict."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, "1")
        await finish(pilot, run)
        card = card_of(app, "interlock")
        assert "✗" not in card
        assert "→ world check: refunds CHANGED" in card
        assert "→ refused  (approval: not reached)" in card
        run = await start(pilot, "3")
        await finish(pilot, run)
        card = card_of(app, "interlock")
        assert "reported: adopted (found its own refund in memory)" in card
        assert "✓ lookup: found its own refund" in card
        assert "→ adopted  (world check, approval: not needed)" in card
        checked = card_of(app, "checked")
        assert "⚠ right money, false alarm   reported: stopped" in checked
        assert "✓ right" not in checked
        assert "it said stopped, but its own refund went through" in checked


async def test_the_json_says_where_the_money_was_read_as_the_screen_does(home: Path) -> None:
    """Mock after-answer: Interlock's reason reads "found its own refund in memory" alike in
    the run JSON, on the card and in its outcome event; no reason says Stripe."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, "3")
        await finish(pilot, run)
        doc = run.to_json()
        interlock = next(c for c in doc["columns"] if c["name"] == "interlock")
        assert interlock["outcome"]["reason"] == "found its own refund in memory"
        assert "(found its own refund in memory)" in card_of(app, "interlock")
        assert "Stripe" not in str([c["outcome"]["reason"] for c in doc["columns"]])
        assert "$20.00 in memory" in verdicts(app)


async def test_a_receipt_is_numbered_within_its_run(home: Path) -> None:
    """The receipt is named by its place in this run (1), not by the journal's sequence."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        snapshot = run.snapshot()
        col = snapshot.columns[1]  # a copy: the run itself does not change
        assert col.receipt is not None
        col.receipt = {**col.receipt, "seq": 9}
        app.query_one("#col-interlock", ColumnPane).show(snapshot, col)
        await settle(pilot)
        card = card_of(app, "interlock")
        assert "Receipt 1 of this run: refused" in card
        assert "#9" not in card


async def test_a_failed_run_says_why_on_screen(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails as a whole shows its reason in the header and the strip."""

    def broken(*args: Any) -> None:
        raise RuntimeError("the emulator did not start: port 12111 is taken")

    monkeypatch.setattr(engine_module.Engine, "_execute_mock", broken)
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        assert "failed (MOCK) · " in header(app)
        assert header(app).count("the emulator did not start: port 12111 is taken") == 1
        assert "run failed: the emulator did not start: port 12111 is taken" in verdicts(app)


async def test_s_with_an_unwritable_home_says_so_and_the_app_goes_on(tmp_path: Path) -> None:
    """s where INTERLOCK_HOME cannot be written: a message in words, no traceback, no exit."""
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await settle(pilot)
        assert app.is_running
        assert message(app).startswith("Screenshot not saved: ")
        assert "set INTERLOCK_HOME to a folder you can write" in message(app)


# -- presenter mode ------------------------------------------------------------------------


async def _until(pilot: Pilot[Any], ok: Any, what: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not ok():
        assert time.monotonic() < deadline, f"{what} did not happen"
        await pilot.pause(0.02)
    await settle(pilot)


async def test_presenter_mode_advances_one_phase_per_press(home: Path) -> None:
    """With p on, the run waits before each phase; each space opens one: decision, kill,
    outage, restart, result. Off by default."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        assert app.presenter is False
        await pilot.press("p")
        run = await start(pilot)
        assert run.pacer is not None
        col = run.column("interlock")

        def kinds() -> list[str]:
            return [e.kind for e in col.events]

        def waiting() -> bool:
            return run.pacer is not None and run.pacer.held

        await _until(pilot, waiting, "the wait before the decision")
        assert "space: decision" in header(app)
        assert "decision" not in kinds()
        steps = [
            ("decision", lambda: "decision" in kinds() and "crash" not in kinds()),
            ("crash", lambda: "crash" in kinds() and "outage" not in kinds()),
            ("outage", lambda: "outage" in kinds() and kinds().count("start") == 1),
            ("outcome", lambda: "outcome" in kinds() and col.stripe is None),
        ]
        for what, shown in steps:
            await pilot.press("space")
            await _until(pilot, waiting, f"the wait after the {what}")
            assert shown(), what
        assert not run.finished
        await pilot.press("space")
        await finish(pilot, run)
        assert run.all_as_predicted
        assert "RESULT" in card_of(app, "interlock")


async def test_resizing_the_terminal_lays_the_columns_out_again(home: Path) -> None:
    """A projector change mid-talk: from 160x45 to 80x24 one column shows and the message
    line says so; back at 160x45 all three show and the message no longer says one."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot)
        await finish(pilot, run)
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert [p.column_name for p in app.query(ColumnPane) if p.display] == ["standard"]
        assert len(banner(app)) <= 78  # the one text fits
        assert message(app).startswith("One column at a time at this width: Standard agent")
        await pilot.resize_terminal(100, 30)
        await settle(pilot)
        assert len([p for p in app.query(ColumnPane) if p.display]) == 3
        assert message(app) == "All columns."
        await pilot.resize_terminal(*SIZE)
        await settle(pilot)
        assert len([p for p in app.query(ColumnPane) if p.display]) == 3
        assert message(app) == "All columns."


async def test_q_in_presenter_mode_leaves_no_run_waiting(home: Path) -> None:
    """q while a presenter-mode run waits for space: the app exits and the run does not hang."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(home), **SHORT_TIMING})
    app = new_app(config)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        run = await start(pilot)
        pacer = run.pacer
        assert pacer is not None
        await pilot.press("space")  # the decision: the workers start, decide and die
        await _until(pilot, lambda: pacer.held and pacer.next_phase == "kill", "the kill wait")
        await pilot.press("q")
    assert app.return_value == 0
    assert await asyncio.to_thread(run.wait, 10.0), "the run hung on the presenter's gate"
    assert standalone_workers() == []


async def test_each_scenario_has_its_key_in_the_footer_and_picks_it(home: Path) -> None:
    """The scenario keys come from `scenarios.SCENARIOS`: each shows its label in the
    footer, and pressing it picks that scenario (a new scenario needs no app change)."""
    app = new_app(mock_config(home))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footer = {k.key: k.description for k in app.query(FooterKey)}
        for sc in SCENARIOS.values():
            assert sc.key and sc.label and sc.hint, f"{sc.id} has no key, label or hint"
            assert footer.get(sc.key) == sc.label
            await pilot.press(sc.key)
            await settle(pilot)
            assert app.scenario == sc.id


async def test_the_key_bar_is_drawn_in_an_app_that_starts_unfocused(home: Path) -> None:
    """A browser tab's app starts unfocused (Textual's web driver blurs it, and the page's
    "focus" can land before that blur): its key bar is drawn all the same, every key in it."""
    app = new_app(mock_config(home))
    app.set_reactive(DemoApp.app_focus, False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.app_focus is False
        footer = {k.key for k in app.query(FooterKey)}
        assert {sc.key for sc in SCENARIOS.values()} | {"enter", "q"} <= footer, footer


async def test_outside_presenter_mode_a_run_stays_on_its_first_kill(home: Path) -> None:
    """The app's runs (not presenter mode) wait a beat after the first kill before the
    outage, so a room sees the kill even where nothing else waits (after the answer)."""
    app = make_app(mock_config(home), optional=frozenset())
    app.engine.mock_pace_s = 0.0
    app.phase_hold_s = 0.0
    assert app.engine.kill_beat_s >= 2.0
    app.engine.kill_beat_s = 0.5  # the app's beat, shortened for the test
    async with app.run_test(size=SIZE) as pilot:
        run = await start(pilot, "3")
        await finish(pilot, run)
        assert run.error is None, run.error
        for col in run.columns:
            crash = next(e.t for e in col.events if e.kind == "crash")
            outage = next(e.t for e in col.events if e.kind == "outage")
            assert outage - crash >= 0.5, (col.name, crash, outage)


async def test_z_back_at_80_columns_says_one_column_shows_not_all(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns, z and z again leave one column on screen; the message says so."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=(80, 24)) as pilot:
        seen = notices(app, monkeypatch)
        await pilot.press("z", "z")
        await settle(pilot)
        shown = [p for p in app.query(ColumnPane) if p.display]
        assert len(shown) == 1
        assert seen[-1].startswith("One column at a time at this width: Standard agent")


@pytest.mark.parametrize(
    ("size", "keys", "says"),
    [
        ((160, 45), ("z",), "Zoomed: "),
        ((100, 30), ("z",), "Zoomed: "),
        ((80, 24), ("z", "z"), "One column at a time at this width: "),
    ],
    ids=["160-zoomed", "100-zoomed", "80"],
)
async def test_left_and_right_keep_the_message_on_the_column_shown(
    home: Path, size: tuple[int, int], keys: tuple[str, ...], says: str
) -> None:
    """Once the message names the column shown alone (zoomed, or one at a time), left and
    right change it with the column: it never names a column that is not on screen."""
    app = new_app(mock_config(home), optional=OPTIONAL)
    async with app.run_test(size=size) as pilot:
        await finish(pilot, await start(pilot, "1"))
        await pilot.press(*keys)
        await settle(pilot)
        for key in ("right", "right", "right", "left"):
            await pilot.press(key)
            await settle(pilot)
            (pane,) = [p for p in app.query(ColumnPane) if p.display]
            assert message(app).startswith(f"{says}{pane.column_title} ("), message(app)
