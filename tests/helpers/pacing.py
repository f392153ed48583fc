"""Test helper: a pacer that holds runs before one phase, and lets a test wait for them.

The engine's `hold=` seam takes any `Pacer`; this one opens every phase before `phase`
at once, so columns run on until they reach it, and `wait_until_waiting` blocks (with a
deadline) until that many columns wait there, so a test looks at a run held at a known
point instead of sleeping.
"""

from __future__ import annotations

from interlock_demo.core.run import Pacer


class HoldingPacer(Pacer):
    """A pacer with every phase before `phase` open: columns run on until `phase`."""

    def __init__(self, phase: str) -> None:
        super().__init__()
        while self.next_phase != phase:
            self.advance()

    def wait_until_waiting(self, phase: str, count: int, timeout: float) -> bool:
        """Block until `count` columns wait before `phase`; False after `timeout` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting.get(phase, 0) >= count, timeout)
