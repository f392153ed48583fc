"""`e2e-report` keeps the rules every other command keeps, checked on its real runs.

Its child runs get the workers' environment allow-list (a token planted in the report's
environment never reaches them), its folders and files under INTERLOCK_HOME are private,
and a SIGTERM to the report takes its runs, and everything they started, with it.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from interlock_demo.engine.temporal.probe import temporal_unavailable
from tests.helpers.headless import ROOT, SCRUBBED, workers_under

PLANTED = {
    "AWS_SECRET_ACCESS_KEY": "MadeUpAwsSecretForTheReport0000000000000",
    "GITHUB_TOKEN": "ghp_MadeUpGithubTokenForTheReport000000",
}


def _wait_for(what: str, check: object, timeout_s: float = 60.0) -> object:
    """Poll `check()` (a cheap read of /proc or the disk) until it is truthy, or fail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)  # polling another process's state: there is no event to wait on
    pytest.fail(f"{what} did not happen within {timeout_s:g} s")


def _is_run(proc: psutil.Process) -> bool:
    """Whether `proc` has exec'd the headless run (not a fork of the report yet)."""
    try:
        return "--headless" in proc.cmdline()
    except psutil.NoSuchProcess:
        return False


@pytest.mark.skipif(temporal_unavailable() is not None, reason="the report needs both engines")
def test_report_runs_get_the_allow_list_private_files_and_die_with_it(tmp_path: Path) -> None:
    """A planted AWS_SECRET_ACCESS_KEY and GITHUB_TOKEN do not reach the report's run; its
    folders are 0700 and files 0600; on SIGTERM no run or worker of it is left alive."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(PLANTED, INTERLOCK_HOME=str(home))
    report = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interlock_demo.cli",
            "e2e-report",
            "--parallel",
            "1",
            "--out",
            str(tmp_path / "report.md"),
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(report.pid)
    seen: set[psutil.Process] = set()
    try:
        # A child read between its fork and its exec still holds the report's environment:
        # wait for the run's own command line, which only the exec gives it.
        run = _wait_for("a run started", lambda: [c for c in parent.children() if _is_run(c)])
        assert isinstance(run, list)
        child = run[0]
        seen = {parent, child}
        environ = child.environ()
        for name in PLANTED:
            assert name not in environ, f"{name} reached the report's run"
        # A worker, not any child: the Stripe SDK's first request runs a short `uname -p`.
        workers = _wait_for("a worker started", lambda: workers_under(child))
        assert isinstance(workers, list)
        seen = {parent, child, *workers, *child.children(recursive=True)}
        for path in [p for p in (home / "demo" / "e2e-report").rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_dir():
                assert mode == 0o700, f"{path} is {mode:o}"
            elif path.is_file():
                assert mode & 0o077 == 0, f"{path} is {mode:o}"
        report.send_signal(signal.SIGTERM)
        report.wait(30)
        _, alive = psutil.wait_procs(list(seen - {parent}), timeout=10)
        assert not alive, f"left running after the report's SIGTERM: {alive}"
    finally:
        for proc in seen | {parent}:
            try:
                for below in proc.children(recursive=True):
                    below.kill()
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        report.wait(10)
