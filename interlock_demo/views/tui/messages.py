"""Messages the engine's listener posts to the app; no widget is touched from a thread."""

from __future__ import annotations

from textual.message import Message


class RunUpdated(Message):
    """A run changed. Bursts coalesce: a pending update for the same run is replaced."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def can_replace(self, message: Message) -> bool:
        """A newer update of the same run makes an older pending one redundant."""
        return isinstance(message, RunUpdated) and message.run_id == self.run_id
