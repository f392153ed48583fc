"""The loopback Stripe emulator: the payments model served over HTTP.

The real `stripe` SDK works against it unchanged; only the base address differs. It binds
127.0.0.1, requires `Authorization: Bearer` with a test key (`sk_test_`/`rk_test_`), and
answers every request with a `Request-Id`. Form bodies are decoded as Stripe does:
nested `metadata[k]=v` and arrays as both `a[0]=` and `a[]=`.

Control routes live under `/_emulator/`, a path Stripe does not use:

- `POST /_emulator/clock/advance` `{"seconds": N}`: move the model's clock forward.
- `POST /_emulator/faults` `{"kind": "hold"|"error_500"|"drop", "hold_ms", "commit",
  "count"}`: arm a fault for the next refund requests; answers the fault with its id.
- `GET /_emulator/faults/{id}?wait=S`: the fault, waiting up to S seconds for its
  refund to be committed.
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
from interlock_demo.payments.model import PaymentsModel, Reply, StripeModelError

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
                commit = data.get("commit", True)
                if not isinstance(commit, bool):
                    raise TypeError(f"commit must be true or false, not {commit!r}")
                fault = model.add_fault(
                    str(data["kind"]),
                    hold_ms=int(data.get("hold_ms", 0)),
                    commit=commit,
                    count=int(data.get("count", 1)),
                    payment_intent=data.get("payment_intent"),
                )
                self._send(200, fault.describe())
            elif method == "DELETE" and parts == ["faults"]:
                model.clear_faults()
                self._send(200, {"cleared": True})
            elif method == "GET" and len(parts) == 2 and parts[0] == "faults":
                found = model.fault(parts[1])
                if found is None:
                    self._send(404, {"error": f"no fault {parts[1]}"})
                    return
                wait = float(dict(parse_qsl(query)).get("wait", "0"))
                found.committed.wait(min(max(wait, 0.0), 60.0))
                self._send(200, found.describe())
            elif method == "POST" and len(parts) == 3 and parts[::2] == ["refunds", "status"]:
                self._send(200, model.set_refund_status(parts[1], str(data["status"])))
            else:
                self._send(404, {"error": f"no control route {method} {CONTROL_PREFIX}{route}"})
        except (KeyError, ValueError, TypeError) as e:
            self._send(400, {"error": f"bad control request: {type(e).__name__}: {e}"})

    def _send(self, status: int, body: dict[str, Any], reply: Reply | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Request-Id", "req_" + secrets.token_hex(7))
        if reply is not None and reply.idempotency_key is not None:
            self.send_header("Idempotency-Key", reply.idempotency_key)
            if reply.replayed:
                self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(data)


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the model its handlers serve."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, model: PaymentsModel) -> None:
        self.model = model
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
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> StripeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
