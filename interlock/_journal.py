"""The journal: intents, claims, `sending`, outcomes, leases and receipts in one store.

`Store` is the protocol the gate uses; its three writing calls are the send path's three
durable commits (`begin`, `mark_sending`, `settle`). The rules live once, in `_RuleStore`,
over a small row-level transaction; `SQLiteStore` (WAL, `synchronous=FULL`, one file that
many worker processes share) and `MemoryStore` (tests) only store rows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from interlock._claims import Claim, Owner
from interlock._errors import ActionError, LeaseError, SchemaVersionError, StoreError
from interlock._leases import Lease, approval_problem
from interlock._receipts import GENESIS_HASH, Check, Receipt, canonical_json, seal

SCHEMA_VERSION = 1

OutcomeStatus = Literal["sent", "adopted", "refused", "failed"]


@dataclass(frozen=True)
class Intent:
    """What the agent decided, and the state the decision was based on.

    `fingerprint` is the fingerprint of the target's state as the model saw it (for a
    refund: the payment's refunds shown by `get_payment`), not a fresh read at send time.
    """

    action_id: str
    kind: str
    target: str
    amount: int
    lease_id: str
    fingerprint: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The intent as JSON-ready data."""
        return {
            "action_id": self.action_id,
            "kind": self.kind,
            "target": self.target,
            "amount": self.amount,
            "lease_id": self.lease_id,
            "fingerprint": self.fingerprint,
            "metadata": dict(self.metadata),
            "context": dict(self.context),
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Intent:
        """An intent from `to_dict` data."""
        return cls(
            action_id=str(data["action_id"]),
            kind=str(data["kind"]),
            target=str(data["target"]),
            amount=int(data["amount"]),
            lease_id=str(data["lease_id"]),
            fingerprint=str(data["fingerprint"]),
            metadata={str(k): str(v) for k, v in dict(data.get("metadata") or {}).items()},
            context=dict(data.get("context") or {}),
            created_at=float(data.get("created_at", 0.0)),
        )

    def same_decision(self, other: Intent) -> bool:
        """Whether two intents record the same decision (creation time aside)."""
        return replace(self, created_at=0.0).to_dict() == replace(other, created_at=0.0).to_dict()


@dataclass(frozen=True)
class Settlement:
    """A recorded outcome: the status, why, Stripe's ids or error code."""

    status: OutcomeStatus
    reason: str | None = None
    external_id: str | None = None
    amount: int | None = None
    code: str | None = None
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The settlement as JSON-ready data."""
        return {
            "status": self.status,
            "reason": self.reason,
            "external_id": self.external_id,
            "amount": self.amount,
            "code": self.code,
            "at": self.at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settlement:
        """A settlement from `to_dict` data."""
        status = str(data["status"])
        if status not in ("sent", "adopted", "refused", "failed"):
            raise ValueError(f"unknown outcome {status!r}")
        return cls(
            status=status,  # type: ignore[arg-type]
            reason=data.get("reason"),
            external_id=data.get("external_id"),
            amount=None if data.get("amount") is None else int(data["amount"]),
            code=data.get("code"),
            at=float(data.get("at", 0.0)),
        )


@dataclass(frozen=True)
class ActionState:
    """Everything the journal holds about one action."""

    intent: Intent
    claim: Claim | None
    settlement: Settlement | None
    attempts: int
    receipt: Receipt | None = None


@dataclass(frozen=True)
class ClaimAttempt:
    """The answer to a claim request: taken, held by someone else, or already settled."""

    status: Literal["taken", "held", "settled"]
    state: ActionState


@dataclass(frozen=True)
class SendingAttempt:
    """The answer to `mark_sending`: ok, the claim was lost, or the lease refuses."""

    status: Literal["ok", "claim_lost", "lease_refused"]
    reason: str | None = None
    claim: Claim | None = None


@dataclass(frozen=True)
class JournalRecord:
    """One line of an action's history."""

    seq: int
    action_id: str
    at: float
    record: str
    data: Mapping[str, Any]


class Store(Protocol):
    """Durable storage for the gate. Each writing call is one atomic, durable commit."""

    commits: int

    def begin(self, intent: Intent, owner: Owner, now: float, ttl_s: float) -> ClaimAttempt:
        """Commit 1: journal the intent (if new) and take its claim (if free)."""
        ...

    def take_claim(self, action_id: str, owner: Owner, now: float, ttl_s: float) -> ClaimAttempt:
        """Take the claim on a journaled action, if it is free or its owner is provably gone."""
        ...

    def mark_sending(
        self, action_id: str, owner: Owner, now: float, ttl_s: float
    ) -> SendingAttempt:
        """Commit 2: `sending`, the lease reservation and the claim's renewal, all or none."""
        ...

    def settle(
        self,
        action_id: str,
        owner: Owner,
        now: float,
        settlement: Settlement,
        checks: list[Check],
        extra: Mapping[str, Any],
        receipt_key: bytes | None,
    ) -> Receipt | None:
        """Commit 3, fenced: outcome, receipt and lease spend, while `owner` holds the claim."""
        ...

    def action(self, action_id: str) -> ActionState | None:
        """The journal's view of one action."""
        ...

    def pending(self) -> list[str]:
        """Action ids with an intent and no outcome, oldest first."""
        ...

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs."""
        ...

    def receipts(self) -> list[Receipt]:
        """Every receipt, in chain order."""
        ...

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        ...

    def grant_lease(self, lease: Lease) -> Lease:
        """Store a new lease."""
        ...

    def revoke_lease(self, lease_id: str, by: str, now: float) -> Lease:
        """Revoke a lease; later checks refuse under it."""
        ...

    def lease(self, lease_id: str) -> Lease | None:
        """One lease, with its spend and reservations."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


# -- rows and transactions ---------------------------------------------------------------


@dataclass
class _ActionRow:
    intent: Intent
    claim: Claim | None = None
    settlement: Settlement | None = None
    attempts: int = 0
    receipt_seq: int | None = None


class _Tx(Protocol):
    def get_action(self, action_id: str) -> _ActionRow | None: ...
    def put_action(self, row: _ActionRow, *, new: bool) -> None: ...
    def get_lease(self, lease_id: str) -> Lease | None: ...
    def put_lease(self, lease: Lease, *, new: bool) -> None: ...
    def journal(self, action_id: str, at: float, record: str, data: Mapping[str, Any]) -> None: ...
    def last_receipt(self) -> tuple[int, str]: ...
    def add_receipt(self, receipt: Receipt) -> None: ...
    def get_receipt(self, seq: int) -> Receipt | None: ...


class _RuleStore:
    """The store's rules, written once over `_Tx`; subclasses store the rows."""

    commits: int

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        raise NotImplementedError

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        raise NotImplementedError

    def _state(self, tx: _Tx, row: _ActionRow) -> ActionState:
        receipt = tx.get_receipt(row.receipt_seq) if row.receipt_seq is not None else None
        return ActionState(row.intent, row.claim, row.settlement, row.attempts, receipt)

    def _claim(
        self, tx: _Tx, row: _ActionRow, owner: Owner, now: float, ttl_s: float
    ) -> ClaimAttempt:
        if row.settlement is not None:
            return ClaimAttempt("settled", self._state(tx, row))
        if row.claim is not None and not row.claim.replaceable_by(owner, now):
            return ClaimAttempt("held", self._state(tx, row))
        previous = row.claim
        row.claim = Claim(owner, claimed_at=now, expires_at=now + ttl_s)
        row.attempts += 1
        tx.put_action(row, new=False)
        tx.journal(
            row.intent.action_id,
            now,
            "claim",
            {
                "owner": owner.to_dict(),
                "expires_at": row.claim.expires_at,
                "took_over": previous.owner.to_dict()
                if previous is not None and previous.owner != owner
                else None,
            },
        )
        return ClaimAttempt("taken", self._state(tx, row))

    def begin(self, intent: Intent, owner: Owner, now: float, ttl_s: float) -> ClaimAttempt:
        """Commit 1: journal the intent (if new) and take its claim (if free)."""
        with self._write() as tx:
            row = tx.get_action(intent.action_id)
            if row is None:
                row = _ActionRow(intent=intent)
                tx.put_action(row, new=True)
                tx.journal(intent.action_id, now, "intent", intent.to_dict())
            elif not row.intent.same_decision(intent):
                raise ActionError(
                    intent.action_id,
                    "already journaled with a different decision; an action id names one "
                    "decision: use a new action id for a new decision",
                )
            return self._claim(tx, row, owner, now, ttl_s)

    def take_claim(self, action_id: str, owner: Owner, now: float, ttl_s: float) -> ClaimAttempt:
        """Take the claim on a journaled action, if it is free or its owner is provably gone."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal; nothing to recover")
            return self._claim(tx, row, owner, now, ttl_s)

    def mark_sending(
        self, action_id: str, owner: Owner, now: float, ttl_s: float
    ) -> SendingAttempt:
        """Commit 2: `sending`, the lease reservation and the claim's renewal, all or none."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal")
            claim = row.claim
            if (
                row.settlement is not None
                or claim is None
                or claim.owner != owner
                or not claim.live(now)
            ):
                return SendingAttempt("claim_lost")
            intent = row.intent
            lease = tx.get_lease(intent.lease_id)
            problem = approval_problem(
                lease,
                kind=intent.kind,
                target=intent.target,
                amount=intent.amount,
                action_id=action_id,
                now=now,
            )
            if problem is not None or lease is None:
                return SendingAttempt("lease_refused", problem)
            tx.put_lease(lease.with_reservation(action_id, intent.amount), new=False)
            row.claim = replace(claim, expires_at=max(claim.expires_at, now + ttl_s), sending=True)
            tx.put_action(row, new=False)
            tx.journal(
                action_id,
                now,
                "sending",
                {"expires_at": row.claim.expires_at, "attempt": row.attempts},
            )
            return SendingAttempt("ok", claim=row.claim)

    def settle(
        self,
        action_id: str,
        owner: Owner,
        now: float,
        settlement: Settlement,
        checks: list[Check],
        extra: Mapping[str, Any],
        receipt_key: bytes | None,
    ) -> Receipt | None:
        """Commit 3, fenced: outcome, receipt and lease spend, while `owner` holds the claim."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal")
            claim = row.claim
            if (
                row.settlement is not None
                or claim is None
                or claim.owner != owner
                or not claim.live(now)
            ):
                return None
            intent = row.intent
            lease = tx.get_lease(intent.lease_id)
            if lease is not None:
                if settlement.status in ("sent", "adopted"):
                    spent = settlement.amount if settlement.amount is not None else intent.amount
                    lease = replace(
                        lease.with_reservation(action_id, None), spent=lease.spent + spent
                    )
                else:
                    lease = lease.with_reservation(action_id, None)
                tx.put_lease(lease, new=False)
            seq, prev = tx.last_receipt()
            fields = {
                "action_id": action_id,
                "kind": intent.kind,
                "target": intent.target,
                "amount": intent.amount,
                "lease_id": intent.lease_id,
                "decision_fingerprint": intent.fingerprint,
                "outcome": settlement.status,
                "reason": settlement.reason,
                "code": settlement.code,
                "external_id": settlement.external_id,
                "checks": [c.to_dict() for c in checks],
                "owner": owner.to_dict(),
                "attempt": row.attempts,
                "at": now,
                **dict(extra),
            }
            text, digest, signature = seal(seq + 1, prev, fields, receipt_key)
            receipt = Receipt(seq + 1, action_id, text, prev, digest, signature)
            tx.add_receipt(receipt)
            row.settlement = settlement
            row.claim = replace(claim, expires_at=now, sending=False)
            row.receipt_seq = receipt.seq
            tx.put_action(row, new=False)
            tx.journal(action_id, now, "outcome", settlement.to_dict())
            return receipt

    def grant_lease(self, lease: Lease) -> Lease:
        """Store a new lease."""
        with self._write() as tx:
            if tx.get_lease(lease.id) is not None:
                raise LeaseError(lease.id, "already exists; grant a new lease under a new id")
            tx.put_lease(lease, new=True)
            return lease

    def revoke_lease(self, lease_id: str, by: str, now: float) -> Lease:
        """Revoke a lease; later checks refuse under it."""
        with self._write() as tx:
            lease = tx.get_lease(lease_id)
            if lease is None:
                raise LeaseError(lease_id, "no such lease; check the id")
            if lease.revoked:
                return lease
            lease = replace(lease, revoked_at=now, revoked_by=by)
            tx.put_lease(lease, new=False)
            return lease

    def lease(self, lease_id: str) -> Lease | None:
        """One lease, with its spend and reservations."""
        with self._read() as tx:
            return tx.get_lease(lease_id)

    def action(self, action_id: str) -> ActionState | None:
        """The journal's view of one action."""
        with self._read() as tx:
            row = tx.get_action(action_id)
            return None if row is None else self._state(tx, row)


# -- SQLite ------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
    action_id TEXT PRIMARY KEY,
    intent TEXT NOT NULL,
    claim TEXT,
    settlement TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    receipt_seq INTEGER,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_pending ON actions (created_at) WHERE settlement IS NULL;
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    action_id TEXT NOT NULL,
    at REAL NOT NULL,
    record TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_action ON journal (action_id, seq);
CREATE TABLE IF NOT EXISTS leases (lease_id TEXT PRIMARY KEY, lease TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (
    seq INTEGER PRIMARY KEY,
    action_id TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    signature TEXT
);
"""


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def get_action(self, action_id: str) -> _ActionRow | None:
        r = self.c.execute(
            "SELECT intent, claim, settlement, attempts, receipt_seq FROM actions"
            " WHERE action_id=?",
            (action_id,),
        ).fetchone()
        if r is None:
            return None
        return _ActionRow(
            intent=Intent.from_dict(json.loads(r[0])),
            claim=None if r[1] is None else Claim.from_dict(json.loads(r[1])),
            settlement=None if r[2] is None else Settlement.from_dict(json.loads(r[2])),
            attempts=int(r[3]),
            receipt_seq=r[4],
        )

    def put_action(self, row: _ActionRow, *, new: bool) -> None:
        values = (
            canonical_json(row.intent.to_dict()),
            None if row.claim is None else canonical_json(row.claim.to_dict()),
            None if row.settlement is None else canonical_json(row.settlement.to_dict()),
            row.attempts,
            row.receipt_seq,
        )
        if new:
            self.c.execute(
                "INSERT INTO actions (intent, claim, settlement, attempts, receipt_seq, action_id,"
                " created_at) VALUES (?,?,?,?,?,?,?)",
                (*values, row.intent.action_id, row.intent.created_at),
            )
        else:
            self.c.execute(
                "UPDATE actions SET intent=?, claim=?, settlement=?, attempts=?, receipt_seq=?"
                " WHERE action_id=?",
                (*values, row.intent.action_id),
            )

    def get_lease(self, lease_id: str) -> Lease | None:
        r = self.c.execute("SELECT lease FROM leases WHERE lease_id=?", (lease_id,)).fetchone()
        return None if r is None else Lease.from_dict(json.loads(r[0]))

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        text = canonical_json(lease.to_dict())
        if new:
            self.c.execute("INSERT INTO leases (lease_id, lease) VALUES (?, ?)", (lease.id, text))
        else:
            self.c.execute("UPDATE leases SET lease=? WHERE lease_id=?", (text, lease.id))

    def journal(self, action_id: str, at: float, record: str, data: Mapping[str, Any]) -> None:
        self.c.execute(
            "INSERT INTO journal (action_id, at, record, data) VALUES (?,?,?,?)",
            (action_id, at, record, canonical_json(dict(data))),
        )

    def last_receipt(self) -> tuple[int, str]:
        r = self.c.execute("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, GENESIS_HASH) if r is None else (int(r[0]), str(r[1]))

    def add_receipt(self, receipt: Receipt) -> None:
        self.c.execute(
            "INSERT INTO receipts (seq, action_id, body, prev_hash, hash, signature)"
            " VALUES (?,?,?,?,?,?)",
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
        r = self.c.execute(
            "SELECT seq, action_id, body, prev_hash, hash, signature FROM receipts WHERE seq=?",
            (seq,),
        ).fetchone()
        return None if r is None else Receipt(*r)


class SQLiteStore(_RuleStore):
    """The embedded store: one SQLite file in WAL mode with `synchronous=FULL`.

    Safe for many processes on one machine: every write is one `BEGIN IMMEDIATE`
    transaction, so compare-and-set steps are serialized by SQLite's write lock.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.commits = 0
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path),
                timeout=busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except (sqlite3.DatabaseError, OSError) as e:
            raise StoreError(
                str(self.path), f"cannot open: {e}; check the path and permissions"
            ) from e
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._check_schema()
        except BaseException as e:
            self._conn.close()
            if isinstance(e, sqlite3.DatabaseError):
                raise StoreError(
                    str(self.path), f"cannot open: {e}; check the path and permissions"
                ) from e
            raise

    def _check_schema(self) -> None:
        # Read the version before creating anything: a store of another version is
        # refused as it is, not altered first.
        with self._lock:
            has_meta = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
            ).fetchone()
            if has_meta is not None:
                r = self._conn.execute(
                    "SELECT value FROM meta WHERE key='schema_version'"
                ).fetchone()
                if r is not None and int(r[0]) != SCHEMA_VERSION:
                    raise SchemaVersionError(str(self.path), int(r[0]), SCHEMA_VERSION)
            self._conn.executescript(_SCHEMA)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                r = self._conn.execute(
                    "SELECT value FROM meta WHERE key='schema_version'"
                ).fetchone()
                if r is None:
                    self._conn.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        if r is not None and int(r[0]) != SCHEMA_VERSION:
            raise SchemaVersionError(str(self.path), int(r[0]), SCHEMA_VERSION)

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise StoreError(str(self.path), f"cannot start a write: {e}") from e
            try:
                yield _SQLiteTx(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self.commits += 1

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield _SQLiteTx(self._conn)
            finally:
                self._conn.execute("COMMIT")

    def pending(self) -> list[str]:
        """Action ids with an intent and no outcome, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT action_id FROM actions WHERE settlement IS NULL ORDER BY created_at, rowid"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs."""
        where, args = "", []
        for key, value in (metadata or {}).items():
            where += " AND json_extract(intent, ?) = ?"
            args += [f'$.metadata."{key}"', value]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT action_id FROM actions WHERE 1=1{where} ORDER BY created_at, rowid", args
            ).fetchall()
        return [str(r[0]) for r in rows]

    def receipts(self) -> list[Receipt]:
        """Every receipt, in chain order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, action_id, body, prev_hash, hash, signature FROM receipts ORDER BY seq"
            ).fetchall()
        return [Receipt(*r) for r in rows]

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, action_id, at, record, data FROM journal WHERE action_id=?"
                " ORDER BY seq",
                (action_id,),
            ).fetchall()
        return [JournalRecord(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


# -- memory ------------------------------------------------------------------------------


class _MemoryTx:
    def __init__(self, store: MemoryStore) -> None:
        self.s = store

    def get_action(self, action_id: str) -> _ActionRow | None:
        row = self.s._actions.get(action_id)
        return None if row is None else replace(row)

    def put_action(self, row: _ActionRow, *, new: bool) -> None:
        self.s._actions[row.intent.action_id] = replace(row)

    def get_lease(self, lease_id: str) -> Lease | None:
        return self.s._leases.get(lease_id)

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        self.s._leases[lease.id] = lease

    def journal(self, action_id: str, at: float, record: str, data: Mapping[str, Any]) -> None:
        self.s._journal.append(
            JournalRecord(len(self.s._journal) + 1, action_id, at, record, dict(data))
        )

    def last_receipt(self) -> tuple[int, str]:
        if not self.s._receipts:
            return 0, GENESIS_HASH
        last = self.s._receipts[-1]
        return last.seq, last.hash

    def add_receipt(self, receipt: Receipt) -> None:
        self.s._receipts.append(receipt)

    def get_receipt(self, seq: int) -> Receipt | None:
        return next((r for r in self.s._receipts if r.seq == seq), None)


class MemoryStore(_RuleStore):
    """The same rules kept in memory, for tests: nothing survives the process."""

    def __init__(self) -> None:
        self.commits = 0
        self._lock = threading.RLock()
        self._actions: dict[str, _ActionRow] = {}
        self._leases: dict[str, Lease] = {}
        self._journal: list[JournalRecord] = []
        self._receipts: list[Receipt] = []

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        with self._lock:
            snapshot = (
                dict(self._actions),
                dict(self._leases),
                list(self._journal),
                list(self._receipts),
            )
            try:
                yield _MemoryTx(self)
            except BaseException:
                self._actions, self._leases, self._journal, self._receipts = snapshot
                raise
            self.commits += 1

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        with self._lock:
            yield _MemoryTx(self)

    def pending(self) -> list[str]:
        """Action ids with an intent and no outcome, oldest first."""
        with self._lock:
            rows = [r for r in self._actions.values() if r.settlement is None]
        return [r.intent.action_id for r in sorted(rows, key=lambda r: r.intent.created_at)]

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs."""
        wanted = dict(metadata or {})
        with self._lock:
            rows = [
                r
                for r in self._actions.values()
                if all(r.intent.metadata.get(k) == v for k, v in wanted.items())
            ]
        return [r.intent.action_id for r in sorted(rows, key=lambda r: r.intent.created_at)]

    def receipts(self) -> list[Receipt]:
        """Every receipt, in chain order."""
        with self._lock:
            return list(self._receipts)

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        with self._lock:
            return [r for r in self._journal if r.action_id == action_id]

    def close(self) -> None:
        """Nothing to release."""
