"""One column of the run: status, phase lines, claim countdown, events, result card.

The status line holds `exit -9 (SIGKILL)` and `restarting` on screen for a minimum time
(`hold_s`) even when the run moves on within milliseconds: the view lags a moment behind,
the run is never slowed. Later states queue behind a held one and are shown in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Label, Static

from interlock_demo.core.run import Column, ColumnState, RunEventKind, RunSnapshot
from interlock_demo.core.verdict import AGENT, counting
from interlock_demo.engine.supervisor import describe_exit
from interlock_demo.views.tui.widgets.countdown import ClaimCountdown
from interlock_demo.views.tui.widgets.story import PhaseLines
from interlock_demo.views.tui.widgets.verdict_strip import mark
from workers.protocol import EventKind

# The pane's own state besides the run's: the worker ended by itself (exit 0) and the
# engine has not taken the next step yet (a presenter may hold it there).
FINISHED: Literal["finished"] = "finished"
ShownState = ColumnState | Literal["finished"]
HOLD_S = 2.0
READ_BACK = {
    "live": "read back from Stripe",
    "offline": "read back from the emulator",
    "mock": "MOCK: in-memory payments",
}
SHORT_READ_BACK = {"live": "Stripe", "offline": "emulator", "mock": "in memory"}
CHECK_NAMES = {"lookup": "lookup", "world_unchanged": "world check", "approval": "approval"}


class _EventList(VerticalScroll):
    """A column's events, kept scrolled to the newest line.

    It scrolls when its content grows (new lines) and when its own size changes (the
    result card takes room below it, the terminal is resized), each time after the
    layout settled, so the last line is in view whatever the order of those changes.
    """

    def watch_virtual_size(self) -> None:
        self.scroll_end(animate=False)

    def on_resize(self) -> None:
        self.scroll_end(animate=False)


class ColumnPane(Vertical):
    """Shows one column of a run; fed snapshots, it never reads the engine itself."""

    def __init__(self, name: str, title: str) -> None:
        super().__init__(id=f"col-{name}", classes="column")
        self.column_name = name
        self.column_title = title
        # How long a held state stays on screen, and the clock that measures it.
        self.hold_s = HOLD_S
        self.clock: Callable[[], float] = time.monotonic
        self.compact = False
        self._place: str | None = None
        self._events_shown = 0
        self._lines = Text()
        self._card_text = ""
        self._run_id: str | None = None
        self._shown_state: ShownState = ColumnState.IDLE
        self._shown_at = 0.0
        self._queue: list[tuple[ShownState, Text]] = []
        self._timer: Timer | None = None
        self._last: tuple[RunSnapshot, Column] | None = None

    def compose(self) -> ComposeResult:
        yield Label(self.column_title, classes="title")
        yield Static("idle", classes="status")
        yield PhaseLines("", classes="story")
        yield ClaimCountdown(classes="countdown")
        with _EventList(classes="events"):
            yield Static("", classes="event-lines")
        yield Static("", classes="card")

    def reset(self, *, mock: bool) -> None:
        """Empty the column for a new run (or idle)."""
        self._events_shown = 0
        self._lines = Text()
        self._card_text = ""
        self._run_id = None
        self._queue = []
        self._last = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._shown_state = ColumnState.IDLE
        self.set_class(mock, "-mock")
        self.set_class(False, "-killed", "-waiting", "-done", "-wrong", "-right", "-alarm")
        self._show_title()
        self.query_one(".status", Static).update("idle")
        self.query_one(".story", PhaseLines).update("")
        self.query_one(".event-lines", Static).update("")
        self.query_one(".card", Static).update("")

    def set_place(self, place: str | None) -> None:
        """Shown alone: say which column of how many, and how to reach the others."""
        self._place = place
        self._show_title()

    def _show_title(self) -> None:
        title = Text(self.column_title, style="bold")
        if self._place is not None:
            title = Text.assemble(("◀ ", "bold"), title, f" ({self._place}) ", ("▶", "bold"))
        if self.has_class("-mock"):
            title.append(" ")
            title.append(" MOCK ", style="bold reverse")
        self.query_one(".title", Label).update(title)

    @property
    def shown_state(self) -> str:
        """The state the status line shows now (it may lag the run while one is held)."""
        return self._shown_state

    @property
    def shown_since(self) -> float:
        """When (by `clock`) the status line took the state it shows."""
        return self._shown_at

    def show(self, run: RunSnapshot, col: Column) -> None:
        """Render a snapshot of the column; events are appended, never redrawn."""
        mock = run.mode == "mock"
        if self._run_id != run.run_id:
            self.reset(mock=mock)
            self._run_id = run.run_id
        self._last = (run, col)
        prefix = "MOCK. " if mock else ""
        new = col.events[self._events_shown :]
        for event in new:
            if self._lines:
                self._lines.append("\n")
            self._lines.append(prefix, style="bold")
            self._lines.append(f"{event.t:5.2f}s ", style="dim")
            if event.pid:
                self._lines.append(f"[{event.pid}] ", style="dim")
            self._lines.append(event.text, style=_event_style(event.kind))
        self._events_shown = len(col.events)
        if new:
            self.query_one(".event-lines", Static).update(self._lines)
            self.query_one(".story", PhaseLines).show(col, prefix)
        self._render_card(run, col, prefix)
        self._want(_shown_state(col), _status(col, prefix, compact=self.compact))

    def relayout(self, *, compact: bool) -> None:
        """Switch between the full and the compact card."""
        if compact == self.compact:
            return
        self.compact = compact
        if self._last is not None:
            run, col = self._last
            prefix = "MOCK. " if run.mode == "mock" else ""
            self._render_card(run, col, prefix)
            self._want(_shown_state(col), _status(col, prefix, compact=compact))

    def _render_card(self, run: RunSnapshot, col: Column, prefix: str) -> None:
        card = _card(run, col, prefix, compact=self.compact)
        if card.plain != self._card_text:
            self._card_text = card.plain
            self.query_one(".card", Static).update(card)
        sign = mark(col)[0] if col.stripe is not None else None
        self.set_class(sign == "✗", "-wrong")
        self.set_class(sign == "✓", "-right")
        self.set_class(sign == "⚠", "-alarm")

    def _want(self, state: ShownState, text: Text) -> None:
        """Ask for `state` on the status line; it waits behind a held state."""
        if self._queue and self._queue[-1][0] == state:
            self._queue[-1] = (state, text)
        elif not self._queue and state == self._shown_state:
            self.query_one(".status", Static).update(text)
            return
        else:
            self._queue.append((state, text))
        self._advance()

    def _advance(self) -> None:
        self._timer = None
        while self._queue:
            if self._shown_state != FINISHED and self._shown_state.held:
                left = self.hold_s - (self.clock() - self._shown_at)
                if left > 0:
                    if self._timer is None:
                        self._timer = self.set_timer(left, self._advance)
                    return
            state, text = self._queue.pop(0)
            self._shown_state = state
            self._shown_at = self.clock()
            self.query_one(".status", Static).update(text)
            self.set_class(state == ColumnState.KILLED, "-killed")
            self.set_class(state == ColumnState.WAITING, "-waiting")
            self.set_class(state == ColumnState.DONE, "-done")
            if state == ColumnState.WAITING and self._last is not None:
                self.tick(self._last[0].now, self._last[1])

    def tick(self, run_now: float, col: Column) -> None:
        """Move the claim countdown to `run_now` (seconds since the run started)."""
        if self._shown_state != ColumnState.WAITING or col.claim_wait is None:
            return
        self.query_one(ClaimCountdown).show(col.claim_wait, run_now)


def _event_style(kind: str) -> str:
    if kind in (EventKind.CRASH, EventKind.ERROR):
        return "bold red"
    if kind == RunEventKind.OUTAGE:
        return "bold yellow"
    if kind == EventKind.OUTCOME:
        return "bold"
    return ""


def _shown_state(col: Column) -> ShownState:
    """The column's state for the status line: a worker just seen dying counts as killed."""
    last = col.workers[-1] if col.workers else None
    if col.state == ColumnState.RUNNING and last is not None and last.exit_code is not None:
        # Between a worker's exit and the engine's next step (a presenter may hold it there).
        return ColumnState.KILLED if last.exit_code < 0 else FINISHED
    return col.state


def _label(state: ShownState) -> str:
    return "worker done" if state == FINISHED else state.label


def _status(col: Column, prefix: str, *, compact: bool = False) -> Text:
    """The status line: which worker, how it ended, the state (compact: fewest words)."""
    text = Text(prefix, style="bold")
    state = _shown_state(col)
    killed = False
    if col.workers:
        last = col.workers[-1]
        if not compact:
            text.append("simulated · " if last.simulated else f"pid {last.pid} · ")
        if last.exit_code is not None:
            killed = last.exit_code < 0
            style = "bold white on red" if killed else ""
            text.append(describe_exit(last.exit_code), style=style)
            text.append(" · ")
    if compact and killed and state == ColumnState.KILLED:
        text.right_crop(3)  # the exit says it: no "killed" after it
        return text
    text.append(_label(state), style="bold")
    if col.error:
        text.append(f": {col.error}", style="red")
    return text


def _where(reason: str, mode: str) -> str:
    """A reason as the gate words it ("at Stripe"), said of what answered in this mode."""
    if mode == "offline":
        return reason.replace("at Stripe", "at the emulator")
    if mode == "mock":
        return reason.replace("at Stripe", "at the mock")
    return reason


def _money(cents: int) -> str:
    return f"${cents / 100:.2f}"


def _card(run: RunSnapshot, col: Column, prefix: str, *, compact: bool) -> Text:
    if col.stripe is None:
        return Text("")
    text = Text()
    text.append(f"{prefix}RESULT", style="bold underline")
    source = (SHORT_READ_BACK if compact else READ_BACK).get(run.mode, "")
    text.append(f"  ({source})\n")
    refunds = counting(col.stripe)
    total = _money(col.stripe.refunded_total)
    if compact:
        parts = " + ".join(f"{r.by} ${r.amount / 100:g}" for r in refunds) or "no refunds"
        text.append(f"{prefix}{total}", style="bold")
        text.append(f": {parts}\n")
    else:
        if not refunds:
            text.append(f"{prefix}  no refunds\n")
        for r in refunds:
            text.append(f"{prefix}  {_money(r.amount)}  {r.by:<5}  {r.id}\n")
        text.append(f"{prefix}Total {total}", style="bold")
        wanted = None if col.wanted is None else col.wanted.text
        text.append(f" · wanted: {wanted}\n")
    outcome = col.outcome
    reported = None if outcome is None else outcome.status
    sign, style = mark(col)
    verdict = {"✓": "✓ right", "⚠": "⚠ right money, false alarm", "✗": "✗ wrong"}[sign]
    text.append(f"{prefix}{verdict}", style=style)
    text.append(f" · {reported}" if compact else f"   reported: {reported}")
    if outcome is not None and outcome.reason and not compact:
        text.append(f" ({_where(outcome.reason, run.mode)})")
    text.append("\n")
    if col.truthful is False:
        own = any(r.by == AGENT for r in refunds)
        why = (
            f"it said {reported}, but its own refund went through"
            if own and reported not in ("sent", "adopted")
            else "it reports a refund that is not there"
        )
        text.append(f"{prefix}  {why}\n", style="yellow")
    if outcome is not None and outcome.reapproves:
        text.append(
            f"{prefix}Re-approved: a person approved $20 again; Interlock sent a second "
            f"refund under the new approval ({total} in all, as the person chose)\n",
            style="bold",
        )
    if col.receipt:
        _receipt(text, col.receipt, prefix, compact=compact)
    verify = col.verify
    if verify:
        vmark = "✓" if verify["ok"] else "✗"
        signed = "signed" if verify["signed"] else "unsigned"
        text.append(
            f"{prefix}verify(): {vmark} chain of {verify['chain_length']} ({signed})\n",
            style="bold green" if verify["ok"] else "bold red",
        )
        for problem in verify["problems"]:
            text.append(f"{prefix}  - {problem}\n", style="red")
    if not col.as_predicted:
        for d in col.deviations:
            text.append(f"{prefix}DEVIATION: {d}\n", style="bold red")
    return text


def _receipt(text: Text, receipt: dict[str, Any], prefix: str, *, compact: bool) -> None:
    """The receipt's checks: which passed, which one decided, which were not needed."""
    reapproves = (receipt.get("context") or {}).get("reapproves")
    # Numbered within this run's column, not by the journal's global sequence.
    number = 2 if reapproves else 1
    of_run = "" if compact else " of this run"
    text.append(f"{prefix}Receipt {number}{of_run}: {receipt['outcome']}\n", style="bold")
    if reapproves and not compact:
        text.append(f"{prefix}  re-approves the refused {str(reapproves)[:12]}… (receipt 1)\n")
    checks = receipt.get("checks", [])
    steps = []
    for check in checks:
        name = CHECK_NAMES.get(check["name"], check["name"])
        if check["name"] == "lookup":
            found = receipt["outcome"] == "adopted"
            steps.append(
                ("✓", "lookup: found its own refund" if found else "lookup: none of its own")
            )
        elif check["passed"]:
            steps.append(("✓", f"{name}: ok"))
        else:
            # The check that stopped the send: the gate doing its job, not a failure.
            words = "refunds CHANGED" if check["name"] == "world_unchanged" else "not valid"
            steps.append(("→", f"{name}: {words}"))
    done = {c["name"] for c in checks}
    skipped = [CHECK_NAMES[n] for n in CHECK_NAMES if n not in done]
    end = f"→ {receipt['outcome']}"
    if compact:
        line = " · ".join(f"{m} {w}" for m, w in steps)
        text.append(f"{prefix}  {line} {end}\n")
        return
    for m, words in steps:
        text.append(f"{prefix}  {m} {words}\n", style="green" if m == "✓" else "bold")
    text.append(f"{prefix}  {end}", style="bold")
    if skipped and receipt["outcome"] in ("adopted", "refused"):
        why = "not needed" if receipt["outcome"] == "adopted" else "not reached"
        text.append(f"  ({', '.join(skipped)}: {why})")
    text.append("\n")
