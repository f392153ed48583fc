"""Workers SIGKILLed mid-story, then a person's re-approval or `verify()`, across real processes.

Each worker is a real Python process (tests/helpers/refund_worker.py) sending through the
real `stripe` SDK to the loopback emulator, which runs in the test process; the test
waits on the line a worker prints (with a deadline) and kills it with SIGKILL there, so
nothing of the worker's own shutdown runs: no store close, no checkpoint, no outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    FileAnchor,
    Gate,
    Intent,
    KeyList,
    Lease,
    SigningKey,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.e2e.test_store_processes import LINE_TIMEOUT_S, ROOT, Child

WORKER = str(ROOT / "tests" / "helpers" / "refund_worker.py")
# The gate's receipt key (the workers load it from its file) and the public key list
# verify() is given: it never sees the private key.
KEY = SigningKey.generate()
KEYS = KeyList()
KEYS.add(KEY.public)
AMOUNT = 2000
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)


@pytest.fixture
def spawn() -> Iterator[list[Child]]:
    """Workers started by a test; each is killed (if still running) and reaped afterwards."""
    children: list[Child] = []
    yield children
    for child in children:
        child.close()


@pytest.fixture
def payments(
    emulator: StripeEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[StripePayments]:
    """The test's own Stripe reader over the emulator; workers sign receipts with KEY."""
    key_file = tmp_path / "signing-key.pem"
    KEY.save(key_file)
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", str(key_file))  # the workers inherit it
    client = StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emulator.url))
    yield client
    client.close()  # its kept-alive connection holds an emulator thread until closed


def _grant(store: SQLiteStore, payment_intent: str, name: str, cap: int) -> Lease:
    now = time.time()
    lease = Lease(
        f"lease-{name}-{payment_intent}", "refund", payment_intent, cap, now + 3600, "test", now
    )
    store.grant_lease(lease)
    return lease


def _decide(payments: StripePayments, payment_intent: str, lease_id: str) -> Intent:
    """A decision to refund AMOUNT, made on the payment's refunds as they are now."""
    seen = refunds_fingerprint(payments.list_refunds(payment_intent))
    return Intent(new_action_id(), "refund", payment_intent, AMOUNT, lease_id, seen)


def _worker(
    spawn: list[Child],
    tmp_path: Path,
    emulator: StripeEmulator,
    path: Path,
    intent: Intent,
    stop_at: str | None = None,
) -> Child:
    """A worker submitting `intent`; with `stop_at`, held at that gate event to be killed."""
    name = f"worker-{len(spawn)}"
    args = [WORKER, str(path), emulator.url, json.dumps(intent.to_dict())]
    args += [stop_at] if stop_at is not None else []
    child = Child(args, tmp_path / f"{name}.stderr")
    spawn.append(child)
    return child


def _sigkill(child: Child) -> None:
    os.kill(child.proc.pid, signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL


def test_reapprove_of_an_unknown_action_killed_after_its_500_adopts_the_refund_that_landed(
    tmp_path: Path, emulator: StripeEmulator, payments: StripePayments, spawn: list[Child]
) -> None:
    """Stripe makes the refund and answers the create with a 500; the worker journals the
    unknown mark and is SIGKILLed. A person re-approves it under a new approval: the
    original action is adopted naming that refund, nothing is sent again ($20 for one
    decision), the first approval spent $20 and the new one nothing, verify() is clean."""
    payment = payments.create_payment(5000)
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    try:
        first = _grant(store, payment.id, "first", AMOUNT)
        intent = _decide(payments, payment.id, first.id)
        fault = emulator.model.add_fault("error_500", stage="after_commit")

        worker = _worker(spawn, tmp_path, emulator, path, intent, "unknown")
        assert worker.line() == f"unknown {intent.action_id}"
        state = store.action(intent.action_id)
        assert state is not None and state.unknown is not None and state.settlement is None
        assert fault.committed.is_set(), "the refund is made before the 500 answers"
        _sigkill(worker)
        [landed] = payments.list_refunds(payment.id)
        assert landed.metadata[ACTION_METADATA_KEY] == intent.action_id
        assert emulator.model.requests.count(("POST", "refunds")) == 1

        again = _grant(store, payment.id, "again", AMOUNT)
        events: list[tuple[str, dict[str, Any]]] = []
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=TIMING,
            signing_key=KEY,
            on_event=lambda e: events.append((e.kind, dict(e.data))),
            approvers=UNSIGNED_APPROVALS,
            log_every=1,
        )
        outcome = gate.reapprove(intent.action_id, again.id, "support")

        assert (outcome.action_id, outcome.status, outcome.external_id) == (
            intent.action_id,
            "adopted",
            landed.id,
        )
        assert ("reapprove-adopts", {"action_id": intent.action_id, "external_id": landed.id}) in (
            events
        )
        assert [k for k, _ in events if k == "before-send"] == []
        assert emulator.model.requests.count(("POST", "refunds")) == 1, "no second create"
        refunds = payments.list_refunds(payment.id)
        assert [r.id for r in refunds] == [landed.id]
        assert sum(r.amount for r in refunds) == AMOUNT
        assert store.pending() == [] and store.actions() == [intent.action_id]
        spent = store.lease(first.id)
        assert spent is not None and spent.spent == AMOUNT and not spent.reservations
        unused = store.lease(again.id)
        assert unused is not None and unused.spent == 0 and not unused.reservations
        result = verify(store, payments, keys=KEYS)
        assert result.ok, result.problems
        assert (result.signed, result.unlogged) == (True, 0), "reapprove's settle logged it"
    finally:
        store.close()


def test_a_receipt_left_unlogged_by_a_sigkill_is_logged_and_anchored_by_the_next_recover(
    tmp_path: Path, emulator: StripeEmulator, payments: StripePayments, spawn: list[Child]
) -> None:
    """A worker settles a $20 refund, its receipt signed, and is SIGKILLed before its gate
    numbered it into the receipt log (it numbers a batch at a time): verify() with only the
    public keys finds it signed and unlogged, and no problem. The next gate, as the demo
    builds it (every receipt logged, an anchor elsewhere), catches the log up in recover()
    before anything else: the receipt is in the log, its head anchored, verify() clean."""
    payment = payments.create_payment(5000)
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    try:
        lease = _grant(store, payment.id, "one", AMOUNT)
        intent = _decide(payments, payment.id, lease.id)
        worker = _worker(spawn, tmp_path, emulator, path, intent)
        assert json.loads(worker.line())["status"] == "sent"
        _sigkill(worker)

        before = verify(store, payments, keys=KEYS)
        assert before.ok, before.problems
        assert (before.signed, before.formats) == (True, {"ed25519": 1})
        assert (before.unlogged, before.log_size, before.heads) == (1, 0, 0)

        (tmp_path / "anchor").mkdir()
        anchor = FileAnchor(tmp_path / "anchor" / "heads.jsonl")
        events: list[tuple[str, dict[str, Any]]] = []
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=TIMING,
            signing_key=KEY,
            on_event=lambda e: events.append((e.kind, dict(e.data))),
            approvers=UNSIGNED_APPROVALS,
            anchors=[anchor],
            log_every=1,
        )
        assert gate.recover() == []
        assert ("logged", {"size": 1, "published": 1, "problem": None}) in [
            (k, {f: d.get(f) for f in ("size", "published", "problem")}) for k, d in events
        ], events

        after = verify(store, payments, keys=KEYS, anchors=[anchor])
        assert after.ok, after.problems
        assert (after.unlogged, after.log_size, after.heads, after.anchored) == (0, 1, 1, 1)
        [held] = anchor.heads()
        assert [leaf.action_id for leaf in held.leaves] == [intent.action_id]
    finally:
        store.close()


def test_verify_names_the_refund_of_an_action_lost_with_the_wal_after_a_sigkill(
    tmp_path: Path, emulator: StripeEmulator, payments: StripePayments, spawn: list[Child]
) -> None:
    """A first worker refunds $20 and closes the store (its -wal checkpointed into the
    file); a second refunds $20 more on the same payment and is SIGKILLed while its -wal
    still holds that action. With the -wal and -shm lost, verify(), through the Python API
    and the CLI, names the second action's refund at Stripe as one the store lacks."""
    payment = payments.create_payment(5000)
    path = tmp_path / "journal.sqlite3"
    wal = Path(f"{path}-wal")
    store = SQLiteStore(path)
    lease = _grant(store, payment.id, "both", 2 * AMOUNT)
    store.close()  # no connection of the test's may checkpoint the second worker's -wal

    first = _decide(payments, payment.id, lease.id)
    closing = _worker(spawn, tmp_path, emulator, path, first)
    assert json.loads(closing.line())["status"] == "sent"
    closing.send("close")
    assert closing.finish() == 0
    assert not wal.exists() or wal.stat().st_size == 0, "the last close checkpoints the -wal"

    second = _decide(payments, payment.id, lease.id)
    killed = _worker(spawn, tmp_path, emulator, path, second)
    report = json.loads(killed.line())
    assert (report["action_id"], report["status"]) == (second.action_id, "sent")
    assert wal.stat().st_size > 0, "the second action's rows are only in the -wal"
    _sigkill(killed)
    by_action = {r.metadata[ACTION_METADATA_KEY]: r for r in payments.list_refunds(payment.id)}
    assert set(by_action) == {first.action_id, second.action_id}
    assert by_action[second.action_id].id == report["external_id"]

    # The store as the killed worker left it, -wal and all, is whole: verify is clean.
    whole = tmp_path / "whole"
    whole.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copyfile(f"{path}{suffix}", whole / f"{path.name}{suffix}")
    copy = SQLiteStore.open_read_only(whole / path.name)
    kept = verify(copy, payments, keys=KEYS)
    copy.close()
    assert kept.ok, kept.problems

    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink()
    reader = SQLiteStore.open_read_only(path)
    try:
        assert reader.actions() == [first.action_id], "the second action went with the -wal"
        result = verify(reader, payments, keys=KEYS)
    finally:
        reader.close()

    lost = (
        f"refund {report['external_id']} ({AMOUNT}) at Stripe names action {second.action_id}, "
        "which the store does not have"
    )
    assert not result.ok
    assert [p for p in result.problems if lost in p] != [], result.problems
    assert [p for p in result.problems if first.action_id in p] == [], result.problems

    KEYS.save(tmp_path / "keys.json")  # the command checks with the public keys alone
    env = {
        **{k: v for k, v in os.environ.items() if k != "INTERLOCK_SIGNING_KEY"},
        "STRIPE_SECRET_KEY": TEST_KEY,
        "INTERLOCK_STRIPE_BASE": emulator.url,
        "INTERLOCK_VERIFY_KEYS": str(tmp_path / "keys.json"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "verify", str(path), "--stripe"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=LINE_TIMEOUT_S,
    )
    assert done.returncode == 1, done.stderr
    assert lost in done.stdout, done.stdout
    assert first.action_id not in done.stdout, done.stdout


def test_a_recovery_after_a_sigkill_links_its_span_to_the_dead_workers_action(
    tmp_path: Path,
    emulator: StripeEmulator,
    payments: StripePayments,
    spawn: list[Child],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A traced worker (its spans appended to a file as each ends) is SIGKILLed after
    Stripe answered its create: the file holds its ended send span, in the action's own
    trace (`action_span_context`), and not its call's span, which never ended. A traced
    recovery in this process adopts the refund; its span is in that same trace and links
    to the action, so a viewer shows the recovery beside the dead worker's send."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from interlock.otel import action_span_context, traced

    traces = tmp_path / "traces.jsonl"
    monkeypatch.setenv("INTERLOCK_OTEL_FILE", str(traces))  # the worker inherits it
    payment = payments.create_payment(5000)
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        intent = _decide(payments, payment.id, _grant(store, payment.id, "one", AMOUNT).id)
        worker = _worker(spawn, tmp_path, emulator, path, intent, "after-answer")
        assert worker.line() == f"after-answer {intent.action_id}"
        _sigkill(worker)
        [landed] = payments.list_refunds(payment.id)
        dead = [json.loads(line) for line in traces.read_text().splitlines()]
        assert [s["name"] for s in dead] == ["interlock.send"], "the call's span never ended"
        [send] = dead
        assert send["attributes"]["interlock.action_id"] == intent.action_id
        assert send["attributes"]["interlock.external_id"] == landed.id

        monkeypatch.delenv("INTERLOCK_OTEL_FILE")
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=TIMING,
            signing_key=KEY,
            approvers=UNSIGNED_APPROVALS,
        )
        outcomes = traced(gate, tracer_provider=provider).recover()

        assert [(o.status, o.external_id) for o in outcomes] == [("adopted", landed.id)]
        [recovery] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool refund"]
        action = action_span_context(intent.action_id)
        assert int(send["context"]["trace_id"], 16) == action.trace_id
        assert recovery.context.trace_id == action.trace_id
        assert recovery.parent is not None and recovery.parent.span_id == action.span_id
        link = recovery.links[0]
        assert (link.context.trace_id, link.context.span_id) == (action.trace_id, action.span_id)
        attributes = dict(recovery.attributes or {})
        assert attributes["interlock.action_id"] == intent.action_id
        assert (attributes["interlock.outcome"], attributes["interlock.attempt"]) == ("adopted", 2)
        assert emulator.model.requests.count(("POST", "refunds")) == 1, "nothing sent again"
    finally:
        store.close()
        provider.shutdown()
