"""The interlock column: the refund behind `interlock.Gate`, and recovery on restart.

1. Recover: on a restart the receipt log is caught up first (a receipt the killed worker
   committed but did not number); the case's journaled actions without an outcome go
   through `gate.recover_action` (it finds its own refund at Stripe, or re-checks and sends).
2. Or, with nothing journaled, ask the model and `gate.submit` the refund it decided.

The gate journals, claims, looks up, checks and sends; this worker only turns its
events into lines (`gate_listener`, where the gate's crash points are) and its outcome
into the column's report.
"""

from __future__ import annotations

from collections.abc import Callable

from interlock import (
    Effect,
    Event,
    Gate,
    GateEvent,
    GateOptions,
    Intent,
    Outcome,
    Payments,
    PaymentsAuthError,
    Store,
    StripeRefund,
)
from interlock.testing import CrashPoint, Emulate24h, NoLookup
from workers.agent import Decision
from workers.context import WorkerContext, ask_model
from workers.protocol import ColumnOutcome, EventKind, event_fields, gate_kind
from workers.protocol.case import Case
from workers.protocol.switches import Switches
from workers.protocol.words import MONEY_AT, gate_event_text, key_refused_reason
from workers.traces import traced_to_file

# How many receipts the gate numbers into its receipt log at a time: every one. A demo run
# has one action (and maybe a re-approval) per column, so the library's batching (100
# receipts, or 5 s) would leave the run's receipt out of the log and its anchor when the
# card is read; the cost of a head per receipt is a few milliseconds, invisible here.
LOG_EVERY = 1

# Whether it acts through a gate (and so reaches the gate's own crash points, `gate_only`).
GATED = True


def run(ctx: WorkerContext) -> ColumnOutcome:
    """Recover this case's journaled action, or decide and submit a new one."""
    gate = refund_gate(
        ctx.store, ctx.payments, gate_options(ctx), answerer=ctx.answerer, switches=ctx.switches
    )
    try:
        return _recover_or_submit(ctx, gate)
    except PaymentsAuthError as e:
        mine = ctx.store.actions(ctx.case.metadata)
        return key_refused(ctx, e, mine[-1] if mine else None)


def refund_gate(
    store: Store, payments: Payments, options: GateOptions, *, answerer: str, switches: Switches
) -> Gate:
    """The demo's refund gate: interlock's Stripe refund over `payments`, journaled in
    `store`. Every gate of the demo is this one (the worker's, Temporal's activity, the
    engine's re-approval); they differ only in `options` and in what the run emulates
    (`switches`). Its receipts say the refunds were looked up where `answerer` (`STRIPE`,
    `EMULATOR`, `MOCK`) keeps them."""
    effect = StripeRefund(payments, where=MONEY_AT[answerer])
    # Traced into `interlock-demo --otel-file`'s file when the run was asked to.
    return traced_to_file(Gate.from_options(store, emulating(effect, switches), options))


def emulating(effect: Effect, switches: Switches) -> Effect:
    """`effect` in the test doubles of `interlock.testing` that `switches` asks for, each
    named as the run names it (its environment variable); `effect` itself when none."""
    if switches.emulate_24h:
        effect = Emulate24h(effect, name=Switches.ENV_NAMES["emulate_24h"])
    if switches.no_lookup:
        effect = NoLookup(effect, name=Switches.ENV_NAMES["no_lookup"])
    return effect


def gate_options(ctx: WorkerContext) -> GateOptions:
    """A worker's gate options: its context's timing, owner, clocks and sleep, its event
    lines and crash points (`gate_listener`), its receipt key and anchors, and a receipt
    log extended at every receipt (`LOG_EVERY`)."""
    return GateOptions(
        timing=ctx.timing,
        owner=ctx.owner,
        on_event=gate_listener(ctx),
        clock=ctx.clock,
        sleep=ctx.sleep,
        monotonic=ctx.monotonic,
        approvers=ctx.approvers,
        signing_key=ctx.signing_key,
        anchors=ctx.anchors,
        log_every=LOG_EVERY,
    )


def _recover_or_submit(ctx: WorkerContext, gate: Gate) -> ColumnOutcome:
    case = ctx.case
    mine = ctx.store.actions(case.metadata)
    if mine:
        # A restart: the worker before may have died between its receipt's commit and
        # numbering it into the log (or anchoring its head), as `gate.recover()` knows;
        # this worker recovers its case's actions one by one, so it catches up itself.
        gate.catch_up_log()
    # Each of the case's few actions is read on its own: the store's pending list may be long.
    states = [(aid, ctx.store.action(aid)) for aid in mine]
    pending = [aid for aid, state in states if state is not None and state.settlement is None]
    if pending:
        ctx.emit(
            EventKind.RECOVER,
            f"gate.recover(): {len(pending)} journaled action without an outcome",
        )
        outcomes = [gate.recover_action(aid) for aid in pending]
        outcome = outcomes[-1]
    elif mine:
        state = ctx.store.action(mine[-1])
        assert state is not None
        ctx.emit(EventKind.RESUME, "the journal already has this case's outcome")
        outcome = Outcome.from_state(state)
    else:
        decision = ask_model(ctx)
        if not decision.refund:
            return ColumnOutcome("no-refund", reason=decision.text)
        outcome = gate.submit(refund_intent(case, decision, ctx.new_action_id()))
    return gate_report(outcome)


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
        # The payment's currency as the model was shown it: the gate refuses the refund if
        # the payment is in another one, and every amount is worded in it.
        currency=decision.payment_seen.get("currency"),
    )


def gate_report(outcome: Outcome) -> ColumnOutcome:
    """The interlock worker's report of a gate outcome."""
    return ColumnOutcome(
        outcome.status,
        reason=outcome.reason,
        refund_id=outcome.external_id,
        action_id=outcome.action_id,
    )


def key_refused(ctx: WorkerContext, e: PaymentsAuthError, action_id: str | None) -> ColumnOutcome:
    """The interlock worker's report when the gate met a refused key: pending.

    The gate settles nothing on a refused key (docs/design.md §4 "Reads"): the action
    stays pending, its reservation kept, and recovery finishes it once the key works.
    """
    reason = key_refused_reason(e)
    ctx.emit(EventKind.KEY_REFUSED, f"{reason}: fix the key and run recovery again")
    return ColumnOutcome("pending", reason=reason, action_id=action_id)


def gate_listener(ctx: WorkerContext) -> Callable[[Event], None]:
    """The gate's `on_event` for this worker: each shown event as a line, and the
    worker's crash points among the gate's steps."""

    def on_event(event: Event) -> None:
        point = CrashPoint.at(event.kind)
        if event.kind is GateEvent.BEFORE_SEND and point is not None:
            # The request has not gone out yet: a worker that dies here never says it sent.
            ctx.crash(point)
        text = gate_event_text(event, answerer=ctx.answerer)
        if text is not None:
            ctx.emit(gate_kind(event.kind), text, **event_fields(event.data))
        if event.kind is not GateEvent.BEFORE_SEND and point is not None:
            ctx.crash(point)

    return on_event
