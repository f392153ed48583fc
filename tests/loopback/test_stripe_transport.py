"""`DeadlineHTTPClient` keeps one connection per Stripe host alive, with the whole-request
deadline intact: the real `stripe` SDK against the loopback emulator (its server counting
the connections it accepts) or against a raw socket server that misbehaves on purpose."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import stripe

from interlock import PaymentsUnsettledError, StripePayments, make_stripe_client
from interlock._stripe import adapter as transport
from interlock.testing import PaymentsModel
from interlock.testing.emulator import EmulatorHTTPServer
from tests.conftest import TEST_KEY

WAIT_S = 10.0


class CountingEmulator(EmulatorHTTPServer):
    """The emulator's server, counting the connections it accepts."""

    def __init__(self) -> None:
        super().__init__(0, PaymentsModel(), secrets.token_urlsafe(24), 10.0)
        self.accepted = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        """Count, then serve (this runs in the serving thread only)."""
        self.accepted += 1
        super().process_request(request, client_address)

    @property
    def url(self) -> str:
        """Its base address."""
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def counting() -> Iterator[CountingEmulator]:
    """A counting emulator serving in a background thread."""
    server = CountingEmulator()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()
    thread.join(WAIT_S)


def _payments(url: str, timeout_s: float = 2.0) -> StripePayments:
    return StripePayments(make_stripe_client(TEST_KEY, timeout_s=timeout_s, base_url=url))


def test_calls_share_one_kept_alive_connection(counting: CountingEmulator) -> None:
    """Twenty calls of every kind over one client open one connection."""
    payments = _payments(counting.url)
    pi = payments.create_payment(5000).id
    for i in range(6):
        payments.create_refund(pi, 100, idempotency_key=f"k-{i}")
        assert len(payments.list_refunds(pi)) == i + 1
        assert payments.get_payment(pi).amount_refunded == 100 * (i + 1)
    assert counting.accepted == 1
    payments.close()


def test_threads_each_get_their_own_answers(counting: CountingEmulator) -> None:
    """Eight threads calling at once each read the answer to their own request, over at
    most one connection each, all given back to the pool and reused."""
    payments = _payments(counting.url)
    ids = [payments.create_payment(100 + n).id for n in range(8)]
    wrong: list[str] = []
    go = threading.Barrier(len(ids))

    def call(pi: str, amount: int) -> None:
        go.wait(WAIT_S)
        for _ in range(10):
            got = payments.get_payment(pi)
            if (got.id, got.amount) != (pi, amount):
                wrong.append(f"{pi} read {got.id}")

    threads = [threading.Thread(target=call, args=(pi, 100 + n)) for n, pi in enumerate(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not wrong
    assert counting.accepted <= len(ids)
    before = counting.accepted
    payments.get_payment(ids[0])
    assert counting.accepted == before
    payments.close()


def test_a_timed_out_connection_is_never_reused(counting: CountingEmulator) -> None:
    """A create held past the deadline times out; the next call opens a new connection and
    reads its own answer, never the held create's late one."""
    payments = _payments(counting.url, timeout_s=0.3)
    pi = payments.create_payment(5000).id
    fault = counting.model.add_fault("hold", hold_ms=800)
    with pytest.raises(PaymentsUnsettledError, match="timed out"):
        payments.create_refund(pi, 700, idempotency_key="k-held")
    assert fault.committed.wait(WAIT_S)
    assert fault.ended.wait(WAIT_S)  # the late answer has been written to the old socket
    refunds = payments.list_refunds(pi)  # a list, not the held create's refund object
    assert [r.amount for r in refunds] == [700]
    assert counting.accepted == 2
    payments.close()


def test_a_connection_idle_too_long_is_replaced(
    counting: CountingEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_IDLE_S a kept connection is closed and a new one opened for the next call."""
    payments = _payments(counting.url)
    pi = payments.create_payment(5000).id
    monkeypatch.setattr(transport, "MAX_IDLE_S", 0.0)
    payments.list_refunds(pi)
    assert counting.accepted == 2
    payments.close()


# -- a raw server that misbehaves ---------------------------------------------------------

ANSWER = b'{"id": "pi_raw", "object": "payment_intent", "amount": 100, "currency": "usd"}'
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class RawServer:
    """A loopback server whose behaviour per connection is a function of the test's."""

    def __init__(self, serve: Callable[[socket.socket, RawServer], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.heads: list[bytes] = []
        self.connections = 0
        self.closed = threading.Event()
        self.stop = threading.Event()
        self._serve = serve
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                self._serve(conn, self)

    def read_request(self, conn: socket.socket) -> bool:
        """Read one request head (a body sent along with it is dropped); False at EOF."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        self.requests.append(data.split(b"\r\n", 1)[0])
        self.heads.append(data)
        return True

    def close(self) -> None:
        """Stop accepting and end the serving thread."""
        self.stop.set()
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept; close does not
        self.listener.close()
        self._thread.join(WAIT_S)


def test_a_connection_the_server_closed_while_idle_is_replaced_before_the_send() -> None:
    """The server answers once and closes the connection without saying so: the next call
    goes out on a new connection, once."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        if server.read_request(conn):
            conn.sendall(OK_HEAD % len(ANSWER) + ANSWER)
        conn.shutdown(socket.SHUT_RDWR)
        server.closed.set()

    server = RawServer(serve)
    try:
        client = make_stripe_client(TEST_KEY, timeout_s=2, base_url=server.url)
        client.v1.payment_intents.retrieve("pi_raw")
        assert server.closed.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        # The FIN has to reach the client's socket before it can see it; poll for that.
        sock = transport._transport(client)._idle  # type: ignore[union-attr]
        while all(c.deadline_sock.idle_and_open() for pool in sock.values() for c in pool):  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert client.v1.payment_intents.retrieve("pi_raw").id == "pi_raw"
    finally:
        server.close()
    assert server.connections == 2
    assert len(server.requests) == 2


REFUND = b'{"id": "re_raw", "object": "refund", "amount": 100, "status": "succeeded"}'


def _key(head: bytes) -> bytes | None:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"idempotency-key":
            return value.strip()
    return None


def test_a_create_dropped_unanswered_on_a_kept_connection_goes_once_more_on_a_new_one() -> None:
    """The server reads a create on a kept connection and closes it with no answer (its
    idle timeout passing just as the create went out): the create goes once more, on a new
    connection, under the same idempotency key, and its answer is the refund."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        if server.connections == 1:
            if server.read_request(conn):
                conn.sendall(OK_HEAD % len(ANSWER) + ANSWER)
            if server.read_request(conn):
                conn.shutdown(socket.SHUT_RDWR)
            return
        if server.read_request(conn):
            conn.sendall(OK_HEAD % len(REFUND) + REFUND)

    server = RawServer(serve)
    try:
        payments = _payments(server.url)
        payments._client.v1.payment_intents.retrieve("pi_raw")
        refund = payments.create_refund("pi_raw", 100, idempotency_key="k-dropped")
    finally:
        server.close()
    assert refund.id == "re_raw"
    assert server.connections == 2
    assert [r.split(b" ")[0] for r in server.requests] == [b"GET", b"POST", b"POST"]
    assert [_key(h) for h in server.heads[1:]] == [b"k-dropped", b"k-dropped"]


def test_a_create_dropped_on_the_new_connection_too_is_unsettled_and_never_sent_a_third_time() -> (
    None
):
    """Dropped unanswered on the kept connection and again on the new one: the create is
    unsettled (only a lookup settles it), and nothing is sent on a third connection."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        if server.connections == 1 and server.read_request(conn):
            conn.sendall(OK_HEAD % len(ANSWER) + ANSWER)
        if server.read_request(conn):
            conn.shutdown(socket.SHUT_RDWR)  # it may have been done: no answer

    server = RawServer(serve)
    try:
        payments = _payments(server.url)
        payments._client.v1.payment_intents.retrieve("pi_raw")
        with pytest.raises(PaymentsUnsettledError, match="Remote end closed"):
            payments.create_refund("pi_raw", 100, idempotency_key="k-lost")
    finally:
        server.close()
    assert server.connections == 2
    assert [r.split(b" ")[0] for r in server.requests] == [b"GET", b"POST", b"POST"]


def test_a_post_without_an_idempotency_key_lost_on_a_kept_connection_is_never_sent_again() -> None:
    """Only a read or a request Stripe deduplicates goes twice: a POST with no key (which
    the SDK never sends, but another caller of the transport might) fails unsettled, once."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        if server.read_request(conn):
            conn.sendall(OK_HEAD % len(ANSWER) + ANSWER)
        if server.read_request(conn):
            conn.shutdown(socket.SHUT_RDWR)

    server = RawServer(serve)
    client = transport.DeadlineHTTPClient(timeout_s=2.0)
    try:
        client.request("get", f"{server.url}/v1/payment_intents/pi_raw", {})
        with pytest.raises(stripe.APIConnectionError, match="Remote end closed"):
            client.request("post", f"{server.url}/v1/refunds", {}, "payment_intent=pi_raw")
    finally:
        client.close()
        server.close()
    assert server.connections == 1
    assert [r.split(b" ")[0] for r in server.requests] == [b"GET", b"POST"]


def test_a_trickled_head_still_ends_at_the_deadline() -> None:
    """A server that trickles its status line and headers a byte at a time (each byte well
    inside a per-read timeout) is cut off at the 0.5 s deadline, without a timer thread."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        server.read_request(conn)
        for byte in OK_HEAD % len(ANSWER) + ANSWER:
            if server.stop.wait(0.05):
                return
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return

    server = RawServer(serve)
    try:
        client = make_stripe_client(TEST_KEY, timeout_s=0.5, base_url=server.url)
        threads = threading.active_count()
        seen: list[int] = []
        watcher_stop = threading.Event()

        def watch() -> None:
            while not watcher_stop.wait(0.02):
                seen.append(threading.active_count())

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        with pytest.raises(stripe.APIConnectionError, match="timed out"):
            client.v1.payment_intents.retrieve("pi_raw")
        elapsed = time.monotonic() - started
        watcher_stop.set()
        watcher.join(WAIT_S)
    finally:
        server.close()
    assert elapsed < 3.0, f"a 0.5 s deadline took {elapsed:.2f} s against a ~6 s trickle"
    assert max(seen) == threads + 1, "a thread (the watcher is the one) started per request"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: the child only calls
def test_a_forked_child_opens_its_own_connection(counting: CountingEmulator) -> None:
    """A child forked with a kept connection in the pool does not use it: parent and
    child would read each other's answers."""
    payments = _payments(counting.url)
    pi = payments.create_payment(5000).id
    pid = os.fork()
    if pid == 0:
        code = 0 if payments.get_payment(pi).id == pi else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert payments.get_payment(pi).id == pi
    assert counting.accepted == 2
    payments.close()


def _self_signed(tmp_path: Any) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that no certificate authority signed, and its key."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_an_https_server_stripes_ca_bundle_does_not_vouch_for_is_refused(tmp_path: Any) -> None:
    """Over https the client verifies the server against the stripe SDK's CA bundle (the
    context is built on the first https request): a loopback server with a self-signed
    certificate for its own address is refused, and no request reaches it."""
    import ssl

    cert, key = _self_signed(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    handshakes: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            try:
                server_context.wrap_socket(conn, server_side=True).close()
                handshakes.append("completed")
            except (ssl.SSLError, OSError) as e:
                handshakes.append(type(e).__name__)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = make_stripe_client(TEST_KEY, base_url=f"https://127.0.0.1:{port}", timeout_s=5)
    try:
        with pytest.raises(PaymentsUnsettledError, match="CERTIFICATE_VERIFY_FAILED"):
            StripePayments(client).list_refunds("pi_1")
    finally:
        thread.join(WAIT_S)
        listener.close()
    assert handshakes and handshakes != ["completed"]
