"""The shared store: PostgreSQL, for workers on many hosts (psycopg 3, extra `postgres`).

The same rules as the other stores (`RuleStore`) and the same statements
(`interlock._stores.sql`); this backend gives the connection, the transactions and the
locking. What PostgreSQL adds:

- **Row-level locks, one fixed order.** There is no store-wide lock: a write takes its
  action's lock (a transaction-scoped advisory lock keyed by the action id, which a new
  action has no row for yet), then the action's row and its lease's row `FOR UPDATE`,
  then, taking a claim or marking `sending`, the target's turn `FOR UPDATE` (the turn's
  holder is read without a lock). Every write takes them in that order (action, lease,
  turn), so two writes never deadlock. A receipt's id comes from a sequence, so commit 3
  waits on no other settle; the receipt log's lock is taken only by `integrate`, without
  waiting (a second sequencer leaves the batch to the first), and store open takes its
  own lock only to create or migrate the tables.
- **The database's clock.** It is read with `clock_timestamp()` after those locks, so
  hosts whose clocks disagree still agree on who holds a claim, and waiting for a lock
  never eats a claim's margin.
- **Few round trips.** Statements go in pipeline mode: a write's first round trip
  carries BEGIN, its locks, its reads and the clock; its last carries every write, the
  journal records (one INSERT) and COMMIT; commit 3 has one more, for the receipt's id.
- **Recovery scans skip rows being changed.** A writer locks the action's row
  (`FOR UPDATE`) when it reads it; `pending()` reads `FOR KEY SHARE SKIP LOCKED`, so a
  recoverer never waits on a row another worker is changing: that worker holds it.
- **Through a transaction-mode pooler.** Nothing lives in the session between
  transactions: locks and settings are transaction-scoped, statements are never
  prepared on the server (`prepare_threshold=None`), and the tables are named with
  their schema rather than through `search_path`.
- **A lost connection.** A connection the server closed while it sat idle (an
  `idle_session_timeout`, `pg_terminate_backend`, a restart) is found on a transaction's
  first round trip and replaced at once. A write whose connection is lost later runs
  again, once, on a new connection: the server rolled the first run back, or, when its
  COMMIT was sent, it may have been kept; every rule is fenced by epoch or changes
  nothing twice, and `mark_sending` and `settle` first look whether the first run was
  kept under their epoch and answer as it would have.
- **Errors.** Every driver error surfaces as a `StoreError` (the DSN without its
  password, what to do) with the driver's error as its cause.

psycopg is imported when a store is made, so `interlock` itself needs no driver.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from interlock._core.claims import Owner
from interlock._core.errors import StoreError
from interlock._core.heads import TreeHead
from interlock._core.journal import (
    ActionRow,
    ActionState,
    ClaimAttempt,
    Clock,
    FirstLook,
    FirstSending,
    Intent,
    SendingAttempt,
    Settlement,
    Turn,
    Tx,
    keeps_off,
)
from interlock._core.leases import Lease
from interlock._core.log import StoredHead
from interlock._core.receipts import Check, Receipt
from interlock._core.signing import SigningKey
from interlock._stores.sql import (
    ACTION_COLUMNS,
    POSTGRES,
    POSTGRES_SCHEMA,
    TABLES,
    Args,
    JournalRow,
    SqlStore,
    Statement,
    Statements,
    action_row,
    head_of,
    journal_row,
    receipt_of,
    turn_of,
)

SCHEMA_VERSION = POSTGRES_SCHEMA.version
# Seconds since the epoch by the database's clock, read when the statement runs (not at
# the transaction's start, as now() would be): after the write lock is taken.
_CLOCK_SQL = "SELECT extract(epoch FROM clock_timestamp())::float8"
# A write's first statement: durable commits whatever the server's default (a setting
# scoped to the transaction, so a pooler's next client never inherits it), then the
# action's own lock (class: the store, key: the action id), which a new action has no row
# for yet. Then, in the same round trip, the row and its lease `FOR UPDATE` and the clock,
# each statement with its own snapshot, taken after the locks before it.
_ACTION_LOCK_SQL = (
    "SELECT set_config('synchronous_commit', 'on', true), pg_advisory_xact_lock(%s, hashtext(%s))"
)


class _Locking:
    """The statements of PostgreSQL's own locking, over one store's tables: the shared
    reads `FOR UPDATE`, and the turn's row made first so that there is a row to lock."""

    def __init__(self, st: Statements) -> None:
        self.action = st.action + " FOR UPDATE"
        self.lease = st.lease + " FOR UPDATE"
        self.lease_of_action = st.sql(
            "SELECT lease_id, lease FROM {leases} WHERE lease_id ="
            " (SELECT intent::jsonb ->> 'lease_id' FROM {actions} WHERE action_id=?) FOR UPDATE"
        )
        self.lease_by_id = st.sql(
            "SELECT lease_id, lease FROM {leases} WHERE lease_id=? FOR UPDATE"
        )
        # A first look's turn and its holder's row, in one statement (one snapshot).
        holder_columns = ", ".join(f"a.{c.strip()}" for c in ACTION_COLUMNS.split(","))
        self.turn_and_holder = st.sql(
            f"SELECT t.action_id, t.epoch, {holder_columns} FROM {{turns}} t"
            " LEFT JOIN {actions} a ON a.action_id = t.action_id WHERE t.target=?"
        )
        self.make_turn = st.sql(
            "INSERT INTO {turns} (target, action_id, epoch) VALUES (?, '', 0)"
            " ON CONFLICT (target) DO NOTHING"
        )
        self.turn = st.turn + " FOR UPDATE"
        target_of = "(SELECT intent::jsonb ->> 'target' FROM {actions} WHERE action_id=?)"
        self.make_turn_of_action = st.sql(
            f"INSERT INTO {{turns}} (target, action_id, epoch) SELECT {target_of}, '', 0"
            f" WHERE {target_of} IS NOT NULL ON CONFLICT (target) DO NOTHING"
        )
        self.turn_of_action = st.sql(
            f"SELECT action_id, epoch, target FROM {{turns}} WHERE target = {target_of} FOR UPDATE"
        )


@dataclass(frozen=True)
class _FirstTrip:
    """What a write takes in its first round trip besides the action's lock, its row and
    its lease: its target's turn (the target given, or the action's own) and a receipt
    id, which it would otherwise fetch in trips of their own."""

    turn_of: str | None = None
    turn_of_action: bool = False
    receipt_id: bool = False
    # The lease of an action that has no row yet (a first attempt's one commit).
    lease_of: str | None = None


_NOTHING_MORE = _FirstTrip()


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by `***`, fit for messages, logs and JSON."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user, _, password = userinfo.partition(":")
            netloc = f"{user}:***@{host}" if password else f"{user}@{host}"
        query = "&".join(
            "password=***" if q.split("=", 1)[0] == "password" else q
            for q in parts.query.split("&")
            if q
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    words = ["password=***" if w.split("=", 1)[0].strip() == "password" else w for w in dsn.split()]
    return " ".join(words)


# Every transaction states the isolation the rules are written for: read committed, where a
# row lock taken by SELECT ... FOR UPDATE is followed by reads of the latest committed rows.
# A server whose default is hardened to serializable would otherwise abort concurrent
# settles with serialization failures (6 of 8 concurrent submits did, one after its refund
# was made).
_BEGIN_WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE"
_BEGIN_READ = "BEGIN ISOLATION LEVEL READ COMMITTED, READ ONLY"


def _lock_key(schema: str, what: str = "store") -> int:
    # One advisory lock per store and use: a signed 64-bit key derived from its schema.
    digest = hashlib.sha256(f"interlock-{what}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _problem(e: BaseException) -> str:
    import psycopg

    text = " ".join(str(e).split()) or type(e).__name__
    # SQLSTATE class 40 (a serialization failure, a deadlock) subclasses OperationalError:
    # checked first, since the connection is fine.
    if str(getattr(e, "sqlstate", None) or "").startswith("40"):
        return (
            f"the database rolled the transaction back to keep concurrent transactions apart "
            f"({text}); nothing of it was kept: retry (recovery finishes any action left "
            "pending)"
        )
    if isinstance(e, psycopg.OperationalError):
        return (
            f"the database connection failed or was lost ({text}); nothing in an "
            "unfinished transaction was kept: check that the server is up and reachable, "
            "then retry (recovery finishes any action left pending)"
        )
    if isinstance(e, psycopg.errors.InsufficientPrivilege):
        return f"permission denied ({text}); grant the role access to the store's schema"
    if isinstance(e, psycopg.errors.ReadOnlySqlTransaction):
        return f"the database is read-only here ({text}); connect to the primary"
    return f"{text}; check the DSN, the server and the role's privileges"


class _ConnectionLost(Exception):
    """A write's connection was lost; `committing` if COMMIT was already sent (so the
    write may have been kept). Internal: the store retries or raises `error`."""

    def __init__(self, error: StoreError, *, committing: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.committing = committing


class _PostgresTx:
    """Rows in and out of one transaction, a round trip at a time (pipeline mode).

    A write's first round trip sends BEGIN, the action's (or the lease's) lock and its
    row read `FOR UPDATE`, and the clock, after the locks; the rules' writes are kept
    and go, with the journal records and COMMIT, in the last one (`commit`). A connection
    found dead on the first round trip (closed by the server while idle) is replaced and
    the round trip sent again: nothing had been sent on it.
    """

    def __init__(
        self, store: PostgresStore, *, write: bool, first: _FirstTrip = _NOTHING_MORE
    ) -> None:
        self.s = store
        self._write = write
        self._first = first
        self._turns: dict[str, Turn | None] = {}
        self._receipt_id: int | None = None
        self._started = False
        self._now: float | None = None
        self._leases: dict[str, Lease | None] = {}
        self._writes: list[Statement] = []
        self._records: list[JournalRow] = []

    @property
    def now(self) -> float:
        """The store's clock in this transaction (a write reads it after its row locks)."""
        if self._now is None:
            self._clocked([] if self.s._clock is not None else self._trip([(_CLOCK_SQL, ())])[0])
        assert self._now is not None
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def _clocked(self, rows: list[Any]) -> None:
        # The database's clock as read in the trip that took the locks, or the injected one
        # read now, after it.
        self._now = self.s._clock() if self.s._clock is not None else float(rows[0][0])

    def _trip(self, statements: list[Statement], *, last: bool = False) -> list[list[Any]]:
        """Send `statements` in one round trip; each one's rows (empty for none)."""
        first = not self._started
        if first:
            begin = _BEGIN_WRITE if self._write else _BEGIN_READ
            statements = [(begin, ()), *statements]
        for retry in (False, True):
            conn = self.s._connection()
            try:
                cursors = []
                with conn.pipeline():
                    for sql, args in statements:
                        cur = conn.cursor()
                        cur.execute(sql, args)
                        cursors.append(cur)
                rows = [c.fetchall() if c.description is not None else [] for c in cursors]
                self._started = True
                return rows[1:] if first else rows
            except self.s._psycopg.OperationalError as e:
                if conn.closed or conn.broken:
                    if first and not retry:
                        continue
                    if not self._write:
                        if last:
                            return []  # a read's COMMIT: nothing was there to keep
                        doing = "cannot read"
                    elif last:
                        doing = (
                            "the commit's answer was lost, so it may or may not have been "
                            "kept (recovery settles the action either way)"
                        )
                    else:
                        doing = "the write failed and was rolled back"
                    raise _ConnectionLost(self.s._error(e, doing), committing=last) from e
                raise
        raise AssertionError("unreachable")

    def get_action(self, action_id: str) -> ActionRow | None:
        st, locking = self.s._st, self.s._locking
        if self._write and not self._started:
            # Locks in the one order every write takes them: the action, its lease, its
            # target's turn; the clock last, so that waiting for them eats no margin.
            first = self._first
            more: list[Statement] = []
            if first.turn_of is not None:
                more += [(locking.make_turn, (first.turn_of,)), (locking.turn, (first.turn_of,))]
            elif first.turn_of_action:
                more += [
                    (locking.make_turn_of_action, (action_id, action_id)),
                    (locking.turn_of_action, (action_id,)),
                ]
            if first.receipt_id:
                more.append((st.next_id, ()))
            lease_read = (
                (locking.lease_of_action, (action_id,))
                if first.lease_of is None
                else (locking.lease_by_id, (first.lease_of,))
            )
            _, action, lease, *got, clock = self._trip(
                [
                    (_ACTION_LOCK_SQL, self.s._action_lock(action_id)),
                    (locking.action, (action_id,)),
                    lease_read,
                    *more,
                    (_CLOCK_SQL, ()),
                ]
            )
            self._clocked(clock)
            if first.turn_of is not None:
                self._turns[first.turn_of] = turn_of(first.turn_of, got[1][0] if got[1] else None)
            elif first.turn_of_action and got[1]:
                *held, target = got[1][0]
                self._turns[str(target)] = turn_of(str(target), held)
            if first.receipt_id:
                self._receipt_id = int(got[-1][0][0])
            if lease:
                self._leases[str(lease[0][0])] = Lease.from_text(str(lease[0][0]), lease[0][1])
            elif first.lease_of is not None:
                self._leases[first.lease_of] = None
        else:
            (action,) = self._trip([(locking.action if self._write else st.action, (action_id,))])
        if not action:
            return None
        row = action_row(action[0])
        if self._write:
            self._leases.setdefault(row.intent.lease_id, None)
        return row

    def peek_action(self, action_id: str) -> ActionRow | None:
        # Without FOR UPDATE: a turn's holder is read, never locked, so that the lock order
        # stays one (own action, lease, turn, chain) and no two writes wait on each other.
        (action,) = self._trip([(self.s._st.action, (action_id,))])
        return action_row(action[0]) if action else None

    def get_turn(self, target: str) -> Turn | None:
        # The row is made first if missing, so that FOR UPDATE has a row to lock: two
        # writers that both found none would otherwise both take the turn.
        # The clock is read again after the lock: waiting for it must eat no claim's margin.
        if target in self._turns:
            return self._turns[target]
        locking = self.s._locking
        _, rows, clock = self._trip(
            [(locking.make_turn, (target,)), (locking.turn, (target,)), (_CLOCK_SQL, ())]
        )
        self._clocked(clock)
        return turn_of(target, rows[0] if rows else None)

    def put_turn(self, turn: Turn) -> None:
        self._writes.append(self.s._st.put_turn(turn))

    def put_action(self, row: ActionRow, *, new: bool) -> None:
        self._writes += self.s._st.put_action(row, new=new)

    def get_lease(self, lease_id: str) -> Lease | None:
        if lease_id in self._leases:
            return self._leases[lease_id]
        if self._write:
            rows, clock = self._trip([(self.s._locking.lease, (lease_id,)), (_CLOCK_SQL, ())])
            if self._now is None:
                self._clocked(clock)
        else:
            (rows,) = self._trip([(self.s._st.lease, (lease_id,))])
        lease = None if not rows else Lease.from_text(lease_id, rows[0][0])
        if self._write:
            self._leases[lease_id] = lease
        return lease

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        self._leases[lease.id] = lease
        self._writes.append(self.s._st.put_lease(lease, new=new))

    def journal(self, action_id: str, record: str, data: Mapping[str, Any]) -> None:
        self._records.append(journal_row(action_id, self.now, record, data))

    def commit(self) -> None:
        """Send the kept writes, the journal records (one INSERT) and COMMIT, in one trip."""
        writes = list(self._writes)
        if self._records:
            writes.append(self.s._st.journal(self._records))
        self._writes.clear()
        self._records.clear()
        if not self._started and not writes:
            return
        self._trip([*writes, ("COMMIT", ())], last=True)

    def receipt_id(self) -> int:
        if self._receipt_id is not None:
            return self._receipt_id
        (rows,) = self._trip([(self.s._st.next_id, ())])
        return int(rows[0][0])

    def add_receipt(self, receipt: Receipt) -> None:
        self._writes.append(self.s._st.add_receipt(receipt))

    def get_receipt(self, seq: int) -> Receipt | None:
        st = self.s._st
        for sql, args in self._writes:
            if sql == st.insert_receipt and args[0] == seq:
                return receipt_of(args)
        (rows,) = self._trip([(st.receipt, (seq,))])
        return None if not rows else receipt_of(rows[0])

    def lock_log(self) -> bool:
        (rows,) = self._trip([("SELECT pg_try_advisory_xact_lock(%s)", (self.s._log_key,))])
        return bool(rows[0][0])

    def latest_head(self) -> StoredHead | None:
        (rows,) = self._trip([(self.s._st.latest_head, ())])
        return head_of(rows[0] if rows else None)

    def unlogged(self, limit: int) -> list[tuple[int, str, str]]:
        (rows,) = self._trip([(self.s._st.unlogged, (limit,))])
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def set_leaves(self, places: Sequence[tuple[int, int]]) -> None:
        self._writes += [(self.s._st.set_leaf, place) for place in places]

    def add_head(self, head: StoredHead) -> None:
        self._writes.append(self.s._st.add_head(head))

    def mark_anchored(self, size: int, at: float) -> None:
        self._writes.append((self.s._st.set_anchored, (at, size)))

    def rollback(self) -> None:
        """End the transaction without keeping anything (quietly, on a lost connection)."""
        conn = self.s._conn
        if self._started and conn is not None and not conn.closed and not conn.broken:
            with suppress(self.s._psycopg.Error):
                conn.execute("ROLLBACK")


class PostgresStore(SqlStore):
    """The shared store: PostgreSQL, for workers on many hosts (needs the `postgres` extra).

    `dsn` is a libpq connection string or `postgresql://` URL. The tables live in
    `schema` when given (created if missing, so the store can live in an application's
    existing database), else in the role's default schema; they are created and
    versioned on first use. Claims take their times from the database's clock
    (`clock_source="database"`); a callable `clock_source` is read in its place, at the
    same point (after the write lock), which only tests need. `read_only=True` opens an
    existing store in `READ ONLY` transactions and never creates, migrates or writes
    anything (`PostgresStore.open_read_only`, as `python -m interlock verify` does).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        clock_source: Literal["database"] | Clock = "database",
        read_only: bool = False,
        connect_timeout_s: float = 10.0,
    ) -> None:
        try:
            import psycopg
        except ImportError as e:
            raise StoreError(
                redact_dsn(dsn),
                "PostgreSQL needs psycopg: install the extra"
                " (pip install './packaging/interlock[postgres]')",
            ) from e
        self._psycopg = psycopg
        self.dsn = dsn
        self.location = redact_dsn(dsn) + (f" (schema {schema})" if schema else "")
        self.schema = schema
        self.read_only = read_only
        self.commits = 0
        if not (clock_source == "database" or callable(clock_source)):
            raise ValueError(f"clock_source must be 'database' or a clock, not {clock_source!r}")
        self._clock: Callable[[], float] | None = (
            None if clock_source == "database" else clock_source
        )
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.RLock()
        self._conn: Any = None
        self._closed = False
        # What the next write's first round trip takes besides its action (see `_planned`).
        self._first = _NOTHING_MORE
        self._metadata_indexed = False
        with self._lock:
            try:
                self._resolve_schema()
                self._check_schema()
            except BaseException:
                self.close()
                raise

    @classmethod
    def open_read_only(cls, dsn: str, *, schema: str | None = None) -> PostgresStore:
        """Open an existing interlock store for reading only."""
        return cls(dsn, schema=schema, read_only=True)

    @staticmethod
    def describe(location: str | Path) -> str:
        """Where a store lives, fit for logs, JSON and messages: a URL with its password
        replaced by `***`, a path as it is (so it takes whatever `open_store` takes).

        Any URL, not only PostgreSQL's: a mistyped scheme must not print its password either.
        """
        text = str(location)
        return redact_dsn(text) if "://" in text else text

    def _error(self, e: BaseException, doing: str) -> StoreError:
        return StoreError(self.location, f"{doing}: {_problem(e)}")

    def _connection(self) -> Any:
        # A connection lost earlier (the server restarted, a pooler dropped it) is replaced
        # here, between transactions, never in the middle of one.
        if self._conn is None or self._conn.closed or self._conn.broken:
            # Closed by its owner: a late caller (a gate's log timer) must not open a new
            # connection nobody will close.
            if self._closed:
                raise StoreError(self.location, "the store was closed; open it again to use it")
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
            self._conn = None
            try:
                self._conn = self._psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    prepare_threshold=None,
                    connect_timeout=max(1, round(self._connect_timeout_s)),
                    application_name="interlock",
                )
            except self._psycopg.Error as e:
                raise self._error(e, "cannot connect") from e
        return self._conn

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        conn = self._connection()
        try:
            cur = conn.cursor()
            cur.execute(_BEGIN_WRITE if write else _BEGIN_READ)
        except self._psycopg.Error as e:
            raise self._error(e, "cannot start a transaction") from e
        committing = False
        try:
            yield cur
            committing = True
            cur.execute("COMMIT")
        except BaseException as e:
            if not conn.closed and not conn.broken:
                with suppress(self._psycopg.Error):
                    cur.execute("ROLLBACK")
            if isinstance(e, self._psycopg.Error):
                if not write:
                    doing = "cannot read"
                elif committing and isinstance(e, self._psycopg.OperationalError):
                    # The answer to COMMIT is lost: it may or may not have been kept.
                    doing = (
                        "the commit's answer was lost, so it may or may not have been kept "
                        "(recovery settles the action either way)"
                    )
                else:
                    doing = "the write failed and was rolled back"
                raise self._error(e, doing) from e
            raise
        finally:
            with suppress(self._psycopg.Error):
                cur.close()

    def _resolve_schema(self) -> None:
        # Without a schema the tables go to the role's default one. Its name, resolved
        # once, qualifies every table and keys the write lock, so that a store opened
        # without a schema and one opened with that schema's name share one lock.
        schema = self.schema
        if schema is None:
            with self._transaction(write=False) as cur:
                cur.execute("SELECT current_schema()")
                schema = cur.fetchone()[0]
            if schema is None:
                raise StoreError(
                    self.location,
                    "the role has no default schema (search_path); give schema=NAME, or "
                    "?schema=NAME in the URL",
                )
        self._schema_name = str(schema)
        prefix = _quote_ident(self._schema_name) + "."
        self._st = Statements(POSTGRES, {t: f"{prefix}interlock_{t}" for t in TABLES})
        self._locking = _Locking(self._st)
        self._lock_key = _lock_key(self._schema_name)
        self._log_key = _lock_key(self._schema_name, "receipt-log")
        self._action_lock_class = self._lock_key >> 32

    def _version(self, cur: Any) -> int | None:
        cur.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s"
            " AND table_name = 'interlock_meta'",
            (self._schema_name,),
        )
        if int(cur.fetchone()[0]) == 0:
            return None
        cur.execute(self._st.meta_version)
        r = cur.fetchone()
        return None if r is None else int(r[0])

    def _check_schema(self) -> None:
        if self.read_only:
            with self._transaction(write=False) as cur:
                version = self._version(cur)
            if version is None:
                raise StoreError(
                    self.location, "is not an interlock store (no schema version); check the DSN"
                )
            # Nothing is migrated read-only: a version 2 or 3 store is read as it is
            # (reading never needs the turns; its receipts are not in a log).
            POSTGRES_SCHEMA.check(version, self.location, read_only=True)
            self._has_log = version >= 4
            return
        with self._transaction(write=True) as cur:
            # A store of this version opens without a lock: a restart never queues behind
            # another process's open.
            if self._version(cur) == SCHEMA_VERSION:
                return
            # Two processes creating the tables at once would collide in the catalog.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            version = self._version(cur)
            POSTGRES_SCHEMA.check(version, self.location, read_only=False)
            if version == SCHEMA_VERSION:
                return
            if version is None and self.schema is not None:
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
            for statement in POSTGRES_SCHEMA.upgrade(version):
                cur.execute(self._st.sql(statement))
            cur.execute(self._st.set_version, (str(SCHEMA_VERSION),))

    def _action_lock(self, action_id: str) -> tuple[int, str]:
        return (self._action_lock_class, action_id)

    @contextmanager
    def _planned(self, first: _FirstTrip) -> Iterator[None]:
        """The writes of one rule (its run again on a new connection included) take
        `first` in their first round trip: a trip for each saved."""
        with self._lock:
            self._first = first
            try:
                yield
            finally:
                self._first = _NOTHING_MORE

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        if self.read_only:
            raise StoreError(self.location, "opened read-only; nothing can be written")
        with self._lock:
            tx = _PostgresTx(self, write=True, first=self._first)
            try:
                yield tx
                tx.commit()
            except _ConnectionLost:
                raise
            except BaseException as e:
                tx.rollback()
                if isinstance(e, self._psycopg.Error):
                    raise self._error(e, "the write failed and was rolled back") from e
                raise
        self.commits += 1

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        with self._lock:
            tx = _PostgresTx(self, write=False)
            try:
                yield tx
                tx.commit()
            except _ConnectionLost:
                raise
            except BaseException as e:
                tx.rollback()
                if isinstance(e, self._psycopg.Error):
                    raise self._error(e, "cannot read") from e
                raise

    def _rows(self, sql: str, args: Args = (), *, locking: bool = False) -> list[Any]:
        return self._rows_in_one_trip([(sql, args)], locking=locking)[0]

    def _rows_in_one_trip(
        self, statements: list[Statement], *, locking: bool = False
    ) -> list[list[Any]]:
        """Each statement's rows, all of them and COMMIT sent in one round trip (again on
        a new connection if lost)."""
        with self._lock:
            tx = _PostgresTx(self, write=locking)
            try:
                *rows, _ = tx._trip([*statements, ("COMMIT", ())])
                return rows
            except _ConnectionLost as lost:
                raise lost.error from lost.__cause__
            except BaseException as e:
                tx.rollback()
                if isinstance(e, self._psycopg.Error):
                    raise self._error(e, "cannot read") from e
                raise

    # A write whose connection was lost runs again, once, on a new connection. Each rule
    # is fenced (by epoch, or it changes nothing twice), so a second run is safe; where
    # the first run's COMMIT was sent, it may have been kept, so the store first looks
    # whether it was and answers as that run would have.

    def now(self) -> float:
        """The database's clock (see `Store.now`), read again on a new connection if lost."""
        try:
            return super().now()
        except _ConnectionLost:
            return super().now()

    def action(self, action_id: str) -> ActionState | None:
        """One action (see `Store.action`), read again on a new connection if lost."""
        try:
            return super().action(action_id)
        except _ConnectionLost:
            return super().action(action_id)

    def lease(self, lease_id: str) -> Lease | None:
        """One lease (see `Store.lease`): its read and its COMMIT in one round trip, sent
        again on a new connection if lost."""
        rows = self._rows(self._st.lease, (lease_id,))
        return Lease.from_text(lease_id, rows[0][0]) if rows else None

    def begin(self, intent: Intent, owner: Owner, ttl_s: float, grace_s: float) -> ClaimAttempt:
        """Commit 1 (see `Store.begin`), once more on a new connection if its own was lost:
        a kept first run left a claim of this owner, which it takes again, a new epoch."""
        with self._planned(_FirstTrip(turn_of=intent.target)):
            try:
                return super().begin(intent, owner, ttl_s, grace_s)
            except _ConnectionLost:
                return super().begin(intent, owner, ttl_s, grace_s)

    def first_look(self, intent: Intent, grace_s: float) -> FirstLook:
        """A first attempt's look (see `Store.first_look`) in one round trip with its
        COMMIT: the lease, whether the action is journaled, the turn joined with its
        holder's row (one statement, one snapshot), and the clock."""
        st, locking = self._st, self._locking
        lease_rows, action, turn_rows, clock = self._rows_in_one_trip(
            [
                (st.lease, (intent.lease_id,)),
                (st.action, (intent.action_id,)),
                (locking.turn_and_holder, (intent.target,)),
                (_CLOCK_SQL, ()),
            ]
        )
        lease = Lease.from_text(intent.lease_id, lease_rows[0][0]) if lease_rows else None
        if action:
            return FirstLook(False, lease=lease)
        turn = turn_of(intent.target, turn_rows[0][:2] if turn_rows else None)
        if turn is None:
            return FirstLook(True, None, lease)
        seen = (turn.action_id, turn.epoch)
        holder = None if turn_rows[0][2] is None else action_row(turn_rows[0][2:])
        now = self._clock() if self._clock is not None else float(clock[0][0])
        return FirstLook(not keeps_off(holder, now, grace_s), seen, lease)

    def begin_sending(
        self,
        intent: Intent,
        owner: Owner,
        ttl_s: float,
        seen: tuple[str, int] | None,
        *,
        approval: str | None,
        evidence: Mapping[str, str] | None = None,
    ) -> FirstSending:
        """A first attempt's one commit (see `Store.begin_sending`): the locks, the rows and
        the clock in its first round trip, the writes and COMMIT in the second. Once more
        on a new connection if its own was lost; a lost COMMIT that was kept left the
        action journaled, which is answered from the row."""
        planned = _FirstTrip(turn_of=intent.target, lease_of=intent.lease_id)
        args = (intent, owner, ttl_s, seen)
        with self._planned(planned):
            try:
                return super().begin_sending(*args, approval=approval, evidence=evidence)
            except _ConnectionLost:
                state = self.action(intent.action_id)
                claim = None if state is None else state.claim
                if (
                    state is not None
                    and claim is not None
                    and (claim.owner, claim.epoch, claim.sending) == (owner, 1, True)
                    and state.settlement is None
                ):
                    now = self.now()
                    if claim.live(now):
                        return FirstSending("ok", state=state, left_s=claim.expires_at - now)
                return super().begin_sending(*args, approval=approval, evidence=evidence)

    def take_claim(
        self, action_id: str, owner: Owner, ttl_s: float, grace_s: float, *, found_own: bool = False
    ) -> ClaimAttempt:
        """Take a claim (see `Store.take_claim`), once more on a new connection if its own
        was lost (a kept first run's claim is this owner's: taken again, a new epoch)."""
        with self._planned(_FirstTrip(turn_of_action=True)):
            try:
                return super().take_claim(action_id, owner, ttl_s, grace_s, found_own=found_own)
            except _ConnectionLost:
                return super().take_claim(action_id, owner, ttl_s, grace_s, found_own=found_own)

    def mark_sending(
        self,
        action_id: str,
        epoch: int,
        ttl_s: float,
        *,
        approval: str | None = None,
        evidence: Mapping[str, str] | None = None,
    ) -> SendingAttempt:
        """Commit 2 (see `Store.mark_sending`), once more on a new connection if its own was
        lost; a lost COMMIT that was kept is answered from the row."""
        with self._planned(_FirstTrip(turn_of_action=True)):
            try:
                return super().mark_sending(
                    action_id, epoch, ttl_s, approval=approval, evidence=evidence
                )
            except _ConnectionLost:
                state = self.action(action_id)
                claim = None if state is None else state.claim
                if (
                    state is not None
                    and state.settlement is None
                    and claim is not None
                    and claim.epoch == epoch
                    and claim.sending
                ):
                    now = self.now()
                    if claim.live(now):
                        return SendingAttempt("ok", claim=claim, left_s=claim.expires_at - now)
                return super().mark_sending(
                    action_id, epoch, ttl_s, approval=approval, evidence=evidence
                )

    def mark_unknown(self, action_id: str, reason: str) -> None:
        """Mark unknown (see `Store.mark_unknown`), once more on a new connection if lost."""
        try:
            super().mark_unknown(action_id, reason)
        except _ConnectionLost:
            super().mark_unknown(action_id, reason)

    def release(self, action_id: str, epoch: int) -> None:
        """Release (see `Store.release`), once more on a new connection if lost."""
        try:
            super().release(action_id, epoch)
        except _ConnectionLost:
            super().release(action_id, epoch)

    def settle(
        self,
        action_id: str,
        epoch: int,
        owner: Owner,
        settlement: Settlement,
        checks: list[Check],
        extra: Mapping[str, Any],
        key: SigningKey | None,
    ) -> Receipt | None:
        """Commit 3 (see `Store.settle`), once more on a new connection if its own was lost;
        a lost COMMIT that was kept (settled under this epoch) answers with its receipt."""
        args = (action_id, epoch, owner, settlement, checks, extra, key)
        with self._planned(_FirstTrip(receipt_id=True)):
            try:
                return super().settle(*args)
            except _ConnectionLost:
                state = self.action(action_id)
                if (
                    state is not None
                    and state.settlement is not None
                    and state.claim is not None
                    and state.claim.epoch == epoch
                ):
                    return state.receipt
                return super().settle(*args)

    def integrate(self, key: SigningKey | None) -> TreeHead | None:
        """Number the unlogged receipts (see `Store.integrate`), once more on a new
        connection if lost: a lost COMMIT that was kept leaves none to number again."""
        try:
            return super().integrate(key)
        except _ConnectionLost:
            return super().integrate(key)

    def mark_anchored(self, size: int, at: float) -> None:
        """Record a head as anchored (see `Store.mark_anchored`), once more if lost."""
        try:
            super().mark_anchored(size, at)
        except _ConnectionLost:
            super().mark_anchored(size, at)

    def grant_lease(self, lease: Lease) -> Lease:
        """Store a new lease (see `Store.grant_lease`), once more on a new connection if
        lost; a lost COMMIT that was kept is found as this very lease."""
        try:
            return super().grant_lease(lease)
        except _ConnectionLost:
            if self.lease(lease.id) == lease:
                return lease
            return super().grant_lease(lease)

    def revoke_lease(self, lease_id: str, by: str, **receipt: Any) -> Lease:
        """Revoke (see `Store.revoke_lease`), once more on a new connection if lost: a lost
        COMMIT that was kept is found revoked, naming its receipt, and is not written twice."""
        try:
            return super().revoke_lease(lease_id, by, **receipt)
        except _ConnectionLost:
            return super().revoke_lease(lease_id, by, **receipt)

    def integrity_problems(self) -> list[str]:
        """The server keeps its own pages sound (and reports damage on every read): none."""
        return []

    def close(self) -> None:
        """Close the connection; the store is not used again."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
                self._conn = None


def is_postgres_url(location: str) -> bool:
    """Whether `location` names a PostgreSQL database (a `postgresql://` or `postgres://` URL)."""
    return location.startswith(("postgresql://", "postgres://"))
