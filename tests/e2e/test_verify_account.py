"""`verify(..., account_wide=True)`: the account's refunds since the store's first action.

The real stripe SDK over the library's deadline client against the loopback emulator, a
real SQLite file whose rows are deleted as a person with the file could, and
`python -m interlock verify --stripe --account-wide` in a subprocess.
"""

from __future__ import annotations

import http.client
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    KeyList,
    Lease,
    Payments,
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
from interlock._core.verify import ACCOUNT_SKEW_MARGIN_S
from interlock.testing import InProcessPayments, StripeEmulator
from interlock.testing.model import PaymentsModel
from tests.conftest import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]
KEY = SigningKey.generate()
KEYS = KeyList()
KEYS.add(KEY.public)
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
# What these tests delete is what the store alone cannot see (the log's heads see receipts
# removed after they were logged: tests/unit/test_receipt_log.py), so the gates here leave
# their receipts out of the log, however slow the machine: an hour between catch-ups.
UNLOGGED_S = 3600.0


@pytest.fixture
def emu() -> Iterator[StripeEmulator]:
    """An emulator whose clock may be set apart from the gate's (`emu.model`'s offset)."""
    with StripeEmulator() as e:
        yield e


def _stripe(emu: StripeEmulator) -> StripePayments:
    return StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emu.url))


def _send(store: SQLiteStore, payments: Payments, payment_intent: str) -> Intent:
    """Approve $20 on the payment and send it through a signed gate; the sent intent."""
    now = time.time()
    lease_id = f"lease-{uuid.uuid4().hex[:8]}"
    store.grant_lease(Lease(lease_id, "refund", payment_intent, 2000, now + 3600, "test", now))
    intent = Intent(
        new_action_id(),
        "refund",
        payment_intent,
        2000,
        lease_id,
        refunds_fingerprint(payments.list_refunds(payment_intent)),
    )
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=TIMING,
        signing_key=KEY,
        approvers=UNSIGNED_APPROVALS,
        log_interval_s=UNLOGGED_S,
    )
    outcome = gate.submit(intent)
    assert outcome.status == "sent", outcome
    return intent


def _delete_action(path: Path, action_id: str) -> None:
    """Every row of one action gone, as a person with the file could do."""
    conn = sqlite3.connect(path)
    with conn:
        for table in ("actions", "journal", "action_metadata", "receipts"):
            conn.execute(f"DELETE FROM {table} WHERE action_id=?", (action_id,))
    conn.close()


def _verified(path: Path, payments: Payments, *, account_wide: bool) -> list[str]:
    store = SQLiteStore.open_read_only(path)
    try:
        result = verify(store, payments, keys=KEYS, account_wide=account_wide)
    finally:
        store.close()
    return result.problems


def _two_sends_then_the_last_deleted(path: Path, payments: Payments) -> Intent:
    """Two actions on two payments; the last one's rows deleted whole: the gone intent."""
    store = SQLiteStore(path)
    _send(store, payments, payments.create_payment(10_000).id)
    gone = _send(store, payments, payments.create_payment(10_000).id)
    store.close()
    _delete_action(path, gone.action_id)
    return gone


def test_the_sdk_pages_the_accounts_refunds_since_a_time(emu: StripeEmulator) -> None:
    """`list_refunds_since` over the SDK reads `created[gte]` across pages (`has_more`,
    `starting_after`): every refund from that second on, newest first, none before; the
    in-process fake answers the same list."""
    stripe = _stripe(emu)
    old = stripe.create_payment(10_000).id
    for _ in range(3):
        stripe.create_refund(old, 100)
    emu.model.advance(60)
    since = int(emu.model.now())
    new = [stripe.create_payment(10_000).id for _ in range(2)]
    made = [stripe.create_refund(new[i % 2], 100).id for i in range(130)]
    before = emu.model.requests.count(("GET", "refunds"))

    listed = stripe.list_refunds_since(since)

    assert [r.id for r in listed] == made[::-1]
    assert emu.model.requests.count(("GET", "refunds")) - before == 2  # 100, then 30
    in_process = InProcessPayments(emu.model).list_refunds_since(since)
    assert [r.id for r in in_process] == made[::-1]
    assert len(stripe.list_refunds_since(since - 120)) == 133


@pytest.mark.parametrize(
    ("query", "param"),
    [("created[gte]=soon", "created[gte]"), ("created[from]=1", "created[from]")],
)
def test_a_bad_created_filter_is_refused_in_stripes_words(
    emu: StripeEmulator, query: str, param: str
) -> None:
    """A `created` bound that is not an integer, or not one of gt/gte/lt/lte, is a 400
    naming the parameter, as Stripe answers it."""
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=5)
    conn.request("GET", f"/v1/refunds?{query}", headers={"Authorization": f"Bearer {TEST_KEY}"})
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert response.status == 400
    assert body["error"]["param"] == param


def test_a_lost_action_whose_payment_no_other_action_names_is_seen_account_wide(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """An action deleted whole, on a payment no remaining action names: the payment-by-
    payment check cannot see it (the old reach); account-wide, its refund is named."""
    path = tmp_path / "journal.sqlite3"
    stripe = _stripe(emu)
    gone = _two_sends_then_the_last_deleted(path, stripe)

    assert _verified(path, stripe, account_wide=False) == []
    problems = _verified(path, stripe, account_wide=True)

    assert len(problems) == 1, problems
    assert f"names action {gone.action_id}, which the store does not have" in problems[0]
    assert gone.target in problems[0]


def test_the_listing_reaches_back_past_a_stripe_clock_that_lags(tmp_path: Path) -> None:
    """Stripe's clock half an hour behind the gate's: the lost action's refund is stamped
    before the store's first action, and the skew margin still reaches it."""
    lag = 1800.0  # inside the margin, and far past the integer rounding of `created`
    model = PaymentsModel(clock=lambda: time.time() - lag)
    path = tmp_path / "journal.sqlite3"
    with StripeEmulator(model=model) as emu:
        stripe = _stripe(emu)
        store = SQLiteStore(path)
        first_payment = stripe.create_payment(10_000).id
        gone = _send(store, stripe, stripe.create_payment(10_000).id)
        _send(store, stripe, first_payment)
        store.close()
        _delete_action(path, gone.action_id)  # the first action, the store's oldest

        problems = _verified(path, stripe, account_wide=True)

    assert any(f"names action {gone.action_id}" in p for p in problems), problems


def test_a_whole_store_is_clean_account_wide_beside_hand_refunds_and_older_ones(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """Hand refunds with no metadata, an agent refund naming no action, and a refund naming
    an unknown action from before the store's first action (less the margin): none of
    them is this store's to judge, and a whole store verifies clean account-wide."""
    stripe = _stripe(emu)
    elsewhere = stripe.create_payment(10_000).id
    stripe.create_refund(elsewhere, 500, metadata={ACTION_METADATA_KEY: "act_older_store"})
    emu.model.advance(ACCOUNT_SKEW_MARGIN_S + 60)
    stripe.create_refund(elsewhere, 500)  # by hand: no metadata
    stripe.create_refund(elsewhere, 500, metadata={"case": "someone-else"})
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    # The store's intents are stamped by this host's clock, which the model ran ahead of.

    def ahead() -> float:
        return time.time() + ACCOUNT_SKEW_MARGIN_S + 60

    gate_clock_ahead = Gate(
        store, StripeRefund(stripe), timing=TIMING, signing_key=KEY,
        clock=ahead,
        approvers=UNSIGNED_APPROVALS,
        log_interval_s=UNLOGGED_S,
    )  # fmt: skip
    for _ in range(2):
        pi = stripe.create_payment(10_000).id
        now = ahead()
        lease_id = f"lease-{uuid.uuid4().hex[:8]}"
        store.grant_lease(Lease(lease_id, "refund", pi, 2000, now + 3600, "test", now))
        intent = Intent(
            new_action_id(),
            "refund",
            pi,
            2000,
            lease_id,
            refunds_fingerprint(stripe.list_refunds(pi)),
        )
        assert gate_clock_ahead.submit(intent).status == "sent"
    store.close()

    assert _verified(path, stripe, account_wide=True) == []


def test_another_stores_action_on_the_account_is_reported_in_words(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """Two stores on one account: account-wide, each sees the other's refunds as actions
    it lacks, and the problem says so (its rows lost, or another store's); checked payment
    by payment, each is clean. The metadata names no store, so verify cannot tell."""
    stripe = _stripe(emu)
    ours, theirs = tmp_path / "ours.sqlite3", tmp_path / "theirs.sqlite3"
    for path in (ours, theirs):
        store = SQLiteStore(path)
        _send(store, stripe, stripe.create_payment(10_000).id)
        store.close()

    assert _verified(ours, stripe, account_wide=False) == []
    [problem] = _verified(ours, stripe, account_wide=True)

    assert "or it is another interlock store's on this account" in problem


def test_a_refund_naming_an_action_on_another_payment_is_a_problem(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """A refund carrying a store action's metadata on a payment that action does not
    target is a send the receipts do not show: account-wide when no action names that
    payment, and payment by payment when one does."""
    stripe = _stripe(emu)
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    intent = _send(store, stripe, stripe.create_payment(10_000).id)
    store.close()
    stray = stripe.create_payment(10_000).id
    stripe.create_refund(stray, 2000, metadata={ACTION_METADATA_KEY: intent.action_id})

    assert _verified(path, stripe, account_wide=False) == []
    [problem] = _verified(path, stripe, account_wide=True)
    assert f"on {stray} at Stripe names action {intent.action_id}, whose target is" in problem

    store = SQLiteStore(path)
    _send(store, stripe, stray)  # now an action names the stray payment: it is listed
    store.close()
    [problem] = _verified(path, stripe, account_wide=False)
    assert f"names action {intent.action_id}, whose target is {intent.target}" in problem


@settings(max_examples=25, deadline=None)
@given(
    payments_n=st.integers(min_value=1, max_value=3),
    sends=st.lists(st.integers(min_value=0, max_value=2), min_size=2, max_size=5),
    data=st.data(),
)
def test_account_wide_verify_is_clean_exactly_when_the_store_is_whole(
    payments_n: int, sends: list[int], data: st.DataObject
) -> None:
    """Actions on a few payments, any of them deleted whole (every action on a payment
    included) while one action is left to date the store by: account-wide verify is
    clean exactly when none was deleted, and names each one that was."""
    payments = InProcessPayments()
    pis = [payments.create_payment(10_000).id for _ in range(payments_n)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.sqlite3"
        store = SQLiteStore(path)
        intents = [_send(store, payments, pis[i % payments_n]) for i in sends]
        store.close()
        ids = [i.action_id for i in intents]
        doomed = data.draw(st.sets(st.sampled_from(ids), max_size=len(ids) - 1))
        for action_id in doomed:
            _delete_action(path, action_id)
        problems = _verified(path, payments, account_wide=True)
    assert (problems == []) == (not doomed), (doomed, problems)
    unnamed = {a for a in doomed if not any(f"names action {a}," in p for p in problems)}
    assert unnamed == set(), problems


def _cli(path: Path, emu: StripeEmulator, *flags: str) -> subprocess.CompletedProcess[str]:
    keys = path.parent / "keys.json"
    KEYS.save(keys)
    env = {
        **os.environ,
        "STRIPE_SECRET_KEY": TEST_KEY,
        "INTERLOCK_STRIPE_BASE": emu.url,
        "INTERLOCK_VERIFY_KEYS": str(keys),
    }
    return subprocess.run(
        [sys.executable, "-m", "interlock", "verify", str(path), *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli_account_wide_names_the_lost_action_and_exits_1(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """`python -m interlock verify --stripe --account-wide` exits 1 naming the lost
    action; `--stripe` alone (payment by payment) exits 0; `--account-wide` without
    `--stripe` is bad usage (2). The key never reaches the output."""
    path = tmp_path / "journal.sqlite3"
    gone = _two_sends_then_the_last_deleted(path, _stripe(emu))

    wide = _cli(path, emu, "--stripe", "--account-wide")
    payment_by_payment = _cli(path, emu, "--stripe")
    usage = _cli(path, emu, "--account-wide")

    assert wide.returncode == 1, wide.stderr
    assert f"names action {gone.action_id}, which the store does not have" in wide.stdout
    assert payment_by_payment.returncode == 0, payment_by_payment.stdout
    assert usage.returncode == 2
    assert "give --stripe too" in usage.stderr
    for done in (wide, payment_by_payment, usage):
        assert TEST_KEY not in done.stdout + done.stderr


# The rows of each table that may be deleted. A `sending` line of a settled action's
# history is left out: the store's rules do not require one before an outcome, its claim
# flag lives in the action's row, and the outcome and receipt carry what it did, so no
# check can (or need) see it gone.
_ROWS = {
    "actions": "SELECT rowid FROM actions",
    "journal": "SELECT rowid FROM journal WHERE record != 'sending'",
    "leases": "SELECT rowid FROM leases",
    "receipts": "SELECT rowid FROM receipts",
}


@settings(max_examples=40, deadline=None)
@given(sends=st.integers(min_value=1, max_value=3), data=st.data())
def test_verify_sees_any_row_deleted_from_any_table(sends: int, data: st.DataObject) -> None:
    """Any set of single rows deleted from any of the store's tables (an action's row, one
    line of its history, an approval, a receipt), not only whole actions: verify, given
    Stripe account-wide, is clean exactly when none was, while one action's row is left."""
    payments = InProcessPayments()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.sqlite3"
        store = SQLiteStore(path)
        for _ in range(sends):
            _send(store, payments, payments.create_payment(10_000).id)
        store.close()
        conn = sqlite3.connect(path)
        rows = [(t, r) for t, sql in _ROWS.items() for (r,) in conn.execute(sql).fetchall()]
        # One action's row is left to date the store by: a store with none left reads as
        # a new one, and nothing is listed (docs/design.md §4).
        actions = [row for row in rows if row[0] == "actions"]
        doomed = data.draw(
            st.sets(st.sampled_from(rows), max_size=4).filter(lambda d: not set(actions) <= d)
        )
        with conn:
            for table, rowid in doomed:
                conn.execute(f"DELETE FROM {table} WHERE rowid=?", (rowid,))
        conn.close()
        problems = _verified(path, payments, account_wide=True)
    assert (problems == []) == (not doomed), (doomed, problems)


@settings(max_examples=15, deadline=None)
@given(sends=st.integers(min_value=2, max_value=4), data=st.data())
def test_verify_sees_the_sends_lost_with_the_wal(sends: int, data: st.DataObject) -> None:
    """The store as it was on disk after any number of its sends (the last checkpoint),
    its -wal holding the rest lost: verify, given Stripe account-wide, is clean exactly
    when nothing was lost, and names every lost action."""
    payments = InProcessPayments()
    kept = data.draw(st.integers(min_value=1, max_value=sends))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.sqlite3"
        intents, on_disk = [], b""
        for i in range(sends):
            store = SQLiteStore(path)
            intents.append(_send(store, payments, payments.create_payment(10_000).id))
            store.close()  # the last close checkpoints the -wal into the file
            if i + 1 == kept:
                on_disk = path.read_bytes()
        path.write_bytes(on_disk)
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        problems = _verified(path, payments, account_wide=True)
    lost = [i.action_id for i in intents[kept:]]
    assert (problems == []) == (not lost), (lost, problems)
    assert [a for a in lost if not any(f"names action {a}," in p for p in problems)] == []


def test_an_approval_granted_again_under_its_id_is_seen_by_its_spend(tmp_path: Path) -> None:
    """An approval's row deleted and granted afresh under the same id (its spend back to
    0, so its cap could be spent twice): verify, with no Stripe at all, says the approval
    records less than its actions' settled refunds."""
    payments = InProcessPayments()
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    intent = _send(store, payments, payments.create_payment(10_000).id)
    lease = store.lease(intent.lease_id)
    store.close()
    assert lease is not None and lease.spent == 2000
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM leases WHERE lease_id=?", (lease.id,))
    conn.close()
    store = SQLiteStore(path)
    store.grant_lease(replace(lease, spent=0, reservations={}))
    result = verify(store, keys=KEYS)
    store.close()

    assert result.problems == [
        f"approval {lease.id}: records 0 spent, but its actions' settled refunds come to 2000 "
        "(its row was replaced or edited)"
    ]
