"""`interlock-demo doctor`: the rehearsal check, run at the venue before the talk.

One line per check, each saying what was found and, when it fails, what to do:

    mode        which mode `interlock-demo` would start, and why
    keys        which keys were found, by kind only (never a value)
    stripe      live: api.stripe.com reachable; DNS, connect, TLS and the key each named
    anthropic   live: api.anthropic.com reachable, the same stages
    workers     live and offline: a worker process starts with this Python
    forks       live and offline: a column's fork server forks a worker (else workers
                start cold, which this line says: a warning, the demo still runs)
    emulator    offline: the loopback Stripe emulator starts and answers the SDK
    temporal    the Temporal dev server starts (when the extra is installed)
    terminal    size and colours: which layout the app gives it, and what that hides
    home        INTERLOCK_HOME is writable

Exit 0 only when every check the chosen mode needs passed; 1 otherwise; 3 when a stop
signal (Ctrl-C, SIGTERM, SIGHUP) ends it first, every server it started stopped. A `warn`
line (a narrow terminal, Temporal missing with the standalone engine) does not stop the
mode.

The network failure words are `interlock_demo.network`'s, which the engine shares.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from interlock_demo.errors import KeyRefusedError, UsageError
from interlock_demo.exit_codes import ExitCode
from interlock_demo.layout import LAYOUTS, SMALLEST, WIDE, layout_for
from interlock_demo.network import FIXES, OFFLINE_FIX, short_error
from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.settings.environment import child_env
from interlock_demo.settings.keys import Secret, find_anthropic_key, find_stripe_key, key_kind
from interlock_demo.stopping import Stopped

PROBE_TIMEOUT_S = 5.0
# What `python -m workers.standalone` without a case file exits with, after its usage line.
WORKER_USAGE_EXIT = 2

Resolver = Callable[[str, int], Any]


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
        return Line("FAIL", name, f"{host}: {stage}: {detail}. Fix: {fix or FIXES[stage]}")

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
            return failed("connect", f"no connection to port {port} ({short_error(e)})")
        if url.scheme == "https":
            context = ssl_context or ssl.create_default_context()
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError) as e:
                return failed("TLS", f"the handshake failed ({short_error(e)})")
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
            return failed("connect", f"the connection broke ({short_error(e)})")
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
    elif config.run_mode.needs_keys:
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
    from interlock.testing import StripeEmulator
    from interlock_demo.settings.worker import EMULATOR_KEY

    try:
        emu = StripeEmulator().start()
    except OSError as e:
        return Line("FAIL", "emulator", f"cannot listen on 127.0.0.1 ({short_error(e)})")
    try:
        payments = StripePayments(make_stripe_client(EMULATOR_KEY, timeout_s=5, base_url=emu.url))
        payment = payments.create_payment(100, metadata={"doctor": "1"})
        payments.list_refunds(payment.id)
    except Exception as e:  # any failure here is the line's news, not a crash
        return Line(
            "FAIL", "emulator", f"started on {emu.url} but did not answer ({short_error(e)})"
        )
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
            # It only has to import and print its usage: no setting, no key.
            env=child_env(),
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Line("FAIL", "workers", f"a worker process did not start ({short_error(e)})")
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


def check_fork_server(python: str = sys.executable) -> Line:
    """A column's fork server starts, imports a worker's modules and forks a worker that
    runs (it prints its usage: no case file). A failure is a warning: workers then start
    cold, slower to come back after a kill, and the line says so."""
    from interlock_demo.engine.forkserver import ForkServer, ForkServerError

    cold = "workers will start cold (each restart imports everything again, about 0.2 s)"
    with tempfile.TemporaryDirectory(prefix="interlock-doctor-") as folder:
        log = os.path.join(folder, "forkserver.log")
        server = ForkServer("standard", child_env(), Path(log), python=python).start()
        try:
            with open(os.path.join(folder, "worker.log"), "wb") as err:
                stdin_r, stdin_w = os.pipe()
                stdout_r, stdout_w = os.pipe()
                try:
                    forked = server.fork([], child_env(), (stdin_r, stdout_w, err.fileno()))
                    started = time.monotonic()
                    code = forked.wait()
                    took = time.monotonic() - started
                finally:
                    for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
                        os.close(fd)
        except ForkServerError as e:
            why = _last_line(log) or str(e)
            return Line("warn", "forks", f"the fork server does not work ({why[:160]}); {cold}")
        finally:
            server.close()
        if code != WORKER_USAGE_EXIT:
            return Line("warn", "forks", f"a forked worker exited {code}, not its usage; {cold}")
    return Line(
        "ok",
        "forks",
        f"a worker forks from a column's fork server and ran in {took * 1000:.0f} ms "
        f"(its imports took {server.ready_s or 0:.2f} s, once per column)",
    )


def _last_line(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().strip().splitlines()
    except OSError:
        return None
    return lines[-1] if lines else None


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
            status,
            "temporal",
            f"`t` will fail: the dev server did not start ({short_error(e)})",
            needed,
        )
    finally:
        runtime.stop()  # also when a stop signal ends the check: no server left behind
    started = runtime.started_in_s
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
        return Line(
            "warn",
            "terminal",
            f"{text}: below {SMALLEST[0]}x{SMALLEST[1]}, cards are cut; make the font smaller",
            False,
        )
    layout = layout_for(cols)
    if cols < WIDE or rows < layout.rows:
        # Which layout the room gets, and what it leaves out, so the speaker can choose.
        said = f"{text}: the {layout.name} layout ({layout.columns}x{layout.rows})"
        said += f", which hides {layout.hides}" if layout.hides != "nothing" else ""
        if rows < layout.rows:
            said += f"; below {layout.rows} rows the cards are cut at the bottom"
        return Line("warn", "terminal", f"{said}; {WIDE}x{LAYOUTS[0].rows} shows everything", False)
    if env.get("NO_COLOR"):
        return Line("warn", "terminal", f"{text}: unset NO_COLOR for the red and green", False)
    return Line("ok", "terminal", text, False)


def check_home(env: Mapping[str, str]) -> Line:
    """INTERLOCK_HOME's demo folder can be created and written (journal, cases, screenshots)."""
    from interlock_demo.settings.paths import Paths

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
            f"{folder} is not writable ({short_error(e)}). Fix: set INTERLOCK_HOME to a folder "
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
    if config is not None and config.run_mode.needs_keys:
        assert config.stripe_key is not None and config.anthropic_key is not None
        for service, key in zip(services, (config.stripe_key, config.anthropic_key), strict=True):
            yield probe(service, key, resolve_name=resolve_name)
    if config is not None and not config.run_mode.in_process:
        yield check_workers()
        yield check_fork_server()
    if config is not None and config.run_mode.emulator:
        yield check_emulator()
    yield check_temporal(config, engine)
    yield check_terminal(env, terminal)
    yield check_home(env)


def main_doctor(mode: str | None = None, engine: str = "standalone") -> int:
    """Print one line per check; 0 when the chosen mode can run, else 1 (a stop signal:
    `Stopped`, naming the checks done)."""
    blocked = False
    done: list[str] = []
    try:
        for line in run_checks(mode=mode, engine=engine):
            print(line.render(), flush=True)
            blocked = blocked or line.blocks
            done.append(line.name)
    except Stopped as stop:
        checked = f"{len(done)} checks done ({', '.join(done)})" if done else "no check done"
        raise stop.having(f"{checked}, the rest not run; not known to be ready") from None
    verdict = "NOT READY: fix the FAIL lines above" if blocked else "ready"
    print(verdict)
    return ExitCode.NOT_READY if blocked else ExitCode.OK
