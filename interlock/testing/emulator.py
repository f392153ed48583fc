"""The loopback Stripe emulator: the payments model served over HTTP.

The real `stripe` SDK works against it unchanged; only the base address differs. It binds
127.0.0.1, requires `Authorization: Bearer` with a test key (`sk_test_`/`rk_test_`), and
answers every request with a `Request-Id`. The Stripe routes it answers are the rows of
`ROUTES` (`routes.py`), each answered by the model's operation the row names. Form
bodies are decoded as Stripe does: nested `metadata[k]=v` and arrays as both `a[0]=` and
`a[]=`.

A request it cannot read is answered like Stripe, 400 with Stripe's error envelope, never
a traceback: a Content-Length that is not a number or is over `MAX_BODY`, a chunked body,
a body that is not UTF-8, parameters nested deeper than `MAX_DEPTH` or given two shapes.
Amounts are integers in ASCII digits, as Stripe reads them (`parameter_invalid_integer`).
A request has one deadline (`read_timeout_s`, 10 s by default) for its request line,
headers and body together, from its first byte, so a client that trickles bytes cannot
stretch it; a kept connection idle as long is closed; at most
`max_workers` (64) requests are served at once, and a connection past that is answered 429
at once instead of holding a thread.

Every route, the Stripe API's and the control routes alike, answers only a request whose
Host header is `127.0.0.1:<port>` or `localhost:<port>` (else 403, against DNS
rebinding: a page that renamed itself to 127.0.0.1 must not create refunds the demo reads
its verdicts from).

Control routes live under `/_emulator/`, a path Stripe does not use. They answer only a
caller that could have started the emulator: the Host rule above; a POST must say
`Content-Type: application/json` (else 415: a browser must then ask first, and is never
allowed); an Origin, when sent, must be the emulator's own (else 403); and the
`X-Emulator-Token` header must carry the per-process `control_token` (else 403), which the
person or engine that started it holds (`INTERLOCK_EMULATOR_TOKEN` for one started with
`python -m interlock stripe-emulator`). `EmulatorControl` is a client for these routes.

- `POST /_emulator/clock/advance` `{"seconds": N}`: move the model's clock forward.
- `POST /_emulator/faults` `{"kind", "stage", "hold_ms", "commit", "count",
  "payment_intent"}`: arm a fault (kinds and stages in `model.py`: `FAULT_KINDS`,
  `FAULT_STAGES`); answers the fault with its id. A `trickle` fault trickles here, a
  `garbled_2xx` answer's body is cut short here, a `drop` or `never_commits` hold closes
  the connection with no answer.
- `GET /_emulator/faults/{id}?wait=S&until=started|committed|ended`: the fault, waiting up
  to S seconds (at most 60) for that event (default `committed`). `until=started` lets a
  test act while a create is held: the request has begun and its key is in progress.
- `DELETE /_emulator/faults`: disarm every fault.
- `POST /_emulator/refunds/{id}/status` `{"status": ...}`: settle or fail a refund.

No key, header or body is ever logged.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from interlock._core.payments import is_test_key
from interlock._core.signals import Interrupted, stop_signals_interrupt
from interlock.testing.model import Fault, PaymentsModel, Reply
from interlock.testing.routes import StripeModelError, route_for

CONTROL_PREFIX = "/_emulator/"
TOKEN_HEADER = "X-Emulator-Token"
TOKEN_ENV = "INTERLOCK_EMULATOR_TOKEN"
# Stripe's requests from the demo are a few hundred bytes; anything near this is not one.
MAX_BODY = 256 * 1024
# Bracket levels in a form key: Stripe's deepest parameters use a handful.
MAX_DEPTH = 8
MAX_FIELDS = 1000
READ_TIMEOUT_S = 10.0
# Far more than the demo's columns and a sweep send at once; far fewer than a thread each
# for every connection a stuck or hostile client opens.
MAX_WORKERS = 64
# How often the serving loop looks for `stop()`: socketserver's default, 0.5 s, was waited
# out by every stop (each test's emulator, each demo run's), for nothing.
STOP_POLL_S = 0.02
_KEY_PART = re.compile(r"\[([^\]]*)\]")


class BadRequest(Exception):
    """A request the emulator cannot read: answered 400 in Stripe's envelope."""


def decode_form(body: str) -> dict[str, Any]:
    """Decode a Stripe form body into nested dicts and lists.

    `metadata[case]=x` becomes `{"metadata": {"case": "x"}}`; `a[0]=x&a[1]=y` and
    `a[]=x&a[]=y` both become `{"a": ["x", "y"]}`. Raises `BadRequest` for a body Stripe
    would refuse: bad percent-escapes, too many fields, keys nested deeper than
    `MAX_DEPTH`, or one key given both as a value and as a hash.
    """
    try:
        pairs = parse_qsl(body, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise BadRequest("Invalid request: a parameter is not valid UTF-8.") from None
    except ValueError:
        raise BadRequest(f"Invalid request: more than {MAX_FIELDS} parameters.") from None
    root: dict[str, Any] = {}
    for raw_key, value in pairs:
        head, _, rest = raw_key.partition("[")
        parts = [head, *_KEY_PART.findall("[" + rest)] if rest else [head]
        if len(parts) > MAX_DEPTH:
            raise BadRequest(
                f"Invalid request: parameter {head} is nested deeper than {MAX_DEPTH} levels."
            )
        node: Any = root
        for i, part in enumerate(parts):
            if not isinstance(node, dict):
                raise BadRequest(_two_shapes(parts[:i]))
            last = i == len(parts) - 1
            if part == "":
                part = str(len(node))
            if last:
                if isinstance(node.get(part), dict):
                    raise BadRequest(_two_shapes(parts[: i + 1]))
                node[part] = value
            else:
                node = node.setdefault(part, {})
    decoded: dict[str, Any] = _lists(root)
    return decoded


def _two_shapes(parts: list[str]) -> str:
    name = parts[0] + "".join(f"[{p}]" for p in parts[1:])
    return f"Invalid request: {name} is given both as a value and as a hash."


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {k: _lists(v) for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        return [converted[k] for k in sorted(converted, key=int)]
    return converted


_FAULT_FIELDS = frozenset({"kind", "stage", "hold_ms", "commit", "count", "payment_intent"})


def _integer(data: dict[str, Any], name: str, default: int) -> int:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    return value


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read given only what is left of the request's deadline.

    A socket timeout alone bounds each read, so a byte every few seconds would keep a
    request (and its thread) alive indefinitely.
    """

    def __init__(self, sock: Any, handler: _Handler) -> None:
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(remaining)
        received: int = self._sock.recv_into(buffer)
        return received


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self._reader = io.BufferedReader(_DeadlineReader(self.connection, self))
        self.rfile = self._reader

    def handle_one_request(self) -> None:
        """One request, read within one deadline from its first byte.

        A kept connection may sit idle that long first and is then closed; a request that
        began just before would otherwise be cut off mid-read with no answer.
        """
        self.deadline = time.monotonic() + self.server.read_timeout_s
        try:
            arrived = self._reader.peek(1)
        except OSError:  # the idle wait timed out, or the client went away
            arrived = b""
        if not arrived:
            self.close_connection = True
            return
        self.deadline = time.monotonic() + self.server.read_timeout_s
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: a request line or header must never reach a log."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the HTTP layer finds itself (a request line too long, a bad header):
        Stripe's envelope, not the standard library's HTML page."""
        self.close_connection = True
        err = StripeModelError(code, f"Invalid request: {message or 'the request is malformed'}.")
        try:
            self._send(code, err.envelope())
        except OSError:
            return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        control = url.path.startswith(CONTROL_PREFIX)
        foreign = self._foreign_host()
        if foreign is not None:
            self.close_connection = True
            if control:
                self._send(403, {"error": f"control routes answer {foreign}"})
            else:
                err = StripeModelError(403, f"This emulator answers {foreign}.")
                self._send(err.status, err.envelope())
            return
        try:
            raw = self._read_body()
            if control:
                self._control(method, url.path[len(CONTROL_PREFIX) :], url.query, raw)
                return
            if not self._authorized():
                return
            try:
                body = raw.decode()
            except UnicodeDecodeError:
                raise BadRequest("Invalid request: the body is not valid UTF-8.") from None
            reply = self._api(method, url.path, url.query, body)
        except BadRequest as e:
            self.close_connection = True
            if control:
                self._send(400, {"error": f"bad control request: {e}"})
                return
            reply = Reply(400, StripeModelError(400, str(e)).envelope())
        except StripeModelError as e:
            reply = Reply(e.status, e.envelope())
        except Exception as e:  # never a traceback on the demo's screen: Stripe's 500
            self.close_connection = True
            reply = Reply(500, _unexpected(e).envelope())
        if reply.drop:
            self.close_connection = True
            return
        self._send(reply.status, reply.body, reply)

    def _read_body(self) -> bytes:
        """The body, read whole within the read deadline, or `BadRequest` saying why not."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise BadRequest(
                "Invalid request: chunked bodies are not accepted; send a Content-Length."
            )
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            return b""
        if len(set(lengths)) != 1 or not lengths[0].strip().isdigit():
            raise BadRequest(
                "Invalid request: the Content-Length header must be one non-negative integer."
            )
        length = int(lengths[0])
        if length > MAX_BODY:
            raise BadRequest(
                f"Invalid request: the body is {length} bytes; at most {MAX_BODY} are accepted."
            )
        chunks: list[bytes] = []
        left = length
        while left > 0:
            try:
                chunk = self.rfile.read1(left)
            except TimeoutError:
                raise BadRequest(
                    f"Invalid request: the body promised {length} bytes and "
                    f"{length - left} arrived within {self.server.read_timeout_s:g} s "
                    "of the request's start."
                ) from None
            if not chunk:
                raise BadRequest(
                    f"Invalid request: the body promised {length} bytes and the connection "
                    f"closed after {length - left}."
                )
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization", "")
        scheme, _, key = auth.partition(" ")
        if scheme != "Bearer" or not key:
            err = StripeModelError(
                401,
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
                "YOUR_SECRET_KEY').",
            )
        elif not is_test_key(key):
            err = StripeModelError(
                401,
                "This emulator accepts only Stripe test keys (sk_test_... or rk_test_...). "
                "The key given is not one; no part of it is shown.",
            )
        else:
            return True
        self._send(err.status, err.envelope())
        return False

    def _api(self, method: str, path: str, query: str, body: str) -> Reply:
        """A Stripe API request, routed by the model's table (`ROUTES`): a POST's
        parameters are its form body, under its Idempotency-Key; a GET's its query."""
        route, ident = route_for(method, path)
        if method == "POST":
            key = self.headers.get("Idempotency-Key")
            return self.server.model.serve(route, ident, decode_form(body), key)
        return self.server.model.serve(route, ident, decode_form(query))

    def _own_hosts(self) -> tuple[str, str]:
        port = self.server.server_address[1]
        return f"127.0.0.1:{port}", f"localhost:{port}"

    def _foreign_host(self) -> str | None:
        """Words for a request addressed to another name (DNS rebinding), or None: what is
        answered, for the caller to put after its own subject and verb."""
        own = self._own_hosts()
        hosts = self.headers.get_all("Host") or []
        if len(hosts) == 1 and hosts[0].lower() in own:
            return None
        got = f"Host {hosts[0][:100]!r}" if len(hosts) == 1 else f"{len(hosts)} Host headers"
        return f"only Host {' or '.join(own)}; got {got}"

    def _control_refusal(self, method: str, body: bytes) -> tuple[int, str] | None:
        """Why a control request is refused (status, words), or None: see the module doc."""
        own = self._own_hosts()
        content_type = self.headers.get("Content-Type", "")
        if (method == "POST" or body) and content_type.split(";")[0].strip() != "application/json":
            return 415, (
                "control routes take only Content-Type: application/json "
                f"(got {content_type[:100] or 'none'!r})"
            )
        origin = self.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in own}:
            return 403, f"control routes answer only their own origin; got Origin {origin[:100]!r}"
        token = self.headers.get(TOKEN_HEADER, "")
        if not secrets.compare_digest(token.encode(), self.server.control_token.encode()):
            return 403, (
                f"control routes need the {TOKEN_HEADER} header with this emulator's token "
                f"(StripeEmulator.control_token, or {TOKEN_ENV} for `python -m interlock "
                "stripe-emulator`); it was missing or wrong"
            )
        return None

    def _control(self, method: str, route: str, query: str, raw: bytes) -> None:
        model = self.server.model
        refusal = self._control_refusal(method, raw)
        if refusal is not None:
            self.close_connection = True
            self._send(refusal[0], {"error": refusal[1]})
            return
        try:
            data = json.loads(raw) if raw else {}
            parts = route.strip("/").split("/")
            if method == "POST" and parts == ["clock", "advance"]:
                now = model.advance(float(data["seconds"]))
                self._send(200, {"now": now})
            elif method == "POST" and parts == ["faults"]:
                self._send(200, self._arm(data).describe())
            elif method == "DELETE" and parts == ["faults"]:
                model.clear_faults()
                self._send(200, {"cleared": True})
            elif method == "GET" and len(parts) == 2 and parts[0] == "faults":
                found = model.fault(parts[1])
                if found is None:
                    self._send(404, {"error": f"no fault {parts[1]}"})
                    return
                args = dict(parse_qsl(query))
                wait = float(args.get("wait", "0"))
                until = args.get("until", "committed")
                events = {"started": found.started, "committed": found.committed}
                events["ended"] = found.ended
                if until not in events:
                    raise ValueError(f"until must be one of {', '.join(events)}, not {until!r}")
                events[until].wait(min(max(wait, 0.0), 60.0))
                self._send(200, found.describe())
            elif method == "POST" and len(parts) == 3 and parts[::2] == ["refunds", "status"]:
                self._send(200, model.set_refund_status(parts[1], str(data["status"])))
            else:
                self._send(404, {"error": f"no control route {method} {CONTROL_PREFIX}{route}"})
        except (KeyError, ValueError, TypeError, RecursionError) as e:
            self._send(400, {"error": f"bad control request: {type(e).__name__}: {e}"})

    def _arm(self, data: Any) -> Fault:
        """Arm the fault a `POST /_emulator/faults` body describes."""
        if not isinstance(data, dict):
            raise TypeError("the body must be a JSON object")
        unknown = sorted(set(data) - _FAULT_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown fields {', '.join(unknown)}; use {', '.join(sorted(_FAULT_FIELDS))}"
            )
        commit = data.get("commit")
        if commit is not None and not isinstance(commit, bool):
            raise TypeError(f"commit must be true or false, not {commit!r}")
        stage, pi = data.get("stage"), data.get("payment_intent")
        for name, value in (("stage", stage), ("payment_intent", pi)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, not {value!r}")
        return self.server.model.add_fault(
            str(data["kind"]),
            stage=stage,
            hold_ms=_integer(data, "hold_ms", 0),
            commit=commit,
            count=_integer(data, "count", 1),
            payment_intent=pi,
        )

    def _send(self, status: int, body: dict[str, Any], reply: Reply | None = None) -> None:
        # The answer is written with the full timeout, not what is left of the read deadline.
        self.connection.settimeout(self.server.read_timeout_s)
        data = reply.wire_body() if reply is not None else json.dumps(body).encode()
        headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(data)),
            "Request-Id": "req_" + secrets.token_hex(7),
        }
        if reply is not None and reply.idempotency_key is not None:
            headers["Idempotency-Key"] = reply.idempotency_key
            if reply.replayed:
                headers["Idempotent-Replayed"] = "true"
        if reply is not None and reply.trickle_ms > 0:
            self._trickle(status, headers, data, reply.trickle_ms / 1000)
            return
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, status: int, headers: dict[str, str], data: bytes, seconds: float) -> None:
        """Send the whole answer a byte at a time, spread over `seconds`."""
        head = f"{self.protocol_version} {status} {self.responses[status][0]}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        raw = head.encode("latin-1") + data
        pause = seconds / len(raw)
        self.close_connection = True
        for i in range(len(raw)):
            # The pause is the fault itself; a stopping server cuts it short.
            if self.server.stopping.wait(pause):
                return
            try:
                self.wfile.write(raw[i : i + 1])
                self.wfile.flush()
            except OSError:
                return  # the client gave up: its deadline is what the fault tests


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the model its handlers serve."""

    daemon_threads = True
    allow_reuse_address = True
    # A burst past the workers is answered 429 at once, not left to retry its handshake.
    request_queue_size = 128

    def __init__(
        self,
        port: int,
        model: PaymentsModel,
        control_token: str,
        read_timeout_s: float,
        max_workers: int = MAX_WORKERS,
    ) -> None:
        self.model = model
        self.control_token = control_token
        self.read_timeout_s = read_timeout_s
        self.max_workers = max_workers
        self._workers = threading.BoundedSemaphore(max_workers)
        self.stopping = threading.Event()
        # Counted in the serving thread alone, as each connection is accepted.
        self.connections_accepted = 0
        super().__init__(("127.0.0.1", port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own, or answer 429 when all are busy."""
        self.connections_accepted += 1
        if not self._workers.acquire(blocking=False):
            self._refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:
            # The thread could not be started, so nothing else gives its place back. Anything
            # else is a Ctrl-C, which ends serving; it usually lands while start() waits for a
            # thread that does run and gives its place back itself, and releasing it here too
            # would raise ValueError, which the server reports and then keeps serving.
            self._workers.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """The worker's thread: its place is given back however the connection ends."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._workers.release()

    def _refuse_busy(self, request: Any) -> None:
        err = StripeModelError(
            429,
            f"Too many requests at once: this emulator serves at most {self.max_workers}. "
            "Try again in a moment.",
            type="rate_limit_error",
            code="rate_limit",
        )
        body = json.dumps(err.envelope()).encode()
        head = (
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            request.settimeout(1.0)
            request.sendall(head.encode() + body)
            request.shutdown(socket.SHUT_WR)
            # Closing with the request unread would reset the connection and could lose
            # the answer before the client reads it; what has arrived is read and dropped.
            request.setblocking(False)
            while request.recv(65536):
                pass
        except OSError:
            pass
        request.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (its deadline passed, or it was killed) is normal here.

        The default prints a traceback to stderr, which would land on the demo's screen;
        anything else is still reported.
        """
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _unexpected(e: Exception) -> StripeModelError:
    return StripeModelError(
        500,
        f"An unknown error occurred while processing this request ({type(e).__name__} in "
        "the emulator).",
        type="api_error",
    )


class EmulatorControlError(RuntimeError):
    """A control request the emulator refused or could not be sent."""


class EmulatorControl:
    """A client for an emulator's control routes (another process's, or this one's).

    `EmulatorControl.from_env(url)` takes the token from `INTERLOCK_EMULATOR_TOKEN`.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 70.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the emulator listens on http://127.0.0.1:PORT, not {url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._token = token
        self._timeout_s = timeout_s

    @classmethod
    def from_env(cls, url: str, env: Mapping[str, str] | None = None) -> EmulatorControl:
        """A client whose token comes from `INTERLOCK_EMULATOR_TOKEN`."""
        token = (os.environ if env is None else env).get(TOKEN_ENV, "")
        if not token:
            raise EmulatorControlError(
                f"{TOKEN_ENV} is not set: start the emulator with `python -m interlock "
                "stripe-emulator`, which prints its token, and set it to that"
            )
        return cls(url, token)

    def add_fault(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Arm a fault (fields as `POST /_emulator/faults` takes them); returns it."""
        return self._call("POST", "faults", {"kind": kind, **fields})

    def wait(
        self, fault_id: str, until: str = "committed", seconds: float = 10.0
    ) -> dict[str, Any]:
        """The fault once `until` happened, or as it is after `seconds` (at most 60)."""
        query = urlencode({"wait": seconds, "until": until})
        return self._call("GET", f"faults/{fault_id}?{query}")

    def clear_faults(self) -> None:
        """Disarm every fault."""
        self._call("DELETE", "faults")

    def advance(self, seconds: float) -> float:
        """Move the emulator's clock forward; returns its time now."""
        return float(self._call("POST", "clock/advance", {"seconds": seconds})["now"])

    def set_refund_status(self, refund_id: str, status: str) -> dict[str, Any]:
        """Settle or fail a refund."""
        return self._call("POST", f"refunds/{refund_id}/status", {"status": status})

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {TOKEN_HEADER: self._token, "Host": f"{self._host}:{self._port}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            conn.request(method, CONTROL_PREFIX + route, body=data, headers=headers)
            resp = conn.getresponse()
            answer = json.loads(resp.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise EmulatorControlError(
                f"the emulator's control route {method} {CONTROL_PREFIX}{route} failed: {e}"
            ) from e
        finally:
            conn.close()
        if resp.status != 200:
            raise EmulatorControlError(
                f"the emulator refused {method} {CONTROL_PREFIX}{route} ({resp.status}): "
                f"{answer.get('error', answer)}"
            )
        result: dict[str, Any] = answer
        return result


class StripeEmulator:
    """The emulator as an object: start it on a free port, use `.url`, stop it.

    >>> with StripeEmulator() as emu:
    ...     client = stripe.StripeClient("sk_test_x", base_addresses={"api": emu.url})
    """

    def __init__(
        self,
        port: int = 0,
        model: PaymentsModel | None = None,
        *,
        control_token: str | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_workers: int = MAX_WORKERS,
    ) -> None:
        if control_token is not None and len(control_token) < 16:
            raise ValueError("a control token needs at least 16 characters")
        if read_timeout_s <= 0:
            raise ValueError("the read timeout must be positive")
        self.model = model if model is not None else PaymentsModel()
        token = control_token or secrets.token_urlsafe(24)
        if max_workers < 1:
            raise ValueError("the emulator needs at least one worker")
        self._server = EmulatorHTTPServer(port, self.model, token, read_timeout_s, max_workers)
        self._thread: threading.Thread | None = None

    @property
    def control_token(self) -> str:
        """The token its control routes require (`X-Emulator-Token`); never show or log it."""
        return self._server.control_token

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def connections_accepted(self) -> int:
        """How many connections it has accepted (a kept-alive client opens few)."""
        return self._server.connections_accepted

    @property
    def url(self) -> str:
        """Its base address, for `StripeClient(base_addresses={"api": url})`."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StripeEmulator:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(STOP_POLL_S,),
            name="stripe-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> StripeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_emulator(port: int | None, *, prog: str) -> int:
    """Serve an emulator on 127.0.0.1 until Ctrl-C (a command's body; `prog` names the
    command in its messages). Its address and control token go to stderr only; the token
    is `INTERLOCK_EMULATOR_TOKEN` when set, else a new one printed once. SIGINT, SIGTERM
    and SIGHUP stop it cleanly, with one line saying so, even when it was started with
    SIGINT ignored, as a script's background job is (`python -m interlock stripe-emulator
    &`). Returns the exit code: 0, or 2 when it cannot listen or the preset token is too
    short."""
    preset = os.environ.get(TOKEN_ENV) or None
    try:
        emu = StripeEmulator(port or 0, control_token=preset)
    except OSError as e:
        print(f"{prog}: cannot listen on 127.0.0.1:{port}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"{prog}: {TOKEN_ENV}: {e}; unset it for a random one", file=sys.stderr)
        return 2
    print(f"Stripe emulator on {emu.url} (test keys only; Ctrl-C stops it)", file=sys.stderr)
    if preset is not None:
        print(f"Control token: the one in {TOKEN_ENV}", file=sys.stderr)
    else:
        # For the person who started it: a client at this address needs it to arm faults.
        # It is printed here once and never written anywhere else.
        print(
            f"Control token: {emu.control_token} (set {TOKEN_ENV} to it where a client "
            f"uses {emu.url}; keep it to yourself)",
            file=sys.stderr,
        )
    with stop_signals_interrupt():
        try:
            emu.serve_forever()
        except Interrupted as stop:
            print(
                f"{prog} stripe-emulator on {emu.url} stopped by {stop.words}: the payments "
                "and refunds it kept in memory are gone",
                file=sys.stderr,
            )
        finally:
            emu.stop()
    return 0
