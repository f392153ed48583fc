"""The demo's scenarios and the truth table (docs/design.md §3), as data.

A scenario is a crash point and an outage action. The truth table says what each column
must end with in Stripe and what it must report; a run that differs is a deviation.
Amounts are integer cents.

Each presenter scenario is one module of `scenarios.scripted` holding its row and its
truth table rows; they are found there when this module is imported (at its end, once the
names they use are defined), so adding one touches no other file. An outage action is a
row of `Outage`; code asks the row what it does instead of comparing its word.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from interlock import ConfigError
from interlock.testing import CrashPoint
from workers.protocol.switches import Switches

# The demo's payments, approvals and words are in this currency; amounts are in its
# smallest unit (cents).
CURRENCY = "usd"
PAYMENT_AMOUNT = 10_000
REFUND_AMOUNT = 2_000
LEASE_CAP = 2_000


class Outage(str, Enum):
    """What people do while the worker is dead; the value is its word (the run JSON's).

    `refunds_by_hand`: support refunds the payment by hand (no key, no metadata).
    `revokes`: support revokes the approval. `screen`: its few words in a column's story.
    """

    refunds_by_hand: bool
    revokes: bool
    screen: str

    # Every member gives its whole row; the defaults are there so that the lookup by word,
    # `Outage(word)`, type-checks.
    def __new__(
        cls, value: str, screen: str = "", refunds_by_hand: bool = False, revokes: bool = False
    ) -> Outage:
        member = str.__new__(cls, value)
        member._value_ = value
        member.screen = screen
        member.refunds_by_hand = refunds_by_hand
        member.revokes = revokes
        return member

    NONE = ("none", "nothing happens")
    HAND_REFUND = ("hand-refund", "hand refund", True)
    REVOKE = ("revoke", "approval revoked", False, True)

    def __str__(self) -> str:
        return str(self.value)

    @property
    def acts(self) -> bool:
        """Whether anyone does anything: the agent's refund is wanted either way if not."""
        return self.refunds_by_hand or self.revokes

    @property
    def hand_refunds(self) -> int:
        """How many refunds support makes by hand."""
        return 1 if self.refunds_by_hand else 0


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
    # Its truth table rows: emulated switch ("" for none) -> column -> expectation.
    truth: Mapping[str, Mapping[str, Expectation]] = field(default_factory=dict)

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
SWEEP_OUTAGES: tuple[Outage, ...] = tuple(Outage)
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
    # A cell's id names its outage in words: read it through the table.
    outage = Outage(outage)
    agent = 1 if not outage.acts or crash_point in REACHED_STRIPE else 0
    hand = outage.hand_refunds
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
    outage = Outage(outage)
    agent = 1 if not outage.acts or spec.lands else 0
    hand = outage.hand_refunds
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


def _scripted() -> dict[str, Scenario]:
    """Every module of `scenarios.scripted`, by its scenario's id, in the order of its key."""
    package = importlib.import_module(f"{__name__}.scripted")
    found: list[Scenario] = [
        importlib.import_module(f"{package.__name__}.{module.name}").SCENARIO
        for module in pkgutil.iter_modules(package.__path__)
        if not module.name.startswith("_")
    ]
    return by_id(found)


def by_id(found: list[Scenario]) -> dict[str, Scenario]:
    """The scenarios by id, in the order of their keys; `ConfigError` when two share an id
    or a key (a new scenario's module copied from another and not yet renamed)."""
    for attribute in ("id", "key"):
        seen: dict[str, Scenario] = {}
        for s in found:
            other = seen.setdefault(getattr(s, attribute), s)
            if other is not s:
                raise ConfigError(
                    f"scenarios {other.id!r} and {s.id!r} in scenarios/scripted/ share the "
                    f"{attribute} {getattr(s, attribute)!r}; give each its own"
                )
    return {s.id: s for s in sorted(found, key=lambda s: s.key)}


SCENARIOS: dict[str, Scenario] = _scripted()
# (scenario, emulated switch or "") -> column -> expectation: every scenario's rows. A switch
# without its own row uses the base row.
TRUTH: dict[tuple[str, str], Mapping[str, Expectation]] = {
    (s.id, switch): row for s in SCENARIOS.values() for switch, row in s.truth.items()
}
