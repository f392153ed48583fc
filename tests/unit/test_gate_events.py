"""The gate's event table: every kind the gate emits is in it and every kind in it is
emitted (the rig in tests/helpers/gate_rig.py holds each event's data to the table in every
gate story, so a field added at one call site and not in the table fails there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from interlock import Event, Gate, GateEvent, StripeRefund
from interlock.testing import event_problem
from tests.helpers.approvals import APPROVERS
from tests.helpers.gate_rig import AMOUNT, TIMING, GateWorld, gone_owner
from workers.protocol.words import gate_event_text

GATE = Path(__file__).resolve().parents[2] / "interlock" / "_core" / "gate.py"


def test_every_kind_in_the_table_is_emitted_and_only_those() -> None:
    """The gate names its kinds through the enum; no bare string, no dead member."""
    source = GATE.read_text()
    emitted = set(re.findall(r"self\._emit\(\s*GateEvent\.([A-Z_]+)", source))
    assert emitted == {m.name for m in GateEvent}
    assert re.search(r'self\._emit\(\s*"', source) is None


def test_kinds_compare_as_their_strings_and_document_their_fields() -> None:
    """A listener written against the strings keeps working; each kind says what it means."""
    assert GateEvent.AFTER_ANSWER == "after-answer"
    assert GateEvent("claim-wait") is GateEvent.CLAIM_WAIT
    for kind in GateEvent:
        assert kind.fields[0] == "action_id" and kind.doc


@pytest.mark.parametrize(
    ("kind", "data", "problem"),
    [
        (GateEvent.SENDING, {"action_id": "a", "expires_at": 1.0, "epoch": 1}, None),
        (GateEvent.SENDING, {"action_id": "a", "expires_at": 1.0}, "sending carries"),
        (GateEvent.CHECK, {"action_id": "a", "name": "lookup", "found": None}, None),
        (GateEvent.CHECK, {"action_id": "a", "name": "lookup", "passed": True}, "check carries"),
    ],
)
def test_event_problem_names_a_missing_or_extra_field(
    kind: GateEvent, data: dict[str, object], problem: str | None
) -> None:
    """The checker the rig uses tells a matching event from one that is off the table."""
    found = event_problem(kind, data)
    assert (found is None) if problem is None else (found or "").startswith(problem)


def test_the_listener_receives_one_read_only_event_per_step() -> None:
    """`on_event` gets `Event`s: the kind, the action id every kind carries, and data a
    listener cannot change under the next one (nor under the gate)."""
    world = GateWorld()
    intent = world.decide(AMOUNT, world.grant(AMOUNT).id)
    seen: list[Event] = []
    gate = Gate(
        world.store,
        StripeRefund(world.payments),
        timing=TIMING,
        owner=gone_owner(),
        on_event=seen.append,
        clock=world.clock,
        sleep=world.clock.sleep,
        monotonic=world.clock.monotonic,
        approvers=APPROVERS,
    )

    assert gate.submit(intent).status == "sent"

    kinds = [e.kind for e in seen]
    # A first attempt reads and checks before its one commit before the send.
    assert kinds[0] is GateEvent.CHECK and seen[0].data["name"] == "lookup"
    journaled = seen[kinds.index(GateEvent.JOURNALED)]
    assert journaled.data["claim"] == "taken"
    assert kinds.index(GateEvent.JOURNALED) < kinds.index(GateEvent.SENDING)
    assert kinds.index(GateEvent.SENDING) < kinds.index(GateEvent.BEFORE_SEND)
    assert seen[-1].kind is GateEvent.SETTLED and seen[-1].data["status"] == "sent"
    assert {e.action_id for e in seen} == {intent.action_id}
    assert all(event_problem(e.kind, e.data) is None for e in seen)
    with pytest.raises(TypeError):
        journaled.data["claim"] = "edited"  # type: ignore[index]


def test_a_sibling_waiting_for_its_turn_reads_in_words_naming_the_holder() -> None:
    """A column's event list says that the action waits for another one on the payment,
    which one, and for how long at most; its journaling says another action runs first."""
    waiting = Event(
        GateEvent.TURN_WAIT,
        {
            "action_id": "act_second",
            "holder": "act_0123456789abcdef",
            "target": "pi_1",
            "seconds": 9.5,
            "sending": True,
        },
    )
    busy = Event(GateEvent.JOURNALED, {"action_id": "act_second", "claim": "busy"})

    assert event_problem(waiting.kind, waiting.data) is None
    assert gate_event_text(waiting) == (
        "waiting for action act_01234567… on the same payment to finish (9.5 s at most), "
        "then reading it again"
    )
    assert gate_event_text(busy) == (
        "journaled intent act_second…; another action on the payment runs first"
    )
