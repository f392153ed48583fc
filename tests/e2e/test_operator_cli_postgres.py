"""The operator's commands as their own processes, on PostgreSQL.

A gate over the loopback Stripe emulator gets a 500 on two creates and its worker dies at
the unknown mark (a gone owner: its claim is still `sending`): one refund was made, one
was not. `pending`, `resolve` (adopting the first through the gate's recovery, a person
refusing the second), `show` and `revoke` then run as `python -m interlock` processes with
a test key, and `verify` with Stripe holds afterwards. Two transfers whose creates got a
500 (one made, one not) are resolved by `main` in this process, over the real SDK to the
emulator: one adopted, one refused. The rest of the commands' rules are tested in process
(tests/unit/test_operator_cli.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    PaymentsUnsettledError,
    Store,
    StripePayments,
    StripeRefund,
    StripeTransfer,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    transfers_fingerprint,
    verify,
)
from interlock import Event as GateEvent
from interlock import __main__ as cli
from interlock._core.payments import Transfer
from interlock._stores.postgres import PostgresStore
from interlock.testing import StripeEmulator
from tests.helpers.gate_rig import gone_owner

ROOT = Path(__file__).resolve().parents[2]
TEST_KEY = "sk_test_operator_e2e"


class _Killed(BaseException):
    """The worker's SIGKILL, right after the gate journaled the unknown mark."""


def _die_at_unknown(event: GateEvent) -> None:
    if event.kind == "unknown":
        raise _Killed


def _an_hour_ago() -> float:
    """The setup store's clock: the dead worker's claims ran out an hour before the
    operator (the CLI, on the real clock) looks, as they have when a person comes to it."""
    return time.time() - 3600


@pytest.fixture
def backend(pg_dsn: str, pg_schema: str) -> Iterator[tuple[Store, str]]:
    """The PostgreSQL store and the URL the CLI is given for it (SQLite's runs of the same
    commands are in process: tests/unit/test_operator_cli.py calls `main` on a store file)."""
    store = PostgresStore(pg_dsn, schema=pg_schema, clock_source=_an_hour_ago)
    try:
        yield store, f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    finally:
        store.close()


def _cli(emu: StripeEmulator, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTERLOCK_", "STRIPE_"))}
    env.update({"STRIPE_SECRET_KEY": TEST_KEY, "INTERLOCK_STRIPE_BASE": emu.url})
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _unknown(store: Store, payments: StripePayments, emu: StripeEmulator, stage: str) -> Intent:
    """A refund whose create got a 500 (made or not, by `stage`), its worker dead after."""
    pi = payments.create_payment(10_000).id
    now = store.now()
    lease = store.grant_lease(
        Lease(f"lease_{uuid.uuid4().hex[:8]}", "refund", pi, 5_000, now + 3600, "support", now)
    )
    intent = Intent(
        new_action_id(), "refund", pi, 2_000, lease.id,
        refunds_fingerprint(payments.list_refunds(pi)),
    )  # fmt: skip
    emu.model.add_fault("error_500", stage=stage)
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing.from_env({}),
        owner=gone_owner(),
        clock=_an_hour_ago,
        approvers=UNSIGNED_APPROVALS,
        on_event=_die_at_unknown,
    )
    with pytest.raises(_Killed):
        gate.submit(intent)
    return intent


def test_pending_resolve_show_revoke_as_processes(
    backend: tuple[Store, str], emulator: StripeEmulator
) -> None:
    store, location = backend
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=Timing().stripe_timeout_s, base_url=emulator.url)
    )
    made = _unknown(store, payments, emulator, "after_commit")
    lost = _unknown(store, payments, emulator, "before_execution")

    pending = _cli(emulator, "pending", location, "--stripe", "--json")
    assert pending.returncode == 0, pending.stderr
    items = {i["action_id"]: i for i in json.loads(pending.stdout)["pending"]}
    assert {a: i["state"] for a, i in items.items()} == {
        made.action_id: "unknown",
        lost.action_id: "unknown",
    }
    [refund] = [r for r in payments.list_refunds(made.target) if r.metadata.get("interlock_action")]
    assert items[made.action_id]["evidence"][-1]["own"]["id"] == refund.id
    assert items[lost.action_id]["evidence"][-1]["own"] is None

    adopted = _cli(
        emulator, "resolve", made.action_id, location, "--stripe", "--by", "alice",
        "--reason", "Stripe shows it", "--yes",
    )  # fmt: skip
    assert adopted.returncode == 0, adopted.stderr
    assert f"adopted {refund.id}" in adopted.stdout
    refused = _cli(
        emulator, "resolve", lost.action_id, location, "--stripe", "--refused",
        "--by", "bob", "--reason", "no refund at Stripe", "--yes", "--json",
    )  # fmt: skip
    assert refused.returncode == 0, refused.stderr
    assert json.loads(refused.stdout)["status"] == "refused"

    shown = _cli(emulator, "show", made.action_id, location, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["state"] == "adopted" and data["history"][-1]["record"] == "outcome"
    body = json.loads(data["receipt"]["body"])
    assert body["owner"]["worker_id"] == "operator:alice"
    assert body["operator"] == {
        "by": "alice",
        "reason": "Stripe shows it",
        "command": "resolve --stripe",
    }
    # Both receipts are in the log: the proof is against a head of two.
    assert data["proof"]["tree_size"] == 2 and len(data["proof"]["inclusion_proof"]) == 1

    revoked = _cli(
        emulator, "revoke", made.lease_id, location, "--by", "carol", "--reason", "done",
        "--yes",
    )  # fmt: skip
    assert revoked.returncode == 0, revoked.stderr
    lease = store.lease(made.lease_id)
    assert lease is not None and lease.revoked_by == "carol"
    assert lease.revocation_receipt is not None
    receipt = store.receipt(lease.revocation_receipt)
    assert receipt is not None and receipt.body["reason"] == "done"
    assert f"receipt {receipt.seq} (hash {receipt.hash})" in revoked.stdout

    assert store.pending() == []
    result = verify(store, payments, approvers=UNSIGNED_APPROVALS)
    assert result.ok, result.problems
    for done in (pending, adopted, refused, shown, revoked):
        assert TEST_KEY not in done.stdout + done.stderr
    payments.close()


class _Answers500:
    """The SDK's client, whose transfer creates answer HTTP 500: after the transfer is made
    (`made`) or before. Everything else is the client's own."""

    def __init__(self, payments: StripePayments, *, made: bool) -> None:
        self.payments = payments
        self.made = made

    def list_transfers(self, destination: str) -> list[Transfer]:
        return self.payments.list_transfers(destination)

    def create_transfer(
        self,
        destination: str,
        amount: int,
        *,
        currency: str = "usd",
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Transfer:
        if self.made:
            self.payments.create_transfer(
                destination,
                amount,
                currency=currency,
                idempotency_key=idempotency_key,
                metadata=metadata,
            )
        raise PaymentsUnsettledError("create transfer", "Internal Server Error", 500)


def _unknown_transfer(store: Store, payments: StripePayments, *, made: bool) -> Intent:
    """A transfer whose create got a 500 (made or not), its worker dead after."""
    account = f"acct_{uuid.uuid4().hex[:16]}"
    now = store.now()
    lease = store.grant_lease(
        Lease(
            f"lease_{uuid.uuid4().hex[:8]}", "transfer", account, 5_000, now + 3600, "support",
            now, currency="usd",
        )
    )  # fmt: skip
    intent = Intent(
        new_action_id(), "transfer", account, 2_000, lease.id, transfers_fingerprint([]),
        currency="usd",
    )  # fmt: skip
    gate = Gate(
        store,
        StripeTransfer(_Answers500(payments, made=made)),
        timing=Timing.from_env({}),
        owner=gone_owner(),
        clock=_an_hour_ago,
        approvers=UNSIGNED_APPROVALS,
        on_event=_die_at_unknown,
    )
    with pytest.raises(_Killed):
        gate.submit(intent)
    return intent


def test_resolve_transfers_on_postgres(
    backend: tuple[Store, str],
    emulator: StripeEmulator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unknown transfer that was made is adopted (looked up at its account over the real
    SDK, never created again); one that was not is refused by a person; verify, reading
    the transfers, holds."""
    store, location = backend
    for name in [k for k in os.environ if k.startswith(("INTERLOCK_", "STRIPE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STRIPE_SECRET_KEY", TEST_KEY)
    monkeypatch.setenv("INTERLOCK_STRIPE_BASE", emulator.url)
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=Timing().stripe_timeout_s, base_url=emulator.url)
    )
    made = _unknown_transfer(store, payments, made=True)
    lost = _unknown_transfer(store, payments, made=False)
    [transfer] = [
        t
        for t in payments.list_transfers(made.target)
        if t.metadata.get(ACTION_METADATA_KEY) == made.action_id
    ]
    creates = emulator.model.requests.count(("POST", "transfers"))

    code = cli.main(["resolve", made.action_id, location, "--stripe", "--by", "alice", "--yes"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"adopted {transfer.id}" in out
    code = cli.main(
        ["resolve", lost.action_id, location, "--stripe", "--refused", "--by", "bob",
         "--reason", "no transfer at Stripe", "--yes"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "refused by bob" in out

    assert emulator.model.requests.count(("POST", "transfers")) == creates == 1
    adopted, refused = store.action(made.action_id), store.action(lost.action_id)
    assert adopted is not None and adopted.settlement is not None
    assert (adopted.settlement.status, adopted.settlement.external_id) == ("adopted", transfer.id)
    assert refused is not None and refused.settlement is not None
    assert refused.settlement.status == "refused"
    assert store.pending() == []
    result = verify(store, payments, approvers=UNSIGNED_APPROVALS)
    assert result.ok, result.problems
    assert TEST_KEY not in out + err
    payments.close()
