"""The app's layouts by terminal size, in one place: the app lays its columns out by them,
`doctor` says which one a terminal gets and what it hides. Nothing here imports Textual."""

from __future__ import annotations

from dataclasses import dataclass

# From this width the three columns sit side by side with full cards; from COMPACT with
# compact cards; below it one column at a time.
WIDE = 160
COMPACT = 100


@dataclass(frozen=True)
class Layout:
    """A layout: its name, the terminal it is made for, and what it leaves out there."""

    name: str
    columns: int
    rows: int
    hides: str


LAYOUTS = (
    Layout("wide", WIDE, 45, "nothing"),
    Layout(
        "compact",
        COMPACT,
        30,
        "the cards' read-back lines and all but the deciding check, each event cut to a "
        "line; c, m, t and s are in the palette (ctrl+p)",
    ),
    Layout(
        "single",
        80,
        24,
        "all columns but one at a time (left/right), the story (only what is wanted in "
        "Stripe), the events of a finished column; z, c, m, t and s are in the palette",
    ),
)
SMALLEST = (LAYOUTS[-1].columns, LAYOUTS[-1].rows)
LARGEST = (LAYOUTS[0].columns, LAYOUTS[0].rows)


def layout_for(columns: int) -> Layout:
    """The layout the app gives a terminal this wide (the narrowest below 80)."""
    return next((lay for lay in LAYOUTS if columns >= lay.columns), LAYOUTS[-1])
