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

Offline, the crash sweep has one row more, `store rewritten` (`REWRITE_ROW`): a run whose
worker dies right after its receipt's commit (`after-outcome`), in a journal of its own;
then a writer of that journal who holds the gate's key rewrites the refund's receipt to
`refused`, signs it again and builds the receipt log again under a head signed with the
key (`reports.rewrite`). Interlock's cell is right only if `verify()` with the public key
list and the anchor names that receipt as altered after it was anchored, while without the
anchor every signature, hash and tree head holds (`caught`); its problems are in the JSON
(`problems`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from interlock import Store
from interlock.testing import UNSETTLED_REPORTS, CrashPoint
from interlock_demo.core.columns import COLUMN_KINDS, OPTIONAL, column_kind, shown_columns
from interlock_demo.core.run import Column, Run
from interlock_demo.core.verdict import tally
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.exit_codes import ExitCode
from interlock_demo.reports.rewrite import REWRITTEN_TO, caught, rewrite_and_verify
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import TEMPORAL
from interlock_demo.settings.paths import Paths
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

REWRITE_ROW = "store rewritten"
"""The row whose journal is rewritten after its run by a writer holding the gate's key."""
# Its run: the worker dies between its receipt's commit and numbering it into the log, so
# the restarted worker's catch-up is what logs and anchors the receipt that is rewritten.
REWRITE_CRASH_POINT = CrashPoint.AFTER_OUTCOME
REWRITE_OUTAGE = "none"


@dataclass(frozen=True)
class Cell:
    """One column's result in one (crash point or fault, outage) run.

    `reported` is the column's last report; `reports` every worker's, in order. `lease`
    (interlock only): the approval's cap, spent and reserved cents, read from the store;
    `verified` (interlock only): whether `verify()` with the Stripe reader found no problem.
    `tamper` names the row when the journal was rewritten after the run (`REWRITE_ROW`);
    then interlock's `caught` says whether `verify()` with the anchor named the rewritten
    receipt, and `problems` are what that `verify()` found.
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
    tamper: str | None = None
    caught: bool | None = None
    problems: tuple[str, ...] = ()

    @property
    def overspent(self) -> bool:
        """Whether the approval was spent (or reserved) past its cap."""
        return self.lease is not None and (
            self.lease["spent"] + self.lease["reserved"] > self.lease["cap"]
        )

    @property
    def axis(self) -> str:
        """What the row varies: the fault, or the crash point (the rewrite's row names it)."""
        if self.tamper is not None:
            return f"{self.tamper} ({self.crash_point})"
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
            "tamper": self.tamper,
            "caught": self.caught,
            "problems": list(self.problems),
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

    rewriting = faults is None and config.run_mode.emulator
    pool = ThreadPoolExecutor(max_workers=len(engines), thread_name_prefix="sweep")
    store: Store | None = None
    rewritten: list[Cell] = []
    try:
        with on_stop(halt):
            store = config.open_store()
            for future in [pool.submit(one, cell) for cell in plan]:
                future.result()
            if rewriting and not halted.is_set():
                rewritten = _rewrite_row(config, engines, lock, halted)
                if progress is not None and rewritten:
                    marks = " ".join(
                        f"{c.column}:{'ok' if c.ok else 'WRONG'}"
                        + ("" if c.caught is not False else "/NOT-CAUGHT")
                        for c in rewritten
                    )
                    progress.write(f"[rewrite] {REWRITE_ROW:<20} {REWRITE_OUTAGE:<12} {marks}\n")
                    progress.flush()
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
    return [cell for key in plan for cell in results[key]] + rewritten


def _rewrite_row(
    config: DemoConfig, engines: list[Engine], lock: threading.Lock, halted: threading.Event
) -> list[Cell]:
    """The `store rewritten` row: its run in a journal and home of their own (a temporary
    folder in the demo's, removed after), the rewrite, and `verify()` with the anchor.

    The journal is always a SQLite file there, whatever `config.store` is: the rewrite is
    done in the file, and no other cell's journal may be rewritten.
    """
    home = Path(tempfile.mkdtemp(prefix="sweep-rewrite-", dir=config.paths.prepare().demo))
    try:
        own = dataclasses.replace(config, paths=Paths(home), store=None)
        engine = Engine(own)
        with lock:
            if halted.is_set():
                return []
            engines.append(engine)  # a stop now kills its workers too
        try:
            sc = sweep_scenario(REWRITE_CRASH_POINT, REWRITE_OUTAGE)  # type: ignore[arg-type]
            run = engine.run(RunChoice(own, sc.id, optional=OPTIONAL))
        finally:
            engine.close()
        if halted.is_set():
            return []
        store = own.open_store()
        try:
            cells = cells_of(run, REWRITE_CRASH_POINT, REWRITE_OUTAGE, store=store)
        finally:
            store.close()
        return [_rewritten(cell, run, own) for cell in cells]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _rewritten(cell: Cell, run: Run, config: DemoConfig) -> Cell:
    """`cell` of the rewrite's run; interlock's after its receipt was rewritten."""
    cell = dataclasses.replace(cell, tamper=REWRITE_ROW)
    if not column_kind(cell.column).signs_receipts or cell.error:
        return cell
    outcome = run.column(cell.column).outcome
    if outcome is None or not outcome.action_id or outcome.status not in ("sent", "adopted"):
        # Nothing was refunded: there is no refund's receipt to rewrite.
        return dataclasses.replace(cell, caught=False, problems=("no refund's receipt",))
    anchored, alone = rewrite_and_verify(config, outcome.action_id)
    return dataclasses.replace(
        cell,
        caught=caught(anchored, alone, outcome.action_id),
        problems=tuple(anchored.problems),
    )


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
    if cell.caught is False:
        lease += ", the rewrite was NOT caught"
    reports = " → ".join(_shown(r) for r in cell.reports or (cell.reported,))
    text = f"{verdict}{truth}{lease}: {_money(cell.got)}; reported {reports}"
    if cell.caught:
        text += f"; receipt rewritten to {REWRITTEN_TO}, re-signed: caught by the anchor"
    return text


def _shown(report: str) -> str:
    # Pending and unknown claim nothing: shown as unknown, never as done (docs/design.md §3).
    return f"unknown ({report})" if report in UNSETTLED_REPORTS and report != "unknown" else report


def interlock_failures(cells: list[Cell]) -> list[Cell]:
    """Cells where interlock is wrong or untruthful, its lease was overspent, `verify()`
    found a problem in its run, or a rewrite of its journal was not caught."""
    return [
        c
        for c in cells
        if column_kind(c.column).signs_receipts
        and (
            not (c.ok and c.truthful)
            or c.overspent
            or c.verified is False
            or (c.tamper is not None and not c.caught)
        )
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
    rewrite = f" + the {REWRITE_ROW!r} row" if not faults and config.run_mode.emulator else ""
    sys.stderr.write(
        f"sweep: {rows} x {len(SWEEP_OUTAGES)} outages x "
        f"{len(COLUMN_KINDS)} columns{rewrite}, {config.mode} mode, {parallel} runs at a time\n"
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
