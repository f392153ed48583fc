"""Run one column's worker once: its story, then the outcome it reports.

The same code runs in a real worker process (`workers.standalone`, which SIGKILLs itself
at the crash point), in a Temporal activity (`workers.temporal_workflows`) and in-process
for mock runs (where the crash point raises `SimulatedCrash`).

A column's worker is the module named after it (`workers.checked` for `checked`, a `-`
spelled `_`), holding its `run` and `GATED`: adding a column's worker is adding that
module. Only the case's own column's module is imported, so a worker on the restart path
loads no other column's code.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType

from interlock.testing import CrashPoint
from workers.context import WorkerContext
from workers.protocol import ColumnOutcome, EventKind
from workers.protocol.words import outcome_text, said_at


@dataclasses.dataclass(frozen=True)
class Story:
    """A column's worker: what it runs, and whether it runs through a gate (and so reaches
    the gate's own crash points, `CrashPoint.gate_only`)."""

    run: Callable[[WorkerContext], ColumnOutcome]
    gated: bool


def story(column: str) -> Story:
    """The worker of the column called `column`; `ValueError` when it has none."""
    name = f"{__package__}.{column.replace('-', '_')}"
    module: ModuleType | None = None
    if column.replace("-", "_").isidentifier():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            # Only the column's own module missing means it has no worker; a module it
            # imports missing is that module's error.
            if e.name != name:
                raise
    run, gated = getattr(module, "run", None), getattr(module, "GATED", None)
    if not callable(run) or not isinstance(gated, bool):
        raise ValueError(
            f"the case names column {column!r}, which has no worker (a module {name} with "
            "`run` and `GATED`); write the case file again"
        )
    return Story(run, gated)


def run_worker(ctx: WorkerContext) -> ColumnOutcome:
    """Run the column's worker once; reports its outcome and returns it.

    A crash point the story never reaches is refused before anything runs: asked to die
    there, the worker would run through and report as if it had been spared.
    """
    worker = story(ctx.case.column)
    point = ctx.crash_point
    if point is not None and point.gate_only and not worker.gated:
        reached = [p.value for p in CrashPoint if not (p.gate_only or p.held)]
        raise ValueError(
            f"the {ctx.case.column} worker has no gate, so it never reaches the crash point "
            f"{point.value} ({point.doc}); its crash points are {', '.join(reached)}"
        )
    outcome = worker.run(ctx)
    report(ctx, outcome)
    return outcome


def report(ctx: WorkerContext, outcome: ColumnOutcome) -> None:
    """Emit the `outcome` event: its line and the outcome's wire form as its data, whose
    reason names what answered (the run JSON and reports say what the screen says)."""
    outcome = dataclasses.replace(outcome, reason=said_at(outcome.reason, ctx.answerer))
    ctx.emit(EventKind.OUTCOME, outcome_text(outcome, ctx.answerer), **outcome.to_wire())
