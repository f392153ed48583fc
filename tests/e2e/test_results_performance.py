"""`results/performance.md`: the performance table filled from the benchmarks' own output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from interlock_demo.reports import performance
from interlock_demo.reports.performance import Bench

ROOT = Path(__file__).resolve().parents[2]
# Every benchmark at its smallest, so the table is filled from real output in seconds.
SMALL = (
    Bench("gate", "gate_overhead.py", ("--actions", "5", "--repeats", "2")),
    # Temporal's arms start a dev server: tests/e2e/test_bench_peers.py runs them.
    Bench(
        "peers", "peers.py", ("--actions", "3", "--rounds", "2", "--warmup", "1", "--no-temporal")
    ),
    Bench("recovery", "recovery.py", ("--runs", "1", "--scenario", "after-answer")),
    Bench("scale", "scale.py", ("--sizes", "60,120", "--repeats", "1", "--actions", "3")),
    Bench("emulator", "emulator_scale.py", ("--sizes", "100,300", "--rounds", "1")),
)


@pytest.mark.timeout(300)
def test_every_row_of_the_table_is_measured_and_temporal_is_cited(tmp_path: Path) -> None:
    """Each row's "measured now" cell holds a figure from a benchmark (none left as a dash),
    Temporal's retry is cited from the engine comparison, and each benchmark's output is
    kept below the table with the command that reproduces it."""
    shutil.copy(ROOT / "results" / "e2e_offline.md", tmp_path / "e2e_offline.md")

    assert performance.write_performance(tmp_path, SMALL) == 0

    text = (tmp_path / "performance.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| what | before the performance work | measured now | target |"
    assert len(rows) == 10
    for row in rows[1:]:
        measured = row.split(" | ")[2]
        assert "—" not in measured, row
    adopted = next(r for r in rows if r.startswith("| after-answer: SIGKILL to `adopted`"))
    assert "Temporal retries a killed activity only once its 12 s heartbeat timeout" in adopted
    gate = next(r for r in rows if r.startswith("| gate bookkeeping per action"))
    assert "2 commits" in gate
    peers = next(r for r in rows if r.startswith("| same, against DBOS"))
    assert "the gate in a Temporal activity not measured: left out (--no-temporal)" in peers
    # The load average beside each figure stays in the benchmark's output, not the table.
    assert all("load average" not in row for row in rows)
    assert "; load average " in text.split("## `python bench/gate_overhead.py")[1]
    for bench in SMALL:
        assert f"## `{bench.command}`" in text


def test_a_failing_benchmark_leaves_the_file_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A benchmark that exits non-zero stops the step with its error; nothing is written."""
    (tmp_path / "performance.md").write_text("earlier\n")
    bad = (Bench("gate", "gate_overhead.py", ("--actions", "0")),)

    assert performance.write_performance(tmp_path, bad) == 1

    assert (tmp_path / "performance.md").read_text() == "earlier\n"
    err = capsys.readouterr().err
    assert "python bench/gate_overhead.py --actions 0 exited 2" in err
    assert "--actions must be at least 1" in err


def test_the_benchmarks_are_found_in_the_checkout_it_is_run_from(tmp_path: Path) -> None:
    """Run from a checkout (or a folder in it), the benchmarks are that checkout's `bench/`,
    wherever the package was installed; elsewhere they are the package's own, if any."""
    bench = tmp_path / "checkout" / "bench"
    bench.mkdir(parents=True)
    for b in performance.BENCHES:
        (bench / b.script).write_text("")
    inside = tmp_path / "checkout" / "docs"
    inside.mkdir()
    assert performance.checkout(inside) == tmp_path / "checkout"
    assert performance.unavailable(inside) is None
    assert performance.checkout(tmp_path) == performance.ROOT
