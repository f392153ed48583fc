"""The SQLite store shared by real processes: racing recoverers, SIGKILL mid-write, bad files.

Children are real Python processes running the helpers under `tests/helpers/`; they
start together through a stdin barrier and report on stdout, which the test reads with
a deadline. The emulator runs in the test process; children reach it over loopback.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    Intent,
    Lease,
    Owner,
    SchemaVersionError,
    SQLiteStore,
    StoreError,
    StripePayments,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._stores.sqlite import SCHEMA_VERSION
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "tests" / "helpers"
LINE_TIMEOUT_S = 30.0

# Journals an intent with a long, live claim (not yet `sending`), says so, then hangs
# until it is killed: a worker that died right after commit 1.
BEGIN_AND_HANG = """
import json, sys, time
from interlock import Intent, Owner, SQLiteStore
store = SQLiteStore(sys.argv[1])
intent = Intent.from_dict(json.loads(sys.argv[2]))
store.begin(intent, Owner.current("crashed-worker"), 60.0, 2.0)
print("journaled", flush=True)
sys.stdin.readline()
"""


class Child:
    """A child process whose stdout lines are read into a queue, to wait on with a deadline."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        self._stderr = stderr_path.open("w")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
            env={**os.environ, "STRIPE_SECRET_KEY": TEST_KEY},
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self, timeout_s: float = LINE_TIMEOUT_S) -> str:
        """The next stdout line; fails if none comes in time or the child exits first."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line from the child within {timeout_s} s") from None
        if line is None:
            self.proc.wait(LINE_TIMEOUT_S)
            raise AssertionError(
                f"the child exited ({self.proc.returncode}) early: "
                + self.stderr_path.read_text()[-2000:]
            )
        return line

    def send(self, text: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self) -> int:
        """Wait for the child to exit; its exit code."""
        return self.proc.wait(LINE_TIMEOUT_S)

    def close(self) -> None:
        """Kill the child if it still runs, reap it and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(LINE_TIMEOUT_S)
        self._reader.join(LINE_TIMEOUT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[list[Child]]:
    """Children started by a test; each is killed (if still running) and reaped afterwards."""
    children: list[Child] = []
    yield children
    for child in children:
        child.close()


def _start(children: list[Child], tmp_path: Path, name: str, args: list[str]) -> Child:
    child = Child(args, tmp_path / f"{name}.stderr")
    children.append(child)
    return child


def _lease(target: str, cap: int) -> Lease:
    now = time.time()
    return Lease(
        id=f"lease-{target}",
        kind="refund",
        target=target,
        cap=cap,
        expires_at=now + 3600,
        granted_by="test",
        granted_at=now,
    )


# -- two recoverers ----------------------------------------------------------------------


@pytest.mark.parametrize("abandoned", ["claim-expired", "owner-killed"])
def test_two_recovering_processes_send_once(
    abandoned: str, emulator: StripeEmulator, tmp_path: Path, spawn: list[Child]
) -> None:
    """Two processes recovering one abandoned action at once: one sends, the other reports it."""
    store_path = tmp_path / "journal.sqlite3"
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=2.0, base_url=emulator.url))
    payment = payments.create_payment(5000)
    store = SQLiteStore(store_path)
    store.grant_lease(_lease(payment.id, 2000))
    intent = Intent(
        action_id=new_action_id(),
        kind="refund",
        target=payment.id,
        amount=2000,
        lease_id=f"lease-{payment.id}",
        fingerprint=refunds_fingerprint(payments.list_refunds(payment.id)),
        created_at=time.time(),
    )
    if abandoned == "claim-expired":
        # A worker that journaled `sending` long ago and never came back: only expiry frees it.
        owner, long_ago = Owner.current("crashed-worker"), time.time() - 100
        past = SQLiteStore(store_path, clock=lambda: long_ago)
        epoch = past.begin(intent, owner, 6.0, 2.0).epoch
        assert epoch > 0
        assert past.mark_sending(intent.action_id, epoch, 7.0).status == "ok"
        past.close()
    else:
        # A worker killed right after commit 1: its claim is live for 60 s, its process gone.
        crashed = _start(
            spawn,
            tmp_path,
            "crashed",
            ["-c", BEGIN_AND_HANG, str(store_path), json.dumps(intent.to_dict())],
        )
        assert crashed.line() == "journaled"
        os.kill(crashed.proc.pid, signal.SIGKILL)
        assert crashed.finish() == -signal.SIGKILL
    store.close()
    # The winner's answer is held a little (well within its 3 s deadline), so the loser is
    # sure to find the action pending and meet the winner's claim.
    emulator.model.add_fault("hold", hold_ms=700, commit=True)

    workers = [
        _start(
            spawn,
            tmp_path,
            wid,
            [str(HELPERS / "recoverer.py"), str(store_path), emulator.url, wid],
        )
        for wid in ("recoverer-a", "recoverer-b")
    ]
    for w in workers:
        assert w.line() == "ready"
    for w in workers:
        w.send("go")
    reports = [json.loads(w.line()) for w in workers]
    assert [w.finish() for w in workers] == [0, 0]

    refunds = payments.list_refunds(payment.id)
    assert len(refunds) == 1, refunds
    assert refunds[0].metadata[ACTION_METADATA_KEY] == intent.action_id
    assert emulator.model.requests.count(("POST", "refunds")) == 1
    assert sorted(r["sends"] for r in reports) == [0, 1], reports
    for report in reports:
        assert report["outcomes"] == [
            {"action_id": intent.action_id, "status": "sent", "external_id": refunds[0].id}
        ], report
    winner = next(r for r in reports if r["sends"] == 1)

    store = SQLiteStore(store_path)
    try:
        receipts = list(store.receipts())
        assert [(r.action_id, r.outcome) for r in receipts] == [(intent.action_id, "sent")]
        assert receipts[0].body["owner"]["worker_id"] == winner["worker"]
        claims = [h.data for h in store.history(intent.action_id) if h.record == "claim"]
        took_over = [c["took_over"]["worker_id"] for c in claims if c["took_over"]]
        assert took_over[0] == "crashed-worker"
        lease = store.lease(f"lease-{payment.id}")
        assert lease is not None and (lease.spent, dict(lease.reservations)) == (2000, {})
        result = verify(store, payments)
        assert result.ok, result.problems
    finally:
        store.close()


# -- SIGKILL in the middle of journal writes --------------------------------------------


def _all_action_ids(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT action_id FROM actions ORDER BY rowid")]
    finally:
        conn.close()


def test_sigkill_mid_write_keeps_every_committed_action_whole(
    tmp_path: Path, spawn: list[Child]
) -> None:
    """After SIGKILLs mid-write, every reported action is whole and no action is half-written.

    Each writer has a payment of its own: a writer killed in commit 2 leaves a `sending`
    claim that holds its payment's turn until the claim expires (its request may be in
    flight), so a next writer on the same payment would rightly wait."""
    store_path = tmp_path / "journal.sqlite3"
    writers = (75, 76, 77)  # killed right after a `committed`, a `begun`, a `sending`
    store = SQLiteStore(store_path)
    for lines in writers:
        store.grant_lease(_lease(f"pi_sigkill_{lines}", 10**9))
    store.close()

    # What the writer reported, per action: the last of begun, sending, committed.
    reported: dict[str, str] = {}
    for lines in writers:
        target = f"pi_sigkill_{lines}"
        writer = _start(
            spawn,
            tmp_path,
            f"writer-{lines}",
            [str(HELPERS / "journal_writer.py"), str(store_path), f"lease-{target}", target],
        )
        for _ in range(lines):
            stage, aid = writer.line().split()
            reported[aid] = stage
        # The writer never pauses, so the kill lands in the write after the last line read.
        os.kill(writer.proc.pid, signal.SIGKILL)
        assert writer.finish() == -signal.SIGKILL
    assert list(reported.values()).count("committed") == 75

    store = SQLiteStore(store_path)
    try:
        every = _all_action_ids(store_path)
        assert set(reported) <= set(every)
        leases = {lease.id: lease for lease in store.leases()}
        settled: set[str] = set()
        spent = dict.fromkeys(leases, 0)
        for aid in every:
            state = store.action(aid)
            assert state is not None
            lease = leases[state.intent.lease_id]
            records = [h.record for h in store.history(aid)]
            if state.settlement is not None:
                settled.add(aid)
                assert records == ["intent", "claim", "sending", "outcome"], (aid, records)
                assert state.receipt is not None, f"{aid}: an outcome without its receipt"
                assert state.receipt.action_id == aid
                assert state.receipt.outcome == state.settlement.status
                assert aid not in lease.reservations
                if state.settlement.status == "sent":
                    spent[lease.id] += state.settlement.amount or 0
            else:
                assert reported.get(aid) != "committed", f"{aid}: a reported outcome is lost"
                assert state.receipt is None
                assert records in (["intent", "claim"], ["intent", "claim", "sending"]), records
                sending = records[-1] == "sending"
                assert sending or reported.get(aid) != "sending", f"{aid}: `sending` is lost"
                assert state.claim is not None and state.claim.sending == sending
                assert (aid in lease.reservations) == sending, f"{aid}: reservation out of step"
        receipts = list(store.receipts())
        assert sorted(r.action_id for r in receipts) == sorted(settled)
        assert {lease.id: lease.spent for lease in leases.values()} == spent
        result = verify(store)
        assert result.ok, result.problems
        assert result.chain_length == len(settled) >= 75
    finally:
        store.close()


# -- files that are not this store -------------------------------------------------------


def _schema(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return sorted(conn.execute("SELECT type, name FROM sqlite_master"))
    finally:
        conn.close()


@pytest.mark.parametrize("layout", ["same-tables", "other-tables"])
def test_store_with_another_schema_version_is_refused(layout: str, tmp_path: Path) -> None:
    """A store of another schema version is refused, untouched, with a message saying what to do."""
    path = tmp_path / "journal.sqlite3"
    if layout == "same-tables":
        SQLiteStore(path).close()
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    else:
        # A later version that reshaped its tables: nothing of this version may be added.
        conn = sqlite3.connect(path)
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('schema_version', '99');"
            "CREATE TABLE actions (action_id TEXT PRIMARY KEY, payload TEXT NOT NULL);"
        )
    conn.close()
    before = _schema(path)

    with pytest.raises(SchemaVersionError) as info:
        SQLiteStore(path)

    err = info.value
    assert isinstance(err, StoreError)
    assert (err.found, err.expected, err.path) == (99, SCHEMA_VERSION, str(path))
    message = str(err)
    assert str(path) in message
    assert "schema version 99" in message and f"version {SCHEMA_VERSION}" in message
    assert "use a new store file" in message
    assert _schema(path) == before


@pytest.mark.parametrize("kind", ["not-a-database", "a-directory", "under-a-file"])
def test_unusable_store_path_is_a_store_error(kind: str, tmp_path: Path) -> None:
    """A path that cannot hold a store raises StoreError naming the path, not a raw error."""
    if kind == "not-a-database":
        path = tmp_path / "journal.sqlite3"
        path.write_bytes(b"this is not an SQLite database\n" * 200)
    elif kind == "a-directory":
        path = tmp_path / "journal.sqlite3"
        path.mkdir()
    else:
        (tmp_path / "home").write_text("a file where a directory should be\n")
        path = tmp_path / "home" / "journal.sqlite3"

    with pytest.raises(StoreError) as info:
        SQLiteStore(path)

    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert "check the path" in str(info.value)
