"""`verify()` of any effect: Stripe transfers and a user's `CustomEffect`, as refunds are.

Transfers through the real stripe SDK against the loopback emulator, by the function and
by `python -m interlock verify --stripe [--account-wide]` in a subprocess: a sound
transfer store is reported sound, and a second transfer naming an action is reported, on
its account and account-wide. A `CustomEffect` that lists its sends (`sent_on`,
`sent_since`) is checked the same way; one that does not is reported as not checked.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    CustomEffect,
    Found,
    Gate,
    Intent,
    KeyList,
    Lease,
    Sent,
    SigningKey,
    SQLiteStore,
    StripePayments,
    StripeTransfer,
    Timing,
    make_stripe_client,
    new_action_id,
    transfers_fingerprint,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.helpers.approvals import APPROVER, APPROVERS

ROOT = Path(__file__).resolve().parents[2]
KEY = SigningKey.generate()
KEYS = KeyList()
KEYS.add(KEY.public)
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
AMOUNT = 2_500


@pytest.fixture
def emu() -> Iterator[StripeEmulator]:
    """A loopback Stripe emulator for one test."""
    with StripeEmulator() as e:
        yield e


def _stripe(emu: StripeEmulator) -> StripePayments:
    return StripePayments(make_stripe_client(TEST_KEY, timeout_s=1, base_url=emu.url))


def _account() -> str:
    return "acct_MadeUp" + uuid.uuid4().hex[:10]


def _transfer(store: SQLiteStore, payments: StripePayments, account: str) -> Intent:
    """Approve $25 to the account and send it through a signed gate; the sent intent."""
    now = time.time()
    lease_id = f"lease-{uuid.uuid4().hex[:8]}"
    store.grant_lease(
        APPROVER.sign(Lease(lease_id, "transfer", account, AMOUNT, now + 3600, "test", now))
    )
    seen = transfers_fingerprint(payments.list_transfers(account))
    intent = Intent(new_action_id(), "transfer", account, AMOUNT, lease_id, seen)
    gate = Gate(
        store,
        StripeTransfer(payments),
        timing=TIMING,
        signing_key=KEY,
        approvers=APPROVERS,
    )
    outcome = gate.submit(intent)
    assert outcome.status == "sent", outcome
    return intent


def _problems(path: Path, payments: StripePayments, *, account_wide: bool) -> list[str]:
    store = SQLiteStore.open_read_only(path)
    try:
        return verify(store, payments, keys=KEYS, account_wide=account_wide).problems
    finally:
        store.close()


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
        [sys.executable, "-m", "interlock", "verify", str(path), "--stripe", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_sound_transfer_store_is_reported_sound(emu: StripeEmulator, tmp_path: Path) -> None:
    """Two transfers on two accounts, beside a hand transfer: verify, on each account and
    account-wide, by the function and the command, finds nothing wrong."""
    path = tmp_path / "journal.sqlite3"
    payments = _stripe(emu)
    store = SQLiteStore(path)
    first, _ = (_transfer(store, payments, _account()) for _ in range(2))
    store.close()
    payments.create_transfer(first.target, 700)  # by hand, naming no action

    assert _problems(path, payments, account_wide=False) == []
    assert _problems(path, payments, account_wide=True) == []
    for flags in ((), ("--account-wide",)):
        done = _cli(path, emu, *flags)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == f"{path}: 2 receipts (2 signed with the gate's Ed25519 key) hold"
        assert len(lines) == 2 and lines[1].startswith("  log: "), done.stdout


def test_a_second_transfer_naming_an_action_is_reported_on_its_account_and_account_wide(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """A second transfer naming a sent action, on its own account, is a send the receipts
    do not show; one on another account no action names is seen account-wide only."""
    path = tmp_path / "journal.sqlite3"
    payments = _stripe(emu)
    store = SQLiteStore(path)
    sent = _transfer(store, payments, _account())
    store.close()
    named = {ACTION_METADATA_KEY: sent.action_id}
    again = payments.create_transfer(sent.target, AMOUNT, metadata=named)
    elsewhere = payments.create_transfer(_account(), AMOUNT, metadata=named)

    on_target = _problems(path, payments, account_wide=False)
    wide = _problems(path, payments, account_wide=True)
    done = _cli(path, emu, "--account-wide")

    second = (
        f"transfer {again.id} ({AMOUNT}) at Stripe names action {sent.action_id}, whose "
        "receipt records sent: a send the receipts do not show"
    )
    other = (
        f"transfer {elsewhere.id} ({AMOUNT}) on {elsewhere.destination} at Stripe names action "
        f"{sent.action_id}, whose target is {sent.target}: a send the receipts do not show"
    )
    assert on_target == [second]
    assert wide == [second, other]
    assert done.returncode == 1
    assert f"  - {second}" in done.stdout.splitlines()
    assert f"  - {other}" in done.stdout.splitlines()


def test_a_lost_transfer_action_is_seen_account_wide(emu: StripeEmulator, tmp_path: Path) -> None:
    """The last transfer action's rows deleted whole: its transfer, on an account no
    remaining action names, is what shows it, account-wide."""
    path = tmp_path / "journal.sqlite3"
    payments = _stripe(emu)
    store = SQLiteStore(path)
    _transfer(store, payments, _account())
    gone = _transfer(store, payments, _account())
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        for table in ("actions", "journal", "action_metadata", "receipts"):
            conn.execute(f"DELETE FROM {table} WHERE action_id=?", (gone.action_id,))
    conn.close()

    wide = _problems(path, payments, account_wide=True)

    assert any(
        p.startswith("transfer ")
        and f"names action {gone.action_id}, which the store does not have" in p
        for p in wide
    ), wide


class Deliveries:
    """A user's provider in memory: deliveries to orders, each naming the action it was
    sent for, replayed under its idempotency key."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.created: dict[str, int] = {}
        self.keys: dict[str, Sent] = {}

    def deliver(self, order: str, units: int, action: str | None, key: str | None) -> Sent:
        if key is not None and key in self.keys:
            return self.keys[key]
        sent = Sent(f"dlv_{uuid.uuid4().hex[:12]}", units, action, order)
        self.sent.append(sent)
        self.created[sent.external_id] = int(time.time())
        if key is not None:
            self.keys[key] = sent
        return sent

    def on(self, order: str) -> list[Sent]:
        return [s for s in self.sent if s.target == order]

    def since(self, created_gte: int) -> list[Sent]:
        return [s for s in self.sent if self.created[s.external_id] >= created_gte]

    def effect(self, *, listed: bool = True) -> CustomEffect:
        def send(intent: Intent, key: str) -> Found:
            s = self.deliver(intent.target, intent.amount, intent.action_id, key)
            return Found(s.external_id, s.amount, target=s.target)

        def lookup(intent: Intent) -> list[Found]:
            return [
                Found(s.external_id, s.amount, target=s.target)
                for s in self.on(intent.target)
                if s.action == intent.action_id
            ]

        return CustomEffect(
            kind="delivery",
            send=send,
            lookup=lookup,
            state=lambda intent: str(len(self.on(intent.target))),
            deadline_s=1,
            sent_on=self.on if listed else None,
            sent_since=self.since if listed else None,
        )


def _delivered(tmp_path: Path, deliveries: Deliveries) -> tuple[Path, Intent]:
    path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(path)
    now = time.time()
    order = f"ord_{uuid.uuid4().hex[:8]}"
    store.grant_lease(APPROVER.sign(Lease("lease-d", "delivery", order, 1, now + 3600, "t", now)))
    intent = Intent(new_action_id(), "delivery", order, 1, "lease-d", "0")
    gate = Gate(
        store,
        deliveries.effect(),
        timing=TIMING,
        signing_key=KEY,
        approvers=APPROVERS,
    )
    assert gate.submit(intent).status == "sent"
    store.close()
    return path, intent


def _custom_problems(path: Path, effect: CustomEffect, *, account_wide: bool) -> list[str]:
    store = SQLiteStore.open_read_only(path)
    try:
        return verify(store, effects=[effect], keys=KEYS, account_wide=account_wide).problems
    finally:
        store.close()


def test_a_custom_effect_that_lists_its_sends_is_checked_like_a_refund(tmp_path: Path) -> None:
    """A user's effect with `sent_on` and `sent_since`: sound is sound; a second send naming
    the action is reported on its target, and one on another target account-wide."""
    deliveries = Deliveries()
    path, intent = _delivered(tmp_path, deliveries)
    effect = deliveries.effect()

    sound = _custom_problems(path, effect, account_wide=True)
    again = deliveries.deliver(intent.target, 1, intent.action_id, None)
    elsewhere = deliveries.deliver("ord_other", 1, intent.action_id, None)
    on_target = _custom_problems(path, effect, account_wide=False)
    wide = _custom_problems(path, effect, account_wide=True)

    assert sound == []
    second = (
        f"delivery {again.external_id} (1) at its provider names action {intent.action_id}, "
        "whose receipt records sent: a send the receipts do not show"
    )
    assert on_target == [second]
    assert wide == [
        second,
        f"delivery {elsewhere.external_id} (1) on ord_other at its provider names action "
        f"{intent.action_id}, whose target is {intent.target}: a send the receipts do not show",
    ]


def test_a_custom_effect_that_cannot_list_its_sends_is_reported_not_checked(
    tmp_path: Path,
) -> None:
    """Without `sent_on`, verify cannot check the provider, and says so in words; a kind
    with no effect at all is reported too."""
    deliveries = Deliveries()
    path, intent = _delivered(tmp_path, deliveries)

    unlisted = _custom_problems(path, deliveries.effect(listed=False), account_wide=False)
    store = SQLiteStore.open_read_only(path)
    try:
        nothing = verify(store, _NoPayments(), keys=KEYS).problems
    finally:
        store.close()

    assert len(unlisted) == 1
    assert unlisted[0].startswith(f"could not read the delivery sends of {intent.target}: ")
    assert "give it sent_on" in unlisted[0]
    assert nothing == [
        f"could not read the delivery sends of {intent.target}: verify was given no delivery "
        "effect to list them (pass it to verify() in effects=; the command checks refunds and "
        "transfers)"
    ]


class _NoPayments:
    """Stripe with no refunds or transfers, to verify a store of another kind against."""

    def list_refunds(self, payment_intent: str) -> list[object]:
        return []

    def list_refunds_since(self, created_gte: int) -> list[object]:
        return []
