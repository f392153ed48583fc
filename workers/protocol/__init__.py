"""What a worker tells its engine: the event lines it writes and the outcome it reports.

A worker process writes one JSON object per line on stdout, `{"t", "pid", "kind", "text",
...data}`; an in-process (mock) worker hands the same fields to a callback; a Temporal
activity returns the outcome as its result. The engine reads all three through this
module, so a kind or a field is named here once.

The outcome's wire form is also the `outcome` object of the run@2 JSON (docs/design.md §6).
With `case.py` (what an engine hands a worker) and `words.py` (the event lines' words),
this package is the one contract between the demo and its workers (docs/design.md §8):
it imports no other worker module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from interlock import GateEvent

# A worker's exit codes besides 0 (its outcome was reported).
EXIT_ERROR = 1  # an unexpected error; its `error` event says what
EXIT_USAGE = 2  # a bad command line or case file
EXIT_STORE = 74  # sysexits' EX_IOERR: the journal cannot be used; nothing was sent against it
EXIT_ORPHANED = 75  # its supervisor went away, so it stopped before acting
# What a supervisor reads as the exit code of a worker it killed with SIGKILL.
SIGKILL_EXIT = -9


class EventKind(str, Enum):
    """The kinds of event a worker writes (the gate's own events are `gate_kind(...)`)."""

    START = "start"
    ASK_MODEL = "ask-model"
    TOOL_CALL = "tool-call"
    DECISION = "decision"
    DECISION_SAVED = "decision-saved"
    RESUME = "resume"
    RECHECK = "recheck"
    RECOVER = "recover"
    ACTIVITY = "activity"  # a Temporal refund activity begins (its attempt number)
    SEND = "send"
    ANSWER = "answer"
    KEY_REFUSED = "key-refused"
    OUTCOME = "outcome"
    CRASH = "crash"
    STORE_ERROR = "store-error"
    ERROR = "error"
    DONE = "done"

    def __str__(self) -> str:
        return self.value


GATE_PREFIX = "gate-"


def gate_kind(gate_event: GateEvent) -> str:
    """The worker event kind that carries the gate's `on_event(gate_event, ...)`."""
    return f"{GATE_PREFIX}{gate_event.value}"


# The gate events the engine and views act on (the claim countdown, the column's state,
# the lookup that found its own send).
GATE_CHECK = gate_kind(GateEvent.CHECK)
GATE_CLAIM = gate_kind(GateEvent.CLAIM)
GATE_CLAIM_WAIT = gate_kind(GateEvent.CLAIM_WAIT)
GATE_SENDING = gate_kind(GateEvent.SENDING)


def event_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `data` an event line carries: its plain JSON values (the gate's
    `receipt`, a mapping, stays in the journal)."""
    return {k: v for k, v in data.items() if v is None or isinstance(v, (str, int, float, bool))}


# The gate's checks, as a `check` event names them (`interlock.GateEvent.CHECK`); the
# checked worker's re-check names what stopped it the same way.
CHECK_LOOKUP = "lookup"
CHECK_WORLD = "world_unchanged"
CHECK_APPROVAL = "approval"


@dataclass(frozen=True)
class ColumnOutcome:
    """What a column's worker reports when it ends: the status and what it names.

    `status` is a gate `Outcome.status` for interlock (`sent`, `adopted`, `refused`,
    `failed`, `pending`) and the plain workers' own words otherwise (`sent`, `stopped`,
    `unknown`, `no-refund`, ...). `reapproves` names the refused action a re-approval
    replaced.
    """

    status: str
    reason: str | None = None
    refund_id: str | None = None
    action_id: str | None = None
    reapproves: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The outcome as event fields and as run@2's `outcome` object."""
        data: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "refund_id": self.refund_id,
            "action_id": self.action_id,
        }
        if self.reapproves is not None:
            data["reapproves"] = self.reapproves
        return data

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ColumnOutcome:
        """Read an outcome from an event line, an activity's result or run@2 JSON."""

        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        return cls(
            status=str(data.get("status")),
            reason=text("reason"),
            refund_id=text("refund_id"),
            action_id=text("action_id"),
            reapproves=text("reapproves"),
        )
