"""The Stripe transfer through the real `stripe` SDK against the emulator, across SIGKILL.

A worker process sends a transfer to a connected account and SIGKILLs itself at a gate
event (as workers/ do); a new process's `gate.recover()` finishes the action from the
journal and Stripe's own list of the account's transfers.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    SQLiteStore,
    StripePayments,
    StripeTransfer,
    Timing,
    make_stripe_client,
    new_action_id,
    transfers_fingerprint,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

AMOUNT = 2_500
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)

# The worker: one gate over the emulator that SIGKILLs its own process at `crash`.
WORKER = """
import os, signal, sys
from interlock import (UNSIGNED_APPROVALS, Gate, Intent, SQLiteStore, StripePayments,
    StripeTransfer, Timing, make_stripe_client)

url, store, key, crash, action, target, amount, lease, fingerprint = sys.argv[1:]
payments = StripePayments(make_stripe_client(key, timeout_s=1, base_url=url))

def on_event(event):
    if event.kind == crash:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

gate = Gate(SQLiteStore(store), StripeTransfer(payments),
            timing=Timing(claim_ttl_s=6, stripe_timeout_s=1), on_event=on_event,
            approvers=UNSIGNED_APPROVALS)  # this test is about a kill, not who approved
gate.submit(Intent(action, "transfer", target, int(amount), lease, fingerprint))
"""


def _decide(tmp_path: Path, emulator: StripeEmulator) -> tuple[StripePayments, Path, Intent]:
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emulator.url))
    account = "acct_MadeUp" + new_action_id()[-10:]
    store = tmp_path / "journal.sqlite3"
    now = time.time()
    SQLiteStore(store).grant_lease(
        Lease(f"lease-{account}", "transfer", account, AMOUNT, now + 3600, "test", now)
    )
    seen = transfers_fingerprint(payments.list_transfers(account))
    intent = Intent(new_action_id(), "transfer", account, AMOUNT, f"lease-{account}", seen)
    return payments, store, intent


def _worker(emulator: StripeEmulator, store: Path, intent: Intent, crash: str) -> int:
    args = [emulator.url, str(store), TEST_KEY, crash, intent.action_id, intent.target, str(AMOUNT)]
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *args, intent.lease_id, intent.fingerprint],
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == -9, done.stderr
    return done.returncode


def test_a_transfer_killed_after_stripes_answer_is_adopted_once(
    tmp_path: Path, emulator: StripeEmulator
) -> None:
    """SIGKILL right after the answer: recovery adopts Stripe's transfer, sends nothing."""
    payments, store, intent = _decide(tmp_path, emulator)

    _worker(emulator, store, intent, "after-answer")
    [outcome] = Gate(
        SQLiteStore(store), StripeTransfer(payments), timing=TIMING, approvers=UNSIGNED_APPROVALS
    ).recover()

    transfers = payments.list_transfers(intent.target)
    assert outcome.status == "adopted", outcome
    assert [t.metadata.get(ACTION_METADATA_KEY) for t in transfers] == [intent.action_id]
    assert transfers[0].amount == AMOUNT
    assert emulator.model.requests.count(("POST", "transfers")) == 1


@pytest.mark.parametrize("crash", ["journaled", "before-send"])
def test_a_transfer_made_by_hand_during_the_outage_refuses_the_action(
    tmp_path: Path, emulator: StripeEmulator, crash: str
) -> None:
    """Killed before sending; a person pays the account meanwhile: recovery refuses."""
    payments, store, intent = _decide(tmp_path, emulator)

    _worker(emulator, store, intent, crash)
    by_hand = payments.create_transfer(intent.target, 1_000)
    [outcome] = Gate(
        SQLiteStore(store), StripeTransfer(payments), timing=TIMING, approvers=UNSIGNED_APPROVALS
    ).recover()

    assert outcome.status == "refused", outcome
    assert [t.id for t in payments.list_transfers(intent.target)] == [by_hand.id]
