"""The command palette's domain commands, named `area: verb` (ctrl+p in the app).

The app lists its commands (`DemoApp.palette_commands`); this provider only matches and
offers them, so a command and its key always run the same action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider


class DemoCommands(Provider):
    """Scenarios, runs, modes, switches, views and the presenter's mode."""

    def _commands(self) -> list[tuple[str, str, Callable[[], Any]]]:
        commands: Callable[[], Any] = getattr(self.app, "palette_commands")  # noqa: B009
        return list(commands())

    async def discover(self) -> Hits:
        """Every command, for the palette opened with nothing typed."""
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        """The commands whose name matches what was typed, best first."""
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
