"""Test helper: a second kind of effect for the certification harness, not a refund.

A webhook delivery to a loopback fake: `POST /deliveries` with an `Idempotency-Key`
header (the fake saves and replays the first answer under a key, as Stripe does) and a
lookup endpoint, `GET /deliveries?order=ID`. A person may post a delivery by hand
(`POST /deliveries` with no action), which changes what the agent decided on.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib import error, request
from urllib.parse import parse_qs, urlsplit

from interlock import (
    CustomEffect,
    Found,
    Intent,
    Observation,
    PaymentsRejectedError,
    PaymentsUnsettledError,
)


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        order = parse_qs(url.query).get("order", [""])[0]
        self._answer(200, {"data": self.server.deliveries(order)})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        status, answer = self.server.deliver(body, self.headers.get("Idempotency-Key"))
        self._answer(status, answer)


class WebhookServer(ThreadingHTTPServer):
    """The loopback fake: deliveries by order, and an idempotency layer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._lock = threading.Lock()
        self._deliveries: list[dict[str, Any]] = []
        self._keys: dict[str, tuple[int, dict[str, Any]]] = {}
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Its base address."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def deliveries(self, order: str) -> list[dict[str, Any]]:
        """The order's deliveries."""
        with self._lock:
            return [d for d in self._deliveries if d["order"] == order]

    def deliver(self, body: dict[str, Any], key: str | None) -> tuple[int, dict[str, Any]]:
        """One delivery, replayed under its idempotency key."""
        with self._lock:
            if key is not None and key in self._keys:
                return self._keys[key]
            if not isinstance(body.get("units"), int) or body["units"] <= 0:
                answer: tuple[int, dict[str, Any]] = (400, {"error": "units must be positive"})
            else:
                delivery = {
                    "id": "dlv_" + uuid.uuid4().hex[:12],
                    "order": str(body.get("order")),
                    "action": body.get("action"),
                    "units": body["units"],
                }
                self._deliveries.append(delivery)
                answer = (200, delivery)
            if key is not None:
                self._keys[key] = answer
            return answer

    def stop(self) -> None:
        """Stop serving."""
        self.shutdown()
        self._thread.join()
        self.server_close()


def fingerprint(deliveries: list[dict[str, Any]]) -> str:
    """A fingerprint of an order's deliveries (their ids, in order)."""
    ids = sorted(d["id"] for d in deliveries)
    return "sha256:" + hashlib.sha256(json.dumps(ids).encode()).hexdigest()


class WebhookDelivery:
    """A webhook delivery as an `interlock.Effect`: one GET serves the lookup and the state."""

    kind = "webhook"

    def __init__(self, base_url: str, *, lookup: bool = True) -> None:
        self.base_url = base_url
        # False makes a deliberately broken effect that never finds its own earlier send.
        self.lookup = lookup

    def _call(self, req: request.Request) -> Any:
        try:
            with request.urlopen(req, timeout=2) as answer:
                return json.loads(answer.read())
        except error.HTTPError as e:
            if e.code >= 500 or e.code in (409, 429):
                raise PaymentsUnsettledError("webhook", str(e), e.code) from e
            raise PaymentsRejectedError("webhook", f"http_{e.code}", str(e), e.code) from e
        except (error.URLError, OSError, ValueError) as e:
            raise PaymentsUnsettledError("webhook", str(e)) from e

    def observe(self, intent: Intent) -> Observation:
        """The order's deliveries: our own (by action), and a fingerprint of them all."""
        deliveries = self.deliveries(intent.target)
        own = next((d for d in deliveries if d["action"] == intent.action_id), None)
        return Observation(
            fingerprint=fingerprint(deliveries),
            own=Found(own["id"], own["units"]) if own is not None and self.lookup else None,
            seen=deliveries,
        )

    def deliveries(self, order: str) -> list[dict[str, Any]]:
        """An order's deliveries, read once."""
        data = self._call(request.Request(f"{self.base_url}/deliveries?order={order}"))
        return list(data["data"])

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """Deliver, naming the action, under the idempotency key."""
        body = json.dumps(
            {"order": intent.target, "action": intent.action_id, "units": intent.amount}
        ).encode()
        req = request.Request(
            f"{self.base_url}/deliveries",
            data=body,
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
            method="POST",
        )
        d = self._call(req)
        return Found(d["id"], d["units"])


def webhook_effect(delivery: WebhookDelivery) -> CustomEffect:
    """The same delivery as an `interlock.CustomEffect`: its send, its lookup, its state."""

    def lookup(intent: Intent) -> list[Found]:
        return [
            Found(d["id"], d["units"], target=d["order"])
            for d in delivery.deliveries(intent.target)
            if d["action"] == intent.action_id
        ]

    return CustomEffect(
        kind="webhook",
        send=delivery.send,
        lookup=lookup,
        state=lambda intent: fingerprint(delivery.deliveries(intent.target)),
        # urlopen's 2 s applies per socket operation; the loopback server answers in one.
        deadline_s=2,
    )
