"""mypy beside the suite: started when collection ends, its answer collected by its test.

mypy strict over the tree is the suite's slowest test (about 70 s of CPU on a quiet
machine), while most of the suite waits on worker processes, servers and claims. So when
`tests/e2e/test_lint.py::test_mypy_is_clean` is selected, mypy starts as soon as the
session knows it, and the test waits for that process's answer; nothing is asserted until
then, and the test fails as before on any finding. A session that ends first (`-x`, a
stop signal) kills it before the leak check.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
MYPY_TEST = "tests/e2e/test_lint.py::test_mypy_is_clean"
MYPY = (sys.executable, "-m", "mypy", "--no-error-summary")

_running: dict[tuple[str, ...], tuple[subprocess.Popen[bytes], IO[bytes]]] = {}


def start(node_ids: Iterable[str]) -> None:
    """Start mypy now if its test is among `node_ids`."""
    if MYPY_TEST in node_ids and MYPY not in _running:
        # A file, not a pipe: nobody reads a pipe until the test runs, and a full one
        # would stall mypy.
        out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by run() or stop()
        proc = subprocess.Popen(MYPY, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _running[MYPY] = (proc, out)


def run(args: tuple[str, ...], timeout: float) -> tuple[int, str]:
    """`args`' exit code and output: from the run started early, else run now."""
    started = _running.pop(args, None)
    if started is None:
        done = subprocess.run(
            args, cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout
        )
        return done.returncode, done.stdout + done.stderr
    proc, out = started
    with out:
        code = proc.wait(timeout)
        out.seek(0)
        return code, out.read().decode(errors="replace")


def stop() -> None:
    """Kill and reap what no test collected."""
    for proc, out in _running.values():
        proc.kill()
        proc.wait()
        out.close()
    _running.clear()
