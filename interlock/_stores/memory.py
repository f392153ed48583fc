"""The same store rules kept in memory, for tests and mock runs: nothing survives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from interlock._core.journal import (
    GENESIS,
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

    def last_receipt(self) -> tuple[int, str]:
        if not self.s._receipts:
            return GENESIS
        last = self.s._receipts[-1]
        return last.seq, last.hash

    def add_receipt(self, receipt: Receipt) -> None:
        self.s._receipts.append(receipt)

    def get_receipt(self, seq: int) -> Receipt | None:
        receipts = self.s._receipts
        if 0 < seq <= len(receipts) and receipts[seq - 1].seq == seq:
            return receipts[seq - 1]
        return next((r for r in receipts if r.seq == seq), None)


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

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._lock:
            snapshot = (
                dict(self._actions),
                dict(self._leases),
                list(self._journal),
                list(self._receipts),
                dict(self._turns),
            )
            try:
                yield _MemoryTx(self, self._clock())
            except BaseException:
                (self._actions, self._leases, self._journal, self._receipts, self._turns) = snapshot
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
        """Every receipt, in chain order."""
        with self._lock:
            receipts = list(self._receipts)
        yield from receipts

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
