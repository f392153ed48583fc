"""A webhook on loopback (tests/helpers/webhook.py) as an effect: certified in every cell.

A webhook delivery, and the same webhook re-expressed as a `CustomEffect` of three
functions, must come out right and truthful over every crash point x answer x outage; one
whose lookup never finds its own send must not, so the harness can fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from interlock import (
    CustomEffect,
    Intent,
)
from interlock.testing import certify
from tests.helpers.webhook import WebhookDelivery, WebhookServer, fingerprint, webhook_effect


class WebhookWorld:
    """An order at the loopback webhook fake, and a delivery decided on it."""

    def __init__(self, server: WebhookServer, *, lookup: bool = True) -> None:
        self.server = server
        self.lookup = lookup

    def new_effect(self) -> WebhookDelivery:
        return WebhookDelivery(self.server.url, lookup=self.lookup)

    def decide(self, lease_id: str) -> Intent:
        order = f"ord_{uuid.uuid4().hex[:12]}"
        seen = self.new_effect().deliveries(order)
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


class CustomWebhookWorld:
    """An order at the loopback webhook fake, its delivery guarded by a `CustomEffect`."""

    def __init__(
        self,
        server: WebhookServer,
        effect: Callable[[WebhookDelivery], CustomEffect] = webhook_effect,
    ) -> None:
        self.server = server
        self.delivery = WebhookDelivery(server.url)
        self.effect = effect

    def new_effect(self) -> CustomEffect:
        return self.effect(WebhookDelivery(self.server.url))

    def decide(self, lease_id: str) -> Intent:
        order = f"ord_{uuid.uuid4().hex[:12]}"
        seen = fingerprint(self.delivery.deliveries(order))
        return Intent(f"act_{uuid.uuid4().hex}", "webhook", order, 1, lease_id, seen)

    def change(self, intent: Intent) -> None:
        self.server.deliver({"order": intent.target, "action": None, "units": 1}, None)

    def count(self, intent: Intent) -> int:
        return sum(d["action"] == intent.action_id for d in self.server.deliveries(intent.target))


def test_a_custom_effect_over_a_webhook_is_certified_in_every_cell(
    webhook_server: WebhookServer,
) -> None:
    """The webhook as send + lookup + state: right and truthful in all 144 cells."""
    report = certify(lambda: CustomWebhookWorld(webhook_server))

    print(report.table())
    assert len(report.results) == 144
    report.assert_certified()
    by_cell = {str(r.cell): r for r in report.results}
    assert by_cell["no-crash/lost/none"].reported == "adopted"
    assert by_cell["before-send/ok/change"].reported == "refused"


def test_a_custom_lookup_that_misses_its_own_send_is_not_certified(
    webhook_server: WebhookServer,
) -> None:
    """A lookup that finds nothing: a lost answer then a change by hand is untruthful."""

    def blind(delivery: WebhookDelivery) -> CustomEffect:
        return CustomEffect(
            kind="webhook",
            send=delivery.send,
            lookup=lambda intent: [],
            state=lambda intent: fingerprint(delivery.deliveries(intent.target)),
            deadline_s=2,
        )

    report = certify(lambda: CustomWebhookWorld(webhook_server, blind))

    assert "no-crash/lost/change" in {str(r.cell) for r in report.failures}
