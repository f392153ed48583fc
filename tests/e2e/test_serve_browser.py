"""`interlock-demo serve`: the app in a real headless Chromium over loopback.

The system's Chromium (Debian's `chromium` package) is driven by Playwright through its
`executable_path`; no browser is downloaded. On a developer machine without Chromium the
browser test is skipped saying so; in CI (CI=true) a missing Chromium is a failure.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock_demo.cli import main
from tests.helpers.headless import ROOT, SCRUBBED

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# An engine event of hand-refund (not a view's label), so the check survives a redesign.
RUN_TEXT = "support refunds $20.00 by hand"
START_DEADLINE_S = 60.0


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is not None:
        return found
    reason = "Chromium is not installed (apt-get install -y chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must run the browser test; .ci/run installs it")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """`interlock-demo --mock serve` on a free loopback port; its port once it listens."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    log_path = tmp_path / "serve.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "interlock_demo.cli", "--mock", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                said = log_path.read_text()[-2000:]
                assert proc.poll() is None, f"serve exited {proc.returncode}: {said}"
                assert time.monotonic() < deadline, (
                    f"serve did not listen within {START_DEADLINE_S:g} s: {said}"
                )
                # Polling a port that is not open yet: nothing to wait on but the kernel.
                time.sleep(0.1)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the app it started for the tab
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _text(frames: list[bytes | str]) -> str:
    raw = b"".join(f if isinstance(f, bytes) else f.encode() for f in frames)
    return ANSI.sub("", raw.decode("utf-8", "replace"))


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_browser_loads_the_app_presses_enter_and_sees_the_run(served: int) -> None:
    """Chromium opens the served page, the app draws, `enter` starts a run, its events arrive."""
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    frames: list[bytes | str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            with page.expect_websocket() as opened:
                page.goto(f"http://127.0.0.1:{served}/")
            ws = opened.value
            ws.on("framereceived", lambda payload: frames.append(payload))

            def shows(needle: str) -> bool:
                return needle in _text(frames)

            ws.wait_for_event(
                "framereceived", predicate=lambda _: shows("Hand refund"), timeout=60_000
            )
            assert not shows(RUN_TEXT)  # the idle screen: no run yet
            page.click("#terminal")
            page.keyboard.press("Enter")
            ws.wait_for_event("framereceived", predicate=lambda _: shows(RUN_TEXT), timeout=60_000)
            assert "MOCK" in _text(frames)
        finally:
            browser.close()


def _status(port: int, path: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.e2e
def test_serve_answers_only_loopback_and_its_own_page(served: int) -> None:
    """Another Host is refused (DNS rebinding), and so is a WebSocket from another page."""
    own = f"127.0.0.1:{served}"
    assert _status(served, "/", {"Host": own}) == 200
    assert _status(served, "/", {"Host": f"localhost:{served}"}) == 200
    assert _status(served, "/", {"Host": f"attacker.example:{served}"}) == 403
    upgrade = {
        "Host": own,
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    assert _status(served, "/ws", {**upgrade, "Origin": "http://attacker.example"}) == 403


def test_serve_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --port 99999` exits 2 naming the port, before anything starts."""
    assert main(["serve", "--port", "99999"]) == 2
    err = capsys.readouterr().err
    assert "99999 is not a port" in err
    assert "Traceback" not in err


def test_serve_on_a_taken_port_says_so(tmp_path: Path) -> None:
    """`serve --port P` with P taken exits 2 naming the port and what to do, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        env["INTERLOCK_HOME"] = str(tmp_path / "home")
        done = subprocess.run(
            [sys.executable, "-m", "interlock_demo.cli", "--mock", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "--port" in done.stderr
    assert "Traceback" not in done.stderr
