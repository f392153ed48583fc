"""`bench/scale.py` prints every figure at every size, one a line (shapes only: timings are
reported by the benchmark, never judged by a test)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from interlock import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "scale.py"
N = r"\d+\.\d+"
LOAD = rf"; load average {N} {N} {N}"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_scale_prints_each_figure_at_each_size_and_the_growth() -> None:
    """Two small sizes: six figures each (gate, its ratio, restart reads, store open, verify
    time and peak RSS) and verify's own CPU seconds and peak with every signature checked
    and with heads only, then the growth of five of them; every line with the load average
    its figures were measured under (a growth line, both sizes')."""
    done = _bench("--sizes", "60,120", "--repeats", "2", "--actions", "3")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(
        rf"scale: SQLite WAL synchronous=FULL, demo-shaped settled actions, sizes 60, 120{LOAD}",
        lines[0],
    ), lines[0]
    figures = [
        ("gate per action", " ms"),
        ("gate vs one commit", "x"),
        ("restart reads", " ms"),
        ("store open", " ms"),
        ("verify time", " s"),
        ("verify peak RSS", " MB"),
    ]
    for at, size in ((1, "60"), (9, "120")):
        for line, (name, unit) in zip(lines[at : at + 6], figures, strict=True):
            x = r"\d+" if unit == " MB" else N
            spread = rf"{x}{unit} \(median of 2, range {x}-{x}{unit}\)"
            assert re.fullmatch(rf"{size} actions: {name}: {spread}{LOAD}", line), line
        # Verify's own CPU and peak, every signature checked and heads only.
        for line, how in zip(lines[at + 6 : at + 8], ("", " --heads-only"), strict=True):
            own = rf"{N} s cpu, \d+ MB peak \(median of 2\)"
            assert re.fullmatch(rf"verify{how} at {size}: {own}{LOAD}", line), line
    growth = ["gate per action", "restart reads", "store open", "verify time", "verify peak RSS"]
    for line, name in zip(lines[17:], growth, strict=True):
        loads = rf"; load average {N} {N} {N} at 60, {N} {N} {N} at 120"
        assert re.fullmatch(rf"growth 120 over 60: {name} {N}x{loads}", line), line
    assert len(lines) == 22


def test_scale_refuses_sizes_out_of_order() -> None:
    """Sizes must ascend: exit 2 and a message, no report."""
    done = _bench("--sizes", "100,10")

    assert done.returncode == 2
    assert done.stdout == ""
    assert "--sizes must be ascending positive integers" in done.stderr


def test_verify_peak_rss_is_the_childs_own_not_the_benchmarks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a process holding 300 MB, verify of a small store still reports its own
    peak: the figure the child read (VmHWM), never the parent's carried across exec."""
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH)
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name while the module runs.
    monkeypatch.setitem(sys.modules, spec.name, scale)
    spec.loader.exec_module(scale)
    store = tmp_path / "small.db"
    SQLiteStore(store).close()
    ballast = b"x" * (300 * 2**20)  # resident: every page written

    _, peak = scale.verify_child(store)

    assert psutil.Process().memory_info().rss > len(ballast)
    assert peak < 150 * 2**20, f"verify of an empty store peaked at {peak / 2**20:.0f} MB"
