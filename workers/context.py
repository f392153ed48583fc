"""What every column's worker works with: its context, and asking the model.

A worker run gets one `WorkerContext`: the case (`workers.protocol.case`), the payments
API, the journal, where a plain worker keeps its decision (`DecisionBox`), how it reports
(`Emit`), where it dies (`crash`), the model, the timing and switches, its identity, and a
clock. The process entries (`workers.process`) and mock runs (the engine) build it; the
column stories (`workers.standard`, `workers.checked`, `workers.interlock`) only read it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from interlock import (
    Anchor,
    Approvers,
    Owner,
    Payments,
    SigningKey,
    Store,
    Timing,
    format_amount,
    new_action_id,
)
from interlock.testing import CrashPoint
from workers.agent import Decision, Model, decide
from workers.protocol import EventKind
from workers.protocol.case import Case
from workers.protocol.switches import Switches
from workers.protocol.words import STRIPE

# `WorkerContext.extra` key: a decision made and recorded before this worker ran, which
# it uses instead of asking the model (the Temporal engine's refund activity).
RECORDED_DECISION = "recorded_decision"


class Emit(Protocol):
    """How a worker reports: one event, its kind, its line of text and its data."""

    def __call__(self, kind: str, text: str, **data: Any) -> None:
        """Report one event (a process writes it as a JSON line; mock runs record it)."""
        ...


class SimulatedCrash(BaseException):
    """Raised at the crash point of an in-process (mock) worker: the process 'dies' here."""


class DecisionBox(Protocol):
    """Where the standard and checked workers keep their decision across a crash."""

    def load(self) -> dict[str, Any] | None:
        """The saved record, or None."""
        ...

    def save(self, record: dict[str, Any]) -> None:
        """Save durably before returning."""
        ...


class DecisionFile:
    """A decision saved as JSON: written to a temp file, fsynced, renamed, dir fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        """The saved record; None if there is none."""
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        return data

    def save(self, record: dict[str, Any]) -> None:
        """Replace the file atomically and durably."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@dataclass
class MemoryBox:
    """A decision box in memory, for mock runs (the 'file' survives the simulated crash)."""

    record: dict[str, Any] | None = None

    def load(self) -> dict[str, Any] | None:
        """The saved record, or None."""
        return None if self.record is None else json.loads(json.dumps(self.record))

    def save(self, record: dict[str, Any]) -> None:
        """Keep a copy."""
        self.record = json.loads(json.dumps(record))


@dataclass
class WorkerContext:
    """Everything one worker run needs; built by the process entry or by mock mode."""

    case: Case
    payments: Payments
    store: Store
    box: DecisionBox
    emit: Emit
    crash: Callable[[CrashPoint], None]
    model: Callable[[], Model]
    timing: Timing
    switches: Switches
    owner: Owner
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    # Times the gate's in-flight window and waits: the system's monotonic clock, which a
    # wall-clock step does not move, whatever `sleep` is; mock mode passes its own clock.
    monotonic: Callable[[], float] = time.monotonic
    extra: dict[str, Any] = field(default_factory=dict)
    answerer: str = STRIPE
    # Mints a new decision's action id; mock runs pass the engine's, so tests can predict it.
    new_action_id: Callable[[], str] = new_action_id
    # Where `crash` kills this run (None: nowhere), so a story can refuse one it never reaches.
    crash_point: CrashPoint | None = None
    # The approvers whose signed approvals the gate acts under; None: the public keys
    # INTERLOCK_APPROVERS names (a worker process is given those, never a private key).
    approvers: Approvers | None = None
    # The gate's receipt key (None: the key `INTERLOCK_SIGNING_KEY` names, if any) and
    # where its receipt log's tree heads are anchored: only the interlock column's worker
    # is given the key (its process loads it from the file the engine names).
    signing_key: SigningKey | None = None
    anchors: tuple[Anchor, ...] = ()


# Builds a column's worker context for one run from the case, its decision box, how it
# reports and how it sleeps; the rest (journal, payments, crash point) is the process's.
ContextFactory = Callable[[Case, DecisionBox, Emit, Callable[[float], None]], WorkerContext]


def ask_model(ctx: WorkerContext) -> Decision:
    """The model's decision on the case: asked now, or the one recorded before this run.

    Every column decides the same way; this is the `after-decision` crash point.
    """
    recorded = ctx.extra.get(RECORDED_DECISION)
    if isinstance(recorded, Decision):
        return recorded  # decided earlier and kept elsewhere (a Temporal workflow's history)
    ctx.emit(EventKind.ASK_MODEL, "asking the model about the support request")
    decision = decide(ctx.model(), ctx.payments, ctx.case.payment_intent, ctx.case.request)
    seen = decision.payment_seen
    currency = seen.get("currency")
    ctx.emit(
        EventKind.TOOL_CALL,
        f"get_payment: {format_amount(seen['amount'], currency)}, "
        f"{format_amount(seen['amount_refunded'], currency)} refunded "
        f"({len(seen['refunds'])} refunds)",
    )
    if decision.refund:
        ctx.emit(
            EventKind.DECISION,
            f"model calls issue_refund({format_amount(decision.amount or 0, currency)})",
            amount=decision.amount,
            model=decision.model,
        )
    else:
        ctx.emit(
            EventKind.DECISION, f"model decided no refund: {decision.text}", model=decision.model
        )
    ctx.crash(CrashPoint.AFTER_DECISION)
    return decision
