"""What each column's worker does with one refund case, start or restart.

- standard: the common agent pattern. Save the decision (fsync) before the send, derive
  the Idempotency-Key from the case, and on restart read the file and retry. Nothing is
  re-checked.
- checked: the same, plus a hand-written re-check before the retry: re-read the payment's
  refunds and the approval, and stop if either changed.
- interlock: the refund behind `interlock.Gate`, and `gate.recover()` on restart.

The same code runs in a real worker process (`workers.standalone`, which SIGKILLs itself
at the crash point) and in-process for mock runs (which raise `SimulatedCrash`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from interlock import (
    Gate,
    Intent,
    Outcome,
    Owner,
    Payments,
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    Store,
    StripeRefund,
    Switches,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from workers.agent import Decision, Model, decide

# Where a worker can die, in the order a refund passes them. `in-flight` is not here: the
# supervisor kills the worker while the emulator holds Stripe's answer.
CRASH_POINTS = (
    "after-decision",
    "after-journal",
    "after-sending",
    "before-send",
    "after-answer",
    "after-outcome",
    "during-recovery",
)

# Columns whose restarted worker reads the payment before it acts (a read fault can hit
# it); the standard worker resends on its saved decision without reading anything.
READS_ON_RESTART = frozenset({"interlock", "checked"})

# Gate events that are crash points for the interlock worker.
_GATE_CRASH_POINTS = {
    "journaled": "after-journal",
    "sending": "after-sending",
    "before-send": "before-send",
    "after-answer": "after-answer",
    "settled": "after-outcome",
    "claim": "during-recovery",
}

Emit = Callable[..., None]
# Who answers a worker's refund calls, as its events name it: Stripe test mode (live),
# the loopback emulator (offline) or the in-memory model (mock). Labels only.
STRIPE = "Stripe"
EMULATOR = "the emulator"
MOCK = "the mock"
# `WorkerContext.extra` key: a decision made and recorded before this worker ran, which
# it uses instead of asking the model (the Temporal engine's refund activity).
RECORDED_DECISION = "recorded_decision"


class SimulatedCrash(BaseException):
    """Raised at the crash point of an in-process (mock) worker: the process 'dies' here."""


@dataclass(frozen=True)
class Case:
    """One support case for one column: its payment, its approval and the request."""

    case_id: str
    column: str
    payment_intent: str
    lease_id: str
    amount: int
    request: str

    def to_dict(self) -> dict[str, Any]:
        """The case as JSON-ready data."""
        return {
            "case_id": self.case_id,
            "column": self.column,
            "payment_intent": self.payment_intent,
            "lease_id": self.lease_id,
            "amount": self.amount,
            "request": self.request,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Case:
        """A case from `to_dict` data."""
        return cls(
            case_id=str(data["case_id"]),
            column=str(data["column"]),
            payment_intent=str(data["payment_intent"]),
            lease_id=str(data["lease_id"]),
            amount=int(data["amount"]),
            request=str(data["request"]),
        )

    @property
    def metadata(self) -> dict[str, str]:
        """What the agent's refunds carry in their metadata."""
        return {"case": self.case_id, "column": self.column}


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
    crash: Callable[[str], None]
    model: Callable[[], Model]
    timing: Timing
    switches: Switches
    owner: Owner
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    extra: dict[str, Any] = field(default_factory=dict)
    answerer: str = STRIPE


def run_worker(ctx: WorkerContext) -> dict[str, Any]:
    """Run the column's worker once; returns the outcome it reports."""
    if ctx.case.column == "interlock":
        outcome = _interlock(ctx)
    else:
        outcome = _plain(ctx, checked=ctx.case.column == "checked")
    ctx.emit("outcome", _outcome_text(outcome, ctx.answerer), **outcome)
    return outcome


def _decide(ctx: WorkerContext) -> Decision:
    recorded = ctx.extra.get(RECORDED_DECISION)
    if isinstance(recorded, Decision):
        return recorded  # decided earlier and kept elsewhere (a Temporal workflow's history)
    ctx.emit("ask-model", "asking the model about the support request")
    decision = decide(ctx.model(), ctx.payments, ctx.case.payment_intent, ctx.case.request)
    seen = decision.payment_seen
    ctx.emit(
        "tool-call",
        f"get_payment: ${seen['amount'] / 100:.2f}, ${seen['amount_refunded'] / 100:.2f} "
        f"refunded ({len(seen['refunds'])} refunds)",
    )
    if decision.refund:
        ctx.emit(
            "decision",
            f"model calls issue_refund(${(decision.amount or 0) / 100:.2f})",
            amount=decision.amount,
            model=decision.model,
        )
    else:
        ctx.emit("decision", f"model decided no refund: {decision.text}", model=decision.model)
    ctx.crash("after-decision")
    return decision


def _plain(ctx: WorkerContext, *, checked: bool) -> dict[str, Any]:
    case = ctx.case
    saved = ctx.box.load()
    if saved is not None and saved.get("done"):
        done = saved["done"]
        ctx.emit("resume", "the saved record says the refund was made; nothing to do")
        return {"status": "sent", "reason": None, "refund_id": done.get("refund_id")}
    if saved is None:
        decision = _decide(ctx)
        if not decision.refund:
            return {"status": "no-refund", "reason": decision.text, "refund_id": None}
        saved = {"decision": decision.to_dict(), "key": f"refund-{case.case_id}"}
        ctx.box.save(saved)
        ctx.emit("decision-saved", "saved the decision to a local file (fsync)")
        ctx.crash("after-journal")
        retry = False
    else:
        decision = Decision.from_dict(saved["decision"])
        ctx.emit("resume", "read the saved decision; retrying the refund")
        ctx.crash("during-recovery")
        retry = True
        if checked:
            try:
                stop = _recheck(ctx, decision)
            except PaymentsAuthError as e:
                return _key_refused(ctx, e)
            except PaymentsUnsettledError as e:
                # No answer to the re-check is no reason to stop, nor to send: say so.
                ctx.emit("recheck", f"could not re-read the refunds: {e.detail}; nothing sent")
                return {
                    "status": "unknown",
                    "reason": f"could not re-check: {e.detail}",
                    "refund_id": None,
                }
            if stop is not None:
                return {"status": "stopped", "reason": stop, "refund_id": None}
    key = str(saved["key"])
    if retry and ctx.switches.emulate_24h:
        # Emulated: Stripe pruned the key after 24 h, so the retry's key is one it has not seen.
        key += "-after-24h"
    ctx.crash("after-sending")
    ctx.crash("before-send")
    amount = int(decision.amount or 0)
    ctx.emit("send", send_text(ctx.answerer, amount, key), key=key)
    try:
        refund = ctx.payments.create_refund(
            case.payment_intent, amount, idempotency_key=key, metadata=case.metadata
        )
    except PaymentsUnsettledError as e:
        # The common pattern has no answer for this: it reports what it knows, nothing more.
        ctx.emit("answer", f"no settled answer from {ctx.answerer}: {e.detail}")
        return {"status": "unknown", "reason": e.detail, "refund_id": None}
    except PaymentsAuthError as e:
        return _key_refused(ctx, e)
    except PaymentsRejectedError as e:
        ctx.emit("answer", f"{ctx.answerer} refused: {e.code}: {e.provider_message}")
        return {"status": "failed", "reason": f"{e.code}: {e.provider_message}", "refund_id": None}
    ctx.emit(
        "answer",
        f"{ctx.answerer} answered: refund {refund.id} ${refund.amount / 100:.2f}",
        refund_id=refund.id,
    )
    ctx.crash("after-answer")
    saved["done"] = {"refund_id": refund.id}
    ctx.box.save(saved)
    ctx.crash("after-outcome")
    return {"status": "sent", "reason": None, "refund_id": refund.id}


def _key_refused(ctx: WorkerContext, e: PaymentsAuthError) -> dict[str, Any]:
    """A refused key settles nothing: report it as unknown, naming the key problem.

    It is a configuration error: whether the refund exists is not known from here, so the
    report claims nothing; whoever fixes the key runs the worker again.
    """
    reason = f"the key was refused (HTTP {e.http_status}) on {e.operation}; nothing settled"
    ctx.emit("key-refused", f"{reason}: fix the key and run the worker again")
    return {"status": "unknown", "reason": reason, "refund_id": None}


def _recheck(ctx: WorkerContext, decision: Decision) -> str | None:
    """The hand-written check: stop if the refunds or the approval changed.

    A read that fails raises (`PaymentsAuthError`, `PaymentsUnsettledError`): then nothing
    was checked.
    """
    payment = ctx.payments.get_payment(ctx.case.payment_intent)
    lease = ctx.store.lease(ctx.case.lease_id)
    if refunds_fingerprint(payment.refunds) != decision.fingerprint:
        reason = "the payment's refunds changed since the decision"
    elif lease is None or lease.revoked or lease.expires_at <= ctx.clock():
        reason = "the approval was revoked or expired"
    else:
        ctx.emit("recheck", "re-read the refunds and the approval: unchanged")
        return None
    ctx.emit("recheck", f"re-read the refunds and the approval: {reason}; stopping")
    return reason


def _interlock(ctx: WorkerContext) -> dict[str, Any]:
    case = ctx.case
    gate = Gate(
        ctx.store,
        StripeRefund(ctx.payments),
        timing=ctx.timing,
        switches=ctx.switches,
        owner=ctx.owner,
        on_event=lambda kind, data: _gate_event(ctx, kind, data),
        clock=ctx.clock,
        sleep=ctx.sleep,
    )
    try:
        return _gate_outcome(ctx, gate)
    except PaymentsAuthError as e:
        mine = ctx.store.actions(case.metadata)
        return key_refused_report(ctx, e, mine[-1] if mine else None)


def key_refused_report(
    ctx: WorkerContext, e: PaymentsAuthError, action_id: str | None
) -> dict[str, Any]:
    """The interlock worker's report when the gate met a refused key: pending.

    The gate settles nothing on a refused key (docs/design.md §4 "Reads"): the action
    stays pending, its reservation kept, and recovery finishes it once the key works.
    """
    reason = f"the key was refused (HTTP {e.http_status}) on {e.operation}; nothing settled"
    ctx.emit("key-refused", f"{reason}: fix the key and run recovery again")
    return {"status": "pending", "reason": reason, "refund_id": None, "action_id": action_id}


def _gate_outcome(ctx: WorkerContext, gate: Gate) -> dict[str, Any]:
    """Recover this case's journaled action, or decide and submit a new one."""
    case = ctx.case
    mine = ctx.store.actions(case.metadata)
    # Each of the case's few actions is read on its own: the store's pending list may be long.
    states = [(aid, ctx.store.action(aid)) for aid in mine]
    pending = [aid for aid, state in states if state is not None and state.settlement is None]
    if pending:
        ctx.emit("recover", f"gate.recover(): {len(pending)} journaled action without an outcome")
        outcomes = [gate.recover_action(aid) for aid in pending]
        outcome = outcomes[-1]
    elif mine:
        state = ctx.store.action(mine[-1])
        assert state is not None
        ctx.emit("resume", "the journal already has this case's outcome")
        outcome = Outcome.from_state(state)
    else:
        decision = _decide(ctx)
        if not decision.refund:
            return {"status": "no-refund", "reason": decision.text, "refund_id": None}
        outcome = gate.submit(refund_intent(case, decision, new_action_id()))
    return outcome_report(outcome)


def refund_intent(case: Case, decision: Decision, action_id: str) -> Intent:
    """The interlock worker's intent for the case's decided refund, under `action_id`."""
    return Intent(
        action_id=action_id,
        kind="refund",
        target=case.payment_intent,
        amount=int(decision.amount or 0),
        lease_id=case.lease_id,
        fingerprint=decision.fingerprint,
        metadata=case.metadata,
        context={"model": decision.model, "tool_call": dict(decision.tool_call)},
    )


def outcome_report(outcome: Outcome) -> dict[str, Any]:
    """The interlock worker's report of a gate outcome."""
    return {
        "status": outcome.status,
        "reason": outcome.reason,
        "refund_id": outcome.external_id,
        "action_id": outcome.action_id,
    }


def _gate_event(ctx: WorkerContext, kind: str, data: Mapping[str, Any]) -> None:
    point = _GATE_CRASH_POINTS.get(kind)
    if kind == "before-send" and point is not None:
        # The request has not gone out yet: a worker that dies here never says it sent.
        ctx.crash(point)
    text = gate_event_text(kind, data, answerer=ctx.answerer)
    if text is not None:
        ctx.emit(f"gate-{kind}", text, **{k: v for k, v in data.items() if _plain_value(v)})
    if kind != "before-send" and point is not None:
        ctx.crash(point)


def _plain_value(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def send_text(answerer: str, amount: int, key: str) -> str:
    """The event line for a refund call, naming who it goes to (a mock call is no POST)."""
    if answerer == MOCK:
        return f"refund ${amount / 100:.2f} in memory (key {key})"
    return f"POST /v1/refunds ${amount / 100:.2f} to {answerer} (Idempotency-Key {key})"


def gate_event_text(kind: str, d: Mapping[str, Any], *, answerer: str = STRIPE) -> str | None:
    """A gate event in words for a column's event list, or None for events not shown.

    `answerer` names who answers refund calls (`STRIPE`, `EMULATOR` or `MOCK`).
    """
    short = _short_id(str(d.get("action_id", "")))
    if kind == "journaled":
        claim = d.get("claim")
        if claim == "held":
            return f"intent {short} was already journaled; another worker holds its claim"
        if claim == "settled":
            return f"intent {short} was already journaled, with its outcome"
        return f"journaled intent {short} and took the claim"
    if kind == "claim":
        return f"took the claim on {short} (attempt {d.get('attempt')})"
    if kind == "claim-wait":
        return f"waiting for the claim of {d.get('owner')}: {float(d.get('seconds', 0)):.1f} s left"
    if kind == "check":
        name = d.get("name")
        if name == "lookup":
            found = d.get("found")
            return (
                f"lookup: found its own refund {found}"
                if found
                else "lookup: no refund names this action"
            )
        if name == "world_unchanged":
            return (
                "world check: refunds unchanged since the decision"
                if d.get("passed")
                else "world check: the payment's refunds CHANGED since the decision"
            )
        if name == "approval":
            return "approval: ok" if d.get("passed") else f"approval: {d.get('problem')}"
    if kind == "sending":
        return "journaled `sending`; claim renewed"
    if kind == "before-send":
        return send_text(answerer, int(d.get("amount", 0)), short)
    if kind == "after-answer":
        return f"{answerer} answered: refund {d.get('external_id')}"
    if kind == "answer":
        return f"{answerer} refused: {d.get('code')}: {d.get('message')}"
    if kind in ("answer-unsettled", "read-unsettled"):
        return f"no settled answer from {answerer} ({d.get('error')}); will look it up"
    if kind == "settled":
        return f"receipt written: {d.get('status')}"
    if kind == "left-to-recovery":
        return f"left to recovery: {d.get('reason')}"
    if kind == "in-flight-wait":
        return (
            f"the refund call may still land at {answerer}: looking it up for "
            f"{float(d.get('seconds', 0)):.1f} s before anything else (never resent meanwhile)"
        )
    if kind == "unknown":
        return f"unknown: {d.get('reason')}; from now on only looked up, never resent"
    if kind == "recover-error":
        return f"recovery of {short} failed: {d.get('error')}; going on with the others"
    return None


def _short_id(action_id: str) -> str:
    """An action id cut for an event line: the head of a random or hashed id, the
    distinctive tail of one made of names (`temporal:<namespace>:<workflow>:<activity>`)."""
    if ":" in action_id:
        return "…" + action_id[-24:] if len(action_id) > 24 else action_id
    return action_id[:12] + "…"


def _outcome_text(outcome: Mapping[str, Any], answerer: str = STRIPE) -> str:
    status = outcome["status"]
    reason = outcome.get("reason")
    if reason and answerer != STRIPE:
        # The gate says "at Stripe" of whatever answers refund calls: name it here.
        reason = str(reason).replace("at Stripe", f"at {answerer}")
    refund = outcome.get("refund_id")
    text = f"outcome: {status}"
    if refund:
        text += f" ({refund})"
    if reason:
        text += f": {reason}"
    return text
