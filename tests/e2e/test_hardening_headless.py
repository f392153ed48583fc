"""Headless runs stopped by a signal: SIGHUP, SIGTERM and SIGINT alike.

Each case starts a real offline headless run (real workers, short timings), waits until a
worker has started, and sends the signal to the CLI. The contract: exit 3, the run's JSON
on stdout with an `error` that names the signal in words (never an internal class name
such as `_ColumnFailed`), and no worker left behind.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.headless import CLI, ROOT, Lines, cli_env, reap

pytestmark = pytest.mark.e2e

DEADLINE_S = 60.0
# A class name in an error text: `_ColumnFailed`, `RuntimeError:`, `KeyError(`.
CLASS_NAME = re.compile(r"\b_[A-Z]\w+|\b[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:Error|Failed|Exception)\b")


def _workers_under(home: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "workers.standalone" in cmd and str(home) in cmd:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.NoSuchProcess:
                continue
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name
)
def test_signal_mid_run_exits_3_with_the_error_in_words(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A stop signal mid-run: exit 3, the JSON printed, its error naming the signal in words."""
    home = tmp_path / "interlock-home"
    proc = subprocess.Popen(
        [*CLI, "--checked", "--scenario", "hand-refund"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=cli_env(home),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = Lines(proc.stderr, DEADLINE_S)
        lines.until("worker started")
        proc.send_signal(sig)
        stdout = proc.stdout.read()
        code = proc.wait(DEADLINE_S)
        rest = lines.rest()
    finally:
        reap(proc)
    assert code == 3, (code, rest)
    doc = json.loads(stdout)
    assert doc["error"].startswith(f"stopped by {sig.name} before the run finished"), doc["error"]
    texts = [doc["error"], *(c["error"] or "" for c in doc["columns"])]
    assert not [t for t in texts if CLASS_NAME.search(t)], texts
    assert not CLASS_NAME.search(rest), rest
    deadline = time.monotonic() + 5.0
    while _workers_under(home) and time.monotonic() < deadline:
        psutil.wait_procs(_workers_under(home), timeout=0.1)
    assert _workers_under(home) == []
