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
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.headless import workers_under

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


def _open(tmp_path: Path, width: int, height: int) -> Iterator[Terminal]:
    """The app, offline with short timings (and so all three columns), in a tmux pane."""
    env = {
        **os.environ,
        "INTERLOCK_HOME": str(tmp_path / "home"),
        "INTERLOCK_CLAIM_TTL": "6",
        "INTERLOCK_STRIPE_TIMEOUT": "1",
    }
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)  # a tmux around pytest must not become this test's server
    # As the docs open it: the third column is on without --checked.
    app = shlex.join([sys.executable, "-m", "interlock_demo.cli", "--offline"])
    # The pane stays after the app exits, long enough to read how it exited.
    command = f"cd {shlex.quote(str(tmp_path))} && {app}; echo {EXITED} $?; sleep 60"
    # A server of its own per test: the one before may still be exiting after kill-server.
    term = Terminal(f"interlock-test-{os.getpid()}-{tmp_path.name}", env)
    term.tmux("new-session", "-d", "-s", "demo", "-x", str(width), "-y", str(height), command)
    socket_path = Path(term.tmux("display-message", "-p", "#{socket_path}").strip())
    try:
        yield term
    finally:
        subprocess.run(
            ["tmux", "-L", term.socket, "kill-server"], env=env, capture_output=True, timeout=10
        )
        socket_path.unlink(missing_ok=True)  # tmux leaves the socket file behind


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    """The app in a 160x45 pane."""
    yield from _open(tmp_path, WIDTH, HEIGHT)


@pytest.fixture
def small_terminal(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Terminal]:
    """The app in a smaller pane: `request.param` is (width, height)."""
    width, height = request.param
    yield from _open(tmp_path, width, height)


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


@pytest.mark.parametrize("small_terminal", [(100, 30), (80, 24)], indirect=True, ids=str)
def test_a_small_projector_shows_the_columns_and_the_verdict_strip(
    small_terminal: Terminal,
) -> None:
    """At 100x30 the three columns sit side by side; at 80x24 one at a time (right switches).
    Either way the header is one line and the verdict strip shows every column at the end
    (at 80x24 with where the money was read in its border)."""
    term = small_terminal
    idle = term.wait_for(lambda s: "ready: press enter to run" in s, 30, "the idle screen")
    lines = idle.splitlines()
    assert lines[1].lstrip().startswith("[1] Hand refund")
    assert "pip install" not in idle and "t off" not in idle
    assert "Standard agent" in idle  # alone or first, the $40 column opens the screen
    wide = "Hand-written check" in idle
    assert wide == ("Interlock" in idle.split("\n", 4)[-1])  # all three, or one
    assert ("◀ Standard agent (1/3) ▶" in idle) != wide
    term.keys("Enter")

    def finished(screen: str) -> bool:
        return "finished ·" in screen and "retried blindly: $40.00" in screen

    last = term.wait_for(finished, 60, "the verdict strip")
    # One column at a time, the strip says where the money was read once, in its border.
    place = " at the emulator" if wide else ""
    assert wide or "Refunded at the emulator" in last
    assert re.search(rf"Standard +\$40\.00{place} +✗ retried blindly: \$40\.00", last)
    assert re.search(rf"Interlock +\$20\.00{place} +✓ saw the hand refund: refused", last)
    assert re.search(rf"Checked +\$20\.00{place} +✓ re-checked", last)
    if not wide:
        term.keys("Right")
        term.wait_for(lambda s: "◀ Interlock (2/3) ▶" in s, 10, "the next column")
    term.keys("q")
    after = term.wait_for(lambda s: EXITED in s, 15, "the app's exit")
    assert f"{EXITED} 0" in after


def test_presenter_mode_in_tmux_one_phase_per_space(terminal: Terminal) -> None:
    """p then enter: the run waits; each space opens one phase, and the screen says which is
    next; after the fifth the verdicts come."""
    terminal.wait_for(lambda s: "ready: press enter to run" in s, 30, "the idle screen")
    terminal.keys("p")
    terminal.wait_for(lambda s: "PRESENTER" in s, 10, "presenter mode")
    terminal.keys("Enter")
    for phase, shown in (
        ("decision", "decided"),
        ("kill", "SIGKILL"),
        ("outage", "outage"),
        ("restart", "restart"),
    ):
        # At the outage and the restart the presenter is also told how long the dead
        # worker's claim still runs; the countdown may reach the screen a frame after
        # the wait line, so the two are waited for together.
        claim = phase in ("outage", "restart")
        terminal.wait_for(
            lambda s, phase=phase, claim=claim: (
                f"space: {phase} (waiting)" in s
                and (not claim or re.search(r"claim (ends in \d+ s|has ended)", s) is not None)
            ),
            30,
            f"the {phase} wait" + (" with the claim's countdown" if claim else ""),
        )
        terminal.keys("Space")
        terminal.wait_for(lambda s, shown=shown: f" {shown} " in s, 30, f"the {phase} line")
    terminal.wait_for(lambda s: "space: result (waiting)" in s, 60, "the result wait")
    assert "retried blindly" not in terminal.screen()
    terminal.keys("Space")
    terminal.wait_for(lambda s: "retried blindly: $40.00" in s, 30, "the verdict strip")
    terminal.keys("q")
    terminal.wait_for(lambda s: f"{EXITED} 0" in s, 15, "the app's exit")


def _idle_app(terminal: Terminal) -> psutil.Process:
    """The app's process, once its idle screen shows."""
    terminal.wait_for(lambda s: "ready: press enter to run" in s, 30, "the idle screen")
    shell = psutil.Process(int(terminal.tmux("display-message", "-p", "-t", "demo", "#{pane_pid}")))
    (app,) = [p for p in shell.children() if "interlock_demo.cli" in " ".join(p.cmdline())]
    return app


def _run_until_workers(terminal: Terminal, app: psutil.Process) -> list[psutil.Process]:
    """Press Enter and return the run's worker processes once there are some."""
    terminal.keys("Enter")
    deadline = time.monotonic() + 30
    while not (workers := workers_under(app)) and time.monotonic() < deadline:
        time.sleep(POLL_S)  # another process's children: no event to wait on
    assert workers, f"the run started no worker process; the screen:\n{terminal.screen()}"
    return workers


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP", "SIGINT", "C-c"])
def test_a_stop_signal_gives_the_terminal_back_and_leaves_no_worker(
    terminal: Terminal, stop: str
) -> None:
    """SIGTERM, SIGHUP or SIGINT to the app mid-run, or Ctrl-C typed once, ends it as q does:
    out of the alternate screen, mouse reporting off, cursor shown, and no worker process
    left behind. A signal exits 128 + its number, as a shell reports it; Ctrl-C exits 0."""
    app = _idle_app(terminal)
    assert terminal.tmux("display-message", "-p", "-t", "demo", "#{alternate_on}").strip() == "1"
    workers = _run_until_workers(terminal, app)
    if stop.startswith("SIG"):
        app.send_signal(getattr(signal, stop))
        code = 128 + getattr(signal, stop)
    else:
        terminal.keys(stop)
        code = 0
    after = terminal.wait_for(lambda s: EXITED in s, 15, "the app's exit")
    assert f"{EXITED} {code}" in after
    flags = terminal.tmux(
        "display-message", "-p", "-t", "demo", "#{alternate_on} #{mouse_any_flag} #{cursor_flag}"
    )
    assert flags.split() == ["0", "0", "1"], f"alternate, mouse, cursor: {flags}"
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"workers left after {stop}: {alive}"


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_closing_the_terminal_mid_run_ends_the_app_and_its_workers(
    terminal: Terminal, attempt: int
) -> None:
    """The terminal's window closed mid-run (its tmux server killed): the app and every
    worker end. Before, Textual restarted its terminal mode on the hang-up's SIGCONT, or
    waited on writes to the dead terminal, and the app stayed on at full CPU after its
    workers were stopped (3 of 14 closes, 6 more in 135 quits closed at once). A close is
    a race against what the app is doing, so it is tried three times."""
    app = _idle_app(terminal)
    workers = _run_until_workers(terminal, app)
    terminal.tmux("kill-server")
    _, alive = psutil.wait_procs([app, *workers], timeout=30)
    for p in alive:
        p.kill()
    assert not alive, f"left running after the terminal closed (attempt {attempt}): {alive}"
