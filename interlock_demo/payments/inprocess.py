"""The payments model called in-process: the same model the emulator serves, no HTTP.

Used by mock mode and unit tests. Answers are sorted exactly as `StripePayments` sorts
the SDK's: 409, 429 and 5xx (and a dropped connection, or a 2xx that is not the object
asked for) settle nothing; 401/403 are a refused key; other 4xx are definite refusals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlock import (
    Payment,
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    Refund,
    payment_from_stripe,
    refund_from_stripe,
)
from interlock_demo.payments.model import PaymentsModel, Reply


class InProcessPayments:
    """`interlock.Payments` over a `PaymentsModel` in this process."""

    def __init__(self, model: PaymentsModel | None = None) -> None:
        self.model = model if model is not None else PaymentsModel()

    def create_payment(
        self, amount: int, *, currency: str = "usd", metadata: Mapping[str, str] | None = None
    ) -> Payment:
        """Create and confirm a card payment."""
        params: dict[str, Any] = {
            "amount": str(amount),
            "currency": currency,
            "confirm": "true",
            "payment_method": "pm_card_visa",
            "allowed_payment_method_types": ["card"],
            "metadata": dict(metadata or {}),
        }
        body = _settle("create payment", self.model.post("payment_intents", params))
        return payment_from_stripe(body, [])

    def get_payment(self, payment_intent: str) -> Payment:
        """The payment and every one of its refunds."""
        body = _settle("read payment", self.model.get_payment_intent(payment_intent))
        return payment_from_stripe(body, self.list_refunds(payment_intent))

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        """Every refund, newest first, walking pages of 100 as the SDK does."""
        refunds: list[Refund] = []
        query = {"payment_intent": payment_intent, "limit": "100"}
        while True:
            page = _settle("list refunds", self.model.list_refunds(query))
            refunds.extend(_parsed("list refunds", r) for r in page["data"])
            if not page["has_more"] or not page["data"]:
                return refunds
            query["starting_after"] = page["data"][-1]["id"]

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        """Create a refund through the model's idempotency layer."""
        params: dict[str, Any] = {"payment_intent": payment_intent}
        if amount is not None:
            params["amount"] = str(amount)
        if metadata:
            params["metadata"] = dict(metadata)
        reply = self.model.post("refunds", params, idempotency_key)
        return _parsed("create refund", _settle("create refund", reply))


def _parsed(operation: str, body: Any) -> Refund:
    try:
        return refund_from_stripe(body)
    except (ValueError, KeyError, TypeError) as e:
        raise PaymentsUnsettledError(operation, f"the answer could not be read: {e}") from e


def _settle(operation: str, reply: Reply) -> dict[str, Any]:
    if reply.drop:
        raise PaymentsUnsettledError(operation, "the connection was dropped")
    if reply.garbled:
        raise PaymentsUnsettledError(operation, "the answer is not JSON", reply.status)
    if 200 <= reply.status < 300:
        if not isinstance(reply.body, dict):
            raise PaymentsUnsettledError(operation, "the answer is not JSON", reply.status)
        return reply.body
    error = reply.body.get("error", {}) if isinstance(reply.body, dict) else {}
    message = str(error.get("message", ""))
    if reply.status >= 500 or reply.status in (409, 429):
        raise PaymentsUnsettledError(operation, message, reply.status)
    if reply.status in (401, 403):
        raise PaymentsAuthError(operation, reply.status, message)
    code = str(error.get("code") or error.get("type") or "unknown")
    raise PaymentsRejectedError(operation, code, message, reply.status, error.get("param"))
