"""The payments model called in-process: the same model the emulator serves, no HTTP.

Used by mock mode and unit tests. Answers are sorted exactly as `StripePayments` sorts
the SDK's: 409, 429 and 5xx (and a dropped connection, or a 2xx that is not the object
asked for) settle nothing; 401/403 are a refused key; other 4xx are definite refusals.
POSTs go as the SDK and `DeadlineHTTPClient` send them: each under an idempotency key
(made up when none is given), and once more when the answer was dropped (over HTTP, a
dropped answer on a kept connection; here, any).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from interlock._core.errors import PaymentsAuthError, PaymentsRejectedError, PaymentsUnsettledError
from interlock._core.payments import Payment, Refund, Transfer
from interlock._stripe.adapter import payment_from_stripe, refund_from_stripe, transfer_from_stripe
from interlock.testing.model import PaymentsModel, Reply


class InProcessPayments:
    """`interlock.Payments` and `interlock.Transfers` over a `PaymentsModel` in this process."""

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
        body = _settle("create payment", self._post("payment_intents", params, None))
        return payment_from_stripe(body, [])

    def _post(self, endpoint: str, params: dict[str, Any], idempotency_key: str | None) -> Reply:
        key = idempotency_key or str(uuid.uuid4())
        reply = self.model.post(endpoint, params, key)
        if reply.drop:
            reply = self.model.post(endpoint, params, key)
        return reply

    def get_payment(self, payment_intent: str) -> Payment:
        """The payment and every one of its refunds."""
        body = _settle("read payment", self.model.get_payment_intent(payment_intent))
        return payment_from_stripe(body, self.list_refunds(payment_intent))

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        """Every refund, newest first, walking pages of 100 as the SDK does."""
        return self._walk({"payment_intent": payment_intent, "limit": "100"})

    def list_refunds_since(self, created_gte: int) -> list[Refund]:
        """Every refund on the account created at or after `created_gte`, newest first."""
        return self._walk({"created": {"gte": str(created_gte)}, "limit": "100"})

    def _walk(self, query: dict[str, Any]) -> list[Refund]:
        refunds: list[Refund] = []
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
        reply = self._post("refunds", params, idempotency_key)
        return _parsed("create refund", _settle("create refund", reply))

    def list_transfers(self, destination: str) -> list[Transfer]:
        """Every transfer to the account, newest first, walking pages of 100 as the SDK does."""
        return self._walk_transfers({"destination": destination, "limit": "100"})

    def list_transfers_since(self, created_gte: int) -> list[Transfer]:
        """Every transfer on the account created at or after `created_gte`, newest first."""
        return self._walk_transfers({"created": {"gte": str(created_gte)}, "limit": "100"})

    def _walk_transfers(self, query: dict[str, Any]) -> list[Transfer]:
        transfers: list[Transfer] = []
        while True:
            page = _settle("list transfers", self.model.list_transfers(query))
            transfers.extend(_transfer("list transfers", t) for t in page["data"])
            if not page["has_more"] or not page["data"]:
                return transfers
            query["starting_after"] = page["data"][-1]["id"]

    def create_transfer(
        self,
        destination: str,
        amount: int,
        *,
        currency: str = "usd",
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Transfer:
        """Create a transfer through the model's idempotency layer."""
        params: dict[str, Any] = {
            "destination": destination,
            "amount": str(amount),
            "currency": currency,
        }
        if metadata:
            params["metadata"] = dict(metadata)
        reply = self._post("transfers", params, idempotency_key)
        return _transfer("create transfer", _settle("create transfer", reply))


def _transfer(operation: str, body: Any) -> Transfer:
    try:
        return transfer_from_stripe(body)
    except (ValueError, KeyError, TypeError) as e:
        raise PaymentsUnsettledError(operation, f"the answer could not be read: {e}") from e


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
