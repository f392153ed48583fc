"""`interlock-demo mcp approve/revoke`, in-process: an approval is granted only for a payment
Stripe (here the loopback emulator) has, and the desk's journal is private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from interlock import SQLiteStore
from interlock.mcp import current_approval
from interlock.testing import InProcessPayments, StripeEmulator
from interlock_demo.cli import main
from tests.conftest import TEST_KEY


@pytest.fixture
def at_stripe(emulator: StripeEmulator, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`approve`'s Stripe (the emulator, with a test key) and the arguments that point at it."""
    monkeypatch.setenv("STRIPE_SECRET_KEY", TEST_KEY)
    monkeypatch.setenv("PATH", "/nonexistent")
    return ["--stripe-base", emulator.url]


def test_approve_and_revoke_commands(
    capsys: pytest.CaptureFixture[str], emulator: StripeEmulator, at_stripe: list[str]
) -> None:
    """`interlock-demo mcp approve/revoke` grant and revoke in INTERLOCK_HOME, exit 2 on misuse."""
    pi = InProcessPayments(emulator.model).create_payment(10_000).id
    assert main(["mcp", "approve", pi, "--cap", "2000", "--by", "ana", *at_stripe]) == 0
    assert "up to $20.00" in capsys.readouterr().out
    assert main(["mcp", "approve", pi, "--cap", "2000", *at_stripe]) == 2
    assert "revoke it first" in capsys.readouterr().err
    assert main(["mcp", "revoke", pi]) == 0
    assert main(["mcp", "revoke", pi]) == 2
    assert "already revoked" in capsys.readouterr().err
    assert main(["mcp", "approve", "not-a-payment", "--cap", "2000", *at_stripe]) == 2


def test_approve_checks_the_payment_exists_at_stripe(
    capsys: pytest.CaptureFixture[str], at_stripe: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mcp approve` of a payment Stripe does not have is refused in words and grants nothing;
    without a key to look it up with, it says how to give one."""
    assert main(["mcp", "approve", "pi_123", "--cap", "2000", *at_stripe]) == 2
    err = capsys.readouterr().err
    assert "Stripe has no payment pi_123" in err and "check the id" in err
    assert (
        current_approval(
            SQLiteStore(Path(os.environ["INTERLOCK_HOME"]) / "mcp" / "interlock.sqlite3"), "pi_123"
        )
        is None
    )
    monkeypatch.delenv("STRIPE_SECRET_KEY")
    assert main(["mcp", "approve", "pi_123", "--cap", "2000"]) == 2
    assert "set STRIPE_SECRET_KEY" in capsys.readouterr().err


def test_the_desk_keeps_its_journal_private(
    tmp_path: Path, emulator: StripeEmulator, at_stripe: list[str]
) -> None:
    """The desk's journal is the user's alone, as the demo's is: its folder 0700, the file
    and SQLite's -wal and -shm files 0600, whatever the umask (others could read who
    approved what, and every refund's receipt)."""
    home = Path(os.environ["INTERLOCK_HOME"])
    old = os.umask(0o022)
    try:
        pi = InProcessPayments(emulator.model).create_payment(10_000).id
        assert main(["mcp", "approve", pi, "--cap", "2000", "--by", "ana", *at_stripe]) == 0
    finally:
        os.umask(old)
    folder = home / "mcp"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(folder.glob("interlock.sqlite3*"))
    assert files, "no journal was written"
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}


def test_approve_exact_grants_one_refund_in_the_payments_currency(
    capsys: pytest.CaptureFixture[str], emulator: StripeEmulator, at_stripe: list[str]
) -> None:
    """`mcp approve --exact` approves exactly what the person saw: one refund of that amount,
    once, in the payment's currency as Stripe has it (a yen payment's approval is in yen,
    signed by the desk's approver over all of it)."""
    pi = InProcessPayments(emulator.model).create_payment(10_000, currency="jpy").id
    assert main(["mcp", "approve", pi, "--cap", "2000", "--exact", *at_stripe]) == 0
    assert "one refund of exactly ¥2,000" in capsys.readouterr().out
    store = SQLiteStore(Path(os.environ["INTERLOCK_HOME"]) / "mcp" / "interlock.sqlite3")
    try:
        lease = current_approval(store, pi)
        assert lease is not None
        assert (lease.exact, lease.cap, lease.currency) == (True, 2000, "jpy")
        assert lease.signature is not None
    finally:
        store.close()
