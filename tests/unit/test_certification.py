"""`interlock.testing`: the certification harness, on the Stripe refund and on a webhook.

The harness runs every crash point x provider answer x outage on fresh worlds. Both
effects must come out right and truthful in every cell; a deliberately broken effect
(one whose lookup never finds its own send) must not, so the harness can fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from interlock import ACTION_METADATA_KEY, Intent, StripeRefund, refunds_fingerprint
from interlock.testing import ANSWERS, CRASH_POINTS, OUTAGES, Cell, cells, certify, run_cell
from interlock_demo.payments import InProcessPayments
from tests.helpers.webhook import WebhookDelivery, WebhookServer, fingerprint


class RefundWorld:
    """A $100 payment in the in-memory Stripe model, and a $20 refund decided on it."""

    def __init__(self) -> None:
        self.payments = InProcessPayments()
        self.effect = StripeRefund(self.payments)

    def decide(self, lease_id: str) -> Intent:
        pi = self.payments.create_payment(10_000).id
        seen = self.payments.list_refunds(pi)
        return Intent(f"act_{uuid.uuid4().hex}", "refund", pi, 2_000, lease_id,
                      refunds_fingerprint(seen))  # fmt: skip

    def change(self, intent: Intent) -> None:
        self.payments.create_refund(intent.target, 2_000)

    def count(self, intent: Intent) -> int:
        return sum(
            1
            for r in self.payments.list_refunds(intent.target)
            if r.counts and r.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        )


class WebhookWorld:
    """An order at the loopback webhook fake, and a delivery decided on it."""

    def __init__(self, server: WebhookServer, *, lookup: bool = True) -> None:
        self.server = server
        self.effect = WebhookDelivery(server.url, lookup=lookup)

    def decide(self, lease_id: str) -> Intent:
        order = f"ord_{uuid.uuid4().hex[:12]}"
        seen = self.effect.deliveries(order)
        return Intent(f"act_{uuid.uuid4().hex}", "webhook", order, 1, lease_id, fingerprint(seen))

    def change(self, intent: Intent) -> None:
        self.server.deliver({"order": intent.target, "action": None, "units": 1}, None)

    def count(self, intent: Intent) -> int:
        return sum(
            1 for d in self.server.deliveries(intent.target) if d["action"] == intent.action_id
        )


@pytest.fixture(scope="module")
def webhook_server() -> Iterator[WebhookServer]:
    """One loopback webhook fake for the module (each cell uses a fresh order)."""
    server = WebhookServer()
    yield server
    server.stop()


def test_the_stripe_refund_is_certified_in_every_cell() -> None:
    """Every crash point x answer x outage: the refund ends as wanted and the report is true."""
    report = certify(RefundWorld)

    print(report.table())
    assert len(report.results) == len(CRASH_POINTS) * len(ANSWERS) * len(OUTAGES) == 144
    report.assert_certified()
    # The cells exercise what they name: lost answers were adopted, refusals failed.
    by_cell = {str(r.cell): r for r in report.results}
    assert by_cell["no-crash/lost/none"].reported == "adopted"
    assert by_cell["no-crash/late/change"].reported == "adopted"
    assert by_cell["no-crash/refused/none"].reported == "failed"
    assert by_cell["before-send/ok/change"].reported == "refused"


def test_a_webhook_delivery_is_certified_in_every_cell(webhook_server: WebhookServer) -> None:
    """A second kind of effect, over real HTTP on loopback: the harness is general."""
    report = certify(lambda: WebhookWorld(webhook_server))

    print(report.table())
    report.assert_certified()


def test_an_effect_that_cannot_find_its_own_send_is_not_certified(
    webhook_server: WebhookServer,
) -> None:
    """Without a working lookup, a lost answer plus a change by hand is refused while the
    delivery exists: the harness reports the cell untruthful."""
    report = certify(lambda: WebhookWorld(webhook_server, lookup=False))

    failing = {str(r.cell) for r in report.failures}
    assert "no-crash/lost/change" in failing
    assert not report.results[0].cell.crash and report.failures
    with pytest.raises(AssertionError, match="UNTRUTHFUL"):
        report.assert_certified()


@pytest.mark.parametrize("cell", cells(answers=("lost", "late"), outages=("change",)), ids=str)
def test_one_test_per_cell_is_a_parametrize_away(cell: Cell) -> None:
    """`cells()` and `run_cell()` give one CI test per cell."""
    run_cell(RefundWorld, cell).assert_certified()
