"""The stores' SQL, written once: statements, row mapping, scans, tables and migrations.

Both SQL backends run these statements; each gives only its connection, its transactions
and its locking (SQLite: one `BEGIN IMMEDIATE` writer at a time, and one statement that
joins what a commit reads; PostgreSQL: row and advisory locks in one order, the
database's clock, pipelined round trips, a lost connection replaced). What the dialects
spell differently is a named piece of `Dialect` (the placeholder, the row id, the scan
that skips locked rows, the metadata index, the words of the tables' statements), never
a second copy of a statement.

A template names its tables as `{actions}` and its parameters as `?`; `Statements`
formats every one once per store, in its dialect and with its tables' names. Each
dialect's `Schema` says its version, the versions it reads as they are and those it
migrates in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from interlock._core.errors import SchemaVersionError
from interlock._core.journal import (
    ActionHistory,
    ActionRow,
    Intent,
    JournalRecord,
    RuleStore,
    SettledAction,
    Turn,
    by_seq,
    histories_of,
    pages,
)
from interlock._core.leases import Lease
from interlock._core.log import UNREADABLE_PLACE, LoggedReceipt, StoredHead
from interlock._core.receipts import Receipt, canonical_json, load_json

Args = tuple[Any, ...] | list[Any]
Statement = tuple[str, Args]
JournalRow = tuple[str, float, str, str]


@dataclass(frozen=True)
class Dialect:
    """What SQLite and PostgreSQL spell differently in the statements both run."""

    placeholder: str
    """How a statement marks a parameter (`?`, `%s`); templates are written with `?`."""
    row_id: str
    """The column that numbers rows in insertion order (SQLite's `rowid`, an identity)."""
    skip_locked: str
    """What `pending()` adds to skip rows another writer holds ("" where no row is
    locked)."""
    metadata_index: bool
    """Whether an intent's metadata is indexed in `action_metadata` as it is written."""
    metadata_value: str
    """An intent's metadata value, its key the one parameter (where it is not indexed)."""
    metadata_key: Callable[[str], str]
    """The parameter `metadata_value` takes for a key."""
    ddl: Mapping[str, str]
    """The words the tables' statements leave to the dialect: the types (`text`, `int`,
    `bigint`, `real`), the journal's `serial` key, the actions' `row_id_column`, the
    `kind_default`, `without_rowid`, and the `index` name prefix and its `by_row` column."""


SQLITE = Dialect(
    placeholder="?",
    row_id="rowid",
    skip_locked="",
    metadata_index=True,
    # An intent that is not JSON matches nothing instead of failing the listing.
    metadata_value="CASE WHEN json_valid(intent) THEN json_extract(intent, ?) END",
    metadata_key=lambda key: f'$.metadata."{key}"',
    ddl={
        "text": "TEXT",
        "int": "INTEGER",
        "bigint": "INTEGER",
        "real": "REAL",
        # A rowid alias: numbered by SQLite as rows are inserted.
        "serial": "INTEGER PRIMARY KEY",
        # The rowid numbers the actions, and every index ends with it.
        "row_id_column": "",
        "by_row": "",
        # Version 1 had no kind: it was added with a default.
        "kind_default": " DEFAULT ''",
        "without_rowid": " WITHOUT ROWID",
        "index": "",
    },
)
POSTGRES = Dialect(
    placeholder="%s",
    row_id="id",
    skip_locked=" FOR KEY SHARE SKIP LOCKED",
    metadata_index=False,
    metadata_value="(intent::jsonb -> 'metadata' ->> ?)",
    metadata_key=lambda key: key,
    ddl={
        "text": "text",
        "int": "integer",
        "bigint": "bigint",
        "real": "double precision",
        "serial": "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "row_id_column": "id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,\n    ",
        "by_row": ", id",
        "kind_default": "",
        "without_rowid": "",
        # Index names are the schema's, beside the application's own.
        "index": "interlock_",
    },
)

# The tables of both dialects (SQLite also indexes metadata in `action_metadata`), and
# PostgreSQL's sequence of receipt ids.
TABLES = ("meta", "actions", "journal", "leases", "receipts", "turns", "heads", "receipt_ids")

# The columns `ActionRow.from_columns` takes, after the intent's JSON text.
ACTION_COLUMNS = "intent, claim, settlement, attempts, receipt_seq, unknown"
_RECEIPT_COLUMNS = "seq, action_id, body, prev_hash, hash, signature"
_HEAD_COLUMNS = "size, body, signature, frontier, anchored_at"
_JOURNAL_COLUMNS = "seq, action_id, at, record, data"


class Statements:
    """The statements in one dialect, over one store's table names (formatted once)."""

    def __init__(self, dialect: Dialect, tables: Mapping[str, str]) -> None:
        self.dialect = dialect
        self.tables = tables
        sql = self.sql
        self.meta_version = sql("SELECT value FROM {meta} WHERE key='schema_version'")
        self.set_version = sql(
            "INSERT INTO {meta} (key, value) VALUES ('schema_version', ?)"
            " ON CONFLICT (key) DO UPDATE SET value=excluded.value"
        )
        self.action = sql(f"SELECT {ACTION_COLUMNS} FROM {{actions}} WHERE action_id=?")
        self.insert_action = sql(
            "INSERT INTO {actions} (claim, settlement, attempts, receipt_seq, unknown,"
            " action_id, kind, intent, created_at) VALUES (?,?,?,?,?,?,?,?,?)"
        )
        # The intent never changes once journaled, so it is not written again.
        self.update_action = sql(
            "UPDATE {actions} SET claim=?, settlement=?, attempts=?, receipt_seq=?, unknown=?"
            " WHERE action_id=?"
        )
        self.turn = sql("SELECT action_id, epoch FROM {turns} WHERE target=?")
        self.put_turn_sql = sql(
            "INSERT INTO {turns} (target, action_id, epoch) VALUES (?,?,?)"
            " ON CONFLICT (target) DO UPDATE SET action_id=excluded.action_id,"
            " epoch=excluded.epoch"
        )
        self.lease = sql("SELECT lease FROM {leases} WHERE lease_id=?")
        self.insert_lease = sql("INSERT INTO {leases} (lease, lease_id) VALUES (?, ?)")
        self.update_lease = sql("UPDATE {leases} SET lease=? WHERE lease_id=?")
        self.last_id = sql("SELECT seq FROM {receipts} ORDER BY seq DESC LIMIT 1")
        self.next_id = sql("SELECT nextval('{receipt_ids}')")
        self.insert_receipt = sql(
            f"INSERT INTO {{receipts}} ({_RECEIPT_COLUMNS}) VALUES (?,?,?,?,?,?)"
        )
        self.receipt = sql(f"SELECT {_RECEIPT_COLUMNS} FROM {{receipts}} WHERE seq=?")
        # The receipt log: receipts not yet in it (oldest id first), their places once
        # sequenced, and its signed heads.
        self.unlogged = sql(
            "SELECT seq, action_id, body FROM {receipts} WHERE leaf IS NULL ORDER BY seq LIMIT ?"
        )
        self.set_leaf = sql("UPDATE {receipts} SET leaf=? WHERE seq=? AND leaf IS NULL")
        self.latest_head = sql(f"SELECT {_HEAD_COLUMNS} FROM {{heads}} ORDER BY size DESC LIMIT 1")
        self.insert_head = sql(f"INSERT INTO {{heads}} ({_HEAD_COLUMNS}) VALUES (?,?,?,?,?)")
        self.set_anchored = sql("UPDATE {heads} SET anchored_at=? WHERE size=?")
        self.heads_page = sql(
            f"SELECT {_HEAD_COLUMNS} FROM {{heads}} WHERE size > ? ORDER BY size LIMIT ?"
        )
        self.leaves_page = sql(
            "SELECT leaf, seq, action_id, body FROM {receipts}"
            " WHERE leaf IS NOT NULL AND leaf > ? ORDER BY leaf LIMIT ?"
        )
        self.unlogged_count = sql("SELECT count(*) FROM {receipts} WHERE leaf IS NULL")
        self.receipts_count = sql("SELECT count(*) FROM {receipts}")
        self.history = sql(
            f"SELECT {_JOURNAL_COLUMNS} FROM {{journal}} WHERE action_id=? ORDER BY seq"
        )
        self.leases_page = sql(
            "SELECT lease_id, lease FROM {leases} WHERE lease_id > ? ORDER BY lease_id LIMIT ?"
        )
        self.receipts_page = sql(
            f"SELECT {_RECEIPT_COLUMNS} FROM {{receipts}} WHERE seq > ? ORDER BY seq LIMIT ?"
        )
        self.receipts_leaf_page = sql(
            f"SELECT {_RECEIPT_COLUMNS}, leaf FROM {{receipts}} WHERE seq > ? ORDER BY seq LIMIT ?"
        )
        settled = "SELECT {row_id}, action_id, settlement, receipt_seq FROM {actions}"
        self.settled_unnumbered = sql(
            f"{settled} WHERE settlement IS NOT NULL AND receipt_seq IS NULL AND {{row_id}} > ?"
            " ORDER BY {row_id} LIMIT ?"
        )
        self.settled_numbered = sql(
            f"{settled} WHERE settlement IS NOT NULL AND (receipt_seq, {{row_id}}) > (?, ?)"
            " ORDER BY receipt_seq, {row_id} LIMIT ?"
        )
        self.actions_page = sql(
            f"SELECT action_id, {ACTION_COLUMNS} FROM {{actions}}"
            " WHERE action_id > ? ORDER BY action_id LIMIT ?"
        )
        self.journal_between = sql(
            f"SELECT {_JOURNAL_COLUMNS} FROM {{journal}}"
            " WHERE action_id BETWEEN ? AND ? ORDER BY seq"
        )
        pending = "SELECT action_id FROM {actions} WHERE settlement IS NULL"
        self.pending = sql(f"{pending} ORDER BY created_at, {{row_id}}")
        self.pending_of_kind = sql(f"{pending} AND kind=? ORDER BY created_at, {{row_id}}")
        self.oldest_first = sql(" ORDER BY created_at, {row_id}")

    def actions(self, pairs: Sequence[tuple[str, str]], *, indexed: bool) -> Statement:
        """The statement listing action ids, oldest first, whose intent metadata has all
        these pairs: looked up in the index by the first pair where it is `indexed` (so
        the cost follows its matches: put the most selective pair first), else matched
        in the intents."""
        args = [v for key, value in pairs for v in (key, value)]
        if not pairs:
            where = ""
        elif indexed:
            # The first pair is looked up in the index (CROSS JOIN keeps it the driver);
            # the others are checked against its matches, one index probe each.
            others = "".join(
                " AND EXISTS (SELECT 1 FROM {action_metadata} o WHERE o.key=? AND o.value=?"
                " AND o.action_id=m.action_id)"
                for _ in pairs[1:]
            )
            sql = self.sql(
                "SELECT a.action_id FROM {action_metadata} m CROSS JOIN {actions} a"
                f" ON a.action_id = m.action_id WHERE m.key=? AND m.value=?{others}"
                " ORDER BY a.created_at, a.{row_id}"
            )
            return (sql, args)
        else:
            match = f"{self.dialect.metadata_value} = ?"
            where = " WHERE " + " AND ".join([match] * len(pairs))
            args = [v for key, value in pairs for v in (self.dialect.metadata_key(key), value)]
        return (self.sql(f"SELECT action_id FROM {{actions}}{where}") + self.oldest_first, args)

    def sql(self, template: str) -> str:
        """A template (tables as `{actions}`, parameters as `?`) in this dialect."""
        text = template.format(row_id=self.dialect.row_id, **self.dialect.ddl, **self.tables)
        return text.replace("?", self.dialect.placeholder)

    def put_action(self, row: ActionRow, *, new: bool) -> list[Statement]:
        """The statements that store `row`: a new one with its intent (and, where it is
        indexed, its metadata), else only the columns that change."""
        values = row.columns()
        intent = row.intent
        if not new:
            return [(self.update_action, (*values, intent.action_id))]
        text = canonical_json(intent.to_dict())
        statements: list[Statement] = [
            (self.insert_action, (*values, intent.action_id, intent.kind, text, intent.created_at))
        ]
        pairs = list(intent.metadata.items())
        if self.dialect.metadata_index and pairs:
            statements.append(
                (
                    self._values(
                        "INSERT INTO {action_metadata} (key, value, action_id) VALUES ",
                        3,
                        len(pairs),
                    ),
                    [v for key, value in pairs for v in (key, str(value), intent.action_id)],
                )
            )
        return statements

    def put_turn(self, turn: Turn) -> Statement:
        """The statement that stores a target's turn, made or replaced."""
        return (self.put_turn_sql, (turn.target, turn.action_id, turn.epoch))

    def put_lease(self, lease: Lease, *, new: bool) -> Statement:
        """The statement that stores a lease, new or changed."""
        sql = self.insert_lease if new else self.update_lease
        return (sql, (canonical_json(lease.to_dict()), lease.id))

    def add_receipt(self, receipt: Receipt) -> Statement:
        """The statement that appends a receipt to the chain."""
        return (
            self.insert_receipt,
            (
                receipt.seq,
                receipt.action_id,
                receipt.body_text,
                receipt.prev_hash,
                receipt.hash,
                receipt.signature,
            ),
        )

    def add_head(self, head: StoredHead) -> Statement:
        """The statement that stores a new tree head."""
        return (
            self.insert_head,
            (head.size, head.body_text, head.signature, head.frontier, head.anchored_at),
        )

    def journal(self, records: Sequence[JournalRow]) -> Statement:
        """One statement that writes a transaction's journal records, in order."""
        return (
            self._values(
                "INSERT INTO {journal} (action_id, at, record, data) VALUES ", 4, len(records)
            ),
            [v for record in records for v in record],
        )

    def _values(self, head: str, width: int, rows: int) -> str:
        row = "(" + ",".join([self.dialect.placeholder] * width) + ")"
        return self.sql(head) + ",".join([row] * rows)


def journal_row(action_id: str, now: float, record: str, data: Mapping[str, Any]) -> JournalRow:
    """A journal record as its row stores it (the data as canonical JSON)."""
    return (action_id, now, record, canonical_json(dict(data)))


def action_row(r: Sequence[Any]) -> ActionRow:
    """An action from its columns (`ACTION_COLUMNS`, in that order)."""
    return ActionRow.from_columns(Intent.from_dict(load_json(r[0])), *r[1:6])


def receipt_of(r: Sequence[Any]) -> Receipt:
    """A receipt from its row (`_RECEIPT_COLUMNS`, then its place in the log if read)."""
    # As stored: a place that is not a number counts as none (its signature is checked).
    leaf = r[6] if len(r) > 6 and isinstance(r[6], int) else None
    return Receipt(int(r[0]), r[1], r[2], r[3], r[4], r[5], leaf=leaf)


def head_of(r: Sequence[Any] | None) -> StoredHead | None:
    """A stored tree head from its row (`_HEAD_COLUMNS`), or None without one."""
    if r is None:
        return None
    # As stored: a value edited by hand is the verifier's to report, never a crash here.
    size = r[0] if isinstance(r[0], int) else UNREADABLE_PLACE
    anchored = r[4] if isinstance(r[4], (int, float)) else None
    signature = r[2] if isinstance(r[2], str) else None
    return StoredHead(size, str(r[1]), signature, str(r[3]), anchored)


def turn_of(target: str, r: Sequence[Any] | None) -> Turn | None:
    """A target's turn from its row (none without one, or with no holder)."""
    return None if r is None or not r[0] else Turn(target, str(r[0]), int(r[1]))


class SqlStore(RuleStore):
    """The scans of `Store`, written once over a backend's `_rows` and its `_st`."""

    read_only: bool
    _st: Statements
    _metadata_indexed: bool
    # False for a store from before the receipt log, opened read-only (never migrated).
    _has_log: bool = True

    def _rows(self, sql: str, args: Args = (), *, locking: bool = False) -> list[Any]:
        """The rows of one statement run on its own; `locking` when the statement locks
        the rows it reads (a read-write transaction, where rows are locked)."""
        raise NotImplementedError

    def _pages(self, sql: str, after: Any, key: Callable[[Any], Any] = lambda r: r[0]) -> Any:
        def fetch(after: Any, limit: int) -> list[Any]:
            return self._rows(sql, (*after, limit) if isinstance(after, tuple) else (after, limit))

        return pages(fetch, after, key)

    def leases(self) -> Iterator[Lease]:
        """Every lease, ordered by its id, read a batch at a time."""
        for page in self._pages(self._st.leases_page, ""):
            for r in page:
                yield Lease.from_text(str(r[0]), r[1])

    def pending(self, kind: str | None = None) -> list[str]:
        """Action ids (of `kind`, if given) with an intent and no outcome, oldest first.

        Where rows are locked, rows another worker is changing right now are skipped, not
        waited on (that worker holds them); a read-only store sees them all.
        """
        locking = bool(self._st.dialect.skip_locked) and not self.read_only
        sql = self._st.pending if kind is None else self._st.pending_of_kind
        if locking:
            sql += self._st.dialect.skip_locked
        rows = self._rows(sql, () if kind is None else (kind,), locking=locking)
        return [str(r[0]) for r in rows]

    def receipts(self) -> Iterator[Receipt]:
        """Every receipt, in chain order, with its place in the log, a batch at a time."""
        sql = self._st.receipts_leaf_page if self._has_log else self._st.receipts_page
        for page in self._pages(sql, 0):
            for r in page:
                yield receipt_of(r)

    def heads(self, after: int = -1) -> Iterator[StoredHead]:
        """The tree heads of the receipt log larger than `after`, smallest first, a batch at
        a time."""
        if not self._has_log:
            return
        # From the lowest bigint by default: a head filed under a negative size by a hand
        # edit is read (and reported by verify), never skipped.
        for page in self._pages(self._st.heads_page, after if after >= 0 else -(2**63)):
            for r in page:
                head = head_of(r)
                assert head is not None
                yield head

    def logged(self, start: int = 0) -> Iterator[LoggedReceipt]:
        """The receipts in the log from place `start` on, in leaf order, a batch at a time."""
        if not self._has_log:
            return
        for page in self._pages(self._st.leaves_page, start - 1):
            for r in page:
                leaf = r[0] if isinstance(r[0], int) else UNREADABLE_PLACE
                yield LoggedReceipt(leaf, int(r[1]), str(r[2]), str(r[3]))

    def unlogged_count(self) -> int:
        """How many receipts are not in the log yet (all of a store from before it)."""
        sql = self._st.unlogged_count if self._has_log else self._st.receipts_count
        return int(self._rows(sql)[0][0])

    def settled(self) -> Iterator[SettledAction]:
        """Every settled action with its receipt's sequence number, in the order of those
        numbers (none first, as `verify()` pairs them with the chain), a batch at a time."""
        for page in self._pages(self._st.settled_unnumbered, -1):
            for r in page:
                yield SettledAction.parse(str(r[1]), r[2], None)
        for page in self._pages(self._st.settled_numbered, (-(2**63), -1), by_seq):
            for r in page:
                # As stored: a value that is not a number is the verifier's to report.
                yield SettledAction.parse(str(r[1]), r[2], r[3])

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs
        (looked up by the first pair where metadata is indexed: put the most selective
        pair first)."""
        pairs = list((metadata or {}).items())
        sql, args = self._st.actions(pairs, indexed=self._metadata_indexed)
        return [str(r[0]) for r in self._rows(sql, args)]

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        rows = self._rows(self._st.history, (action_id,))
        return [JournalRecord(int(r[0]), r[1], float(r[2]), r[3], load_json(r[4])) for r in rows]

    def histories(self) -> Iterator[ActionHistory]:
        """Every action's row with its journal records, ordered by action id, read a batch
        of actions at a time: one statement for the batch's rows, one for their records."""
        for page in self._pages(self._st.actions_page, ""):
            journal = self._rows(self._st.journal_between, (page[0][0], page[-1][0]))
            yield from histories_of(page, journal)


@dataclass(frozen=True)
class Schema:
    """A dialect's layout: its version, the versions read as they are (never migrated
    read-only) or migrated in place, and the statements that create and migrate it."""

    version: int
    readable: frozenset[int]
    migratable: frozenset[int]
    create: tuple[str, ...]
    migrations: Mapping[int, tuple[str, ...]]
    """Statements run, after `create`, on a store of this version or older."""
    finish: tuple[str, ...] = ()
    """Statements run last on every store created or migrated (indexes of added columns)."""

    def check(self, version: int | None, where: str, *, read_only: bool) -> None:
        """Refuse a store of a version this code does not read (`read_only`) or migrate."""
        if version is not None and version not in (self.readable if read_only else self.migratable):
            raise SchemaVersionError(where, version, self.version)

    def upgrade(self, version: int | None) -> list[str]:
        """The statements that bring a store of `version` (None: new) to this one, as
        templates for `Statements.sql` (each creates or fills only what that version
        lacks)."""
        steps = list(self.create)
        if version is not None:
            for since in sorted(self.migrations):
                if version <= since:
                    steps += self.migrations[since]
        return steps + list(self.finish)


# The tables both dialects keep, in SQLite's own spelling once formatted for it (SQLite
# stores this text in the file). A dialect's `ddl` words fill in its types and what only
# it has: PostgreSQL's identity columns, SQLite's rowid and `WITHOUT ROWID` tables.
_TABLES_DDL = (
    "CREATE TABLE IF NOT EXISTS {meta} (key {text} PRIMARY KEY, value {text} NOT NULL)",
    """CREATE TABLE IF NOT EXISTS {actions} (
    {row_id_column}action_id {text} PRIMARY KEY,
    kind {text} NOT NULL{kind_default},
    intent {text} NOT NULL,
    claim {text},
    settlement {text},
    attempts {int} NOT NULL DEFAULT 0,
    receipt_seq {bigint},
    unknown {text},
    created_at {real} NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS {index}actions_pending ON {actions} (created_at{by_row})"
    " WHERE settlement IS NULL",
    "CREATE INDEX IF NOT EXISTS {index}actions_receipt ON {actions} (receipt_seq{by_row})"
    " WHERE settlement IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS {journal} (
    seq {serial},
    action_id {text} NOT NULL,
    at {real} NOT NULL,
    record {text} NOT NULL,
    data {text} NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS {index}journal_action ON {journal} (action_id, seq)",
    "CREATE TABLE IF NOT EXISTS {leases} (lease_id {text} PRIMARY KEY, lease {text} NOT NULL)",
    """CREATE TABLE IF NOT EXISTS {turns} (
    target {text} PRIMARY KEY,
    action_id {text} NOT NULL,
    epoch {int} NOT NULL
){without_rowid}""",
    """CREATE TABLE IF NOT EXISTS {receipts} (
    seq {bigint} PRIMARY KEY,
    action_id {text} NOT NULL,
    body {text} NOT NULL,
    prev_hash {text} NOT NULL,
    hash {text} NOT NULL,
    signature {text},
    leaf {bigint}
)""",
    """CREATE TABLE IF NOT EXISTS {heads} (
    size {bigint} PRIMARY KEY,
    body {text} NOT NULL,
    signature {text},
    frontier {text} NOT NULL,
    anchored_at {real}
)""",
)
# The receipt log's place of each receipt (its leaf index, from 0): added to the receipts
# of an older store, and numbered after a receipt's commit (`RuleStore.integrate`).
_ADD_LEAF = "ALTER TABLE {receipts} ADD COLUMN leaf {bigint}"
_LOG_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS {index}receipts_leaf ON {receipts} (leaf)"
    " WHERE leaf IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS {index}receipts_unlogged ON {receipts} (seq) WHERE leaf IS NULL",
)

# SQLite, version 5. Version 3 indexes intent metadata (`action_metadata`, written with
# the intent) and settled actions by receipt; version 4 adds each target's turn (`turns`,
# see `RuleStore`); version 5 the receipt log (each receipt's `leaf`, the signed `heads`).
# Versions 1 to 4 are migrated in place; 2 to 4 are read as they are.
SQLITE_SCHEMA = Schema(
    version=5,
    readable=frozenset({2, 3, 4, 5}),
    migratable=frozenset({1, 2, 3, 4, 5}),
    create=(
        *_TABLES_DDL,
        """CREATE TABLE IF NOT EXISTS action_metadata (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    action_id TEXT NOT NULL,
    PRIMARY KEY (key, value, action_id)
) WITHOUT ROWID""",
    ),
    migrations={
        # Version 1 had no kind and no unknown mark; both are added in place.
        1: (
            "ALTER TABLE actions ADD COLUMN kind TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE actions ADD COLUMN unknown TEXT",
            "UPDATE actions SET kind = json_extract(intent, '$.kind')",
        ),
        # Version 2 kept metadata only inside the intent's JSON: index what is there.
        2: (
            "INSERT OR IGNORE INTO action_metadata (key, value, action_id)"
            " SELECT j.key, j.value, a.action_id FROM actions a,"
            " json_each(a.intent, '$.metadata') j",
        ),
        4: (_ADD_LEAF,),
    },
    finish=_LOG_INDEXES,
)

# PostgreSQL, version 4, its tables named with their schema. Version 3 adds the
# per-target turns; version 4 the receipt log, and receipt ids drawn from a sequence (so a
# settle takes no store-wide lock). Versions 2 and 3 are migrated in place (the tables'
# statements create what they lack) and read as they are.
POSTGRES_SCHEMA = Schema(
    version=4,
    readable=frozenset({2, 3, 4}),
    migratable=frozenset({2, 3, 4}),
    create=(*_TABLES_DDL, "CREATE SEQUENCE IF NOT EXISTS {receipt_ids}"),
    migrations={
        3: (
            _ADD_LEAF,
            "SELECT setval('{receipt_ids}', (SELECT COALESCE(MAX(seq), 0) + 1 FROM {receipts}),"
            " false)",
        ),
    },
    finish=_LOG_INDEXES,
)
