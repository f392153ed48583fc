"""`interlock-demo sweep`: kill it everywhere.

Every crash point on a refund's path x every outage action (none, a refund by hand, a
revocation) x every column, each a real run (offline: real processes and real SIGKILL).
For each cell: what is in Stripe against what is wanted (DESIGN §3's rule), the outcome
the column reported, and whether that report was true. Exits 1 when interlock is wrong
or untruthful in any cell (the standard and checked columns are expected to be wrong in
some cells: that is what the table shows).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TextIO

from interlock_demo.engine import Engine, RunRequest
from interlock_demo.run import Run
from interlock_demo.settings import DemoConfig
from scenarios import COLUMNS, SWEEP_CRASH_POINTS, SWEEP_OUTAGES, sweep_scenario

EXIT_OK = 0
EXIT_INTERLOCK_WRONG = 1
EXIT_UNFINISHED = 3
# Runs at once: each run is three columns of worker processes on a 2-core machine.
DEFAULT_PARALLEL = 3


@dataclass(frozen=True)
class Cell:
    """One column's result in one (crash point, outage) run."""

    crash_point: str
    outage: str
    column: str
    ok: bool
    truthful: bool
    wanted: dict[str, int]
    got: dict[str, int]
    reported: str
    reason: str | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """The cell as JSON."""
        return {
            "crash_point": self.crash_point,
            "outage": self.outage,
            "column": self.column,
            "ok": self.ok,
            "truthful": self.truthful,
            "wanted": self.wanted,
            "got": self.got,
            "reported": self.reported,
            "reason": self.reason,
            "error": self.error,
        }


def cells_of(run: Run, crash_point: str, outage: str) -> list[Cell]:
    """The cells a finished sweep run produced, one per column."""
    cells = []
    for col in run.columns:
        refunds = [r for r in (col.stripe or {}).get("refunds", []) if _counts(r)]
        got = {
            "agent_refunds": sum(1 for r in refunds if r["by"] == "agent"),
            "hand_refunds": sum(1 for r in refunds if r["by"] == "hand"),
            "refunded_total": int((col.stripe or {}).get("refunded_total", 0)),
        }
        wanted = {
            "agent_refunds": int(col.wanted.get("agent_refunds", 0)),
            "hand_refunds": int(col.wanted.get("hand_refunds", 0)),
            "refunded_total": int(col.wanted.get("refunded_total", 0)),
        }
        outcome = col.outcome or {}
        cells.append(
            Cell(
                crash_point=crash_point,
                outage=outage,
                column=col.name,
                ok=bool(col.ok) and col.error is None,
                truthful=bool(col.truthful) and col.error is None,
                wanted=wanted,
                got=got,
                reported=str(outcome.get("status") or "none"),
                reason=outcome.get("reason"),
                error=col.error or run.error,
            )
        )
    return cells


def _counts(refund: dict[str, Any]) -> bool:
    return refund.get("status") in ("pending", "requires_action", "succeeded")


def run_sweep(
    config: DemoConfig,
    *,
    crash_points: Iterable[str] = SWEEP_CRASH_POINTS,
    outages: Iterable[str] = SWEEP_OUTAGES,
    parallel: int = DEFAULT_PARALLEL,
    progress: TextIO | None = None,
) -> list[Cell]:
    """Run every cell; returns the cells in table order."""
    plan = [(c, o) for c in crash_points for o in outages]
    results: dict[tuple[str, str], list[Cell]] = {}
    lock = threading.Lock()
    engines = [Engine(config) for _ in range(max(1, parallel))]
    free = list(engines)

    def one(cell: tuple[str, str]) -> None:
        crash, outage = cell
        with lock:
            engine = free.pop()
        try:
            sc = sweep_scenario(crash, outage)  # type: ignore[arg-type]
            run = engine.run(RunRequest(sc.id, checked=True))
            found = cells_of(run, crash, outage)
        finally:
            with lock:
                free.append(engine)
        with lock:
            results[cell] = found
            if progress is not None:
                marks = " ".join(
                    f"{c.column}:{'ok' if c.ok else 'WRONG'}{'' if c.truthful else '/UNTRUE'}"
                    for c in found
                )
                progress.write(
                    f"[{len(results):2d}/{len(plan)}] {crash:<16} {outage:<12} {marks}\n"
                )
                progress.flush()

    try:
        with ThreadPoolExecutor(max_workers=len(engines), thread_name_prefix="sweep") as pool:
            for future in [pool.submit(one, cell) for cell in plan]:
                future.result()
    finally:
        for engine in engines:
            engine.close()
    return [cell for key in plan for cell in results[key]]


def table(cells: list[Cell]) -> str:
    """The sweep as a Markdown table: one row per (crash point, outage), a cell per column."""
    columns = [c for c in COLUMNS if any(cell.column == c for cell in cells)]
    head = "| crash point | outage | wanted | " + " | ".join(columns) + " |"
    rule = "|---|---|---|" + "---|" * len(columns)
    rows = [head, rule]
    keyed = {(c.crash_point, c.outage, c.column): c for c in cells}
    seen: list[tuple[str, str]] = []
    for c in cells:
        if (c.crash_point, c.outage) not in seen:
            seen.append((c.crash_point, c.outage))
    for crash, outage in seen:
        first = next(c for c in cells if (c.crash_point, c.outage) == (crash, outage))
        wanted = _money(first.wanted)
        parts = []
        for column in columns:
            cell = keyed.get((crash, outage, column))
            parts.append(_cell_text(cell) if cell else "")
        rows.append(f"| {crash} | {outage} | {wanted} | " + " | ".join(parts) + " |")
    return "\n".join(rows) + "\n"


def _money(counts: dict[str, int]) -> str:
    parts = []
    if counts["agent_refunds"]:
        parts.append(f"agent x{counts['agent_refunds']}")
    if counts["hand_refunds"]:
        parts.append(f"hand x{counts['hand_refunds']}")
    return " + ".join(parts) or "none"


def _cell_text(cell: Cell) -> str:
    if cell.error:
        return f"ERROR: {cell.error}"
    verdict = "✓" if cell.ok else "✗ wrong"
    truth = "" if cell.truthful else ", untruthful"
    return f"{verdict}{truth}: {_money(cell.got)}; reported {cell.reported}"


def interlock_failures(cells: list[Cell]) -> list[Cell]:
    """Cells where interlock is wrong or untruthful."""
    return [c for c in cells if c.column == "interlock" and not (c.ok and c.truthful)]


def main_sweep(
    config: DemoConfig, *, as_json: bool, parallel: int, out: TextIO = sys.stdout
) -> int:
    """The command: run, print the table (or JSON), and return the exit code."""
    sys.stderr.write(
        f"sweep: {len(SWEEP_CRASH_POINTS)} crash points x {len(SWEEP_OUTAGES)} outages x "
        f"{len(COLUMNS)} columns, {config.mode} mode, {parallel} runs at a time\n"
    )
    cells = run_sweep(config, parallel=parallel, progress=sys.stderr)
    failures = interlock_failures(cells)
    if as_json:
        out.write(
            json.dumps({"mode": config.mode, "cells": [c.to_json() for c in cells]}, indent=2)
        )
        out.write("\n")
    else:
        out.write(table(cells))
        verdict = (
            "right and truthful in every cell"
            if not failures
            else f"WRONG or untruthful in {len(failures)} cells"
        )
        out.write(f"\ninterlock: {verdict}\n")
    out.flush()
    if any(c.error for c in cells):
        return EXIT_UNFINISHED
    return EXIT_INTERLOCK_WRONG if failures else EXIT_OK
