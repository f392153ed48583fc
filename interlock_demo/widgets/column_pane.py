"""One column of the run: status line, claim countdown, events as they happen, result card."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, ProgressBar, Static

from interlock_demo.supervisor import describe_exit

STATE_TEXT = {
    "idle": "idle",
    "starting": "creating the payment and the approval",
    "running": "running",
    "killed": "killed",
    "restarting": "restarting",
    "waiting": "waiting for the claim",
    "done": "done",
    "error": "error",
}


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
        self._events_shown = 0
        self._lines = Text()
        self._card_text = ""
        self._run_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Label(self.column_title, classes="title")
        yield Static("idle", classes="status")
        yield ProgressBar(total=100, show_eta=False, show_percentage=False, classes="countdown")
        with _EventList(classes="events"):
            yield Static("", classes="event-lines")
        yield Static("", classes="card")

    def reset(self, *, mock: bool) -> None:
        """Empty the column for a new run (or idle)."""
        self._events_shown = 0
        self._lines = Text()
        self._card_text = ""
        self._run_id = None
        self.set_class(mock, "-mock")
        self.set_class(False, "-killed", "-waiting", "-done", "-wrong", "-right")
        title = Text(self.column_title, style="bold")
        if mock:
            title.append(" ")
            title.append(" MOCK ", style="bold reverse")
        self.query_one(".title", Label).update(title)
        self.query_one(".status", Static).update("idle")
        self.query_one(".event-lines", Static).update("")
        self.query_one(".card", Static).update("")
        self.query_one(".countdown", ProgressBar).update(progress=0)

    def show(self, run: dict[str, Any], col: dict[str, Any]) -> None:
        """Render a snapshot of the column; events are appended, never redrawn."""
        mock = run["mode"] == "mock"
        if self._run_id != run["run_id"]:
            self.reset(mock=mock)
            self._run_id = run["run_id"]
        prefix = "MOCK. " if mock else ""
        new = col["events"][self._events_shown :]
        for event in new:
            if self._lines:
                self._lines.append("\n")
            self._lines.append(prefix, style="bold")
            self._lines.append(f"{event['t']:5.2f}s ", style="dim")
            if event.get("pid"):
                self._lines.append(f"[{event['pid']}] ", style="dim")
            self._lines.append(event["text"], style=_event_style(event["kind"]))
        self._events_shown = len(col["events"])
        if new:
            self.query_one(".event-lines", Static).update(self._lines)
        card = _card(run, col, prefix)
        if card.plain != self._card_text:
            self._card_text = card.plain
            self.query_one(".card", Static).update(card)
        state = col["state"]
        self.set_class(state == "killed", "-killed")
        self.set_class(state == "waiting", "-waiting")
        self.set_class(state == "done", "-done")
        self.set_class(col.get("ok") is False, "-wrong")
        self.set_class(col.get("ok") is True, "-right")
        self.query_one(".status", Static).update(_status(col, prefix))

    def tick(self, run_now: float, col: dict[str, Any] | None) -> None:
        """Move the claim countdown bar to `run_now` (seconds since the run started)."""
        bar = self.query_one(".countdown", ProgressBar)
        wait = (col or {}).get("claim_wait")
        if not wait:
            bar.update(progress=0)
            return
        span = max(wait["until"] - wait["from"], 1e-6)
        done = min(max((run_now - wait["from"]) / span, 0.0), 1.0)
        bar.update(progress=100 * done)
        left = max(wait["until"] - run_now, 0.0)
        self.query_one(".status", Static).update(f"waiting for the claim: {left:4.1f} s left")


def _event_style(kind: str) -> str:
    if kind == "crash":
        return "bold red"
    if kind == "outage":
        return "bold yellow"
    if kind == "outcome":
        return "bold"
    if kind in ("error",):
        return "bold red"
    return ""


def _status(col: dict[str, Any], prefix: str) -> Text:
    workers = col.get("workers") or []
    text = Text(prefix, style="bold")
    if workers:
        last = workers[-1]
        pid = "simulated" if last.get("simulated") else f"pid {last.get('pid')}"
        text.append(f"{pid} · ")
        if last.get("exit_code") is not None:
            text.append(
                describe_exit(last["exit_code"]), style="bold red" if last["exit_code"] < 0 else ""
            )
            text.append(" · ")
    state = col["state"]
    text.append(STATE_TEXT.get(state, state), style="bold")
    if col.get("error"):
        text.append(f": {col['error']}", style="red")
    return text


def _money(cents: int) -> str:
    return f"${cents / 100:.2f}"


def _card(run: dict[str, Any], col: dict[str, Any], prefix: str) -> Text:
    stripe = col.get("stripe")
    if stripe is None:
        return Text("")
    mock = run["mode"] == "mock"
    text = Text()
    text.append(f"{prefix}RESULT", style="bold underline")
    text.append("  (MOCK: in-memory payments)\n" if mock else "  (read back from Stripe)\n")
    refunds = [
        r for r in stripe["refunds"] if r["status"] in ("pending", "requires_action", "succeeded")
    ]
    if not refunds:
        text.append(f"{prefix}  no refunds\n")
    for r in refunds:
        text.append(f"{prefix}  {_money(r['amount'])}  {r['by']:<5}  {r['id']}\n")
    text.append(f"{prefix}Total {_money(stripe['refunded_total'])}", style="bold")
    text.append(f" · wanted: {col['wanted'].get('text')}\n")
    if col.get("ok"):
        text.append(f"{prefix}✓ right", style="bold green")
    else:
        text.append(f"{prefix}✗ wrong", style="bold red")
    outcome = col.get("outcome") or {}
    reported = outcome.get("status")
    text.append(f"   reported: {reported}")
    if outcome.get("reason"):
        text.append(f" ({outcome['reason']})")
    text.append("\n")
    if col.get("truthful") is False:
        own = any(r["by"] == "agent" for r in refunds)
        why = (
            "a false alarm: its own refund is at Stripe"
            if own and reported not in ("sent", "adopted")
            else "it reports a refund that Stripe does not have"
        )
        text.append(f"{prefix}⚠ report not truthful: {why}\n", style="bold yellow")
    receipt = col.get("receipt")
    if receipt:
        text.append(f"{prefix}Receipt #{receipt['seq']}: {receipt['outcome']}\n", style="bold")
        reapproves = (receipt.get("context") or {}).get("reapproves")
        if reapproves:
            text.append(f"{prefix}  re-approves the refused {str(reapproves)[:12]}…\n")
        for check in receipt.get("checks", []):
            mark = "✓" if check["passed"] else "✗"
            text.append(
                f"{prefix}  {mark} {check['name']}\n", style="green" if check["passed"] else "red"
            )
    verify = col.get("verify")
    if verify:
        mark = "✓" if verify["ok"] else "✗"
        signed = "signed" if verify["signed"] else "unsigned"
        text.append(
            f"{prefix}verify(): {mark} chain of {verify['chain_length']} ({signed})\n",
            style="bold green" if verify["ok"] else "bold red",
        )
        for problem in verify["problems"]:
            text.append(f"{prefix}  - {problem}\n", style="red")
    if not col.get("as_predicted"):
        for d in col.get("deviations", []):
            text.append(f"{prefix}DEVIATION: {d}\n", style="bold red")
    return text
