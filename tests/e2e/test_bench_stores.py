"""`bench/stores.py` runs on both backends and reports the store comparison (counts only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "stores.py"
N = r"\d+\.\d+"
LOAD = re.compile(rf"; load average {N} {N} {N}")


def _figure(line: str) -> str:
    """The line less the load average it must carry (where it names its N, the load of
    that N's run), so the figure can be read."""
    found = list(LOAD.finditer(line))
    assert found, f"no load average beside: {line}"
    return line[: found[0].start()] + line[found[0].end() :]


def test_bench_reports_both_stores_side_by_side(pg_dsn: str, tmp_path: Path) -> None:
    """A small run: 2 commits per action on each backend, every N without errors, a line
    per figure, and the Markdown table; timings are printed, never judged."""
    table = tmp_path / "stores.md"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--pg", pg_dsn, "--actions", "5", "--repeats", "1",
         "--per-process", "3", "--min-total", "3", "--processes", "1,2", "--sample-at", "2",
         "--markdown", str(table)],
        capture_output=True, text=True, cwd=ROOT, timeout=110,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    lines = [_figure(line) for line in done.stdout.splitlines()]
    for backend in ("sqlite", "postgresql"):
        assert f"{backend} commits per action: 2.00" in lines
        for figure in ("statements per action", "one durable commit", "bookkeeping vs one commit"):
            assert any(line.startswith(f"{backend} {figure}: ") for line in lines), figure
        for n, total in ((1, 3), (2, 6)):
            assert any(
                line.startswith(f"{backend} N={n}: ") and line.endswith(f"errors 0 of {total}")
                for line in lines
            ), (backend, n)
    # Counted, not timed: the first look (the lease, the action, the turn and its holder,
    # the clock) with its COMMIT in one trip; each commit's locks and clock in one, its
    # writes and COMMIT in another.
    assert any(re.match(r"postgresql round trips per action: 5\b", line) for line in lines), lines
    assert "sqlite durability: journal_mode=wal synchronous=FULL" in lines
    assert "postgresql durability: synchronous_commit=on fsync=on" in lines
    assert any(line.startswith("postgres throughput N=1: ") for line in lines)
    assert "left pending: 0" in lines
    [waits] = [line for line in lines if line.startswith("postgres N=2 backends: ")]
    shares = [
        int(part.rsplit(" ", 1)[1].rstrip("%")) for part in waits.split(": ", 1)[1].split(", ")
    ]
    assert shares and 97 <= sum(shares) <= 103, waits  # every sample counted once, rounded
    [busy] = [line for line in lines if line.startswith("machine CPU busy during postgres N=2: ")]
    assert 0 <= int(busy.rsplit(" ", 1)[1].rstrip("%")) <= 100, busy
    [one] = [line for line in lines if line.startswith("machine CPU busy during postgres N=1: ")]
    [ceiling] = [line for line in lines if line.startswith("postgres scaling ceiling from CPU: ")]
    busy_one = int(one.rsplit(" ", 1)[1].rstrip("%")) / 100
    top = float(ceiling.rsplit(" ", 1)[1].rstrip("x"))
    # The ceiling is the inverse of the N=1 share, to the printed precision of both.
    assert 1 / (busy_one + 0.005) - 0.05 <= top <= 1 / max(busy_one - 0.005, 1e-9) + 0.05, (
        one,
        ceiling,
    )
    text = table.read_text()
    assert "| postgresql | 2.00 |" in text and "| sqlite | 2.00 |" in text
    assert "| 2 |" in text
