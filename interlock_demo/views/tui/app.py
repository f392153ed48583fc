"""The terminal app a presenter drives at a talk: single keys, one run on screen at a time.

The app is a view: the engine runs the workers and the app subscribes to the run. Changes
arrive as `RunChanged` messages from the engine's threads, and the app draws a snapshot of
the run (`Run.snapshot()`) on its own thread; a change of any run but the one on screen is
dropped, so a late update can never repaint over a new run. What the screen shows (the
choice for the next run, the run on screen, the chosen column, zoom, presenter mode) is
reactive: its watch_ methods redraw. The app owns the choice (`RunChoice`: configuration,
scenario, optional columns) and hands it whole to `Engine.start`, from its keys and from its
HTTP endpoint alike, so the screen and the engine never disagree about what ran.

It fits any projector: three columns side by side from 160 cells wide, the same with
compact cards from 100, one column at a time below that (left/right switch), and `z`
zooms the chosen column at any size. Presenter mode (`p`) makes a run wait before each
phase until `space`; the app's messages go to a line of their own, never over a verdict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.actions import parse as parse_action
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from interlock_demo.core.columns import (
    COLUMN_KINDS,
    OPTIONAL,
    ColumnKind,
    column_kind,
    gated_column,
    shown_columns,
)
from interlock_demo.core.run import SYSTEM_CLOCK, SYSTEM_IDS, Clock, Ids, Pacer, Run, RunSnapshot
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.engine.temporal.probe import temporal_unavailable
from interlock_demo.errors import BusyError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.layout import layout_for
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import TEMPORAL, mode_named
from interlock_demo.settings.private import open_private
from interlock_demo.views.tui.commands import DemoCommands, PaletteCommand
from interlock_demo.views.tui.keys import KeyRow, KeysScreen
from interlock_demo.views.tui.messages import RunChanged
from interlock_demo.views.tui.svg import svg_keeping_spaces
from interlock_demo.views.tui.terminal import resume_only_after_a_suspend, terminal_gone
from interlock_demo.views.tui.widgets import (
    ColumnPane,
    MessageLine,
    ModeBanner,
    RunHeader,
    VerdictStrip,
)
from scenarios import SCENARIOS, SWITCHES, Switch
from workers.protocol.words import MONEY_AT

APP_TITLE = "Interlock demo"
# A mock run's events are spaced out so the room can follow; it still ends in a few seconds.
MOCK_PACE_S = 0.08
# Outside presenter mode a run stays this long on its first kill, so the room sees it.
KILL_BEAT_S = 2.0
# The signals that end the app as q does (SIGHUP is not on every platform). In the app's
# raw terminal Ctrl-C is a key (`ctrl+c`); SIGINT comes only from another process.
STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


# Below WIDE the key bar keeps what a presenter presses during the talk, with short labels
# (an empty one shows the key alone), and the palette's key in line with them; the rest
# is in the palette (ctrl+p): nothing overlaps. Zoomed at WIDE every key stays, in the same
# compact style, left and right shown by their arrows alone, the palette's key in line too.
ARROW_LABELS = {"select_column(-1)": "", "select_column(1)": ""}
NARROW_HIDDEN = frozenset(
    {"toggle_checked", "toggle_mock", "switch_engine", "save_screenshot", "show_keys"}
)
SINGLE_HIDDEN = NARROW_HIDDEN | {"zoom"}
NARROW_LABELS = {"reapprove": "Approve", **ARROW_LABELS}
SINGLE_LABELS = {
    **NARROW_LABELS,
    "pick('hand-refund')": "Hand",
    "pick('revoked')": "Revoked",
    "pick('after-answer')": "After",
}


class DemoFooter(Footer):
    """The key bar, fitted to the layout: every key at 160, the talk's keys below.

    `fit` is the layout's name, or `zoomed` for the wide layout with one column zoomed.
    """

    fit = reactive("wide", recompose=True)

    def compose(self) -> ComposeResult:
        """Textual's footer keys, less the ones the layout leaves to the palette."""
        if self.fit == "wide":
            yield from super().compose()
            return
        hidden, labels = {
            "zoomed": (frozenset[str](), ARROW_LABELS),
            "compact": (NARROW_HIDDEN, NARROW_LABELS),
            "single": (SINGLE_HIDDEN, SINGLE_LABELS),
        }[self.fit]
        # Textual's FooterKey is private: the footer's keys are the widgets with an action.
        keys: list[Any] = [
            w for w in super().compose() if getattr(w, "action", None) not in (None, *hidden)
        ]
        for key in keys:
            key.description = labels.get(key.action, key.description)
            # Docked at the right edge, the palette's key covered the end of the bar.
            key.remove_class("-command-palette")
        self.styles.grid_size_columns = len(keys)
        yield from keys

    def bindings_changed(self, screen: Screen[Any]) -> None:
        """Redraw the keys, whether or not the app has the keyboard's focus.

        Textual's footer skips the redraw while its app is unfocused. A browser tab's app
        starts unfocused (Textual's web driver blurs it, and the page's "focus" may land
        before that blur), so its key bar stayed blank; a projected key bar is read by
        the room wherever the presenter's keyboard is.
        """
        super().bindings_changed(screen)
        if not screen.app.app_focus and self.is_attached and screen is self.screen:
            self.call_after_refresh(self.recompose)


class _MainScreen(Screen[Any]):
    """The app's one screen; it tells the app when the terminal changed size."""

    def on_resize(self) -> None:
        self._relayout()

    def on_screen_resume(self) -> None:
        self._relayout()  # the terminal may have changed size while a dialog was open

    def _relayout(self) -> None:
        app = self.app
        if isinstance(app, DemoApp) and app.screen is self and self.query(ColumnPane):
            app.relayout()


class DemoApp(App[int]):
    """One refund case, side by side: standard | interlock | checked."""

    CSS_PATH = "app.tcss"
    TITLE = APP_TITLE
    COMMANDS = App.COMMANDS | {DemoCommands}
    # The footer shows bindings in this order: what a presenter needs first.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "enter",
            "run",
            "Run",
            id="run",
            priority=True,
            tooltip="Run the chosen scenario in every column at once",
        ),
        # One key per scenario, as `scenarios.SCENARIOS` names them.
        *(
            Binding(s.key, f"pick('{s.id}')", s.label, id=f"scenario-{s.id}", tooltip=s.hint)
            for s in SCENARIOS.values()
        ),
        Binding(
            "space",
            "next_phase",
            "Next",
            id="next-phase",
            tooltip="Presenter mode: let the run go on to its next phase",
        ),
        Binding(
            "q",
            "quit_now",
            "Quit",
            id="quit",
            priority=True,
            tooltip="Quit at once and stop every worker",
        ),
        # What a presenter presses by reflex: it quits as q does, also from a dialog.
        Binding(
            "ctrl+c",
            "interrupt",
            "Quit",
            id="quit-ctrl-c",
            priority=True,
            show=False,
            tooltip="Quit at once and stop every worker, as q does (also in a dialog)",
        ),
        Binding(
            "p",
            "toggle_presenter",
            "Presenter",
            id="toggle-presenter",
            tooltip="Presenter mode: each run waits before every phase until space",
        ),
        Binding(
            "left",
            "select_column(-1)",
            "Prev",
            id="column-previous",
            tooltip="Show the column to the left (one column at a time, or zoomed)",
        ),
        Binding(
            "right",
            "select_column(1)",
            "Next col",
            id="column-next",
            tooltip="Show the column to the right (one column at a time, or zoomed)",
        ),
        Binding(
            "z",
            "zoom",
            "Zoom",
            id="zoom",
            tooltip="Zoom the chosen column to the whole width, or back",
        ),
        Binding(
            "a",
            "reapprove",
            "Re-approve",
            id="reapprove",
            tooltip="After Interlock refused: a person approves the refund again",
        ),
        Binding(
            "c",
            "toggle_checked",
            "Checked",
            id="toggle-checked",
            tooltip="Show or hide the third column: "
            + "; ".join(k.story for k in COLUMN_KINDS.values() if k.optional),
        ),
        Binding(
            "m",
            "toggle_mock",
            "Mock",
            id="toggle-mock",
            tooltip="Toggle mock mode: simulated in-process, no Stripe, no processes",
        ),
        Binding(
            "t",
            "switch_engine",
            "Engine",
            id="switch-engine",
            tooltip="Switch between the standalone and the Temporal engine",
        ),
        Binding(
            "s",
            "save_screenshot",
            "Screenshot",
            id="screenshot",
            tooltip="Save an SVG screenshot under INTERLOCK_HOME",
        ),
        Binding(
            "question_mark",
            "show_keys",
            "Keys",
            id="keys",
            tooltip="Every key of the app and what it does (escape closes the list)",
        ),
    ]

    # What the screen shows; each change redraws what depends on it (the watch_ methods).
    # The choice for the next run. Set even to the same value, the run on screen (of the
    # old choice) leaves the screen. Its value comes in __init__, with the configuration.
    choice = reactive[RunChoice](None, always_update=True, init=False)  # type: ignore[arg-type]
    # The run on screen, None while idle. Set even to the same value it redraws everything:
    # the choice for the next run changed (`watch_choice`), so a finished run leaves it.
    run_on_screen = reactive[Run | None](None, always_update=True, init=False)
    # The column that `left`/`right` chose: shown alone below COMPACT, or zoomed.
    selected = reactive(next(iter(COLUMN_KINDS)), init=False)
    zoomed = reactive(False, init=False)
    # Presenter mode: runs started from the keyboard wait for `space` before each phase.
    presenter = reactive(False, init=False, bindings=True)

    def __init__(
        self,
        config: DemoConfig,
        *,
        optional: frozenset[ColumnKind] = OPTIONAL,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = SYSTEM_IDS,
    ) -> None:
        """`clock` and `ids` go to the engine: a test passes its own to draw the same run twice."""
        super().__init__()
        self.set_reactive(DemoApp.choice, RunChoice(config, optional=optional))
        self.engine = Engine(
            config, mock_pace_s=MOCK_PACE_S, clock=clock, ids=ids, kill_beat_s=KILL_BEAT_S
        )
        self.http_url: str | None = None
        # Where runs are started over HTTP, with the endpoint's token: shown once, at start.
        self.http_control_url: str | None = None
        # Why `t` cannot switch to Temporal here (the extra is missing), or None.
        self.temporal_missing = temporal_unavailable()
        self.temporal_ui: str | None = None
        # How long `exit -9 (SIGKILL)` and `restarting` stay on screen at least, and the
        # clock that measures it (a test moves its own).
        self.phase_hold_s: float | None = None
        self.phase_clock: Callable[[], float] | None = None
        # Whether the message line names the column shown alone (`_say_what_shows`).
        self._message_names_column = False
        # The layout the columns were last laid out in (None before the first).
        self._laid_out_as: str | None = None

    def show_endpoint(self, url: str, control_url: str) -> None:
        """Name the JSON endpoint in the first message: where to read the run (`url`) and
        where to start one (`control_url`, with the endpoint's token; shown nowhere else)."""
        self.http_url = url
        self.http_control_url = control_url

    @property
    def config(self) -> DemoConfig:
        """The configuration the next run gets: mode, engine, switches."""
        return self.choice.config

    @property
    def scenario(self) -> str:
        """The scenario the next run plays."""
        return self.choice.scenario

    @property
    def optional(self) -> frozenset[ColumnKind]:
        """The optional columns the next run has."""
        return self.choice.optional

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ModeBanner(id="banner")
        yield RunHeader(id="header")
        yield Static("", id="story")
        with Container(id="columns"):
            for kind in COLUMN_KINDS.values():
                yield ColumnPane(kind.name, kind.title_on(self.config.engine))
        yield VerdictStrip("", id="verdicts")
        yield MessageLine("", id="messages")
        yield DemoFooter()

    def on_mount(self) -> None:
        for pane in self.query(ColumnPane):
            if self.phase_hold_s is not None:
                pane.hold_s = self.phase_hold_s
            if self.phase_clock is not None:
                pane.clock = self.phase_clock
        self._apply_config()
        self.set_interval(0.1, self._tick)
        hint = "ctrl+p: commands (switches: emulate 24h, no lookup) · ?: keys · p: presenter mode"
        if self.http_url is not None and self.http_control_url is not None:
            # The one place the endpoint's token is shown; without the key hints (the key
            # bar and `?` have them) the line holds the whole address at every width.
            read, start = f"{self.http_url}/api/run", self.http_control_url
            hint = f"JSON of the run: {read} · start a run: POST {start}"
        self.notify(hint)
        if self.config.engine == TEMPORAL:
            self._start_temporal()
        if not self.is_headless:
            resume_only_after_a_suspend()
            self._quit_on_stop_signals()

    def _quit_on_stop_signals(self) -> None:
        """SIGTERM and SIGHUP end the app as q does: workers stopped, terminal given back.

        Python's default for both ends the process at once, leaving the speaker's terminal
        in the alternate screen with mouse reporting on and the cursor hidden.
        """
        loop = asyncio.get_running_loop()
        for name in STOP_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                loop.add_signal_handler(signum, self._stop_on_signal, signum)

    def _stop_on_signal(self, signum: int) -> None:
        self.engine.close()
        code = 128 + signum  # the shell's code for "ended by this signal"
        if terminal_gone(sys.__stdin__.fileno() if sys.__stdin__ else 0):
            # Its window was closed: nothing to give back, and Textual's shutdown would wait
            # forever on writes to it. The workers, emulator and Temporal are stopped above.
            os._exit(code)
        self.exit(code)

    def get_default_screen(self) -> Screen[Any]:
        """The main screen, which re-lays the columns out when the terminal is resized."""
        return _MainScreen(id="_default")

    def relayout(self) -> None:
        """Lay the columns out again for the terminal's size (a projector change). Into
        one column at a time the message line says so, two columns having gone; out of it,
        a message naming the column shown alone says what shows now."""
        before = self._laid_out_as
        self._layout()
        changed = before is not None and before != self._laid_out_as
        if changed and (self._laid_out_as == "single" or self._message_names_column):
            self._say_what_shows()

    @property
    def layout_name(self) -> str:
        """`wide` (full cards), `compact` (compact cards) or `single` (one column at a time)."""
        return layout_for(self.size.width).name

    def _layout(self) -> None:
        """Show the columns as the terminal's width allows; one alone when single or zoomed."""
        layout = self._laid_out_as = self.layout_name
        self.screen.set_class(layout == "compact", "-compact")
        self.screen.set_class(layout == "single", "-single")
        self.screen.set_class(self.zoomed, "-zoom")
        alone = layout == "single" or self.zoomed
        shown = self._column_names()
        if self.selected not in shown:
            # The chosen column is not in this run: the first instead. No watcher: the
            # panes are laid out right below.
            self.set_reactive(DemoApp.selected, shown[0])
        for pane in self.query(ColumnPane):
            pane.display = pane.column_name in shown and (
                not alone or pane.column_name == self.selected
            )
            pane.set_class(pane.column_name == self.selected and not alone, "-selected")
            pane.relayout(
                compact=layout != "wide" and not self.zoomed,
                two_line_status=layout == "compact" and not self.zoomed,
                paired=layout == "single",
            )
            place = None
            if alone and pane.column_name in shown:
                place = f"{shown.index(pane.column_name) + 1}/{len(shown)}"
            pane.set_place(place)
        self.query_one(ModeBanner).show(self.config)
        self._show_story(layout)
        self.query_one(VerdictStrip).narrow = layout == "single"
        footer = self.query_one(DemoFooter)
        footer.fit = "zoomed" if layout == "wide" and self.zoomed else layout
        footer.compact = footer.fit != "wide"
        self.refresh_bindings()

    def _show_story(self, layout: str) -> None:
        """The scenario's story and what should be in Stripe (the emulator, memory) at the
        end; one column at a time, only what should be there (the room needs it most)."""
        run = self.run_on_screen
        sc = SCENARIOS[run.scenario if run else self.scenario]
        mode = mode_named(run.mode) if run else self.config.run_mode
        wanted = f"Wanted {MONEY_AT[mode.answerer]}: {sc.wanted_text}."
        story = wanted if layout == "single" else f"{wanted}  {sc.story}"
        self.query_one("#story", Static).update(story)
        self.query_one("#header", RunHeader).narrow = layout != "wide"

    def _column_names(self) -> list[str]:
        if self.run_on_screen is not None:
            return [c.name for c in self.run_on_screen.columns]
        return shown_columns(self.optional)

    def _apply_config(self) -> None:
        """Redraw everything that depends on the mode, the switches and the selection."""
        mode = self.config.run_mode
        for pane in self.query(ColumnPane):
            pane.column_title = self._title(pane.column_name)
            if self.run_on_screen is None:
                pane.reset(mock=mode.in_process)
        self.screen.set_class(mode.in_process, "-mock")
        self.screen.set_class(mode.emulator, "-offline")
        self._set_title()
        self._layout()
        self._render_run()

    def _set_title(self) -> None:
        mode = mode_named(self.run_on_screen.mode) if self.run_on_screen else self.config.run_mode
        title = f"{APP_TITLE}: {SCENARIOS[self.scenario].title}"
        self.title = f"{mode.banner}: {title}" if mode.in_process else title
        driver = self._driver
        if driver is not None and not self.is_headless:
            driver.write(f"\x1b]0;{self.title}\x07")

    # -- messages --------------------------------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Say `message` on the message line above the footer, where no verdict is."""
        self._message_names_column = False
        lines = self.query(MessageLine)
        if not lines:
            super().notify(message, title=title, severity=severity, timeout=timeout)
            return
        lines.first().say(f"{title}: {message}" if title else message, severity)

    # -- run updates -----------------------------------------------------------------------

    def watch_choice(self) -> None:
        """Another choice for the next run: the run on screen, of the old one, leaves it."""
        self.run_on_screen = None

    def watch_run_on_screen(self, run: Run | None) -> None:
        """Another run (or none) on screen: its panes start empty and everything is redrawn."""
        if run is not None:
            for pane in self.query(ColumnPane):
                pane.reset(mock=mode_named(run.mode).in_process)
        self._apply_config()

    def watch_selected(self) -> None:
        self._layout()
        if self._message_names_column:
            self._say_what_shows()  # the message follows the column left/right showed

    def watch_zoomed(self) -> None:
        self._layout()

    def watch_presenter(self) -> None:
        self._show_header(self._snapshot())

    def on_run_changed(self, message: RunChanged) -> None:
        if message.run is not self.run_on_screen:
            return  # a late change of an older run: never repaint the new one with it
        self._render_run()
        if message.run.finished:
            self.refresh_bindings()

    def _snapshot(self) -> RunSnapshot | None:
        """The run on screen as it is now, or None while idle."""
        run = self.run_on_screen
        return None if run is None else run.snapshot()

    def _render_run(self) -> None:
        snapshot = self._snapshot()
        self._show_header(snapshot)
        if snapshot is not None:
            for col in snapshot.columns:
                self.query_one(f"#col-{col.name}", ColumnPane).show(snapshot, col)
        self._show_verdicts(snapshot)

    def _show_verdicts(self, snapshot: RunSnapshot | None) -> None:
        """The verdict strip, once the run ended and every column has shown its held states:
        a room reads the kill before the verdict."""
        if snapshot is not None and not all(p.caught_up for p in self.query(ColumnPane)):
            snapshot = None
        self.query_one(VerdictStrip).show(snapshot)

    def on_column_pane_caught_up(self) -> None:
        self._show_verdicts(self._snapshot())

    def _show_header(self, snapshot: RunSnapshot | None) -> None:
        self.query_one(RunHeader).show(
            scenario=snapshot.scenario if snapshot else self.scenario,
            mode=snapshot.mode if snapshot else self.config.mode,
            engine=self._engine_label(),
            optional=self.optional,
            run=snapshot,
            presenter=self._presenter_hint(snapshot),
        )

    def _presenter_hint(self, snapshot: RunSnapshot | None) -> str | None:
        """What `space` does next in presenter mode, for the header; None when it is off."""
        if not self.presenter:
            return None
        pacer = self._pacer()
        if snapshot is None or pacer is None:
            return "on: enter, then space for each phase"
        phase = pacer.next_phase
        if phase is None:
            return "every phase open"
        hint = f"space: {phase}" + (" (waiting)" if pacer.held else "")
        gated = snapshot.column(gated_column().name)
        claim = None if gated is None else gated.claim_until
        if phase in ("outage", "restart") and claim is not None:
            # The dead worker's claim: once it ends, the restart has no wait to show.
            left = claim - snapshot.now
            hint += f" · claim ends in {left:.0f} s" if left > 0 else " · claim has ended"
        return hint

    def _tick(self) -> None:
        run = self.run_on_screen
        if run is None or run.finished:
            return
        snapshot = run.snapshot()
        self._show_header(snapshot)
        for col in snapshot.columns:
            self.query_one(f"#col-{col.name}", ColumnPane).tick(snapshot.now, col)

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("interrupt", "quit"):
            return True  # ctrl+c and ctrl+q quit from anywhere, a dialog included
        if len(self.screen_stack) > 1:
            # A dialog (the command palette) is open: its keys are its own, enter included.
            return False
        if action == "reapprove":
            return self._refused_interlock() is not None
        if action == "next_phase":
            return self._pacer() is not None
        if action == "select_column":
            return self.layout_name == "single" or self.zoomed
        return True

    def _pacer(self) -> Pacer | None:
        """The pacer of the run on screen while it is going, in presenter mode."""
        run = self.run_on_screen
        if run is None or run.finished or run.pacer is None:
            return None
        return run.pacer

    def _run_is_going(self) -> bool:
        return self.run_on_screen is not None and not self.run_on_screen.finished

    def _refused_interlock(self) -> str | None:
        run = self.run_on_screen
        if run is None or not run.finished:
            return None
        col = next((c for c in run.columns if column_kind(c.name).signs_receipts), None)
        if col is None or col.outcome is None or col.outcome.status != "refused":
            return None
        return col.outcome.action_id

    def _refuse_while_running(self, what: str) -> bool:
        if self._run_is_going():
            self.notify(f"A run is going: {what} after it finishes.", severity="warning")
            return True
        return False

    def action_pick(self, scenario_id: str) -> None:
        """Choose the scenario for the next run."""
        if self._refuse_while_running("choose a scenario"):
            return
        self.choice = self.choice.but(scenario=scenario_id)

    def action_run(self) -> None:
        """Start the chosen scenario; a second start while one runs is refused."""
        try:
            self.start_run(self.choice, pacer=Pacer() if self.presenter else None)
        except BusyError as e:
            self.notify(f"Not started: {e}.", severity="warning")
        except UsageError as e:
            self.notify(str(e), severity="error")

    def start_run(self, choice: RunChoice, *, pacer: Pacer | None = None) -> Run:
        """Start a run of `choice` and put it on screen, `choice` becoming the app's own.

        Keys and the HTTP endpoint both come here, so a run started over HTTP is shown
        like one started by keys, and the next enter runs what the screen shows.
        """

        def listener(run: Run, column: str | None) -> None:
            self.post_message(RunChanged(run))  # from the engine's thread: post_message is safe

        run = self.engine.start(choice, pacer=pacer, listeners=(listener,))
        self.call_later(self._show_new_run, run, choice)
        return run

    def _show_new_run(self, run: Run, choice: RunChoice) -> None:
        # No watcher: putting the run on screen right below redraws everything.
        self.set_reactive(DemoApp.choice, choice)
        self.run_on_screen = run
        if run.pacer is not None:
            self.notify("Presenter mode: the run waits before each phase; space opens the next.")

    def action_next_phase(self) -> None:
        """Presenter mode: open the run's next phase (decision, kill, outage, restart, result)."""
        pacer = self._pacer()
        if pacer is None:
            return
        phase = pacer.advance()
        if phase is not None:
            self.notify(f"Presenter: {phase}.")
        self._show_header(self._snapshot())

    def action_toggle_presenter(self) -> None:
        """Presenter mode on or off (for the next run); headless runs never wait."""
        if self._refuse_while_running("switch presenter mode"):
            return
        self.presenter = not self.presenter
        self.notify(
            "Presenter mode on: enter starts, then space opens each phase "
            "(decision, kill, outage, restart, result)."
            if self.presenter
            else "Presenter mode off: runs go straight through."
        )

    def action_select_column(self, step: int) -> None:
        """Show the next column to the left or right (one at a time, or zoomed)."""
        names = self._column_names()
        at = names.index(self.selected) if self.selected in names else 0
        self.selected = names[(at + step) % len(names)]

    def action_zoom(self) -> None:
        """Zoom the chosen column to the whole width, or show every column again."""
        self.zoomed = not self.zoomed
        self._say_what_shows()

    def _say_what_shows(self) -> None:
        """Say which column shows alone (zoomed, or one at a time), or that all do."""
        title = self._title(self.selected)
        alone = self.zoomed or self.layout_name == "single"
        if self.zoomed:
            self.notify(f"Zoomed: {title} (left/right for another column, z for all).")
        elif alone:
            # Too narrow for all: the screen still shows one column, and says so.
            self.notify(f"One column at a time at this width: {title} (left/right for another).")
        else:
            self.notify("All columns.")
        # Set after notify, which clears it: the message names the column on screen.
        self._message_names_column = alone

    def action_toggle_mock(self) -> None:
        """Switch between mock and the mode the app started in."""
        if self._refuse_while_running("switch mock"):
            return
        target = "offline" if self.config.run_mode.in_process else "mock"
        if self.config.run_mode.in_process and not self.engine_default_is_offline():
            target = "live"
        self._set_mode(target)

    def engine_default_is_offline(self) -> bool:
        """Whether leaving mock goes to offline (no keys for live)."""
        return bool(self.config.missing)

    def _set_mode(self, mode: str) -> None:
        row = mode_named(mode)
        if row.needs_keys and self.config.missing_keys:
            # The command line's words name its flags; here, the fix a presenter can make.
            keys = " and ".join(self.config.missing_keys)
            self.notify(
                f"Live is off: it needs {keys} (or `stripe login`); set them and open the "
                "app again.",
                severity="error",
            )
            return
        why = row.refusal(self.config.engine)
        if why is not None:
            self.notify(
                f"{mode.capitalize()} is off: {why}; press t for the standalone engine first.",
                severity="warning",
            )
            return
        try:
            self.choice = self.choice.but(mode=mode)
        except UsageError as e:
            self.notify(str(e), severity="error")
            return
        self.notify(f"Mode: {mode}.")

    def action_toggle_checked(self) -> None:
        """Show or hide the hand-written check column."""
        if self._refuse_while_running("toggle the checked column"):
            return
        self.choice = self.choice.but(optional=frozenset() if self.optional else OPTIONAL)
        optional = [k.title_on(self.config.engine) for k in COLUMN_KINDS.values() if k.optional]
        shown = " and ".join(optional)
        self.notify(
            f"{shown} shown in the next run." if self.optional else f"{shown} left out (c again)."
        )

    def _title(self, column: str) -> str:
        return column_kind(column).title_on(self.config.engine)

    def _engine_label(self) -> str:
        """The engine for the header (with Temporal's web UI when it runs)."""
        if self.config.engine == TEMPORAL:
            return f"temporal (web UI {self.temporal_ui or 'starting…'})"
        return "standalone"

    def _temporal_blocker(self) -> str | None:
        """Why `t` cannot switch engines now, or None."""
        if self.config.engine == TEMPORAL:
            return None  # back to standalone is always possible
        return self.config.run_mode.refusal(TEMPORAL) or self.temporal_missing

    def action_switch_engine(self) -> None:
        """Switch between the standalone and the Temporal engine."""
        if self._refuse_while_running("switch engines"):
            return
        blocked = self._temporal_blocker()
        if blocked is not None:
            self.notify(f"Temporal is off: {blocked}.", severity="warning")
        elif self.config.engine == TEMPORAL:
            self._set_engine("standalone")
            self.notify("Engine: standalone.")
        else:
            self._start_temporal()

    @work(thread=True, exclusive=True, group="temporal", description="start Temporal's dev server")
    def _start_temporal(self) -> None:
        try:
            ui = self.engine.temporal().ui_url
        except Exception as e:  # shown to the presenter; the engine stays standalone
            self.call_from_thread(self.notify, f"Temporal did not start: {e}", severity="error")
            self.call_from_thread(self._set_engine, "standalone")
            return
        self.call_from_thread(self._temporal_started, ui)

    def _temporal_started(self, ui: str | None) -> None:
        self.temporal_ui = ui
        self._set_engine(TEMPORAL)
        self.notify(f"Engine: Temporal. Its web UI: {ui}")

    def _set_engine(self, engine: str) -> None:
        if engine == self.config.engine:
            self._apply_config()
            return
        self.choice = dataclasses.replace(
            self.choice, config=dataclasses.replace(self.config, engine=engine)
        )

    def set_switch(self, switch: Switch) -> None:
        """Toggle an emulated switch (offline and mock only)."""
        if self._refuse_while_running("change switches"):
            return
        if not self.config.run_mode.takes_switches:
            self.notify("Emulated switches are for offline and mock runs.", severity="error")
            return
        s = self.config.switches
        switches = dataclasses.replace(s, **{switch.field: not getattr(s, switch.field)})
        self.choice = dataclasses.replace(
            self.choice, config=dataclasses.replace(self.config, switches=switches)
        )
        on = ", ".join(s.words for s in SWITCHES if getattr(switches, s.field))
        self.notify(f"Emulated switches for the next run: {on or 'none'}.")

    def action_reapprove(self) -> None:
        """A person approves the refused refund again; interlock sends under the new lease."""
        run = self.run_on_screen
        if run is None or self._refused_interlock() is None:
            self.notify("Re-approve follows a refusal by Interlock.", severity="warning")
            return
        self._reapprove(run)

    @work(thread=True, exclusive=True, group="reapprove", description="re-approve")
    def _reapprove(self, run: Run) -> None:
        try:
            self.engine.reapprove(run)
        except Exception as e:  # shown to the presenter, never swallowed
            self.call_from_thread(self.notify, f"Re-approve failed: {e}", severity="error")

    def action_save_screenshot(self) -> None:
        """Save an SVG screenshot under INTERLOCK_HOME and say where."""
        folder = self.config.paths.screenshots
        name = f"{self.scenario}-{datetime.now().strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            # Created 0600 (in a 0700 folder); the same SVG as `interlock-demo screenshots`.
            path = folder / name
            with open_private(path, "w", encoding="utf-8") as f:
                f.write(svg_keeping_spaces(self.export_screenshot()))
        except OSError as e:
            self.notify(
                f"Screenshot not saved: {e.strerror or e} ({folder}); set INTERLOCK_HOME "
                "to a folder you can write.",
                severity="error",
            )
            return
        self.notify(f"Screenshot saved: {_short_path(path)}")

    def action_quit_now(self) -> None:
        """Quit at once; every worker is stopped."""
        self.engine.close()
        self.exit(0)

    def action_interrupt(self) -> None:
        """Ctrl-C: quit as q does, whatever is open."""
        self.action_quit_now()

    async def action_quit(self) -> None:
        """Textual's ctrl+q: quit as q does (its own quit would leave stopping the workers
        to whoever ran the app)."""
        self.action_quit_now()

    def action_show_keys(self) -> None:
        """List every key of the app, those that do nothing now dimmed."""
        rows = []
        for binding in self._bindings_listed():
            _, name, params = parse_action(binding.action)
            rows.append(
                KeyRow(
                    self.get_key_display(binding),
                    binding.description,
                    binding.tooltip,
                    self.check_action(name, params) is not False,
                )
            )
        self.push_screen(KeysScreen(rows))

    def _bindings_listed(self) -> Iterator[Binding]:
        """The app's keys in the footer's order, then Textual's own that the app keeps."""
        yield from (b for b in self.BINDINGS if isinstance(b, Binding))
        yield Binding(
            self.COMMAND_PALETTE_BINDING,
            "command_palette",
            "Palette",
            tooltip="Commands: scenarios, modes, switches, the engine, views, screenshots",
        )
        yield Binding("ctrl+q", "quit", "Quit", tooltip="Quit at once, as q does")

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's system commands, with its keys panel replaced by the app's own."""
        for command in super().get_system_commands(screen):
            if command.title != "Keys":
                yield command
        yield SystemCommand("Keys", "Every key of the app and what it does", self.action_show_keys)

    def palette_commands(self) -> Iterator[PaletteCommand]:
        """The domain commands for the palette (ctrl+p): name, help, what it does."""
        for sid, sc in SCENARIOS.items():
            yield (f"scenario: {sid}", sc.story, partial(self.action_pick, sid))
        yield ("run: start", "Run the chosen scenario", self.action_run)
        yield (
            "run: presenter mode",
            "Each run waits before every phase until space (on/off)",
            self.action_toggle_presenter,
        )
        yield ("mode: mock", "Simulated in-process run", lambda: self._set_mode("mock"))
        yield (
            "mode: offline",
            "Local Stripe emulator, scripted model",
            lambda: self._set_mode("offline"),
        )
        yield ("mode: live", "Stripe test mode and the real model", lambda: self._set_mode("live"))
        for switch in SWITCHES:
            yield (
                f"switch: {switch.words}",
                switch.palette,
                functools.partial(self.set_switch, switch),
            )
        blocked = self._temporal_blocker()
        yield (
            "engine: switch",
            "Standalone or Temporal" + (f" (off: {blocked})" if blocked else ""),
            self.action_switch_engine,
        )
        yield ("view: checked column", "Show or hide the third column", self.action_toggle_checked)
        yield ("view: zoom column", "The chosen column alone, or all", self.action_zoom)
        yield ("screenshot: save", "SVG under INTERLOCK_HOME", self.action_save_screenshot)


def _short_path(path: Path) -> str:
    """`path` as short as it is still found: from the working folder when under it (the
    default INTERLOCK_HOME is), else from the home folder, else whole."""
    for base, shown in ((Path.cwd(), ""), (Path.home(), "~/")):
        if path.is_relative_to(base):
            return f"{shown}{path.relative_to(base)}"
    return str(path)


def make_app(
    config: DemoConfig,
    *,
    optional: frozenset[ColumnKind] = OPTIONAL,
    clock: Clock = SYSTEM_CLOCK,
    ids: Ids = SYSTEM_IDS,
) -> DemoApp:
    """The app factory used by the CLI, the Pilot tests and the snapshot tests.

    `optional`: the optional columns the first run shows (`c` toggles them). `clock` and
    `ids` are the engine's (the snapshot tests pass their own).
    """
    return DemoApp(config, optional=optional, clock=clock, ids=ids)


def run_app(
    config: DemoConfig,
    *,
    optional: frozenset[ColumnKind] = OPTIONAL,
    http_port: int | None = None,
    recorded: bool = False,
) -> int:
    """Open the app; returns the exit code.

    `recorded`: `interlock-demo record` runs it, so the screen leaves out the JSON's
    address, which a replay outlives (the recorder reads the JSON itself).
    """
    app = make_app(config, optional=optional)
    api = None
    if http_port is not None:
        from interlock_demo.views.http_api import for_view

        api = for_view(app, port=http_port)
        try:
            api.start()
        except OSError as e:
            print(f"interlock-demo: {e}", file=sys.stderr)
            app.engine.close()
            return ExitCode.USAGE
        if not recorded:
            app.show_endpoint(api.url, api.control_url)
    try:
        code = app.run()
    finally:
        app.engine.close()
        if api is not None:
            api.stop()
    return int(code or 0)
