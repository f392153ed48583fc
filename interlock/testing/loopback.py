"""A loopback HTTP server for the test servers (the witness, the timestamp authority):
127.0.0.1, a free port, served from a daemon thread while it runs."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """`handler`'s server on 127.0.0.1 at a free port (`url`), https when given `tls` (a
    server context with its certificate loaded); `start()` serves it from a daemon thread,
    `stop()` shuts it down and waits for that thread."""

    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        *,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        # Shutdown is polled every 50 ms: a test stopping a server does not wait half a second.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=name, daemon=True
        )
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        """Serve, from a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Shut down, close the socket and wait for the serving thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
