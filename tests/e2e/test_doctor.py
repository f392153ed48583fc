"""`interlock-demo doctor`, and the words for a network failure the engine shares with it.

Nothing here touches the network: names fail to resolve through the real resolver with
`AI_NUMERICHOST` (it refuses a name without asking DNS), and Stripe and Anthropic are
loopback fakes. Keys are made up.
"""

from __future__ import annotations

import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import stripe

from interlock import PaymentsUnsettledError
from interlock_demo.doctor import (
    ANTHROPIC,
    STRIPE,
    Line,
    Service,
    check_terminal,
    probe,
    run_checks,
)
from interlock_demo.network import network_failure, network_line
from interlock_demo.settings.keys import Secret
from tests.helpers.headless import ROOT, SCRUBBED

STRIPE_KEY = "sk_test_51DoctorMadeUpKeyQx7Vw3Nc9Lp2"
ANTHROPIC_KEY = "sk-ant-api03-DoctorMadeUpKeyZq7XvB2mN8"
LIVE_ENV = {"STRIPE_SECRET_KEY": STRIPE_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "PATH": "/bin"}
NO_DNS = functools.partial(socket.getaddrinfo, flags=socket.AI_NUMERICHOST)


def _gaierror() -> socket.gaierror:
    try:
        NO_DNS("api.stripe.com", 443)
    except socket.gaierror as e:
        return e
    raise AssertionError("AI_NUMERICHOST resolved a name")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class _Fake(http.server.BaseHTTPRequestHandler):
    status = 200
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        body = b'{"error": {"message": "Invalid API Key provided: sk_test_****Lp2"}}'
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads `seen`, not the log."""


@pytest.fixture
def fake() -> Iterator[tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]]]:
    """A loopback HTTP server answering every GET with `server.RequestHandlerClass.status`."""
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Fake,), {"seen": seen, "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, seen
    finally:
        server.shutdown()
        server.server_close()


def _service(base: Service, url: str) -> Service:
    return Service(base.name, url, base.path, base.auth_fix, base.permissions)


def _url(server: http.server.ThreadingHTTPServer, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


# -- network failures in words -----------------------------------------------------------


def test_a_dns_failure_under_the_sdk_wrappers_is_named_dns() -> None:
    """A gaierror under stripe's APIConnectionError under PaymentsUnsettledError reads as DNS."""
    try:
        try:
            try:
                raise _gaierror()
            except socket.gaierror as e:
                raise stripe.APIConnectionError(f"request to Stripe failed: {e}") from e
        except stripe.APIConnectionError as e:
            raise PaymentsUnsettledError("create payment", str(e)) from e
    except PaymentsUnsettledError as wrapped:
        line = network_line(wrapped, "Stripe")
    assert line is not None
    assert line.startswith("the network failed: Stripe: DNS: the name did not resolve")
    assert "--offline" in line
    assert "\n" not in line


def test_a_refused_connection_is_named_connect() -> None:
    """Connecting to a closed loopback port is a `connect` failure."""
    try:
        socket.create_connection(("127.0.0.1", _closed_port()), timeout=5)
    except OSError as e:
        failure = network_failure(e)
    assert failure is not None and failure.stage == "connect"


@pytest.mark.parametrize(
    ("text", "stage"),
    [
        ("PaymentsUnsettledError: ... gaierror: [Errno -2] Name or service not known", "DNS"),
        ("AgentError: the model call failed (APIConnectionError): Connection error.", "connect"),
        ("SSLError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "TLS"),
        ("AgentError: the model call failed (APITimeoutError): Request timed out.", "timeout"),
    ],
)
def test_a_workers_error_text_is_classified(text: str, stage: str) -> None:
    """A failure that arrives only as a worker's event text is classified by what it names."""
    failure = network_failure(text)
    assert failure is not None and failure.stage == stage


@pytest.mark.parametrize(
    "problem",
    [ValueError("amount too large"), FileNotFoundError(2, "no such file"), "KeyError: 'case'"],
)
def test_other_errors_are_not_network_failures(problem: BaseException | str) -> None:
    """An error that is not the network's keeps its own words."""
    assert network_failure(problem) is None


# -- probing a service, stage by stage -----------------------------------------------------


def test_probe_names_dns_when_the_name_does_not_resolve() -> None:
    """An unresolvable name fails at DNS, with the fix, and never shows the key."""
    line = probe(STRIPE, Secret(STRIPE_KEY, "STRIPE_SECRET_KEY"), resolve_name=NO_DNS)
    assert line.status == "FAIL" and line.blocks
    assert "api.stripe.com: DNS: the name did not resolve" in line.text
    assert "Fix:" in line.text and "--offline" in line.text
    assert STRIPE_KEY[8:] not in line.text


def test_probe_names_connect_when_nothing_listens() -> None:
    """A port nobody listens on fails at connect."""
    service = _service(STRIPE, f"https://127.0.0.1:{_closed_port()}")
    line = probe(service, Secret(STRIPE_KEY, "STRIPE_SECRET_KEY"))
    assert line.status == "FAIL"
    assert ": connect: no connection" in line.text


def test_probe_names_tls_when_the_handshake_fails(
    fake: tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]],
) -> None:
    """HTTPS to something that does not speak TLS (a captive portal's plain HTTP) fails at TLS."""
    server, seen = fake
    line = probe(_service(STRIPE, _url(server, "https")), Secret(STRIPE_KEY, "STRIPE_SECRET_KEY"))
    assert line.status == "FAIL"
    assert ": TLS: the handshake failed" in line.text
    assert seen == []  # no request, so no key, went out in the clear


@pytest.mark.parametrize(
    ("base", "key", "source", "header"),
    [
        (STRIPE, STRIPE_KEY, "STRIPE_SECRET_KEY", "Authorization"),
        (ANTHROPIC, ANTHROPIC_KEY, "ANTHROPIC_API_KEY", "x-api-key"),
    ],
)
def test_probe_names_auth_when_the_key_is_refused(
    fake: tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]],
    base: Service,
    key: str,
    source: str,
    header: str,
) -> None:
    """A 401 fails at auth naming where the key came from and what to do; never the key."""
    server, seen = fake
    server.RequestHandlerClass.status = 401  # type: ignore[attr-defined]
    line = probe(_service(base, _url(server)), Secret(key, source))
    assert line.status == "FAIL"
    assert f": auth: the key from {source} was refused (HTTP 401)" in line.text
    assert base.auth_fix in line.text
    assert key in seen[0][header]  # the key was really sent...
    assert key[8:20] not in line.text and "****" not in line.text  # ...and never shown


def test_probe_names_a_missing_permission(
    fake: tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]],
) -> None:
    """A 403 (a restricted key without refunds) says which permissions the demo uses."""
    server, seen = fake
    server.RequestHandlerClass.status = 403  # type: ignore[attr-defined]
    line = probe(_service(STRIPE, _url(server)), Secret(STRIPE_KEY, "STRIPE_SECRET_KEY"))
    assert line.status == "FAIL"
    assert "is not allowed this (HTTP 403)" in line.text
    assert "write on PaymentIntents and Refunds" in line.text
    assert seen[0]["Authorization"] == f"Bearer {STRIPE_KEY}"


def test_probe_passes_when_the_key_is_accepted(
    fake: tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]],
) -> None:
    """A 200 for the key is an ok line."""
    server, _ = fake
    line = probe(_service(ANTHROPIC, _url(server)), Secret(ANTHROPIC_KEY, "ANTHROPIC_API_KEY"))
    assert line == Line(
        "ok",
        "anthropic",
        "127.0.0.1: DNS, connect, TLS and the key from ANTHROPIC_API_KEY all good",
    )


def test_live_checks_reach_both_services_and_block_on_one_refused_key(
    fake: tuple[http.server.ThreadingHTTPServer, list[dict[str, str]]], tmp_path: Path
) -> None:
    """In live mode both services are probed; one refused key keeps the mode from running."""
    server, seen = fake
    refusing = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Refusing", (_Fake,), {"seen": [], "status": 401})
    )
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    try:
        lines = list(
            run_checks(
                env={**LIVE_ENV, "INTERLOCK_HOME": str(tmp_path)},
                services=(_service(STRIPE, _url(server)), _service(ANTHROPIC, _url(refusing))),
                terminal=os.terminal_size((160, 45)),
            )
        )
    finally:
        refusing.shutdown()
        refusing.server_close()
    by_name = {line.name: line for line in lines}
    assert by_name["mode"].text.startswith("live (both keys found)")
    assert by_name["stripe"].status == "ok"
    assert by_name["anthropic"].status == "FAIL" and by_name["anthropic"].blocks
    assert "emulator" not in by_name
    assert by_name["keys"].text == (
        "Stripe: a test key from STRIPE_SECRET_KEY; "
        "Anthropic: an Anthropic API key from ANTHROPIC_API_KEY"
    )
    shown = "\n".join(line.render() for line in lines)
    assert STRIPE_KEY[8:] not in shown and ANTHROPIC_KEY[7:] not in shown
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("size", "env", "says"),
    [
        ((160, 45), {"COLORTERM": "truecolor"}, "160x45, truecolor"),
        ((100, 30), {}, "the compact layout (100x30), which hides the cards' read-back"),
        ((120, 40), {}, "the compact layout (100x30), which hides"),
        ((90, 30), {}, "the single layout (80x24), which hides all columns but one"),
        ((80, 24), {}, "the single layout (80x24), which hides all columns but one"),
        ((160, 30), {}, "the wide layout (160x45); below 45 rows the cards are cut"),
        ((70, 20), {}, "below 80x24, cards are cut"),
        ((160, 45), {"NO_COLOR": "1"}, "unset NO_COLOR"),
    ],
)
def test_terminal_line_warns_but_never_blocks(
    size: tuple[int, int], env: dict[str, str], says: str
) -> None:
    """Terminal size and colours are named; below 160x45 the line says which layout the app
    gives and what it hides, a warning that never stops the mode."""
    line = check_terminal(env, os.terminal_size(size))
    assert says in line.text
    assert not line.blocks
    assert (line.status == "ok") == (says == "160x45, truecolor")


# -- the command ---------------------------------------------------------------------------


def _doctor(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    clean["PATH"] = str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin"
    return subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", *args, "doctor"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**clean, **env},
        timeout=90,
        check=False,
    )


def test_doctor_offline_is_ready_and_says_why(tmp_path: Path) -> None:
    """With no keys, doctor says offline would start and why, starts the emulator, exits 0."""
    done = _doctor([], INTERLOCK_HOME=str(tmp_path / "home"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok    mode       offline (live mode needs")
    assert "ANTHROPIC_API_KEY" in lines[0]
    assert any(line.startswith("ok    emulator") for line in lines)
    assert any(line.startswith("ok    home") for line in lines)
    assert any(line.startswith("ok    forks      a worker forks from") for line in lines)
    assert "Traceback" not in done.stderr


def test_doctor_fails_when_home_is_not_writable(tmp_path: Path) -> None:
    """An INTERLOCK_HOME that cannot hold the demo's files fails, exit 1, with the fix."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _doctor(["--mock"], INTERLOCK_HOME=str(blocker))
    assert done.returncode == 1
    (home,) = [line for line in done.stdout.splitlines() if " home " in line]
    assert home.startswith("FAIL") and "set INTERLOCK_HOME" in home
    assert done.stdout.splitlines()[-1].startswith("NOT READY")


def test_doctor_names_a_refused_key_by_kind_only(tmp_path: Path) -> None:
    """A live Stripe key fails the mode and keys lines, named by kind; no part of it shown."""
    live = "sk_live_51DoctorMadeUpLiveKeyHq8ZbQ4eC39"
    done = _doctor([], INTERLOCK_HOME=str(tmp_path / "home"), STRIPE_SECRET_KEY=live)
    assert done.returncode == 1
    assert "a live secret key" in done.stdout
    assert live[8:20] not in done.stdout + done.stderr


def test_a_live_run_without_network_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live run whose Stripe name does not resolve fails with one line saying the network
    failed, at DNS, with the fix, instead of a gaierror deep in the events."""
    from interlock_demo.engine import Engine, RunChoice
    from interlock_demo.settings.config import resolve

    monkeypatch.setattr(socket, "getaddrinfo", NO_DNS)  # every name fails, no DNS is asked
    config = resolve(env={**LIVE_ENV, "INTERLOCK_HOME": str(tmp_path)})
    assert config.mode == "live"
    engine = Engine(config)
    try:
        run = engine.start(RunChoice(config, "revoked"))
        assert run.wait(60)
    finally:
        engine.close()
    doc = run.to_json()
    expected = "the network failed: Stripe (api.stripe.com): DNS: the name did not resolve"
    assert doc["error"].startswith(f"standard, interlock: {expected}")
    assert doc["error"].count("the network failed") == 1
    assert "\n" not in doc["error"] and "gaierror" not in doc["error"]
    assert {c["error"].split(" (")[0] for c in doc["columns"]} == {"the network failed: Stripe"}
    assert STRIPE_KEY[8:] not in str(doc) and ANTHROPIC_KEY[7:] not in str(doc)


def test_workers_line_fails_when_a_worker_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python that cannot run the worker module fails the workers line with the fix."""
    from interlock_demo.doctor import check_workers

    assert check_workers().status == "ok"
    monkeypatch.setattr(sys, "executable", "/bin/false")
    line = check_workers()
    assert line.status == "FAIL" and line.blocks
    assert "a worker process exited 1" in line.text and "pip install ." in line.text


def test_forks_line_warns_that_workers_start_cold_when_the_fork_server_fails() -> None:
    """A fork server that cannot start is a warning (the demo still runs) that says workers
    will start cold; a working one forks a worker that runs."""
    from interlock_demo.doctor import check_fork_server

    assert check_fork_server().status == "ok"
    line = check_fork_server(python="/bin/false")
    assert line.status == "warn" and not line.blocks
    assert "the fork server does not work (it is gone (exit 1))" in line.text
    assert "workers will start cold" in line.text
