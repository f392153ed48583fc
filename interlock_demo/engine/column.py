"""One column's script: setup, the kill, the outage, the restart and the result card.

For one column of a run: create a $100 payment and a $20 approval, start the worker with
the scenario's crash point, see it die (exit -9), do the outage action (a refund by hand,
or a revocation), restart the worker, wait for its outcome, and fill the result card by
re-reading the payment's refunds from Stripe (and, for interlock, the receipt and
`verify()`). A fault cell (`scenarios.FAULTS`) runs `_fault_steps` instead.

How a worker runs is the `Launcher`'s business (real processes: `engine.process`;
in-process: `engine.mock`; a Temporal workflow: `engine.temporal.launcher`); the script
only asks it to run one worker to its end and reads what the worker reported through
`on_worker_event`. The card is `fill_card`, a function, so a re-approval re-reads it too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from interlock import (
    Anchor,
    AnchorError,
    InterlockError,
    Lease,
    Payments,
    Store,
    format_amount,
    verify,
)
from interlock.testing import UNSETTLED_REPORTS, CrashPoint, PaymentsModel
from interlock_demo.core.columns import column_kind
from interlock_demo.core.run import (
    ClaimWait,
    Column,
    ColumnState,
    Expected,
    Pacer,
    Run,
    RunEventKind,
    Wanted,
    WorkerInfo,
)
from interlock_demo.core.verdict import judge, stripe_card
from interlock_demo.errors import ColumnFailed, UsageError
from interlock_demo.network import live_failure_line
from interlock_demo.settings.approver import SUPPORT, support_approver
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.receipt_key import receipt_anchors, verify_keys
from scenarios import (
    CURRENCY,
    FAULTS,
    LEASE_CAP,
    PAYMENT_AMOUNT,
    REFUND_AMOUNT,
    SWITCH_NO_LOOKUP,
    Scenario,
    expectation,
)
from workers.protocol import (
    GATE_CLAIM,
    GATE_CLAIM_WAIT,
    GATE_SENDING,
    SIGKILL_EXIT,
    ColumnOutcome,
    EventKind,
)
from workers.protocol.case import Case

SUPPORT_REQUEST = (
    "Hi, I was charged $100 but one item never arrived. Could you refund $20 for it? Thanks!"
)
LEASE_TTL_S = 3600.0
# The keys of a worker's event line that the run's `Event` holds itself (the worker's
# clock is not the run's); the rest are the event's fields.
_LINE_KEYS = frozenset({"t", "pid", "kind", "text"})
# How long a worker may take beyond the claim wait before the run counts as stuck.
WORKER_GRACE_S = 90.0
# What a launcher without the emulator's model says when a fault cell asks for it.
FAULTS_NEED_THE_EMULATOR = (
    "fault cells need real workers against the emulator this engine started "
    "(offline mode, standalone engine)"
)


def error_text(e: Exception) -> str:
    """An error for a run's `error`, in words: its message, never an internal class name.

    The demo's own errors and the system's say what happened in their message; anything
    else is unexpected, and its public kind helps whoever reads the report.
    """
    text = str(e).strip()
    if text and isinstance(e, (ColumnFailed, UsageError, InterlockError, OSError, RuntimeError)):
        return text
    kind = type(e).__name__
    what = "an unexpected error" if kind.startswith("_") else f"an unexpected {kind}"
    return f"{what}: {text}" if text else f"{what}, with no message"


class Launcher(Protocol):
    """How a column's workers run: real processes, in-process (mock), or under Temporal.

    One launcher serves one column; the script calls `launch` once per worker and
    `finish` once when the column has ended, however it ended.
    """

    def launch(self, script: ColumnScript, crash_point: CrashPoint | None) -> int | None:
        """Run one worker of the script's case to its end; its exit code.

        `crash_point` is where it dies (`SIGKILL_EXIT`), or None for a worker that runs
        to its outcome. Its events go to `script.on_worker_event`.
        """
        ...

    def fault_model(self) -> PaymentsModel:
        """The emulator's model to arm a fault cell's fault on; `ColumnFailed` if none."""
        ...

    def wait_held(self, event: threading.Event, limit: float) -> bool:
        """Wait up to `limit` s for `event` of a call the fault model holds (`Fault.ended`);
        False past it, `ColumnFailed` as soon as the run is stopped."""
        ...

    def finish(self, script: ColumnScript) -> None:
        """The column has ended (or failed): let go of what was held for it."""
        ...


class ColumnScript:
    """The steps of one column, the same whichever launcher runs its workers."""

    def __init__(
        self,
        run: Run,
        column: Column,
        scenario: Scenario,
        config: DemoConfig,
        payments: Payments,
        store: Store,
        launcher: Launcher,
        *,
        hold: Pacer | None = None,
    ) -> None:
        """`hold` is a pacer the column also waits on besides the run's own (a test's)."""
        self.run = run
        self.column = column
        self.scenario = scenario
        self.config = config
        self.payments = payments
        self.store = store
        self.launcher = launcher
        self.hold = hold
        self.case: Case | None = None
        # Outside presenter mode, how long the column stays on its first kill before the
        # outage and the restart: after the answer nothing else waits (no claim to wait
        # out), and the whole run would be over before a room saw the worker die.
        self.kill_beat_s = 0.0

    def play(self) -> None:
        """Run the column to its end; a failure is the column's error, not an exception."""
        try:
            self._steps()
        except Exception as e:
            msg = self._network_failure(e) or error_text(e)
            self.run.update(self.column.name, lambda: self._fail(msg))
        finally:
            self.launcher.finish(self)

    def _network_failure(self, e: Exception) -> str | None:
        """Live only: a failure to reach Stripe or the model, in one line, or None.

        The engine's own Stripe calls raise it here; a worker's arrives as its error event.
        """
        if not self.config.run_mode.needs_keys:
            return None
        worker_errors = [
            ev.text for ev in reversed(self.column.events) if ev.kind == EventKind.ERROR
        ]
        problems: list[BaseException | str] = [e, *worker_errors]
        for problem in problems:
            line = live_failure_line(problem)
            if line is not None:
                return line
        return None

    def _fail(self, msg: str) -> None:
        self.column.error = msg
        self.column.state = ColumnState.ERROR
        self.column.as_predicted = False

    def event(self, kind: str, text: str, pid: int | None = None, **data: Any) -> None:
        """Add an event of the script's own (or the launcher's) to the column: its fields
        (`data`, what views read) and their words."""
        self.run.add_event(self.column.name, str(kind), text, pid, data)

    def _steps(self) -> None:
        run, col, sc = self.run, self.column, self.scenario
        exp = expectation(sc.id, col.name, run.emulated)
        case_id = f"{run.run_id}-{col.name}"

        def setup_card() -> None:
            col.case_id = case_id
            col.state = ColumnState.STARTING
            col.wanted = Wanted(
                text=sc.wanted_text,
                agent_refunds=sc.wanted_agent_refunds,
                hand_refunds=sc.wanted_hand_refunds,
                refunded_total=sc.wanted_total,
            )
            if exp is not None:
                col.expected = Expected(
                    agent_refunds=exp.agent_refunds,
                    hand_refunds=exp.hand_refunds,
                    refunded_total=exp.total,
                    outcome=exp.outcome,
                    note=exp.note,
                )

        run.update(col.name, setup_card)
        payment = self.payments.create_payment(
            PAYMENT_AMOUNT, currency=CURRENCY, metadata={"case": case_id, "demo_run": run.run_id}
        )
        now = run.clock.wall()
        # Support signs the approval with its own key; workers hold only the public key.
        lease = self.store.grant_lease(
            support_approver(self.config).sign(
                Lease(
                    id=f"lease_{case_id}",
                    kind="refund",
                    target=payment.id,
                    cap=LEASE_CAP,
                    expires_at=now + LEASE_TTL_S,
                    granted_by=SUPPORT,
                    granted_at=now,
                    currency=CURRENCY,
                )
            )
        )
        self.case = Case(case_id, col.name, payment.id, lease.id, REFUND_AMOUNT, SUPPORT_REQUEST)

        def set_case() -> None:
            col.payment_intent = payment.id
            col.lease_id = lease.id

        run.update(col.name, set_case)
        self.event(
            RunEventKind.SETUP,
            f"new {format_amount(PAYMENT_AMOUNT, CURRENCY)} payment {payment.id}; approval for "
            f"refunds up to {format_amount(LEASE_CAP, CURRENCY)}, signed by support",
            payment_intent=payment.id,
            amount=PAYMENT_AMOUNT,
            lease_id=lease.id,
            cap=LEASE_CAP,
        )
        if sc.fault is not None:
            self._fault_steps()
            return

        for n, point in enumerate(sc.kills):
            if n == 0:
                self.pace("decision")
            seen = len(col.events)
            code = self.launcher.launch(self, point)
            if code != SIGKILL_EXIT:
                # The worker's own error event says why: the column's one line carries it.
                why = [e.text for e in col.events[seen:] if e.kind == EventKind.ERROR]
                raise ColumnFailed(
                    f"the worker was to die by SIGKILL at {point} but exited {code}"
                    + (f": {why[-1]}" if why else "")
                )
            run.set_state(col.name, ColumnState.KILLED)
            if n == 0:
                if self.run.pacer is None and self.kill_beat_s > 0:
                    time.sleep(self.kill_beat_s)  # a beat for the room, not a wait on anything
                self.pace("outage")
                self.outage()
                self.pace("restart")
            run.set_state(col.name, ColumnState.RESTARTING)
        last = self.launcher.launch(self, None)
        if last != 0:
            raise ColumnFailed(f"the restarted worker exited {last}; see its events")
        self.pace("result")
        self._card()

    def pace(self, phase: str) -> None:
        """Wait until the presenter (and a test's hold) opens `phase`; else go on at once."""
        for pacer in (self.run.pacer, self.hold):
            if pacer is not None:
                pacer.wait(phase)

    def presenter_holds(self) -> bool:
        """Whether the presenter holds this run (a worker's time limit does not run then)."""
        return any(p is not None and p.held for p in (self.run.pacer, self.hold))

    def outage(self, *, held: bool = False) -> None:
        """Do the scenario's outage action: `held` while the refund call is held at Stripe."""
        assert self.case is not None
        outage = self.scenario.outage
        when = "while the refund call is held at Stripe, " if held else ""
        if outage.refunds_by_hand:
            refund = self.payments.create_refund(self.case.payment_intent, REFUND_AMOUNT)
            self.event(
                RunEventKind.OUTAGE,
                f"{when}support refunds {format_amount(REFUND_AMOUNT, CURRENCY)} by hand "
                f"({refund.id}), no key, no metadata",
                outage=outage,
                held=held,
                refund_id=refund.id,
                amount=REFUND_AMOUNT,
            )
        elif outage.revokes:
            self.store.revoke_lease(self.case.lease_id, "support")
            self.event(
                RunEventKind.OUTAGE,
                f"{when}support revokes the approval",
                outage=outage,
                held=held,
                lease_id=self.case.lease_id,
            )
        else:
            self.event(
                RunEventKind.OUTAGE,
                f"{when}nobody does anything" if held else "nobody does anything during the outage",
                outage=outage,
                held=held,
            )

    def _fault_steps(self) -> None:
        """A fault-axis cell (`scenarios.FAULTS`): Stripe answers the first refund call
        with the cell's fault, and the outage action runs while that call is held.

        The first worker lives (or dies where the fault says) and handles the answer
        itself. A worker whose report settles nothing, or that died, is restarted once, as
        a supervisor would; a report of a refused key gets one more restart once support
        fixed the key. The card is read once the held call has ended at Stripe.
        """
        sc, col = self.scenario, self.column
        assert self.case is not None and sc.fault is not None
        spec = FAULTS[sc.fault]
        model = self.launcher.fault_model()
        hold_ms = spec.hold_for(self.config.timing.stripe_timeout_s)
        failed: list[Exception] = []

        def while_held() -> None:
            # The emulator's request thread: the call has reached Stripe and waits for this.
            try:
                self.outage(held=True)
            except Exception as e:
                failed.append(e)

        held = model.add_fault(
            spec.kind,
            stage=spec.stage,
            hold_ms=hold_ms,
            count=spec.count,
            payment_intent=self.case.payment_intent,
            on_start=while_held,
        )
        self.event(
            RunEventKind.FAULT,
            f"armed for the first refund call: {spec.story}",
            fault=sc.fault,
            stage=spec.stage,
            hold_ms=hold_ms,
        )
        self.pace("decision")
        first = spec.crash_point
        code = self.launcher.launch(self, first)
        if code != (SIGKILL_EXIT if first else 0):
            raise ColumnFailed(f"the first worker exited {code}; see its events")
        if not held.started.is_set():
            raise ColumnFailed("the worker's first refund call never reached the emulator")
        if failed:
            raise ColumnFailed(f"the outage action failed: {error_text(failed[0])}")
        # Long enough for the held call, the gate's in-flight window and a slow machine.
        limit = hold_ms / 1000 + self.config.timing.in_flight_s + WORKER_GRACE_S
        restarts = 1 if first or self._unsettled() else 0
        key_fixed = False
        while restarts:
            restarts -= 1
            if first:
                self.run.set_state(col.name, ColumnState.KILLED)
            if spec.restart_after_landing and not self.launcher.wait_held(held.ended, limit):
                raise ColumnFailed(f"the held refund call did not end within {limit:g} s")
            if spec.read_fault and column_kind(col.name).reads_on_restart and not key_fixed:
                model.add_fault(spec.read_fault, payment_intent=self.case.payment_intent)
            self.run.set_state(col.name, ColumnState.RESTARTING)
            seen = len(col.events)
            code = self.launcher.launch(self, None)
            if code != 0:
                raise ColumnFailed(f"the restarted worker exited {code}; see its events")
            if not key_fixed and any(e.kind == EventKind.KEY_REFUSED for e in col.events[seen:]):
                key_fixed = True
                restarts = 1
                self.event(
                    RunEventKind.KEY_FIXED, "support fixes the key and runs the worker again"
                )
        if not self.launcher.wait_held(held.ended, limit):
            raise ColumnFailed(f"the held refund call did not end within {limit:g} s")
        self.pace("result")
        self._card()

    def _unsettled(self) -> bool:
        """Whether the column's last report settles nothing (unknown or pending)."""
        # Pending or unknown claims nothing either way: interlock.testing's rule.
        return self.column.outcome is not None and self.column.outcome.status in UNSETTLED_REPORTS

    def on_worker_event(self, ev: Mapping[str, Any], pid: int | None) -> None:
        """Record a worker's event with its fields; note outcomes and claim waits."""
        kind = str(ev.get("kind", RunEventKind.OUTPUT))
        col = self.column
        run = self.run
        if kind == EventKind.CRASH:
            self.pace("kill")
        if kind == GATE_SENDING and pid and ev.get("expires_at") is not None:
            # Worker processes read this host's clock: the renewed claim's end in run time,
            # which a presenter holding the run needs (the claim runs out while they talk).
            until = run.now() + float(ev["expires_at"]) - time.time()
            run.update(col.name, lambda: setattr(col, "claim_until", until))
        if kind == EventKind.OUTCOME:
            self.record_outcome(ColumnOutcome.from_wire(ev))
        elif kind == GATE_CLAIM_WAIT:
            seconds = float(ev.get("seconds", 0.0))
            start = run.now()
            simulated = any(w.simulated for w in col.workers)

            def set_wait() -> None:
                col.state = ColumnState.WAITING
                col.claim_wait = ClaimWait(start, start + seconds, seconds, simulated=simulated)

            run.update(col.name, set_wait)
        elif kind in (GATE_CLAIM, GATE_SENDING) and col.state is ColumnState.WAITING:
            run.set_state(col.name, ColumnState.RUNNING)
        data = {k: v for k, v in ev.items() if k not in _LINE_KEYS}
        run.add_event(col.name, kind, str(ev.get("text", "")), pid, data)

    def record_outcome(self, outcome: ColumnOutcome) -> None:
        """The column's worker reported `outcome`; the action it names is noted once (a
        Temporal column hears it from the worker and again from the workflow's result)."""
        col = self.column

        def change() -> None:
            col.outcome = outcome
            if outcome.action_id and outcome.action_id not in col.action_ids:
                col.action_ids.append(outcome.action_id)

        self.run.update(col.name, change)

    def worker_started(self, info: WorkerInfo) -> None:
        """A launcher's worker is running: the column shows it."""
        col = self.column

        def change() -> None:
            col.workers.append(info)
            col.state = ColumnState.RUNNING

        self.run.update(col.name, change)

    def worker_ended(self, info: WorkerInfo, exit_code: int | None) -> None:
        """A launcher's worker has ended with `exit_code` (-9: killed)."""

        def change() -> None:
            info.exit_code = exit_code
            info.ended_at = self.run.now()

        self.run.update(self.column.name, change)

    def _card(self) -> None:
        assert self.case is not None
        fill_card(self.run, self.column, self.payments, self.store, self.case, self.config)


def fill_card(
    run: Run,
    col: Column,
    payments: Payments,
    store: Store,
    case: Case,
    config: DemoConfig,
    *,
    reapproved: bool = False,
) -> None:
    """Fill the column's result card from Stripe (and, for interlock, its journal).

    Interlock's `verify()` reads only the public key list (`verify_keys`) and the anchor
    (`receipt_anchors`); the card also says where the run's receipt is in the receipt log
    and whether an anchored head covers it (`receipt_log_facts`).
    After a re-approval the truth table no longer applies, so `as_predicted` stays.
    """
    assert col.wanted is not None
    card = stripe_card(payments.list_refunds(case.payment_intent), case.case_id)
    exp = expectation(run.scenario, col.name, run.emulated)
    verdict = judge(card, col.outcome, col.wanted, exp, reapproved=reapproved)
    deviations = list(verdict.deviations)
    receipt = verified = None
    if column_kind(col.name).signs_receipts:
        actions = store.actions(case.metadata)
        seq = None
        for aid in actions:
            state = store.action(aid)
            if state is not None and state.receipt is not None:
                receipt = state.receipt.to_dict()
                seq = state.receipt.seq
        anchors = receipt_anchors(config, store)
        result = verify(
            store, payments, actions=actions, keys=verify_keys(config), anchors=anchors
        ).to_dict()
        result.update(receipt_log_facts(store, anchors, seq))
        verified = result
        want_ok = SWITCH_NO_LOOKUP not in run.emulated
        if exp is not None and result["ok"] != want_ok:
            deviations.append(f"verify() ok is {result['ok']}; expected {want_ok}")

    def fill() -> None:
        col.stripe = verdict.stripe
        col.ok = verdict.ok
        col.truthful = verdict.truthful
        if not reapproved:
            col.as_predicted = None if exp is None else not deviations
        col.deviations = deviations
        col.receipt = receipt
        col.verify = verified
        col.state = ColumnState.DONE

    run.update(col.name, fill)


def receipt_log_facts(
    store: Store, anchors: tuple[Anchor, ...], seq: int | None
) -> dict[str, int | bool | None]:
    """Where receipt `seq` is in the receipt log and whether the anchors hold it.

    `log_place`: its place counted from 1 (its leaf index + 1), None when it is not in
    the log (yet: a worker killed before it numbered it leaves it for the next gate's
    catch-up); `receipt_anchored`: whether every anchor holds a head that covers it.
    """
    place = None
    if seq is not None:
        # The run's receipt is near the log's end, but a place is only found by reading
        # from the start: the store keeps no index from receipt to place.
        place = next((e.leaf + 1 for e in store.logged() if e.seq == seq), None)
    anchored = place is not None and bool(anchors)
    for anchor in anchors if anchored else ():
        try:
            held = anchor.heads()
        except AnchorError:
            anchored = False  # verify() names what cannot be read
            break
        assert place is not None
        anchored = anchored and any(h.head.size >= place for h in held)
    return {"log_place": place, "receipt_anchored": anchored}
