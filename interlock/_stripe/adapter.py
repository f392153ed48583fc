"""Payments over the official Stripe SDK, with a total deadline on every request.

`StripePayments` takes a `stripe.StripeClient` from its caller and works with any key: a
library for real agents runs in live mode. `make_stripe_client` builds one with SDK
retries off and `DeadlineHTTPClient`, whose timeout bounds the whole request (connect,
send, every read), not each read alone: the gate needs every send to finish or fail
before its claim could pass to another worker. It keeps one connection per Stripe host
alive across calls (a TLS handshake per call would cost more than the call).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import math
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import stripe

from interlock._core.errors import PaymentsAuthError, PaymentsRejectedError, PaymentsUnsettledError
from interlock._core.payments import Payment, Refund, Transfer

T = TypeVar("T")

# Answers that settle nothing: the request may have happened, or may yet.
UNSETTLED_STATUSES = frozenset({409, 429})
# The key was refused: a configuration error, never an outcome.
AUTH_STATUSES = frozenset({401, 403})


# A connection idle longer than this is closed rather than reused: servers and balancers
# drop idle keep-alives after a minute or so, and one dropped just as a create is written
# on it makes that create unsettled (never resent, only looked up).
MAX_IDLE_S = 30.0
# Idle connections kept per host; more threads than this open their own and close them.
MAX_IDLE_PER_HOST = 8
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def _left(deadline: float, timeout_s: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"no complete answer within {timeout_s:g} s")
    return remaining


class _DeadlineSocket:
    """A connection's socket whose every send and receive ends by the request's deadline.

    A socket timeout bounds one operation, and a server that trickles a byte at a time
    would restart it with every byte; so each operation gets what is left of the deadline
    of the request now using the connection (`deadline`, monotonic).
    """

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        self.sock = sock
        self.deadline = 0.0
        # Bytes of the current request's answer so far: none means it may be sent again.
        self.received = 0
        self._timeout_s = timeout_s
        self._readers = 0
        self._closing = False

    def _arm(self) -> None:
        self.sock.settimeout(_left(self.deadline, self._timeout_s))

    def sendall(self, data: bytes) -> None:
        """Send it all by the deadline (an SSL socket's own sendall times each send)."""
        view = memoryview(data)
        while view:
            self._arm()
            view = view[self.sock.send(view) :]

    def recv_into(self, buffer: Any) -> int:
        """Receive what has arrived, waiting at most until the deadline."""
        self._arm()
        got = self.sock.recv_into(buffer)
        self.received += got
        if _QUICKACK is not None:
            # A server that writes its headers and body apart (Nagle on) sends the body
            # only once the headers are acknowledged; a delayed ACK would cost it 40 ms.
            self.sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return got

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        """A reader for `http.client`'s response; the socket stays open while it is."""
        if mode != "rb":
            raise ValueError(f"a Stripe connection only reads its answers, not mode {mode!r}")
        self._readers += 1
        return io.BufferedReader(_Reader(self))

    def reader_closed(self) -> None:
        """A response let go of its reader: close now if `close` was asked for meanwhile."""
        self._readers -= 1
        if self._closing and not self._readers:
            self.sock.close()

    def close(self) -> None:
        """Close, once no response is still reading (as a socket's makefile behaves)."""
        self._closing = True
        if not self._readers:
            self.sock.close()

    def idle_and_open(self) -> bool:
        """Whether nothing arrived while idle: a readable idle socket was closed by the
        server (or holds an answer nobody asked for), so it is replaced before a send."""
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable


class _Reader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._sock.reader_closed()
        super().close()


class _Connection(http.client.HTTPConnection):
    """One connection to a Stripe host, opened (TCP and TLS) within a request's deadline."""

    # A connection that closed must fail the request, never reopen and send it again.
    auto_open = 0

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None) -> None:
        super().__init__(host, port)
        self._context = context
        self.deadline_sock: _DeadlineSocket | None = None
        self.idle_since = 0.0

    def open(self, deadline: float, timeout_s: float) -> None:
        """Connect and, for https, shake hands, all by `deadline`."""
        raw = socket.create_connection((self.host, self.port), _left(deadline, timeout_s))
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                raw.settimeout(_left(deadline, timeout_s))
                raw = self._context.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise
        self.deadline_sock = _DeadlineSocket(raw, timeout_s)
        self.sock = self.deadline_sock

    def start(self, deadline: float) -> None:
        """Put this request's deadline on the connection's every operation."""
        assert self.deadline_sock is not None
        self.deadline_sock.deadline = deadline
        self.deadline_sock.received = 0


def _close_all(
    idle: dict[tuple[str, str, int], list[_Connection]], lock: threading.Lock | None = None
) -> None:
    """Close every idle connection of a pool (under its lock, unless the caller holds it)."""
    with lock if lock is not None else contextlib.nullcontext():
        conns = [conn for pool in idle.values() for conn in pool]
        idle.clear()
    for conn in conns:
        conn.close()


class DeadlineHTTPClient(stripe.HTTPClient):
    """A Stripe SDK transport whose timeout covers the whole request, over kept-alive
    connections.

    One pool of idle connections per host (scheme, host, port), shared by threads under a
    lock; a request takes a connection for itself and gives it back only after a whole
    answer. The deadline covers connect, TLS, send and every read: each socket operation
    gets what is left of it, so no thread or timer runs per request. A connection that
    failed or timed out is closed, never reused; one the server closed while idle is
    replaced before anything is sent on it. One the server closes just as a request goes
    out on it (no byte of an answer came back) carries that request once more on a new
    connection, inside the same deadline, when it is a read or carries an idempotency key
    (the SDK gives every POST one): Stripe answers a repeated key with its first answer.
    Any other request that may have been sent is never sent again: it fails, and an
    unsettled create is only ever looked up.
    """

    name = "interlock-deadline"

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        if timeout_s <= 0:
            raise ValueError("the Stripe timeout must be positive")
        self._timeout_s = timeout_s
        # Built on the first https request: a worker against the loopback emulator (http)
        # never needs it, and it is most of what building a client costs on its restart.
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._pid = os.getpid()
        # A client dropped without close() still closes its idle sockets.
        weakref.finalize(self, _close_all, self._idle, self._lock)

    @property
    def timeout_s(self) -> float:
        """The total deadline of one request, in seconds (fixed: a gate checked it)."""
        return self._timeout_s

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=stripe.ca_bundle_path)
            return self._ssl

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        **_: Any,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        """Send one request; raise `stripe.APIConnectionError` past the deadline."""
        deadline = time.monotonic() + self._timeout_s
        parts = urlsplit(url)
        https = parts.scheme == "https"
        host = (parts.scheme, parts.hostname or "", parts.port or (443 if https else 80))
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        body = post_data.encode() if isinstance(post_data, str) else post_data
        request = (method.upper(), path, body, dict(headers or {}))
        # Stripe answers a repeated idempotency key with its first answer (or a 409 while
        # that one still runs), and a read changes nothing: either may go out twice.
        resendable = request[0] == "GET" or any(k.lower() == "idempotency-key" for k in request[3])
        try:
            # Inside the try: the deadline may already be spent here, and that must come
            # out as an APIConnectionError like every other timeout, not a bare TimeoutError.
            kept = self._take(host)
            if kept is not None:
                try:
                    return self._exchange(host, kept, deadline, request)
                except (BrokenPipeError, ConnectionResetError):
                    # The server closed the kept connection as the request went out: its
                    # idle timeout passed between the check in _take and the send. Nothing
                    # came back, so once more on a new connection, inside the same deadline.
                    assert kept.deadline_sock is not None
                    if not resendable or kept.deadline_sock.received:
                        raise
            conn = _Connection(host[1], host[2], self._context() if https else None)
            conn.open(deadline, self._timeout_s)
            return self._exchange(host, conn, deadline, request)
        except (OSError, http.client.HTTPException) as e:
            timed_out = isinstance(e, TimeoutError)
            if timed_out:
                detail = f"no complete answer within {self._timeout_s:g} s"
            else:
                detail = f"{type(e).__name__}: {e}"
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"request to Stripe {'timed out' if timed_out else 'failed'}: {detail}",
                should_retry=False,
            ) from e

    def _exchange(
        self,
        host: tuple[str, str, int],
        conn: _Connection,
        deadline: float,
        request: tuple[str, str, bytes | None, dict[str, str]],
    ) -> tuple[bytes, int, Mapping[str, str]]:
        """One request (method, path, body, headers) and its whole answer on `conn`, which
        goes back to the pool after a whole answer and is closed after anything else."""
        method, path, body, headers = request
        try:
            conn.start(deadline)
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            chunks = []
            while chunk := resp.read1(65536):
                chunks.append(chunk)
            resp.close()  # the whole body is read: the connection may carry the next request
            answer = b"".join(chunks)
            answer_headers = {k.lower(): v for k, v in resp.getheaders()}
            length = answer_headers.get("content-length", "")
            if length.isdigit() and len(answer) < int(length):
                raise TimeoutError(f"the answer was cut off after {len(answer)} bytes")
        except BaseException:
            conn.close()
            raise
        if not resp.will_close and conn.sock is not None:
            self._give_back(host, conn)
        else:
            conn.close()
        return answer, resp.status, answer_headers

    def _take(self, host: tuple[str, str, int]) -> _Connection | None:
        """An idle connection to `host` that is still open, or None; stale ones are closed."""
        now = time.monotonic()
        with self._lock:
            if self._pid != os.getpid():
                # A forked child must not share a connection (and its answers) with its
                # parent. Closing its copy of a socket sends nothing: the parent's stays open.
                _close_all(self._idle)
                self._pid = os.getpid()
            idle = self._idle.get(host, [])
            while idle:
                conn = idle.pop()
                sock = conn.deadline_sock
                if sock is not None and now - conn.idle_since < MAX_IDLE_S and sock.idle_and_open():
                    return conn
                conn.close()
        return None

    def _give_back(self, host: tuple[str, str, int], conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(host, [])
            if len(idle) < MAX_IDLE_PER_HOST:
                idle.append(conn)
                return
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
        """Close every idle connection (one in use closes when its request ends)."""
        _close_all(self._idle, self._lock)


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
        currency=str(obj.get("currency") or "").lower(),
    )


def transfer_from_stripe(obj: Mapping[str, Any]) -> Transfer:
    """A `Transfer` from Stripe's transfer object; `ValueError` if it is not one."""
    if not isinstance(obj, Mapping) or obj.get("object") != "transfer" or "id" not in obj:
        raise ValueError("the answer is not a transfer object")
    return Transfer(
        id=str(obj["id"]),
        amount=int(obj["amount"]),
        currency=str(obj["currency"]),
        destination=str(obj.get("destination") or ""),
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


def client_deadline_s(client: stripe.StripeClient) -> float:
    """The longest one SDK call over `client` may run, in seconds; `math.inf` if unbounded.

    A `DeadlineHTTPClient` bounds each try; the SDK makes `max_network_retries` more tries
    (on a 409 or a 5xx, each under the same idempotency key) with up to `MAX_DELAY` s
    between them. Any other transport bounds each read, or nothing, never the request.
    """
    requestor = getattr(client, "_requestor", None)
    transport = _transport(client)
    if transport is None:
        return math.inf
    # None is what the SDK runs as no retries (`HTTPClient._should_retry`).
    retries = getattr(getattr(requestor, "_options", None), "max_network_retries", None) or 0
    return transport.timeout_s * (retries + 1) + retries * stripe.HTTPClient.MAX_DELAY


def _transport(client: stripe.StripeClient) -> DeadlineHTTPClient | None:
    """The client's `DeadlineHTTPClient`, or None when it runs over another transport."""
    transport = getattr(getattr(client, "_requestor", None), "_client", None)
    return transport if isinstance(transport, DeadlineHTTPClient) else None


class StripePayments:
    """`Payments` over a `stripe.StripeClient` the caller built (any key, any mode).

    `deadline_s` is how long one of its calls may run; a `Gate` refuses a client whose
    deadline is longer than the Stripe timeout it plans its claims with.
    """

    def __init__(self, client: stripe.StripeClient) -> None:
        self._client = client

    @property
    def deadline_s(self) -> float:
        """The longest one call may run, in seconds (`client_deadline_s` of the client)."""
        return client_deadline_s(self._client)

    def close(self) -> None:
        """Close the client's idle kept-alive connections (a later call opens a new one)."""
        transport = _transport(self._client)
        if transport is not None:
            transport.close()

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

    def list_refunds_since(self, created_gte: int) -> list[Refund]:
        """Every refund on the account created at or after `created_gte`, newest first, in
        pages of 100 (`created[gte]`, `starting_after`), as `verify()` reads them."""

        def walk() -> list[Refund]:
            page = self._client.v1.refunds.list(
                params={"created": {"gte": created_gte}, "limit": 100}
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

    def list_transfers(self, destination: str) -> list[Transfer]:
        """Every transfer to the connected account, newest first: pages of 100."""

        def walk() -> list[Transfer]:
            page = self._client.v1.transfers.list(params={"destination": destination, "limit": 100})
            return [transfer_from_stripe(t.to_dict()) for t in page.auto_paging_iter()]

        return _parsed("list transfers", lambda: _call("list transfers", walk))

    def list_transfers_since(self, created_gte: int) -> list[Transfer]:
        """Every transfer on the account created at or after `created_gte`, newest first, in
        pages of 100, as `verify()` reads them account-wide."""

        def walk() -> list[Transfer]:
            page = self._client.v1.transfers.list(
                params={"created": {"gte": created_gte}, "limit": 100}
            )
            return [transfer_from_stripe(t.to_dict()) for t in page.auto_paging_iter()]

        return _parsed("list transfers", lambda: _call("list transfers", walk))

    def create_transfer(
        self,
        destination: str,
        amount: int,
        *,
        currency: str = "usd",
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Transfer:
        """Create a transfer; the idempotency key goes in the request options (a header)."""
        params: dict[str, Any] = {
            "destination": destination,
            "amount": amount,
            "currency": currency,
        }
        if metadata:
            params["metadata"] = dict(metadata)
        options: dict[str, Any] = {}
        if idempotency_key is not None:
            options["idempotency_key"] = idempotency_key
        transfer = _call(
            "create transfer",
            lambda: self._client.v1.transfers.create(params=params, options=options),  # type: ignore[arg-type]
        )
        return _parsed("create transfer", lambda: transfer_from_stripe(transfer.to_dict()))
