"""`interlock-demo sweep`: kill it everywhere, and answer it every way.

Every crash point on a refund's path x every outage action (none, a refund by hand, a
revocation) x every column, each a real run (offline: real processes and real SIGKILL).
For each cell: what is in Stripe against what is wanted (docs/design.md §3's rule), the outcome
the column reported, and whether that report was true. Exits 1 when interlock is wrong
or untruthful in any cell, or its lease was spent past its cap (the standard and checked
columns are expected to be wrong in some cells: that is what the table shows).

`--faults` sweeps Stripe's answer instead of the crash point (`scenarios.FAULTS`): the
emulator answers the first refund call of each column's worker with the fault, and the
outage action runs while that call is held at Stripe (the fault's `on_start`, in the
emulator's request thread), so the call reached Stripe before the action. Offline only:
only the emulator can give these answers on demand.

Fault cells have no crash point: the fault is the event, and the worker lives to handle
the answer, since what is tested is what a worker does with an answer that settles
nothing while the world changes. Killing it as well would hand the answer to recovery
and test the crash axis again. The standard and checked workers report such an answer
as `unknown` and a supervisor restarts them once, as after a crash: their restart
resends on the saved decision (checked re-checks first). A restart comes at once (in
`in-progress-409` it meets the first call still running), or after the call landed in
`timeout-then-lands`. One fault needs a restart by nature: in `read-401-on-recovery` the
worker dies right after Stripe's answer (`after-answer`), and the restarted worker's first
read gets a 401. A refused key is a configuration error, not an answer about the refund:
the gate raises it and settles nothing, so the honest report is `pending` (`unknown` for
the other workers) naming the key problem; support then fixes the key and the worker runs
once more, and the cell's final report is what that run settles. Both reports are in the
cell (`reports`). The standard worker's restart reads nothing, so no read fault is armed
for it. Every card is read once the held call has ended at Stripe.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TextIO

from interlock import Store
from interlock.testing import UNSETTLED_REPORTS, CrashPoint
from interlock_demo.core.columns import COLUMN_KINDS, OPTIONAL, column_kind, shown_columns
from interlock_demo.core.run import Column, Run
from interlock_demo.core.verdict import tally
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import TEMPORAL
from interlock_demo.stopping import Stopped, on_stop
from scenarios import (
    FAULTS,
    SWEEP_CRASH_POINTS,
    SWEEP_FAULTS,
    SWEEP_OUTAGES,
    Scenario,
    fault_scenario,
    sweep_scenario,
)
from workers.protocol import EventKind

# Runs at once: each run is three columns of worker processes on a 2-core machine.
DEFAULT_PARALLEL = 3


@dataclass(frozen=True)
class Cell:
    """One column's result in one (crash point or fault, outage) run.

    `reported` is the column's last report; `reports` every worker's, in order. `lease`
    (interlock only): the approval's cap, spent and reserved cents, read from the store;
    `verified` (interlock only): whether `verify()` with the Stripe reader found no problem.
    """

    crash_point: CrashPoint | None
    outage: str
    column: str
    ok: bool
    truthful: bool
    wanted: dict[str, int]
    got: dict[str, int]
    reported: str
    reason: str | None
    error: str | None
    fault: str | None = None
    reports: tuple[str, ...] = ()
    lease: dict[str, int] | None = None
    verified: bool | None = None

    @property
    def overspent(self) -> bool:
        """Whether the approval was spent (or reserved) past its cap."""
        return self.lease is not None and (
            self.lease["spent"] + self.lease["reserved"] > self.lease["cap"]
        )

    @property
    def axis(self) -> str:
        """What the row varies: the fault, or the crash point."""
        return self.fault if self.fault is not None else str(self.crash_point)

    def to_json(self) -> dict[str, Any]:
        """The cell as JSON."""
        return {
            "crash_point": None if self.crash_point is None else self.crash_point.value,
            "fault": self.fault,
            "outage": self.outage,
            "column": self.column,
            "ok": self.ok,
            "truthful": self.truthful,
            "wanted": self.wanted,
            "got": self.got,
            "reported": self.reported,
            "reports": list(self.reports),
            "reason": self.reason,
            "lease": self.lease,
            "verified": self.verified,
            "error": self.error,
        }


def cells_of(
    run: Run,
    crash_point: CrashPoint | None,
    outage: str,
    *,
    fault: str | None = None,
    store: Store | None = None,
) -> list[Cell]:
    """The cells a finished sweep run produced, one per column (`store`: for the lease)."""
    cells = []
    for col in run.columns:
        agent, hand = (0, 0) if col.stripe is None else tally(col.stripe)
        got = {
            "agent_refunds": agent,
            "hand_refunds": hand,
            "refunded_total": 0 if col.stripe is None else col.stripe.refunded_total,
        }
        wanted = {
            "agent_refunds": 0 if col.wanted is None else col.wanted.agent_refunds,
            "hand_refunds": 0 if col.wanted is None else col.wanted.hand_refunds,
            "refunded_total": 0 if col.wanted is None else col.wanted.refunded_total,
        }
        outcome = col.outcome
        gated = column_kind(col.name).signs_receipts
        cells.append(
            Cell(
                crash_point=crash_point,
                outage=outage,
                column=col.name,
                ok=bool(col.ok) and col.error is None,
                truthful=bool(col.truthful) and col.error is None,
                wanted=wanted,
                got=got,
                reported="none" if outcome is None else outcome.status,
                reason=None if outcome is None else outcome.reason,
                error=col.error or run.error,
                fault=fault,
                reports=_reports(col),
                lease=_lease(store, col) if gated else None,
                verified=(col.verify or {}).get("ok") if gated else None,
            )
        )
    return cells


def _reports(col: Column) -> tuple[str, ...]:
    # Each worker's report is its `outcome` event, whose fields are the outcome's.
    return tuple(str(e.data.get("status")) for e in col.events if e.kind == EventKind.OUTCOME)


def _lease(store: Store | None, col: Column) -> dict[str, int] | None:
    lease = store.lease(col.lease_id) if store is not None and col.lease_id else None
    if lease is None:
        return None
    return {
        "cap": lease.cap,
        "spent": lease.spent,
        "reserved": sum(lease.reservations.values()),
    }


def run_sweep(
    config: DemoConfig,
    *,
    crash_points: Iterable[CrashPoint] = SWEEP_CRASH_POINTS,
    outages: Iterable[str] = SWEEP_OUTAGES,
    faults: Iterable[str] | None = None,
    parallel: int = DEFAULT_PARALLEL,
    progress: TextIO | None = None,
) -> list[Cell]:
    """Run every cell; returns the cells in table order.

    With `faults` (ids of `scenarios.FAULTS`) the rows are faults instead of crash points.
    A stop signal (`interlock_demo.stopping`) kills the runs going and starts no more; the
    `Stopped` raised then says how many cells finished, stopped and never started.
    """
    rows = list(faults) if faults is not None else list(crash_points)
    plan = [(r, o) for r in rows for o in outages]
    results: dict[tuple[str, str], list[Cell]] = {}
    started: set[tuple[str, str]] = set()
    lock = threading.Lock()
    engines = [Engine(config) for _ in range(max(1, parallel))]
    free = list(engines)
    halted = threading.Event()

    def halt() -> None:
        halted.set()
        for engine in engines:
            engine.close()  # kills its run's workers; a run not yet begun starts none

    def one(cell: tuple[str, str]) -> None:
        row, outage = cell
        with lock:
            if halted.is_set():
                return
            started.add(cell)
            engine = free.pop()
        try:
            sc: Scenario = (
                sweep_scenario(CrashPoint(row), outage)  # type: ignore[arg-type]
                if faults is None
                else fault_scenario(row, outage)  # type: ignore[arg-type]
            )
            run = engine.run(RunChoice(config, sc.id, optional=OPTIONAL))
        finally:
            with lock:
                free.append(engine)
        with lock:
            if halted.is_set():
                return  # its workers were killed: a stopped cell, not a finished one
            results[cell] = found = cells_of(
                run,
                CrashPoint(row) if faults is None else FAULTS[row].crash_point,
                outage,
                fault=None if faults is None else row,
                store=store,
            )
            if progress is not None:
                marks = " ".join(
                    f"{c.column}:{'ok' if c.ok else 'WRONG'}{'' if c.truthful else '/UNTRUE'}"
                    f"{'/OVERSPENT' if c.overspent else ''}"
                    for c in found
                )
                progress.write(f"[{len(results):2d}/{len(plan)}] {row:<20} {outage:<12} {marks}\n")
                progress.flush()

    pool = ThreadPoolExecutor(max_workers=len(engines), thread_name_prefix="sweep")
    store: Store | None = None
    try:
        with on_stop(halt):
            store = config.open_store()
            for future in [pool.submit(one, cell) for cell in plan]:
                future.result()
    except Stopped as stop:
        # The runs going end as their workers die; wait for them before counting.
        pool.shutdown(cancel_futures=True)
        per_run = len(shown_columns(OPTIONAL))
        done, going = len(results), len(started) - len(results)
        raise stop.having(
            f"{done * per_run} of {len(plan) * per_run} cells finished, "
            f"{going * per_run} stopped, {(len(plan) - done - going) * per_run} not started"
        ) from None
    finally:
        pool.shutdown()
        for engine in engines:
            engine.close()
        if store is not None:
            store.close()
    return [cell for key in plan for cell in results[key]]


def table(cells: list[Cell]) -> str:
    """The sweep as a Markdown table: one row per (crash point or fault, outage), a cell
    per column."""
    columns = [c for c in COLUMN_KINDS if any(cell.column == c for cell in cells)]
    axis = "fault" if any(c.fault is not None for c in cells) else "crash point"
    head = f"| {axis} | outage | wanted | " + " | ".join(columns) + " |"
    rule = "|---|---|---|" + "---|" * len(columns)
    lines = [head, rule]
    keyed = {(c.axis, c.outage, c.column): c for c in cells}
    seen: list[tuple[str, str]] = []
    for c in cells:
        if (c.axis, c.outage) not in seen:
            seen.append((c.axis, c.outage))
    for row, outage in seen:
        first = next(c for c in cells if (c.axis, c.outage) == (row, outage))
        wanted = _money(first.wanted)
        parts = []
        for column in columns:
            cell = keyed.get((row, outage, column))
            parts.append(_cell_text(cell) if cell else "")
        lines.append(f"| {row} | {outage} | {wanted} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


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
    lease = ""
    if cell.overspent and cell.lease is not None:
        lease = f", LEASE OVERSPENT ({cell.lease['spent'] + cell.lease['reserved']} cents)"
    if cell.verified is False:
        lease += ", verify() found problems"
    reports = " → ".join(_shown(r) for r in cell.reports or (cell.reported,))
    return f"{verdict}{truth}{lease}: {_money(cell.got)}; reported {reports}"


def _shown(report: str) -> str:
    # Pending and unknown claim nothing: shown as unknown, never as done (docs/design.md §3).
    return f"unknown ({report})" if report in UNSETTLED_REPORTS and report != "unknown" else report


def interlock_failures(cells: list[Cell]) -> list[Cell]:
    """Cells where interlock is wrong or untruthful, its lease was overspent, or `verify()`
    found a problem."""
    return [
        c
        for c in cells
        if column_kind(c.column).signs_receipts
        and (not (c.ok and c.truthful) or c.overspent or c.verified is False)
    ]


def main_sweep(
    config: DemoConfig,
    *,
    as_json: bool,
    parallel: int,
    faults: bool = False,
    out: TextIO = sys.stdout,
) -> int:
    """The command: run, print the table (or JSON), and return the exit code."""
    if faults and (not config.run_mode.emulator or config.engine == TEMPORAL):
        sys.stderr.write(
            "interlock-demo: sweep --faults needs --offline with the standalone engine: only "
            "the loopback emulator can give Stripe's faulty answers on demand\n"
        )
        return ExitCode.USAGE
    rows = f"{len(SWEEP_FAULTS)} faults" if faults else f"{len(SWEEP_CRASH_POINTS)} crash points"
    sys.stderr.write(
        f"sweep: {rows} x {len(SWEEP_OUTAGES)} outages x "
        f"{len(COLUMN_KINDS)} columns, {config.mode} mode, {parallel} runs at a time\n"
    )
    try:
        cells = run_sweep(
            config, faults=SWEEP_FAULTS if faults else None, parallel=parallel, progress=sys.stderr
        )
    except Stopped as stop:
        raise stop.having("nothing written") from None
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
        return ExitCode.UNFINISHED
    return ExitCode.INTERLOCK_WRONG if failures else ExitCode.OK
