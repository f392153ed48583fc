"""What the gate tells its `on_event(event)` listener, as one table.

The listener receives an `Event`: its `kind` is a `GateEvent` (a `str` enum, so
`event.kind == "after-answer"` still reads) and its `data` a read-only mapping whose keys
are exactly the kind's `fields` (a `check` adds its own, listed in `CHECK_FIELDS`). Every
event names its `action_id`. A test runs the gate through every certification cell and
holds each event it saw to this table (`event_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any


class GateEvent(str, Enum):
    """A kind of gate event; `.fields` are the keys its data carries, `.doc` what it means."""

    fields: tuple[str, ...]
    doc: str

    def __new__(cls, value: str, fields: tuple[str, ...], doc: str) -> GateEvent:
        member = str.__new__(cls, value)
        member._value_ = value
        member.fields = ("action_id", *fields)
        member.doc = doc
        return member

    JOURNALED = (
        "journaled",
        ("claim",),
        "a new decision is journaled with its claim (`claim`: taken, held by another, busy "
        "while another action on its target holds the turn, or settled)",
    )
    CLAIM = (
        "claim",
        ("attempt", "epoch", "recovery", "early"),
        "recovery took the claim (`early`: before expiry, its dead owner's send found)",
    )
    CLAIM_WAIT = (
        "claim-wait",
        ("owner", "seconds", "expires_at", "sending"),
        "another owner's claim is waited out (`seconds` left, grace included)",
    )
    TURN_WAIT = (
        "turn-wait",
        ("holder", "target", "seconds", "sending"),
        "another action on the same target (`holder`) is between its read and its outcome: "
        "this one waits for its turn, then reads the world again (`seconds`: the holder's "
        "claim left, grace included)",
    )
    CHECK = (
        "check",
        ("name",),
        "a check ran (`name`: lookup, currency, world_unchanged, approval_signature or "
        "approval; see CHECK_FIELDS)",
    )
    READ_UNSETTLED = ("read-unsettled", ("error",), "a read settled nothing; it is retried")
    SENDING = (
        "sending",
        ("expires_at", "epoch"),
        "`sending` is durable, with the reservation and a claim that covers the call",
    )
    BEFORE_SEND = (
        "before-send",
        ("idempotency_key", "amount", "currency"),
        "the create call is about to go out (`amount` in `currency`'s smallest unit)",
    )
    ANSWER = (
        "answer",
        ("ok", "code", "message"),
        "the provider said a definite no (`ok` is False)",
    )
    ANSWER_UNSETTLED = (
        "answer-unsettled",
        ("error", "http_status"),
        "the create's answer settled nothing: the send may still land",
    )
    UNKNOWN = (
        "unknown",
        ("reason",),
        "a 5xx made the action unknown: from now on it is only looked up",
    )
    IN_FLIGHT_WAIT = (
        "in-flight-wait",
        ("seconds",),
        "until the in-flight window closes only the lookup runs",
    )
    AFTER_ANSWER = (
        "after-answer",
        ("external_id", "amount"),
        "the provider answered with the effect (before the outcome is recorded)",
    )
    SETTLED = (
        "settled",
        ("status", "reason", "external_id", "receipt"),
        "the outcome and its receipt are recorded",
    )
    LEFT_TO_RECOVERY = (
        "left-to-recovery",
        ("reason",),
        "the action stays pending; a later recovery carries on",
    )
    CONFLICT = (
        "conflict",
        ("external_id", "amount", "reason"),
        "a refund names this action but does not match it, or cannot be recorded: never "
        "adopted, never resent (`amount` when the refund's is known)",
    )
    REAPPROVE_ADOPTS = (
        "reapprove-adopts",
        ("external_id",),
        "a re-approval found the unknown action's own refund: it is adopted, nothing sent",
    )
    LOGGED = (
        "logged",
        ("size", "published", "problem"),
        "the receipt log caught up after this action's settle (or at recovery, with no "
        "action): `size` the new signed head's, `published` heads anchored, `problem` what "
        "failed (the action's outcome stands; the next catch-up carries on)",
    )
    RECOVER_ERROR = (
        "recover-error",
        ("error",),
        "recovering this action raised; recovery went on with the others",
    )


CHECK_FIELDS: Mapping[str, tuple[str, ...]] = {
    "lookup": ("found",),
    "world_unchanged": ("passed",),
    "approval_signature": ("passed", "problem", "signed"),
    "approval": ("passed", "problem"),
    "currency": ("passed",),
}
"""The fields a `check` event adds, by the check's `name`."""


def event_problem(kind: GateEvent, data: Mapping[str, Any]) -> str | None:
    """What is wrong with one event against the table, or None when it matches."""
    wanted = set(kind.fields)
    if kind is GateEvent.CHECK:
        wanted |= set(CHECK_FIELDS.get(str(data.get("name")), ()))
    if set(data) != wanted:
        return f"{kind.value} carries {sorted(data)}, the table says {sorted(wanted)}"
    return None


@dataclass(frozen=True)
class Event:
    """One gate event, as `Gate(on_event=...)` receives it.

    `kind` is the `GateEvent`; `data` holds exactly the fields `kind.fields` lists (plus a
    `check`'s own, `CHECK_FIELDS`), read-only: a listener cannot change what the next one
    sees. `action_id` is the field every event carries.
    """

    kind: GateEvent
    data: Mapping[str, Any]

    def __post_init__(self) -> None:
        # Frozen all the way down: the gate's own dict is never handed out to be edited.
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))

    @property
    def action_id(self) -> str:
        """The action the event is about."""
        return str(self.data["action_id"])
