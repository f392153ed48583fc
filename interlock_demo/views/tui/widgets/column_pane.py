"""One column of the run: status, phase lines, claim countdown, events, result card.

The status line holds `exit -9 (SIGKILL) · killed` and `restarting` on screen for a minimum
time (`hold_s`) even when the run moves on within milliseconds: the view lags a moment
behind, the run is never slowed. Which states to hold is read from the column's workers
(every worker that died by a signal is shown killed, then restarting), not from the
snapshots that happened to reach the view: a burst of changes coalesces into one snapshot,
and a restart can be over before the view hears of the kill. Later states queue behind a
held one and are shown in order; while they wait, the events, the phase lines and the card
stay at the moment the status line shows, and the column is not `caught_up`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal

from rich.console import Console
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Label, Static

from interlock import format_amount
from interlock_demo.core.run import Column, ColumnState, RunEventKind, RunSnapshot, WorkerInfo
from interlock_demo.core.verdict import AGENT, counting, replay_note
from interlock_demo.exit_codes import describe_exit
from interlock_demo.settings.modes import line_mark, mode_named
from interlock_demo.views.tui.widgets.countdown import ClaimCountdown
from interlock_demo.views.tui.widgets.story import PhaseLines, elide
from interlock_demo.views.tui.widgets.verdict_strip import mark
from scenarios import CURRENCY, REFUND_AMOUNT
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
# Checks the card draws only when they stopped the send: every demo payment is in
# scenarios.CURRENCY, so a passed currency check has nothing to tell the room.
QUIET_WHEN_PASSED = frozenset({"currency"})


class _EventList(VerticalScroll, can_focus=False):
    """A column's events, kept scrolled to the newest line.

    It scrolls when its content grows (new lines) and when its own size changes (the
    result card takes room below it, the terminal is resized), each time after the
    layout settled, so the last line is in view whatever the order of those changes.
    It never takes the focus (the mouse wheel still scrolls it): focused, its own left
    and right (scrolling) hid the app's from the key bar while one column was zoomed.
    """

    def watch_virtual_size(self) -> None:
        self.scroll_end(animate=False)

    def on_resize(self) -> None:
        self.scroll_end(animate=False)


class ColumnPane(Vertical):
    """Shows one column of a run; fed snapshots, it never reads the engine itself."""

    class StatusShown(Message):
        """The status line took another state (`text` is what it says now)."""

        bubble = False

        def __init__(self, pane: ColumnPane, state: str, text: str) -> None:
            super().__init__()
            self.pane = pane
            self.state = state
            self.text = text

    class CaughtUp(Message):
        """No held state is waiting any more: the column shows the run as it is."""

        def __init__(self, pane: ColumnPane) -> None:
            super().__init__()
            self.pane = pane

    def __init__(self, name: str, title: str) -> None:
        super().__init__(id=f"col-{name}", classes="column")
        self.column_name = name
        self.column_title = title
        # How long a held state stays on screen, and the clock that measures it.
        self.hold_s = HOLD_S
        self.clock: Callable[[], float] = time.monotonic
        self.compact = False
        # Side by side in a narrow column, the state goes on a line under the pid and exit.
        self.two_line_status = False
        # Each event is one line, cut at a word, this wide (None: not laid out yet).
        self.event_width: int | None = None
        # One column at a time, two phase lines share a row.
        self.paired_phases = False
        self._place: str | None = None
        self._events_shown = 0
        self._lines = Text()
        self._card_text = ""
        self._run_id: str | None = None
        self._shown_state: ShownState = ColumnState.IDLE
        self._shown_at = 0.0
        # States waiting behind a held one: the state, its text, and the run time up to
        # which events are shown with it (None: all of them).
        self._queue: list[tuple[ShownState, Text, float | None]] = []
        self._shown_until: float | None = None
        # The (worker index, state) pairs of dead workers already queued or shown.
        self._milestones: set[tuple[int, ColumnState]] = set()
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
        self._shown_until = None
        self._milestones = set()
        self._last = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._shown_state = ColumnState.IDLE
        self.set_class(mock, "-mock")
        self.set_class(False, "-killed", "-waiting", "-done", "-wrong", "-right", "-alarm")
        self._show_title()
        self._set_status(ColumnState.IDLE, Text("idle"))
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

    @property
    def caught_up(self) -> bool:
        """Whether the column shows the run as it is (no held state keeps it behind)."""
        return not self._queue

    def show(self, run: RunSnapshot, col: Column) -> None:
        """Render a snapshot of the column; events are appended, never redrawn."""
        mode = mode_named(run.mode)
        if self._run_id != run.run_id:
            self.reset(mock=mode.in_process)
            self._run_id = run.run_id
        self._last = (run, col)
        prefix = line_mark(mode)
        for index, worker, state in _dead_worker_states(col):
            if (index, state) in self._milestones:
                continue
            self._milestones.add((index, state))
            until = _next_start(col, index)
            status = _status_of(worker, state, prefix, two_lines=self.two_line_status)
            self._want(state, status, until)
        self._want(_shown_state(col), _status(col, prefix, two_lines=self.two_line_status), None)
        self._advance()
        self._render_shown()

    def on_resize(self) -> None:
        self._fit_events()

    def _fit_events(self) -> None:
        """Each event one line as wide as the list: a wrapped event scrolled half out of
        view left a fragment at the top."""
        width = self.content_region.width
        if width == self.event_width or (width is not None and width <= 0):
            return
        self.event_width = width
        self._render_shown(force_card=True)

    def relayout(
        self, *, compact: bool, two_line_status: bool = False, paired: bool = False
    ) -> None:
        """Switch between the full and the compact card, and a status of one or two lines."""
        if (compact, two_line_status, paired) == (
            self.compact,
            self.two_line_status,
            self.paired_phases,
        ):
            return
        self.compact = compact
        self.two_line_status = two_line_status
        self.paired_phases = paired
        self._fit_events()
        self.set_class(two_line_status, "-two-line-status")
        if self._last is not None:
            run, col = self._last
            prefix = line_mark(mode_named(run.mode))
            self._want(_shown_state(col), _status(col, prefix, two_lines=two_line_status), None)
            self._advance()
            self._render_shown(force_card=True)

    def _render_shown(self, *, force_card: bool = False) -> None:
        """Events and phase lines up to the moment the status line shows; the card once
        the column caught up."""
        if self._last is None:
            return
        run, col = self._last
        prefix = line_mark(mode_named(run.mode))
        if force_card:
            self._lines, self._events_shown = Text(), 0
        # The events up to the moment shown, as a prefix of the list; never fewer than are
        # drawn already: a kill the view heard of late holds a moment that events already
        # on screen came after, and a list that is only appended to cannot take them back.
        until = self._shown_until
        count = next(
            (n for n, e in enumerate(col.events) if until is not None and e.t > until),
            len(col.events),
        )
        count = max(count, self._events_shown)
        events = col.events[:count]
        new = events[self._events_shown :]
        for event in new:
            if self._lines:
                self._lines.append("\n")
            self._lines.append(prefix, style="bold")
            self._lines.append(f"{event.t:5.2f}s ", style="dim")
            head = len(prefix) + 7
            if event.pid and not self.compact:  # compact: the status line names the pid
                self._lines.append(f"[{event.pid}] ", style="dim")
                head += len(str(event.pid)) + 3
            words = event.text
            if self.event_width is not None:
                words = elide(words, self.event_width - head)
            self._lines.append(words, style=_event_style(event.kind))
        self._events_shown = len(events)
        if new or force_card:
            self.query_one(".event-lines", Static).update(self._lines)
            shown = dataclasses.replace(col, events=events)
            width = None if self.event_width is None or not self.compact else self.event_width
            self.query_one(".story", PhaseLines).show(
                shown, prefix, pairs=self.paired_phases, width=width
            )
        if self.caught_up:
            self._render_card(run, col, prefix, force=force_card)

    @property
    def card_text(self) -> str:
        """The result card's lines as they were written, before a simulated run's long
        lines are wrapped with the prefix on each row ("" before the card)."""
        return self._card_text

    def _render_card(self, run: RunSnapshot, col: Column, prefix: str, *, force: bool) -> None:
        card = _card(run, col, prefix, compact=self.compact, narrow=self.two_line_status)
        if force or card.plain != self._card_text:
            self._card_text = card.plain
            if prefix and card and self.event_width is not None:
                card = _wrapped(card, prefix, self.event_width, self.app.console)
            self.query_one(".card", Static).update(card)
        sign = mark(col)[0] if col.stripe is not None else None
        self.set_class(sign == "✗", "-wrong")
        self.set_class(sign == "✓", "-right")
        self.set_class(sign == "⚠", "-alarm")

    def _want(self, state: ShownState, text: Text, until: float | None) -> None:
        """Queue `state` for the status line (`_advance` shows it, after any held state)."""
        if self._queue and self._queue[-1][0] == state:
            self._queue[-1] = (state, text, until)
        elif not self._queue and state == self._shown_state:
            self._shown_until = until
            self._set_status(state, text)
        else:
            self._queue.append((state, text, until))

    def catch_up(self) -> None:
        """Show the queued states whose turn has come (by `clock`); the hold's timer calls it."""
        self._advance()

    def _advance(self) -> None:
        self._timer = None
        waited = bool(self._queue)
        while self._queue:
            if self._shown_state != FINISHED and self._shown_state.held:
                left = self.hold_s - (self.clock() - self._shown_at)
                if left > 0:
                    if self._timer is None:
                        self._timer = self.set_timer(left, self.catch_up)
                    return
            state, text, until = self._queue.pop(0)
            self._shown_state = state
            self._shown_at = self.clock()
            self._shown_until = until
            self._set_status(state, text)
            self.set_class(state == ColumnState.KILLED, "-killed")
            self.set_class(state == ColumnState.WAITING, "-waiting")
            self.set_class(state == ColumnState.DONE, "-done")
            if state == ColumnState.WAITING and self._last is not None:
                self.tick(self._last[0].now, self._last[1])
            self._render_shown()
        if waited:
            self.post_message(self.CaughtUp(self))

    def _set_status(self, state: ShownState, text: Text) -> None:
        status = self.query_one(".status", Static)
        if isinstance(status.content, Text) and status.content.plain == text.plain:
            return
        status.update(text)
        self.post_message(self.StatusShown(self, str(state), text.plain))

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


def _dead_worker_states(col: Column) -> list[tuple[int, WorkerInfo, ColumnState]]:
    """The held states the column's workers went through: each worker a signal ended was
    killed, and restarting once the column went on (a later worker, or the engine said so)."""
    states = []
    for index, worker in enumerate(col.workers):
        if worker.exit_code is None or worker.exit_code >= 0:
            continue
        states.append((index, worker, ColumnState.KILLED))
        last = index == len(col.workers) - 1
        if not last or col.state not in (ColumnState.RUNNING, ColumnState.KILLED):
            states.append((index, worker, ColumnState.RESTARTING))
    return states


def _next_start(col: Column, index: int) -> float | None:
    """When the worker after `index` started (run time), or None while there is none."""
    return col.workers[index + 1].started_at if index + 1 < len(col.workers) else None


def _status(col: Column, prefix: str, *, two_lines: bool = False) -> Text:
    """The status line for the column as it is now."""
    last = col.workers[-1] if col.workers else None
    return _status_of(last, _shown_state(col), prefix, two_lines=two_lines, error=col.error)


def _status_of(
    worker: WorkerInfo | None,
    state: ShownState,
    prefix: str,
    *,
    two_lines: bool = False,
    error: str | None = None,
) -> Text:
    """The status line: which worker, how it ended, the state. On `two_lines` the state goes
    on a second line, so a narrow column never cuts the pid or the exit."""
    text = Text(prefix, style="bold")
    if worker is not None:
        parts: list[tuple[str, str]] = []
        if not worker.simulated:
            parts.append((f"pid {worker.pid}", ""))
        elif not two_lines:
            parts.append(("simulated", ""))
        if worker.exit_code is not None:
            style = "bold white on red" if worker.exit_code < 0 else ""
            parts.append((describe_exit(worker.exit_code), style))
        for n, (words, style) in enumerate(parts):
            text.append(" · " if n else "")
            text.append(words, style=style)
        if two_lines:
            text.append("\n")
            text.append(prefix, style="bold")  # a simulated run's every row says so
        elif parts:
            text.append(" · ")
    text.append(_label(state), style="bold")
    if error:
        text.append(f": {error}", style="red")
    return text


def _wrapped(text: Text, prefix: str, width: int, console: Console) -> Text:
    """`text`, whose every line starts with `prefix`, wrapped at words to `width` with
    `prefix` on every row it takes: a simulated run's card never shows a row without it."""
    out = Text()
    for line in text.split("\n", include_separator=False):
        body = line[len(prefix) :] if line.plain.startswith(prefix) else line
        for row in body.wrap(console, max(width - len(prefix), 1)):
            if out:
                out.append("\n")
            out.append(prefix, style="bold")
            out.append_text(row)
    return out


def _money(cents: int, *, trim: bool = False) -> str:
    return format_amount(cents, CURRENCY, trim=trim)


def _card(
    run: RunSnapshot, col: Column, prefix: str, *, compact: bool, narrow: bool = False
) -> Text:
    """The result card; `compact` in fewer lines, `narrow` (side by side below 160) with only
    the receipt's deciding check."""
    if col.stripe is None:
        return Text("")
    text = Text()
    text.append(f"{prefix}RESULT", style="bold underline")
    source = (SHORT_READ_BACK if compact else READ_BACK).get(run.mode, "")
    text.append(f"  ({source})\n")
    refunds = counting(col.stripe)
    total = _money(col.stripe.refunded_total)
    if compact:
        parts = " + ".join(f"{r.by} {_money(r.amount, trim=True)}" for r in refunds) or "no refunds"
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
        text.append(f" ({outcome.reason})")
    text.append("\n")
    if col.truthful is False:
        own = any(r.by == AGENT for r in refunds)
        why = (
            f"it said {reported}, but its own refund went through"
            if own and reported not in ("sent", "adopted")
            else "it reports a refund that is not there"
        )
        text.append(f"{prefix}  {why}\n", style="yellow")
    replayed = replay_note(col, mode_named(run.mode).answerer)
    if replayed is not None and not compact:
        # A compact card, cut at the bottom on a short screen, leaves it to the phase line
        # ("answer  the same refund") and the verdict strip.
        text.append(f"{prefix}  {replayed}\n")
    if outcome is not None and outcome.reapproves:
        text.append(
            f"{prefix}Re-approved: a person approved {_money(REFUND_AMOUNT, trim=True)} again; "
            f"Interlock sent a second refund under the new approval ({total} in all, as the "
            "person chose)\n",
            style="bold",
        )
    # Compact cards may be cut at the bottom: verify()'s line goes before the checks.
    receipts = 0
    if col.receipt:
        receipts = 2 if (col.receipt.get("context") or {}).get("reapproves") else 1
    if compact:
        _verify(text, col.verify, prefix, receipts, compact=True)
    if col.receipt:
        _receipt(text, col.receipt, prefix, compact=compact, narrow=narrow)
    if not compact:
        _verify(text, col.verify, prefix, receipts, compact=False)
    if not col.as_predicted:
        for d in col.deviations:
            text.append(f"{prefix}DEVIATION: {d}\n", style="bold red")
    return text


def _verify(
    text: Text, verify: dict[str, Any] | None, prefix: str, receipts: int, *, compact: bool
) -> None:
    """verify()'s line: whether the receipts and their log hold, this run's receipt's place
    in the log (`log_words`), and the problems. The card counts this run's receipts; the
    log verify() checks is every run's in INTERLOCK_HOME (`interlock verify` prints its
    size)."""
    if not verify:
        return
    ok = verify["ok"]
    vmark = "✓" if ok else "✗"
    style = "bold green" if ok else "bold red"
    if compact:
        broken = "" if ok else "BROKEN · "
        text.append(f"{prefix}verify(): {vmark} {broken}{log_words(verify)}\n", style=style)
    else:
        holds = "holds" if ok else "BROKEN"
        plural = "" if receipts == 1 else "s"
        line = f"verify(): {vmark} {holds} · this run: {receipts} receipt{plural}"
        text.append(f"{prefix}{line}\n", style=style)
        text.append(f"{prefix}  {log_words(verify)}\n", style=style)
    for problem in verify["problems"]:
        text.append(f"{prefix}  - {problem}\n", style="red")


def log_words(verify: dict[str, Any]) -> str:
    """`signed · in the log at N · anchored`: whether the receipts are signed with the
    gate's key (checked with its public key alone), this run's receipt's place in the
    receipt log (counted from 1), and whether an anchored head covers it; each said the
    other way when it is not so."""
    signed = "signed" if verify["signed"] else "unsigned"
    place = verify.get("log_place")
    where = "not in the log yet" if place is None else f"in the log at {place}"
    anchored = "anchored" if verify.get("receipt_anchored") else "not anchored"
    return f"{signed} · {where} · {anchored}"


def _signer(checks: list[dict[str, Any]]) -> str | None:
    """`signed by <grantor>` from the receipt's passed signature check (its key id left
    off: the card has no room for it; the receipt keeps it), else None."""
    for check in checks:
        observed = check.get("observed")
        signed = isinstance(observed, str) and observed.startswith("signed by ")
        if check["name"] == "approval_signature" and check["passed"] and signed:
            return str(observed).split(" (key ", 1)[0]
    return None


def _receipt(
    text: Text, receipt: dict[str, Any], prefix: str, *, compact: bool, narrow: bool = False
) -> None:
    """The receipt's checks: which passed, which one decided, which were not needed."""
    reapproves = (receipt.get("context") or {}).get("reapproves")
    # Numbered within this run's column, not by the journal's global sequence.
    number = 2 if reapproves else 1
    of_run = "" if compact else " of this run"
    text.append(f"{prefix}Receipt {number}{of_run}: {receipt['outcome']}\n", style="bold")
    if reapproves and not compact:
        text.append(f"{prefix}  re-approves the refused {str(reapproves)[:12]}… (receipt 1)\n")
    checks = [
        c for c in receipt.get("checks", []) if not (c["name"] in QUIET_WHEN_PASSED and c["passed"])
    ]
    signer = _signer(checks)
    steps = []
    for check in checks:
        name = CHECK_NAMES.get(check["name"], check["name"])
        if check["name"] == "approval_signature":
            # Shown on the approval's line: who signed it, or why it counts for nothing.
            if not check["passed"]:
                steps.append(("→", "approval: not signed by an approver"))
            continue
        if check["name"] == "approval" and check["passed"] and signer:
            steps.append(("✓", f"{name}: ok, {signer}"))
        elif check["name"] == "lookup":
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
    if narrow:
        # The check that decided, else the one that found something, else all passed.
        decided = next((w for m, w in steps if m == "→"), None)
        if decided is None and receipt["outcome"] == "adopted":
            decided = "lookup: found its own refund"
        line = f"→ {decided}" if decided else "✓ every check passed"
        text.append(f"{prefix}  {line.replace('world check: ', '')}\n")
        return
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
