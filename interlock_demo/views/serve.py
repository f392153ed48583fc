"""`interlock-demo serve [--port]`: the same app in a browser tab, for projectors.

`textual-serve` runs `interlock-demo` (with the options given before `serve`) once per
browser tab and streams it over a WebSocket, so a projector that only shows a browser
still gets the real app: the same keys, the same worker processes.

The server binds 127.0.0.1 only. Like the JSON endpoint, it answers only requests
addressed to `127.0.0.1:<port>` or `localhost:<port>` (against DNS rebinding), and the
WebSocket that drives the app only from the server's own page (its Origin), so another
web page open in the presenter's browser cannot start runs.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from textual_serve.server import Server

from interlock_demo.exit_codes import ExitCode

HOST = "127.0.0.1"
TITLE = "Interlock demo"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def app_command(argv: Sequence[str]) -> str:
    """The shell command each browser tab runs: this Python, the app, its options."""
    return shlex.join([sys.executable, "-m", "interlock_demo.cli", *argv])


def allowed(port: int) -> tuple[frozenset[str], frozenset[str]]:
    """The Host headers and the Origins the server answers."""
    hosts = frozenset({f"{HOST}:{port}", f"localhost:{port}"})
    return hosts, frozenset(f"http://{h}" for h in hosts)


class LoopbackServer(Server):
    """textual-serve's server, refusing other hosts and other pages' WebSockets."""

    def __init__(self, argv: Sequence[str], port: int) -> None:
        super().__init__(app_command(argv), host=HOST, port=port, title=TITLE)
        self.hosts, self.origins = allowed(port)

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.hosts:
            raise web.HTTPForbidden(
                text=f"open http://{HOST}:{self.port}/ (this server answers only loopback)"
            )
        origin = request.headers.get("Origin")
        if request.path == "/ws" and origin is not None and origin not in self.origins:
            raise web.HTTPForbidden(text="the app can only be driven from its own page")
        return await handler(request)


def serve(port: int, *, argv: Sequence[str] = ()) -> int:
    """Serve the app on 127.0.0.1:`port` until Ctrl-C; 2 when the port is taken."""
    server = LoopbackServer(argv, port)
    try:
        server.serve()
    except OSError as e:
        print(
            f"interlock-demo serve: cannot listen on {HOST}:{port}: {e.strerror or e}; "
            "choose another with --port",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    return ExitCode.OK
