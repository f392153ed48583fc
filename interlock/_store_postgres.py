"""The shared store: PostgreSQL, for workers on many hosts (psycopg 3, extra `postgres`).

The same rules as the other stores (`RuleStore`); this backend only stores rows. What
PostgreSQL adds:

- **The database's clock.** Every write transaction first takes one transaction-scoped
  advisory lock (the store's write lock, as `BEGIN IMMEDIATE` is SQLite's), then reads
  `clock_timestamp()`: claimed-at, expires-at and every "time left" check use that clock,
  so hosts whose clocks disagree still agree on who holds a claim, and waiting for the
  lock never eats a claim's margin. The rules serialize on this lock because the receipt
  chain is one chain and a lease is shared by many actions.
- **Recovery scans skip rows being changed.** A writer locks the action's row
  (`FOR UPDATE`) when it reads it; `pending()` reads `FOR KEY SHARE SKIP LOCKED`, so a
  recoverer never waits on a row another worker is changing: that worker holds it.
- **Through a transaction-mode pooler.** Nothing lives in the session between
  transactions: locks and settings are transaction-scoped, statements are never
  prepared on the server (`prepare_threshold=None`), and the tables are named with
  their schema rather than through `search_path`.
- **Errors.** Every driver error surfaces as a `StoreError` (the DSN without its
  password, what to do) with the driver's error as its cause. A connection lost in the
  middle of a transaction settles nothing: the server rolls it back; the next call opens
  a new connection.

psycopg is imported when a store is made, so `interlock` itself needs no driver.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from interlock._errors import SchemaVersionError, StoreError
from interlock._journal import (
    GENESIS,
    SCHEMA_VERSION,
    ActionRow,
    Clock,
    Intent,
    JournalRecord,
    RuleStore,
    SettledAction,
    Tx,
)
from interlock._leases import Lease
from interlock._receipts import Receipt, canonical_json

_BATCH = 500
# Seconds since the epoch by the database's clock, read when the statement runs (not at
# the transaction's start, as now() would be): after the write lock is taken.
_CLOCK_SQL = "SELECT extract(epoch FROM clock_timestamp())::float8"
# A write's first statement: durable commits whatever the server's default (a setting
# scoped to the transaction, so a pooler's next client never inherits it), then the
# store's write lock. The clock is read in the outer query, which cannot produce its row
# before the subquery (kept apart by OFFSET 0) has taken the lock: one round trip.
_LOCK_SQL = "SELECT set_config('synchronous_commit', 'on', true), pg_advisory_xact_lock(%s)"
# A write reads the action with its lease and the receipt chain's head, in one statement;
# the action's row is locked (`FOR UPDATE`), which is what recovery scans skip.
_GET_ACTION_FOR_WRITE = """
SELECT a.intent, a.claim, a.settlement, a.attempts, a.receipt_seq, a.unknown,
    a.intent::jsonb ->> 'lease_id', l.lease, h.seq, h.hash
FROM {actions} a
LEFT JOIN {leases} l ON l.lease_id = a.intent::jsonb ->> 'lease_id'
LEFT JOIN LATERAL (SELECT seq, hash FROM {receipts} ORDER BY seq DESC LIMIT 1) h ON true
WHERE a.action_id = %s
FOR UPDATE OF a
"""
_LOCK_THEN_CLOCK_SQL = (
    f"SELECT extract(epoch FROM clock_timestamp())::float8 FROM ({_LOCK_SQL} OFFSET 0) AS locked"
)


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


def _lock_key(schema: str) -> int:
    # One advisory lock per store: a signed 64-bit key derived from its schema.
    digest = hashlib.sha256(f"interlock-store:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _problem(e: BaseException) -> str:
    import psycopg

    text = " ".join(str(e).split()) or type(e).__name__
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


class _PostgresTx:
    """Rows in and out of one transaction.

    A write reads an action together with its lease and the receipt chain's head (every
    commit on the send path needs them) and keeps them for the rest of the transaction,
    which holds the store's write lock, so they cannot change underneath it; journal
    records go in one INSERT when the transaction commits (`flush`).
    """

    def __init__(self, store: PostgresStore, cur: Any, now: float | None, *, write: bool) -> None:
        self.s = store
        self.c = cur
        self._now = now
        self._write = write
        self._leases: dict[str, Lease | None] = {}
        self._head: tuple[int, str] | None = None
        self._records: list[tuple[str, float, str, str]] = []

    @property
    def now(self) -> float:
        """The store's clock in this transaction (a write reads it right after its lock; a
        read, only if asked, so reading a lease costs no extra round trip)."""
        if self._now is None:
            self._now = self.s._now(self.c)
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        self.c.execute(self.s._sql(sql), args)
        return self.c.fetchone()

    def get_action(self, action_id: str) -> ActionRow | None:
        if self._write:
            r = self._one(_GET_ACTION_FOR_WRITE, (action_id,))
        else:
            r = self._one(
                "SELECT intent, claim, settlement, attempts, receipt_seq, unknown"
                " FROM {actions} WHERE action_id=%s",
                (action_id,),
            )
        if r is None:
            return None
        if self._write:
            lease_id, lease, head_seq, head_hash = r[6:10]
            self._leases.setdefault(
                str(lease_id), None if lease is None else Lease.from_dict(json.loads(lease))
            )
            if self._head is None:
                self._head = GENESIS if head_seq is None else (int(head_seq), str(head_hash))
        return ActionRow.from_columns(Intent.from_dict(json.loads(r[0])), *r[1:6])

    def put_action(self, row: ActionRow, *, new: bool) -> None:
        values = row.columns()
        if new:
            self.c.execute(
                self.s._sql(
                    "INSERT INTO {actions} (claim, settlement, attempts, receipt_seq, unknown,"
                    " action_id, kind, intent, created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                ),
                (
                    *values,
                    row.intent.action_id,
                    row.intent.kind,
                    canonical_json(row.intent.to_dict()),
                    row.intent.created_at,
                ),
            )
        else:
            # The intent never changes once journaled, so it is not written again.
            self.c.execute(
                self.s._sql(
                    "UPDATE {actions} SET claim=%s, settlement=%s, attempts=%s, receipt_seq=%s,"
                    " unknown=%s WHERE action_id=%s"
                ),
                (*values, row.intent.action_id),
            )

    def get_lease(self, lease_id: str) -> Lease | None:
        if lease_id in self._leases:
            return self._leases[lease_id]
        r = self._one("SELECT lease FROM {leases} WHERE lease_id=%s", (lease_id,))
        return None if r is None else Lease.from_dict(json.loads(r[0]))

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        self._leases[lease.id] = lease
        text = canonical_json(lease.to_dict())
        if new:
            sql = "INSERT INTO {leases} (lease, lease_id) VALUES (%s, %s)"
        else:
            sql = "UPDATE {leases} SET lease=%s WHERE lease_id=%s"
        self.c.execute(self.s._sql(sql), (text, lease.id))

    def journal(self, action_id: str, record: str, data: Mapping[str, Any]) -> None:
        self._records.append((action_id, self.now, record, canonical_json(dict(data))))

    def flush(self) -> None:
        """Write the journal records of this transaction, in order, in one statement."""
        if not self._records:
            return
        rows = ",".join(["(%s,%s,%s,%s)"] * len(self._records))
        self.c.execute(
            self.s._sql(f"INSERT INTO {{journal}} (action_id, at, record, data) VALUES {rows}"),
            [v for record in self._records for v in record],
        )
        self._records.clear()

    def last_receipt(self) -> tuple[int, str]:
        if self._head is not None:
            return self._head
        r = self._one("SELECT seq, hash FROM {receipts} ORDER BY seq DESC LIMIT 1")
        return GENESIS if r is None else (int(r[0]), str(r[1]))

    def add_receipt(self, receipt: Receipt) -> None:
        self._head = (receipt.seq, receipt.hash)
        self.c.execute(
            self.s._sql(
                "INSERT INTO {receipts} (seq, action_id, body, prev_hash, hash, signature)"
                " VALUES (%s,%s,%s,%s,%s,%s)"
            ),
            (
                receipt.seq,
                receipt.action_id,
                receipt.body_text,
                receipt.prev_hash,
                receipt.hash,
                receipt.signature,
            ),
        )

    def get_receipt(self, seq: int) -> Receipt | None:
        r = self._one(
            "SELECT seq, action_id, body, prev_hash, hash, signature FROM {receipts} WHERE seq=%s",
            (seq,),
        )
        return None if r is None else Receipt(int(r[0]), *r[1:])


class PostgresStore(RuleStore):
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
                " (pip install 'interlock-demo[postgres]')",
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

    def _sql(self, text: str) -> str:
        return text.format(**self._names)

    def _error(self, e: BaseException, doing: str) -> StoreError:
        return StoreError(self.location, f"{doing}: {_problem(e)}")

    def _connection(self) -> Any:
        # A connection lost earlier (the server restarted, a pooler dropped it) is replaced
        # here, between transactions, never in the middle of one.
        if self._conn is None or self._conn.closed or self._conn.broken:
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
            cur.execute("BEGIN READ WRITE" if write else "BEGIN READ ONLY")
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

    def _now(self, cur: Any) -> float:
        if self._clock is not None:
            return self._clock()
        cur.execute(_CLOCK_SQL)
        return float(cur.fetchone()[0])

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
        self._names = {
            t: f"{prefix}interlock_{t}"
            for t in ("meta", "actions", "journal", "leases", "receipts")
        }
        self._lock_key = _lock_key(self._schema_name)

    def _version(self, cur: Any) -> int | None:
        cur.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s"
            " AND table_name = 'interlock_meta'",
            (self._schema_name,),
        )
        if int(cur.fetchone()[0]) == 0:
            return None
        cur.execute(self._sql("SELECT value FROM {meta} WHERE key='schema_version'"))
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
            if version != SCHEMA_VERSION:
                raise SchemaVersionError(self.location, version, SCHEMA_VERSION)
            return
        with self._transaction(write=True) as cur:
            # Two processes creating the tables at once would collide in the catalog.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            version = self._version(cur)
            if version is not None and version != SCHEMA_VERSION:
                raise SchemaVersionError(self.location, version, SCHEMA_VERSION)
            if version is None:
                if self.schema is not None:
                    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
                for statement in _SCHEMA:
                    cur.execute(self._sql(statement))
                cur.execute(
                    self._sql("INSERT INTO {meta} (key, value) VALUES ('schema_version', %s)"),
                    (str(SCHEMA_VERSION),),
                )

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        if self.read_only:
            raise StoreError(self.location, "opened read-only; nothing can be written")
        with self._lock, self._transaction(write=True) as cur:
            try:
                if self._clock is None:
                    cur.execute(_LOCK_THEN_CLOCK_SQL, (self._lock_key,))
                    now = float(cur.fetchone()[0])
                else:
                    cur.execute(_LOCK_SQL, (self._lock_key,))
                    now = self._clock()
            except self._psycopg.Error as e:
                raise self._error(e, "cannot start a write") from e
            tx = _PostgresTx(self, cur, now, write=True)
            yield tx
            tx.flush()
        self.commits += 1

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        with self._lock, self._transaction(write=False) as cur:
            yield _PostgresTx(self, cur, None, write=False)

    def _rows(
        self, sql: str, args: tuple[Any, ...] | list[Any] = (), *, write: bool = False
    ) -> Any:
        with self._lock, self._transaction(write=write) as cur:
            cur.execute(self._sql(sql), args)
            return cur.fetchall()

    def pending(self, kind: str | None = None) -> list[str]:
        """Action ids (of `kind`, if given) with an intent and no outcome, oldest first.

        Rows another worker is changing right now are skipped, not waited on (that worker
        holds them); a read-only store sees them all.
        """
        where = "" if kind is None else " AND kind=%s"
        lock = "" if self.read_only else " FOR KEY SHARE SKIP LOCKED"
        rows = self._rows(
            f"SELECT action_id FROM {{actions}} WHERE settlement IS NULL{where}"
            f" ORDER BY created_at, id{lock}",
            () if kind is None else (kind,),
            write=not self.read_only,
        )
        return [str(r[0]) for r in rows]

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs."""
        where, args = "", []
        for key, value in (metadata or {}).items():
            where += " AND (intent::jsonb -> 'metadata' ->> %s) = %s"
            args += [key, value]
        rows = self._rows(
            f"SELECT action_id FROM {{actions}} WHERE true{where} ORDER BY created_at, id", args
        )
        return [str(r[0]) for r in rows]

    def receipts(self) -> Iterator[Receipt]:
        """Every receipt, in chain order, read a batch at a time."""
        after = 0
        while True:
            rows = self._rows(
                "SELECT seq, action_id, body, prev_hash, hash, signature FROM {receipts}"
                " WHERE seq > %s ORDER BY seq LIMIT %s",
                (after, _BATCH),
            )
            for r in rows:
                yield Receipt(int(r[0]), *r[1:])
            if len(rows) < _BATCH:
                return
            after = int(rows[-1][0])

    def settled(self) -> Iterator[SettledAction]:
        """Every settled action with its receipt's sequence number, in the order of those
        numbers (none first, as `verify()` pairs them with the chain), a batch at a time."""
        columns = "SELECT id, action_id, settlement, receipt_seq FROM {actions}"
        after = 0
        while True:
            rows = self._rows(
                f"{columns} WHERE settlement IS NOT NULL AND receipt_seq IS NULL AND id > %s"
                " ORDER BY id LIMIT %s",
                (after, _BATCH),
            )
            for r in rows:
                yield SettledAction.parse(str(r[1]), r[2], None)
            if len(rows) < _BATCH:
                break
            after = int(rows[-1][0])
        seq, after = -(2**63), 0
        while True:
            rows = self._rows(
                f"{columns} WHERE settlement IS NOT NULL AND (receipt_seq, id) > (%s, %s)"
                " ORDER BY receipt_seq, id LIMIT %s",
                (seq, after, _BATCH),
            )
            for r in rows:
                yield SettledAction.parse(str(r[1]), r[2], int(r[3]))
            if len(rows) < _BATCH:
                return
            seq, after = int(rows[-1][3]), int(rows[-1][0])

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        rows = self._rows(
            "SELECT seq, action_id, at, record, data FROM {journal} WHERE action_id=%s"
            " ORDER BY seq",
            (action_id,),
        )
        return [JournalRecord(int(r[0]), r[1], float(r[2]), r[3], json.loads(r[4])) for r in rows]

    def integrity_problems(self) -> list[str]:
        """The server keeps its own pages sound (and reports damage on every read): none."""
        return []

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
                self._conn = None


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS {actions} (
        id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        action_id text PRIMARY KEY,
        kind text NOT NULL,
        intent text NOT NULL,
        claim text,
        settlement text,
        attempts integer NOT NULL DEFAULT 0,
        receipt_seq bigint,
        unknown text,
        created_at double precision NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS interlock_actions_pending ON {actions} (created_at, id)"
    " WHERE settlement IS NULL",
    "CREATE INDEX IF NOT EXISTS interlock_actions_receipt ON {actions} (receipt_seq, id)"
    " WHERE settlement IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS {journal} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        action_id text NOT NULL,
        at double precision NOT NULL,
        record text NOT NULL,
        data text NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS interlock_journal_action ON {journal} (action_id, seq)",
    "CREATE TABLE IF NOT EXISTS {leases} (lease_id text PRIMARY KEY, lease text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS {receipts} (
        seq bigint PRIMARY KEY,
        action_id text NOT NULL,
        body text NOT NULL,
        prev_hash text NOT NULL,
        hash text NOT NULL,
        signature text
    )""",
)


def is_postgres_url(location: str) -> bool:
    """Whether `location` names a PostgreSQL database (a `postgresql://` or `postgres://` URL)."""
    return location.startswith(("postgresql://", "postgres://"))
