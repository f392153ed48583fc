"""`bench/emulator_scale.py` runs as its own process, prints its lines and refuses bad sizes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "emulator_scale.py"
LOAD = re.compile(r"(.*); load average \d+\.\d\d \d+\.\d\d \d+\.\d\d")


def test_bench_runs_and_prints_one_figure_a_line() -> None:
    """`bench/emulator_scale.py` with tiny sizes prints its eight lines."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "10,30", "--rounds", "2", "--batch", "3"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = [LOAD.fullmatch(line) for line in done.stdout.splitlines()]
    assert all(loaded), done.stdout  # every figure with the load average beside it
    lines = [m[1] for m in loaded if m]
    number = r"\d+\.\d+"
    per_size = (
        rf"(create|list) at (10|30) refunds: median {number} ms "
        rf"\(range {number}-{number} ms over 2 rounds\)"
    )
    assert all(re.fullmatch(per_size, line) for line in lines[:4]), lines
    assert re.fullmatch(rf"create at 30 vs 10 refunds: {number}x", lines[4]), lines
    assert re.fullmatch(rf"list at 30 vs 10 refunds: {number}x", lines[5]), lines
    assert len(lines) == 6


def test_bench_refuses_bad_sizes() -> None:
    """Bad sizes are bad usage: exit 2 with a message."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "ten"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "sizes" in done.stderr
