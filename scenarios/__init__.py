"""The demo's scenarios and the truth table (DESIGN §3), as data.

A scenario is a crash point and an outage action. The truth table says what each column
must end with in Stripe and what it must report; a run that differs is a deviation.
Amounts are integer cents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outage = Literal["none", "hand-refund", "revoke"]
ColumnName = Literal["standard", "interlock", "checked"]

PAYMENT_AMOUNT = 10_000
REFUND_AMOUNT = 2_000
LEASE_CAP = 2_000
COLUMNS: tuple[ColumnName, ...] = ("standard", "interlock", "checked")

SWITCH_EMULATE_24H = "INTERLOCK_EMULATE_24H"
SWITCH_NO_LOOKUP = "INTERLOCK_NO_LOOKUP"


@dataclass(frozen=True)
class Scenario:
    """One scripted case: where the worker dies and what people do meanwhile."""

    id: str
    key: str
    title: str
    crash_point: str
    outage: Outage
    story: str
    wanted_text: str
    wanted_agent_refunds: int
    wanted_hand_refunds: int

    @property
    def wanted_total(self) -> int:
        """Cents that should be refunded in the end."""
        return REFUND_AMOUNT * (self.wanted_agent_refunds + self.wanted_hand_refunds)


@dataclass(frozen=True)
class Expectation:
    """What one column must show: refunds in Stripe and the outcome it reports."""

    agent_refunds: int
    hand_refunds: int
    outcome: str
    reason_contains: str | None
    note: str

    @property
    def total(self) -> int:
        """Cents refunded in the end."""
        return REFUND_AMOUNT * (self.agent_refunds + self.hand_refunds)


SCENARIOS: dict[str, Scenario] = {
    s.id: s
    for s in (
        Scenario(
            id="hand-refund",
            key="1",
            title="Hand refund during the outage",
            crash_point="before-send",
            outage="hand-refund",
            story="The worker dies right before the refund call; support refunds $20 by hand.",
            wanted_text="one $20 refund, the hand one",
            wanted_agent_refunds=0,
            wanted_hand_refunds=1,
        ),
        Scenario(
            id="revoked",
            key="2",
            title="Approval revoked during the outage",
            crash_point="before-send",
            outage="revoke",
            story="The worker dies right before the refund call; support revokes the approval.",
            wanted_text="no refund",
            wanted_agent_refunds=0,
            wanted_hand_refunds=0,
        ),
        Scenario(
            id="after-answer",
            key="3",
            title="Crash after Stripe answered (control)",
            crash_point="after-answer",
            outage="none",
            story="The worker dies right after Stripe's answer, before anything recorded it.",
            wanted_text="one $20 refund",
            wanted_agent_refunds=1,
            wanted_hand_refunds=0,
        ),
    )
}

# (scenario, emulated switch or "") -> column -> expectation. A switch without its own row
# uses the base row.
_E = Expectation
TRUTH: dict[tuple[str, str], dict[str, Expectation]] = {
    ("hand-refund", ""): {
        "standard": _E(1, 1, "sent", None, "two refunds, $40: wrong"),
        "interlock": _E(0, 1, "refused", "refunds changed", "hand refund only; refused"),
        "checked": _E(0, 1, "stopped", None, "hand refund only; stopped"),
    },
    ("revoked", ""): {
        "standard": _E(1, 0, "sent", None, "one $20 refund: wrong"),
        "interlock": _E(0, 0, "refused", "revoked", "none; refused: approval revoked"),
        "checked": _E(0, 0, "stopped", None, "none; stopped"),
    },
    ("after-answer", ""): {
        "standard": _E(1, 0, "sent", None, "one refund (Stripe replays the key)"),
        "interlock": _E(1, 0, "adopted", None, "one refund; adopted its own refund"),
        "checked": _E(1, 0, "stopped", None, "one refund; stopped on its own refund (false alarm)"),
    },
    ("after-answer", SWITCH_EMULATE_24H): {
        "standard": _E(2, 0, "sent", None, "two refunds: wrong (the key expired)"),
        "interlock": _E(1, 0, "adopted", None, "one refund; adopted"),
        "checked": _E(1, 0, "stopped", None, "one refund; stopped (false alarm)"),
    },
    ("after-answer", SWITCH_NO_LOOKUP): {
        "standard": _E(1, 0, "sent", None, "one refund"),
        "interlock": _E(
            1, 0, "refused", "refunds changed", "one refund; refused: cannot tell it was its own"
        ),
        "checked": _E(1, 0, "stopped", None, "one refund; stopped (false alarm)"),
    },
}


def scenario(scenario_id: str) -> Scenario:
    """The scenario with this id; `KeyError` names the valid ones."""
    try:
        return SCENARIOS[scenario_id]
    except KeyError:
        raise KeyError(
            f"unknown scenario {scenario_id!r}; choose one of {', '.join(SCENARIOS)} or all"
        ) from None


def expectation(scenario_id: str, column: str, emulated: list[str]) -> Expectation:
    """The truth table's row for this column, for the switches in use."""
    for switch in emulated:
        row = TRUTH.get((scenario_id, switch))
        if row is not None:
            return row[column]
    return TRUTH[(scenario_id, "")][column]
