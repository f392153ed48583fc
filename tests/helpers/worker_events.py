"""A supervised worker's events and state changes, collected as they come (the supervisor's
and the fork server's tests)."""

from __future__ import annotations

import queue
from typing import Any

from interlock_demo.engine.supervisor import WorkerProcess, WorkerState


class Recorder:
    """Collects a worker's events and state transitions, in the order they come."""

    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.states: list[WorkerState] = []

    def on_event(self, event: dict[str, Any]) -> None:
        self.events.put(event)

    def on_state(self, worker: WorkerProcess, state: WorkerState) -> None:
        self.states.append(state)

    def drain(self) -> list[dict[str, Any]]:
        """The events so far, taken off the queue."""
        out = []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out
