"""The terminal app a presenter drives at a talk: single keys, one run on screen at a time.

The app is a view: the engine runs the workers and the app subscribes to the run. Changes
arrive as `RunChanged` messages from the engine's threads, and the app draws a snapshot of
the run (`Run.snapshot()`) on its own thread; a change of any run but the one on screen is
dropped, so a late update can never repaint over a new run. What the screen shows (the run
on screen, the chosen column, zoom, presenter mode) is reactive: its watch_ methods redraw.

It fits any projector: three columns side by side from 160 cells wide, the same with
compact cards from 100, one column at a time below that (left/right switch), and `z`
zooms the chosen column at any size. Presenter mode (`p`) makes a run wait before each
phase until `space`; the app's messages go to a line of their own, never over a verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from interlock_demo.core.run import SYSTEM_CLOCK, SYSTEM_IDS, Clock, Ids, Pacer, Run, RunSnapshot
from interlock_demo.engine import TEMPORAL_TITLES, TITLES, Engine, RunRequest
from interlock_demo.engine.temporal.probe import temporal_unavailable
from interlock_demo.errors import BusyError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings import DemoConfig, open_private
from interlock_demo.views.tui.commands import DemoCommands, PaletteCommand
from interlock_demo.views.tui.messages import RunChanged
from interlock_demo.views.tui.widgets import (
    ColumnPane,
    MessageLine,
    ModeBanner,
    RunHeader,
    VerdictStrip,
)
from scenarios import COLUMNS, SCENARIOS, SWITCHES, Switch

APP_TITLE = "Interlock demo"
# A mock run's events are spaced out so the room can follow; it still ends in a few seconds.
MOCK_PACE_S = 0.08
# Below these widths the columns get compact cards, then show one at a time.
WIDE = 160
COMPACT = 100


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
            tooltip="Show or hide the third column: a hand-written re-check",
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
    ]

    # What the screen shows; each change redraws what depends on it (the watch_ methods).
    # The run on screen, None while idle. Set even to the same value it redraws everything:
    # the choice for the next run changed (`_choose`), so a finished run leaves the screen.
    run_on_screen = reactive[Run | None](None, always_update=True, init=False)
    # The column that `left`/`right` chose: shown alone below COMPACT, or zoomed.
    selected = reactive("interlock", init=False)
    zoomed = reactive(False, init=False)
    # Presenter mode: runs started from the keyboard wait for `space` before each phase.
    presenter = reactive(False, init=False, bindings=True)

    def __init__(
        self,
        config: DemoConfig,
        *,
        checked: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = SYSTEM_IDS,
    ) -> None:
        """`clock` and `ids` go to the engine: a test passes its own to draw the same run twice."""
        super().__init__()
        # The choice for the next run: the scenario, the checked column, the mode and switches.
        self.config = config
        self.scenario = "hand-refund"
        self.checked = checked
        self.engine = Engine(config, mock_pace_s=MOCK_PACE_S, clock=clock, ids=ids)
        self.http_url: str | None = None
        # Why `t` cannot switch to Temporal here (the extra is missing), or None.
        self.temporal_missing = temporal_unavailable()
        self.temporal_ui: str | None = None
        # How long `exit -9 (SIGKILL)` and `restarting` stay on screen at least.
        self.phase_hold_s: float | None = None

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield ModeBanner(id="banner")
        yield RunHeader(id="header")
        yield Static("", id="story")
        with Container(id="columns"):
            for name in COLUMNS:
                yield ColumnPane(name, self._titles()[name])
        yield VerdictStrip("", id="verdicts")
        yield MessageLine("", id="messages")
        yield Footer()

    def on_mount(self) -> None:
        if self.phase_hold_s is not None:
            for pane in self.query(ColumnPane):
                pane.hold_s = self.phase_hold_s
        self._apply_config()
        self.set_interval(0.1, self._tick)
        hint = "ctrl+p: commands (switches: emulate 24h, no lookup) · p: presenter mode"
        if self.http_url is not None:
            hint = f"JSON of the run: {self.http_url}/api/run · {hint}"
        self.notify(hint)
        if self.config.engine == "temporal":
            self._start_temporal()

    def get_default_screen(self) -> Screen[Any]:
        """The main screen, which re-lays the columns out when the terminal is resized."""
        return _MainScreen(id="_default")

    def relayout(self) -> None:
        """Lay the columns out again for the terminal's size (a projector change)."""
        self._layout()

    @property
    def layout_name(self) -> str:
        """`wide` (full cards), `compact` (compact cards) or `single` (one column at a time)."""
        width = self.size.width
        return "wide" if width >= WIDE else "compact" if width >= COMPACT else "single"

    def _layout(self) -> None:
        """Show the columns as the terminal's width allows; one alone when single or zoomed."""
        layout = self.layout_name
        self.screen.set_class(layout == "compact", "-compact")
        self.screen.set_class(layout == "single", "-single")
        self.screen.set_class(self.zoomed, "-zoom")
        alone = layout == "single" or self.zoomed
        shown = self._column_names()
        if self.selected not in shown:
            # The chosen column is not in this run: Interlock (always there) instead. No
            # watcher: the panes are laid out right below.
            self.set_reactive(DemoApp.selected, "interlock")
        for pane in self.query(ColumnPane):
            pane.display = pane.column_name in shown and (
                not alone or pane.column_name == self.selected
            )
            pane.set_class(pane.column_name == self.selected and not alone, "-selected")
            pane.relayout(compact=layout != "wide" and not self.zoomed)
            place = None
            if alone and pane.column_name in shown:
                place = f"{shown.index(pane.column_name) + 1}/{len(shown)}"
            pane.set_place(place)
        self.query_one(ModeBanner).show(self.config, width=self.size.width)
        footer = self.query_one(Footer)
        footer.compact = layout != "wide"
        self.refresh_bindings()

    def _column_names(self) -> list[str]:
        if self.run_on_screen is not None:
            return [c.name for c in self.run_on_screen.columns]
        return [c for c in COLUMNS if c != "checked" or self.checked]

    def _apply_config(self) -> None:
        """Redraw everything that depends on the mode, the switches and the selection."""
        mock = self.config.mode == "mock"
        titles = self._titles()
        for pane in self.query(ColumnPane):
            pane.column_title = titles[pane.column_name]
            if self.run_on_screen is None:
                pane.reset(mock=mock)
        self.screen.set_class(mock, "-mock")
        self.screen.set_class(self.config.mode == "offline", "-offline")
        sc = SCENARIOS[self.run_on_screen.scenario if self.run_on_screen else self.scenario]
        self.query_one("#story", Static).update(f"{sc.story}  Wanted in Stripe: {sc.wanted_text}.")
        self._set_title()
        self._layout()
        self._render_run()

    def _set_title(self) -> None:
        mode = self.run_on_screen.mode if self.run_on_screen else self.config.mode
        title = f"{APP_TITLE}: {SCENARIOS[self.scenario].title}"
        self.title = f"MOCK: {title}" if mode == "mock" else title
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
        lines = self.query(MessageLine)
        if not lines:
            super().notify(message, title=title, severity=severity, timeout=timeout)
            return
        lines.first().say(f"{title}: {message}" if title else message, severity)

    # -- run updates -----------------------------------------------------------------------

    def watch_run_on_screen(self, run: Run | None) -> None:
        """Another run (or none) on screen: its panes start empty and everything is redrawn."""
        if run is not None:
            for pane in self.query(ColumnPane):
                pane.reset(mock=run.mode == "mock")
        self._apply_config()

    def watch_selected(self) -> None:
        self._layout()

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
        self.query_one(VerdictStrip).show(snapshot)
        if snapshot is None:
            return
        for col in snapshot.columns:
            self.query_one(f"#col-{col.name}", ColumnPane).show(snapshot, col)

    def _show_header(self, snapshot: RunSnapshot | None) -> None:
        self.query_one(RunHeader).show(
            scenario=snapshot.scenario if snapshot else self.scenario,
            mode=snapshot.mode if snapshot else self.config.mode,
            engine=self._engine_label(),
            checked=self.checked,
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
        interlock = snapshot.column("interlock")
        claim = None if interlock is None else interlock.claim_until
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
        col = next((c for c in run.columns if c.name == "interlock"), None)
        if col is None or col.outcome is None or col.outcome.status != "refused":
            return None
        return col.outcome.action_id

    def _refuse_while_running(self, what: str) -> bool:
        if self._run_is_going():
            self.notify(f"A run is going: {what} after it finishes.", severity="warning")
            return True
        return False

    def _choose(
        self,
        *,
        scenario: str | None = None,
        checked: bool | None = None,
        config: DemoConfig | None = None,
    ) -> None:
        """Change the choice for the next run; the run on screen, of the old one, leaves it."""
        if scenario is not None:
            self.scenario = scenario
        if checked is not None:
            self.checked = checked
        if config is not None:
            self.config = config
            self.engine.config = config
        self.run_on_screen = None

    def action_pick(self, scenario_id: str) -> None:
        """Choose the scenario for the next run."""
        if self._refuse_while_running("choose a scenario"):
            return
        self._choose(scenario=scenario_id)

    def action_run(self) -> None:
        """Start the chosen scenario; a second start while one runs is refused."""
        pacer = Pacer() if self.presenter else None
        # The mode on screen, which a run started over HTTP may have changed: what the
        # banner says is what runs.
        request = RunRequest(
            self.scenario, checked=self.checked, mode=self.config.mode, pacer=pacer
        )
        try:
            self.start_run(request)
        except BusyError as e:
            self.notify(f"Not started: {e}.", severity="warning")
        except UsageError as e:
            self.notify(str(e), severity="error")

    def start_run(self, request: RunRequest) -> Run:
        """Start a run and put it on screen (keys and the HTTP endpoint both come here)."""

        def listener(run: Run, column: str | None) -> None:
            self.post_message(RunChanged(run))  # from the engine's thread: post_message is safe

        run = self.engine.start(request, listeners=(listener,))
        self.call_later(self._show_new_run, run, request)
        return run

    def _show_new_run(self, run: Run, request: RunRequest) -> None:
        self.scenario = run.scenario
        self.checked = request.checked
        if run.mode != self.config.mode:
            self.config = self.config.with_mode(run.mode)
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
        title = self._titles()[self.selected]
        self.notify(
            f"Zoomed: {title} (left/right for another column, z for all)."
            if self.zoomed
            else "All columns."
        )

    def action_toggle_mock(self) -> None:
        """Switch between mock and the mode the app started in."""
        if self._refuse_while_running("switch mock"):
            return
        target = "offline" if self.config.mode == "mock" else "mock"
        if self.config.mode == "mock" and not self.engine_default_is_offline():
            target = "live"
        self._set_mode(target)

    def engine_default_is_offline(self) -> bool:
        """Whether leaving mock goes to offline (no keys for live)."""
        return bool(self.config.missing)

    def _set_mode(self, mode: str) -> None:
        if mode == "mock" and self.config.engine == "temporal":
            self.notify(
                "Mock runs are simulated in-process, without Temporal: press t for the "
                "standalone engine first.",
                severity="warning",
            )
            return
        try:
            config = self.config.with_mode(mode)
        except UsageError as e:
            self.notify(str(e), severity="error")
            return
        self._choose(config=config)
        self.notify(f"Mode: {mode}.")

    def action_toggle_checked(self) -> None:
        """Show or hide the hand-written check column."""
        if self._refuse_while_running("toggle the checked column"):
            return
        self._choose(checked=not self.checked)

    def _titles(self) -> dict[str, str]:
        return TEMPORAL_TITLES if self.config.engine == "temporal" else TITLES

    def _engine_label(self) -> str:
        """The engine for the header (with Temporal's web UI when it runs)."""
        if self.config.engine == "temporal":
            return f"temporal (web UI {self.temporal_ui or 'starting…'})"
        return "standalone"

    def _temporal_blocker(self) -> str | None:
        """Why `t` cannot switch engines now, or None."""
        if self.config.engine == "temporal":
            return None  # back to standalone is always possible
        if self.config.mode == "mock":
            return "mock runs are simulated in-process, without Temporal"
        return self.temporal_missing

    def action_switch_engine(self) -> None:
        """Switch between the standalone and the Temporal engine."""
        if self._refuse_while_running("switch engines"):
            return
        blocked = self._temporal_blocker()
        if blocked is not None:
            self.notify(f"Temporal is off: {blocked}.", severity="warning")
        elif self.config.engine == "temporal":
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
        self._set_engine("temporal")
        self.notify(f"Engine: Temporal. Its web UI: {ui}")

    def _set_engine(self, engine: str) -> None:
        if engine == self.config.engine:
            self._apply_config()
            return
        self._choose(config=dataclasses.replace(self.config, engine=engine))

    def set_switch(self, switch: Switch) -> None:
        """Toggle an emulated switch (offline and mock only)."""
        if self._refuse_while_running("change switches"):
            return
        if self.config.mode == "live":
            self.notify("Emulated switches are for offline and mock runs.", severity="error")
            return
        s = self.config.switches
        switches = dataclasses.replace(s, **{switch.field: not getattr(s, switch.field)})
        self._choose(config=DemoConfig(**{**self.config.__dict__, "switches": switches}))
        on = ", ".join(switches.names) or "none"
        self.notify(f"Emulated switches for the next run: {on}.")

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
            # Created 0600 (in a 0700 folder) first: Textual then writes into it as it is.
            open_private(folder / name, "w").close()
            path = self.save_screenshot(name, str(folder))
        except OSError as e:
            self.notify(
                f"Screenshot not saved: {e.strerror or e} ({folder}); set INTERLOCK_HOME "
                "to a folder you can write.",
                severity="error",
            )
            return
        self.notify(f"Screenshot saved: {path}")

    def action_quit_now(self) -> None:
        """Quit at once; every worker is stopped."""
        self.engine.close()
        self.exit(0)

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
                f"switch: {switch.name.replace('-', ' ')}",
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


def make_app(
    config: DemoConfig,
    *,
    checked: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    ids: Ids = SYSTEM_IDS,
) -> DemoApp:
    """The app factory used by the CLI, the Pilot tests and the snapshot tests.

    `clock` and `ids` are the engine's (the snapshot tests pass their own).
    """
    return DemoApp(config, checked=checked, clock=clock, ids=ids)


def run_app(config: DemoConfig, *, checked: bool = False, http_port: int | None = None) -> int:
    """Open the app; returns the exit code."""
    app = make_app(config, checked=checked)
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
        app.http_url = api.url
    try:
        code = app.run()
    finally:
        app.engine.close()
        if api is not None:
            api.stop()
    return int(code or 0)
