"""The loopback Stripe emulator: the payments model served over HTTP.

The real `stripe` SDK works against it unchanged; only the base address differs. It binds
127.0.0.1, requires `Authorization: Bearer` with a test key (`sk_test_`/`rk_test_`), and
answers every request with a `Request-Id`. Form bodies are decoded as Stripe does:
nested `metadata[k]=v` and arrays as both `a[0]=` and `a[]=`.

Control routes live under `/_emulator/`, a path Stripe does not use:

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

import json
import re
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from interlock_demo.keys import is_test_key
from interlock_demo.payments.model import Fault, PaymentsModel, Reply, StripeModelError

DEFAULT_PORT = 12111
CONTROL_PREFIX = "/_emulator/"
_KEY_PART = re.compile(r"\[([^\]]*)\]")


def decode_form(body: str) -> dict[str, Any]:
    """Decode a Stripe form body into nested dicts and lists.

    `metadata[case]=x` becomes `{"metadata": {"case": "x"}}`; `a[0]=x&a[1]=y` and
    `a[]=x&a[]=y` both become `{"a": ["x", "y"]}`.
    """
    root: dict[str, Any] = {}
    for raw_key, value in parse_qsl(body, keep_blank_values=True):
        head, _, rest = raw_key.partition("[")
        parts = [head, *_KEY_PART.findall("[" + rest)] if rest else [head]
        node: Any = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "":
                part = str(len(node))
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
    decoded: dict[str, Any] = _lists(root)
    return decoded


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

    def log_message(self, format: str, *args: Any) -> None:
        """Stay silent: a request line or header must never reach a log."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        try:
            if url.path.startswith(CONTROL_PREFIX):
                self._control(method, url.path[len(CONTROL_PREFIX) :], url.query, body)
                return
            if not self._authorized():
                return
            reply = self._api(method, url.path, url.query, body)
        except StripeModelError as e:
            reply = Reply(e.status, e.envelope())
        if reply.drop:
            self.close_connection = True
            return
        self._send(reply.status, reply.body, reply)

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
            return model.get_payment_intent(parts[2])
        if method == "GET" and parts == ["v1", "refunds"]:
            return model.list_refunds(dict(parse_qsl(query)))
        raise StripeModelError(404, f"Unrecognized request URL ({method}: {path}).")

    def _control(self, method: str, route: str, query: str, body: str) -> None:
        model = self.server.model
        try:
            data = json.loads(body) if body else {}
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
        except (KeyError, ValueError, TypeError) as e:
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

    def __init__(self, port: int, model: PaymentsModel) -> None:
        self.model = model
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


class StripeEmulator:
    """The emulator as an object: start it on a free port, use `.url`, stop it.

    >>> with StripeEmulator() as emu:
    ...     client = stripe.StripeClient("sk_test_x", base_addresses={"api": emu.url})
    """

    def __init__(self, port: int = 0, model: PaymentsModel | None = None) -> None:
        self.model = model if model is not None else PaymentsModel()
        self._server = EmulatorHTTPServer(port, self.model)
        self._thread: threading.Thread | None = None

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
