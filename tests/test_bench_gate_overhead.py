"""`bench/gate_overhead.py` runs and reports what docs/design.md §7 asks for (counts only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "gate_overhead.py"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
    )


def test_bench_prints_its_report_with_the_counts_on_target() -> None:
    """A short run prints the four report lines, with 3 commits and 1 list + 1 create per action."""
    done = _bench("--actions", "5")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gate overhead over 5 actions: in-memory payments")
    assert lines[1] == "commits per action: 3 (target 3, floor 2)"
    assert lines[2] == "stripe calls per first attempt: 1 list, 1 create"
    assert lines[3] == (
        "per recovery: 1 list, 1 create (died before the call); "
        "1 list, 0 create (died after the refund landed)"
    )
    number = r"\d+\.\d+"
    assert re.fullmatch(
        rf"gate bookkeeping: {number} ms/action = {number} x one durable commit "
        rf"\({number} ms\); target <= 4x",
        lines[4],
    ), lines[4]
    assert len(lines) == 5


def test_bench_refuses_a_bad_count() -> None:
    """`--actions 0` is bad usage: exit 2 and a message, no report."""
    done = _bench("--actions", "0")

    assert done.returncode == 2
    assert done.stdout == ""
    assert "--actions must be at least 1" in done.stderr
