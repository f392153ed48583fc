"""The embedded store: one SQLite file in WAL mode with `synchronous=FULL`.

Safe for many processes on one machine: every write is one `BEGIN IMMEDIATE`
transaction, so the rules' compare-and-set steps are serialized by SQLite's write lock,
and the clock is read after that lock is taken. Every SQLite error surfaces as a
`StoreError` naming the file and what to do; a file that fails its integrity check on
open is refused before anything can be sent against it. The statements are the stores'
own (`interlock._stores.sql`); this backend gives the connection, the transactions and the
file's locks.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

try:
    import fcntl
except ImportError:  # not on Windows: there, SQLite's busy handler alone orders writers
    fcntl = None  # type: ignore[assignment]

from interlock._core.errors import StoreError
from interlock._core.journal import ActionRow, Clock, Turn, Tx
from interlock._core.leases import Lease
from interlock._core.log import StoredHead
from interlock._core.receipts import Receipt
from interlock._stores.sql import (
    SQLITE,
    SQLITE_SCHEMA,
    TABLES,
    Args,
    JournalRow,
    SqlStore,
    Statements,
    action_row,
    head_of,
    journal_row,
    receipt_of,
    turn_of,
)

SCHEMA_VERSION = SQLITE_SCHEMA.version
# The tables every version has (version 4 adds the turns).
_TABLES_OF_EVERY_VERSION = ("meta", "actions", "journal", "leases", "receipts")
_STATEMENTS = Statements(SQLITE, {t: t for t in (*TABLES, "action_metadata")})
# Every commit on the send path reads the action with its lease, taking a claim and
# marking `sending` also read its target's turn, and settling also takes the next receipt
# id: one statement brings all four (SQLite's write lock is the file's, so nothing is
# locked row by row). An intent that is not JSON (edited, or nested past SQLite's depth
# limit) joins no lease and no turn rather than failing the statement, so the row is read
# and its intent reported unreadable by the parse, for that action alone: a store error
# would stop `recover()` at that row on every run.
_GET_ACTION_SQL = """
SELECT a.intent, a.claim, a.settlement, a.attempts, a.receipt_seq, a.unknown, l.lease,
    (SELECT seq FROM receipts ORDER BY seq DESC LIMIT 1),
    {turn}
FROM actions a LEFT JOIN leases l
    ON l.lease_id = CASE WHEN json_valid(a.intent) THEN json_extract(a.intent, '$.lease_id') END
{turns}WHERE a.action_id = ?
"""
_GET_ACTION = _GET_ACTION_SQL.format(
    turn="t.action_id, t.epoch",
    turns=(
        "LEFT JOIN turns t ON t.target =\n"
        "    CASE WHEN json_valid(a.intent) THEN json_extract(a.intent, '$.target') END\n"
    ),
)
# A store before version 4, opened read-only (never migrated), has no turns to join.
_GET_ACTION_BEFORE_TURNS = _GET_ACTION_SQL.format(turn="NULL, NULL", turns="")


def _problem(e: sqlite3.Error) -> str:
    text = str(e)
    if isinstance(e, sqlite3.OperationalError) and "full" in text:
        return f"the disk is full ({text}); free space, then run recovery again"
    if "not a database" in text:
        return f"this file is not an SQLite database ({text}); check the path"
    if isinstance(e, sqlite3.DatabaseError) and ("malformed" in text or "corrupt" in text):
        return (
            f"the file is corrupt ({text}); nothing was sent against it: restore it from a "
            "backup, or move it aside and check Stripe with verify() before sending again"
        )
    if "readonly" in text or "read-only" in text:
        return f"the store cannot be written ({text}); check the file's permissions"
    return f"{text}; check the path, its permissions and free space"


class _SQLiteTx:
    """Rows in and out of one transaction, each statement run as it comes.

    Journal records are written in one statement when the transaction commits (`flush`);
    the lease, the turn and the last receipt id read with an action are kept for the rest
    of it.
    """

    def __init__(self, conn: sqlite3.Connection, now: float, get_action: str = _GET_ACTION) -> None:
        self.c = conn
        self.now = now
        self._get_action = get_action
        self._leases: dict[str, str | None] = {}
        self._turns: dict[str, Turn | None] = {}
        self._last_id: int | None = None
        self._records: list[JournalRow] = []

    def _run(self, sql: str, args: Args = ()) -> Any:
        return self.c.execute(sql, args).fetchone()

    def get_action(self, action_id: str) -> ActionRow | None:
        r = self._run(self._get_action, (action_id,))
        if r is None:
            return None
        row = action_row(r)
        self._leases[row.intent.lease_id] = r[6]
        # Writers take the file's lock in turn: the last id is the last committed one.
        self._last_id = 0 if r[7] is None else int(r[7])
        self._turns[row.intent.target] = turn_of(row.intent.target, r[8:10])
        return row

    def put_action(self, row: ActionRow, *, new: bool) -> None:
        for sql, args in _STATEMENTS.put_action(row, new=new):
            self.c.execute(sql, args)

    def peek_action(self, action_id: str) -> ActionRow | None:
        # The write transaction holds the file's one write lock: a read takes no other.
        return self.get_action(action_id)

    def get_turn(self, target: str) -> Turn | None:
        if target not in self._turns:
            self._turns[target] = turn_of(target, self._run(_STATEMENTS.turn, (target,)))
        return self._turns[target]

    def put_turn(self, turn: Turn) -> None:
        self._turns[turn.target] = turn
        self.c.execute(*_STATEMENTS.put_turn(turn))

    def get_lease(self, lease_id: str) -> Lease | None:
        if lease_id in self._leases:
            text = self._leases[lease_id]
        else:
            r = self._run(_STATEMENTS.lease, (lease_id,))
            text = None if r is None else r[0]
        return None if text is None else Lease.from_text(lease_id, text)

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        sql, args = _STATEMENTS.put_lease(lease, new=new)
        self.c.execute(sql, args)
        self._leases[lease.id] = args[0]

    def journal(self, action_id: str, record: str, data: Mapping[str, Any]) -> None:
        self._records.append(journal_row(action_id, self.now, record, data))

    def flush(self) -> None:
        """Write the transaction's journal records, in order, in one statement."""
        if self._records:
            self.c.execute(*_STATEMENTS.journal(self._records))
            self._records.clear()

    def receipt_id(self) -> int:
        if self._last_id is None:
            r = self._run(_STATEMENTS.last_id)
            self._last_id = 0 if r is None else int(r[0])
        return self._last_id + 1

    def add_receipt(self, receipt: Receipt) -> None:
        self._last_id = receipt.seq
        self.c.execute(*_STATEMENTS.add_receipt(receipt))

    def get_receipt(self, seq: int) -> Receipt | None:
        r = self._run(_STATEMENTS.receipt, (seq,))
        return None if r is None else receipt_of(r)

    def lock_log(self) -> bool:
        # The write transaction holds the file's one write lock.
        return True

    def latest_head(self) -> StoredHead | None:
        return head_of(self._run(_STATEMENTS.latest_head))

    def unlogged(self, limit: int) -> list[tuple[int, str, str]]:
        return [tuple(r) for r in self.c.execute(_STATEMENTS.unlogged, (limit,)).fetchall()]

    def set_leaves(self, places: Sequence[tuple[int, int]]) -> None:
        self.c.executemany(_STATEMENTS.set_leaf, places)

    def add_head(self, head: StoredHead) -> None:
        self.c.execute(*_STATEMENTS.add_head(head))

    def mark_anchored(self, size: int, at: float) -> None:
        self.c.execute(_STATEMENTS.set_anchored, (at, size))


class SQLiteStore(SqlStore):
    """The embedded store: one SQLite file in WAL mode with `synchronous=FULL`.

    Safe for many processes on one machine. `clock` is read inside each write
    transaction, after the write lock is taken. `SQLiteStore.open_read_only(path)` opens
    an existing store for reading only (as `python -m interlock verify` does): it never
    creates, migrates or writes anything.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        clock: Clock = time.time,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.commits = 0
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        self._metadata_indexed = True
        self._get_action = _GET_ACTION
        self._st = _STATEMENTS
        try:
            if read_only:
                if not self.path.is_file():
                    raise StoreError(str(self.path), "no such file; give the path of a store")
                uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
                if not Path(f"{self.path}-wal").exists():
                    # No WAL to read: open it immutable, so SQLite creates no -wal or -shm
                    # beside it (a reader may not write there) (docs/design.md §4).
                    uri += "&immutable=1"
                self._conn = sqlite3.connect(
                    uri, uri=True, timeout=busy_timeout_s, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _create_private(self.path)
                self._conn = sqlite3.connect(
                    str(self.path),
                    timeout=busy_timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
        except (sqlite3.Error, OSError) as e:
            raise StoreError(str(self.path), f"cannot open: {_describe(e)}") from e
        self._queue: int | None = None
        if not read_only and fcntl is not None:
            try:
                self._queue = os.open(f"{self.path}-writers", os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as e:
                self._conn.close()
                raise StoreError(str(self.path), f"cannot open: {_describe(e)}") from e
        try:
            self._set_up(busy_timeout_s)
        except BaseException as e:
            self._conn.close()
            if isinstance(e, sqlite3.Error):
                raise StoreError(str(self.path), f"cannot open: {_problem(e)}") from e
            raise

    def _set_up(self, busy_timeout_s: float) -> None:
        # Switching a new file to WAL (and creating its schema) while another process opens
        # it too can answer "database is locked" at once, without SQLite's busy handler:
        # try again, with a short backoff, for as long as a write would wait.
        deadline = time.monotonic() + busy_timeout_s
        while True:
            try:
                if not self.read_only:
                    self._conn.execute("PRAGMA journal_mode=WAL")
                    self._conn.execute("PRAGMA synchronous=FULL")
                self._check_schema()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    @classmethod
    def open_read_only(cls, path: str | Path) -> SQLiteStore:
        """Open an existing interlock store for reading only."""
        return cls(path, read_only=True)

    def _error(self, e: sqlite3.Error, doing: str) -> StoreError:
        return StoreError(str(self.path), f"{doing}: {_problem(e)}")

    def integrity_problems(self) -> list[str]:
        """SQLite's `quick_check` of every page, as problems (none when the file is sound).

        It reads the whole file, so it runs in `verify()`, not on open: the send path does
        not need it. Every page a send depends on (the action, its lease, its target's turn)
        is read, and checked by SQLite as it is read, in commits 1 and 2, before the call;
        a corrupt one raises `StoreError` there and nothing is sent.
        """
        with self._lock:
            try:
                rows = self._conn.execute("PRAGMA quick_check").fetchall()
            except sqlite3.DatabaseError as e:
                # Damage bad enough that the check itself cannot walk the file.
                return [f"the file is corrupt: {e}"]
        if rows == [("ok",)]:
            return []
        return [f"the file is corrupt: {r[0]}" for r in rows[:20]]

    def _tables(self) -> set[str]:
        rows = self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {str(r[0]) for r in rows}

    def _version(self) -> int | None:
        tables = self._tables()
        if "meta" not in tables:
            if tables and not tables & set(_TABLES_OF_EVERY_VERSION):
                raise StoreError(
                    str(self.path),
                    "is a SQLite file, but not an interlock store; give the path of a store",
                )
            return None
        r = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return None if r is None else int(r[0])

    def _check_schema(self) -> None:
        with self._lock:
            version = self._version()
            if self.read_only:
                if version is None:
                    raise StoreError(
                        str(self.path),
                        "is not an interlock store (no schema version); give the path of a store",
                    )
                # Nothing is migrated read-only: a version 2 to 4 store is read as it is
                # (reading never needs the turns; its receipts are not in a log).
                SQLITE_SCHEMA.check(version, str(self.path), read_only=True)
                self._metadata_indexed = version >= 3
                self._has_log = version >= 5
                if version < 4:
                    self._get_action = _GET_ACTION_BEFORE_TURNS
                missing = set(_TABLES_OF_EVERY_VERSION) - self._tables()
                if missing:
                    raise StoreError(
                        str(self.path),
                        f"is a damaged interlock store: its {', '.join(sorted(missing))} "
                        "table is missing; restore it from a backup",
                    )
                return
            # Read the version before creating anything: a store of another version is
            # refused as it is, not altered first (versions 1 to 4 are migrated in place;
            # the schema's statements create what a version lacks).
            SQLITE_SCHEMA.check(version, str(self.path), read_only=False)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in SQLITE_SCHEMA.upgrade(self._version()):
                    self._conn.execute(_STATEMENTS.sql(statement))
                self._conn.execute(_STATEMENTS.set_version, (str(SCHEMA_VERSION),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        if self.read_only:
            raise StoreError(str(self.path), "opened read-only; nothing can be written")
        with self._lock, self._in_line():
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._error(e, "cannot start a write") from e
            try:
                tx = _SQLiteTx(self._conn, self._clock())
                yield tx
                tx.flush()
                self._conn.execute("COMMIT")
            except BaseException as e:
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise self._error(e, "the write failed and was rolled back") from e
                raise
            self.commits += 1

    @contextmanager
    def _in_line(self) -> Iterator[None]:
        # Writers of this store wait for each other on a lock the kernel hands over the
        # moment it is released (flock on `<file>-writers`; a killed holder's is released
        # by the kernel). SQLite's own busy handler polls with sleeps of up to 100 ms, so
        # under many processes a writer could lose the lock race sleep after sleep: that
        # was the p99. The busy handler still covers writers that are not interlock's.
        if self._queue is None:
            yield
            return
        fcntl.flock(self._queue, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._queue, fcntl.LOCK_UN)

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        with self._lock:
            try:
                self._conn.execute("BEGIN")
            except sqlite3.Error as e:
                raise self._error(e, "cannot read") from e
            try:
                yield _SQLiteTx(self._conn, self._clock(), self._get_action)
            except sqlite3.Error as e:
                raise self._error(e, "cannot read") from e
            finally:
                with suppress(sqlite3.Error):
                    self._conn.execute("COMMIT")

    def _rows(self, sql: str, args: Args = (), *, locking: bool = False) -> list[Any]:
        # SQLite locks the file, not rows: a scan never has rows to lock (`locking`).
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise self._error(e, "cannot read") from e

    def lease(self, lease_id: str) -> Lease | None:
        """One lease, with its spend and reservations (one statement, no transaction)."""
        rows = self._rows(_STATEMENTS.lease, (lease_id,))
        return Lease.from_text(lease_id, rows[0][0]) if rows else None

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()
            if self._queue is not None:
                os.close(self._queue)
                self._queue = None


def _create_private(path: Path) -> None:
    """Create an empty 0600 store file at `path` unless one is there (or appears meanwhile).

    The file holds who approved what and every receipt: a new one is the user's alone
    whatever the umask, and SQLite gives its -wal and -shm the file's own mode; an
    existing file keeps the mode its owner chose. Made under another name and linked into
    place, so that no descriptor on the store itself is opened and closed here: closing
    one drops every SQLite lock this process holds on it (POSIX locks belong to the
    process), and another store in this process may be in a transaction on it.
    """
    if path.exists():
        return
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass
    except OSError:
        # No hard links here (some network or FUSE file systems): create it in place,
        # only if absent, so no descriptor of anyone's open store is ever closed.
        with suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    finally:
        fresh.unlink()


def _describe(e: BaseException) -> str:
    if isinstance(e, sqlite3.Error):
        return _problem(e)
    return f"{e}; check the path and permissions"
