"""The keys panel: every key of the app in one list, opened with `?` (or the palette's
"Keys") and closed with escape or `?`.

Textual's own help panel lists only the keys that are available this moment (a presenter
looking for `space` before presenter mode is on never finds it) and does not close with
escape. Here every key is listed, those not available now dimmed with when they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


@dataclass(frozen=True)
class KeyRow:
    """One key as the panel lists it: how it is typed, its name, what it does, and whether
    it does anything now."""

    keys: str
    name: str
    help: str
    available: bool


class KeysScreen(ModalScreen[None]):
    """Every key of the app, with what it does; escape or `?` closes it."""

    DEFAULT_CSS = """
    KeysScreen {
        align: center middle;
    }
    KeysScreen > VerticalScroll {
        width: 100%;
        max-width: 120;
        height: auto;
        max-height: 100%;
        border: round $primary;
        border-title-style: bold;
        border-subtitle-color: $text-muted;
        background: $panel;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", id="keys-close", tooltip="Close the keys panel"),
        Binding("question_mark", "dismiss", "Close", id="keys-close-again", show=False, tooltip=""),
    ]

    def __init__(self, rows: list[KeyRow]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(justify="right", no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column()
        for row in self.rows:
            style = "" if row.available else "dim"
            key = Text(row.keys, style="bold" if row.available else "dim bold")
            help_text = row.help if row.available else f"{row.help} (not now)"
            table.add_row(key, Text(row.name, style=style), Text(help_text, style=style))
        with VerticalScroll() as box:
            box.border_title = "Keys"
            box.border_subtitle = "escape closes"
            yield Static(table)
