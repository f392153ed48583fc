"""`stripe-emulator` (`python -m interlock`'s and `interlock-demo`'s) as its own process: a
free port, and a control token that only its starter is told."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from interlock.testing.emulator import (
    TOKEN_ENV,
    EmulatorControl,
    EmulatorControlError,
)


@pytest.mark.parametrize(
    ("program", "started_ignoring_sigint", "stop_signal"),
    [
        ("interlock", False, signal.SIGINT),
        ("interlock_demo.cli", False, signal.SIGINT),
        # A script's background job (`... stripe-emulator &`) starts with SIGINT ignored.
        ("interlock", True, signal.SIGINT),
        ("interlock", False, signal.SIGTERM),
        ("interlock", False, signal.SIGHUP),
    ],
    ids=["interlock", "interlock_demo.cli", "sigint-ignored-at-start", "sigterm", "sighup"],
)
def test_cli_emulator_takes_a_free_port_and_tells_only_its_starter_the_token(
    tmp_path: Any, program: str, started_ignoring_sigint: bool, stop_signal: signal.Signals
) -> None:
    """`stripe-emulator` (the library's command, and the demo's, which is the same) picks a
    free port, prints address and token on stderr, nothing on stdout; the token then arms a
    fault from another process's point of view; Ctrl-C, `kill` or a closed terminal stops
    it cleanly, with one line saying so."""
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    command = [sys.executable, "-m", program, "stripe-emulator"]
    if started_ignoring_sigint:  # an ignored signal stays ignored across exec
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()
    stderr = proc.stderr
    assert stderr is not None

    def read() -> None:
        for line in stderr:
            lines.put(line)

    # Daemon: if the process outlives the test, its pipe must not hold pytest open at exit.
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        address = lines.get(timeout=20)
        token_line = lines.get(timeout=5)
        url = re.search(r"http://127\.0\.0\.1:(\d+)", address)
        token = re.search(r"Control token: (\S+)", token_line)
        assert url is not None and token is not None, (address, token_line)
        assert int(url.group(1)) not in (0, 12111)
        control = EmulatorControl(url.group(0), token.group(1))
        assert control.add_fault("error_429")["kind"] == "error_429"
        with pytest.raises(EmulatorControlError, match="403"):
            EmulatorControl(url.group(0), "z" * 32).clear_faults()
    finally:
        proc.send_signal(stop_signal)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # Never leave it running: kill it, reap it, then fail on what the signal did not do.
            proc.kill()
            proc.wait()
            raise
        finally:
            # stderr has one reader, the thread: it ends at the pipe's end, after the exit.
            # (communicate() here read the same pipe at once, and closed it under the thread
            # on a loaded machine.)
            reader.join(30)
    assert not reader.is_alive()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    stderr.close()
    assert out == ""
    assert proc.returncode == 0
    rest = "".join(lines.get_nowait() for _ in range(lines.qsize()))
    assert "Traceback" not in rest, rest
    words = "Ctrl-C" if stop_signal == signal.SIGINT else stop_signal.name
    prog = "python -m interlock" if program == "interlock" else "interlock-demo"
    assert f"{prog} stripe-emulator on {url.group(0)} stopped by {words}: " in rest, rest
