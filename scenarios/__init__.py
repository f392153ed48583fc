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
    # Further crash points for the restarted workers (a kill during recovery).
    later_kills: tuple[str, ...] = ()
    sweep: bool = False

    @property
    def kills(self) -> tuple[str, ...]:
        """Every crash point in order: the first worker's, then each restarted one's."""
        return (self.crash_point, *self.later_kills)

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


# The sweep: every crash point on a refund's path x every outage action (DESIGN §3).
SWEEP_CRASH_POINTS = (
    "after-decision",
    "after-journal",
    "after-sending",
    "before-send",
    "in-flight",
    "after-answer",
    "after-outcome",
    "during-recovery",
)
SWEEP_OUTAGES: tuple[Outage, ...] = ("none", "hand-refund", "revoke")
# Crash points after which the agent's refund is already at Stripe when people act.
REACHED_STRIPE = frozenset({"in-flight", "after-answer", "after-outcome"})
_SWEEP_PREFIX = "sweep/"


def sweep_scenario(crash_point: str, outage: Outage) -> Scenario:
    """One cell of the sweep, with what is wanted by the rule of DESIGN §3.

    The agent's refund must exist exactly once if it reached Stripe before the outage
    action, or if there was no outage action; otherwise it must not exist. A hand refund
    is always there once it was made. `during-recovery` dies right before the send, then
    kills the restarted worker in its recovery, and a third worker finishes.
    """
    if crash_point not in SWEEP_CRASH_POINTS or outage not in SWEEP_OUTAGES:
        raise KeyError(f"no sweep cell {crash_point}/{outage}")
    agent = 1 if outage == "none" or crash_point in REACHED_STRIPE else 0
    hand = 1 if outage == "hand-refund" else 0
    first, later = (
        ("before-send", ("during-recovery",))
        if crash_point == "during-recovery"
        else (crash_point, ())
    )
    wanted = " and ".join(
        part
        for part in (
            "the agent's $20 refund once" if agent else "",
            "the hand refund" if hand else "",
        )
        if part
    )
    return Scenario(
        id=f"{_SWEEP_PREFIX}{crash_point}/{outage}",
        key="",
        title=f"Sweep: crash {crash_point}, outage {outage}",
        crash_point=first,
        outage=outage,
        story=f"The worker dies at {crash_point}; during the outage: {outage}.",
        wanted_text=wanted or "no refund",
        wanted_agent_refunds=agent,
        wanted_hand_refunds=hand,
        later_kills=later,
        sweep=True,
    )


def scenario(scenario_id: str) -> Scenario:
    """The scenario with this id, or a `sweep/CRASH/OUTAGE` cell; `KeyError` names valid ones."""
    if scenario_id.startswith(_SWEEP_PREFIX):
        crash, _, outage = scenario_id[len(_SWEEP_PREFIX) :].partition("/")
        return sweep_scenario(crash, outage)  # type: ignore[arg-type]
    try:
        return SCENARIOS[scenario_id]
    except KeyError:
        raise KeyError(
            f"unknown scenario {scenario_id!r}; choose one of {', '.join(SCENARIOS)} or all"
        ) from None


def expectation(scenario_id: str, column: str, emulated: list[str]) -> Expectation | None:
    """The truth table's row for this column, for the switches in use (None for a sweep cell)."""
    if scenario_id.startswith(_SWEEP_PREFIX):
        return None
    for switch in emulated:
        row = TRUTH.get((scenario_id, switch))
        if row is not None:
            return row[column]
    return TRUTH[(scenario_id, "")][column]
