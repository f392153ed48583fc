"""`interlock-demo doctor`: the rehearsal check, run at the venue before the talk.

One line per check, each saying what was found and, when it fails, what to do:

    mode        which mode `interlock-demo` would start, and why
    keys        which keys were found, by kind only (never a value)
    stripe      live: api.stripe.com reachable; DNS, connect, TLS and the key each named
    anthropic   live: api.anthropic.com reachable, the same stages
    workers     live and offline: a worker process starts with this Python
    emulator    offline: the loopback Stripe emulator starts and answers the SDK
    temporal    the Temporal dev server starts (when the extra is installed)
    terminal    size and colours (the three columns side by side need 100 columns)
    home        INTERLOCK_HOME is writable

Exit 0 only when every check the chosen mode needs passed; 1 otherwise. A `warn` line
(a narrow terminal, Temporal missing with the standalone engine) does not stop the mode.

The network failure words (`network_failure`) are shared with the engine, so a live run
that cannot reach Stripe or the model says so in one line instead of a deep traceback.
"""

from __future__ import annotations

import errno
import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from interlock_demo.errors import KeyRefusedError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.keys import Secret, find_anthropic_key, find_stripe_key, key_kind
from interlock_demo.settings import DemoConfig, resolve

PROBE_TIMEOUT_S = 5.0
# What `python -m workers.standalone` without a case file exits with, after its usage line.
WORKER_USAGE_EXIT = 2
# Below this width the app cannot put the three columns side by side.
SIDE_BY_SIDE_COLUMNS = 100
SMALLEST = (80, 24)
OFFLINE_FIX = "or rehearse with --offline (local emulator, no network needed)"

Resolver = Callable[[str, int], Any]


# -- network failures, in words --------------------------------------------------------


@dataclass(frozen=True)
class NetworkFailure:
    """Which stage of reaching a service failed, the detail, and what to do."""

    stage: str  # "DNS", "connect", "TLS", "timeout" or "auth"
    detail: str
    fix: str

    def line(self, service: str) -> str:
        """One line for the screen and the run's JSON."""
        return f"the network failed: {service}: {self.stage}: {self.detail}. Fix: {self.fix}"


_FIXES = {
    "DNS": "check the venue's network and DNS (a Wi-Fi login page?), " + OFFLINE_FIX,
    "connect": "a firewall or proxy may block port 443: try another network, " + OFFLINE_FIX,
    "TLS": "something intercepts HTTPS (a captive portal or a proxy): log in to the Wi-Fi, "
    + OFFLINE_FIX,
    "timeout": "the network is too slow or drops packets: try another network, " + OFFLINE_FIX,
}
# Text patterns for failures that only arrive as text (a worker's error event).
_TEXT_STAGES = (
    ("DNS", re.compile(r"gaierror|Name or service not known|nodename nor servname|getaddrinfo")),
    ("TLS", re.compile(r"SSLError|SSLCertVerificationError|CERTIFICATE_VERIFY|certificate")),
    (
        "connect",
        re.compile(
            r"ConnectionRefusedError|Connection refused|Network is unreachable|"
            r"No route to host|ConnectionResetError|APIConnectionError|Connection error"
        ),
    ),
    ("timeout", re.compile(r"timed out|TimeoutError|APITimeoutError")),
)


# How a failure that reached the model reads (the agent wraps Anthropic's errors).
_MODEL = re.compile(r"model call failed|AgentError|anthropic", re.IGNORECASE)
_NETWORK_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.ETIMEDOUT}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def network_failure(problem: BaseException | str) -> NetworkFailure | None:
    """The network stage that failed, if `problem` (an exception or its text) is one; else None.

    An exception is judged by its causes (a `socket.gaierror` under the SDK's wrappers is
    DNS); text, as a worker reports it, by the names it carries.
    """
    if isinstance(problem, BaseException):
        for e in _chain(problem):
            if isinstance(e, socket.gaierror):
                return _failure("DNS", f"the name did not resolve ({e.strerror or e})")
            if isinstance(e, ssl.SSLError | ssl.CertificateError):
                return _failure("TLS", f"the handshake failed ({_short(e)})")
            if isinstance(e, TimeoutError | socket.timeout):
                return _failure("timeout", "no answer in time")
            if isinstance(e, ConnectionError) or (
                isinstance(e, OSError) and e.errno in _NETWORK_ERRNOS
            ):
                return _failure("connect", f"no connection ({_short(e)})")
        problem = f"{type(problem).__name__}: {problem}"
    for stage, pattern in _TEXT_STAGES:
        if pattern.search(problem):
            return _failure(stage, "the request did not get through")
    return None


def network_line(problem: BaseException | str, service: str) -> str | None:
    """`network_failure(problem)` as one line naming `service`, or None if it is not one."""
    failure = network_failure(problem)
    return None if failure is None else failure.line(service)


def live_failure_line(problem: BaseException | str) -> str | None:
    """For a live run: a network failure as one line naming Stripe or the model, else None."""
    if isinstance(problem, BaseException):
        text = " ".join(f"{type(e).__name__}: {e}" for e in _chain(problem))
    else:
        text = problem
    service = "the model (api.anthropic.com)" if _MODEL.search(text) else "Stripe (api.stripe.com)"
    return network_line(problem, service)


def _failure(stage: str, detail: str) -> NetworkFailure:
    return NetworkFailure(stage, detail, _FIXES[stage])


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# -- the checks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One check's result: `ok`, `warn` or `FAIL`; `needed` when the mode cannot run without it."""

    status: str
    name: str
    text: str
    needed: bool = True

    @property
    def blocks(self) -> bool:
        """Whether this line stops the chosen mode."""
        return self.status == "FAIL" and self.needed

    def render(self) -> str:
        """The line as printed."""
        return f"{self.status:<4}  {self.name:<9}  {self.text}"


@dataclass(frozen=True)
class Service:
    """A service a live run reaches, and how to ask it whether a key is good."""

    name: str
    base_url: str
    path: str
    auth_fix: str
    permissions: str

    def headers(self, key: Secret) -> dict[str, str]:
        """The request's headers; the key goes only here, never into a message."""
        if self.name == "Stripe":
            return {"Authorization": f"Bearer {key.value}"}
        return {"x-api-key": key.value, "anthropic-version": "2023-06-01"}


STRIPE = Service(
    "Stripe",
    "https://api.stripe.com",
    # What the demo reads itself: a restricted key without refunds access fails here too.
    "/v1/refunds?limit=1",
    "make a test key in the Stripe dashboard (Developers > API keys, test mode) and set "
    "STRIPE_SECRET_KEY to it",
    "write on PaymentIntents and Refunds",
)
ANTHROPIC = Service(
    "Anthropic",
    "https://api.anthropic.com",
    "/v1/models",
    "set ANTHROPIC_API_KEY to a key from console.anthropic.com (Settings > API keys)",
    "the Messages API",
)


def probe(
    service: Service,
    key: Secret,
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
    resolve_name: Resolver = socket.getaddrinfo,
    ssl_context: ssl.SSLContext | None = None,
) -> Line:
    """Reach `service` stage by stage (DNS, connect, TLS, the key) and name the first failure."""
    name = service.name.lower()
    url = urlsplit(service.base_url)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)

    def failed(stage: str, detail: str, fix: str | None = None) -> Line:
        return Line("FAIL", name, f"{host}: {stage}: {detail}. Fix: {fix or _FIXES[stage]}")

    try:
        addresses = resolve_name(host, port)
    except (socket.gaierror, UnicodeError) as e:
        return failed("DNS", f"the name did not resolve ({getattr(e, 'strerror', None) or e})")
    family, socktype, proto, _, address = addresses[0]
    sock = socket.socket(family, socktype, proto)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(address)
        except TimeoutError:
            return failed("timeout", f"no connection within {timeout_s:g} s")
        except OSError as e:
            return failed("connect", f"no connection to port {port} ({_short(e)})")
        if url.scheme == "https":
            context = ssl_context or ssl.create_default_context()
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError) as e:
                return failed("TLS", f"the handshake failed ({_short(e)})")
            except TimeoutError:
                return failed("timeout", f"no TLS handshake within {timeout_s:g} s")
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        conn.sock = sock
        try:
            conn.request("GET", service.path, headers=service.headers(key))
            status = conn.getresponse().status  # the body is never read: it may echo the key
        except TimeoutError:
            return failed("timeout", f"no answer within {timeout_s:g} s")
        except (OSError, http.client.HTTPException) as e:
            return failed("connect", f"the connection broke ({_short(e)})")
    finally:
        sock.close()
    if status == 401:
        return failed("auth", f"the key from {key.source} was refused (HTTP 401)", service.auth_fix)
    if status == 403:
        return failed(
            "auth",
            f"the key from {key.source} is not allowed this (HTTP 403)",
            f"give the key the permissions the demo uses ({service.permissions}), or "
            + service.auth_fix,
        )
    if not 200 <= status < 300:
        return failed(
            "connect", f"answered HTTP {status}", f"{service.name} may be down; {OFFLINE_FIX}"
        )
    return Line("ok", name, f"{host}: DNS, connect, TLS and the key from {key.source} all good")


def check_mode(
    mode: str | None, engine: str, env: Mapping[str, str]
) -> tuple[Line, DemoConfig | None]:
    """Which mode would start, and why; the configuration, or None when it is refused."""
    try:
        config = resolve(mode=mode, engine=engine, env=env)
    except (UsageError, KeyRefusedError) as e:
        return Line("FAIL", "mode", f"{mode or 'the default mode'} cannot start: {e}"), None
    if mode is not None:
        why = f"asked for with --{mode}"
    elif config.mode == "live":
        why = "both keys found"
    else:
        why = config.fallback_reason or "no keys"
    return Line("ok", "mode", f"{config.mode} ({why}), {config.engine} engine"), config


def check_keys(env: Mapping[str, str]) -> Line:
    """Which keys were found, by kind and source only."""
    parts: list[str] = []
    status = "ok"
    try:
        stripe_key = find_stripe_key(env)
    except KeyRefusedError as e:
        stripe_key = None
        status = "FAIL"
        parts.append(f"Stripe: {e.kind} from {e.source}, refused (only test keys)")
    else:
        parts.append(
            "Stripe: none"
            if stripe_key is None
            else f"Stripe: {key_kind(stripe_key.value)} from {stripe_key.source}"
        )
    anthropic_key = find_anthropic_key(env)
    if anthropic_key is None:
        parts.append("Anthropic: none")
    else:
        shape = (
            "an Anthropic API key"
            if anthropic_key.value.startswith("sk-ant-")
            else "set, but not shaped like an Anthropic key (sk-ant-...)"
        )
        parts.append(f"Anthropic: {shape} from {anthropic_key.source}")
    return Line(status, "keys", "; ".join(parts))


def check_emulator() -> Line:
    """The loopback emulator starts and answers the real stripe SDK."""
    from interlock import StripePayments, make_stripe_client
    from interlock_demo.payments import StripeEmulator
    from interlock_demo.settings import EMULATOR_KEY

    try:
        emu = StripeEmulator().start()
    except OSError as e:
        return Line("FAIL", "emulator", f"cannot listen on 127.0.0.1 ({_short(e)})")
    try:
        payments = StripePayments(make_stripe_client(EMULATOR_KEY, timeout_s=5, base_url=emu.url))
        payment = payments.create_payment(100, metadata={"doctor": "1"})
        payments.list_refunds(payment.id)
    except Exception as e:  # any failure here is the line's news, not a crash
        return Line("FAIL", "emulator", f"started on {emu.url} but did not answer ({_short(e)})")
    finally:
        emu.stop()
    return Line("ok", "emulator", f"started on {emu.url} and answered the stripe SDK")


def check_workers() -> Line:
    """A worker process starts (its entry module imports and answers) with this Python."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.standalone"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Line("FAIL", "workers", f"a worker process did not start ({_short(e)})")
    took = time.monotonic() - started
    if done.returncode != WORKER_USAGE_EXIT or "usage:" not in done.stderr:
        last = done.stderr.strip().splitlines()[-1:] or ["no message"]
        return Line(
            "FAIL",
            "workers",
            f"a worker process exited {done.returncode} ({last[0][:120]}). Fix: reinstall "
            "with `pip install .` in this venv",
        )
    return Line("ok", "workers", f"a worker process starts ({took:.2f} s with {sys.executable})")


def check_temporal(config: DemoConfig | None, engine: str) -> Line:
    """The Temporal dev server starts, when the extra is installed."""
    from interlock_demo.engine.temporal.probe import temporal_unavailable
    from interlock_demo.engine.temporal.runtime import TemporalRuntime

    needed = engine == "temporal"
    missing = temporal_unavailable()
    if missing is not None:
        return Line("FAIL" if needed else "warn", "temporal", f"`t` is off: {missing}", needed)
    if config is None:
        return Line("warn", "temporal", "not tried: the mode above cannot start", needed)
    runtime = TemporalRuntime(config.paths)
    try:
        runtime.start()
    except Exception as e:  # the dev server's failure is the line's news
        status = "FAIL" if needed else "warn"
        return Line(
            status, "temporal", f"`t` will fail: the dev server did not start ({_short(e)})", needed
        )
    started = runtime.started_in_s
    runtime.stop()
    took = f" in {started:.1f} s" if started is not None else ""
    return Line("ok", "temporal", f"the dev server started{took}", needed)


def check_terminal(env: Mapping[str, str], size: os.terminal_size | None = None) -> Line:
    """The terminal's size and colours (never blocks: the app adapts, but the room may not)."""
    size = size or shutil.get_terminal_size((0, 0))
    cols, rows = size.columns, size.lines
    colour = (
        "no colour (NO_COLOR is set)"
        if env.get("NO_COLOR")
        else "truecolor"
        if env.get("COLORTERM", "").lower() in ("truecolor", "24bit")
        else f"{env.get('TERM') or 'unknown terminal'} colours"
    )
    if not cols or not rows:
        return Line("warn", "terminal", f"size unknown (not a terminal), {colour}", False)
    text = f"{cols}x{rows}, {colour}"
    if cols < SMALLEST[0] or rows < SMALLEST[1]:
        return Line("warn", "terminal", f"{text}: below 80x24, make the font smaller", False)
    if cols < SIDE_BY_SIDE_COLUMNS:
        return Line(
            "warn", "terminal", f"{text}: one column at a time below {SIDE_BY_SIDE_COLUMNS}", False
        )
    if env.get("NO_COLOR"):
        return Line("warn", "terminal", f"{text}: unset NO_COLOR for the red and green", False)
    return Line("ok", "terminal", text, False)


def check_home(env: Mapping[str, str]) -> Line:
    """INTERLOCK_HOME's demo folder can be created and written (journal, cases, screenshots)."""
    from interlock_demo.settings import Paths

    folder = Paths.from_env(env).demo
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-") as f:
            f.write(b"ok")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return Line(
            "FAIL",
            "home",
            f"{folder} is not writable ({_short(e)}). Fix: set INTERLOCK_HOME to a folder "
            "you can write",
        )
    return Line("ok", "home", f"{folder} is writable")


def run_checks(
    *,
    mode: str | None = None,
    engine: str = "standalone",
    env: Mapping[str, str] | None = None,
    services: tuple[Service, Service] = (STRIPE, ANTHROPIC),
    resolve_name: Resolver = socket.getaddrinfo,
    terminal: os.terminal_size | None = None,
) -> Iterator[Line]:
    """Every check in order, each yielded as soon as it is done."""
    env = os.environ if env is None else env
    mode_line, config = check_mode(mode, engine, env)
    yield mode_line
    yield check_keys(env)
    if config is not None and config.mode == "live":
        assert config.stripe_key is not None and config.anthropic_key is not None
        for service, key in zip(services, (config.stripe_key, config.anthropic_key), strict=True):
            yield probe(service, key, resolve_name=resolve_name)
    if config is not None and config.mode != "mock":
        yield check_workers()
    if config is not None and config.mode == "offline":
        yield check_emulator()
    yield check_temporal(config, engine)
    yield check_terminal(env, terminal)
    yield check_home(env)


def main_doctor(mode: str | None = None, engine: str = "standalone") -> int:
    """Print one line per check; 0 when the chosen mode can run, else 1."""
    blocked = False
    for line in run_checks(mode=mode, engine=engine):
        print(line.render(), flush=True)
        blocked = blocked or line.blocks
    verdict = "NOT READY: fix the FAIL lines above" if blocked else "ready"
    print(verdict)
    return ExitCode.NOT_READY if blocked else ExitCode.OK
