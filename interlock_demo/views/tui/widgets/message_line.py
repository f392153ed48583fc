"""The message line above the footer: what the app says to the presenter.

Notifications in Textual float over the screen's corner, where the verdicts are; here the
app's messages get a line of their own, so nothing ever covers what the room is reading.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

SEVERITY_STYLE = {"information": "", "warning": "bold yellow", "error": "bold red"}


class MessageLine(Static):
    """The newest message (one line, two when long), with its severity as a class and a
    colour."""

    def say(self, message: str, severity: str = "information") -> None:
        """Show `message` (plain text) until the next one."""
        self.set_class(severity == "warning", "-warning")
        self.set_class(severity == "error", "-error")
        self.update(Text(message, style=SEVERITY_STYLE.get(severity, "")))
