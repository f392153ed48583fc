"""Run one column's worker once: its story, then the outcome it reports.

The same code runs in a real worker process (`workers.standalone`, which SIGKILLs itself
at the crash point), in a Temporal activity (`workers.temporal_workflows`) and in-process
for mock runs (where the crash point raises `SimulatedCrash`).
"""

from __future__ import annotations

from collections.abc import Callable

from workers import checked, interlock, standard
from workers.context import WorkerContext
from workers.protocol import ColumnOutcome, EventKind
from workers.texts import outcome_text

# Each column's story, by the column's name.
COLUMNS: dict[str, Callable[[WorkerContext], ColumnOutcome]] = {
    "standard": standard.run,
    "checked": checked.run,
    "interlock": interlock.run,
}


def run_worker(ctx: WorkerContext) -> ColumnOutcome:
    """Run the column's worker once; reports its outcome and returns it."""
    story = COLUMNS.get(ctx.case.column)
    if story is None:
        raise ValueError(
            f"the case names column {ctx.case.column!r}, which is not one of "
            f"{', '.join(COLUMNS)}; write the case file again"
        )
    outcome = story(ctx)
    report(ctx, outcome)
    return outcome


def report(ctx: WorkerContext, outcome: ColumnOutcome) -> None:
    """Emit the `outcome` event: its line and the outcome's wire form as its data."""
    ctx.emit(EventKind.OUTCOME, outcome_text(outcome, ctx.answerer), **outcome.to_wire())
