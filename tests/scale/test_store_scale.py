"""The SQLite store does not slow down as it grows (docs/design.md §7): the paths the demo
and the library take use indexes, version 2 and 3 stores are migrated in place, and `verify()`
reads the store a batch at a time with memory bounded."""

from __future__ import annotations

import json
import sqlite3
import time
import tracemalloc
from pathlib import Path

from interlock import (
    Check,
    Intent,
    Lease,
    Owner,
    Settlement,
    SQLiteStore,
    Store,
    new_action_id,
    verify,
)
from interlock._core.receipts import GENESIS_HASH, seal_chained
from interlock._stores.sqlite import SCHEMA_VERSION

OWNER = Owner("scale-worker", 1, 0.0, "test-host")
TTL_S, GRACE_S = 40.0, 2.0


def _settle(store: Store, n: int, *, case: str = "case") -> list[str]:
    """`n` settled actions, each with metadata naming its case (`case-i`) and column."""
    now = time.time()
    store.grant_lease(Lease(f"lease-{case}", "refund", "pi_scale", 10**9, now + 3600, "t", now))
    ids = []
    for i in range(n):
        intent = Intent(
            action_id=new_action_id(),
            kind="refund",
            target="pi_scale",
            amount=100,
            lease_id=f"lease-{case}",
            fingerprint="fp",
            metadata={"case": f"{case}-{i}", "column": "interlock"},
            created_at=now + i,
        )
        epoch = store.begin(intent, OWNER, TTL_S, GRACE_S).epoch
        verdict = Settlement("refused", "test")
        check = Check("lookup", "none", "none", True)
        assert store.settle(intent.action_id, epoch, OWNER, verdict, [check], {}, None)
        ids.append(intent.action_id)
    return ids


def _plans(store: SQLiteStore, call: object) -> list[str]:
    """The query plan of every statement a call sends to the store's connection."""
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        assert callable(call)
        call()
    finally:
        store._conn.set_trace_callback(None)
    return [
        str(row[3])
        for sql in seen
        if sql.lstrip().upper().startswith("SELECT")
        for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql)
    ]


def _drop_the_log(conn: sqlite3.Connection) -> None:
    """Make a store's receipts look as the code before the receipt log (schema 5) wrote
    them: chained format 1 receipts (unsigned, as `_settle` wrote them), no place in a log
    and no tree heads."""
    prev = GENESIS_HASH
    rows = conn.execute("SELECT seq, body FROM receipts ORDER BY seq").fetchall()
    for seq, body in rows:
        fields = {k: v for k, v in json.loads(body).items() if k not in ("v", "signed", "key_id")}
        text, digest, _ = seal_chained(seq, prev, fields, None)
        conn.execute(
            "UPDATE receipts SET body=?, prev_hash=?, hash=? WHERE seq=?", (text, prev, digest, seq)
        )
        prev = digest
    conn.execute("DROP INDEX receipts_leaf")
    conn.execute("DROP INDEX receipts_unlogged")
    conn.execute("ALTER TABLE receipts DROP COLUMN leaf")
    conn.execute("DROP TABLE heads")


def _downgrade_to_version_2(path: Path) -> None:
    """Make a store look as version 2 wrote it: no metadata index, no receipt index, no
    turns, no receipt log."""
    conn = sqlite3.connect(path)
    with conn:
        _drop_the_log(conn)
        conn.execute("DROP TABLE turns")
        conn.execute("DROP TABLE action_metadata")
        conn.execute("DROP INDEX actions_receipt")
        conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    conn.close()


def test_actions_by_metadata_are_looked_up_in_an_index_not_scanned(tmp_path: Path) -> None:
    """`store.actions(metadata)`, what a restarted worker reads, searches indexes only."""
    store = SQLiteStore(tmp_path / "journal.sqlite3")
    ids = _settle(store, 30)

    plans = _plans(store, lambda: store.actions({"case": "case-7", "column": "interlock"}))

    assert store.actions({"case": "case-7", "column": "interlock"}) == [ids[7]]
    assert store.actions({"case": "case-7", "column": "checked"}) == []
    assert store.actions({"column": "interlock"}) == ids
    assert plans and not [p for p in plans if p.startswith("SCAN")], plans


def test_settled_actions_come_in_receipt_order_through_an_index(tmp_path: Path) -> None:
    """`settled()` yields actions by their receipt's number, from an index, a batch at a time."""
    store = SQLiteStore(tmp_path / "journal.sqlite3")
    ids = _settle(store, 1200)

    settled = list(store.settled())
    plans = _plans(store, lambda: list(store.settled()))

    assert [s.action_id for s in settled] == ids
    assert [s.receipt_seq for s in settled] == list(range(1, 1201))
    assert plans and not [p for p in plans if p.startswith("SCAN")], plans


def test_a_version_2_store_is_migrated_in_place_and_read_as_it_is_read_only(
    tmp_path: Path,
) -> None:
    """A version 2 store is read as it is when opened read-only (verify), and gets the
    metadata index, filled from its intents, when opened for writing."""
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    ids = _settle(store, 5)
    store.close()
    _downgrade_to_version_2(path)

    read_only = SQLiteStore.open_read_only(path)
    assert read_only.actions({"case": "case-3"}) == [ids[3]]
    assert verify(read_only).ok
    read_only.close()
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()
    assert version == ("2",)

    migrated = SQLiteStore(path)
    assert migrated.actions({"case": "case-3", "column": "interlock"}) == [ids[3]]
    assert migrated.actions({"column": "interlock"}) == ids
    more = _settle(migrated, 2, case="later")
    assert migrated.actions({"case": "later-1"}) == [more[1]]
    assert [s.action_id for s in migrated.settled()] == ids + more
    assert verify(migrated).ok
    migrated.close()
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_a_version_3_store_gets_its_turns_in_place_and_is_read_as_it_is_read_only(
    tmp_path: Path,
) -> None:
    """A version 3 store (no turns) is read as it is read-only, and gets the turns table
    when opened for writing; a claim taken before holds no turn, so a sibling may take the
    payment's turn, and then the older claim's commit 2 is refused: nothing is sent twice."""
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    ids = _settle(store, 2)
    now = time.time()
    older = Intent(new_action_id(), "refund", "pi_scale", 100, "lease-case", "fp", created_at=now)
    epoch = store.begin(older, OWNER, TTL_S, GRACE_S).epoch
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        _drop_the_log(conn)
        conn.execute("DROP TABLE turns")
        conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.close()

    read_only = SQLiteStore.open_read_only(path)
    assert [s.action_id for s in read_only.settled()] == ids
    state = read_only.action(older.action_id)
    assert state is not None and state.claim is not None and state.claim.epoch == epoch
    assert verify(read_only).ok
    read_only.close()

    migrated = SQLiteStore(path)
    sibling = Intent(new_action_id(), "refund", "pi_scale", 100, "lease-case", "fp")
    assert migrated.begin(sibling, OWNER, TTL_S, GRACE_S).status == "taken"
    assert migrated.mark_sending(older.action_id, epoch, TTL_S).status == "claim_lost"
    migrated.close()
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_verify_keeps_memory_bounded_as_receipts_grow(tmp_path: Path) -> None:
    """verify() over 3,000 receipts allocates about what it does over 1,000 (both more than
    two batches of 500): it streams the chain and the settled actions side by side instead
    of keeping facts per action."""

    def peak(n: int) -> int:
        store = SQLiteStore(tmp_path / f"{n}.sqlite3")
        _settle(store, n)
        tracemalloc.start()
        try:
            result = verify(store)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert result.ok and result.chain_length == n

    small, large = peak(1000), peak(3000)
    # A store three times larger may cost a few more batches of rows, not ten times the memory.
    assert large < 1.3 * small, (small, large)


def test_a_receipt_number_that_cannot_be_read_is_one_action_s_problem_not_a_cascade(
    tmp_path: Path,
) -> None:
    """An action whose receipt number is garbage is reported (no receipt, and the receipt
    it lost), and the actions settled after it are still paired with theirs."""
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    ids = _settle(store, 4)
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE actions SET receipt_seq='x' WHERE action_id=?", (ids[1],))
    conn.close()

    store = SQLiteStore.open_read_only(path)
    result = verify(store)
    store.close()

    assert sorted(result.problems) == [
        f"action {ids[1]}: settled refused with no receipt",
        f"receipt 2 ({ids[1]}): its action is settled, but does not name this receipt",
    ]


def test_sqlite_writers_wait_in_line_on_a_kernel_lock_held_for_the_write(tmp_path: Path) -> None:
    """A write holds `<file>-writers` (flock) from before BEGIN IMMEDIATE to its end, so
    another store's writer waits in the kernel's line (woken at the release) instead of
    SQLite's busy handler, which sleeps up to 100 ms between looks; the file is 0600."""
    import fcntl
    import os

    store = SQLiteStore(tmp_path / "j.sqlite3")
    queue = tmp_path / "j.sqlite3-writers"
    other = os.open(queue, os.O_RDWR)
    try:
        assert queue.stat().st_mode & 0o777 == 0o600
        with store._write():
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
        assert held, "the write did not hold the writers' lock"
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the write
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)
        store.close()
