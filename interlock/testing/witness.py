"""A loopback HTTP witness for tests: keeps the tree heads it is sent, as `HttpWitness` expects.

POST `/heads` with `{"head": {"body", "signature"}, "leaves": [...]}` keeps a head (200,
`{"anchored": true}`; the same head again: `{"anchored": false}`); a head that contradicts
one held, or is smaller than the largest, is answered 409 with `{"error": words}`. GET
`/heads` answers `{"heads": [record, ...]}`. The records live in memory and, given a
`path`, in a `FileAnchor` file too, so a witness restarted on the same file keeps them.
A test double, never a production witness: it serves plain http on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from interlock._core.anchors import (
    AnchoredHead,
    AnchorError,
    FileAnchor,
    admit,
    parse_record,
    record,
)
from interlock._core.heads import LogLeaf, TreeHead
from interlock.testing.loopback import LoopbackServer

# A body larger than this is refused: a test witness holds heads, not uploads.
MAX_BODY = 1 << 20


class WitnessServer:
    """A witness on 127.0.0.1 (a free port), served from a thread while in `with`.

    `url` is what `HttpWitness` takes; `records` is what it holds. Given `tls` (a server
    context with its certificate loaded) it serves https, for testing the client's checks.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, tls: ssl.SSLContext | None = None
    ) -> None:
        self._file = FileAnchor(path) if path is not None else None
        self._lock = threading.Lock()
        self._held: list[AnchoredHead] = self._file.heads() if self._file else []
        self._serving = LoopbackServer(_handler(self), "witness", tls=tls)
        self.url = self._serving.url

    @property
    def records(self) -> list[dict[str, Any]]:
        """The heads held, as the records GET `/heads` answers."""
        with self._lock:
            return [record(h.head, h.leaves, h.anchored_at, h.evidence) for h in self._held]

    def keep(self, head: TreeHead, leaves: list[LogLeaf]) -> bool:
        """Keep a head as a POST does: whether it was new; `AnchorError` if refused."""
        with self._lock:
            if not admit(self._held, head, "the witness"):
                return False
            anchored_at = time.time()
            if self._file is not None:
                self._file._append(head, leaves, anchored_at, None)
            self._held.append(AnchoredHead(head, tuple(leaves), anchored_at, None, self.url))
            return True

    def __enter__(self) -> WitnessServer:
        self._serving.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._serving.stop()


def _handler(witness: WitnessServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/heads":
                self._answer(HTTPStatus.NOT_FOUND, {"error": "only /heads is served here"})
                return
            self._answer(HTTPStatus.OK, {"heads": witness.records})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/heads":
                self._answer(HTTPStatus.NOT_FOUND, {"error": "only /heads is served here"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._answer(HTTPStatus.BAD_REQUEST, {"error": "send one head as JSON"})
                return
            try:
                sent = json.loads(self.rfile.read(length))
                # The witness stamps its own time; what it was sent is head and leaves.
                held = parse_record(
                    {**sent, "v": 1, "anchored_at": 0.0, "evidence": None}, witness.url
                )
            except (ValueError, TypeError) as e:
                self._answer(HTTPStatus.BAD_REQUEST, {"error": f"not a head and its leaves: {e}"})
                return
            try:
                new = witness.keep(held.head, list(held.leaves))
            except AnchorError as e:
                self._answer(HTTPStatus.CONFLICT, {"error": str(e)})
                return
            self._answer(HTTPStatus.OK, {"anchored": new})

        def _answer(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            # Quiet: a test's output is its own.
            pass

    return Handler
