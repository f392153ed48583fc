"""`bench/stores.py` runs on both backends and reports what issue 15 asks for (counts only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "stores.py"


def test_bench_reports_both_stores_side_by_side(pg_dsn: str, tmp_path: Path) -> None:
    """A small run: 3 commits per action on each backend, every N without errors, a line
    per figure, and the Markdown table; timings are printed, never judged."""
    table = tmp_path / "stores.md"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--pg", pg_dsn, "--actions", "5", "--repeats", "1",
         "--per-process", "3", "--min-total", "3", "--processes", "1,2",
         "--markdown", str(table)],
        capture_output=True, text=True, cwd=ROOT, timeout=110,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for backend in ("sqlite", "postgresql"):
        assert f"{backend} commits per action: 3.00" in lines
        for figure in ("statements per action", "one durable commit", "bookkeeping vs one commit"):
            assert any(line.startswith(f"{backend} {figure}: ") for line in lines), figure
        for n, total in ((1, 3), (2, 6)):
            assert any(
                line.startswith(f"{backend} N={n}: ") and line.endswith(f"errors 0 of {total}")
                for line in lines
            ), (backend, n)
    text = table.read_text()
    assert "| postgresql | 3.00 |" in text and "| sqlite | 3.00 |" in text
    assert "| 2 |" in text
