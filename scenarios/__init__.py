"""The demo's scenarios and the truth table (docs/design.md §3), as data.

A scenario is a crash point and an outage action. The truth table says what each column
must end with in Stripe and what it must report; a run that differs is a deviation.
Amounts are integer cents.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Literal

from interlock import ConfigError
from interlock.testing import CrashPoint

Outage = Literal["none", "hand-refund", "revoke"]
ColumnName = Literal["standard", "interlock", "checked"]

# The demo's payments, approvals and words are in this currency; amounts are in its
# smallest unit (cents).
CURRENCY = "usd"
PAYMENT_AMOUNT = 10_000
REFUND_AMOUNT = 2_000
LEASE_CAP = 2_000
COLUMNS: tuple[ColumnName, ...] = ("standard", "interlock", "checked")


@dataclass(frozen=True)
class Switches:
    """The emulated conditions a demo run asks for (docs/design.md §3), to show what the
    gate guards against. The library's gate reads none of them: a worker wraps its effect
    in `interlock.testing`'s `Emulate24h` and `NoLookup` when its run asks.

    `emulate_24h`: a retry behaves as if Stripe had pruned the idempotency key (the retry
    uses a key Stripe has not seen). `no_lookup`: the gate skips the lookup of its own
    earlier send. Every run that uses one must say so.

    `ENV_NAMES` is the one spelling of each switch's name, by field: the environment
    variable that turns it on (the engine sets it for its workers), and how receipts and
    runs name it (`names`).
    """

    ENV_NAMES: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"emulate_24h": "INTERLOCK_EMULATE_24H", "no_lookup": "INTERLOCK_NO_LOOKUP"}
    )

    emulate_24h: bool = False
    no_lookup: bool = False

    @property
    def names(self) -> list[str]:
        """The switches that are on, as their environment names."""
        return [name for field, name in self.ENV_NAMES.items() if getattr(self, field)]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Switches:
        """Switches from `INTERLOCK_EMULATE_24H` and `INTERLOCK_NO_LOOKUP` (1/true/yes)."""
        env = os.environ if env is None else env
        return cls(**{field: _flag(env, name) for field, name in cls.ENV_NAMES.items()})


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name}={raw!r} is not a switch value; use 1 or 0")


@dataclass(frozen=True)
class Switch:
    """An emulated switch (docs/design.md §3) as the demo offers it, named in one place.

    `field` is its `Switches` attribute. `Switches` spells its environment name
    (`env`), which is also what a run's `emulated` lists and the truth table's row key;
    the command line's option (`flag`, `--emulate-24h`) and the bare words (`name`,
    `emulate-24h`: a case's suffix in e2e-report) follow from the field.
    """

    field: str
    help: str
    # The palette's one line for it, in the app.
    palette: str
    # The fewest words that still name it, where the screen is narrow (the banner at 80).
    short: str

    @property
    def env(self) -> str:
        """The environment variable that turns it on: `INTERLOCK_EMULATE_24H`."""
        return Switches.ENV_NAMES[self.field]

    @property
    def name(self) -> str:
        """The switch in words: `emulate-24h`."""
        return self.field.replace("_", "-")

    @property
    def words(self) -> str:
        """The switch as the screen names it: `emulate 24h`."""
        return self.name.replace("-", " ")

    @property
    def flag(self) -> str:
        """The command line's option: `--emulate-24h`."""
        return f"--{self.name}"


SWITCHES: tuple[Switch, ...] = (
    Switch(
        "emulate_24h",
        "emulate a retry after Stripe pruned the idempotency key",
        "Retry as if Stripe pruned the key (offline/mock)",
        "24h",
    ),
    Switch(
        "no_lookup",
        "emulate a gate without the lookup",
        "The gate skips its lookup (offline/mock)",
        "no lookup",
    ),
)
SWITCH_EMULATE_24H = Switches.ENV_NAMES["emulate_24h"]
SWITCH_NO_LOOKUP = Switches.ENV_NAMES["no_lookup"]


@dataclass(frozen=True)
class Scenario:
    """One scripted case: where the worker dies and what people do meanwhile."""

    id: str
    key: str
    title: str
    # Where the first worker dies (None: it lives, as in a fault cell that needs no kill).
    crash_point: CrashPoint | None
    outage: Outage
    story: str
    wanted_text: str
    wanted_agent_refunds: int
    wanted_hand_refunds: int
    # Further crash points for the restarted workers (a kill during recovery).
    later_kills: tuple[CrashPoint, ...] = ()
    sweep: bool = False
    # The app's footer label for its key, and the key's tooltip (presenter scenarios only).
    label: str = ""
    hint: str = ""
    # A fault-axis cell: the id of the `FAULTS` entry Stripe answers the first call with.
    fault: str | None = None

    @property
    def kills(self) -> tuple[CrashPoint, ...]:
        """Every crash point in order: the first worker's, then each restarted one's."""
        first = () if self.crash_point is None else (self.crash_point,)
        return (*first, *self.later_kills)

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
            crash_point=CrashPoint.BEFORE_SEND,
            outage="hand-refund",
            story="The worker dies right before the refund call; support refunds $20 by hand.",
            wanted_text="one $20 refund, the hand one",
            wanted_agent_refunds=0,
            wanted_hand_refunds=1,
            label="Hand refund",
            hint="Scenario 1: crash before the send; support refunds $20 by hand",
        ),
        Scenario(
            id="revoked",
            key="2",
            title="Approval revoked during the outage",
            crash_point=CrashPoint.BEFORE_SEND,
            outage="revoke",
            story="The worker dies right before the refund call; support revokes the approval.",
            wanted_text="no refund",
            wanted_agent_refunds=0,
            wanted_hand_refunds=0,
            label="Revoked",
            hint="Scenario 2: crash before the send; support revokes the approval",
        ),
        Scenario(
            id="after-answer",
            key="3",
            title="Crash after Stripe answered (control)",
            crash_point=CrashPoint.AFTER_ANSWER,
            outage="none",
            story="The worker dies right after Stripe's answer, before anything recorded it.",
            wanted_text="one $20 refund",
            wanted_agent_refunds=1,
            wanted_hand_refunds=0,
            label="After answer",
            hint="Scenario 3 (control): crash right after Stripe answered",
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


# The sweep: every crash point on a refund's path that every column's worker has, x every
# outage action (docs/design.md §3). The gate's own steps (a check, an unsettled answer)
# are certified in-process (`interlock.testing.CRASH_POINTS`).
SWEEP_CRASH_POINTS: tuple[CrashPoint, ...] = (
    CrashPoint.AFTER_DECISION,
    CrashPoint.AFTER_JOURNAL,
    CrashPoint.AFTER_SENDING,
    CrashPoint.BEFORE_SEND,
    CrashPoint.IN_FLIGHT,
    CrashPoint.AFTER_ANSWER,
    CrashPoint.AFTER_OUTCOME,
    CrashPoint.DURING_RECOVERY,
)
SWEEP_OUTAGES: tuple[Outage, ...] = ("none", "hand-refund", "revoke")
# Crash points after which the agent's refund is already at Stripe when people act.
REACHED_STRIPE = frozenset(
    {CrashPoint.IN_FLIGHT, CrashPoint.AFTER_ANSWER, CrashPoint.AFTER_OUTCOME}
)
_SWEEP_PREFIX = "sweep/"


def sweep_scenario(crash_point: CrashPoint, outage: Outage) -> Scenario:
    """One cell of the sweep, with what is wanted by the rule of docs/design.md §3.

    The agent's refund must exist exactly once if it reached Stripe before the outage
    action, or if there was no outage action; otherwise it must not exist. A hand refund
    is always there once it was made. A recovery's crash point (`during-recovery`) dies
    right before the send, then kills the restarted worker in its recovery, and a third
    worker finishes.
    """
    if crash_point not in SWEEP_CRASH_POINTS or outage not in SWEEP_OUTAGES:
        raise KeyError(
            f"no sweep cell {crash_point}/{outage}; the sweep's crash points are "
            f"{', '.join(SWEEP_CRASH_POINTS)} and its outages {', '.join(SWEEP_OUTAGES)}"
        )
    agent = 1 if outage == "none" or crash_point in REACHED_STRIPE else 0
    hand = 1 if outage == "hand-refund" else 0
    first, later = (
        (CrashPoint.BEFORE_SEND, (crash_point,)) if crash_point.recovery else (crash_point, ())
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


# The fault axis: what Stripe answers to the first refund call of each
# column's worker, x every outage action, done while that call is held at Stripe.
@dataclass(frozen=True)
class FaultSpec:
    """One kind of answer to the first refund call, as the emulator provokes it.

    `hold_over_timeout_s`: a hold lasts the client's Stripe timeout plus this, so that it
    ends after the client gave up and inside the 5 s in-flight margin (docs/design.md §4).
    `lands`: Stripe began executing the first call, so its refund is made whatever the
    answer said; a call that never began (a 429) did not reach Stripe in §3's sense.
    `crash_point`: where the first worker dies (None: it lives and handles the answer).
    `restart_after_landing`: a restart waits until the held call has landed (else it comes
    at once, while the call may still be running). `read_fault`: armed for the restarted
    worker's first read. `count`: how many answers the fault takes (a `drop` twice also
    loses the one resend the Stripe transport makes on a new connection).
    """

    id: str
    kind: str
    stage: str | None
    lands: bool
    story: str
    hold_over_timeout_s: float | None = None
    hold_ms: int = 0
    crash_point: CrashPoint | None = None
    restart_after_landing: bool = False
    read_fault: str | None = None
    count: int = 1

    def hold_for(self, stripe_timeout_s: float) -> int:
        """The hold in milliseconds for a client with this Stripe timeout."""
        if self.hold_over_timeout_s is None:
            return self.hold_ms
        return round((stripe_timeout_s + self.hold_over_timeout_s) * 1000)


FAULTS: dict[str, FaultSpec] = {
    f.id: f
    for f in (
        FaultSpec(
            id="timeout-then-lands",
            kind="hold",
            stage="before_commit",
            lands=True,
            hold_over_timeout_s=1.0,
            restart_after_landing=True,
            story="Stripe holds the call past the client's timeout, then makes the refund",
        ),
        FaultSpec(
            id="in-progress-409",
            kind="hold",
            stage="before_commit",
            lands=True,
            hold_over_timeout_s=3.0,
            story="Stripe holds the call long enough that a resend meets it still running (409)",
        ),
        FaultSpec(
            id="5xx-after-commit",
            kind="error_500",
            stage="after_commit",
            lands=True,
            story="Stripe makes the refund, then answers 500 (saved and replayed under the key)",
        ),
        FaultSpec(
            id="lost-answer",
            kind="drop",
            stage=None,
            lands=True,
            count=2,
            story="Stripe makes the refund; the connection closes with no answer, twice",
        ),
        FaultSpec(
            id="429",
            kind="error_429",
            stage=None,
            lands=False,
            story="Stripe rate-limits the call: nothing made, nothing saved",
        ),
        FaultSpec(
            id="garbled-2xx",
            kind="garbled_2xx",
            stage=None,
            lands=True,
            story="Stripe makes the refund; the 200's body is not JSON",
        ),
        FaultSpec(
            id="read-401-on-recovery",
            kind="hold",
            stage="after_commit",
            lands=True,
            hold_ms=500,
            crash_point=CrashPoint.AFTER_ANSWER,
            read_fault="read_401",
            story="the worker dies after Stripe's answer; the restarted worker's first read "
            "gets a 401 (a key problem), and a later one works once the key is fixed",
        ),
    )
}
SWEEP_FAULTS = tuple(FAULTS)
_FAULT_PREFIX = "sweep-fault/"


def fault_scenario(fault: str, outage: Outage) -> Scenario:
    """One cell of the fault sweep, with what is wanted by the rule of docs/design.md §3.

    The outage action happens while the first refund call is held at Stripe, so a call
    Stripe began executing reached it before the action: its refund is wanted once. A
    call that never began (`lands` false) did not: the refund is wanted only if nobody
    acted (a resend makes it).
    """
    spec = FAULTS.get(fault)
    if spec is None or outage not in SWEEP_OUTAGES:
        raise KeyError(f"no fault sweep cell {fault}/{outage}")
    agent = 1 if outage == "none" or spec.lands else 0
    hand = 1 if outage == "hand-refund" else 0
    wanted = " and ".join(
        part
        for part in (
            "the agent's $20 refund once" if agent else "",
            "the hand refund" if hand else "",
        )
        if part
    )
    return Scenario(
        id=f"{_FAULT_PREFIX}{fault}/{outage}",
        key="",
        title=f"Fault sweep: {fault}, outage {outage}",
        crash_point=spec.crash_point,
        outage=outage,
        story=f"{spec.story}; while the call is held: {outage}.",
        wanted_text=wanted or "no refund",
        wanted_agent_refunds=agent,
        wanted_hand_refunds=hand,
        sweep=True,
        fault=fault,
    )


def scenario(scenario_id: str) -> Scenario:
    """The scenario with this id, a `sweep/CRASH/OUTAGE` or a `sweep-fault/FAULT/OUTAGE`
    cell; `KeyError` names valid ones."""
    if scenario_id.startswith(_FAULT_PREFIX):
        fault, _, outage = scenario_id[len(_FAULT_PREFIX) :].partition("/")
        return fault_scenario(fault, outage)  # type: ignore[arg-type]
    if scenario_id.startswith(_SWEEP_PREFIX):
        crash, _, outage = scenario_id[len(_SWEEP_PREFIX) :].partition("/")
        try:
            point = CrashPoint(crash)
        except ConfigError as e:
            raise KeyError(f"no sweep cell {crash}/{outage}: {e}") from None
        return sweep_scenario(point, outage)  # type: ignore[arg-type]
    try:
        return SCENARIOS[scenario_id]
    except KeyError:
        raise KeyError(
            f"unknown scenario {scenario_id!r}; choose one of {', '.join(SCENARIOS)} or all"
        ) from None


def expectation(scenario_id: str, column: str, emulated: list[str]) -> Expectation | None:
    """The truth table's row for this column, for the switches in use (None for a sweep cell)."""
    if scenario_id.startswith((_SWEEP_PREFIX, _FAULT_PREFIX)):
        return None
    for switch in emulated:
        row = TRUTH.get((scenario_id, switch))
        if row is not None:
            return row[column]
    return TRUTH[(scenario_id, "")][column]
