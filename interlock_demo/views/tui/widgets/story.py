"""A column's story in phase lines: decision, SIGKILL, outage, restart, wait, checks, sends,
the answer to a resend when it was a replay, outcome.

The events below a column say everything, in small print; these lines say what a room
must follow, one short bold line per phase, so they can be read from the back of the hall.
The phases are read from the column's events (their kinds and fields, never their words),
so every engine and mode tells its story the same way, whatever the event lines say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widgets import Static

from interlock import GateEvent, format_amount
from interlock.testing import CrashPoint
from interlock_demo.core.columns import column_kind
from interlock_demo.core.run import Column, RunEventKind
from interlock_demo.core.verdict import replay, revoked
from scenarios import CURRENCY, Outage
from workers.protocol import (
    CHECK_APPROVAL,
    CHECK_LOOKUP,
    CHECK_WORLD,
    GATE_CHECK,
    GATE_CLAIM,
    GATE_CLAIM_WAIT,
    EventKind,
    gate_kind,
)

GATE_SETTLED = gate_kind(GateEvent.SETTLED)
# The label of each phase and its colour (Rich styles, legible in dark and light themes).
PHASE_STYLE = {
    "decided": "bold",
    "SIGKILL": "bold white on red",
    "outage": "bold black on yellow",
    "restart": "bold black on cyan",
    "wait": "bold black on yellow",
    "checks": "bold",
    "sends": "bold",
    "answer": "bold",
    "approve": "bold black on cyan",
    "outcome": "bold reverse",
}
# Where a worker was killed, in a phase line's words: one for every crash point.
WHERE_KILLED: dict[CrashPoint, str] = {
    CrashPoint.AFTER_DECISION: "after deciding",
    CrashPoint.AFTER_JOURNAL: "after saving",
    CrashPoint.AFTER_CHECK: "after a check",
    CrashPoint.AFTER_SENDING: "after `sending`",
    CrashPoint.BEFORE_SEND: "before the send",
    CrashPoint.IN_FLIGHT: "in flight",
    CrashPoint.AFTER_UNSETTLED_ANSWER: "after a lost answer",
    CrashPoint.AFTER_ANSWER: "after the answer",
    CrashPoint.AFTER_OUTCOME: "after the outcome",
    CrashPoint.DURING_RECOVERY: "in recovery",
}
# What the checked worker's re-check found, by the check that stopped it.
_RECHECK_FOUND = {CHECK_WORLD: "CHANGED", CHECK_APPROVAL: "revoked"}


def _check(col: Column, data: Mapping[str, Any]) -> str:
    """A gate check's event in the fewest words: what it found."""
    name = data.get("name")
    if name == CHECK_LOOKUP:
        return "found its own refund" if data.get("found") else "no refund of its own"
    if name == CHECK_WORLD:
        return "refunds unchanged" if data.get("passed") else "refunds CHANGED"
    if data.get("passed"):
        return "all passed"
    # The gate words the approval's problem for people; that support revoked it is the
    # column's own outage event's to say.
    if revoked(col):
        return "approval revoked"
    return str(data.get("problem"))


def _recheck(data: Mapping[str, Any]) -> str:
    """The checked worker's re-check in the fewest words: what stopped it, if anything."""
    if data.get("error") is not None:
        return f"{data['error']}; nothing sent"
    return _RECHECK_FOUND.get(str(data.get("failed_check")), "unchanged")


def _outage(data: Mapping[str, Any]) -> str:
    outage = Outage(data["outage"])
    if outage.refunds_by_hand:
        return f"{outage.screen} {format_amount(int(data.get('amount', 0)), CURRENCY, trim=True)}"
    return outage.screen


def phase_lines(col: Column) -> list[tuple[str, str]]:
    """The column's phases so far as (label, a few words), oldest first."""
    lines: list[tuple[str, str]] = []
    starts = 0
    killed = False
    reapproved = False
    # A resend that got the first refund back: why a column that sent twice has one.
    replayed = replay(col)

    def put(label: str, words: str, *, replace: bool = False) -> None:
        if replace and lines and lines[-1][0] == label:
            lines[-1] = (label, words)
        else:
            lines.append((label, words))

    for event in col.events:
        kind, data = event.kind, event.data
        if kind == EventKind.DECISION:
            amount = data.get("amount")
            put("decided", f"refund {format_amount(amount, CURRENCY)}" if amount else "no refund")
        elif kind == EventKind.CRASH:
            killed = True
            put(
                "SIGKILL", WHERE_KILLED[CrashPoint(data["crash_point"])]
            )  # a mock line is marked MOCK. before its label
        elif kind == RunEventKind.OUTAGE:
            put("outage", _outage(data))
        elif kind == EventKind.START:
            starts += 1
            if starts > 1:
                put("restart", f"new worker {event.pid}" if event.pid else "new worker")
        elif kind == GATE_CLAIM_WAIT:
            simulated = any(w.simulated for w in col.workers)
            put("wait", "mock clock" if simulated else "dead worker's claim")
        elif kind == GATE_CLAIM and killed and (not lines or lines[-1][0] == "restart"):
            put("wait", "none: claim taken at once")
        elif kind == GATE_CHECK and killed:
            # The newest check is the one that decided (or the last that passed).
            put("checks", _check(col, data), replace=True)
        elif kind == EventKind.RECHECK:
            put("checks", f"re-read: {_recheck(data)}")
        elif (
            kind == EventKind.RESUME
            and data.get("retrying")
            # A column that re-reads before its retry says what it found there instead.
            and not column_kind(col.name).reads_on_restart
        ):
            put("checks", "none: retries")
        elif kind == EventKind.SEND and killed:
            put("sends", "again")
        elif event is replayed:
            # Few words: a compact column has room for 15 after a mock run's mark; the
            # card says who replayed it and why.
            put("answer", "the same refund")
        elif kind == RunEventKind.REAPPROVE:
            reapproved = True
            put("approve", "a person, again")
        elif kind == GATE_SETTLED and reapproved:
            put("outcome", str(data.get("status")))
        elif kind == EventKind.OUTCOME:
            # The status alone: the checks line above already says why.
            put("outcome", str(data.get("status")))
    return lines


def elide(text: str, width: int) -> str:
    """`text` in at most `width` cells, cut at a word with `…` (inside a word only when
    its first word alone is too long)."""
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    if " " in cut.strip():
        cut = cut[: cut.rstrip().rfind(" ")]
    return cut.rstrip(" ·,:;…") + "…"


class PhaseLines(Static):
    """The phase lines of one column, newest last."""

    def show(
        self, col: Column, prefix: str = "", *, pairs: bool = False, width: int | None = None
    ) -> None:
        """Render the phases in the column's events; with `pairs`, two to a row (a column
        alone on a small screen has the width, not the rows); within `width`, a phase's
        words are cut at a word."""
        text = Text(no_wrap=True, overflow="ellipsis")
        lines = phase_lines(col)
        if width is not None and not pairs:
            room = width - len(prefix) - 2
            lines = [(label, elide(words, room - len(label))) for label, words in lines]
        cells = [len(prefix) + len(label) + len(words) + 2 for label, words in lines]
        widest = max(cells, default=0)
        for n, (label, words) in enumerate(lines):
            if n and (not pairs or n % 2 == 0):
                text.append("\n")
            elif n:
                text.append(" " * (widest - cells[n - 1] + 3))
            text.append(prefix, style="bold")
            text.append(f"{label} ", style=PHASE_STYLE.get(label, "bold"))
            text.append(f" {words}", style="bold")
        self.update(text)
