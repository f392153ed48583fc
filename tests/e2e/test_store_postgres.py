"""What only the PostgreSQL store has: the database's clock across hosts, and the server.

Hosts are told apart by `Owner.host`; each host's gate reads its own clock, skewed by
minutes. Claims are timed by the database's clock (`clock_timestamp()` read after the
store's write lock), so the hosts agree on who holds a claim. The rest: the schema of its
own and its version, recovery scans that skip rows being changed, a connection killed in
the middle of a transaction (`pg_terminate_backend`), nothing kept in the session (so a
transaction-mode pooler can share connections), errors in words without the password,
and `python -m interlock verify URL`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Check,
    Event,
    Gate,
    Intent,
    Lease,
    Owner,
    PostgresStore,
    SchemaVersionError,
    Settlement,
    StoreError,
    StripePayments,
    StripeRefund,
    new_action_id,
    open_store,
    refunds_fingerprint,
    verify,
)
from interlock._stores.postgres import SCHEMA_VERSION, redact_dsn
from interlock.testing import InProcessPayments, StripeEmulator
from tests.e2e.test_store_contract_e2e import _payments
from tests.e2e.test_store_processes import ROOT
from tests.helpers import headless
from tests.helpers.gate_rig import TIMING

SKEW_S = 300.0  # five minutes each way: ten minutes between the two hosts
DEADLINE_S = 30.0


class Killed(BaseException):
    """A host's worker dies at a named step (its gate is abandoned, as after SIGKILL)."""


def _db_now(dsn: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _waiting_backends(dsn: str, query_prefix: str) -> list[int]:
    """Pids of backends blocked on a lock while running a query that starts so."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            (query_prefix + "%",),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _advisory_waiters(dsn: str) -> int:
    """How many backends wait for an advisory lock (the store's write lock) right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    """A store in a schema of its own, on the database's clock."""
    s = PostgresStore(pg_dsn, schema=pg_schema)
    yield s
    s.close()


def _lease(store: PostgresStore, target: str, cap: int = 2_000) -> Lease:
    now = store.now()
    return store.grant_lease(
        Lease(f"lease_{uuid.uuid4().hex[:8]}", "refund", target, cap, now + 3600, "support", now)
    )


def _intent(lease: Lease, fingerprint: str = "sha256:seen") -> Intent:
    return Intent(new_action_id(), "refund", lease.target, 2_000, lease.id, fingerprint)


# -- two hosts, clocks minutes apart -------------------------------------------------------


def _host_gate(
    store: PostgresStore,
    payments: StripePayments,
    host: str,
    skew_s: float,
    events: list[tuple[str, str, Mapping[str, Any]]],
    kill_at: str | None = None,
) -> Gate:
    owner = Owner(f"worker-{host}", 4242, 0.0, host)

    def on_event(event: Event) -> None:
        events.append((host, event.kind, dict(event.data)))
        if event.kind == kill_at:
            raise Killed(event.kind)

    return Gate(
        store,
        StripeRefund(payments),
        timing=TIMING,
        owner=owner,
        on_event=on_event,
        clock=lambda: time.time() + skew_s,
        approvers=UNSIGNED_APPROVALS,
    )


def _sending_claim_left_by_host_a(
    pg_dsn: str, pg_schema: str, emulator: StripeEmulator, clock_source: Any
) -> tuple[Intent, float, float, StripePayments]:
    """Host A (clock 5 min slow) dies right before its create call; host B (5 min fast)
    recovers. Returns the intent, A's claim expiry, when B took the claim (both in the
    store's clock), and the payments."""
    payments = _payments(emulator)
    payment = payments.create_payment(10_000)
    events: list[tuple[str, str, Mapping[str, Any]]] = []
    a_store = PostgresStore(pg_dsn, schema=pg_schema, clock_source=clock_source(-SKEW_S))
    b_store = PostgresStore(pg_dsn, schema=pg_schema, clock_source=clock_source(+SKEW_S))
    try:
        lease = _lease(a_store, payment.id)
        intent = _intent(lease, refunds_fingerprint(payments.list_refunds(payment.id)))
        with pytest.raises(Killed):
            _host_gate(a_store, payments, "host-a", -SKEW_S, events, "before-send").submit(intent)
        left = a_store.action(intent.action_id)
        assert left is not None and left.claim is not None and left.claim.sending

        outcome = _host_gate(b_store, payments, "host-b", +SKEW_S, events).recover_action(
            intent.action_id
        )

        assert outcome.status == "sent"
        state = b_store.action(intent.action_id)
        assert state is not None and state.claim is not None
        return intent, left.claim.expires_at, state.claim.claimed_at, payments
    finally:
        a_store.close()
        b_store.close()


def test_skewed_hosts_agree_on_the_claim_by_the_database_clock(
    pg_dsn: str, pg_schema: str, emulator: StripeEmulator
) -> None:
    """Host B, ten minutes ahead of host A, waits A's `sending` claim out by the database's
    clock (expiry + grace), never early across hosts, then sends once."""
    before = _db_now(pg_dsn)
    intent, a_expires, b_took, payments = _sending_claim_left_by_host_a(
        pg_dsn, pg_schema, emulator, lambda _skew: "database"
    )
    after = _db_now(pg_dsn)

    # Both claims are in the database's time, not in either host's.
    assert before < a_expires - TIMING.claim_ttl_s < after
    assert before < b_took < after
    assert b_took >= a_expires + TIMING.grace_s
    refunds = payments.list_refunds(intent.target)
    assert [r.metadata[ACTION_METADATA_KEY] for r in refunds] == [intent.action_id]
    check = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        assert verify(check, payments).ok
    finally:
        check.close()


def test_with_each_hosts_own_clock_the_same_story_takes_over_early(
    pg_dsn: str, pg_schema: str, emulator: StripeEmulator
) -> None:
    """The control: had each host timed claims by its own clock, host B would have taken
    A's `sending` claim at once, while A's request could still be in flight."""
    _, a_expires, b_took, _ = _sending_claim_left_by_host_a(
        pg_dsn, pg_schema, emulator, lambda skew: lambda: time.time() + skew
    )
    real_a_expiry = a_expires + SKEW_S  # A's claim expiry on the real clock

    assert b_took - SKEW_S < real_a_expiry  # B took it before it really expired


def test_skewed_hosts_racing_for_one_action_send_once(
    pg_dsn: str, pg_schema: str, emulator: StripeEmulator
) -> None:
    """Hosts A and B, ten minutes apart, submit the same decision at once: one create call,
    one refund, both report it, and neither took the other's claim early."""
    payments = _payments(emulator)
    payment = payments.create_payment(10_000)
    setup = PostgresStore(pg_dsn, schema=pg_schema)
    lease = _lease(setup, payment.id)
    intent = _intent(lease, refunds_fingerprint(payments.list_refunds(payment.id)))
    emulator.model.add_fault("hold", hold_ms=500, commit=True)
    events: list[tuple[str, str, Mapping[str, Any]]] = []
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def host(name: str, skew: float) -> None:
        store = PostgresStore(pg_dsn, schema=pg_schema)
        try:
            gate = _host_gate(store, payments, name, skew, events)
            barrier.wait(DEADLINE_S)
            outcomes[name] = gate.submit(intent).status
        finally:
            store.close()

    threads = [
        threading.Thread(target=host, args=(n, s))
        for n, s in (("host-a", -SKEW_S), ("host-b", +SKEW_S))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S * 2)
        assert not t.is_alive()

    assert outcomes == {"host-a": "sent", "host-b": "sent"}
    assert emulator.model.requests.count(("POST", "refunds")) == 1
    assert [k for _, k, _ in events].count("before-send") == 1
    claims = [h.data for h in setup.history(intent.action_id) if h.record == "claim"]
    assert len(claims) == 1 and claims[0]["early"] is False
    assert verify(setup, payments).ok
    setup.close()


# -- the isolation the store relies on ----------------------------------------------------


def _serializable(dsn: str) -> str:
    """The DSN with the server's default isolation hardened to serializable, as an
    operator may set it for a role or a database."""
    return psycopg.conninfo.make_conninfo(
        dsn, options="-c default_transaction_isolation=serializable"
    )


def test_a_serializable_default_isolation_changes_nothing_for_concurrent_submits(
    pg_dsn: str, pg_schema: str, emulator: StripeEmulator
) -> None:
    """Eight workers submit at once on a server whose default isolation is serializable (a
    common hardening): each transaction states the read-committed isolation the store's
    row locks are written for, so every action is sent once and nothing fails. With the
    server's default, 6 of 8 raised a serialization failure worded as a lost connection,
    one of them after its refund was made."""
    dsn = _serializable(pg_dsn)
    payments = _payments(emulator)
    setup = PostgresStore(dsn, schema=pg_schema)
    with setup._transaction(write=False) as cur:
        cur.execute("SHOW default_transaction_isolation")
        assert cur.fetchone()[0] == "serializable"
    cases = []
    for _ in range(8):
        payment = payments.create_payment(10_000)
        lease = _lease(setup, payment.id)
        cases.append(_intent(lease, refunds_fingerprint(payments.list_refunds(payment.id))))
    barrier = threading.Barrier(len(cases))
    outcomes: dict[str, str] = {}
    errors: list[BaseException] = []

    def worker(intent: Intent) -> None:
        store = PostgresStore(dsn, schema=pg_schema)
        try:
            gate = Gate(
                store,
                StripeRefund(payments),
                timing=TIMING,
                approvers=UNSIGNED_APPROVALS,
            )
            barrier.wait(DEADLINE_S)
            outcomes[intent.action_id] = gate.submit(intent).status
        except BaseException as e:
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S * 2)
        assert not t.is_alive()
    try:
        assert errors == []
        assert sorted(outcomes.values()) == ["sent"] * len(cases)
        for intent in cases:
            agent = [r for r in payments.list_refunds(intent.target) if r.metadata]
            assert [r.metadata.get(ACTION_METADATA_KEY) for r in agent] == [intent.action_id]
        result = verify(setup, payments)
        assert result.ok, result.problems
    finally:
        setup.close()


def test_a_serialization_failure_is_worded_as_what_it_is(pg_dsn: str, pg_schema: str) -> None:
    """Should the server still roll a transaction back to keep concurrent ones apart (a
    deadlock, or serializable isolation forced by a pooler), the error says so and that
    nothing was kept, never that the connection was lost."""
    from interlock._stores.postgres import _problem

    for error in (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
        text = _problem(error("could not serialize access"))
        assert "connection" not in text, text
        assert "rolled the transaction back" in text and "nothing" in text, text


# -- the database's clock, read after the write lock ----------------------------------------


def test_the_clock_is_read_after_the_write_lock(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """A claim taken after waiting for the action's lock is timed from when the lock came,
    so the wait never eats its margin."""
    lease = _lease(store, "pi_lock")
    intent = _intent(lease)
    taken: list[float] = []
    blocker = psycopg.connect(pg_dsn, autocommit=True)
    try:
        blocker.execute("BEGIN")
        blocker.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", store._action_lock(intent.action_id)
        )
        t = threading.Thread(
            target=lambda: taken.append(store.begin(intent, Owner.current(), 6.0, 2.0).now)
        )
        t.start()
        _wait_for("the writer to wait on the lock", lambda: _advisory_waiters(pg_dsn) > 0)
        released_at = _db_now(pg_dsn)
        blocker.execute("COMMIT")
        t.join(DEADLINE_S)
    finally:
        blocker.close()

    assert taken and taken[0] >= released_at
    state = store.action(intent.action_id)
    assert state is not None and state.claim is not None
    assert state.claim.expires_at == pytest.approx(taken[0] + 6.0)


@pytest.mark.parametrize("write", ["begin", "mark_sending"])
def test_the_clock_is_read_after_the_turns_lock(
    store: PostgresStore, pg_dsn: str, pg_schema: str, write: str
) -> None:
    """A claim taken, or renewed by `sending`, after waiting for its payment's turn (another
    action's commit holds it) is timed from when that lock came: the wait eats no margin."""
    lease = _lease(store, "pi_turn_lock")
    intent = _intent(lease)
    owner = Owner.current()
    epoch = store.begin(intent, owner, 6.0, 2.0).epoch if write == "mark_sending" else 0
    answered: list[float] = []

    def run() -> None:
        if write == "begin":
            answered.append(store.begin(intent, owner, 6.0, 2.0).now)
        else:
            sending = store.mark_sending(intent.action_id, epoch, 9.0)
            assert sending.claim is not None
            answered.append(sending.claim.expires_at - 9.0)

    blocker = psycopg.connect(pg_dsn, autocommit=True)
    try:
        blocker.execute(
            f'INSERT INTO "{pg_schema}".interlock_turns VALUES (%s, %s, 0)'
            " ON CONFLICT (target) DO NOTHING",
            ("pi_turn_lock", ""),
        )
        blocker.execute("BEGIN")
        blocker.execute(
            f'SELECT * FROM "{pg_schema}".interlock_turns WHERE target=%s FOR UPDATE',
            ("pi_turn_lock",),
        )
        t = threading.Thread(target=run)
        t.start()
        _wait_for(
            "the writer to wait on the turn",
            lambda: _waiting_backends(pg_dsn, "SELECT action_id, epoch") != [],
        )
        released_at = _db_now(pg_dsn)
        blocker.execute("COMMIT")
        t.join(DEADLINE_S)
    finally:
        blocker.close()

    assert answered and answered[0] >= released_at
    state = store.action(intent.action_id)
    assert state is not None and state.claim is not None
    ttl = 6.0 if write == "begin" else 9.0
    assert state.claim.expires_at == pytest.approx(answered[0] + ttl)


def test_a_writer_on_one_action_never_waits_for_another_action(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """No store-wide lock: while another handle's write on one action is open, every
    commit of another action (begin, `sending`, settle) goes through."""
    lease = _lease(store, "pi_rows")
    busy = _intent(lease)
    store.begin(busy, Owner.current(), 60.0, 2.0)
    free = _intent(_lease(store, "pi_rows_other"))
    owner = Owner.current("free")
    other = PostgresStore(pg_dsn, schema=pg_schema)
    done: list[object] = []

    def send_path() -> None:
        epoch = store.begin(free, owner, 60.0, 2.0).epoch
        done.append(store.mark_sending(free.action_id, epoch, 60.0).status)
        verdict = Settlement("sent", None, "re_free", 2_000)
        done.append(store.settle(free.action_id, epoch, owner, verdict, [], {}, None))

    try:
        with other._write() as tx:
            assert tx.get_action(busy.action_id) is not None
            t = threading.Thread(target=send_path)
            t.start()
            t.join(DEADLINE_S)
            assert not t.is_alive(), "a commit of another action waited on the open write"
    finally:
        other.close()

    assert done[0] == "ok" and done[1] is not None and getattr(done[1], "seq", None) == 1


# -- recovery scans skip rows being changed ----------------------------------------------


def test_pending_skips_a_row_another_worker_is_changing(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """`pending()` does not wait on a row locked by a writer; a read-only store lists it."""
    lease = _lease(store, "pi_skip")
    busy, free = _intent(lease), _intent(lease)
    for intent in (busy, free):
        store.begin(intent, Owner.current(), 6.0, 2.0)
    writer = psycopg.connect(pg_dsn, autocommit=True)
    reader = PostgresStore.open_read_only(pg_dsn, schema=pg_schema)
    try:
        writer.execute("BEGIN")
        writer.execute(
            f'SELECT 1 FROM "{pg_schema}".interlock_actions WHERE action_id=%s FOR UPDATE',
            (busy.action_id,),
        )
        scanned: list[list[str]] = []
        t = threading.Thread(target=lambda: scanned.append(store.pending()))
        t.start()
        t.join(DEADLINE_S)
        assert not t.is_alive(), "pending() waited on the locked row"

        assert scanned == [[free.action_id]]
        assert set(reader.pending()) == {busy.action_id, free.action_id}
        writer.execute("COMMIT")
        assert set(store.pending()) == {busy.action_id, free.action_id}
    finally:
        writer.close()
        reader.close()


# -- a connection lost in the middle of a transaction -----------------------------------


def test_a_connection_killed_mid_transaction_is_settled_once_on_a_new_one(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """Commit 3's backend is killed (pg_terminate_backend) while its receipt waits on a
    lock: the store runs the commit again on a new connection, and it is kept once."""
    lease = _lease(store, "pi_kill")
    intent = _intent(lease)
    owner = Owner.current("killed")
    epoch = store.begin(intent, owner, 60.0, 2.0).epoch
    assert store.mark_sending(intent.action_id, epoch, 60.0).status == "ok"
    # Another transaction inserts the receipts with the next two ids of the store's
    # sequence and holds them: commit 3 takes the first and blocks on that key, its retry
    # the second (a sequence never gives an id twice, so ids may have gaps).
    blocker = psycopg.connect(pg_dsn, autocommit=True)
    got: list[object] = []
    verdict = Settlement("sent", None, "re_killed", 2_000)
    checks = [Check("claim", "held", "held", True)]

    def settle() -> None:
        try:
            got.append(store.settle(intent.action_id, epoch, owner, verdict, checks, {}, None))
        except BaseException as e:
            got.append(e)

    try:
        row = blocker.execute(
            f'SELECT last_value, is_called FROM "{pg_schema}".interlock_receipt_ids'
        ).fetchone()
        assert row is not None
        first = int(row[0]) + 1 if row[1] else int(row[0])
        blocker.execute("BEGIN")
        for seq in (first, first + 1):
            blocker.execute(
                f'INSERT INTO "{pg_schema}".interlock_receipts'
                " (seq, action_id, body, prev_hash, hash) VALUES (%s, 'x', '{}', '', '0')",
                (seq,),
            )
        t = threading.Thread(target=settle)
        t.start()
        prefix = f'INSERT INTO "{pg_schema}".interlock_receipts'
        _wait_for("commit 3 to block", lambda: bool(_waiting_backends(pg_dsn, prefix)))
        (victim,) = _waiting_backends(pg_dsn, prefix)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
        _wait_for(
            "the retry to block", lambda: _waiting_backends(pg_dsn, prefix) not in ([], [victim])
        )
        blocker.execute("ROLLBACK")
        t.join(DEADLINE_S)
        assert not t.is_alive()
    finally:
        blocker.close()

    assert len(got) == 1 and getattr(got[0], "seq", None) == first + 1, got
    assert [r.seq for r in store.receipts()] == [first + 1]
    state = store.action(intent.action_id)
    assert state is not None and state.settlement is not None and state.receipt is not None
    stored = store.lease(lease.id)
    assert stored is not None and (stored.spent, dict(stored.reservations)) == (2_000, {})
    assert [h.record for h in store.history(intent.action_id)].count("outcome") == 1
    assert len(list(store.receipts())) == 1


class _KillingStore(PostgresStore):
    """A store whose own backend is terminated, from another session, just before its
    `kill_at`-th round trip (counted from 1; None: never)."""

    kill_at: int | None = None
    trips = 0

    def _connection(self) -> Any:
        conn = super()._connection()
        self.trips += 1
        if self.trips == self.kill_at:
            pid = conn.info.backend_pid
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                _wait_for(
                    "the backend to end",
                    lambda: (
                        admin.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
                        ).fetchone()
                        == (0,)
                    ),
                )
        return conn


def _send(store: PostgresStore, tag: str) -> tuple[Intent, Lease, object]:
    lease = _lease(store, f"pi_{tag}")
    intent = _intent(lease)
    owner = Owner.current(tag)
    attempt = store.begin(intent, owner, 60.0, 2.0)
    assert attempt.status == "taken"
    sending = store.mark_sending(intent.action_id, attempt.epoch, 60.0)
    assert sending.status == "ok", sending
    verdict = Settlement("sent", None, f"re_{tag}", 2_000)
    receipt = store.settle(intent.action_id, attempt.epoch, owner, verdict, [], {}, None)
    return intent, lease, receipt


def test_a_store_connection_dropped_at_any_round_trip_of_a_send_settles_it_once(
    pg_dsn: str, pg_schema: str
) -> None:
    """The store's backend is terminated before each round trip of a send in turn (between
    transactions, inside one, before its COMMIT): every commit still answers as it would
    have, on a new connection, and the action is settled once with one receipt."""
    store = _KillingStore(pg_dsn, schema=pg_schema)
    try:
        store.trips = 0
        _send(store, "count")
        # The round trips of one send: a lease grant and begin, sending, settle.
        trips = store.trips
        assert trips >= 6
        for k in range(1, trips + 1):
            before = len(list(store.receipts()))
            store.trips, store.kill_at = 0, k
            intent, lease, receipt = _send(store, f"kill{k}")
            store.kill_at = None
            assert receipt is not None, k
            state = store.action(intent.action_id)
            assert state is not None and state.settlement is not None, k
            assert state.receipt == receipt, k
            stored = store.lease(lease.id)
            assert stored is not None and (stored.spent, dict(stored.reservations)) == (
                2_000,
                {},
            ), k
            assert [h.record for h in store.history(intent.action_id)].count("outcome") == 1
            assert len(list(store.receipts())) == before + 1, k
    finally:
        store.close()


def test_a_connection_the_server_closed_while_idle_is_replaced_at_once(
    pg_dsn: str, pg_schema: str
) -> None:
    """The server ends the store's idle session (`idle_session_timeout`) during the send:
    commit 3 is made at once on a new connection, no wait for a claim to expire."""
    store = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        lease = _lease(store, "pi_idle")
        intent = _intent(lease)
        owner = Owner.current("idle")
        epoch = store.begin(intent, owner, 60.0, 2.0).epoch
        assert store.mark_sending(intent.action_id, epoch, 60.0).status == "ok"
        conn = store._connection()
        conn.execute("SET idle_session_timeout = 200")
        pid = conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            _wait_for(
                "the server to end the idle session",
                lambda: (
                    admin.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
                    ).fetchone()
                    == (0,)
                ),
            )
        start = time.monotonic()
        verdict = Settlement("sent", None, "re_idle", 2_000)
        receipt = store.settle(intent.action_id, epoch, owner, verdict, [], {}, None)
        took = time.monotonic() - start
    finally:
        store.close()

    assert receipt is not None and receipt.seq == 1
    assert took < 5.0, took


def test_a_closed_store_opens_no_connection_for_a_late_caller(pg_dsn: str, pg_schema: str) -> None:
    """A gate's log catching up after its owner closed the store (its timer, or a
    `close()` after the store's) is refused in words and opens no session behind the
    owner's back; the receipt stays out of the log for the next gate's `recover()`."""
    store = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        payments = InProcessPayments()
        problems: list[str] = []
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=TIMING,
            approvers=UNSIGNED_APPROVALS,
            log_interval_s=3600,
            on_event=lambda e: problems.append(str(e.data.get("problem") or "")),
        )
        pi = payments.create_payment(10_000).id
        lease = _lease(store, pi)
        fingerprint = refunds_fingerprint(payments.list_refunds(pi))
        intent = Intent(new_action_id(), "refund", pi, 2_000, lease.id, fingerprint)
        assert gate.submit(intent).status == "sent"
        store.close()

        gate.close()

        assert any("the store was closed" in p for p in problems), problems
        with pytest.raises(StoreError, match="the store was closed"):
            store.unlogged_count()
        assert store._conn is None
    finally:
        store.close()
    again = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        assert again.unlogged_count() == 1
    finally:
        again.close()


# -- schema, version, read-only -----------------------------------------------------------


def test_schema_is_created_in_its_own_schema_and_versioned(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """The tables live in the schema asked for, with the schema version in its meta table."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = {
            str(r[0])
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema=%s",
                (pg_schema,),
            )
        }
        version = conn.execute(
            f'SELECT value FROM "{pg_schema}".interlock_meta WHERE key=%s', ("schema_version",)
        ).fetchone()
    assert tables == {
        f"interlock_{t}"
        for t in ("meta", "actions", "journal", "leases", "receipts", "turns", "heads")
    }
    assert version == (str(SCHEMA_VERSION),)


def test_a_version_2_store_gets_its_turns_in_place_and_is_read_as_it_is_read_only(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """A version 2 store (no turns table, no receipt log) is read as it is read-only, and
    opened for writing gets the turns table, the log and the current version; its actions
    go on as before."""
    lease = _lease(store, "pi_v2")
    intent = _intent(lease)
    owner = Owner("v2-worker", 1, 0.0, "another-host.invalid")
    assert store.begin(intent, owner, 40.0, 2.0).status == "taken"
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{pg_schema}".interlock_turns')
        # The log came with version 4: its heads, each receipt's place, the receipt ids.
        conn.execute(f'DROP TABLE "{pg_schema}".interlock_heads')
        conn.execute(f'ALTER TABLE "{pg_schema}".interlock_receipts DROP COLUMN leaf')
        conn.execute(f'DROP SEQUENCE "{pg_schema}".interlock_receipt_ids')
        conn.execute(f"UPDATE \"{pg_schema}\".interlock_meta SET value='2'")

    reader = PostgresStore.open_read_only(pg_dsn, schema=pg_schema)
    try:
        assert reader.pending() == [intent.action_id]
    finally:
        reader.close()
    migrated = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        epoch = migrated.take_claim(intent.action_id, owner, 40.0, 2.0).epoch
        assert migrated.mark_sending(intent.action_id, epoch, 40.0).status == "ok"
    finally:
        migrated.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        version = conn.execute(f'SELECT value FROM "{pg_schema}".interlock_meta').fetchone()
        turn = conn.execute(f'SELECT action_id, epoch FROM "{pg_schema}".interlock_turns')
        assert turn.fetchall() == [(intent.action_id, epoch)]
    assert version == (str(SCHEMA_VERSION),)


def test_another_schema_version_is_refused(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """A store of another version is refused as it is, read-write and read-only alike."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{pg_schema}\".interlock_meta SET value='99'")
    for read_only in (False, True):
        with pytest.raises(SchemaVersionError, match="schema version 99"):
            PostgresStore(pg_dsn, schema=pg_schema, read_only=read_only)


def test_read_only_creates_and_writes_nothing(pg_dsn: str, pg_schema: str) -> None:
    """Read-only on an empty schema says it is not a store and creates nothing; on a store
    it refuses every write."""
    with pytest.raises(StoreError, match="not an interlock store"):
        PostgresStore.open_read_only(pg_dsn, schema=pg_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name=%s", (pg_schema,)
        ).fetchone()
    assert found == (0,)
    PostgresStore(pg_dsn, schema=pg_schema).close()
    reader = PostgresStore.open_read_only(pg_dsn, schema=pg_schema)
    try:
        with pytest.raises(StoreError, match="read-only"):
            reader.grant_lease(Lease("lease_x", "refund", "pi_x", 1, 1.0, "a", 0.0))
    finally:
        reader.close()


def test_many_processes_opening_a_new_store_at_once_all_succeed(
    pg_dsn: str, pg_schema: str
) -> None:
    """First use by several workers at once creates the schema once, without errors."""
    code = (
        "import sys; from interlock import PostgresStore; "
        "PostgresStore(sys.argv[1], schema=sys.argv[2]).close()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, pg_dsn, pg_schema], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    results = [(p.wait(DEADLINE_S), p.stderr.read() if p.stderr else b"") for p in procs]
    for p in procs:
        if p.stderr:
            p.stderr.close()
    assert [code for code, _ in results] == [0, 0, 0, 0], results
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT key FROM "{pg_schema}".interlock_meta').fetchall()
    assert rows == [("schema_version",)]


# -- a transaction-mode pooler, errors, the command line ---------------------------------


def test_nothing_is_kept_in_the_session(store: PostgresStore) -> None:
    """After many calls, the session has no prepared statement, no advisory lock and its
    default settings: a transaction-mode pooler can hand the connection to anyone."""
    lease = _lease(store, "pi_pool")
    owner = Owner.current()
    for _ in range(8):  # past psycopg's default prepare threshold (5)
        intent = _intent(lease)
        epoch = store.begin(intent, owner, 6.0, 2.0).epoch
        store.release(intent.action_id, epoch)
        store.action(intent.action_id)
    conn = store._conn  # the store's own session, as the pooler would pass it on
    prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    locks = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND pid=pg_backend_pid()"
    ).fetchone()
    setting = conn.execute("SELECT source FROM pg_settings WHERE name='synchronous_commit'")
    assert (prepared, locks) == ((0,), (0,))
    assert setting.fetchone() != ("session",)


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    """A connection that fails is a StoreError saying what to do, never echoing the password."""
    dsn = "postgresql://someone:MadeUpSecret@127.0.0.1:1/nothing"
    with pytest.raises(StoreError) as caught:
        PostgresStore(dsn, connect_timeout_s=2)
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert "MadeUpSecret" not in str(caught.value)
    assert "check that the server is up" in str(caught.value)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:MadeUp@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
        ("postgresql://u@h/db?password=MadeUp", "postgresql://u@h/db?password=***"),
        ("host=h user=u password=MadeUp dbname=db", "host=h user=u password=*** dbname=db"),
        ("postgresql://postgres:@/postgres?host=/tmp/s", "postgresql://postgres@/postgres?host=/tmp/s"),
    ],
)  # fmt: skip
def test_a_dsn_is_shown_without_its_password(dsn: str, shown: str) -> None:
    """What the store shows of its DSN never carries the password."""
    assert redact_dsn(dsn) == shown


def test_verify_command_reads_a_postgres_store_by_url(
    store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """`python -m interlock verify URL` checks the receipts read-only; a schema that holds no
    store exits 2 and is not created."""
    lease = _lease(store, "pi_cli")
    owner = Owner.current()
    for _ in range(2):
        intent = _intent(lease)
        epoch = store.begin(intent, owner, 6.0, 2.0).epoch
        store.mark_sending(intent.action_id, epoch, 7.0)
        store.settle(intent.action_id, epoch, owner, Settlement("refused", "x"), [], {}, None)
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"

    done = subprocess.run(
        [sys.executable, "-m", "interlock", "verify", url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{PostgresStore.describe(url)}: 2 receipts (2 unsigned) hold\n"
        "  log: 0 receipts under 0 signed tree heads, 2 not in the log yet\n"
    )

    empty = url.replace(pg_schema, pg_schema + "_none")
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "verify", empty],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and "not an interlock store" in done.stderr
    with pytest.raises(StoreError, match="not an interlock store"):
        open_store(empty, read_only=True)


# -- the demo on PostgreSQL ---------------------------------------------------------------


@pytest.mark.e2e
def test_headless_demo_runs_on_postgres_and_names_the_backend(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """`--store URL`: real workers journal in PostgreSQL, every column ends as the truth
    table says, and the run JSON names the backend without a password."""
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    done = headless.run(
        [*headless.CLI, "--scenario", "hand-refund", "--checked", "--store", url],
        headless.cli_env(tmp_path / "home"),
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    headless.check_run(doc, "hand-refund", "standalone")
    assert doc["settings"]["store"] == "postgresql"
    assert doc["settings"]["store_url"] == redact_dsn(url)
    assert not (tmp_path / "home" / "demo" / "interlock.sqlite3").exists()
    store = open_store(url, read_only=True)
    try:
        # A schema of its own: the interlock column's one action, refused, is all there is.
        (action_id,) = store.actions()
        state = store.action(action_id)
        assert state is not None and state.settlement is not None
        assert state.settlement.status == "refused"
        assert [r.outcome for r in store.receipts()] == ["refused"]
    finally:
        store.close()


def test_store_option_refuses_another_database_url(tmp_path: Path) -> None:
    """`--store mysql://...` is bad usage (exit 2) in words, without echoing a password."""
    done = headless.run(
        [*headless.CLI, "--scenario", "revoked", "--store", "mysql://u:MadeUpPw@h/db"],
        headless.cli_env(tmp_path / "home"),
    )
    assert done.returncode == 2
    assert "postgresql://" in done.stderr and "MadeUpPw" not in done.stderr


def test_results_without_a_postgres_server_skips_its_step_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`interlock-demo results` with no server named and no pgserver installed leaves the
    PostgreSQL sweep and benchmark as they were, saying why and what to do."""
    from interlock_demo.reports import local_postgres, results

    reason = "no PostgreSQL server: set INTERLOCK_STORE=postgresql://..."
    monkeypatch.setattr(results, "pgserver_missing", lambda: reason)
    monkeypatch.delenv("INTERLOCK_STORE", raising=False)
    steps = {s.name: s for s in results.plan(tmp_path)}

    step = steps["sweep and stores benchmark (PostgreSQL)"]
    assert step.skipped is not None and step.skipped.startswith(reason)
    assert local_postgres.pgserver_missing() is None  # here the test extra brings it


# -- through a transaction-mode pooler ------------------------------------------------------


@pytest.fixture(scope="module")
def pgbouncer_dsn(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """PgBouncer in transaction mode in front of the test server, with ONE server
    connection for every client, so that clients' transactions take turns on it.

    Skipped where the `pgbouncer` program is not installed (Debian: apt-get install
    pgbouncer)."""
    import os
    import shutil
    import socket
    from urllib.parse import parse_qs, urlsplit

    program = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if program is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    parts = urlsplit(pg_dsn)
    host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
    user = parts.username or "postgres"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path_factory.mktemp("pgbouncer")
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={host} port={parts.port or 5432} user={user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\n"
        "default_pool_size = 1\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    # PgBouncer refuses to run as root: it reads its configuration, then switches to the
    # user that runs the server (pgserver's, whose socket only that user may open).
    runner = []
    if os.geteuid() == 0:
        import pwd

        try:
            runner = ["-u", pwd.getpwnam("pgserver").pw_name]
        except KeyError:
            runner = ["-u", "nobody"]
    log = (folder / "pgbouncer.log").open("w")
    proc = subprocess.Popen([program, *runner, str(ini)], stderr=log)
    dsn = f"postgresql://{user}@127.0.0.1:{port}{parts.path or '/postgres'}"
    try:
        _wait_for("pgbouncer to accept", lambda: _accepts(dsn) or proc.poll() is not None)
        if proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {(folder / 'pgbouncer.log').read_text()}")
        yield dsn
    finally:
        proc.terminate()
        proc.wait(DEADLINE_S)
        log.close()


def _accepts(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def test_workers_share_one_server_connection_through_pgbouncer(
    pgbouncer_dsn: str, pg_schema: str
) -> None:
    """Three workers' stores behind PgBouncer (transaction mode, one server connection for
    all) run whole gate cycles at once: every action is sent once, the chain verifies,
    and no worker's session state leaks into another's transactions."""
    from interlock.testing import InProcessPayments

    payments = InProcessPayments()
    setup = PostgresStore(pgbouncer_dsn, schema=pg_schema)
    errors: list[BaseException] = []
    outcomes: list[str] = []
    # A worker's recover() may meet another's action still on its way and wait it out:
    # what it reports then is that action's outcome, counted apart.
    recovered: list[str] = []
    barrier = threading.Barrier(3)

    def worker(name: str) -> None:
        store = PostgresStore(pgbouncer_dsn, schema=pg_schema)
        gate = Gate(
            store, StripeRefund(payments), timing=TIMING,
            owner=Owner(name, 4242, 0.0, "host-" + name),
            approvers=UNSIGNED_APPROVALS,
        )  # fmt: skip
        try:
            decisions = []
            for _ in range(8):
                payment = payments.create_payment(5_000)
                decisions.append(_intent(_lease(store, payment.id), refunds_fingerprint([])))
            barrier.wait(DEADLINE_S)
            outcomes.extend(gate.submit(intent).status for intent in decisions)
            recovered.extend(o.status for o in gate.recover())
        except BaseException as e:
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b", "c")]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE_S * 2)
            assert not t.is_alive()

        assert errors == []
        assert outcomes == ["sent"] * 24
        assert set(recovered) <= {"sent"}
        assert payments.model.requests.count(("POST", "refunds")) == 24
        result = verify(setup, payments)
        assert result.ok and result.chain_length == 24, result.problems
    finally:
        setup.close()


def test_without_a_schema_the_roles_default_is_used_and_named(pg_dsn: str, pg_schema: str) -> None:
    """A store opened without a schema uses the role's default one (its search_path) and
    is the same store, under the same write lock, as one opened with that schema's name."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    by_default = PostgresStore(
        f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}options=-csearch_path%3D{pg_schema}"
    )
    by_name = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        lease = _lease(by_default, "pi_default")
        assert by_name.lease(lease.id) == lease
        assert by_default._lock_key == by_name._lock_key
    finally:
        by_default.close()
        by_name.close()
