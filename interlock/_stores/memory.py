"""The same store rules kept in memory, for tests and mock runs: nothing survives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from interlock._core.journal import (
    ActionHistory,
    ActionRow,
    Clock,
    JournalRecord,
    RuleStore,
    SettledAction,
    Turn,
    Tx,
)
from interlock._core.leases import Lease
from interlock._core.log import LoggedReceipt, StoredHead
from interlock._core.receipts import Receipt


class _MemoryTx:
    def __init__(self, store: MemoryStore, now: float) -> None:
        self.s = store
        self.now = now

    def get_action(self, action_id: str) -> ActionRow | None:
        row = self.s._actions.get(action_id)
        return None if row is None else replace(row)

    def put_action(self, row: ActionRow, *, new: bool) -> None:
        self.s._actions[row.intent.action_id] = replace(row)

    def peek_action(self, action_id: str) -> ActionRow | None:
        return self.get_action(action_id)

    def get_turn(self, target: str) -> Turn | None:
        return self.s._turns.get(target)

    def put_turn(self, turn: Turn) -> None:
        self.s._turns[turn.target] = turn

    def get_lease(self, lease_id: str) -> Lease | None:
        return self.s._leases.get(lease_id)

    def put_lease(self, lease: Lease, *, new: bool) -> None:
        self.s._leases[lease.id] = lease

    def journal(self, action_id: str, record: str, data: Mapping[str, Any]) -> None:
        self.s._journal.append(
            JournalRecord(len(self.s._journal) + 1, action_id, self.now, record, dict(data))
        )

    def receipt_id(self) -> int:
        return self.s._receipts[-1].seq + 1 if self.s._receipts else 1

    def add_receipt(self, receipt: Receipt) -> None:
        self.s._receipts.append(receipt)

    def get_receipt(self, seq: int) -> Receipt | None:
        receipts = self.s._receipts
        if 0 < seq <= len(receipts) and receipts[seq - 1].seq == seq:
            return receipts[seq - 1]
        return next((r for r in receipts if r.seq == seq), None)

    def lock_log(self) -> bool:
        # Every write holds the store's one lock.
        return True

    def latest_head(self) -> StoredHead | None:
        return self.s._heads[-1] if self.s._heads else None

    def unlogged(self, limit: int) -> list[tuple[int, str, str]]:
        placed = self.s._leaves
        rows = [(r.seq, r.action_id, r.body_text) for r in self.s._receipts if r.seq not in placed]
        return rows[:limit]

    def set_leaves(self, places: Sequence[tuple[int, int]]) -> None:
        for leaf, seq in places:
            self.s._leaves[seq] = leaf

    def add_head(self, head: StoredHead) -> None:
        self.s._heads.append(head)

    def mark_anchored(self, size: int, at: float) -> None:
        self.s._heads = [replace(h, anchored_at=at) if h.size == size else h for h in self.s._heads]


class MemoryStore(RuleStore):
    """The same rules kept in memory, for tests and mock runs: nothing survives the process.

    `clock` is the store's clock (a test's fake clock, or the mock engine's).
    """

    def __init__(self, *, clock: Clock = time.time) -> None:
        self.commits = 0
        self._clock = clock
        self._lock = threading.RLock()
        self._actions: dict[str, ActionRow] = {}
        self._leases: dict[str, Lease] = {}
        self._journal: list[JournalRecord] = []
        self._receipts: list[Receipt] = []
        self._turns: dict[str, Turn] = {}
        # The receipt log: each logged receipt's place (by id), and the tree heads.
        self._leaves: dict[int, int] = {}
        self._heads: list[StoredHead] = []

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._lock:
            snapshot = (
                dict(self._actions),
                dict(self._leases),
                list(self._journal),
                list(self._receipts),
                dict(self._turns),
                dict(self._leaves),
                list(self._heads),
            )
            try:
                yield _MemoryTx(self, self._clock())
            except BaseException:
                (
                    self._actions,
                    self._leases,
                    self._journal,
                    self._receipts,
                    self._turns,
                    self._leaves,
                    self._heads,
                ) = snapshot
                raise
            self.commits += 1

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        with self._lock:
            yield _MemoryTx(self, self._clock())

    def pending(self, kind: str | None = None) -> list[str]:
        """Action ids (of `kind`, if given) with an intent and no outcome, oldest first."""
        with self._lock:
            rows = [
                r
                for r in self._actions.values()
                if r.settlement is None and (kind is None or r.intent.kind == kind)
            ]
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

    def receipts(self) -> Iterator[Receipt]:
        """Every receipt, in chain order, with its place in the log."""
        with self._lock:
            receipts = [replace(r, leaf=self._leaves.get(r.seq)) for r in self._receipts]
        yield from receipts

    def heads(self, after: int = -1) -> Iterator[StoredHead]:
        """The tree heads of the receipt log larger than `after`, smallest first."""
        with self._lock:
            heads = sorted(
                (h for h in self._heads if after < 0 or h.size > after), key=lambda h: h.size
            )
        yield from heads

    def logged(self, start: int = 0) -> Iterator[LoggedReceipt]:
        """The receipts in the log from place `start` on, in leaf order."""
        with self._lock:
            entries = [
                LoggedReceipt(self._leaves[r.seq], r.seq, r.action_id, r.body_text)
                for r in self._receipts
                if self._leaves.get(r.seq, -1) >= start
            ]
        yield from sorted(entries, key=lambda e: e.leaf)

    def unlogged_count(self) -> int:
        """How many receipts are not in the log yet."""
        with self._lock:
            return sum(1 for r in self._receipts if r.seq not in self._leaves)

    def settled(self) -> Iterator[SettledAction]:
        """Every settled action with its receipt's sequence number, in the order of those
        numbers (none first)."""
        with self._lock:
            rows = [r for r in self._actions.values() if r.settlement is not None]
        rows.sort(key=lambda r: -1 if r.receipt_seq is None else r.receipt_seq)
        for r in rows:
            yield SettledAction(r.intent.action_id, r.settlement, r.receipt_seq)

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        with self._lock:
            return [r for r in self._journal if r.action_id == action_id]

    def histories(self) -> Iterator[ActionHistory]:
        """Every action's row with its journal records, ordered by action id."""
        with self._lock:
            rows = sorted(self._actions.items())
            records: dict[str, list[JournalRecord]] = {}
            for r in self._journal:
                records.setdefault(r.action_id, []).append(r)
        for action_id, row in rows:
            yield ActionHistory(action_id, row, records.get(action_id, []))

    def leases(self) -> Iterator[Lease]:
        """Every lease, ordered by its id."""
        with self._lock:
            leases = sorted(self._leases.items())
        for _, lease in leases:
            yield lease

    def integrity_problems(self) -> list[str]:
        """Memory cannot be damaged the way a file can: none."""
        return []

    def close(self) -> None:
        """Nothing to release."""
