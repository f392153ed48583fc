"""Certify your own effect: every crash point x provider answer x outage, judged per cell.

Give it a way to build a fresh world, and the world a way to build your `Effect` anew
(`new_effect()`); it runs each cell in-process (the crash is simulated by stopping the
worker at a crash point's gate event, as a SIGKILL would: `CRASH_POINTS`, each
`CrashPoint` on a first send's path; the restart is a new `Gate` with a new
owner and a new effect, as a new process builds them, which recovers the action, or
submits the decision again when the first worker died before anything was journaled (a
first attempt's checks come before its one commit); a fake clock makes every wait
instant) and reports, per cell, whether the world ended as wanted (**right**), whether the
outcome the gate reported agrees with it (**truthful**), and how many sends reached the
provider.

Every worker the harness starts (the first, its restart, the second action's, and the
neighbour's) builds its own effect from `new_effect()`: whatever an effect keeps in
memory dies with its worker, so a lookup that reads the process's memory of what it sent
finds nothing after a restart, as it would after a real one.

The provider's answers are made by wrapping your effect's `send`, so your effect needs no
fault hooks of its own. A send whose answer never reaches the worker (lost, garbled,
late, in progress) reaches the provider through an effect of its own, so the worker's
effect learns nothing of it; a resend reaches the provider through the worker's effect,
and its answer is the provider's own (its handling of the idempotency key), never one
the harness makes up:

- `ok`: the send happens and its answer arrives;
- `lost`: the send happens, the answer is lost (a dropped connection);
- `late`: the client's deadline passes while the provider still runs the request; it
  lands after any outage action (a request that reached the provider first counts first);
- `in-progress`: as late, but the request is still running when the gate's wait ends:
  it finishes as the gate's resend under the same key reaches the provider, which answers
  that resend itself (a provider that replays its first answer per key makes one effect;
  one that does not makes two); with an outage (no resend) it finishes by the end of the
  in-flight window;
- `refused`: a definite no (a 4xx): nothing happens;
- `garbled`: the send happens, the answer cannot be read (a 2xx that is not the object).

Outages: `none`; `change`, a person changes the target (your world's `change`, for a
refund a refund by hand); `revoke`, the approval is revoked. An outage happens while the
crashed worker is down, or (with no crash) while a send whose answer settled nothing may
still land, or else between the decision and the gate's first read. The answer is the
first worker's first send's; a restarted worker meets a provider that answers.

Every cell is on a target where another action already sent, through your effect, under
an action id one character from this one's (near-identical metadata), and the decision saw
it; after the cell a second action on the same target is submitted. A lookup that adopts
any agent's send instead of this action's own is caught: an outcome that claims the effect
must name this action's own send, and the second action must tell the truth about its own.

What is wanted: the effect exists exactly once if it reached the provider before the
outage action, or if there was no outage action; otherwise (and for `refused`) it does
not exist. A report is truthful when it says the effect exists exactly when it does
(`pending` claims nothing).

The world builds the effect over the provider it keeps (the same payments, the same
server): ``def new_effect(self): return StripeRefund(self.payments)``. In pytest, one test
gets the whole table in CI::

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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from interlock._core.approvals import Approver, Approvers
from interlock._core.claims import Owner
from interlock._core.config import Timing
from interlock._core.effects import Effect, Found, Observation, accepts
from interlock._core.errors import PaymentsRejectedError, PaymentsUnsettledError
from interlock._core.events import Event, GateEvent
from interlock._core.gate import Gate, Outcome
from interlock._core.journal import Intent, Store
from interlock._core.leases import Lease
from interlock._stores.memory import MemoryStore
from interlock.testing.crash_points import CrashPoint

# The provider's answers to the first send (see the module docstring).
ANSWERS = ("ok", "lost", "late", "in-progress", "refused", "garbled")
# What a person does while the worker is down or its send is held.
OUTAGES = ("none", "change", "revoke")
# Where the first worker is killed: every crash point at a gate event of a first send
# (None: it is not killed).
CRASH_POINTS: tuple[CrashPoint | None, ...] = (
    None,
    *(p for p in CrashPoint if p.event is not None and not p.recovery),
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

    def new_effect(self) -> Effect:
        """Your effect as a newly started process builds it: a new object over this world's
        provider, holding nothing an earlier one kept in memory."""
        ...

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
    """One crash point x provider answer x outage; a crash point's word is read as its
    `CrashPoint` (an unknown one raises `ConfigError` naming the crash points)."""

    crash: CrashPoint | None
    answer: str
    outage: str

    def __post_init__(self) -> None:
        if self.crash is not None:
            object.__setattr__(self, "crash", CrashPoint(self.crash))

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
    names_its_own: bool = True
    second_ok: bool = True
    # Resends that reached the provider while the first request under their key still ran.
    conflicts: int = 0

    @property
    def right(self) -> bool:
        """The world ended as wanted, and the approval's cap held."""
        return self.got == self.wanted and self.lease_ok

    @property
    def truthful(self) -> bool:
        """The report says the effect exists exactly when it does (`pending` claims nothing),
        a claiming report names this action's own send (not the neighbour's), and the
        second action on the target told the truth about its own."""
        return truthful(self.reported, self.got, names_its_own=self.names_its_own) and (
            self.second_ok
        )

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
    crash_points: tuple[CrashPoint | None, ...] = CRASH_POINTS,
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

    `world` builds a fresh world; each world builds the effect anew (`new_effect()`) for
    every worker the harness starts. `store` builds the journal on the harness's clock
    (default: a `MemoryStore`).
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
    """The provider as the cell has it answer the first send, shared by every worker.

    A send whose answer the worker never gets goes to the provider through an effect of
    its own (`new_effect()`), so no worker's effect learns of it; every other send goes
    through the sending worker's effect and gets the provider's own answer.
    """

    def __init__(
        self, new_effect: Callable[[], Effect], answer: str, clock: Callable[[], float]
    ) -> None:
        self.new_effect = new_effect
        self.clock = clock
        # When a held request finishes at the latest (None: only a resend ends it).
        self.land_by: float | None = None
        self.answer = answer
        self.armed = answer != "ok"
        # Whether the answer was still unused when the first worker ended (it never sent).
        self.armed_at_end = self.armed
        self.sends = 0
        self.conflicts = 0
        self.held: list[tuple[Intent, str]] = []
        # The ids of the effects each idempotency key made: what an outcome may name.
        self.made: dict[str, set[str]] = {}

    def _make(self, effect: Effect, intent: Intent, key: str) -> Found:
        found = effect.send(intent, key)
        self.made.setdefault(key, set()).add(found.external_id)
        return found

    def send(self, effect: Effect, intent: Intent, idempotency_key: str) -> Found:
        """A worker's send through its `effect`, answered as the cell says."""
        self.sends += 1
        if any(key == idempotency_key for _, key in self.held):
            # The first request is still running: it finishes as the resend arrives, and
            # the provider's own key handling answers the resend.
            self.conflicts += 1
            self.land()
            return self._make(effect, intent, idempotency_key)
        if not self.armed:
            return self._make(effect, intent, idempotency_key)
        self.armed = False
        if self.answer == "refused":
            raise PaymentsRejectedError("send", "refused", "the provider refused it", 400)
        if self.answer in ("late", "in-progress"):
            self.held.append((intent, idempotency_key))
            raise PaymentsUnsettledError("send", "the client's deadline passed")
        found = self._make(self.new_effect(), intent, idempotency_key)
        if self.answer == "garbled":
            raise PaymentsUnsettledError("send", f"an unreadable answer ({found.external_id})", 200)
        raise PaymentsUnsettledError("send", "the answer was lost")

    def land(self) -> None:
        """Held requests finish at the provider; their answers reach no worker."""
        held, self.held = self.held, []
        for intent, key in held:
            self._make(self.new_effect(), intent, key)


class _Worker:
    """One worker's effect, built anew as its process would build it, over the provider."""

    def __init__(self, provider: _Provider) -> None:
        self.provider = provider
        self.inner = provider.new_effect()
        self.kind = self.inner.kind
        # The effect's currency, as the gate reads it to stamp an intent that has none.
        self.currency = getattr(self.inner, "currency", None)

    def accepts(self, intent: Intent) -> str | None:
        """The effect's own answer: the harness never sends what the effect would not."""
        return accepts(self.inner, intent)

    def observe(self, intent: Intent) -> Observation:
        p = self.provider
        if p.held and p.land_by is not None and p.clock() >= p.land_by:
            p.land()
        return self.inner.observe(intent)

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        return self.provider.send(self.inner, intent, idempotency_key)


def _new_effect(w: EffectWorld) -> Callable[[], Effect]:
    """The world's effect factory, or a TypeError saying what to give."""
    new_effect = getattr(w, "new_effect", None)
    if not callable(new_effect):
        raise TypeError(
            f"certify builds the effect anew for every worker it starts, as a new process "
            f"would: give {type(w).__name__} a method new_effect(self) -> Effect that returns "
            "a new effect over the world's provider (e.g. StripeRefund(self.payments)); one "
            "`effect` object shared by a crashed worker and its restart keeps in memory what "
            "a real restart loses"
        )
    factory: Callable[[], Effect] = new_effect
    return factory


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
    new_effect = _new_effect(w)
    journal = (store or (lambda c: MemoryStore(clock=c)))(clock)
    lease_id = f"lease-{uuid.uuid4().hex[:12]}"
    intent = w.decide(lease_id)
    # The harness grants as an approver would, and its gates trust that approver only;
    # the approval is in the action's currency: the intent's, else the effect's own.
    approver = Approver.generate("harness")
    currency = intent.currency or getattr(new_effect(), "currency", None)
    journal.grant_lease(
        approver.sign(
            Lease(lease_id, intent.kind, intent.target, intent.amount, _T0 + 86_400, "harness",
                  _T0, currency=currency)
        )
    )  # fmt: skip
    provider = _Provider(new_effect, cell.answer, clock)
    # Another action on the same target went first, through the same kind of effect (in
    # another process), under an id one character away: a lookup that adopts any agent's
    # send (not this action's) adopts it. The decision saw it, as a model reading the
    # target would.
    neighbour = replace(intent, action_id=_near(intent.action_id))
    new_effect().send(neighbour, neighbour.action_id)
    intent = replace(intent, fingerprint=new_effect().observe(intent).fingerprint)
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

    def gate(
        owner: Owner,
        events: Mapping[GateEvent, Callable[[Mapping[str, Any]], None]],
        crash: CrashPoint | None,
    ) -> Gate:
        def on_event(event: Event) -> None:
            hook = events.get(event.kind)
            if hook is not None:
                hook(event.data)
            if crash is not None and event.kind is crash.event:
                raise _Crash(event.kind)

        return Gate(
            journal,
            _Worker(provider),
            timing=TIMING,
            owner=owner,
            signing_key=None,
            on_event=on_event,
            clock=clock,
            sleep=clock.sleep,
            monotonic=clock,
            approvers=Approvers.of(approver),
        )

    def while_held(seconds: float) -> None:
        outage()
        if cell.answer != "in-progress":
            provider.land()
        elif cell.outage != "none":
            # Still running while the gate waits; it finishes by the end of the in-flight
            # window (Stripe within 5 s of the client's deadline, docs/design.md §4).
            provider.land_by = clock.now + seconds
        # With no outage it runs on past the window, until the gate's resend arrives.

    # With no crash, the outage comes while an unsettled send may still land, or (when
    # the answer settles at once) between the decision and the gate's first read.
    first_events: dict[GateEvent, Callable[[Mapping[str, Any]], None]] = {
        GateEvent.IN_FLIGHT_WAIT: lambda d: while_held(float(d["seconds"]))
    }
    if cell.crash is None and cell.answer in ("ok", "refused"):
        outage()
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
        restart = gate(Owner.current("restart"), {}, None)
        # A first attempt that died before its one commit before the send left nothing
        # journaled: the agent decides again, and the same decision is submitted.
        if journal.action(intent.action_id) is None:
            reported = restart.submit(intent)
        else:
            reported = restart.recover_action(intent.action_id)
    # A second action on the same target after the first settled, decided on what is there
    # now: it must send its own (or be refused), never adopt the first's.
    sends = provider.sends
    second = replace(w.decide(lease_id), target=intent.target, action_id=_near(intent.action_id, 1))
    second = replace(second, fingerprint=new_effect().observe(second).fingerprint)
    second_lease = f"{lease_id}-2"
    journal.grant_lease(approver.sign(
        Lease(second_lease, second.kind, second.target, second.amount, _T0 + 86_400 * 2,
              "harness", clock.now, currency=currency)
    ))  # fmt: skip
    second = replace(second, lease_id=second_lease)
    second_out = gate(Owner.current("second"), {}, None).submit(second)
    got = w.count(intent)
    # A definite no means it never happens; a crash before the send means no answer came.
    refused = cell.answer == "refused" and provider.sends > 0 and not provider.armed_at_end
    wanted = 0 if refused or (reached_before and not reached_before[0]) else 1
    lease = journal.lease(lease_id)
    lease_ok = lease is not None and lease.spent <= lease.cap
    own = provider.made.get(intent.action_id, set())
    names_own = reported.external_id in own
    second_own = provider.made.get(second.action_id, set())
    second_ok = truthful(
        second_out.status,
        w.count(second),
        names_its_own=second_out.external_id in second_own,
    ) and (second_out.status not in CLAIMING_REPORTS or w.count(second) == 1)
    return CellResult(cell, wanted, got, reported.status, reported.reason, sends,
                      lease_ok, names_own, second_ok, provider.conflicts)  # fmt: skip


def _near(action_id: str, n: int = 0) -> str:
    """The `n`th action id one character away from `action_id` (near-identical metadata)."""
    return action_id[:-1] + [c for c in "xyz" if c != action_id[-1]][n]
