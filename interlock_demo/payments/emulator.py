"""The loopback Stripe emulator: the payments model served over HTTP.

The real `stripe` SDK works against it unchanged; only the base address differs. It binds
127.0.0.1, requires `Authorization: Bearer` with a test key (`sk_test_`/`rk_test_`), and
answers every request with a `Request-Id`. Form bodies are decoded as Stripe does:
nested `metadata[k]=v` and arrays as both `a[0]=` and `a[]=`.

A request it cannot read is answered like Stripe, 400 with Stripe's error envelope, never
a traceback: a Content-Length that is not a number or is over `MAX_BODY`, a chunked body,
a body that is not UTF-8, parameters nested deeper than `MAX_DEPTH` or given two shapes.
Bodies and headers are read with a deadline (`read_timeout_s`, 10 s by default), so a
client that promises more bytes than it sends cannot hold a thread.

Control routes live under `/_emulator/`, a path Stripe does not use. They answer only a
caller that could have started the emulator: the Host header must be
`127.0.0.1:<port>` or `localhost:<port>` (else 403, against DNS rebinding); a POST must say
`Content-Type: application/json` (else 415: a browser must then ask first, and is never
allowed); an Origin, when sent, must be the emulator's own (else 403); and the
`X-Emulator-Token` header must carry the per-process `control_token` (else 403), which the
person or engine that started it holds (`INTERLOCK_EMULATOR_TOKEN` for one started with
`interlock-demo stripe-emulator`). `EmulatorControl` is a client for these routes.

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
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from interlock_demo.keys import is_test_key
from interlock_demo.payments.model import Fault, PaymentsModel, Reply, StripeModelError

CONTROL_PREFIX = "/_emulator/"
TOKEN_HEADER = "X-Emulator-Token"
TOKEN_ENV = "INTERLOCK_EMULATOR_TOKEN"
# Stripe's requests from the demo are a few hundred bytes; anything near this is not one.
MAX_BODY = 256 * 1024
# Bracket levels in a form key: Stripe's deepest parameters use a handful.
MAX_DEPTH = 8
MAX_FIELDS = 1000
READ_TIMEOUT_S = 10.0
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer

    def setup(self) -> None:
        super().setup()
        # The socket timeout bounds each wait for a header line or an idle keep-alive.
        self.connection.settimeout(self.server.read_timeout_s)

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
        deadline = time.monotonic() + self.server.read_timeout_s
        chunks: list[bytes] = []
        left = length
        while left > 0:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                self.connection.settimeout(remaining)
                chunk = self.rfile.read1(left)
            except TimeoutError:
                raise BadRequest(
                    f"Invalid request: the body promised {length} bytes and "
                    f"{length - left} arrived within {self.server.read_timeout_s:g} s."
                ) from None
            finally:
                self.connection.settimeout(self.server.read_timeout_s)
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
        model = self.server.model
        parts = path.strip("/").split("/")
        if method == "POST" and len(parts) == 2 and parts[0] == "v1":
            key = self.headers.get("Idempotency-Key")
            return model.post(parts[1], decode_form(body), key)
        if method == "GET" and parts[:2] == ["v1", "payment_intents"] and len(parts) == 3:
            return model.get_payment_intent(parts[2], decode_form(query))
        if method == "GET" and parts == ["v1", "refunds"]:
            return model.list_refunds(decode_form(query))
        raise StripeModelError(404, f"Unrecognized request URL ({method}: {path}).")

    def _control_refusal(self, method: str, body: bytes) -> tuple[int, str] | None:
        """Why a control request is refused (status, words), or None: see the module doc."""
        port = self.server.server_address[1]
        own = (f"127.0.0.1:{port}", f"localhost:{port}")
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0] not in own:
            got = f"Host {hosts[0][:100]!r}" if len(hosts) == 1 else f"{len(hosts)} Host headers"
            return 403, f"control routes answer only Host {' or '.join(own)}; got {got}"
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
                f"(StripeEmulator.control_token, or {TOKEN_ENV} for `interlock-demo "
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

    def __init__(
        self, port: int, model: PaymentsModel, control_token: str, read_timeout_s: float
    ) -> None:
        self.model = model
        self.control_token = control_token
        self.read_timeout_s = read_timeout_s
        self.stopping = threading.Event()
        super().__init__(("127.0.0.1", port), _Handler)

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
                f"{TOKEN_ENV} is not set: start the emulator with `interlock-demo "
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
    ) -> None:
        if control_token is not None and len(control_token) < 16:
            raise ValueError("a control token needs at least 16 characters")
        if read_timeout_s <= 0:
            raise ValueError("the read timeout must be positive")
        self.model = model if model is not None else PaymentsModel()
        token = control_token or secrets.token_urlsafe(24)
        self._server = EmulatorHTTPServer(port, self.model, token, read_timeout_s)
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
    def url(self) -> str:
        """Its base address, for `StripeClient(base_addresses={"api": url})`."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StripeEmulator:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="stripe-emulator", daemon=True
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
