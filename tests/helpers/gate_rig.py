"""Test helper: the in-process rig the gate's unit and property tests share.

A `GateWorld` is a $100 payment in the in-memory Stripe model, a store, a fake clock and
an event log. Crashes are simulated: a gate's event sink raises `Crash` at a named step
and the crashed gate is abandoned; a restart is a new `Gate` with a new `Owner`. The fake
clock's `sleep` advances it, so claim waits take no real time.
"""

from __future__ import annotations

import itertools
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

from interlock import (
    ACTION_METADATA_KEY,
    Effect,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    Owner,
    Refund,
    SigningKey,
    Store,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock import Event as GateEventSeen
from interlock.testing import InProcessPayments, event_problem
from tests.helpers.approvals import APPROVER, APPROVERS

T0 = 1_700_000_000.0
PAYMENT = 10_000
AMOUNT = 2_000
TIMING = Timing(6, 1)
_pids = itertools.count(1)


class Crash(BaseException):
    """A simulated SIGKILL at a named step: nothing after it runs in that worker."""


class Clock:
    """A fake wall clock and its monotonic twin; `sleep` advances both, so waiting takes no
    real time. Moving `now` is time passing; `step` moves the wall clock alone (an NTP step,
    a resumed VM), which the monotonic clock does not see."""

    def __init__(self) -> None:
        self.now = T0
        self.stepped = 0.0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        """The monotonic clock: time passed, without the wall clock's steps."""
        return self.now - self.stepped

    def step(self, seconds: float) -> None:
        """Step the wall clock by `seconds` (either way); no time passes."""
        self.now += seconds
        self.stepped += seconds

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


@dataclass(frozen=True)
class Event:
    """One event a gate emitted: which worker, what, when (fake clock) and its data."""

    worker: str
    kind: str
    t: float
    data: Mapping[str, Any]


Hook = Callable[[Mapping[str, Any]], object]


def gone_owner(name: str | None = None) -> Owner:
    """An owner on this host whose process provably no longer runs (a pid above pid_max).

    Named `name`, or `crashed-<pid>` when none is given.
    """
    pid = 2**22 + next(_pids)
    assert not psutil.pid_exists(pid)
    return Owner(name or f"crashed-{pid}", pid, T0 - 60, socket.gethostname())


def remote_owner(name: str | None = None) -> Owner:
    """An owner on another host: whether it still runs cannot be checked from here.

    Named `name`, or `remote-<6 hex digits>` when none is given.
    """
    return Owner(
        name or f"remote-{uuid.uuid4().hex[:6]}", os.getpid(), T0 - 60, "another-host.invalid"
    )


class GateWorld:
    """A $100 payment, a store, a fake clock and an event log; gates over them log to it."""

    # The `case` metadata of this world's decisions.
    case = "gate-tests"

    def __init__(
        self,
        store: Callable[[Callable[[], float]], Store] | None = None,
        payments: InProcessPayments | None = None,
    ) -> None:
        """`store` builds the store on the world's fake clock (default: a `MemoryStore`)."""
        self.clock = Clock()
        self.payments = payments if payments is not None else InProcessPayments()
        self.model = self.payments.model
        self.store: Store = (store or (lambda clock: MemoryStore(clock=clock)))(self.clock)
        self.pi = self.payments.create_payment(PAYMENT).id
        self.events: list[Event] = []

    def grant(self, cap: int) -> Lease:
        """A new refund lease on the payment, valid for an hour, signed by the tests'
        approver (every gate of the world trusts it)."""
        return self.store.grant_lease(
            APPROVER.sign(
                Lease(
                    id=f"lease_{uuid.uuid4().hex[:10]}",
                    kind="refund",
                    target=self.pi,
                    cap=cap,
                    expires_at=self.clock() + 3600,
                    granted_by="support",
                    granted_at=self.clock(),
                )
            )
        )

    def decide(self, amount: int, lease_id: str) -> Intent:
        """The model's decision, with the fingerprint of the refunds it was shown."""
        seen = self.payments.get_payment(self.pi).refunds
        return Intent(
            new_action_id(),
            "refund",
            self.pi,
            amount,
            lease_id,
            refunds_fingerprint(seen),
            metadata={"case": self.case, "column": "interlock"},
        )

    def gate(
        self,
        owner: Owner,
        *,
        crash_at: str | None = None,
        hooks: Mapping[str, Hook] | None = None,
        emulate: Callable[[Effect], Effect] | None = None,
        signing_key: SigningKey | None = None,
        max_sends: int = 3,
        log_every: int = 100,
    ) -> Gate:
        """A gate for `owner` that logs its events, runs `hooks` and crashes at `crash_at`;
        `emulate` wraps its effect (`interlock.testing.NoLookup`, `Emulate24h`); it numbers
        its receipts into the log every `log_every` settles."""

        def on_event(event: GateEventSeen) -> None:
            kind, data = event.kind, event.data
            # Every event of every rig story is held to the gate's event table.
            problem = event_problem(kind, data)
            assert problem is None, problem
            self.events.append(Event(owner.worker_id, kind, self.clock(), dict(data)))
            hook = (hooks or {}).get(kind)
            if hook is not None:
                hook(data)
            if kind == crash_at:
                raise Crash(kind)

        effect: Effect = StripeRefund(self.payments)
        return Gate(
            self.store,
            effect if emulate is None else emulate(effect),
            timing=TIMING,
            owner=owner,
            signing_key=signing_key,
            on_event=on_event,
            clock=self.clock,
            sleep=self.clock.sleep,
            max_sends=max_sends,
            monotonic=self.clock.monotonic,
            approvers=APPROVERS,
            log_every=log_every,
        )

    def refunds(self) -> list[Refund]:
        """The payment's refunds as Stripe lists them now."""
        return self.payments.list_refunds(self.pi)

    def agent_refunds(self, action_id: str | None = None) -> list[Refund]:
        """Refunds naming an interlock action (this one, if given)."""
        return [
            r
            for r in self.refunds()
            if ACTION_METADATA_KEY in r.metadata
            and (action_id is None or r.metadata[ACTION_METADATA_KEY] == action_id)
        ]

    def hand_refunds(self) -> list[Refund]:
        """Refunds without metadata, as from the dashboard."""
        return [r for r in self.refunds() if not r.metadata]
