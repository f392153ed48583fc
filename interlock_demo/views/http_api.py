"""The optional loopback HTTP endpoint (`--http [PORT]`): the run as JSON (docs/design.md §6).

    GET  /api/run         the current or last run, the bare run@2 document (404 before any)
    GET  /api/runs/{id}   that run (404 when this process has no such run)
    POST /api/runs        {"scenario": ..., "mode": "mock"|"offline"|"live", "checked": bool}
                          starts a run: 202 {"run_id", "url"}, the run registered before
                          the answer; what the body leaves out is the view's choice for
                          its next run (the app's mode, engine, switches and `c`), so
                          leaving "checked" out never switches the column off

The read-only GETs have no auth: they are open to anyone on this machine, as the demo's
design says (a run document carries no key). What keeps another web page in the
presenter's browser out: the server binds 127.0.0.1 only; every request must be
addressed to `127.0.0.1:<port>` or `localhost:<port>` in its Host header (else 403,
against DNS rebinding). Starting a run (POST /api/runs) takes more, since any local
process, another user's too, can reach 127.0.0.1: this launch's token (`token`, made
anew by `secrets.token_urlsafe` each time the endpoint starts, compared in constant
time), sent as `Authorization: token <token>` or `?token=<token>`, else 403 saying where
it is shown (the app's first message shows the address with it; nothing else does, and
no answer or log line carries it). Then a POST must say `Content-Type: application/json`
(else 415: a browser sends a CORS preflight first, and no CORS header is ever granted)
and, when it carries an Origin, come from the endpoint's own origin (else 403). These
checks come in that order, then the body (400), then one run at a time (409). Every
answer is JSON with `Cache-Control: no-store`; none contains
a key (run documents and settings carry labels, never keys; errors name what is missing).
The exception: a request aiohttp's parser refuses before any of this runs (malformed, or
HTTP/1.1 without a Host header, which RFC 9112 answers with 400) gets aiohttp's plain 400,
and nothing is logged about it: its Host was never checked, so any web page could send it.

Against clients that hold connections (another page in the browser, a stuck script):
at most `max_connections` are open at once, one request each (no keep-alive), and fewer
when the process's file limit leaves less room (`FD_HEADROOM` descriptors are always kept
free). A connection counts as waiting until its whole request is in, headers and body:
it has `header_timeout_s` (10 s) from connecting for both, and each POST at most
`body_timeout_s` (10 s) for its body, else 408 and closed. When the table is full the
connection that has waited longest gives way to the newcomer, so clients that never
finish their headers or their bodies cannot lock others out; a 503 only when every
connection is being answered. A declared Content-Length over `MAX_BODY` is a 413 at once,
before any of the body is read. A body that cannot be handled (not JSON, nested too
deeply, wrong types) is a 400 that says why. Any other failure is a 500 with an error id;
the traceback, with keys withheld and without the body, goes to `logs/http-api.log` under
INTERLOCK_HOME, under that id: at most `LOG_ENTRIES_PER_MINUTE` entries a minute (the
rest counted, not written), the file moved to `http-api.log.1` past `MAX_LOG_BYTES`.

The server is aiohttp on its own asyncio loop in a background thread, so the Textual app
and the headless path are not tied to its loop. It imports no Textual.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import hmac
import json
import logging
import os
import re
import resource
import secrets
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from interlock_demo.core.columns import optional_flags, optional_from
from interlock_demo.core.run import Run
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.errors import BusyError, PortInUseError, UsageError
from interlock_demo.settings.modes import MODES
from interlock_demo.settings.private import open_private
from scenarios import SCENARIOS

HOST = "127.0.0.1"
DEFAULT_PORT = 8787
# A run request is a few dozen bytes; anything near this is not one.
MAX_BODY = 64 * 1024
# How long stop() lets a request that is being answered finish.
SHUTDOWN_TIMEOUT_S = 5.0
# Far more than a presenter's tools need at once; far fewer than the file limit.
MAX_CONNECTIONS = 64
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0
# How long aiohttp keeps reading a body nobody will use, after an early answer.
LINGER_S = 1.0
ERROR_LOG = "http-api.log"
MAX_LOG_BYTES = 1024 * 1024
LOG_ENTRIES_PER_MINUTE = 20
# One entry's most: a traceback is a few kilobytes.
MAX_ENTRY_CHARS = 16 * 1024
# Descriptors always left free for the app, its engine and its workers' pipes.
FD_HEADROOM = 64
# A body this short ("{}") says nothing private, and replacing it would garble the text.
_SHORTEST_WITHHELD_BODY = 8
# The body of the request this task answers (one task per connection, one request each).
_body: contextvars.ContextVar[str] = contextvars.ContextVar("body", default="")
# Keys look like this (Stripe's and Anthropic's); none is ever written to the error log.
_KEY_LIKE = re.compile(r"(?:sk|rk|pk)_(?:test|live)_[A-Za-z0-9_]+|sk-ant-[A-Za-z0-9_-]+")
BODY_HELP = (
    'send {"scenario": '
    + "|".join(f'"{s}"' for s in SCENARIOS)
    + ', "mode": '
    + "|".join(f'"{m}"' for m in MODES)
    + ', "checked": true|false} ("mode" and "checked" may be left out)'
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Refused(Exception):
    """A request the endpoint answers with an error: the status and what to do instead."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": message, **extra}


class _ClientGone(ConnectionResetError):
    """The client closed its connection before its body was in (it left, or its connection
    gave way to a newer one): nobody is there to answer and nothing failed, so nothing is
    logged. aiohttp drops a handler's ConnectionError as a client's early disconnection."""


def _answer(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(
        body, status=status, headers={"Cache-Control": "no-store", **(headers or {})}
    )


def _raw_answer(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP answer, for a connection the application never saw."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def connection_cap(wanted: int, headroom: int = FD_HEADROOM) -> int:
    """How many connections to hold: `wanted`, or fewer when the file limit leaves less room.

    Counts the descriptors this process holds now, so that connections never take the
    last ones the app and its workers need ("Too many open files").
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = headroom
    return max(1, min(wanted, soft - in_use - headroom))


class _Connections:
    """The endpoint's open connections: at most `limit`, each with one deadline for its request.

    A connection waits (in arrival order) from the moment it opens until its whole request,
    headers and body, is in (`started`). When the table is full, the
    connection that has waited longest gives way to the newcomer; when none waits (every
    one is being answered), the newcomer gets a 503. Runs on the server's loop only.
    """

    def __init__(self, limit: int, header_timeout_s: float) -> None:
        self.limit = limit
        self.header_timeout_s = header_timeout_s
        self.open: set[asyncio.Transport] = set()
        self.waiting: dict[asyncio.Transport, asyncio.TimerHandle] = {}

    def factory(self, make_handler: Callable[[], asyncio.Protocol]) -> Callable[[], _Slot]:
        """The protocol factory for the listening socket, around aiohttp's."""
        return lambda: _Slot(self, make_handler)

    def admit(self, transport: asyncio.Transport) -> bool:
        """Take a new connection in, making room if need be; False when it was refused."""
        if len(self.open) >= self.limit:
            if not self.waiting:
                transport.write(
                    _raw_answer(
                        503,
                        "Service Unavailable",
                        f"{self.limit} requests are being answered; try again in a moment",
                    )
                )
                transport.close()
                return False
            oldest = next(iter(self.waiting))
            self.release(oldest)
            oldest.abort()
        self.open.add(transport)
        loop = asyncio.get_running_loop()
        self.waiting[transport] = loop.call_later(self.header_timeout_s, self._late, transport)
        return True

    def started(self, transport: asyncio.Transport | None) -> None:
        """The whole request is in: its connection no longer waits."""
        handle = self.waiting.pop(transport, None) if transport is not None else None
        if handle is not None:
            handle.cancel()

    def release(self, transport: asyncio.Transport) -> None:
        """The connection is gone (or going): its slot is free."""
        self.open.discard(transport)
        self.started(transport)

    def _late(self, transport: asyncio.Transport) -> None:
        self.waiting.pop(transport, None)
        if transport.is_closing():
            return
        transport.write(
            _raw_answer(
                408,
                "Request Timeout",
                f"the request's headers and body did not arrive within {self.header_timeout_s:g} s",
            )
        )
        transport.close()


class _Slot(asyncio.Protocol):
    """One connection: admitted by the table, then served by aiohttp's own handler."""

    def __init__(self, table: _Connections, make_handler: Callable[[], asyncio.Protocol]) -> None:
        self.table = table
        self.make_handler = make_handler
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.table.admit(transport):
            self.inner = self.make_handler()
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.table.release(self.transport)
        if self.inner is not None:
            self.inner.connection_lost(exc)


class _Site(web.BaseSite):
    """Listens on 127.0.0.1 with the connection table in front of aiohttp's handler."""

    def __init__(self, runner: web.BaseRunner, port: int, table: _Connections) -> None:
        super().__init__(runner, backlog=table.limit)
        self._port = port
        self._table = table

    @property
    def name(self) -> str:
        return f"http://{HOST}:{self._port}"

    async def start(self) -> None:
        await super().start()
        handler = self._runner.server
        assert handler is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._table.factory(handler), HOST, self._port, backlog=self._backlog
        )


class RunApi:
    """Serves the engine's runs on loopback; `start()` it, read `url`, `stop()` it.

    `choice` gives the view's choice for its next run, now: a POST changes in it what its
    body names (scenario, mode, checked) and keeps the rest. `start_run` starts that
    choice (default `engine.start`); the Textual app passes its own, which makes the
    choice the app's and shows the run like one started by keys. It is called on the
    endpoint's thread and must return once the run is registered. The connection limit
    and the two read timeouts are arguments so that tests can shorten them.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        choice: Callable[[], RunChoice],
        port: int = DEFAULT_PORT,
        start_run: Callable[[RunChoice], Run] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        token: str | None = None,
    ) -> None:
        self.engine = engine
        # What a POST must carry to start a run; a new one for each endpoint unless given.
        # 128 bits: its address (shown on the app's message line) stays one line at 80 columns.
        self.token = token if token is not None else secrets.token_urlsafe(16)
        self._start_run = start_run if start_run is not None else engine.start
        self._choice = choice
        self._max_connections = max_connections
        self._header_timeout_s = header_timeout_s
        self._body_timeout_s = body_timeout_s
        self._log_lock = threading.Lock()
        self._clock: Callable[[], float] = time.monotonic
        self._logged: list[float] = []
        self._withheld = 0
        # aiohttp's own reports are about requests whose Host was never checked (any page
        # can send them): dropped, never on the terminal (the app's screen) or in the log.
        self._server_log = logging.Logger(f"{__name__}.server", logging.WARNING)
        self._server_log.addHandler(logging.NullHandler())
        self._table: _Connections | None = None
        self._requested_port = port
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port it listens on (the requested one before `start()`)."""
        return self._port if self._port is not None else self._requested_port

    @property
    def url(self) -> str:
        """Its base address, e.g. `http://127.0.0.1:8787`."""
        return f"http://{HOST}:{self.port}"

    @property
    def control_url(self) -> str:
        """Where a run is started, token and all: for the person at the keys only."""
        return f"{self.url}/api/runs?token={self.token}"

    @property
    def error_log(self) -> Path:
        """Where unexpected errors are recorded, each under the id its 500 answer gave."""
        return self.engine.paths.logs / ERROR_LOG

    def start(self) -> RunApi:
        """Listen on 127.0.0.1 in a background thread; return once listening.

        Raises `PortInUseError` when the port is taken.
        """
        if self._thread is not None:
            raise RuntimeError("the HTTP endpoint is already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve()), name="http-api", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self) -> None:
        """Stop listening, let requests being answered finish, and join the thread."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        thread.join()
        self._thread = None
        self._loop = None
        self._stopping = None

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        table = _Connections(connection_cap(self._max_connections), self._header_timeout_s)
        self._table = table
        runner = web.AppRunner(
            self._app(table),
            access_log=None,
            logger=self._server_log,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            lingering_time=LINGER_S,
        )
        try:
            await runner.setup()
            site = _Site(runner, self._requested_port, table)
            try:
                await site.start()
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                raise PortInUseError(HOST, self._requested_port) from None
        except Exception as e:  # start() raises it in the caller's thread
            self._error = e
            await runner.cleanup()
            self._ready.set()
            return
        self._port = int(runner.addresses[0][1])
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    # -- the application -----------------------------------------------------------------

    def _app(self, table: _Connections) -> web.Application:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not request.body_exists:  # else the body's reader says when it is in
                table.started(request.transport)
            response = await answer(request, handler)
            response.force_close()  # one request per connection: its deadline is simple
            return response

        async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                self._check_host(request)
                length = request.content_length
                if length is not None and length > MAX_BODY:
                    raise _Refused(
                        413,
                        f"the body is too large ({length} bytes declared, at most {MAX_BODY}); "
                        f"{BODY_HELP}",
                    )
                return await handler(request)
            except _Refused as e:
                return _answer(e.status, e.body)
            except _ClientGone:
                raise
            except web.HTTPException as e:  # aiohttp's own: no route, wrong method, too big
                allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
                return _answer(e.status, {"error": self._http_error(e, request)}, allow)
            except Exception as e:
                error_id = secrets.token_hex(6)
                self._record_error(error_id, request, e)
                return _answer(
                    500,
                    {
                        "error": f"the endpoint failed unexpectedly (error {error_id}); the "
                        f"details are in {self.error_log} under that id",
                        "error_id": error_id,
                    },
                )

        app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
        app.router.add_get("/api/run", self._get_current)
        app.router.add_get("/api/runs/{run_id}", self._get_run)
        app.router.add_post("/api/runs", self._post_run)
        return app

    def _origins(self) -> tuple[str, ...]:
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    def _check_host(self, request: web.Request) -> None:
        hosts = request.headers.getall("Host", [])
        allowed = (f"127.0.0.1:{self.port}", f"localhost:{self.port}")
        if len(hosts) == 1 and hosts[0].lower() in allowed:
            return
        if len(hosts) == 1:
            got = f"Host {hosts[0][:100]!r}"
        else:
            got = f"{len(hosts)} Host headers" if hosts else "no Host header"
        raise _Refused(
            403,
            f"this endpoint answers only requests addressed to {' or '.join(allowed)} "
            f"(got {got}); other names are refused against DNS rebinding",
        )

    def _http_error(self, e: web.HTTPException, request: web.Request) -> str:
        if e.status == 404:
            return (
                f"no such endpoint: {request.path[:100]}; the endpoints are GET /api/run, "
                "GET /api/runs/{id} and POST /api/runs"
            )
        if e.status == 405:
            allowed = e.headers.get("Allow", "")
            return f"{request.method} is not allowed on {request.path}; allowed: {allowed}"
        if e.status == 413:
            return f"the body is too large (at most {MAX_BODY} bytes); {BODY_HELP}"
        return e.reason

    # -- handlers ------------------------------------------------------------------------

    async def _get_current(self, request: web.Request) -> web.Response:
        run = self.engine.current
        if run is None:
            raise _Refused(404, "no run yet; start one in the app or with POST /api/runs")
        return _answer(200, run.to_json())

    async def _get_run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        run = self.engine.runs.get(run_id)
        if run is None:
            raise _Refused(
                404,
                f"no run {run_id[:100]!r} in this process; runs live in memory until it "
                "exits (GET /api/run shows the current or last one)",
            )
        return _answer(200, run.to_json())

    def _check_token(self, request: web.Request) -> None:
        given = request.query.get("token", "")
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "token":
            given = value.strip()
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return
        said = "a token that is not this launch's" if given else "no token"
        raise _Refused(
            403,
            f"POST /api/runs starts a run only with this endpoint's token (got {said}); "
            "the app shows the address with the token in its first message when it starts "
            "with --http (POST http://127.0.0.1:<port>/api/runs?token=...), and nothing else "
            "shows it; send it as ?token=... or as the header Authorization: token ...",
        )

    async def _post_run(self, request: web.Request) -> web.Response:
        self._check_token(request)
        if request.content_type != "application/json":
            raise _Refused(
                415,
                "POST /api/runs takes only Content-Type: application/json (got "
                f"{request.headers.get('Content-Type', 'none')[:100]!r}); {BODY_HELP}",
            )
        origin = request.headers.get("Origin")
        if origin is not None and origin not in self._origins():
            raise _Refused(
                403,
                f"POST /api/runs is taken only from this endpoint's own origin "
                f"({' or '.join(self._origins())}); got Origin {origin[:100]!r}",
            )
        text = await self._body_text(request)
        try:
            run = self._start_run(self._parse(text, self._choice()))
        except UsageError as e:  # e.g. live without keys; the message names no key
            raise _Refused(400, str(e)) from None
        except BusyError as e:
            current = self.engine.current
            raise _Refused(
                409, str(e), run_id=None if current is None else current.run_id
            ) from None
        url = f"/api/runs/{run.run_id}"
        return _answer(202, {"run_id": run.run_id, "url": url}, {"Location": url})

    async def _body_text(self, request: web.Request) -> str:
        try:
            raw = await asyncio.wait_for(request.read(), self._body_timeout_s)
        except ConnectionResetError:
            raise _ClientGone from None
        except asyncio.TimeoutError:
            raise _Refused(
                408,
                f"the body did not arrive within {self._body_timeout_s:g} s (Content-Length "
                f"{request.content_length}); send the whole body with the request",
            ) from None
        if self._table is not None:
            self._table.started(request.transport)
        try:
            text = raw.decode(request.charset or "utf-8")
        except (UnicodeDecodeError, LookupError):
            raise _Refused(
                400,
                f"the body is not {request.charset or 'UTF-8'} text (the charset it was sent "
                f"in, UTF-8 unless Content-Type says otherwise); {BODY_HELP}",
            ) from None
        _body.set(text)  # withheld from the error log
        return text

    def _parse(self, text: str, base: RunChoice) -> RunChoice:
        try:
            body = json.loads(text)
        except RecursionError:
            raise _Refused(
                400, f"the body is nested too deeply to be a run request; {BODY_HELP}"
            ) from None
        except ValueError as e:
            raise _Refused(400, f"the body is not JSON ({e}); {BODY_HELP}") from None
        # Outside the try: a mode the choice cannot take is a UsageError, also a ValueError.
        return self._run_choice(body, base)

    def _run_choice(self, body: Any, base: RunChoice) -> RunChoice:
        """`base` changed as a parsed body asks; `_Refused` (400) naming what is wrong with
        the body, `UsageError` when its mode cannot run here."""
        if not isinstance(body, dict):
            raise _Refused(400, f"the body must be a JSON object; {BODY_HELP}")
        # Each optional column is a field of its own, named after it (`"checked": true`).
        flags = optional_flags(base.optional)
        unknown = sorted(set(body) - {"scenario", "mode", *flags})
        if unknown:
            raise _Refused(400, f"unknown field(s) {', '.join(unknown)}; {BODY_HELP}")
        scenario = body.get("scenario")
        if not isinstance(scenario, str) or scenario not in SCENARIOS:
            raise _Refused(
                400,
                f"scenario must be one of {', '.join(SCENARIOS)} (got {_shown(scenario)}); "
                f"{BODY_HELP}",
            )
        mode = body.get("mode")
        if "mode" in body and (not isinstance(mode, str) or mode not in MODES):
            raise _Refused(
                400, f"mode must be one of {', '.join(MODES)} (got {_shown(mode)}); {BODY_HELP}"
            )
        for name in flags:
            if name in body and not isinstance(body[name], bool):
                raise _Refused(
                    400, f"{name} must be true or false (got {_shown(body[name])}); {BODY_HELP}"
                )
        optional = optional_from(body, base.optional)
        return base.but(scenario=scenario, optional=optional, mode=mode)

    def _record_error(self, error_id: str, request: web.Request, e: Exception) -> None:
        """Append an unexpected error to the error log: where, what, the traceback.

        Never the body, which may hold anything, and never a key: the configured keys
        and anything shaped like one are withheld from the text.
        """
        text = "".join(traceback.TracebackException.from_exception(e).format())
        body = _body.get()
        if len(body) >= _SHORTEST_WITHHELD_BODY:
            text = text.replace(body, "[the request body, withheld]")
        self.append_to_error_log(f"error {error_id}: {request.method} {request.path[:200]!r}", text)

    def append_to_error_log(self, title: str, text: str) -> None:
        """Append one entry (a title line, then `text`) to the error log, keys withheld.

        At most `LOG_ENTRIES_PER_MINUTE` a minute: the rest are counted, and the next
        entry written says how many were withheld. Past `MAX_LOG_BYTES` the log is moved to
        `http-api.log.1` (replacing the one before) and begun anew.
        """
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with self._log_lock:
            now = self._clock()
            self._logged = [t for t in self._logged if now - t < 60.0]
            if len(self._logged) >= LOG_ENTRIES_PER_MINUTE:
                self._withheld += 1
                return
            self._logged.append(now)
            withheld, self._withheld = self._withheld, 0
        if len(text) > MAX_ENTRY_CHARS:
            text = text[:MAX_ENTRY_CHARS] + "\n[cut short]"
        note = f" ({withheld} entries withheld before this one, over the rate)" if withheld else ""
        entry = f"{when} {title[:300]}{note}\n{text}\n"
        for secret in self._secrets():
            entry = entry.replace(secret, "[a key, withheld]")
        entry = _KEY_LIKE.sub("[a key, withheld]", entry)
        try:
            with self._log_lock:
                if self.error_log.exists() and (
                    self.error_log.stat().st_size + len(entry) > MAX_LOG_BYTES
                ):
                    os.replace(self.error_log, self.error_log.with_name(ERROR_LOG + ".1"))
                with open_private(self.error_log, "a") as f:
                    f.write(entry)
        except OSError:
            log.exception("cannot write %s; the entry was:\n%s", self.error_log, entry)

    def _secrets(self) -> list[str]:
        config = self._choice().config
        # (The gate's receipt key is a PEM file only its gate reads, never in an error.)
        return [s.value for s in (config.stripe_key, config.anthropic_key) if s is not None]


def _shown(value: Any) -> str:
    """A value from the body, short, as JSON."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class View(Protocol):
    """A view that holds the choice for its next run and starts runs itself (the app)."""

    engine: Engine

    @property
    def choice(self) -> RunChoice:
        """What its next run is, as it shows it."""
        ...

    def start_run(self, choice: RunChoice) -> Run:
        """Start a run of `choice`, make `choice` its own, and show the run."""
        ...


def for_view(view: View, *, port: int = DEFAULT_PORT) -> RunApi:
    """The endpoint for `view`: a POST changes the view's choice as its body asks and starts
    it the way the view's keys do, so the two never disagree about what ran."""
    return RunApi(view.engine, choice=lambda: view.choice, port=port, start_run=view.start_run)
