"""`bench/gate_overhead.py` runs and reports what docs/design.md §7 asks for (counts only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gate_overhead.py"
# Statements per first attempt on main before the performance work cut them.
STATEMENTS_BEFORE = 23
LOAD = re.compile(r"(.*); load average \d+\.\d\d \d+\.\d\d \d+\.\d\d")


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
    )


def test_bench_prints_its_report_with_the_counts_on_target() -> None:
    """A short run prints one figure a line: 2 commits, the receipt log's apart, its statement
    count, 1 list + 1 create
    per action, and the timings as a median with a range (shapes only, never values), each
    with the load average beside it."""
    done = _bench("--actions", "5", "--repeats", "2")

    assert done.returncode == 0, done.stdout + done.stderr
    loaded = [LOAD.fullmatch(line) for line in done.stdout.splitlines()]
    assert all(loaded), done.stdout
    lines = [m[1] for m in loaded if m]
    assert lines[0].startswith("gate overhead: 2 repeats of 5 actions, in-memory payments")
    assert lines[1] == "durable commits per first attempt: 2 (target 2)"
    # Five actions settle no 100 receipts: the log is not caught up inside them.
    assert lines[2] == "receipt-log commits per action: 0.00 (one per catch-up of the log)"
    lines.pop(2)
    statements = re.fullmatch(
        r"statements per action: (\d+) \(BEGIN and COMMIT included\)", lines[2]
    )
    assert statements is not None, lines[2]
    # A read and two transactions of BEGIN, at least one write and COMMIT each, and no
    # more than the 23 statements an action took before the performance work's cuts.
    assert 7 <= int(statements[1]) <= STATEMENTS_BEFORE, lines[2]
    assert lines[3] == "stripe calls per first attempt: 1 list, 1 create"
    assert lines[4] == (
        "per recovery: 1 list, 1 create (died before the call); "
        "1 list, 0 create (died after the refund landed)"
    )
    n = r"\d+\.\d+"
    assert re.fullmatch(
        rf"bookkeeping vs one commit: {n}x \(median of 2 repeats, range {n}-{n}x\); "
        r"target <= 2\.6x",
        lines[5],
    ), lines[5]
    for line, label in ((lines[6], "bookkeeping per action"), (lines[7], "one durable commit")):
        assert re.fullmatch(rf"{label}: {n} ms \(median of 2 repeats, range {n}-{n} ms\)", line), (
            line
        )
    assert len(lines) == 8


def test_bench_refuses_a_bad_count() -> None:
    """`--actions 0` and `--repeats 0` are bad usage: exit 2 and a message, no report."""
    for flag in ("--actions", "--repeats"):
        done = _bench(flag, "0")

        assert done.returncode == 2
        assert done.stdout == ""
        assert f"{flag} must be at least 1" in done.stderr
