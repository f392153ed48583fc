"""`bench/transport.py` runs against the emulator and prints its figures (shapes only:
the connection count is reported by the benchmark, speed is never judged here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "transport.py"
LOAD = re.compile(r"(.*); load average \d+\.\d\d \d+\.\d\d \d+\.\d\d")


def test_transport_bench_prints_connections_and_submit_time() -> None:
    """A short run prints the connections per 100 actions and the submit time."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--actions", "20"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    loaded = [LOAD.fullmatch(line) for line in done.stdout.splitlines()]
    assert all(loaded), done.stdout  # every figure with the load average beside it
    lines = [m[1] for m in loaded if m]
    assert re.fullmatch(
        r"connections opened per 100 actions: \d+(\.\d+)? \(over 20; target <= 2\)", lines[0]
    ), lines
    n = r"\d+\.\d{2}"
    assert re.fullmatch(
        rf"submit against the emulator: median {n} ms \(range {n}-{n} ms over 20\)", lines[1]
    ), lines
