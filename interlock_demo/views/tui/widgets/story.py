"""A column's story in phase lines: decision, SIGKILL, outage, restart, wait, checks, outcome.

The events below a column say everything, in small print; these lines say what a room
must follow, one short bold line per phase, so they can be read from the back of the hall.
The phases are read from the column's events (their kinds), so every engine and mode
tells its story the same way.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from interlock_demo.core.run import Column, RunEventKind
from workers.protocol import GATE_CHECK, GATE_CLAIM, GATE_CLAIM_WAIT, EventKind, gate_kind

GATE_SETTLED = gate_kind("settled")
# The label of each phase and its colour (Rich styles, legible in dark and light themes).
PHASE_STYLE = {
    "decided": "bold",
    "SIGKILL": "bold white on red",
    "outage": "bold black on yellow",
    "restart": "bold black on cyan",
    "wait": "bold black on yellow",
    "checks": "bold",
    "sends": "bold",
    "approve": "bold black on cyan",
    "outcome": "bold reverse",
}
_WHERE = {
    "before-send": "before the send",
    "after-answer": "after the answer",
    "after-decision": "after deciding",
    "after-journal": "after saving",
    "after-sending": "after `sending`",
    "after-outcome": "after the outcome",
    "during-recovery": "in recovery",
}


def _check(text: str) -> str:
    """A check's event in the fewest words: what it found."""
    if text.startswith("lookup: found"):
        return "found its own refund"
    if text.startswith("lookup:"):
        return "no refund of its own"
    if "CHANGED" in text:
        return "refunds CHANGED"
    if text.startswith("world check"):
        return "refunds unchanged"
    if text == "approval: ok":
        return "all passed"
    return _reason(text.removeprefix("approval: "))


def _reason(text: str) -> str:
    if "refunds changed" in text:
        return "refunds changed"
    if "revoked" in text:
        return "approval revoked"
    return text


def _outage(text: str) -> str:
    if "by hand" in text:
        return "hand refund $20"
    if "revokes" in text:
        return "approval revoked"
    return "nothing happens"


def phase_lines(col: Column) -> list[tuple[str, str]]:
    """The column's phases so far as (label, a few words), oldest first."""
    lines: list[tuple[str, str]] = []
    starts = 0
    killed = False
    reapproved = False

    def put(label: str, words: str, *, replace: bool = False) -> None:
        if replace and lines and lines[-1][0] == label:
            lines[-1] = (label, words)
        else:
            lines.append((label, words))

    for event in col.events:
        kind, text = event.kind, event.text
        if kind == EventKind.DECISION:
            amount = text.rsplit("(", 1)[-1].rstrip(")") if "issue_refund" in text else ""
            put("decided", f"refund {amount}" if amount else "no refund")
        elif kind == EventKind.CRASH:
            killed = True
            point = text.rsplit(" at ", 1)[-1] if " at " in text else ""
            where = _WHERE.get(point, "in flight")
            put("SIGKILL", where)  # a mock line is marked MOCK. before its label
        elif kind == RunEventKind.OUTAGE:
            put("outage", _outage(text))
        elif kind == EventKind.START:
            starts += 1
            if starts > 1:
                put("restart", f"new worker {event.pid}" if event.pid else "new worker")
        elif kind == GATE_CLAIM_WAIT:
            simulated = text.startswith("simulated")
            put("wait", "mock clock" if simulated else "dead worker's claim")
        elif kind == GATE_CLAIM and killed and (not lines or lines[-1][0] == "restart"):
            put("wait", "none: claim taken at once")
        elif kind == GATE_CHECK and killed:
            # The newest check is the one that decided (or the last that passed).
            put("checks", _check(text), replace=True)
        elif kind == EventKind.RECHECK:
            found = text.split(": ", 1)[-1]
            words = "CHANGED" if "changed" in found else "revoked" if "revoked" in found else found
            put("checks", f"re-read: {words}")
        elif kind == EventKind.RESUME and "retrying" in text and col.name != "checked":
            put("checks", "none: retries")
        elif kind == EventKind.SEND and killed:
            put("sends", "again")
        elif kind == RunEventKind.REAPPROVE:
            reapproved = True
            put("approve", "a person, again")
        elif kind == GATE_SETTLED and reapproved:
            put("outcome", text.rsplit(": ", 1)[-1])
        elif kind == EventKind.OUTCOME:
            # The status alone: the checks line above already says why.
            put("outcome", text.removeprefix("outcome: ").split(" (")[0].split(":")[0])
    return lines


class PhaseLines(Static):
    """The phase lines of one column, newest last."""

    def show(self, col: Column, prefix: str = "") -> None:
        """Render the phases in the column's events."""
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, (label, words) in enumerate(phase_lines(col)):
            if n:
                text.append("\n")
            text.append(prefix, style="bold")
            text.append(f"{label} ", style=PHASE_STYLE.get(label, "bold"))
            text.append(f" {words}", style="bold")
        self.update(text)
