"""The columns, one row each: what every view shows of a column and what the engine asks of it.

A column's titles (its pane's on each engine, the verdict strip's one word), its story,
and what sets it apart: whether its restarted worker reads the payment first, whether it
acts through interlock's gate (and so signs receipts), whether it is shown only when
asked for. Code asks the row (`column_kind(name).signs_receipts`) instead of comparing
column names; a unit test holds every scenario's truth table rows to these names. The
columns a run shows are the ones that are not optional and the optional ones it chose: a
set of rows (`OPTIONAL` or none), never a flag. The workers' own side of a column (its
story as code, the module `workers/<name>.py`) stays in `workers/`, which imports nothing
of the demo.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from interlock_demo.errors import UsageError


@dataclass(frozen=True)
class ColumnKind:
    """One column: its titles, its story and its capabilities."""

    name: str
    # Its pane's title on the standalone engine, and on the Temporal engine.
    title: str
    temporal_title: str
    # Its one word in the verdict strip.
    short_title: str
    # What it shows, in words (the app's `c` says it of the checked column).
    story: str
    # Its restarted worker reads the payment before it acts (a read fault can hit it); the
    # standard worker resends on its saved decision without reading anything.
    reads_on_restart: bool = False
    # It acts through interlock's gate: its decision is the journal's intent, it signs
    # receipts (only its workers get the receipt key; its card carries the receipt and
    # verify()), it spends the approval's cap, and a refusal of it can be re-approved.
    signs_receipts: bool = False
    # Shown only when asked for (`--checked`, `c` in the app, "checked" over HTTP).
    optional: bool = False

    def title_on(self, engine: str) -> str:
        """Its pane's title on this engine (`standalone` or `temporal`)."""
        return self.temporal_title if engine == "temporal" else self.title


COLUMN_KINDS: dict[str, ColumnKind] = {
    k.name: k
    for k in (
        ColumnKind(
            "standard",
            title="Standard agent",
            temporal_title="Temporal alone",
            short_title="Standard",
            story="the common agent pattern: a saved decision, retried under its idempotency key",
        ),
        ColumnKind(
            "interlock",
            title="Interlock",
            temporal_title="Temporal + Interlock",
            short_title="Interlock",
            story="the refund behind interlock's gate: journaled, claimed, re-checked, receipted",
            reads_on_restart=True,
            signs_receipts=True,
        ),
        ColumnKind(
            "checked",
            title="Hand-written check",
            temporal_title="Temporal + hand-written check",
            short_title="Checked",
            story="a hand-written re-check of the refunds and the approval before the retry",
            reads_on_restart=True,
            optional=True,
        ),
    )
}
"""Every column, by name, in the order the screen and the run JSON show them."""


def column_kind(name: str) -> ColumnKind:
    """The column called `name`; `UsageError` naming the columns there are."""
    found = COLUMN_KINDS.get(name)
    if found is None:
        raise UsageError(f"unknown column {name!r}; the columns are {', '.join(COLUMN_KINDS)}")
    return found


OPTIONAL: frozenset[ColumnKind] = frozenset(k for k in COLUMN_KINDS.values() if k.optional)
"""Every optional column: what the demo shows unless told to leave them out."""


def shown_columns(optional: Collection[ColumnKind] = frozenset()) -> list[str]:
    """The columns a run has: every one that is not optional, and those of `optional`."""
    return [k.name for k in COLUMN_KINDS.values() if not k.optional or k in optional]


def optional_flags(optional: Collection[ColumnKind]) -> dict[str, bool]:
    """Each optional column's name and whether `optional` has it: how the run JSON's
    settings, the HTTP body and the command line say it (`"checked": true`)."""
    return {k.name: k in optional for k in COLUMN_KINDS.values() if k.optional}


def optional_from(
    flags: Mapping[str, object], base: Collection[ColumnKind]
) -> frozenset[ColumnKind]:
    """The optional columns `flags` (an optional column's name -> a bool) choose; a column
    they leave out stays as it is in `base`."""
    return frozenset(k for k in OPTIONAL if flags.get(k.name, k in base))


def gated_column() -> ColumnKind:
    """The column that acts through interlock's gate: the one a re-approval is for."""
    return next(k for k in COLUMN_KINDS.values() if k.signs_receipts)
