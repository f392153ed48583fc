"""Two currencies in one store: a USD and an EUR transfer gate share a payouts journal.

A USD worker process journals a $25 transfer and is SIGKILLed; the EUR gate's
`recover()` must leave it (pending, its claim untouched) and the USD gate's must send it,
in dollars, once: through the real `stripe` SDK against the loopback emulator. A yen
refund through the same SDK is checked against its payment's currency and worded in yen.
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
    ActionError,
    Gate,
    Intent,
    Lease,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    StripeTransfer,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    transfers_fingerprint,
)
from interlock.openai_agents import outcome_words
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

AMOUNT = 2_500
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)

# The USD worker: journals its intent (no currency given: the gate stamps its effect's)
# and SIGKILLs its own process right after commit 1.
WORKER = """
import os, signal, sys
from interlock import (UNSIGNED_APPROVALS, Gate, Intent, SQLiteStore, StripePayments,
    StripeTransfer, Timing, make_stripe_client)

url, store, key, action, target, amount, lease, fingerprint = sys.argv[1:]
payments = StripePayments(make_stripe_client(key, timeout_s=1, base_url=url))

def on_event(event):
    if event.kind == "journaled":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

gate = Gate(SQLiteStore(store), StripeTransfer(payments, currency="usd"),
            timing=Timing(claim_ttl_s=6, stripe_timeout_s=1), on_event=on_event,
            approvers=UNSIGNED_APPROVALS)  # this test is about currencies, not who approved
gate.submit(Intent(action, "transfer", target, int(amount), lease, fingerprint))
"""


def test_an_eur_gate_leaves_a_killed_usd_workers_transfer_and_the_usd_gate_sends_it_once(
    tmp_path: Path, emulator: StripeEmulator
) -> None:
    """The EUR gate never sends the USD decision (not even a claim is taken); the USD gate
    later sends exactly one $25 transfer, and the receipt records usd and the kind."""
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emulator.url))
    account = "acct_MadeUp" + new_action_id()[-10:]
    store_path = tmp_path / "payouts.sqlite3"
    now = time.time()
    store = SQLiteStore(store_path)
    lease_id = f"lease-{account}"
    store.grant_lease(
        Lease(lease_id, "transfer", account, AMOUNT, now + 3600, "test", now, currency="usd")
    )
    seen = transfers_fingerprint(payments.list_transfers(account))
    action = new_action_id()
    args = [emulator.url, str(store_path), TEST_KEY, action, account, str(AMOUNT), lease_id, seen]
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *args], timeout=60, capture_output=True, text=True
    )
    assert done.returncode == -9, done.stderr
    journaled = store.action(action)
    assert journaled is not None and journaled.intent.currency == "usd"

    eur = Gate(
        store, StripeTransfer(payments, currency="eur"), timing=TIMING, approvers=UNSIGNED_APPROVALS
    )
    assert eur.recover() == []
    with pytest.raises(ActionError, match="is in USD, this gate sends EUR"):
        eur.recover_action(action)
    untouched = store.action(action)
    assert untouched is not None and untouched.settlement is None
    assert untouched.attempts == journaled.attempts and untouched.claim == journaled.claim
    assert emulator.model.requests.count(("POST", "transfers")) == 0

    [outcome] = Gate(
        store, StripeTransfer(payments, currency="usd"), timing=TIMING, approvers=UNSIGNED_APPROVALS
    ).recover()

    transfers = payments.list_transfers(account)
    assert outcome.status == "sent", outcome
    assert outcome.currency == "usd"
    assert [(t.amount, t.currency, t.metadata.get(ACTION_METADATA_KEY)) for t in transfers] == [
        (AMOUNT, "usd", action)
    ]
    assert emulator.model.requests.count(("POST", "transfers")) == 1
    assert outcome.receipt is not None
    assert (outcome.receipt.body["currency"], outcome.receipt.body["kind"]) == ("usd", "transfer")
    assert eur.recover() == []


def test_an_eur_intent_is_refused_by_a_usd_gate_before_anything_is_journaled(
    tmp_path: Path, emulator: StripeEmulator
) -> None:
    """A decision in EUR given to the USD gate raises and leaves no trace in the store."""
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emulator.url))
    store = SQLiteStore(tmp_path / "payouts.sqlite3")
    account = "acct_MadeUp" + new_action_id()[-10:]
    seen = transfers_fingerprint(payments.list_transfers(account))
    intent = Intent(new_action_id(), "transfer", account, AMOUNT, "lease-x", seen, currency="eur")

    with pytest.raises(ActionError, match="is in EUR, this gate sends USD"):
        Gate(store, StripeTransfer(payments), timing=TIMING, approvers=UNSIGNED_APPROVALS).submit(
            intent
        )

    assert store.action(intent.action_id) is None
    assert emulator.model.requests.count(("POST", "transfers")) == 0


def test_a_yen_refund_through_the_sdk_is_checked_and_worded_in_yen(
    tmp_path: Path, emulator: StripeEmulator
) -> None:
    """A ¥10,000 payment at the emulator, read through the real SDK: a refund intent in USD
    is refused and nothing is refunded; one in JPY is sent, and the model reads ¥2,000."""
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emulator.url))
    store = SQLiteStore(tmp_path / "refunds.sqlite3")
    payment = payments.create_payment(10_000, currency="jpy")
    now = time.time()
    lease = f"lease-{payment.id}"
    store.grant_lease(
        Lease(lease, "refund", payment.id, 2_000, now + 3600, "t", now, currency="jpy")
    )
    seen = refunds_fingerprint(payment.refunds)
    gate = Gate(store, StripeRefund(payments), timing=TIMING, approvers=UNSIGNED_APPROVALS)

    in_dollars = Intent(new_action_id(), "refund", payment.id, 2_000, lease, seen, currency="usd")
    refused = gate.submit(in_dollars)
    assert refused.status == "refused" and "the payment is in JPY" in str(refused.reason)
    assert payments.list_refunds(payment.id) == []

    in_yen = Intent(new_action_id(), "refund", payment.id, 2_000, lease, seen, currency="jpy")
    sent = gate.submit(in_yen)
    assert (sent.status, sent.currency) == ("sent", "jpy")
    assert [(r.amount, r.currency) for r in payments.list_refunds(payment.id)] == [(2_000, "jpy")]
    assert outcome_words(sent).startswith("done: refunded ¥2,000, refund")
