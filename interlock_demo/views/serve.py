"""`interlock-demo serve [--port]`: the same app in a browser tab, for projectors.

`textual-serve` runs `interlock-demo` (with the options given before `serve`) once per
browser tab and streams it over a WebSocket, so a projector that only shows a browser
still gets the real app: the same keys, the same worker processes. The app's environment
is the demo's own (`environment.demo_env`, with the keys), never textual-serve's copy of
ours, and it runs with the private umask.

The server binds 127.0.0.1 only. Like the JSON endpoint, it answers only requests
addressed to `127.0.0.1:<port>` or `localhost:<port>` (against DNS rebinding), and the
WebSocket that drives the app only from the server's own page (its Origin). Two more
checks keep out what those do not:

- Another web page open in the presenter's browser cannot frame it: every answer says
  `X-Frame-Options: DENY` and `Content-Security-Policy: frame-ancestors 'none'`, so a
  page on another origin that frames the mirror (invisibly, to have a click and Enter
  land in it) gets nothing drawn. Its address is never sent on either
  (`Referrer-Policy: no-referrer`).
- Another user of this machine cannot drive it, though anyone here can reach 127.0.0.1:
  a secret made anew each time `serve` starts (`secrets.token_urlsafe`) is in the
  address `serve` prints on its terminal (`http://127.0.0.1:<port>/?token=...`, as
  Jupyter does), and the page and the WebSocket are answered only with it; the page
  passes it on in its WebSocket's path (`/ws/<token>`). Without it, or with another,
  the answer is 403 saying where the address with the token is printed. The token is
  compared in constant time (`hmac.compare_digest`), is printed on the terminal and
  nowhere else (no log line carries a request's address), and only textual-serve's
  static files (its script, style and fonts, the same for everyone) are served
  without it. textual-serve's `/download/` route is refused too: the app never
  delivers files.

Each tab's app runs in a session (process group) of its own, and dies with its tab: when
the WebSocket closes the app is asked to quit, and after `QUIT_GRACE_S` it is SIGKILLed
with everything it started (`kill_tree`); when `serve` stops, every tab's app is killed the
same way and every tab's WebSocket is closed ("going away"), so `serve` exits at once
rather than when the tabs' idle connections fail their heartbeat. Left to textual-serve,
an app whose browser went away could outlive it, re-parented to init.

The page is textual-serve's own with nothing fetched from the internet (`serve_templates/`
says why). Its splash stays until the app's first frame: the app starts only when the
page opens its WebSocket, after the page's load event, so a screenshot taken at load (a
bare `chromium --headless --screenshot`) always shows the splash; wait for the page's
`body.-first-byte` instead. From that first frame the page's terminal has the keyboard, so
a presenter need not click the page before pressing a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import shlex
import signal
import sys
from asyncio.subprocess import Process
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp_jinja2
from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from interlock_demo.engine.supervisor import kill_tree
from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings.environment import demo_env
from interlock_demo.settings.private import PRIVATE_UMASK

HOST = "127.0.0.1"
TITLE = "Interlock demo"
TEMPLATES = Path(__file__).with_name("serve_templates")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# How long a tab's app has to quit by itself once its tab closed.
QUIT_GRACE_S = 3.0
# What a tab's WebSocket says when `serve` stops (its close frame's reason).
STOPPED_REASON = b"interlock-demo serve stopped"
# What textual-serve's environment builder sets for the app it starts (its web driver, its
# size, how it draws): the tab's app takes these from it and nothing else of ours. Its
# debug settings are left out: this server never turns debug on.
TEXTUAL_SERVE_SETTINGS = (
    "TEXTUAL_DRIVER",
    "TEXTUAL_FPS",
    "TEXTUAL_COLOR_SYSTEM",
    "TERM_PROGRAM",
    "TERM_PROGRAM_VERSION",
    "COLUMNS",
    "ROWS",
)

log = logging.getLogger(__name__)


class _Tab(AppService):
    """One tab's app: started in a session of its own, killed with its tree when stopped."""

    def __init__(self, tabs: set[_Tab], *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._tabs = tabs

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        # The demo itself, as in a terminal: its settings and the user's keys (the tab may
        # run live, or switch to it), on the allow-list rather than textual-serve's copy of
        # our whole environment; its files under INTERLOCK_HOME are the user's alone.
        environment = demo_env(keys=True)
        built = self._build_environment(width=width, height=height)
        environment.update({k: built[k] for k in TEXTUAL_SERVE_SETTINGS if k in built})
        self._process = process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            start_new_session=True,
            umask=PRIVATE_UMASK,
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        self._tabs.add(self)
        return process

    async def stop(self) -> None:
        """Ask the app to quit; whatever is left after `QUIT_GRACE_S` is SIGKILLed."""
        try:
            await asyncio.wait_for(super().stop(), QUIT_GRACE_S)
        except (asyncio.TimeoutError, OSError, ConnectionError):
            pass
        finally:
            self.kill()
        if self._process is not None:
            await self._process.wait()

    def kill(self) -> None:
        """SIGKILL the app and everything it started (its workers are in sessions of their
        own, so a process-group kill alone would miss them)."""
        self._tabs.discard(self)
        if self._process is not None and self._process.returncode is None:
            kill_tree(self._process.pid)


def app_command(argv: Sequence[str]) -> str:
    """The shell command each browser tab runs: this Python, the app, its options."""
    return shlex.join([sys.executable, "-m", "interlock_demo.cli", *argv])


# On every answer: no page of another origin may frame the mirror (the older header for
# browsers without CSP level 2), and its address, token and all, is never a Referer.
FRAMING_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}
# What anyone may fetch without the token: textual-serve's script, style and fonts.
OPEN_PREFIX = "/static/"


def allowed(port: int) -> tuple[frozenset[str], frozenset[str]]:
    """The Host headers and the Origins the server answers."""
    hosts = frozenset({f"{HOST}:{port}", f"localhost:{port}"})
    return hosts, frozenset(f"http://{h}" for h in hosts)


class LoopbackServer(Server):
    """textual-serve's server, refusing other hosts and other pages' WebSockets."""

    def __init__(self, argv: Sequence[str], port: int, *, token: str | None = None) -> None:
        """`token`: the secret the page and the WebSocket need; a new one when None."""
        super().__init__(
            app_command(argv), host=HOST, port=port, title=TITLE, templates_path=TEMPLATES
        )
        self.hosts, self.origins = allowed(port)
        self.tabs: set[_Tab] = set()
        self.sockets: set[web.WebSocketResponse] = set()
        self.token = token if token is not None else secrets.token_urlsafe(32)

    @property
    def url(self) -> str:
        """The page's address with its token: what the terminal shows, and nothing else."""
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def initialize_logging(self) -> None:
        """textual-serve's logging, without aiohttp's line per request: its address holds
        the token, which is shown on the terminal once, by `on_startup`, and never again."""
        super().initialize_logging()
        logging.getLogger("aiohttp.access").disabled = True

    async def on_startup(self, app: web.Application) -> None:
        """Say where the app is, token and all: the one place the token is ever shown."""
        print(
            f"interlock-demo serve: open {self.url} in the browser (this address, with its "
            "token, is shown here only and is new each time serve starts; without it the "
            "page answers 403). Ctrl-C stops it.",
            flush=True,
        )

    def serve(self, debug: bool = False) -> None:
        """textual-serve's server, which stops on SIGINT and SIGTERM, stopping on SIGHUP too:
        closing the terminal it runs in must not leave the tabs' apps and their workers
        running (they are in sessions of their own)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # the loop textual-serve's serve() takes as its own
        with contextlib.suppress(NotImplementedError, AttributeError):  # no SIGHUP: Windows
            loop.add_signal_handler(signal.SIGHUP, self.request_exit)
        super().serve(debug)

    async def on_shutdown(self, app: web.Application) -> None:
        """`serve` is stopping: no tab's app outlives it, and each tab's WebSocket is closed.

        A tab's handler waits on its browser's messages, not on its app: left open, aiohttp's
        shutdown waited for each idle tab until its heartbeat failed (about 22 s).
        """
        self.kill_tabs()
        await asyncio.gather(
            *(
                ws.close(code=WSCloseCode.GOING_AWAY, message=STOPPED_REASON)
                for ws in list(self.sockets)
            ),
            return_exceptions=True,
        )

    def kill_tabs(self) -> None:
        """SIGKILL every tab's app and what it started."""
        for tab in list(self.tabs):
            tab.kill()

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's WebSocket handler, with each tab's app a `_Tab`."""
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        tab: _Tab | None = None
        try:
            await websocket.prepare(request)
            self.sockets.add(websocket)
            tab = _Tab(
                self.tabs,
                self.command,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            await tab.start(width, height)
            await self._process_messages(websocket, tab)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception:
            log.exception("a browser tab's app failed")
        finally:
            self.sockets.discard(websocket)
            if tab is not None:
                await tab.stop()
        return websocket

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """textual-serve's page, its WebSocket's address carrying the token (`/ws/<token>`:
        textual.js adds its own query to that address, so the token goes in the path)."""
        font_size = to_int(request.query.get("fontsize", "16"), 16)
        static = request.app.router["static"].url_for(filename="/")
        return {
            "font_size": font_size,
            "app_websocket_url": f"ws://{HOST}:{self.port}/ws/{self.token}",
            "config": {"static": {"url": f"http://{HOST}:{self.port}{static}".rstrip("/") + "/"}},
            "application": {"name": self.title},
        }

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.router.add_get("/ws/{token}", self.handle_websocket)
        app.middlewares.append(self._guard)
        app.on_response_prepare.append(self._no_framing)
        return app

    async def _no_framing(self, request: web.Request, response: web.StreamResponse) -> None:
        # Every answer, refusals and the WebSocket's upgrade included.
        response.headers.update(FRAMING_HEADERS)

    def has_token(self, request: web.Request) -> bool:
        """Whether `request` carries this launch's token: `?token=`, or in the path on the
        WebSocket (`/ws/<token>`, as the page sends it); compared in constant time."""
        given = request.query.get("token", "")
        if request.path.startswith("/ws/"):
            given = request.path.removeprefix("/ws/")
        return hmac.compare_digest(given.encode(), self.token.encode())

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.hosts:
            raise web.HTTPForbidden(
                text=f"open http://{HOST}:{self.port}/ (this server answers only loopback)"
            )
        websocket = request.path == "/ws" or request.path.startswith("/ws/")
        origin = request.headers.get("Origin")
        if websocket and origin is not None and origin not in self.origins:
            raise web.HTTPForbidden(text="the app can only be driven from its own page")
        if not request.path.startswith(OPEN_PREFIX) and not self.has_token(request):
            what = "the app is driven" if websocket else "this page is shown"
            raise web.HTTPForbidden(
                text=f"{what} only with this launch's token: open the address "
                f"http://{HOST}:{self.port}/?token=... that `interlock-demo serve` printed on "
                "the terminal it was started in (a new token each time it starts)"
            )
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
    finally:
        server.kill_tabs()
    print("interlock-demo serve stopped: no tab's app or worker is left running", file=sys.stderr)
    return ExitCode.OK
