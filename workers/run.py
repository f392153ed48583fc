"""Run one column's worker once: its story, then the outcome it reports.

The same code runs in a real worker process (`workers.standalone`, which SIGKILLs itself
at the crash point), in a Temporal activity (`workers.temporal_workflows`) and in-process
for mock runs (where the crash point raises `SimulatedCrash`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from interlock.testing import CrashPoint
from workers import checked, interlock, standard
from workers.context import WorkerContext
from workers.protocol import ColumnOutcome, EventKind
from workers.texts import outcome_text, said_at


@dataclasses.dataclass(frozen=True)
class Story:
    """A column's worker: what it runs, and whether it runs through a gate (and so reaches
    the gate's own crash points, `CrashPoint.gate_only`)."""

    run: Callable[[WorkerContext], ColumnOutcome]
    gated: bool


# Each column's story, by the column's name.
COLUMNS: dict[str, Story] = {
    "standard": Story(standard.run, gated=False),
    "checked": Story(checked.run, gated=False),
    "interlock": Story(interlock.run, gated=True),
}


def run_worker(ctx: WorkerContext) -> ColumnOutcome:
    """Run the column's worker once; reports its outcome and returns it.

    A crash point the story never reaches is refused before anything runs: asked to die
    there, the worker would run through and report as if it had been spared.
    """
    story = COLUMNS.get(ctx.case.column)
    if story is None:
        raise ValueError(
            f"the case names column {ctx.case.column!r}, which is not one of "
            f"{', '.join(COLUMNS)}; write the case file again"
        )
    point = ctx.crash_point
    if point is not None and point.gate_only and not story.gated:
        reached = [p.value for p in CrashPoint if not (p.gate_only or p.held)]
        raise ValueError(
            f"the {ctx.case.column} worker has no gate, so it never reaches the crash point "
            f"{point.value} ({point.doc}); its crash points are {', '.join(reached)}"
        )
    outcome = story.run(ctx)
    report(ctx, outcome)
    return outcome


def report(ctx: WorkerContext, outcome: ColumnOutcome) -> None:
    """Emit the `outcome` event: its line and the outcome's wire form as its data, whose
    reason names what answered (the run JSON and reports say what the screen says)."""
    outcome = dataclasses.replace(outcome, reason=said_at(outcome.reason, ctx.answerer))
    ctx.emit(EventKind.OUTCOME, outcome_text(outcome, ctx.answerer), **outcome.to_wire())
