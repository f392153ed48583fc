"""One contract for every store: memory, SQLite and PostgreSQL pass the same tests.

The rules live once (`RuleStore`); these tests hold each backend to them, so that no
backend can drift: the store's calls one by one (claims, fencing by epoch, the grace on
a `sending` claim, leases, receipts, scans), the gate's truth-table rows through the
shared rig, and a property test that runs random histories against each backend and the
in-memory reference side by side. Here on memory and SQLite; on PostgreSQL, and as a race
of real processes, in `tests/e2e/test_store_contract_e2e.py`.

Tests that move time use the fake clock of `tests/helpers/gate_rig.py`. On PostgreSQL
the store's clock is the database's; the clock seam (`clock_source=`) puts the fake
clock in its place, read at the same point (after the write lock), so these tests
exercise PostgreSQL's rows, locks and transactions under the same rules. What the
database clock itself brings is tested in `tests/e2e/test_store_postgres.py`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock import (
    REASON_WORLD_CHANGED,
    ActionError,
    Check,
    Intent,
    Lease,
    LeaseError,
    MemoryStore,
    Owner,
    PostgresStore,
    Settlement,
    SigningKey,
    SQLiteStore,
    Store,
    StripeRefund,
    new_action_id,
    open_store,
    refunds_fingerprint,
    verify,
)
from interlock._core.merkle import leaf_hash
from interlock.testing import InProcessPayments
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import (
    AMOUNT,
    PAYMENT,
    TIMING,
    Clock,
    Crash,
    GateWorld,
    gone_owner,
    remote_owner,
)
from tests.helpers.siblings import submit_siblings

# PostgreSQL needs a server: tests/e2e/test_store_contract_e2e.py runs these tests on it.
BACKENDS = ("memory", "sqlite")
TTL = 6.0
GRACE = 2.0


@dataclass
class Backend:
    """A store under test: handles on one store, on a given clock or on the store's own."""

    name: str
    # Where processes find it: a SQLite path or a PostgreSQL URL (None for memory).
    location: str | None
    _make: Callable[[Callable[[], float] | None], Store]
    opened: list[Store] = field(default_factory=list)
    # One clock and one handle for all of a property test's examples.
    clock: Clock = field(default_factory=Clock)
    _on_clock: Store | None = None

    def on_clock(self) -> Store:
        """The one handle on `clock`, opened at the first call."""
        if self._on_clock is None:
            self._on_clock = self.make(self.clock)
        return self._on_clock

    def make(self, clock: Callable[[], float] | None = None) -> Store:
        """A handle on this backend's store, on `clock` (None: the store's own clock)."""
        store = self._make(clock)
        self.opened.append(store)
        return store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each store kind of this tier in turn; every handle it opened is closed afterwards."""
    yield from open_backend(request, tmp_path)


def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backend `request.param` names (PostgreSQL through the session's server)."""
    name = request.param
    if name == "memory":
        shared: list[MemoryStore] = []

        def memory(clock: Callable[[], float] | None) -> Store:
            # One store in one process: every handle is the same, on the first clock given.
            if not shared:
                shared.append(MemoryStore(clock=clock or time.time))
            return shared[0]

        b = Backend(name, None, memory)
    elif name == "sqlite":
        path = tmp_path / "journal.sqlite3"
        b = Backend(
            name,
            str(path),
            lambda clock: SQLiteStore(path, clock=clock or time.time),
        )
    else:
        dsn: str = request.getfixturevalue("pg_dsn")
        schema: str = request.getfixturevalue("pg_schema")
        b = Backend(
            name,
            f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}",
            lambda clock: PostgresStore(dsn, schema=schema, clock_source=clock or "database"),
        )
    yield b
    for store in b.opened:
        store.close()


def _lease(store: Store, now: float, cap: int = 2_000, target: str | None = None) -> Lease:
    # A payment of its own unless named: actions on one target take turns (see the turn
    # tests below).
    target = target or f"pi_contract_{uuid.uuid4().hex[:8]}"
    return store.grant_lease(
        APPROVER.sign(
            Lease(
                id=f"lease_{uuid.uuid4().hex[:10]}",
                kind="refund",
                target=target,
                cap=cap,
                expires_at=now + 3600,
                granted_by="support",
                granted_at=now,
            )
        )
    )


def _intent(lease: Lease, amount: int = AMOUNT, created_at: float = 0.0, **meta: str) -> Intent:
    return Intent(
        new_action_id(),
        "refund",
        lease.target,
        amount,
        lease.id,
        "sha256:seen",
        metadata=meta,
        created_at=created_at,
    )


def _sent(external_id: str = "re_1", amount: int = AMOUNT) -> Settlement:
    return Settlement("sent", None, external_id, amount)


CHECKS = [Check("claim", "held", "held", True)]


# -- the store's calls, one by one -------------------------------------------------------


def test_begin_journals_the_intent_and_takes_the_claim_with_epoch_1(backend: Backend) -> None:
    """Commit 1 journals the intent and takes its claim, timed by the store's clock."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = gone_owner("w1")

    attempt = store.begin(intent, owner, TTL, GRACE)

    assert (attempt.status, attempt.epoch, attempt.now) == ("taken", 1, clock())
    state = store.action(intent.action_id)
    assert state is not None and state.intent == intent and state.settlement is None
    assert state.claim is not None
    assert (state.claim.owner, state.claim.claimed_at, state.claim.expires_at) == (
        owner,
        clock(),
        clock() + TTL,
    )
    assert [h.record for h in store.history(intent.action_id)] == ["intent", "claim"]
    assert store.pending() == [intent.action_id]


def test_a_live_claim_is_held_against_another_owner(backend: Backend) -> None:
    """A second owner meets a live claim held by a remote owner: nothing changes."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    store.begin(intent, remote_owner(), TTL, GRACE)
    clock.sleep(TTL - 0.5)

    attempt = store.take_claim(intent.action_id, remote_owner(), TTL, GRACE)

    assert attempt.status == "held" and attempt.state.attempts == 1


def test_an_expired_claim_is_taken_with_a_new_epoch(backend: Backend) -> None:
    """Once expired, another owner takes the claim; the journal names whom it took over."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    first = remote_owner("first")
    store.begin(intent, first, TTL, GRACE)
    clock.sleep(TTL)

    attempt = store.take_claim(intent.action_id, remote_owner("second"), TTL, GRACE)

    assert (attempt.status, attempt.epoch) == ("taken", 2)
    claims = [h.data for h in store.history(intent.action_id) if h.record == "claim"]
    assert claims[-1]["took_over"] == first.to_dict() and claims[-1]["early"] is False


def test_an_action_id_names_one_decision(backend: Backend) -> None:
    """The same action id with another decision is refused, and nothing is changed."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    store.begin(intent, gone_owner(), TTL, GRACE)
    other = Intent.from_dict({**intent.to_dict(), "amount": AMOUNT + 1})

    with pytest.raises(ActionError, match="different decision"):
        store.begin(other, gone_owner(), TTL, GRACE)

    state = store.action(intent.action_id)
    assert state is not None and state.intent.amount == AMOUNT and state.attempts == 1


def test_commits_2_and_3_are_fenced_on_the_epoch(backend: Backend) -> None:
    """A gate whose take was followed by another writes nothing: not `sending`, not an outcome."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = remote_owner()
    old = store.begin(intent, owner, TTL, GRACE).epoch
    clock.sleep(TTL)
    # The same identity takes again (a restarted worker id): only the epoch tells them apart.
    new = store.take_claim(intent.action_id, owner, TTL, GRACE).epoch
    assert new == old + 1

    assert store.mark_sending(intent.action_id, old, TTL + 1).status == "claim_lost"
    assert store.settle(intent.action_id, old, owner, _sent(), CHECKS, {}, None) is None
    assert store.mark_sending(intent.action_id, new, TTL + 1).status == "ok"
    receipt = store.settle(intent.action_id, new, owner, _sent(), CHECKS, {}, None)
    assert receipt is not None and receipt.body["epoch"] == new


def test_mark_sending_renews_the_claim_and_reserves_the_lease(backend: Backend) -> None:
    """Commit 2 renews the claim to at least now + ttl, marks it sending and reserves."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    intent = _intent(lease)
    epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch
    clock.sleep(2.0)

    sending = store.mark_sending(intent.action_id, epoch, 9.0)

    assert sending.status == "ok" and sending.claim is not None
    assert sending.claim.sending and sending.claim.expires_at == clock() + 9.0
    assert sending.left_s == pytest.approx(9.0)
    stored = store.lease(lease.id)
    assert stored is not None and dict(stored.reservations) == {intent.action_id: AMOUNT}


def test_an_expired_claim_cannot_mark_sending(backend: Backend) -> None:
    """A claim that expired before commit 2 sends nothing, even if nobody took it since."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch
    clock.sleep(TTL)

    assert store.mark_sending(intent.action_id, epoch, TTL).status == "claim_lost"


def test_a_sending_claim_waits_for_expiry_plus_grace(backend: Backend) -> None:
    """Nobody takes a `sending` claim before its expiry plus the grace, its own owner included."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = gone_owner()
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    expires = store.mark_sending(intent.action_id, epoch, TTL).claim
    assert expires is not None
    clock.now = expires.expires_at + GRACE - 0.01

    for taker in (owner, gone_owner(), remote_owner()):
        assert store.take_claim(intent.action_id, taker, TTL, GRACE).status == "held"
    clock.now = expires.expires_at + GRACE
    assert store.take_claim(intent.action_id, remote_owner(), TTL, GRACE).status == "taken"


def test_a_dead_owners_sending_claim_is_taken_early_only_when_its_refund_was_found(
    backend: Backend,
) -> None:
    """Same host, owner gone: taken early with `found_own`, never without it."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    epoch = store.begin(intent, gone_owner(), TTL, GRACE).epoch
    assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"

    assert store.take_claim(intent.action_id, gone_owner(), TTL, GRACE).status == "held"
    taken = store.take_claim(intent.action_id, gone_owner(), TTL, GRACE, found_own=True)
    assert taken.status == "taken"
    claims = [h.data for h in store.history(intent.action_id) if h.record == "claim"]
    assert claims[-1]["early"] is True


def test_early_takeover_is_same_host_only(backend: Backend) -> None:
    """An owner on another host is never taken over early, whatever the lookup found."""
    clock = Clock()
    store = backend.make(clock)
    for sending in (False, True):
        intent = _intent(_lease(store, clock()))
        epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch
        if sending:
            assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
        attempt = store.take_claim(intent.action_id, gone_owner(), TTL, GRACE, found_own=True)
        assert attempt.status == "held", sending


def test_a_gone_owners_claim_before_sending_is_taken_at_once(backend: Backend) -> None:
    """Same host, pid gone, never `sending`: the claim is taken before it expires."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    store.begin(intent, gone_owner(), TTL, GRACE)

    assert store.take_claim(intent.action_id, remote_owner(), TTL, GRACE).status == "taken"


def test_commit_2_sends_only_under_the_lease_the_gate_checked(backend: Backend) -> None:
    """Given the digest of the lease the gate verified, commit 2 refuses when the stored
    lease is another (a row swapped since the check), and reserves under the same one."""
    clock = Clock()
    store = backend.make(clock)
    lease = store.grant_lease(
        APPROVER.grant(
            kind="refund", target="pi_contract", cap=AMOUNT, expires_in_s=3600, now=clock()
        )
    )
    checked = lease.digest()
    intent = _intent(lease)
    epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch
    # The writer swaps the row: a bigger cap under the old signature.
    with store._write() as tx:  # type: ignore[attr-defined]
        tx.put_lease(replace(lease, cap=AMOUNT * 10), new=False)

    refused = store.mark_sending(intent.action_id, epoch, TTL, approval=checked)

    assert refused.status == "lease_refused"
    assert refused.reason is not None and "changed in the store after it was checked" in (
        refused.reason
    )
    stored = store.lease(lease.id)
    assert stored is not None and dict(stored.reservations) == {}
    with store._write() as tx:  # type: ignore[attr-defined]
        tx.put_lease(lease, new=False)
    assert store.mark_sending(intent.action_id, epoch, TTL, approval=checked).status == "ok"


def test_an_exact_lease_is_reserved_and_spent_by_one_action_of_its_amount(
    backend: Backend,
) -> None:
    """An exact lease: a second action waits for the target's turn while the first holds
    it, and is refused at commit 2 once the first spent it; another amount is refused."""
    clock = Clock()
    store = backend.make(clock)
    lease = store.grant_lease(
        APPROVER.grant(
            kind="refund", target="pi_contract", amount=AMOUNT, expires_in_s=3600, now=clock()
        )
    )
    a, b, c = _intent(lease), _intent(lease), _intent(lease, amount=AMOUNT - 1)
    ea = store.begin(a, remote_owner(), TTL, GRACE).epoch
    assert store.mark_sending(a.action_id, ea, TTL).status == "ok"
    while_held = [store.begin(i, remote_owner(), TTL, GRACE).status for i in (b, c)]
    store.settle(a.action_id, ea, remote_owner(), _sent(), CHECKS, {}, None)
    eb = store.take_claim(b.action_id, remote_owner(), TTL, GRACE).epoch
    after_spent = store.mark_sending(b.action_id, eb, TTL)
    store.release(b.action_id, eb)
    ec = store.take_claim(c.action_id, remote_owner(), TTL, GRACE).epoch
    other = store.mark_sending(c.action_id, ec, TTL)

    assert while_held == ["busy", "busy"]
    assert after_spent.status == other.status == "lease_refused"
    assert after_spent.reason is not None and "already used" in after_spent.reason
    assert other.reason == f"approval is for exactly {AMOUNT}, not {AMOUNT - 1}"
    stored = store.lease(lease.id)
    assert stored is not None and (stored.spent, dict(stored.reservations)) == (AMOUNT, {})


def test_a_signed_lease_reads_back_as_signed(backend: Backend) -> None:
    """Every backend keeps a signed lease's authorized fields and signature exactly."""
    clock = Clock()
    store = backend.make(clock)
    lease = store.grant_lease(
        APPROVER.grant(
            kind="refund", target="pi_contract", amount=AMOUNT, currency="usd",
            expires_in_s=3600, now=clock(),
        )
    )  # fmt: skip

    stored = store.lease(lease.id)

    assert stored == lease
    assert stored is not None and APPROVERS.problem(stored) is None


def test_two_actions_on_one_lease_cannot_reserve_past_its_cap(backend: Backend) -> None:
    """The second reservation that would pass the cap is refused at commit 2: here the first
    action's send is still unsettled (its reservation kept) when the second takes the
    payment's turn after the first claim ran out."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock(), cap=3_000)
    a, b = _intent(lease), _intent(lease)
    ea = store.begin(a, remote_owner(), TTL, GRACE).epoch
    sending = store.mark_sending(a.action_id, ea, TTL)
    assert sending.status == "ok" and sending.claim is not None
    clock.now = sending.claim.expires_at + GRACE
    eb = store.begin(b, remote_owner(), TTL, GRACE).epoch

    refused = store.mark_sending(b.action_id, eb, TTL)

    assert refused.status == "lease_refused" and refused.reason
    stored = store.lease(lease.id)
    assert stored is not None and dict(stored.reservations) == {a.action_id: AMOUNT}


def _siblings(store: Store, clock: Clock, owner: Owner) -> tuple[Intent, Intent, int]:
    """Two actions on one payment under one lease (the same decision twice); the first has
    taken its claim, and with it the payment's turn. Its epoch is returned."""
    lease = _lease(store, clock(), cap=3 * AMOUNT)
    a, b = _intent(lease), _intent(lease)
    attempt = store.begin(a, owner, TTL, GRACE)
    assert attempt.status == "taken"
    return a, b, attempt.epoch


def test_a_second_action_on_a_target_whose_turn_is_live_is_busy(backend: Backend) -> None:
    """While one action on a payment holds its turn, a sibling (another owner, or the same
    owner as two threads of one gate are) gets `busy` naming the holder: its intent is
    journaled without a claim, and trying again changes nothing."""
    clock = Clock()
    store = backend.make(clock)
    this_process = Owner.current("one-gate")
    for owner, sibling_owner in ((remote_owner(), remote_owner()), (this_process,) * 2):
        a, b, _ = _siblings(store, clock, owner)

        busy = store.begin(b, sibling_owner, TTL, GRACE)

        assert busy.status == "busy" and busy.epoch == 0
        assert busy.holder is not None and busy.holder.intent.action_id == a.action_id
        assert busy.holder.claim is not None and busy.holder.claim.expires_at == clock() + TTL
        state = store.action(b.action_id)
        assert state is not None and state.claim is None and state.attempts == 0
        assert [h.record for h in store.history(b.action_id)] == ["intent"]
        assert store.take_claim(b.action_id, sibling_owner, TTL, GRACE).status == "busy"
        assert b.action_id in store.pending()


def test_the_turn_frees_when_its_holder_settles_releases_or_expires(backend: Backend) -> None:
    """The turn needs no clearing: a sibling takes it once the holder settled, released its
    claim, let it expire, or (same host) died before `sending`; a `sending` holder keeps it
    until its expiry plus the grace."""
    clock = Clock()
    store = backend.make(clock)
    owner = remote_owner()

    a, b, epoch = _siblings(store, clock, owner)
    assert store.settle(a.action_id, epoch, owner, _sent(), CHECKS, {}, None) is not None
    assert store.begin(b, owner, TTL, GRACE).status == "taken"

    a, b, epoch = _siblings(store, clock, owner)
    store.release(a.action_id, epoch)
    assert store.begin(b, owner, TTL, GRACE).status == "taken"

    a, b, epoch = _siblings(store, clock, owner)
    clock.sleep(TTL - 0.01)
    assert store.begin(b, owner, TTL, GRACE).status == "busy"
    clock.sleep(0.01)
    assert store.take_claim(b.action_id, owner, TTL, GRACE).status == "taken"

    a, b, epoch = _siblings(store, clock, gone_owner())
    assert store.begin(b, owner, TTL, GRACE).status == "taken"

    a, b, epoch = _siblings(store, clock, gone_owner())
    sending = store.mark_sending(a.action_id, epoch, TTL)
    assert sending.status == "ok" and sending.claim is not None
    clock.now = sending.claim.expires_at + GRACE - 0.01
    assert store.begin(b, owner, TTL, GRACE).status == "busy"
    clock.now = sending.claim.expires_at + GRACE
    taken = store.take_claim(b.action_id, owner, TTL, GRACE)
    assert taken.status == "taken" and taken.epoch == 1


def test_the_holder_takes_its_own_claim_again_and_keeps_the_turn(backend: Backend) -> None:
    """An action's own recovery is not kept off by its own turn; a sibling that took the
    turn meanwhile keeps the first one off until it is done."""
    clock = Clock()
    store = backend.make(clock)
    owner = remote_owner()
    a, b, _ = _siblings(store, clock, owner)
    clock.sleep(TTL)
    assert store.take_claim(a.action_id, owner, TTL, GRACE).status == "taken"
    assert store.begin(b, owner, TTL, GRACE).status == "busy"
    clock.sleep(TTL)
    eb = store.take_claim(b.action_id, owner, TTL, GRACE).epoch
    assert eb == 1

    busy = store.take_claim(a.action_id, owner, TTL, GRACE)

    assert busy.status == "busy" and busy.holder is not None
    assert busy.holder.intent.action_id == b.action_id


def test_commit_2_is_fenced_on_the_turn(backend: Backend) -> None:
    """A holder whose turn a sibling took (its owner looked dead) sends nothing: `sending`
    is refused as a lost claim even though its own claim is live; the sibling sends."""
    clock = Clock()
    store = backend.make(clock)
    a, b, ea = _siblings(store, clock, gone_owner())
    eb = store.begin(b, remote_owner(), TTL, GRACE).epoch

    assert store.mark_sending(a.action_id, ea, TTL).status == "claim_lost"
    assert store.mark_sending(b.action_id, eb, TTL).status == "ok"
    state = store.action(a.action_id)
    assert state is not None and state.claim is not None and not state.claim.sending


def test_begin_sending_journals_claims_and_marks_sending_in_one_commit(backend: Backend) -> None:
    """A first attempt's one commit: the intent, its claim (epoch 1, `sending`), the turn
    and the reservation together, after a look that writes nothing and reads the lease."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    intent = _intent(lease)
    owner = remote_owner()
    before = store.commits

    look = store.first_look(intent, GRACE)
    assert (look.free, look.turn, look.lease) == (True, None, lease)
    assert store.commits == before and store.history(intent.action_id) == []
    first = store.begin_sending(intent, owner, TTL, look.turn, approval=lease.digest())

    assert first.status == "ok" and first.left_s == TTL and store.commits == before + 1
    state = store.action(intent.action_id)
    assert state is not None and state.intent == intent and state.claim is not None
    assert (state.claim.owner, state.claim.epoch, state.claim.sending) == (owner, 1, True)
    assert state.claim.expires_at == clock() + TTL and first.state == state
    assert [h.record for h in store.history(intent.action_id)] == ["intent", "claim", "sending"]
    after = store.lease(lease.id)
    assert after is not None and dict(after.reservations) == {intent.action_id: AMOUNT}
    # It holds the target's turn: a sibling's look is not free, and its begin is busy.
    sibling = _intent(lease)
    assert store.first_look(sibling, GRACE).free is False
    assert store.begin(sibling, remote_owner(), TTL, GRACE).status == "busy"
    assert store.settle(intent.action_id, 1, owner, _sent(), CHECKS, {}, None) is not None


def test_begin_sending_writes_nothing_unless_the_turn_is_as_it_was_looked_at(
    backend: Backend,
) -> None:
    """The one commit is fenced on the turn the look saw, on the action being new and on
    the lease checked: each refusal writes nothing (no intent, claim or reservation)."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock(), cap=3 * AMOUNT)
    a, b = _intent(lease), _intent(lease)
    look = store.first_look(b, GRACE)
    # A sibling takes the turn and settles after b's look: the turn is free again, but
    # b's read may have come before that sibling's send.
    epoch = store.begin(a, remote_owner(), TTL, GRACE).epoch
    store.mark_sending(a.action_id, epoch, TTL)
    store.settle(a.action_id, epoch, remote_owner(), _sent(), CHECKS, {}, None)
    assert store.first_look(b, GRACE).free is True

    moved = store.begin_sending(b, remote_owner(), TTL, look.turn, approval=lease.digest())

    assert moved.status == "turn_moved" and store.action(b.action_id) is None
    # The turn as seen now: b commits.
    seen = store.first_look(b, GRACE).turn
    assert seen == (a.action_id, epoch)
    # The action journaled since (the same decision submitted twice at once).
    store.begin(b, remote_owner(), TTL, GRACE)
    again = store.begin_sending(b, remote_owner(), TTL, seen, approval=lease.digest())
    assert again.status == "journaled"
    assert [h.record for h in store.history(b.action_id)] == ["intent", "claim"]
    # Under a lease that changed since its check, or is revoked: refused, nothing written.
    c = _intent(lease)
    stale_digest = lease.digest()
    store.revoke_lease(lease.id, "support")
    now_seen = store.first_look(c, GRACE).turn
    refused = store.begin_sending(c, remote_owner(), TTL, now_seen, approval=stale_digest)
    assert refused.status == "lease_refused" and refused.reason is not None
    assert "revoked" in refused.reason and store.action(c.action_id) is None
    after = store.lease(lease.id)
    assert after is not None and c.action_id not in after.reservations


def test_a_first_look_is_not_free_while_a_live_claim_holds_the_turn(backend: Backend) -> None:
    """A live claim on the target keeps the look off the two-commit path, a `sending` one
    until its expiry plus the grace; a holder on this host that is gone before `sending`
    keeps nobody off."""
    clock = Clock()
    store = backend.make(clock)
    a, b, epoch = _siblings(store, clock, remote_owner())
    assert store.first_look(b, GRACE).free is False
    store.mark_sending(a.action_id, epoch, TTL)
    clock.now += TTL + GRACE - 0.5
    assert store.first_look(b, GRACE).free is False
    clock.now += 0.5
    assert store.first_look(b, GRACE) == store.first_look(b, GRACE)
    assert store.first_look(b, GRACE).free is True
    c, d, _ = _siblings(store, clock, gone_owner())
    assert store.first_look(d, GRACE).free is True
    assert store.first_look(c, GRACE).free is False, "its own action is journaled"


@pytest.mark.parametrize("n", [2, 8])
def test_sibling_submits_on_threads_refund_once(backend: Backend, n: int) -> None:
    """`n` identical decisions (one fingerprint, a lease whose cap covers them all) submitted
    at once on threads through one gate, as a framework runs one model turn's tool calls:
    one refund; every other sibling reads again after it landed and is refused."""
    store = backend.make()
    payments = InProcessPayments()
    pi = payments.create_payment(PAYMENT).id
    lease = _lease(store, time.time(), cap=(n + 1) * AMOUNT, target=pi)
    seen = refunds_fingerprint(payments.list_refunds(pi))
    intents = [Intent(new_action_id(), "refund", pi, AMOUNT, lease.id, seen) for _ in range(n)]

    outcomes = submit_siblings(store, StripeRefund(payments), intents, TIMING)

    assert sorted(o.status for o in outcomes) == ["refused"] * (n - 1) + ["sent"]
    assert {o.reason for o in outcomes if o.status == "refused"} == {REASON_WORLD_CHANGED}
    assert len(payments.list_refunds(pi)) == 1
    assert verify(store, payments).ok


def test_settle_writes_outcome_receipt_and_spend_together(backend: Backend) -> None:
    """Commit 3: the outcome, a receipt, the spend; the reservation is released. Receipt
    ids are unique and grow (PostgreSQL's sequence may leave gaps); a receipt links to
    none before it: its place is the log's, given after the commit."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    owner = remote_owner()
    receipts = []
    for status in ("sent", "refused"):
        intent = _intent(lease, amount=500)
        epoch = store.begin(intent, owner, TTL, GRACE).epoch
        assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
        clock.sleep(0.25)
        verdict = _sent(amount=500) if status == "sent" else Settlement("refused", "changed")
        receipt = store.settle(intent.action_id, epoch, owner, verdict, CHECKS, {"x": 1}, None)
        assert receipt is not None
        receipts.append(receipt)
        state = store.action(intent.action_id)
        assert state is not None and state.settlement is not None
        assert (state.settlement.status, state.settlement.at) == (status, clock())
        assert state.receipt == receipt and state.claim is not None
        assert not state.claim.sending and not state.claim.live(clock())

    assert receipts[0].seq < receipts[1].seq
    for r in receipts:
        body = json.loads(r.body_text)
        assert (body["v"], body["signed"], body["key_id"], r.signature) == (2, False, None, None)
        assert "seq" not in body and "prev_hash" not in body and r.prev_hash == ""
        assert r.hash == leaf_hash(r.body_text.encode()).hex()
        assert (body["x"], body["action_id"]) == (1, r.action_id)
    assert list(store.receipts()) == receipts
    assert store.unlogged_count() == 2 and list(store.logged()) == []
    stored = store.lease(lease.id)
    assert stored is not None and (stored.spent, dict(stored.reservations)) == (500, {})
    assert store.pending() == []
    assert sorted(s.action_id for s in store.settled()) == sorted(r.action_id for r in receipts)
    result = verify(store)
    assert result.ok and result.chain_length == 2, result.problems


def test_settle_refuses_to_record_a_spend_past_the_cap(backend: Backend) -> None:
    """Commit 3 itself holds the cap: a settle that would spend past it raises and records
    nothing (no outcome, no receipt, no spend); a settle within it goes through."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock(), cap=2_000)
    owner = remote_owner()
    intent = _intent(lease)
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"

    with pytest.raises(LeaseError, match="would spend 5000 of its cap of 2000"):
        store.settle(intent.action_id, epoch, owner, _sent(amount=5_000), CHECKS, {}, None)

    state = store.action(intent.action_id)
    assert state is not None and state.settlement is None and state.receipt is None
    stored = store.lease(lease.id)
    assert stored is not None and stored.spent == 0
    assert dict(stored.reservations) == {intent.action_id: AMOUNT}
    assert list(store.receipts()) == []
    assert store.settle(intent.action_id, epoch, owner, _sent(), CHECKS, {}, None) is not None
    stored = store.lease(lease.id)
    assert stored is not None and stored.spent == AMOUNT


def test_an_unknown_action_settles_only_by_finding_its_refund(backend: Backend) -> None:
    """The unknown mark is unfenced and for good; a refusal is refused, a found refund settles."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = remote_owner()
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
    clock.sleep(TTL + GRACE)
    store.take_claim(intent.action_id, remote_owner(), TTL, GRACE)

    store.mark_unknown(intent.action_id, "500 after execution began")  # by the fenced owner

    state = store.action(intent.action_id)
    assert state is not None and state.unknown == "500 after execution began"
    assert store.mark_sending(intent.action_id, state.attempts, TTL).status == "unknown"
    with pytest.raises(ActionError, match="unknown"):
        store.settle(
            intent.action_id, state.attempts, owner, Settlement("refused", "x"), [], {}, None
        )
    assert store.settle(intent.action_id, state.attempts, owner, _sent(), [], {}, None)


def test_release_ends_a_claim_that_is_not_sending(backend: Backend) -> None:
    """A released claim is taken at once by anyone; a `sending` one is not released."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch

    store.release(intent.action_id, epoch)

    taken = store.take_claim(intent.action_id, remote_owner(), TTL, GRACE)
    assert taken.status == "taken"
    assert store.mark_sending(intent.action_id, taken.epoch, TTL).status == "ok"
    store.release(intent.action_id, taken.epoch)
    assert store.take_claim(intent.action_id, remote_owner(), TTL, GRACE).status == "held"


def test_leases_grant_revoke_and_refuse_a_second_grant(backend: Backend) -> None:
    """A lease is granted once, revoked at the store's clock, and checks refuse under it."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    with pytest.raises(LeaseError, match="already exists"):
        store.grant_lease(lease)
    clock.sleep(1)

    revoked = store.revoke_lease(lease.id, "support")

    assert (revoked.revoked_at, revoked.revoked_by) == (clock(), "support")
    assert store.lease(lease.id) == revoked
    intent = _intent(lease)
    epoch = store.begin(intent, remote_owner(), TTL, GRACE).epoch
    assert store.mark_sending(intent.action_id, epoch, TTL).status == "lease_refused"
    with pytest.raises(LeaseError, match="no such lease"):
        store.revoke_lease("lease_missing", "support")


def test_a_revocation_with_an_owner_writes_its_receipt_in_its_commit(backend: Backend) -> None:
    """Given who writes it, a revocation writes its signed receipt with it, which the lease
    names and which reads back by id; revoking again writes no second one."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    key = SigningKey.generate()
    owner = Owner.current("operator:carol")

    revoked = store.revoke_lease(lease.id, "carol", owner=owner, reason="done", key=key)

    assert revoked.revocation_receipt is not None and store.lease(lease.id) == revoked
    receipt = store.receipt(revoked.revocation_receipt)
    assert receipt is not None and receipt.signature is not None
    assert receipt.action_id == f"revocation of {lease.id}"
    body = receipt.body
    assert (body["record"], body["lease_id"], body["revoked_by"], body["reason"]) == (
        "revocation", lease.id, "carol", "done",
    )  # fmt: skip
    assert body["at"] == revoked.revoked_at == clock()
    assert body["approval_digest"] == lease.digest() and body["owner"] == owner.to_dict()
    assert store.revoke_lease(lease.id, "dave", owner=owner, key=key) == revoked
    assert [r.seq for r in store.receipts()] == [receipt.seq]


def test_scans_list_oldest_first_and_filter_by_kind_and_metadata(backend: Backend) -> None:
    """`pending` and `actions` list oldest first; `actions` filters on intent metadata."""
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())
    late = _intent(lease, created_at=20.0, case="a", column="interlock")
    early = _intent(lease, created_at=10.0, case="a", column="standard")
    other = _intent(lease, created_at=15.0, case="b", column="interlock")
    for intent in (late, early, other):
        store.begin(intent, remote_owner(), TTL, GRACE)
    ids = [early.action_id, other.action_id, late.action_id]

    assert store.pending() == ids and store.pending("refund") == ids
    assert store.pending("payout") == []
    assert store.actions() == ids
    assert store.actions({"case": "a"}) == [early.action_id, late.action_id]
    assert store.actions({"case": "a", "column": "interlock"}) == [late.action_id]
    assert store.actions({"case": "zzz"}) == []


def test_histories_and_leases_stream_every_row_across_batches(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`histories` brings each action's row with its records, `leases` every lease, both as
    the one-row reads do, and `receipts` and `settled` the chain in order, all in batches
    whose edges lose and repeat nothing."""
    import interlock._core.journal as journal

    # Batches of two, so that five rows cross two batch edges.
    monkeypatch.setattr(journal, "BATCH", 2)
    clock = Clock()
    store = backend.make(clock)
    owner = remote_owner()
    leases = [_lease(store, clock()) for _ in range(5)]
    intents = [_intent(lease) for lease in leases]
    for i, intent in enumerate(intents):
        epoch = store.begin(intent, owner, TTL, GRACE).epoch
        if i % 2 == 0:
            assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
            verdict = _sent(f"re_{i}")
            assert store.settle(intent.action_id, epoch, owner, verdict, CHECKS, {}, None)

    streamed = list(store.histories())

    assert sorted(h.action_id for h in streamed) == sorted(i.action_id for i in intents)
    assert len(streamed) == len(intents)
    for h in streamed:
        state = store.action(h.action_id)
        assert state is not None and h.row is not None
        assert (h.row.intent, h.row.settlement, h.row.attempts, h.row.unknown) == (
            state.intent,
            state.settlement,
            state.attempts,
            state.unknown,
        )
        assert h.history == store.history(h.action_id)
        assert h.history[0].record == "intent"
    assert sorted(lease.id for lease in store.leases()) == sorted(lease.id for lease in leases)
    assert all(lease == store.lease(lease.id) for lease in store.leases())
    chain = list(store.receipts())
    assert [r.action_id for r in chain] == [i.action_id for i in intents[::2]]
    assert [r.seq for r in chain] == sorted({r.seq for r in chain})
    assert [(s.action_id, s.receipt_seq) for s in store.settled()] == [
        (r.action_id, r.seq) for r in chain
    ]


def test_every_write_is_one_commit(backend: Backend) -> None:
    """`commits` counts the durable commits: three for begin, mark_sending and settle; a
    first look counts none."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = remote_owner()
    before = store.commits

    store.first_look(intent, GRACE)
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    store.mark_sending(intent.action_id, epoch, TTL)
    store.settle(intent.action_id, epoch, owner, _sent(), CHECKS, {}, None)
    store.action(intent.action_id)
    store.pending()

    assert store.commits - before == 3


def test_a_write_that_raises_leaves_nothing_behind(backend: Backend) -> None:
    """A rule refusing in the middle of a write rolls the whole transaction back."""
    clock = Clock()
    store = backend.make(clock)
    intent = _intent(_lease(store, clock()))
    owner = remote_owner()
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    store.mark_unknown(intent.action_id, "5xx")
    history = store.history(intent.action_id)
    commits = store.commits

    with pytest.raises(ActionError):
        store.settle(intent.action_id, epoch, owner, Settlement("refused", "x"), [], {}, None)

    assert store.history(intent.action_id) == history and list(store.receipts()) == []
    assert store.commits == commits


# -- the gate's truth table through the shared rig ----------------------------------------


def _world(backend: Backend) -> GateWorld:
    return GateWorld(backend.make)


def test_gate_hand_refund_during_the_outage_is_refused(backend: Backend) -> None:
    """Crash before the send, a hand refund, recovery: refused, one refund (the hand one)."""
    world = _world(backend)
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at="before-send").submit(intent)
    world.payments.create_refund(world.pi, AMOUNT)

    outcome = world.gate(gone_owner()).recover_action(intent.action_id)

    assert outcome.status == "refused"
    assert world.agent_refunds() == [] and len(world.hand_refunds()) == 1
    assert verify(world.store, world.payments).ok


def test_gate_revoked_during_the_outage_sends_nothing(backend: Backend) -> None:
    """Crash before the send, the approval revoked, recovery: refused, no refund."""
    world = _world(backend)
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at="before-send").submit(intent)
    world.store.revoke_lease(lease.id, "support")

    outcome = world.gate(gone_owner()).recover_action(intent.action_id)

    assert outcome.status == "refused" and world.refunds() == []


def test_gate_after_the_answer_adopts_its_refund_at_once(backend: Backend) -> None:
    """Crash after Stripe's answer: recovery finds its own refund and sends nothing more."""
    world = _world(backend)
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at="after-answer").submit(intent)
    started = world.clock()

    outcome = world.gate(gone_owner()).recover_action(intent.action_id)

    assert outcome.status == "adopted" and len(world.agent_refunds(intent.action_id)) == 1
    assert world.clock() == started  # no claim wait: the dead owner's send had landed
    assert verify(world.store, world.payments).ok


def test_gate_waits_out_a_remote_owner_that_may_still_send(backend: Backend) -> None:
    """A claim marked `sending` by another host is waited out (expiry + grace), then sent once."""
    world = _world(backend)
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    with pytest.raises(Crash):
        world.gate(remote_owner(), crash_at="before-send").submit(intent)
    state = world.store.action(intent.action_id)
    assert state is not None and state.claim is not None and state.claim.sending

    outcome = world.gate(gone_owner()).recover_action(intent.action_id)

    assert outcome.status == "sent" and len(world.agent_refunds(intent.action_id)) == 1
    assert world.clock() >= state.claim.expires_at + TIMING.grace_s


# -- property: random histories, each backend against the in-memory reference -------------

OWNERS = ("a", "b")
Step = tuple[str, str, float]  # (operation, owner, seconds the clock moves first)
steps = st.lists(
    st.tuples(
        st.sampled_from(["begin", "take", "sending", "settle", "refuse", "release", "unknown"]),
        st.sampled_from(OWNERS),
        st.sampled_from([0.0, 0.5, 3.0, 7.0]),
    ),
    min_size=1,
    max_size=12,
)


def _play(store: Store, clock: Clock, lease: Lease, intent: Intent, story: list[Step]) -> list[str]:
    """Run one story on a store; what each step answered, as text to compare."""
    owners = {n: Owner(f"owner-{n}", 2**22 + i, 0.0, "host-" + n) for i, n in enumerate(OWNERS)}
    epochs: dict[str, int] = {}
    seen: list[str] = []
    for op, who, dt in story:
        clock.sleep(dt)
        owner, aid = owners[who], intent.action_id
        try:
            if op == "begin":
                a = store.begin(intent, owner, TTL, GRACE)
                epochs[who] = a.epoch or epochs.get(who, 0)
                seen.append(f"{a.status}:{a.epoch}")
            elif store.action(aid) is None:
                seen.append("absent")
            elif op == "take":
                a = store.take_claim(aid, owner, TTL, GRACE)
                epochs[who] = a.epoch or epochs.get(who, 0)
                seen.append(f"{a.status}:{a.epoch}")
            elif op == "sending":
                s = store.mark_sending(aid, epochs.get(who, 0), TTL + 1)
                seen.append(f"{s.status}:{s.left_s:.3f}")
            elif op in ("settle", "refuse"):
                v = _sent() if op == "settle" else Settlement("refused", "changed")
                r = store.settle(aid, epochs.get(who, 0), owner, v, CHECKS, {}, None)
                seen.append("fenced" if r is None else f"receipt:{r.body['outcome']}")
            elif op == "release":
                store.release(aid, epochs.get(who, 0))
                seen.append("released")
            else:
                store.mark_unknown(aid, "5xx")
                seen.append("unknown")
        except ActionError as e:
            seen.append(f"error:{e}")
    state = store.action(intent.action_id)
    if state is not None:
        claim = state.claim
        seen.append(
            json.dumps(
                {
                    "attempts": state.attempts,
                    "settled": None if state.settlement is None else state.settlement.status,
                    "claim": None if claim is None else [claim.epoch, claim.sending],
                    "unknown": state.unknown,
                    "records": [h.record for h in store.history(intent.action_id)],
                    "lease": dict((store.lease(lease.id) or lease).reservations),
                    "spent": (store.lease(lease.id) or lease).spent,
                }
            )
        )
    return seen


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(story=steps)
def test_random_histories_answer_as_the_reference_does(backend: Backend, story: list[Step]) -> None:
    """Any history of claims, sends, outcomes, releases and 5xx marks by two owners on two
    hosts: the backend answers every step as the in-memory reference does, and at most one
    outcome and one receipt exist (one store per test; fresh action and lease per example)."""
    clock, ref_clock = backend.clock, Clock()
    store = backend.on_clock()
    ref_clock.now = clock.now
    reference = MemoryStore(clock=ref_clock)
    # A payment of its own per example: an earlier example's action may still hold its turn.
    target = f"pi_p_{uuid.uuid4().hex[:8]}"
    lease = Lease(f"lease_{uuid.uuid4().hex[:10]}", "refund", target, 5_000, clock() + 3600,
                  "support", clock())  # fmt: skip
    store.grant_lease(lease)
    reference.grant_lease(lease)
    intent = _intent(lease)

    got = _play(store, clock, lease, intent, story)
    wanted = _play(reference, ref_clock, lease, intent, story)

    assert got == wanted
    outcomes = [s for s in got if s.startswith("receipt:")]
    assert len(outcomes) <= 1
    assert [r.action_id for r in store.receipts()].count(intent.action_id) == len(outcomes)


# -- a race of real processes (threads for memory) ----------------------------------------


def test_open_store_opens_each_kind_by_its_location(backend: Backend) -> None:
    """`open_store` opens a SQLite path or a PostgreSQL URL (its schema in the query)."""
    if backend.location is None:
        pytest.skip("a memory store has no location")
    clock = Clock()
    store = backend.make(clock)
    lease = _lease(store, clock())

    opened = open_store(backend.location)
    try:
        assert opened.lease(lease.id) == lease
        assert type(opened) is type(store)
    finally:
        opened.close()
