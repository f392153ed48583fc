"""The real app in a real terminal: tmux sends the keys and reads the screen back as text.

Offline mode, so the workers are real processes killed with a real SIGKILL, with the
shortest timings the gate accepts (a run takes about ten seconds). The test has its own
tmux server (`tmux -L`), which it kills at the end.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

WIDTH, HEIGHT = 160, 45
EXITED = "INTERLOCK-DEMO-EXITED"
POLL_S = 0.1


class Terminal:
    """One tmux session on a private server, running one command."""

    def __init__(self, socket: str, env: dict[str, str]) -> None:
        self.socket = socket
        self.env = env

    def tmux(self, *args: str) -> str:
        """Run a tmux command against this test's server; returns its stdout."""
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return done.stdout

    def screen(self) -> str:
        """The pane's text as it is now."""
        return self.tmux("capture-pane", "-p", "-t", "demo")

    def keys(self, *keys: str) -> None:
        """Type keys into the pane."""
        self.tmux("send-keys", "-t", "demo", *keys)

    def wait_for(self, found: Callable[[str], bool], timeout: float, what: str) -> str:
        """Poll the screen until `found(screen)`; fail with the last screen after `timeout`."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if found(screen):
                return screen
            time.sleep(POLL_S)
        pytest.fail(f"{what} did not show within {timeout:g} s; the screen:\n{screen}")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    """The app, offline with short timings and the checked column, in a 160x45 tmux pane."""
    env = {
        **os.environ,
        "INTERLOCK_HOME": str(tmp_path / "home"),
        "INTERLOCK_CLAIM_TTL": "6",
        "INTERLOCK_STRIPE_TIMEOUT": "1",
    }
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)  # a tmux around pytest must not become this test's server
    app = shlex.join([sys.executable, "-m", "interlock_demo.cli", "--offline", "--checked"])
    # The pane stays after the app exits, long enough to read how it exited.
    command = f"cd {shlex.quote(str(tmp_path))} && {app}; echo {EXITED} $?; sleep 60"
    term = Terminal(f"interlock-test-{os.getpid()}", env)
    term.tmux("new-session", "-d", "-s", "demo", "-x", str(WIDTH), "-y", str(HEIGHT), command)
    socket_path = Path(term.tmux("display-message", "-p", "#{socket_path}").strip())
    try:
        yield term
    finally:
        subprocess.run(
            ["tmux", "-L", term.socket, "kill-server"], env=env, capture_output=True, timeout=10
        )
        socket_path.unlink(missing_ok=True)  # tmux leaves the socket file behind


def test_keys_in_tmux_run_a_scenario_to_its_result_card(terminal: Terminal) -> None:
    """Enter starts the run; the screen shows the kill, the restart, the result card; q exits 0."""
    terminal.wait_for(lambda s: "ready: press enter to run" in s, 30, "the idle screen")
    terminal.keys("Enter")

    # Events scroll as the run goes on, so collect everything the screen showed.
    seen: list[str] = []

    def finished(screen: str) -> bool:
        seen.append(screen)
        return "finished ·" in screen and screen.count("RESULT") == 3

    last = terminal.wait_for(finished, 60, "the finished run")
    shown = "\n".join(seen)
    assert "SIGKILL at before-send" in shown or "exit -9 (SIGKILL)" in shown
    assert "gate.recover()" in shown  # interlock's restarted worker
    assert "read the saved decision" in shown  # standard's and checked's
    assert re.search(r"✗ wrong +reported: sent", last)  # standard: two refunds
    assert re.search(r"✓ right +reported: refused", last)  # interlock
    assert re.search(r"✓ right +reported: stopped", last)  # checked
    assert "[1] Hand refund during the outage" in last

    terminal.keys("q")
    after = terminal.wait_for(lambda s: EXITED in s, 15, "the app's exit")
    assert f"{EXITED} 0" in after
