"""Certify your own effect: every crash point x provider answer x outage, judged per cell.

Give it an `Effect` and a way to build a fresh world for it; it runs each cell in-process
(the crash is simulated by stopping the worker at a gate event, as a SIGKILL would; the
restart is a new `Gate` with a new owner; a fake clock makes every wait instant) and
reports, per cell, whether the world ended as wanted (**right**), whether the outcome the
gate reported agrees with it (**truthful**), and how many sends reached the provider.

The provider's answers are made by wrapping your effect's `send`, so your effect needs no
fault hooks of its own:

- `ok`: the send happens and its answer arrives;
- `lost`: the send happens, the answer is lost (a dropped connection);
- `late`: the client's deadline passes while the provider still runs the request; it
  lands after any outage action (a request that reached the provider first counts first);
- `in-progress`: as late, and a resend under the same key while it is held is told "in
  progress" (a 409); the request lands after any outage action;
- `refused`: a definite no (a 4xx): nothing happens;
- `garbled`: the send happens, the answer cannot be read (a 2xx that is not the object).

Outages: `none`; `change`, a person changes the target (your world's `change`, for a
refund a refund by hand); `revoke`, the approval is revoked. An outage happens while the
crashed worker is down, or (with no crash) while a send whose answer settled nothing may
still land, or else between the decision and the gate's first read. The answer is the
first worker's first send's; a restarted worker meets a provider that answers.

What is wanted: the effect exists exactly once if it reached the provider before the
outage action, or if there was no outage action; otherwise (and for `refused`) it does
not exist. A report is truthful when it says the effect exists exactly when it does
(`pending` claims nothing).

In pytest, one test gets the whole table in CI::

    from interlock.testing import certify

    def test_my_effect_is_certified():
        report = certify(MyWorld)
        print(report.table())
        report.assert_certified()

or one test per cell: `@pytest.mark.parametrize("cell", cells(), ids=str)` with
`run_cell(MyWorld, cell).assert_certified()`.
"""

from __future__ import annotations

import itertools
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from interlock._claims import Owner
from interlock._config import Switches, Timing
from interlock._effects import Effect, Found, Observation
from interlock._errors import PaymentsRejectedError, PaymentsUnsettledError
from interlock._gate import Gate, Outcome
from interlock._journal import Intent, Store
from interlock._leases import Lease
from interlock._store_memory import MemoryStore

# The provider's answers to the first send (see the module docstring).
ANSWERS = ("ok", "lost", "late", "in-progress", "refused", "garbled")
# What a person does while the worker is down or its send is held.
OUTAGES = ("none", "change", "revoke")
# The gate events a worker is killed at (None: it is not killed).
CRASH_POINTS: tuple[str | None, ...] = (
    None,
    "journaled",
    "check",
    "sending",
    "before-send",
    "answer-unsettled",
    "after-answer",
    "settled",
)
# The smallest useful timing; the fake clock makes every wait instant anyway.
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
_T0 = 1_700_000_000.0
_pids = itertools.count(1)

# Reports that claim nothing either way: an honest "unknown" (docs/design.md §3).
UNSETTLED_REPORTS = frozenset({"pending", "unknown"})
# Reports that say an effect of its own exists.
CLAIMING_REPORTS = frozenset({"sent", "adopted"})

__all__ = [
    "ANSWERS",
    "CLAIMING_REPORTS",
    "CRASH_POINTS",
    "OUTAGES",
    "UNSETTLED_REPORTS",
    "Cell",
    "CellResult",
    "Certification",
    "EffectWorld",
    "cells",
    "certify",
    "run_cell",
    "truthful",
]


def truthful(reported: str, own: int, *, names_its_own: bool = True) -> bool:
    """Whether a report tells the truth about the effects of its own that exist.

    `own` counts them; `names_its_own` says whether the effect a claiming report names is
    one of them. `sent`/`adopted` claim one exists (and name it); `pending`/`unknown`
    claim nothing and are truthful, shown as unknown; any other report (refused, failed,
    stopped) says none of its own exists, so one that exists makes it a false alarm.
    The demo's cards and sweeps judge their columns with this same rule.
    """
    if reported in UNSETTLED_REPORTS:
        return True
    if reported in CLAIMING_REPORTS:
        return own > 0 and names_its_own
    return own == 0


class EffectWorld(Protocol):
    """A fresh world for one cell: the effect, a decision on a fresh target, and its facts.

    Build one per cell (the harness calls your factory each time), so cells never share
    a target.
    """

    effect: Effect

    def decide(self, lease_id: str) -> Intent:
        """A decision on a fresh target under `lease_id`, fingerprinting the world as seen."""
        ...

    def change(self, intent: Intent) -> None:
        """A person changes the target (so a decision made before is stale)."""
        ...

    def count(self, intent: Intent) -> int:
        """How many times this action's effect took place at the provider."""
        ...


@dataclass(frozen=True)
class Cell:
    """One crash point x provider answer x outage."""

    crash: str | None
    answer: str
    outage: str

    def __str__(self) -> str:
        return f"{self.crash or 'no-crash'}/{self.answer}/{self.outage}"


@dataclass(frozen=True)
class CellResult:
    """How one cell ended: wanted and got, what was reported, right and truthful."""

    cell: Cell
    wanted: int
    got: int
    reported: str
    reason: str | None
    sends: int
    lease_ok: bool

    @property
    def right(self) -> bool:
        """The world ended as wanted, and the approval's cap held."""
        return self.got == self.wanted and self.lease_ok

    @property
    def truthful(self) -> bool:
        """The report says the effect exists exactly when it does (`pending` claims nothing)."""
        return truthful(self.reported, self.got)

    def assert_certified(self) -> None:
        """Raise AssertionError naming the cell unless it is right and truthful."""
        assert self.right and self.truthful, self.line()

    def line(self) -> str:
        """The cell as one line of the table."""
        verdict = "right" if self.right else "WRONG"
        truth = "truthful" if self.truthful else "UNTRUTHFUL"
        return (
            f"{self.cell!s:<34} wanted {self.wanted} got {self.got}  sends {self.sends}  "
            f"{self.reported:<8} {verdict:<6} {truth}"
            + (f"  ({self.reason})" if self.reason and not (self.right and self.truthful) else "")
        )


@dataclass
class Certification:
    """Every cell's result."""

    results: list[CellResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CellResult]:
        """Cells that are wrong or untruthful."""
        return [r for r in self.results if not (r.right and r.truthful)]

    def table(self) -> str:
        """The whole table, one line a cell, with a summary line."""
        lines = [r.line() for r in self.results]
        lines.append(
            f"{len(self.results)} cells: {len(self.results) - len(self.failures)} right and "
            f"truthful, {len(self.failures)} not"
        )
        return "\n".join(lines)

    def assert_certified(self) -> None:
        """Raise AssertionError with the failing cells unless every cell holds."""
        assert not self.failures, "\n".join(r.line() for r in self.failures)


def cells(
    crash_points: tuple[str | None, ...] = CRASH_POINTS,
    answers: tuple[str, ...] = ANSWERS,
    outages: tuple[str, ...] = OUTAGES,
) -> list[Cell]:
    """Every cell, crash point-major."""
    return [Cell(c, a, o) for c in crash_points for a in answers for o in outages]


def certify(
    world: Callable[[], EffectWorld],
    *,
    store: Callable[[Callable[[], float]], Store] | None = None,
    only: list[Cell] | None = None,
) -> Certification:
    """Run every cell (or `only` these) on fresh worlds; the table of results.

    `store` builds the journal on the harness's clock (default: a `MemoryStore`).
    """
    return Certification([run_cell(world, c, store=store) for c in (only or cells())])


class _Clock:
    def __init__(self) -> None:
        self.now = _T0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class _Crash(BaseException):
    """The simulated SIGKILL: nothing after it runs in that worker."""


class _Provider:
    """Wraps the effect's send to answer the first send as the cell says."""

    def __init__(self, effect: Effect, answer: str) -> None:
        self.kind = effect.kind
        self.inner = effect
        self.answer = answer
        self.armed = answer != "ok"
        # Whether the answer was still unused when the first worker ended (it never sent).
        self.armed_at_end = self.armed
        self.sends = 0
        self.held: list[tuple[Intent, str]] = []

    def observe(self, intent: Intent) -> Observation:
        return self.inner.observe(intent)

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        self.sends += 1
        if any(key == idempotency_key for _, key in self.held):
            raise PaymentsUnsettledError("send", "a request with this key is in progress", 409)
        if not self.armed:
            return self.inner.send(intent, idempotency_key)
        self.armed = False
        if self.answer == "refused":
            raise PaymentsRejectedError("send", "refused", "the provider refused it", 400)
        if self.answer in ("late", "in-progress"):
            self.held.append((intent, idempotency_key))
            raise PaymentsUnsettledError("send", "the client's deadline passed")
        found = self.inner.send(intent, idempotency_key)
        if self.answer == "garbled":
            raise PaymentsUnsettledError("send", f"an unreadable answer ({found.external_id})", 200)
        raise PaymentsUnsettledError("send", "the answer was lost")

    def land(self) -> None:
        """Held requests finish at the provider."""
        held, self.held = self.held, []
        for intent, key in held:
            self.inner.send(intent, key)


def _dead_owner(name: str) -> Owner:
    # A pid above Linux's pid_max cannot be running: provably gone.
    return Owner(f"{name}-{uuid.uuid4().hex[:6]}", 2**22 + next(_pids), _T0, socket.gethostname())


def run_cell(
    world: Callable[[], EffectWorld],
    cell: Cell,
    *,
    store: Callable[[Callable[[], float]], Store] | None = None,
) -> CellResult:
    """Run one cell on a fresh world; its result."""
    if cell.answer not in ANSWERS or cell.outage not in OUTAGES:
        raise ValueError(f"unknown cell {cell}: answers {ANSWERS}, outages {OUTAGES}")
    clock = _Clock()
    w = world()
    journal = (store or (lambda c: MemoryStore(clock=c)))(clock)
    lease_id = f"lease-{uuid.uuid4().hex[:12]}"
    intent = w.decide(lease_id)
    journal.grant_lease(
        Lease(lease_id, intent.kind, intent.target, intent.amount, _T0 + 86_400, "harness", _T0)
    )
    provider = _Provider(w.effect, cell.answer)
    reached_before: list[bool] = []

    def outage() -> None:
        if cell.outage == "none" or reached_before:
            return
        # A request held at the provider when the outage happens counts as before it.
        reached_before.append(bool(provider.held) or w.count(intent) > 0)
        if cell.outage == "change":
            w.change(intent)
        else:
            journal.revoke_lease(lease_id, "harness")

    def gate(owner: Owner, events: Mapping[str, Callable[[], None]], crash: str | None) -> Gate:
        def on_event(kind: str, _data: Mapping[str, Any]) -> None:
            hook = events.get(kind)
            if hook is not None:
                hook()
            if kind == crash:
                raise _Crash(kind)

        return Gate(
            journal,
            provider,
            timing=TIMING,
            switches=Switches(),
            owner=owner,
            signing_key=None,
            on_event=on_event,
            clock=clock,
            sleep=clock.sleep,
        )

    def while_held() -> None:
        outage()
        provider.land()

    # With no crash, the outage comes while an unsettled send may still land, or (when
    # the answer settles at once) between the decision and the gate's first read.
    first_events: dict[str, Callable[[], None]] = {"in-flight-wait": while_held}
    if cell.crash is None and cell.answer in ("ok", "refused"):
        first_events["journaled"] = outage
    reported: Outcome | None
    try:
        reported = gate(_dead_owner("first"), first_events, cell.crash).submit(intent)
    except _Crash:
        reported = None
    # The cell's answer is the first worker's; the restarted worker meets a prompt provider.
    provider.armed_at_end = provider.armed
    provider.armed = False
    outage()
    provider.land()
    if reported is None or not reported.settled:
        clock.now += 10 * TIMING.claim_ttl_s
        reported = gate(Owner.current("restart"), {}, None).recover_action(intent.action_id)
    got = w.count(intent)
    # A definite no means it never happens; a crash before the send means no answer came.
    refused = cell.answer == "refused" and provider.sends > 0 and not provider.armed_at_end
    wanted = 0 if refused or (reached_before and not reached_before[0]) else 1
    lease = journal.lease(lease_id)
    lease_ok = lease is not None and lease.spent <= lease.cap
    return CellResult(cell, wanted, got, reported.status, reported.reason, provider.sends, lease_ok)
