"""The screenshots command's runs leave Stripe's answers room on a loaded machine.

Its offline runs call the loopback emulator from real worker processes. With a 1 s Stripe
timeout, a loaded machine's round trip did not always fit: calls took up to 1.03 s here at
load 5 to 8, and under the README's test command a worker whose read of the payment took
longer exited 1 ("read payment: no settled answer: ... no complete answer within 1 s")
where it was to be SIGKILLed, and the command failed. An answer the emulator holds back
stands in for that machine.
"""

from __future__ import annotations

from pathlib import Path

from interlock import StripePayments, Timing, make_stripe_client
from interlock.testing import StripeEmulator
from interlock_demo.views.tui.screenshots import screenshot_env
from tests.conftest import TEST_KEY

# Twice the slowest loopback call measured under load: what the timing must outlast.
HELD_MS = 2_000


def test_a_screenshot_runs_stripe_client_waits_out_a_slow_answer(
    emu: StripeEmulator, tmp_path: Path
) -> None:
    """A client on a screenshot run's timing settles a refund whose answer is held 2 s."""
    timing = Timing.from_env(screenshot_env(tmp_path, env={}))
    client = make_stripe_client(TEST_KEY, timeout_s=timing.stripe_timeout_s, base_url=emu.url)
    payments = StripePayments(client)
    payment = payments.create_payment(10_000)
    emu.model.add_fault("hold", hold_ms=HELD_MS, payment_intent=payment.id)
    refund = payments.create_refund(payment.id, 2_000, idempotency_key="screenshot-run")
    assert refund.amount == 2_000
    assert [r.id for r in payments.list_refunds(payment.id)] == [refund.id]
