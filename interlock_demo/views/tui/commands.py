"""The command palette's domain commands, named `area: verb` (ctrl+p in the app).

The app lists its commands (`DemoApp.palette_commands`); this provider only matches and
offers them, so a command and its key always run the same action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

# A palette command: its name, its help line and what it does.
PaletteCommand = tuple[str, str, Callable[[], Any]]


@runtime_checkable
class PaletteSource(Protocol):
    """An app that lists its domain commands for the palette."""

    def palette_commands(self) -> Iterator[PaletteCommand]:
        """The commands: name, help, what it does."""
        ...


class DemoCommands(Provider):
    """Scenarios, runs, modes, switches, views and the presenter's mode."""

    def _commands(self) -> list[PaletteCommand]:
        app = self.app
        return list(app.palette_commands()) if isinstance(app, PaletteSource) else []

    async def discover(self) -> Hits:
        """Every command, for the palette opened with nothing typed."""
        for name, help_text, callback in self._commands():
            # Help is markup to the palette: `[temporal]` in a pip hint would vanish as a tag.
            yield DiscoveryHit(name, callback, help=escape(help_text))

    async def search(self, query: str) -> Hits:
        """The commands whose name matches what was typed, best first."""
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=escape(help_text))
