"""Property-based tests for the gate: crashes, outages, faults and racing recoverers.

Everything runs in-process against the in-memory Stripe model with a fake clock. A crash
is an exception raised from the gate's event sink at a named step; the crashed gate is
abandoned and recovery runs in new gates with new owners. The stories also step the wall
clock either way at any moment (the store's clock steps with it, as on one host with
SQLite, or keeps its own, as PostgreSQL's does), make a refund that carries the action's
metadata for any amount, and have a person re-approve at any moment. Recoverers are interleaved
deterministically: recoverer i+1 starts from inside recoverer i's event sink at a chosen
step (or after recoverer i returns), and waits on the shared fake clock. The rig is
shared with the unit tests: `tests/helpers/gate_rig.py`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    ActionError,
    Approver,
    Intent,
    KeyList,
    Lease,
    MemoryStore,
    Outcome,
    Owner,
    PaymentsUnsettledError,
    Refund,
    SigningKey,
    SQLiteStore,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._core.claims import Claim
from interlock._core.leases import lease_currency
from interlock._core.merkle import leaf_hash
from interlock._core.receipts import canonical_json
from interlock.testing import CRASH_POINTS, CrashPoint, InProcessPayments
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import (
    AMOUNT,
    PAYMENT,
    TIMING,
    Clock,
    Crash,
    GateWorld,
    Hook,
    gone_owner,
    remote_owner,
)

OUTAGES = (None, "hand-refund", "revoke", "expire")
# When the outage action happens: after the decision but before the gate starts (a first
# attempt reads first: nothing of it comes before its read), while the worker is dead
# (between the crash and the restart), or after every recoverer returned.
OUTAGE_WHEN = ("before-submit", "while-held", "during-outage", "after-recovery")
# Stripe's answer to the first create: a model fault (kind:stage), or `late:` a request
# whose client deadline passes while Stripe still runs it, and that lands later (`lands`,
# right after any outage action "while held") or dies at Stripe with nothing made (`never`).
FAULTS = (
    None,
    "error_500:after_commit",
    "error_500:before_execution",
    "error_500:no_refund",
    "drop",  # the transport's one resend gets the replay
    "drop:twice",  # the resend's answer is lost too: the gate sees the lost answer
    "garbled_2xx",
    "error_429",
    "late:lands",
    "late:never",
)
# Where the next recoverer starts inside the one before it (None: after it returns).
NEST_POINTS = (None, "claim-wait", "claim", "check", "sending", "before-send", "after-answer")
REFUSAL_REASON = {
    "hand-refund": REASON_WORLD_CHANGED,
    "revoke": "approval revoked by support",
    "expire": "approval expired",
}
# Where the first worker's wall clock steps (an event of its send, or while it is dead),
# and by how much: an NTP step or a resumed VM, either way.
STEP_POINTS = (
    "journaled",
    "check",
    "sending",
    "before-send",
    "answer-unsettled",
    "in-flight-wait",
    "after-answer",
    "during-outage",
)
STEPS = (-10.0, -3.0, 3.0, 10.0)
# When a refund naming the action appears that the gate did not make, for any amount.
FOREIGN_WHEN = ("before-submit", "while-held", "during-outage")
# When a person re-approves the action under a new lease: at an event of the first worker,
# while it is dead, or after recovery.
REAPPROVE_POINTS = ("unknown", "in-flight-wait", "settled", "during-outage", "after-recovery")
PROPERTY_SETTINGS = settings(
    max_examples=500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class World(GateWorld):
    """A $100 payment, refund leases on it, a store, a fake clock and an event log."""

    case = "gate-properties"

    def submit(
        self, intent: Intent, owner: Owner, crash_at: CrashPoint | None = None
    ) -> Outcome | None:
        """Submit `intent`; None when the worker crashed."""
        try:
            return self.gate(owner, crash_at=_event(crash_at)).submit(intent)
        except Crash:
            return None

    def decide_again(self, intents: list[Intent]) -> None:
        """What a restarted agent does with a decision whose first attempt died before its
        one commit (nothing of it was journaled, nothing sent): it submits it again."""
        for intent in intents:
            if self.store.action(intent.action_id) is None:
                self.gate(Owner.current("again")).submit(intent)


def _event(point: CrashPoint | None) -> str | None:
    """The gate event a worker dies at for `point` (the rig crashes at gate events)."""
    return None if point is None else point.event


def once(kind: str, action: Callable[[], object]) -> dict[str, Hook]:
    """Event hooks that run `action` the first time `kind` is emitted."""
    fired = False

    def hook(_data: Mapping[str, Any]) -> None:
        nonlocal fired
        if not fired:
            fired = True
            action()

    return {kind: hook}


def run_recoverers(world: World, nests: tuple[str | None, ...]) -> list[tuple[str, list[Outcome]]]:
    """Run 1 + len(nests) recoverers; recoverer i+1 starts at recoverer i's step nests[i]."""
    results: list[tuple[str, list[Outcome]]] = []

    def run(i: int) -> None:
        owner = Owner.current(f"recoverer-{i}")
        started = False

        def start_next() -> None:
            nonlocal started
            started = True
            run(i + 1)

        nest = nests[i] if i < len(nests) else None
        hooks = once(nest, start_next) if nest is not None else None
        results.append((owner.worker_id, world.gate(owner, hooks=hooks).recover()))
        if i < len(nests) and not started:
            run(i + 1)

    run(0)
    return results


# -- one action: crash, outage, faults, racing recoverers -------------------------------


class LateStripe(InProcessPayments):
    """A Stripe whose next create is still running when the client's deadline passes.

    The client gets a timeout; a retry under the same key meanwhile gets a 409. `land()`
    finishes it at Stripe (the refund is made), `die()` ends it with nothing made.
    """

    def __init__(self, land_after: float | None = None) -> None:
        """With `land_after`, a held request lands by itself that many seconds (on the
        monotonic clock) after it started, at the first read from then on."""
        super().__init__()
        self.armed = 0
        self.held: list[tuple[str, int | None, str | None, dict[str, str]]] = []
        self.land_after = land_after
        self.clock: Clock | None = None
        self.due: float | None = None

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        due, clock = self.due, self.clock
        if self.held and due is not None and clock is not None and clock.monotonic() >= due:
            self.land()
        return super().list_refunds(payment_intent)

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        if any(key == idempotency_key for _, _, key, _ in self.held):
            self.model.requests.append(("POST", "refunds"))
            raise PaymentsUnsettledError("create refund", "idempotency_key_in_use", 409)
        if self.armed:
            self.armed -= 1
            self.model.requests.append(("POST", "refunds"))
            if self.land_after is not None and self.clock is not None:
                self.due = self.clock.monotonic() + self.land_after
            self.held.append((payment_intent, amount, idempotency_key, dict(metadata or {})))
            raise PaymentsUnsettledError("create refund", "timed out")
        return super().create_refund(
            payment_intent, amount, idempotency_key=idempotency_key, metadata=metadata
        )

    def land(self) -> None:
        """Every held request finishes at Stripe: its refund is made."""
        held, self.held = self.held, []
        for pi, amount, key, metadata in held:
            super().create_refund(pi, amount, idempotency_key=key, metadata=metadata)

    def die(self) -> None:
        """Every held request ends at Stripe with nothing made."""
        self.held = []


@dataclass(frozen=True)
class Story:
    """One run: where the first worker dies, what happens meanwhile, who recovers."""

    crash: CrashPoint | None
    crashed_owner: str
    outage: str | None
    when: str
    fault: str | None
    nests: tuple[str | None, ...]
    # The wall clock's step: where and by how much; the store's clock is the host's
    # (stepped with it) or the database's (not).
    step: tuple[str, float] | None = None
    db_clock: bool = False
    # A late request lands this long after it started (None: at the first poll).
    land_after: float | None = None
    # A refund naming the action that the gate did not make: when, and its amount.
    foreign: tuple[str, int] | None = None
    reapprove: str | None = None


@dataclass
class Played:
    """What happened in a run, for the invariants to judge."""

    world: World
    intent: Intent
    lease: Lease
    first: Outcome | None
    claim_at_crash: Claim | None
    restart_at: float
    pending_at_restart: list[str]
    agent_refunds_at_outage: int | None = None
    recovery_requests: list[tuple[str, str]] = field(default_factory=list)
    recovered: list[tuple[str, list[Outcome]]] = field(default_factory=list)
    foreign_ids: list[str] = field(default_factory=list)
    reapproved: list[Outcome] = field(default_factory=list)


stories = st.builds(
    Story,
    crash=st.sampled_from(CRASH_POINTS),
    crashed_owner=st.sampled_from(("gone", "remote")),
    outage=st.sampled_from(OUTAGES),
    when=st.sampled_from(OUTAGE_WHEN),
    fault=st.sampled_from(FAULTS),
    nests=st.lists(st.sampled_from(NEST_POINTS), max_size=2).map(tuple),
    step=st.none() | st.tuples(st.sampled_from(STEP_POINTS), st.sampled_from(STEPS)),
    db_clock=st.booleans(),
    land_after=st.none() | st.floats(0.0, TIMING.in_flight_s - 0.01),
    foreign=st.none()
    | st.tuples(st.sampled_from(FOREIGN_WHEN), st.integers(1, 3_000) | st.just(AMOUNT)),
    reapprove=st.none() | st.sampled_from(REAPPROVE_POINTS),
)


def chain(hooks: dict[str, Hook], kind: str, action: Callable[[], object]) -> None:
    """Add a hook that runs `action` the first time `kind` is emitted, after any already set."""
    before = hooks.get(kind)
    fired = False

    def hook(data: Mapping[str, Any]) -> None:
        nonlocal fired
        if before is not None:
            before(data)
        if not fired:
            fired = True
            action()

    hooks[kind] = hook


def _db_store(clock: Callable[[], float]) -> MemoryStore:
    """A store on its own clock, as PostgreSQL's: it ticks as time passes, never steps."""
    assert isinstance(clock, Clock)
    return MemoryStore(clock=clock.monotonic)


def play(story: Story) -> Played:
    """Run the story: decide, submit (maybe crash), outage, restart with racing recoverers."""
    late = story.fault is not None and story.fault.startswith("late:")
    payments = LateStripe(story.land_after)
    world = World(_db_store if story.db_clock else None, payments=payments)
    payments.clock = world.clock
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    outage_seen: list[int] = []
    foreign_ids: list[str] = []
    reapproved: list[Outcome] = []

    def settle_held() -> None:
        if story.fault == "late:never":
            payments.die()
        elif story.land_after is None:
            payments.land()

    def foreign_at(when: str) -> None:
        if story.foreign is not None and story.foreign[0] == when:
            metadata = {ACTION_METADATA_KEY: intent.action_id}
            # Made elsewhere, not over the agent's link: the faults armed for the agent's
            # requests stay armed for them.
            armed, world.model._armed = world.model._armed, []
            try:
                direct = InProcessPayments(world.model)
                made = direct.create_refund(world.pi, story.foreign[1], metadata=metadata)
            finally:
                world.model._armed = armed
            foreign_ids.append(made.id)

    def step_at(where: str) -> None:
        if story.step is not None and story.step[0] == where:
            world.clock.step(story.step[1])

    def reapprove_at(when: str) -> None:
        if story.reapprove != when:
            return
        person = world.gate(Owner.current("person"))
        try:
            reapproved.append(person.reapprove(intent.action_id, world.grant(AMOUNT).id, "support"))
        except ActionError as e:
            # Only a refused or unknown action can be approved again, and not one whose
            # refund exists: say which, so that a wrong refusal here shows. A first attempt
            # that died before its one commit left no action to approve again.
            journaled = world.store.action(intent.action_id) is not None
            assert (
                "only a refused or unknown" in str(e)
                or "its own refund" in str(e)
                or (not journaled and "not in the journal" in str(e))
            )

    def outage() -> None:
        # A request that reached Stripe before the outage action counts as before it.
        will_land = len(payments.held) if story.fault == "late:lands" else 0
        outage_seen.append(len(world.agent_refunds(intent.action_id)) + will_land)
        if story.outage == "hand-refund":
            world.model.clear_faults()  # support works in the dashboard, not over the agent's link
            # By hand in the dashboard: not through the agent's (possibly slow) link.
            InProcessPayments(world.model).create_refund(world.pi, AMOUNT)
        elif story.outage == "revoke":
            world.store.revoke_lease(lease.id, "support")
        elif story.outage == "expire":
            # Past the expiry by more than any step, so that no step back makes it live.
            world.clock.now = max(world.clock.now, lease.expires_at + 1 + max(STEPS))

    def outage_at(when: str) -> None:
        if story.outage is not None and story.when == when:
            outage()

    if late:
        payments.armed = 1
    elif story.fault is not None:
        kind, _, stage = story.fault.partition(":")
        if stage == "twice":
            world.model.add_fault(kind, count=2)
        else:
            world.model.add_fault(kind, **({"stage": stage} if stage else {}))
    outage_at("before-submit")
    foreign_at("before-submit")
    owner = gone_owner() if story.crashed_owner == "gone" else remote_owner()
    hooks: dict[str, Hook] = {}

    def while_held() -> None:
        outage_at("while-held")
        foreign_at("while-held")
        settle_held()

    # While the first create may still land: the gate waits out its in-flight window.
    chain(hooks, "in-flight-wait", while_held)
    if story.step is not None and story.step[0] != "during-outage":
        chain(hooks, story.step[0], lambda: step_at(story.step[0] if story.step else ""))
    if story.reapprove in ("unknown", "in-flight-wait", "settled"):
        point = story.reapprove
        chain(hooks, point, lambda: reapprove_at(point))
    try:
        first: Outcome | None = world.gate(owner, crash_at=_event(story.crash), hooks=hooks).submit(
            intent
        )
    except Crash:
        first = None
    # The slow answer is the first worker's only; recoverers meet a prompt Stripe.
    payments.armed = 0
    if payments.held:
        # The worker died while its request was still running at Stripe.
        while_held()
    state = world.store.action(intent.action_id)
    # A first attempt that died before its one commit journaled nothing and sent nothing.
    assert state is not None or story.crash is CrashPoint.AFTER_CHECK
    claim_at_crash = (
        state.claim if state is not None and first is None and state.settlement is None else None
    )
    outage_at("during-outage")
    foreign_at("during-outage")
    step_at("during-outage")
    reapprove_at("during-outage")
    # The agent decides again after the restart when nothing was journaled: the same
    # decision is submitted (its report is a restarted worker's, not the first's).
    again = None if state is not None else world.gate(Owner.current("again")).submit(intent)

    played = Played(
        world, intent, lease, first, claim_at_crash, world.clock(), world.store.pending()
    )
    requests = len(world.model.requests)
    played.recovered = run_recoverers(world, story.nests)
    if again is not None:
        played.recovered.insert(0, ("again", [again]))
    played.recovery_requests = world.model.requests[requests:]
    if world.store.pending():
        # A recoverer paused inside another (a nest) can still send after the other took
        # over and left (the stated limit of a paused worker): the last recovery, once
        # every claim has run out, settles what it can.
        world.clock.now += 10 * TIMING.claim_ttl_s
        played.recovered.append(("last", world.gate(Owner.current("last")).recover()))
    if payments.held and story.fault == "late:lands":
        # Stripe finishes a request within its window whether or not anyone reads.
        payments.land()
    outage_at("after-recovery")
    reapprove_at("after-recovery")
    if world.store.pending():
        world.clock.now += 10 * TIMING.claim_ttl_s
        played.recovered.append(("after-reapproval", world.gate(Owner.current("end")).recover()))
    played.agent_refunds_at_outage = outage_seen[0] if outage_seen else None
    played.foreign_ids = foreign_ids
    played.reapproved = reapproved
    return played


def assert_honest(played: Played, story: Story) -> None:
    """What must hold in every story: no refund twice, every report true, the cap holds,
    and nothing stuck but an honest unknown.

    A recoverer paused right before its create (a nest at `before-send`) while another
    takes over and refuses is the stated limit of a paused worker (Stripe cannot check a
    fencing token): there a refusal may meet the refund, and only the rest is judged.
    """
    paused = "before-send" in story.nests
    world = played.world
    aid = played.intent.action_id
    foreign = set(played.foreign_ids)
    by_action: dict[str, list[Refund]] = {}
    for r in world.agent_refunds():
        by_action.setdefault(r.metadata[ACTION_METADATA_KEY], []).append(r)
    # No refund twice: the gate made at most one refund for the decision, its re-approval
    # included (a foreign refund for the same amount is indistinguishable, and adopted).
    made = [r for refunds in by_action.values() for r in refunds if r.id not in foreign]
    assert len(made) <= 1, made
    # Every report true: sent/adopted name a refund of that action matching its intent,
    # as the store records it; a refusal or failure only where no such refund exists;
    # pending names only a refund that exists.
    reports = [o for _, outs in played.recovered for o in outs] + played.reapproved
    if played.first is not None:
        reports.append(played.first)
    for o in reports:
        state = world.store.action(o.action_id)
        assert state is not None
        matching = [r for r in by_action.get(o.action_id, []) if r.amount == state.intent.amount]
        if o.status in ("sent", "adopted"):
            assert o.external_id in {r.id for r in matching}, (o, matching)
            assert o.amount == state.intent.amount
            assert state.settlement is not None
            assert (
                state.settlement.status in ("sent", "adopted"),
                state.settlement.external_id,
            ) == (
                True,
                o.external_id,
            )
        elif o.status in ("refused", "failed") and not paused:
            # A foreign refund made after the report cannot make it untrue when made.
            assert [r for r in matching if r.id not in foreign] == [], (o, matching)
        elif o.external_id is not None:
            assert o.external_id in {r.id for r in by_action.get(o.action_id, [])}
    # The store's final record is true, and nothing is stuck but an honest unknown.
    for action_id in world.store.actions():
        state = world.store.action(action_id)
        assert state is not None
        refunds = by_action.get(action_id, [])
        matching = [r for r in refunds if r.amount == state.intent.amount]
        s = state.settlement
        if s is None:
            assert state.unknown is not None, f"{action_id} is stuck pending without a reason"
            if state.unknown.startswith("conflict: "):
                assert any(r.amount != state.intent.amount for r in refunds)
            own = [r for r in matching if r.id not in foreign]
            assert own == [] or state.unknown.startswith("conflict: "), matching
        elif s.status in ("sent", "adopted"):
            assert s.external_id in {r.id for r in matching} and s.amount == state.intent.amount
        elif not paused:
            assert [r for r in matching if r.id not in foreign] == [], (action_id, s, matching)
    # The cap holds in the record: every lease spent only what its actions' refunds moved.
    leases = {world.store.action(a).intent.lease_id for a in world.store.actions()}  # type: ignore[union-attr]
    for lease_id in leases:
        lease = world.store.lease(lease_id)
        assert lease is not None and lease.spent <= lease.cap
    assert aid in world.store.actions()


@PROPERTY_SETTINGS
@given(story=stories)
@example(Story(CrashPoint.AFTER_ANSWER, "gone", None, "during-outage", None, ()))
@example(
    Story(CrashPoint.BEFORE_SEND, "gone", "hand-refund", "during-outage", None, ("claim-wait",))
)
@example(
    Story(
        CrashPoint.BEFORE_SEND, "remote", "revoke", "during-outage", None, ("claim", "claim-wait")
    )
)
@example(Story(CrashPoint.AFTER_JOURNAL, "gone", "expire", "during-outage", None, ()))
# Killed before its one commit, a hand refund meanwhile: the decision made again is refused.
@example(Story(CrashPoint.AFTER_CHECK, "gone", "hand-refund", "during-outage", None, ()))
@example(
    Story(
        CrashPoint.AFTER_UNSETTLED_ANSWER, "gone", None, "during-outage", "drop:twice", ("sending",)
    )
)
@example(Story(None, "gone", "hand-refund", "while-held", "late:lands", ()))
@example(Story(None, "gone", "revoke", "while-held", "late:lands", ()))
@example(
    Story(CrashPoint.AFTER_UNSETTLED_ANSWER, "gone", "hand-refund", "while-held", "late:lands", ())
)
@example(Story(None, "gone", "hand-refund", "while-held", "late:never", ()))
@example(Story(None, "remote", None, "during-outage", "error_500:no_refund", ()))
@example(Story(None, "gone", "hand-refund", "while-held", "error_500:after_commit", ()))
@example(Story(None, "gone", None, "during-outage", "garbled_2xx", ("claim-wait",)))
@example(
    Story(
        CrashPoint.AFTER_CHECK, "gone", None, "during-outage", None, ("before-send", "after-answer")
    )
)
# A wall-clock step while its own create is still running: the gate must keep waiting out
# the in-flight window (it refused on the wall clock, on either store clock, before).
@example(
    Story(
        None,
        "gone",
        "hand-refund",
        "while-held",
        "late:lands",
        (),
        ("answer-unsettled", 3.0),
        False,
        4.0,
    )
)
@example(
    Story(
        None,
        "gone",
        "hand-refund",
        "while-held",
        "late:lands",
        (),
        ("answer-unsettled", 10.0),
        True,
        4.0,
    )
)
@example(
    Story(None, "gone", "revoke", "while-held", "late:lands", (), ("before-send", 10.0), True, 5.0)
)
# A foreign refund naming the action for $50; a re-approval of an unknown action whose
# refund landed.
@example(Story(None, "gone", None, "before-submit", None, (), foreign=("before-submit", 5_000)))
@example(
    Story(
        None, "gone", None, "before-submit", "error_500:after_commit", (), reapprove="during-outage"
    )
)
def test_one_action_ends_as_the_truth_table_wants(story: Story) -> None:
    """Whatever the crash, outage, fault and recoverers, Stripe and the record end as wanted.

    With a foreign refund or a re-approval the truth table does not apply; every story is
    held to no refund twice, every report true, the cap and nothing stuck but an honest
    unknown.
    """
    played = play(story)
    world, aid = played.world, played.intent.action_id
    assert_honest(played, story)
    if story.foreign is not None or story.reapprove is not None:
        return

    # Every recoverer is done and the action is settled, with a receipt that says so;
    # only an action a 5xx made unknown may stay pending, and then no refund of it exists.
    state = world.store.action(aid)
    assert state is not None
    agent = world.agent_refunds()
    if state.settlement is None:
        assert state.unknown is not None and story.fault is not None
        assert story.fault.startswith("error_500") and agent == []
        assert world.store.pending() == [aid]
        lease = world.store.lease(played.lease.id)
        assert lease is not None and lease.spent == 0
        assert dict(lease.reservations) == {aid: AMOUNT}
        for _, outs in played.recovered:
            assert all(o.status == "pending" for o in outs)
        result = verify(world.store, world.payments)
        assert result.ok, result.problems
        return
    assert world.store.pending() == []
    assert state.receipt is not None
    status = state.settlement.status
    assert state.receipt.outcome == status and state.receipt.action_id == aid

    # The agent's refund exists exactly once if it reached Stripe before the outage action,
    # or if there was none; otherwise it does not exist.
    assert all(r.metadata[ACTION_METADATA_KEY] == aid for r in agent)
    if story.outage is not None and story.when == "during-outage" and story.fault is None:
        landed = played.first is not None or story.crash in (
            CrashPoint.AFTER_ANSWER,
            CrashPoint.AFTER_OUTCOME,
        )
        assert played.agent_refunds_at_outage == int(landed)
    if story.outage is not None and story.when == "before-submit":
        assert played.agent_refunds_at_outage == 0
    fired = played.agent_refunds_at_outage is not None
    wanted = 1 if story.outage is None or not fired or played.agent_refunds_at_outage else 0
    assert len(agent) == wanted

    # The record is truthful: sent or adopted exactly when its refund exists.
    if wanted:
        assert status in ("sent", "adopted")
        assert (state.settlement.external_id, state.settlement.amount) == (agent[0].id, AMOUNT)
    else:
        assert story.outage is not None
        assert (status, state.settlement.reason) == ("refused", REFUSAL_REASON[story.outage])
    # Unsettled answers are never recorded as a failure: only a definite "no" is.
    assert status != "failed"
    reported = [o for _, outs in played.recovered for o in outs if o.settled]
    if played.first is not None and played.first.settled:
        reported.append(played.first)
    for o in reported:
        assert (o.status, o.external_id) == (status, state.settlement.external_id)

    # A hand refund, once made, is always there; the lease is never overspent.
    assert len(world.hand_refunds()) == (1 if story.outage == "hand-refund" and fired else 0)
    lease = world.store.lease(played.lease.id)
    assert lease is not None
    assert lease.spent == sum(r.amount for r in agent) <= lease.cap
    assert dict(lease.reservations) == {}

    # A claim marked `sending` is waited out to its expiry plus the grace, unless its owner
    # is provably gone and the lookup found its refund (adopted, nothing sent); a claim
    # not sending is taken at once from a provably dead owner, never early from a remote one.
    if story.step is not None or story.land_after is not None:
        # The claim waits below are read on the wall clock the events carry, and a request
        # that lands late adds lookups: both are judged above, by what ended.
        return
    claim = played.claim_at_crash
    recoverers = {worker for worker, _ in played.recovered}
    taken = [e for e in world.events if e.worker in recoverers and e.kind == "claim"]
    sends = [e for e in world.events if e.worker in recoverers and e.kind == "before-send"]
    if claim is not None:
        grace = TIMING.grace_s
        if claim.sending:
            assert all(e.t >= claim.expires_at + grace for e in sends)
            # Only the first take replaces the crashed worker's claim; later ones replace
            # a recoverer's own (not sending) claim, judged by the rules for that.
            early = [e for e in taken[:1] if e.t < claim.expires_at + grace]
            if early:
                assert story.crashed_owner == "gone" and status == "adopted"
                assert [e.data["early"] for e in early] == [True] * len(early)
        elif story.crashed_owner == "remote":
            assert all(e.t >= claim.expires_at for e in taken + sends)
        else:
            assert taken and taken[0].worker == "recoverer-0"
            assert taken[0].t == played.restart_at

    # Recovery costs one list and at most one create, when nothing else interferes (a
    # dead owner's `sending` claim adds the one lookup that may end the wait early).
    if not story.nests and story.fault is None:
        looked_early = (
            claim is not None
            and claim.sending
            and story.crashed_owner == "gone"
            and played.restart_at < claim.expires_at + TIMING.grace_s
        )
        lists = 2 if looked_early and status != "adopted" else 1
        if played.pending_at_restart:
            assert played.recovery_requests[:lists] == [("GET", "refunds")] * lists
            assert played.recovery_requests[lists:] in ([], [("POST", "refunds")])
        else:
            assert played.recovery_requests == []

    result = verify(world.store, world.payments)
    assert result.ok, result.problems
    assert result.chain_length == 1


# -- several actions on one lease ---------------------------------------------------------


@PROPERTY_SETTINGS
@given(
    cap=st.integers(500, 5_000),
    plan=st.lists(
        st.tuples(
            st.integers(100, 3_000),
            st.sampled_from(
                (
                    None,
                    CrashPoint.AFTER_CHECK,
                    CrashPoint.AFTER_SENDING,
                    CrashPoint.BEFORE_SEND,
                    CrashPoint.AFTER_ANSWER,
                )
            ),
        ),
        min_size=2,
        max_size=3,
    ),
)
def test_actions_on_one_lease_never_spend_past_its_cap(
    cap: int, plan: list[tuple[int, CrashPoint | None]]
) -> None:
    """However actions on one lease crash and recover, their refunds never exceed its cap."""
    world = World()
    lease = world.grant(cap)
    intents = []
    for amount, crash_at in plan:
        intent = world.decide(amount, lease.id)
        intents.append(intent)
        world.submit(intent, gone_owner(), crash_at)
    world.decide_again(intents)
    run_recoverers(world, ())

    assert world.store.pending() == []
    total = 0
    for intent in intents:
        state = world.store.action(intent.action_id)
        assert state is not None and state.settlement is not None and state.receipt is not None
        own = world.agent_refunds(intent.action_id)
        assert len(own) <= 1
        if own:
            assert state.settlement.status in ("sent", "adopted")
            assert state.settlement.external_id == own[0].id
            assert own[0].amount == intent.amount
            total += own[0].amount
        else:
            assert state.settlement.status == "refused"
    after = world.store.lease(lease.id)
    assert after is not None and dict(after.reservations) == {}
    assert after.spent == total <= cap
    if any(amount <= cap for amount, _ in plan):
        assert total > 0
    result = verify(world.store, world.payments)
    assert result.ok, result.problems


# -- approvals: mixed currencies, forged and altered grants, revocations ------------------

CURRENCIES = ("usd", "eur", "jpy")
# The payments actions refund, by their currency: two in USD, so that an action on another
# payment than its lease's is refused for its target, not only for its currency.
PAYMENTS = ("usd", "eur", "jpy", "usd")
# How a lease reaches the store: signed by the tests' approver (valid), or forged: written
# with no signature, signed by a key the gate does not trust, or altered after signing.
GRANTS = (
    "valid",
    "unsigned",
    "mallory",
    "altered-cap",
    "altered-currency",
    "altered-target",
    "altered-exact",
)
MALLORY = Approver.generate("mallory")
# Where, in one action's send path, support revokes a lease: before the commit that marks
# `sending` (the first check, right after the approval check passed) or after it (the
# journal, which a first attempt commits with `sending`; the send is marked and goes out;
# a revocation cannot stop it). `check:approval` is the `check` event of the approval
# check: only that commit's own check of the lease stands between it and the send.
REVOKE_POINTS = (
    "journaled",
    "check",
    "check:approval",
    "sending",
    "before-send",
    "after-answer",
    "settled",
)
BIG_PAYMENT = 1_000_000


@dataclass(frozen=True)
class Grant:
    """One lease: its payment (by index), currency (None: its payment's), cap, whether
    exact, and how it was made."""

    target: int
    currency: str | None
    cap: int
    exact: bool
    how: str


@dataclass(frozen=True)
class Act:
    """One action: its lease (by index), its amount (or its lease's cap), its currency (None:
    its lease's; `payment`: its payment's), its payment (None: its lease's as stored), a
    revocation of its lease at a step of its send path, and whether its worker dies there."""

    lease: int
    amount: int | None
    currency: str | None
    target: int | None
    revoke_at: str | None
    dies: bool


approval_stories = st.integers(1, 4).flatmap(
    lambda n: st.tuples(
        st.lists(
            st.builds(
                Grant,
                target=st.integers(0, len(PAYMENTS) - 1),
                currency=st.sampled_from((None,) * 9 + CURRENCIES),
                cap=st.integers(500, 4_000),
                exact=st.booleans(),
                how=st.sampled_from(("valid",) * 2 * len(GRANTS) + GRANTS),
            ),
            min_size=n,
            max_size=n,
        ),
        st.lists(
            st.builds(
                Act,
                lease=st.integers(0, n - 1),
                amount=st.none() | st.integers(100, 2_000),
                currency=st.sampled_from((None,) * 8 + ("payment",) * 4 + CURRENCIES),
                target=st.sampled_from((None,) * 12 + tuple(range(len(PAYMENTS)))),
                revoke_at=st.sampled_from((None,) * 2 * len(REVOKE_POINTS) + REVOKE_POINTS),
                dies=st.booleans(),
            ),
            min_size=1,
            max_size=6,
        ),
    )
)


def grant_currency(grant: Grant) -> str:
    """The currency `grant` is signed in: its own, or its payment's."""
    return grant.currency or PAYMENTS[grant.target]


def _store_lease(world: World, grant: Grant, pis: list[str]) -> Lease:
    """Write `grant`'s lease to the store as `grant.how` says: signed, forged or altered."""
    pi = pis[grant.target]
    now = world.clock()
    cap, amount = (None, grant.cap) if grant.exact else (grant.cap, None)
    signer = MALLORY if grant.how == "mallory" else APPROVER
    currency = grant_currency(grant)
    lease = signer.grant(
        kind="refund",
        target=pi,
        cap=cap,
        amount=amount,
        currency=currency,
        expires_at=now + 3600,
        now=now,
    )
    other = CURRENCIES[(CURRENCIES.index(currency) + 1) % len(CURRENCIES)]
    changes: dict[str, dict[str, Any]] = {
        "valid": {},
        "mallory": {},
        "unsigned": {"key_id": None, "signature": None},
        "altered-cap": {"cap": grant.cap + 1_000, "exact": False},
        "altered-currency": {"currency": other},
        "altered-target": {"target": pis[(grant.target + 1) % len(pis)]},
        "altered-exact": {"exact": not grant.exact},
    }
    return world.store.grant_lease(replace(lease, **changes[grant.how]))


@PROPERTY_SETTINGS
@given(story=approval_stories, sqlite=st.booleans())
@example(
    ([Grant(0, "eur", 2_000, False, "valid")], [Act(0, 1_000, "payment", None, None, False)]), False
)
@example(
    ([Grant(1, None, 2_000, True, "valid")], [Act(0, None, None, None, "check:approval", False)]),
    True,
)
@example(
    ([Grant(2, None, 2_000, False, "altered-cap")], [Act(0, 2_500, None, None, None, False)]), False
)
def test_only_valid_grants_pay_in_their_currency_within_their_cap_and_revocation_holds(
    story: tuple[list[Grant], list[Act]], sqlite: bool
) -> None:
    """Actions on payments in USD, EUR and JPY under leases signed by the gate's approver,
    forged (unsigned, an untrusted key) or altered after signing, some exact, in their
    lease's currency or another, some revoked at a step of an action's send path (its worker
    dying there or not): every refund at Stripe was made under a lease its approver signed
    as stored, not revoked before that action's commit 2, in its currency and on its target;
    no lease pays past its cap, an exact one pays its amount once, no action pays twice,
    every report says what Stripe holds, the outcomes are what one action after the other
    under the rules gives, and verify is clean exactly when no forged lease was stored."""
    grants, acts = story
    with tempfile.TemporaryDirectory() as tmp:
        world = World(
            (lambda clock: SQLiteStore(Path(tmp) / "journal.db", clock=clock)) if sqlite else None
        )
        try:
            _play_approvals(world, grants, acts)
        finally:
            world.store.close()


def _play_approvals(world: World, grants: list[Grant], acts: list[Act]) -> None:
    """Store the grants, run the actions one after the other (each recovered at once when
    its worker dies), and hold what Stripe then holds to the invariants."""
    pis = [world.payments.create_payment(BIG_PAYMENT, currency=c).id for c in PAYMENTS]
    leases = [_store_lease(world, g, pis) for g in grants]
    valid = [g.how == "valid" for g in grants]
    # The model: what each lease has left, and whether it is revoked.
    left = [g.cap for g in grants]
    revoked = [False] * len(grants)
    intents: list[Intent] = []
    reported: dict[str, list[Outcome]] = {}
    sending_at_revocation: dict[int, set[str]] = {}
    expected: dict[str, bool] = {}

    def revoker(act: Act, revocation: list[bool]) -> dict[str, Hook]:
        """The hook that, at the first event of `act`'s send path at `act.revoke_at`,
        revokes its lease (noting it in `revocation`) unless it already was, and kills the
        worker there if `act.dies`."""
        if act.revoke_at is None:
            return {}
        kind, _, name = act.revoke_at.partition(":")
        reached: list[bool] = []
        lease = leases[act.lease]

        def hook(data: Mapping[str, Any]) -> None:
            if reached or (name and data.get("name") != name):
                return
            reached.append(True)
            if act.lease not in sending_at_revocation:
                revocation.append(True)
                sending_at_revocation[act.lease] = {
                    a.action_id
                    for a in intents
                    if a.lease_id == lease.id
                    and any(r.record == "sending" for r in world.store.history(a.action_id))
                }
                world.store.revoke_lease(lease.id, "support")
            if act.dies:
                raise Crash(act.revoke_at)

        return {kind: hook}

    for i, act in enumerate(acts):
        lease, grant = leases[act.lease], grants[act.lease]
        pi = lease.target if act.target is None else pis[act.target]
        intent = Intent(
            new_action_id(),
            "refund",
            pi,
            grant.cap if act.amount is None else act.amount,
            lease.id,
            refunds_fingerprint(world.payments.get_payment(pi).refunds),
            metadata={"case": World.case},
            currency={None: lease_currency(lease), "payment": PAYMENTS[pis.index(pi)]}.get(
                act.currency, act.currency
            ),
        )
        intents.append(intent)
        revocation: list[bool] = []
        owner = gone_owner(f"worker-{i}") if act.dies else Owner.current(f"worker-{i}")
        gate = world.gate(owner, hooks=revoker(act, revocation))
        try:
            reported[intent.action_id] = [gate.submit(intent)]
        except Crash:
            reported[intent.action_id] = []
            world.decide_again([intent])
        for _, outs in run_recoverers(world, ()):
            for o in outs:
                reported.setdefault(o.action_id, []).append(o)

        # What the rules give, one action after the other: a valid lease in the action's
        # and its payment's currency, on its payment, not revoked before its commit 2,
        # with the amount left (an exact one: its amount, unused). A revocation after
        # commit 2 cannot stop the send that goes out; a worker that dies there before its
        # create is resent only after the checks run again, and they refuse. (A first
        # attempt is journaled with `sending` in one commit, so a worker that dies at its
        # `journaled` dies after that commit, before its create.)
        marked = intent.action_id in sending_at_revocation.get(act.lease, set())
        unsent = act.dies and act.revoke_at in ("journaled", "sending", "before-send")
        pay_currency = PAYMENTS[pis.index(pi)]
        sends = (
            valid[act.lease]
            and not revoked[act.lease]
            and (not revocation or (marked and not unsent))
            and intent.currency == grant_currency(grant) == pay_currency
            and pi == pis[grant.target]
            and intent.amount <= left[act.lease]
            and (not grant.exact or (intent.amount == grant.cap and left[act.lease] == grant.cap))
        )
        expected[intent.action_id] = sends
        if sends:
            left[act.lease] -= intent.amount
        if revocation:
            revoked[act.lease] = True

    assert world.store.pending() == []
    event(f"actions sending: {sum(expected.values())} of {len(acts)}")
    for ids in sending_at_revocation.values():
        event("a lease revoked " + ("after" if ids else "before") + " a commit 2 under it")
    by_action: dict[str, list[Refund]] = {}
    for pi in pis:
        for r in world.payments.list_refunds(pi):
            assert ACTION_METADATA_KEY in r.metadata  # nothing else refunds these payments
            by_action.setdefault(r.metadata[ACTION_METADATA_KEY], []).append(r)
    assert set(by_action) <= {i.action_id for i in intents}

    acts_by_id = {i.action_id: a for i, a in zip(intents, acts, strict=True)}
    spent = [0] * len(grants)
    paid = [0] * len(grants)
    for intent in intents:
        n = next(k for k, lease in enumerate(leases) if lease.id == intent.lease_id)
        own = by_action.get(intent.action_id, [])
        # No action pays twice, and one pays only as the rules allow.
        assert len(own) <= 1
        assert bool(own) == expected[intent.action_id], (intent, grants[n])
        state = world.store.action(intent.action_id)
        assert state is not None and state.settlement is not None
        # The submit's report, any recovery's, and the store's record (a worker that died
        # after commit 3 reported nothing).
        outcomes = [o for o in reported[intent.action_id] if o.settled]
        assert outcomes or (acts_by_id[intent.action_id].dies)
        for o in [*outcomes, Outcome.from_state(state)]:
            if own:
                assert (o.status, o.external_id, o.amount) in (
                    ("sent", own[0].id, intent.amount),
                    ("adopted", own[0].id, intent.amount),
                )
            else:
                assert o.status in ("refused", "failed") and o.external_id is None
        if not own:
            continue
        [refund] = own
        stored = world.store.lease(intent.lease_id)
        assert stored is not None
        # Made under a lease its approver signed, exactly as stored ...
        assert valid[n] and APPROVERS.problem(stored) is None
        # ... not revoked before this action was marked sending ...
        if stored.revoked:
            assert intent.action_id in sending_at_revocation[n]
        # ... in the action's currency, on the lease's payment, for the action's amount.
        assert refund.currency == intent.currency == lease_currency(stored)
        assert refund.payment_intent == intent.target == stored.target == pis[grants[n].target]
        assert refund.amount == intent.amount
        spent[n] += refund.amount
        paid[n] += 1

    for n, (grant, lease) in enumerate(zip(grants, leases, strict=True)):
        after = world.store.lease(lease.id)
        assert after is not None and dict(after.reservations) == {}
        assert after.spent == spent[n] <= grant.cap
        if grant.exact:
            assert (paid[n], spent[n]) in ((0, 0), (1, grant.cap))

    result = verify(world.store, world.payments, approvers=APPROVERS)
    forged = sorted(lease.id for lease, ok in zip(leases, valid, strict=True) if not ok)
    assert result.ok == (not forged), result.problems
    # Each forged lease is reported, and nothing else (none of them paid).
    assert len(result.problems) == len(forged)
    for lease_id, problem in zip(forged, sorted(result.problems), strict=True):
        assert lease_id in problem


# -- siblings: one decision made several times at once ------------------------------------

# Where a sibling starts inside the one before it (None: after it returns), and where one
# dies (None: it does not).
SIBLING_NESTS = (None, "journaled", "turn-wait", "claim", "check", "sending", "before-send")
SIBLING_CRASHES = (
    None,
    "journaled",
    "turn-wait",
    "check",
    "sending",
    "before-send",
    "after-answer",
)
# A first attempt's `journaled` comes after its one commit, with `sending`.
AFTER_COMMIT_2 = ("journaled", "sending", "before-send")


@PROPERTY_SETTINGS
@given(
    plan=st.lists(
        st.tuples(
            st.sampled_from(SIBLING_NESTS),
            st.sampled_from(SIBLING_CRASHES),
            st.sampled_from(("live", "gone")),
        ),
        min_size=2,
        max_size=8,
    ),
)
@example([(None, None, "live"), (None, None, "live")])
@example([("before-send", None, "live"), (None, None, "live")])
@example([("check", None, "gone"), (None, None, "live")])
@example([("sending", "after-answer", "live"), ("turn-wait", None, "live"), (None, None, "gone")])
def test_siblings_end_as_they_would_one_after_the_other(
    plan: list[tuple[str | None, str | None, str]],
) -> None:
    """2 to 8 copies of one decision (one fingerprint, a cap above their sum), each started
    inside the one before at a chosen step, some dying at a chosen step (a worker on this
    host that is gone, or one that is not), then one recovery: as one after the other,
    exactly one refund, every other copy refused because the refunds changed, the cap
    never spent past it, the store verifies."""
    world = World()
    lease = world.grant((len(plan) + 1) * AMOUNT)
    intents = [world.decide(AMOUNT, lease.id) for _ in plan]

    def run(i: int, inside_a_send: bool) -> None:
        nest, crash_at, kind = plan[i]
        owner = Owner.current(f"sibling-{i}") if kind == "live" else gone_owner(f"sibling-{i}")
        if inside_a_send and crash_at != "journaled":
            # Started while an earlier one is sending: waiting for its turn here, on the
            # shared fake clock, would pause that sender past its claim and grace, which is
            # the paused worker of docs/design.md's Limits, not a race of siblings. It stops
            # at its turn-wait instead and the recovery runs it.
            crash_at = "turn-wait"
        started = False

        def start_next() -> None:
            nonlocal started
            started = True
            run(i + 1, inside_a_send or nest in AFTER_COMMIT_2)

        last = i == len(plan) - 1
        hooks = once(nest, start_next) if nest is not None and not last else None
        with contextlib.suppress(Crash):
            world.gate(owner, crash_at=crash_at, hooks=hooks).submit(intents[i])
        if not last and not started:
            run(i + 1, inside_a_send)

    run(0, False)
    world.decide_again(intents)
    run_recoverers(world, ())

    assert world.store.pending() == []
    refunds = world.agent_refunds()
    assert len(refunds) == 1 and refunds[0].amount == AMOUNT
    outcomes = [Outcome.from_state(s) for i in intents if (s := world.store.action(i.action_id))]
    assert len(outcomes) == len(plan)
    [landed] = [o for o in outcomes if o.status in ("sent", "adopted")]
    assert landed.external_id == refunds[0].id
    assert {o.reason for o in outcomes if o is not landed} <= {REASON_WORLD_CHANGED}
    assert sum(o.status == "refused" for o in outcomes) == len(plan) - 1
    after = world.store.lease(lease.id)
    assert after is not None and after.spent == AMOUNT and dict(after.reservations) == {}
    result = verify(world.store, world.payments)
    assert result.ok, result.problems


# -- tampering with a SQLite store --------------------------------------------------------

HISTORY_LENGTH = 5
RECEIPT_SIGNING_KEY = SigningKey.generate()


@dataclass(frozen=True)
class History:
    """An honest SQLite store file whose receipts are each numbered into the log as they
    settle, and the payments it names; `keys` trusts the key that signed them (None:
    unsigned)."""

    path: Path
    payments: InProcessPayments
    keys: KeyList | None


def _honest_history(directory: Path, signing_key: SigningKey | None) -> History:
    world = World(lambda clock: SQLiteStore(directory / "journal.db", clock=clock))
    lease = world.grant(PAYMENT)
    for _ in range(HISTORY_LENGTH):
        world.gate(Owner.current("honest"), signing_key=signing_key, log_every=1).submit(
            world.decide(1_000, lease.id)
        )
    keys = None
    if signing_key is not None:
        keys = KeyList()
        keys.add(signing_key.public)
    result = verify(world.store, world.payments, keys=keys)
    assert result.ok and result.log_size == HISTORY_LENGTH, result.problems
    world.store.close()
    return History(directory / "journal.db", world.payments, keys)


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, History]:
    """One honest unsigned and one honest signed history, built once for the module."""
    return {
        "unsigned": _honest_history(tmp_path_factory.mktemp("unsigned"), None),
        "signed": _honest_history(tmp_path_factory.mktemp("signed"), RECEIPT_SIGNING_KEY),
    }


def _edit(conn: sqlite3.Connection, seq: int, rehash: bool) -> None:
    (body_text,) = conn.execute("SELECT body FROM receipts WHERE seq=?", (seq,)).fetchone()
    body = json.loads(body_text)
    body["amount"] += 1
    text = canonical_json(body)
    conn.execute("UPDATE receipts SET body=? WHERE seq=?", (text, seq))
    if rehash:
        digest = leaf_hash(text.encode()).hex()
        conn.execute("UPDATE receipts SET hash=? WHERE seq=?", (digest, seq))


def _swap_contents(conn: sqlite3.Connection, a: int, b: int) -> None:
    cols = "action_id, body, prev_hash, hash, signature"
    row_a = conn.execute(f"SELECT {cols} FROM receipts WHERE seq=?", (a,)).fetchone()
    row_b = conn.execute(f"SELECT {cols} FROM receipts WHERE seq=?", (b,)).fetchone()
    update = "UPDATE receipts SET action_id=?, body=?, prev_hash=?, hash=?, signature=? WHERE seq=?"
    conn.execute(update, (*row_b, a))
    conn.execute(update, (*row_a, b))


def _swap_order(conn: sqlite3.Connection, a: int, b: int) -> None:
    conn.execute("UPDATE receipts SET seq=-1 WHERE seq=?", (a,))
    conn.execute("UPDATE receipts SET seq=? WHERE seq=?", (a, b))
    conn.execute("UPDATE receipts SET seq=? WHERE seq=-1", (b,))


@dataclass(frozen=True)
class Tamper:
    """One edit of the receipts table: what, on which rows."""

    kind: str
    a: int
    b: int


tampers = st.one_of(
    st.builds(Tamper, st.just("edit"), st.integers(1, HISTORY_LENGTH), st.just(0)),
    # Even the last receipt, re-hashed and unsigned: the log's head signs its leaf hash.
    st.builds(Tamper, st.just("edit-rehash"), st.integers(1, HISTORY_LENGTH), st.just(0)),
    st.builds(Tamper, st.just("delete"), st.integers(2, HISTORY_LENGTH - 1), st.just(0)),
    st.builds(Tamper, st.just("renumber"), st.integers(1, HISTORY_LENGTH), st.just(0)),
    st.tuples(st.integers(1, HISTORY_LENGTH), st.integers(1, HISTORY_LENGTH))
    .filter(lambda ab: ab[0] != ab[1])
    .flatmap(
        lambda ab: st.builds(
            Tamper, st.sampled_from(("swap-contents", "swap-order")), *map(st.just, ab)
        )
    ),
)


@settings(max_examples=60, deadline=None, database=None)
@given(tamper=tampers, signed=st.booleans())
def test_verify_fails_on_any_edited_dropped_or_reordered_receipt(
    histories: dict[str, History], tamper: Tamper, signed: bool
) -> None:
    """Editing, dropping from the middle or reordering receipts in the SQLite file fails
    verify, signed or not: each receipt's hash and id, and the log's heads over them."""
    history = histories["signed" if signed else "unsigned"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal.db"
        shutil.copyfile(history.path, path)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        if tamper.kind in ("edit", "edit-rehash"):
            _edit(conn, tamper.a, rehash=tamper.kind == "edit-rehash")
        elif tamper.kind == "delete":
            conn.execute("DELETE FROM receipts WHERE seq=?", (tamper.a,))
        elif tamper.kind == "renumber":
            conn.execute("UPDATE receipts SET seq=seq+? WHERE seq=?", (HISTORY_LENGTH, tamper.a))
        elif tamper.kind == "swap-contents":
            _swap_contents(conn, tamper.a, tamper.b)
        else:
            _swap_order(conn, tamper.a, tamper.b)
        conn.execute("COMMIT")
        conn.close()

        store = SQLiteStore(path)
        try:
            chain_only = verify(store, keys=history.keys)
            with_stripe = verify(store, history.payments, keys=history.keys)
        finally:
            store.close()
    assert not chain_only.ok
    assert not with_stripe.ok


def test_signed_tail_edit_with_a_recomputed_hash_fails_verify(
    histories: dict[str, History],
) -> None:
    """With signing, the last receipt edited and re-hashed is caught by its signature
    alone, besides the log's head over it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal.db"
        shutil.copyfile(histories["signed"].path, path)
        conn = sqlite3.connect(path, isolation_level=None)
        _edit(conn, HISTORY_LENGTH, rehash=True)
        conn.close()
        store = SQLiteStore(path)
        try:
            last = list(store.receipts())[-1]
            result = verify(store, keys=histories["signed"].keys)
        finally:
            store.close()
    assert result.problems == [
        f"receipt {HISTORY_LENGTH} ({last.action_id}): its signature does not match its body "
        f"under key {RECEIPT_SIGNING_KEY.key_id} (altered, or signed by someone else)",
        f"tree head of size {HISTORY_LENGTH}: the log's first {HISTORY_LENGTH} receipts no "
        "longer hash to its root (a receipt under it was removed or rewritten after it was "
        "signed)",
    ]
