"""Payments over the official Stripe SDK, with a total deadline on every request.

`StripePayments` takes a `stripe.StripeClient` from its caller and works with any key: a
library for real agents runs in live mode. `make_stripe_client` builds one with SDK
retries off and `DeadlineHTTPClient`, whose timeout bounds the whole request (connect,
send, every read), not each read alone: the gate needs every send to finish or fail
before its claim could pass to another worker.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import stripe

from interlock._errors import PaymentsAuthError, PaymentsRejectedError, PaymentsUnsettledError
from interlock._payments import Payment, Refund

T = TypeVar("T")

# Answers that settle nothing: the request may have happened, or may yet.
UNSETTLED_STATUSES = frozenset({409, 429})
# The key was refused: a configuration error, never an outcome.
AUTH_STATUSES = frozenset({401, 403})


class DeadlineHTTPClient(stripe.HTTPClient):
    """A Stripe SDK transport whose timeout covers the whole request.

    Each request opens its own connection, so no pooled socket outlives a deadline. A
    socket timeout bounds one read only (a server that trickles a byte at a time resets
    it with every byte), so a timer also shuts the socket down when the deadline passes.
    """

    name = "interlock-deadline"

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        if timeout_s <= 0:
            raise ValueError("the Stripe timeout must be positive")
        self.timeout_s = timeout_s
        self._ssl = ssl.create_default_context(cafile=stripe.ca_bundle_path)

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        **_: Any,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        """Send one request; raise `stripe.APIConnectionError` past the deadline."""
        deadline = time.monotonic() + self.timeout_s

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete answer within {self.timeout_s:g} s")
            return remaining

        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        body = post_data.encode() if isinstance(post_data, str) else post_data
        conn: http.client.HTTPConnection | None = None
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            sock = conn.sock if conn is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.timeout_s, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            # Inside the try: the deadline may already be spent here, and that must come
            # out as an APIConnectionError like every other timeout, not a bare TimeoutError.
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(
                    parts.hostname or "", parts.port, timeout=left(), context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=left())
            conn.connect()
            assert conn.sock is not None
            conn.sock.settimeout(left())
            conn.request(method.upper(), path, body=body, headers=dict(headers or {}))
            conn.sock.settimeout(left())
            resp = conn.getresponse()
            chunks = []
            while True:
                if conn.sock is not None:
                    conn.sock.settimeout(left())
                chunk = resp.read1(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            body = b"".join(chunks)
            answer_headers = {k.lower(): v for k, v in resp.getheaders()}
            # The watchdog's shutdown ends a read as if the body were complete: an answer
            # cut off at the deadline (or short of its length) is no answer at all.
            length = answer_headers.get("content-length", "")
            if expired.is_set() or (length.isdigit() and len(body) < int(length)):
                raise TimeoutError(f"the answer was cut off after {len(body)} bytes")
            return body, resp.status, answer_headers
        except (OSError, http.client.HTTPException) as e:
            timed_out = expired.is_set() or isinstance(e, (TimeoutError, socket.timeout))
            if timed_out:
                detail = f"no complete answer within {self.timeout_s:g} s"
            else:
                detail = f"{type(e).__name__}: {e}"
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"request to Stripe {'timed out' if timed_out else 'failed'}: {detail}",
                should_retry=False,
            ) from e
        finally:
            watchdog.cancel()
            if conn is not None:
                conn.close()

    def request_stream(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        **_: Any,
    ) -> tuple[Any, int, Mapping[str, str]]:
        """Streaming is not used by interlock; refuse it plainly."""
        raise NotImplementedError("DeadlineHTTPClient does not stream")

    def close(self) -> None:
        """Nothing to close: each request closes its own connection."""


def make_stripe_client(
    api_key: str, *, timeout_s: float, base_url: str | None = None
) -> stripe.StripeClient:
    """A `StripeClient` with SDK retries off and a total deadline per request.

    `base_url` points it elsewhere than api.stripe.com (the demo's loopback emulator).
    """
    kwargs: dict[str, Any] = {}
    if base_url is not None:
        kwargs["base_addresses"] = {"api": base_url.rstrip("/")}
    return stripe.StripeClient(
        api_key,
        http_client=DeadlineHTTPClient(timeout_s),
        max_network_retries=0,
        **kwargs,
    )


def refund_from_stripe(obj: Mapping[str, Any]) -> Refund:
    """A `Refund` from Stripe's refund object; `ValueError` if it is not one."""
    if not isinstance(obj, Mapping) or obj.get("object", "refund") != "refund" or "id" not in obj:
        raise ValueError("the answer is not a refund object")
    return Refund(
        id=str(obj["id"]),
        amount=int(obj["amount"]),
        status=str(obj["status"]),
        payment_intent=str(obj.get("payment_intent") or ""),
        metadata={str(k): str(v) for k, v in dict(obj.get("metadata") or {}).items()},
        created=int(obj.get("created") or 0),
    )


def payment_from_stripe(obj: Mapping[str, Any], refunds: list[Refund]) -> Payment:
    """A `Payment` from Stripe's PaymentIntent and its refunds."""
    return Payment(
        id=str(obj["id"]),
        amount=int(obj["amount"]),
        currency=str(obj["currency"]),
        status=str(obj["status"]),
        refunds=tuple(refunds),
        metadata={str(k): str(v) for k, v in dict(obj.get("metadata") or {}).items()},
        latest_charge=obj.get("latest_charge"),
    )


def _call(operation: str, fn: Callable[[], T]) -> T:
    """Run an SDK call, sorting its errors into settled refusals and unsettled answers.

    A 2xx the SDK cannot read (a body that is not JSON), or whose object is not what was
    asked for, settles nothing: the request may well have been done.
    """
    try:
        return fn()
    except stripe.APIConnectionError as e:
        raise PaymentsUnsettledError(operation, _first_line(e)) from e
    except stripe.StripeError as e:
        status = e.http_status
        if status is None or status >= 500 or status < 300 or status in UNSETTLED_STATUSES:
            raise PaymentsUnsettledError(operation, _first_line(e), status) from e
        if status in AUTH_STATUSES:
            raise PaymentsAuthError(operation, status, _first_line(e)) from e
        error = e.error
        code = (error.code if error is not None else None) or (
            error.type if error is not None and error.type else type(e).__name__
        )
        param = error.param if error is not None else None
        raise PaymentsRejectedError(operation, str(code), _first_line(e), status, param) from e


def _parsed(operation: str, fn: Callable[[], T]) -> T:
    """Parse an answer; one that is not what was asked for settles nothing."""
    try:
        return fn()
    except (ValueError, KeyError, TypeError) as e:
        raise PaymentsUnsettledError(operation, f"the answer could not be read: {e}") from e


def _first_line(e: stripe.StripeError) -> str:
    text = e.user_message or str(e) or type(e).__name__
    return " ".join(str(text).split())


class StripePayments:
    """`Payments` over a `stripe.StripeClient` the caller built (any key, any mode)."""

    def __init__(self, client: stripe.StripeClient) -> None:
        self._client = client

    def create_payment(
        self, amount: int, *, currency: str = "usd", metadata: Mapping[str, str] | None = None
    ) -> Payment:
        """Create and confirm a card payment with `pm_card_visa` (test mode)."""
        params: dict[str, Any] = {
            "amount": amount,
            "currency": currency,
            "confirm": True,
            "payment_method": "pm_card_visa",
            "allowed_payment_method_types": ["card"],
            "metadata": dict(metadata or {}),
        }
        intent = _call(
            "create payment",
            lambda: self._client.v1.payment_intents.create(params=params),  # type: ignore[arg-type]
        )
        return payment_from_stripe(intent.to_dict(), [])

    def get_payment(self, payment_intent: str) -> Payment:
        """The PaymentIntent and every one of its refunds."""
        intent = _call(
            "read payment", lambda: self._client.v1.payment_intents.retrieve(payment_intent)
        )
        return payment_from_stripe(intent.to_dict(), self.list_refunds(payment_intent))

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        """Every refund of the payment, newest first: one request up to 100, pages beyond."""

        def walk() -> list[Refund]:
            page = self._client.v1.refunds.list(
                params={"payment_intent": payment_intent, "limit": 100}
            )
            return [refund_from_stripe(r.to_dict()) for r in page.auto_paging_iter()]

        return _parsed("list refunds", lambda: _call("list refunds", walk))

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        """Create a refund; the idempotency key goes in the request options (a header)."""
        params: dict[str, Any] = {"payment_intent": payment_intent}
        if amount is not None:
            params["amount"] = amount
        if metadata:
            params["metadata"] = dict(metadata)
        options: dict[str, Any] = {}
        if idempotency_key is not None:
            options["idempotency_key"] = idempotency_key
        refund = _call(
            "create refund",
            lambda: self._client.v1.refunds.create(params=params, options=options),  # type: ignore[arg-type]
        )
        return _parsed("create refund", lambda: refund_from_stripe(refund.to_dict()))
