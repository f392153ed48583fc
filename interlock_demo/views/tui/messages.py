"""Messages the engine's threads post to the app; no widget is touched from a thread."""

from __future__ import annotations

from textual.message import Message

from interlock_demo.core.run import Run


class RunChanged(Message):
    """A run changed; the app reads it on its own thread (`Run.snapshot()`) and redraws.

    The message carries the run, not a copy of it: a copy taken on each change would cost
    the engine's threads a deep copy per event, and the run must never wait for its view.
    Bursts coalesce: a pending message for the same run is replaced by the newer one.
    """

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run

    def can_replace(self, message: Message) -> bool:
        """A newer change of the same run makes an older pending one redundant."""
        return isinstance(message, RunChanged) and message.run is self.run
