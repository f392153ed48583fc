"""Where a worker is killed, as one table: `CrashPoint`.

Every crash point is a row: its word (what an environment, a scenario id or a JSON document
says), the `GateEvent` a gate's worker dies at (None for a point that is no gate event:
a worker's own step before the gate, or a kill its supervisor causes), and how it is
realised. `interlock.testing.certify` kills its first worker at each point of a first send
that has a gate event; workers and their sweeps name their kills with the same rows. A
word that is not in the table raises `ConfigError` naming the ones that are.
"""

from __future__ import annotations

from enum import Enum

from interlock._core.errors import ConfigError
from interlock._core.events import GateEvent


class CrashPoint(str, Enum):
    """A place a worker dies, in the order an action passes them; the value is its word.

    `.event`: the gate event a gate's worker is killed at (its `on_event` kills there), or
    None for a point that is not a gate event. A worker that calls the provider itself (no
    gate) kills itself at the same step of its own. `.held`: no worker kills itself here; a
    supervisor holds the provider's answer to the send and kills the worker once the effect
    is made. `.recovery`: only a restarted worker's recovery reaches it. `.gate_only`: a
    step of the gate's own, which a worker without a gate never reaches. `.doc`: what has
    happened when the worker dies here.
    """

    event: GateEvent | None
    held: bool
    recovery: bool
    gate_only: bool
    doc: str

    # Every member gives its whole row; the defaults are there so that the lookup by word,
    # `CrashPoint(word)`, type-checks.
    def __new__(
        cls,
        value: str,
        event: GateEvent | None = None,
        doc: str = "",
        held: bool = False,
        recovery: bool = False,
        gate_only: bool = False,
    ) -> CrashPoint:
        member = str.__new__(cls, value)
        member._value_ = value
        member.event = event
        member.held = held
        member.recovery = recovery
        member.gate_only = gate_only
        member.doc = doc
        return member

    AFTER_DECISION = (
        "after-decision",
        None,
        "the model decided; nothing is journaled or saved (a step of the worker's own)",
    )
    AFTER_JOURNAL = (
        "after-journal",
        GateEvent.JOURNALED,
        "the decision is journaled (saved, for a worker without a gate)",
    )
    AFTER_CHECK = (
        "after-check",
        GateEvent.CHECK,
        "a check ran (the gate's own step: a worker without a gate has none)",
        False,
        False,
        True,
    )
    AFTER_SENDING = ("after-sending", GateEvent.SENDING, "`sending` is durable")
    BEFORE_SEND = ("before-send", GateEvent.BEFORE_SEND, "the send is about to go out")
    IN_FLIGHT = (
        "in-flight",
        None,
        "the provider made the effect and holds its answer (the supervisor arms the hold "
        "and kills the worker on commit)",
        True,
    )
    AFTER_UNSETTLED_ANSWER = (
        "after-unsettled-answer",
        GateEvent.ANSWER_UNSETTLED,
        "the send's answer settled nothing (the gate's own step): the send may still land",
        False,
        False,
        True,
    )
    AFTER_ANSWER = (
        "after-answer",
        GateEvent.AFTER_ANSWER,
        "the provider answered with the effect; nothing recorded it",
    )
    AFTER_OUTCOME = ("after-outcome", GateEvent.SETTLED, "the outcome is recorded")
    DURING_RECOVERY = (
        "during-recovery",
        GateEvent.CLAIM,
        "a restarted worker took the claim to recover the action",
        False,
        True,
    )

    def __str__(self) -> str:
        return str.__str__(self)

    @classmethod
    def _missing_(cls, value: object) -> CrashPoint:
        raise ConfigError(
            f"unknown crash point {value!r}; the crash points are "
            + ", ".join(p.value for p in cls)
        )

    @classmethod
    def at(cls, event: GateEvent) -> CrashPoint | None:
        """The crash point a gate's worker dies at on `event`, or None if none is there."""
        return _BY_EVENT.get(event)


_BY_EVENT = {p.event: p for p in CrashPoint if p.event is not None}
