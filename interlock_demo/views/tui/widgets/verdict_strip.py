"""The verdict strip across the bottom when a run ends: one line per column.

Each line: the column, the money at Stripe (or the emulator, or in memory), a mark and one
short reason a room can take home: ✓ the money is right and the report true, ⚠ the money
is right but the report is a false alarm, ✗ the money is wrong. One column at a time (the
narrowest layout) the place goes once into the strip's top border, so each line stays whole.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from interlock import format_amount
from interlock_demo.core.columns import column_kind
from interlock_demo.core.run import Column, RunSnapshot
from interlock_demo.core.verdict import AGENT, HAND, counting, failed_check, replay, revoked
from interlock_demo.settings.modes import MODES
from scenarios import CURRENCY
from workers.protocol import CHECK_APPROVAL
from workers.protocol.words import MONEY_AT


def _money(cents: int) -> str:
    return format_amount(cents, CURRENCY)


def mark(col: Column) -> tuple[str, str]:
    """The column's mark and its style: ✓ right, ⚠ right money but a false alarm, ✗ wrong."""
    if not col.ok:
        return "✗", "bold red"
    if col.truthful is False:
        return "⚠", "bold yellow"
    return "✓", "bold green"


def reason(col: Column) -> str:
    """One short reason for the column's end, in plain words, from its outcome, its refunds
    and its events' fields."""
    outcome = col.outcome
    status = None if outcome is None else outcome.status
    total = 0 if col.stripe is None else col.stripe.refunded_total
    refunds = [] if col.stripe is None else counting(col.stripe)
    hand = any(r.by == HAND for r in refunds)
    own = any(r.by == AGENT for r in refunds)
    if col.error:
        return f"could not finish: {col.error}"
    if outcome is not None and outcome.reapproves:
        return f"re-approved by a person: sent, {_money(total)} in all"
    if status == "sent":
        if col.ok and replay(col) is not None:
            return "sent twice, one refund: the key replayed"
        if col.ok:
            return "sent once" if not hand else f"sent: {_money(total)} in all"
        if revoked(col):
            return f"retried blindly: {_money(total)} despite the revocation"
        return f"retried blindly: {_money(total)}"
    if status == "adopted":
        return "found its own refund: adopted"
    if status in ("refused", "stopped"):
        seen = (
            "saw the revocation"
            if failed_check(col) == CHECK_APPROVAL
            else "saw the hand refund"
            if hand
            else "saw a change"
        )
        if own and col.truthful is False:
            if status == "stopped":
                return "re-checked, but stopped on its own refund"
            return "could not tell the refund was its own: refused"
        if status == "stopped":
            return f"re-checked, {seen}: stopped"
        return f"{seen}: refused"
    if status == "pending":
        return "unknown: left pending, honestly"
    return str(status or "no outcome")


class VerdictStrip(Static):
    """Per column of a finished run: money, mark, reason. Hidden while nothing is finished.

    `narrow` (one column at a time): where the money was read is said once, in the top
    border ("Refunded at the emulator"), not on each line; at 80 cells the offline reason
    for a blind retry after a revocation would lose its end otherwise.
    """

    narrow = reactive(False, init=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._run: RunSnapshot | None = None

    def watch_narrow(self) -> None:
        self.show(self._run)

    def show(self, run: RunSnapshot | None) -> None:
        """Render the verdicts of `run`, or hide the strip when it has not finished."""
        self._run = run
        if run is None or not run.finished:
            self.display = False
            return
        mode = MODES.get(run.mode)
        where = "at Stripe" if mode is None else MONEY_AT[mode.answerer]
        self.border_title = f"Refunded {where}" if self.narrow else None
        place = "  " if self.narrow else f" {where}  "
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, col in enumerate(run.columns):
            if n:
                text.append("\n")
            title = column_kind(col.name).short_title
            if col.stripe is None:
                text.append(f" {title:<10}", style="bold")
                text.append(f" ✗ {reason(col)}", style="bold red")
                continue
            sign, style = mark(col)
            money = _money(col.stripe.refunded_total)
            text.append(f" {title:<10}", style="bold")
            text.append(f"{money:>7}{place}")
            text.append(f"{sign} ", style=style)
            text.append(reason(col), style=style)
        if run.error and not any(c.error for c in run.columns):
            text.append(f"\n run failed: {run.error}", style="bold red")
        self.update(text)
        self.display = True
