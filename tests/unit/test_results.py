"""`interlock-demo results`: what it writes and what it skips, without the slow steps.

The mock runs are real (in-process, a second or two); the offline runs, the sweep and the
screenshots are replaced where a test is about the command's bookkeeping, not about them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import Run
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.engine.temporal import probe
from interlock_demo.reports import performance, results, sweep
from interlock_demo.settings.config import resolve
from interlock_demo.views.tui import screenshots

MISSING = "the Temporal engine needs temporalio: pip install '.[temporal]'"


def test_results_without_the_temporal_extra_skips_the_comparison_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the README's first install (no temporal extra) every other step runs and the
    command exits 0, naming the skipped comparison and why."""
    ran: list[str] = []
    monkeypatch.setattr(probe, "temporal_unavailable", lambda: MISSING)
    monkeypatch.setattr(results, "write_runs", lambda config, out: ran.append(config.mode))
    monkeypatch.setattr(results, "write_sweep", lambda config, out: ran.append("sweep"))
    monkeypatch.setattr(results, "write_sweep_faults", lambda config, out: ran.append("faults"))
    monkeypatch.setattr(screenshots, "main", lambda out: ran.append("screenshots") and 0)
    monkeypatch.setattr(results, "write_postgres", lambda config, out: ran.append("pg") and 0)
    monkeypatch.setattr(performance, "write_performance", lambda out: ran.append("perf") and 0)
    monkeypatch.setenv("INTERLOCK_HOME", str(tmp_path / "home"))
    assert results.main_results(tmp_path / "results") == 0
    assert ran == ["mock", "offline", "sweep", "faults", "screenshots", "pg", "perf"]
    err = capsys.readouterr().err
    assert f"results: engine comparison (offline) skipped: {MISSING}" in err
    assert not (tmp_path / "results" / "e2e_offline.md").exists()


def test_runs_table_says_whether_each_report_was_true(tmp_path: Path) -> None:
    """runs_mock.md has a truthful column: the checked column's after-answer stop is a false
    alarm even though the money in Stripe is right."""
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    path = results.write_runs(config, tmp_path)
    lines = path.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| scenario |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert "truthful" in columns
    rows = {
        (cells[0], cells[1]): dict(zip(columns, cells, strict=True))
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in lines
            if line.startswith("| ") and not line.startswith(("| scenario", "|---"))
        )
    }
    false_alarm = rows[("after-answer", "checked")]
    assert false_alarm["verdict"] == "✓ right"
    assert false_alarm["truthful"] == "NO: a false alarm (its own refund exists)"
    assert rows[("after-answer", "interlock")]["truthful"] == "yes"
    assert rows[("hand-refund", "standard")]["truthful"] == "yes"


def test_without_rsvg_convert_no_stale_png_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PNG from an earlier screen is removed when a new SVG cannot be converted."""
    svg = tmp_path / "idle.svg"
    svg.write_text("<svg></svg>")
    stale = svg.with_suffix(".png")
    stale.write_bytes(b"an earlier screen")
    monkeypatch.setattr(screenshots.shutil, "which", lambda name: None)
    assert screenshots.pngs_for([svg]) == [svg]
    assert not stale.exists()


def test_a_sweep_cell_reads_each_report_from_its_outcome_event_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep table's reports are the outcome events' statuses, whatever their lines say."""
    add_event = Run.add_event

    def reworded(self: Run, column: str, kind: str, text: str, *rest: Any) -> None:
        add_event(self, column, kind, f"«{text[::-1]}»", *rest)

    monkeypatch.setattr(Run, "add_event", reworded)
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config)
    try:
        run = engine.run(RunChoice(config, "after-answer", optional=OPTIONAL))
    finally:
        engine.close()
    reports = {c.column: c.reports for c in sweep.cells_of(run, "after-answer", "none")}
    assert reports == {"standard": ("sent",), "interlock": ("adopted",), "checked": ("stopped",)}
