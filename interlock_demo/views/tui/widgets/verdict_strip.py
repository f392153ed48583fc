"""The verdict strip across the bottom when a run ends: one line per column.

Each line: the column, the money at Stripe (or the emulator, or in memory), a mark and one
short reason a room can take home: ✓ the money is right and the report true, ⚠ the money
is right but the report is a false alarm, ✗ the money is wrong.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

SHORT_TITLES = {"standard": "Standard", "interlock": "Interlock", "checked": "Checked"}
WHERE = {"live": "at Stripe", "offline": "in the emulator", "mock": "in memory"}


def _money(cents: int) -> str:
    return f"${cents / 100:.2f}"


def mark(col: dict[str, Any]) -> tuple[str, str]:
    """The column's mark and its style: ✓ right, ⚠ right money but a false alarm, ✗ wrong."""
    if not col.get("ok"):
        return "✗", "bold red"
    if col.get("truthful") is False:
        return "⚠", "bold yellow"
    return "✓", "bold green"


def reason(col: dict[str, Any], scenario: str = "") -> str:
    """One short reason for the column's end (in `scenario`), in plain words."""
    outcome = col.get("outcome") or {}
    status = outcome.get("status")
    why = str(outcome.get("reason") or "")
    stripe = col.get("stripe") or {}
    total = int(stripe.get("refunded_total", 0))
    refunds = [r for r in stripe.get("refunds", []) if r.get("status") != "failed"]
    hand = any(r.get("by") == "hand" for r in refunds)
    own = any(r.get("by") == "agent" for r in refunds)
    if col.get("error"):
        return f"could not finish: {col['error']}"
    if outcome.get("reapproves"):
        return f"re-approved by a person: sent, {_money(total)} in all"
    if status == "sent":
        if col.get("ok"):
            return "sent once" if not hand else f"sent: {_money(total)} in all"
        if scenario == "revoked":
            return f"retried blindly: {_money(total)} despite the revocation"
        return f"retried blindly: {_money(total)}"
    if status == "adopted":
        return "found its own refund: adopted"
    if status in ("refused", "stopped"):
        seen = (
            "saw the revocation"
            if "revoked" in why or "approval" in why
            else "saw the hand refund"
            if hand
            else "saw a change"
        )
        if own and col.get("truthful") is False:
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
    """Per column of a finished run: money, mark, reason. Hidden while nothing is finished."""

    def show(self, run: dict[str, Any] | None) -> None:
        """Render the verdicts of `run`, or hide the strip when it has not finished."""
        if run is None or run["status"] == "running":
            self.display = False
            return
        where = WHERE.get(run["mode"], "at Stripe")
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, col in enumerate(run["columns"]):
            if n:
                text.append("\n")
            if col.get("stripe") is None:
                text.append(f" {SHORT_TITLES.get(col['name'], col['name']):<10}", style="bold")
                text.append(f" ✗ {reason(col, run['scenario'])}", style="bold red")
                continue
            sign, style = mark(col)
            money = _money(int(col["stripe"]["refunded_total"]))
            text.append(f" {SHORT_TITLES.get(col['name'], col['name']):<10}", style="bold")
            text.append(f"{money:>7} {where}  ")
            text.append(f"{sign} ", style=style)
            text.append(reason(col, run["scenario"]), style=style)
        if run.get("error") and not any(c.get("error") for c in run["columns"]):
            text.append(f"\n run failed: {run['error']}", style="bold red")
        self.update(text)
        self.display = True
