"""Test helper: sibling actions (one decision made twice or more in one model turn) run at
once, with every sibling's first read held until each of them has read or been told to
wait for its turn.

Without the target's turn every sibling reads the refunds before any lands, and each
sends; with it, one reads and the others are `busy` (the gate's `journaled` event says
so) until it has settled. The hold is an event with a deadline, never a sleep: it opens
as soon as every sibling has done one or the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from interlock import (
    Effect,
    Event,
    Found,
    Gate,
    GateEvent,
    Intent,
    Observation,
    Outcome,
    Owner,
    Store,
    Timing,
)

DEADLINE_S = 30.0


class Rendezvous:
    """Counts the siblings that have read the target or been told to wait their turn;
    `wait_all` returns once all `n` have (and fails the test past its deadline)."""

    def __init__(self, n: int, deadline_s: float = DEADLINE_S) -> None:
        self.n = n
        self.deadline_s = deadline_s
        self._arrived: set[str] = set()
        self._cond = threading.Condition()

    def arrive(self, action_id: str) -> None:
        """`action_id` has read the target, or was told another action runs first."""
        with self._cond:
            self._arrived.add(action_id)
            self._cond.notify_all()

    def wait_all(self) -> None:
        """Until every sibling has arrived."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self._arrived) >= self.n, self.deadline_s)
        assert ok, f"only {sorted(self._arrived)} of {self.n} siblings arrived"

    def on_event(self, event: Event) -> None:
        """A gate's event sink: a `journaled` answer of `busy` is an arrival."""
        if event.kind is GateEvent.JOURNALED and event.data["claim"] == "busy":
            self.arrive(event.action_id)


class HeldReads:
    """An effect whose first read of each action waits at the rendezvous (after reading):
    so every sibling that reads at all has read before any of them sends."""

    def __init__(self, inner: Effect, rendezvous: Rendezvous) -> None:
        self.inner = inner
        self.rendezvous = rendezvous
        self._read: set[str] = set()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def kind(self) -> str:
        """The wrapped effect's kind."""
        return self.inner.kind

    def observe(self, intent: Intent) -> Observation:
        """The wrapped read; the first of each action then waits for every sibling."""
        obs = self.inner.observe(intent)
        with self._lock:
            first = intent.action_id not in self._read
            self._read.add(intent.action_id)
        if first:
            self.rendezvous.arrive(intent.action_id)
            self.rendezvous.wait_all()
        return obs

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """The wrapped send."""
        return self.inner.send(intent, idempotency_key)


def on_threads(calls: Sequence[Callable[[], Any]], deadline_s: float = DEADLINE_S) -> list[Any]:
    """Run every call on its own thread at once; their results in order (an exception
    raised by one is raised here)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        try:
            start.wait(deadline_s)
            results[i] = calls[i]()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s)
    assert not any(t.is_alive() for t in threads), "a sibling did not finish in time"
    if errors:
        raise errors[0]
    return results


def submit_siblings(
    store: Store, effect: Effect, intents: Sequence[Intent], timing: Timing
) -> list[Outcome]:
    """Submit `intents` at once on threads through one gate (as a framework runs one model
    turn's tool calls); their outcomes in order."""
    rendezvous = Rendezvous(len(intents))
    gate = Gate(
        store,
        HeldReads(effect, rendezvous),
        timing=timing,
        owner=Owner.current("siblings"),
        on_event=rendezvous.on_event,
    )
    return on_threads([lambda i=i: gate.submit(i) for i in intents])
