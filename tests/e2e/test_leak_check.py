"""The session-end leak check: a leaked child process or non-daemon thread fails the run.

A small suite that leaks both runs under this repository's `tests/conftest.py` hook in its
own pytest process; its tests pass, yet the session must exit 1 naming both leftovers, and
the leaked child must be dead afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

LEAKY = """
import os, pathlib, subprocess, sys, threading

def test_leaks_a_child_and_a_thread():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pathlib.Path(os.environ["LEAKED_PID_FILE"]).write_text(str(child.pid))
    # Ends by itself after the check has looked, so this inner pytest can exit.
    threading.Thread(target=threading.Event().wait, args=(8,), name="leaky-thread").start()
"""


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import pytest_sessionfinish\n")
    (suite / "test_inner.py").write_text(body)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "LEAKED_PID_FILE": str(tmp_path / "child.pid")},
        timeout=120,
    )


def test_a_leaked_child_and_thread_fail_the_session_by_name(tmp_path: Path) -> None:
    """The inner test passes, the session exits 1 naming the child and the thread, and the
    child has been killed."""
    done = _run(tmp_path, LEAKY)
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1, done.stdout
    assert re.search(r"child process left running \(killed\): pid \d+ .*time.sleep", done.stdout)
    assert "non-daemon thread left running: <Thread(leaky-thread" in done.stdout
    pid = int((tmp_path / "child.pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_clean_session_passes(tmp_path: Path) -> None:
    """Without leftovers the check says nothing and the exit status is the tests'."""
    done = _run(tmp_path, "def test_nothing():\n    assert 1 + 1 == 2\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leak check" not in done.stdout
