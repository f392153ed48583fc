"""The standalone demo engine: one refund case per column, a kill, an outage, a restart.

For each column, at the same time: create a $100 payment and a $20 approval, start the
worker with the scenario's crash point, see it die (exit -9), do the outage action (a
refund by hand, or a revocation), restart the worker, wait for its outcome, and fill the
result card by re-reading the payment's refunds from Stripe (and, for interlock, the
receipt and `verify()`).

Parts by mode: live and offline run real worker processes (`workers.standalone`) against
Stripe test mode or the loopback emulator; mock runs the same worker code in-process on
the in-memory payments model, with the crash simulated and waits shown, not waited.
With the Temporal engine (`config.engine == "temporal"`) the columns run the same steps
as `RefundCase` workflows (`interlock_demo.engine.temporal`). The engine imports no
Textual; views subscribe to the `Run`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock import (
    Gate,
    InterlockError,
    Lease,
    MemoryStore,
    Owner,
    Payments,
    Store,
    StripePayments,
    StripeRefund,
    make_stripe_client,
    verify,
)
from interlock.testing import UNSETTLED_REPORTS
from interlock_demo.core.run import (
    SYSTEM_CLOCK,
    SYSTEM_IDS,
    ClaimWait,
    Clock,
    Column,
    ColumnState,
    Expected,
    Ids,
    Listener,
    Pacer,
    Run,
    Wanted,
    WorkerInfo,
)
from interlock_demo.core.verdict import judge, stripe_card
from interlock_demo.doctor import live_failure_line
from interlock_demo.engine.supervisor import SIGKILL_EXIT, Supervisor, WorkerProcess, WorkerState
from interlock_demo.errors import BusyError, ColumnFailed, UsageError
from interlock_demo.payments import InProcessPayments, PaymentsModel, StripeEmulator
from interlock_demo.payments.model import Fault
from interlock_demo.settings import EMULATOR_KEY, DemoConfig, open_private, worker_env
from scenarios import (
    COLUMNS,
    FAULTS,
    LEASE_CAP,
    PAYMENT_AMOUNT,
    REFUND_AMOUNT,
    SWITCH_NO_LOOKUP,
    Scenario,
    expectation,
    scenario,
)
from workers.agent import ScriptedModel
from workers.context import READS_ON_RESTART, Case, MemoryBox, SimulatedCrash, WorkerContext
from workers.protocol import ColumnOutcome
from workers.run import run_worker
from workers.standalone import decision_path
from workers.texts import EMULATOR, MOCK, STRIPE, gate_event_text

if TYPE_CHECKING:
    from interlock_demo.engine.temporal import TemporalRuntime

TITLES = {"standard": "Standard agent", "interlock": "Interlock", "checked": "Hand-written check"}
TEMPORAL_TITLES = {
    "standard": "Temporal alone",
    "interlock": "Temporal + Interlock",
    "checked": "Temporal + hand-written check",
}
SUPPORT_REQUEST = (
    "Hi, I was charged $100 but one item never arrived. Could you refund $20 for it? Thanks!"
)
LEASE_TTL_S = 3600.0
# The crash point the supervisor causes: it kills the worker while Stripe holds the answer.
IN_FLIGHT = "in-flight"
IN_FLIGHT_HOLD_MS = 500
# How long a worker may take beyond the claim wait before the run counts as stuck.
WORKER_GRACE_S = 90.0
# Reports that settle nothing: the gate's `pending` and the other workers' `unknown`.
# Reports that claim nothing either way; one rule with interlock.testing's certification.
UNSETTLED = tuple(sorted(UNSETTLED_REPORTS))


@dataclass(frozen=True)
class RunRequest:
    """What to run: a scenario, with or without the checked column, in which mode."""

    scenario: str
    checked: bool = False
    mode: str | None = None
    # Presenter mode: the run waits before each phase until the pacer opens it.
    pacer: Pacer | None = None


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


class Engine:
    """Runs scenarios, one at a time, and keeps the runs of this process in memory."""

    def __init__(
        self,
        config: DemoConfig,
        *,
        mock_pace_s: float = 0.0,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = SYSTEM_IDS,
    ) -> None:
        """`mock_pace_s` spaces out a mock run's events so an audience can follow them.

        `clock` times the runs (and starts mock runs' clocks); `ids` names the runs, the
        mock payments' objects and the actions of mock workers and re-approvals. A test
        passes its own of both to get the same run twice.
        """
        self.config = config
        self.mock_pace_s = mock_pace_s
        self.clock = clock
        self.ids = ids
        self.runs: dict[str, Run] = {}
        self.current: Run | None = None
        self._lock = threading.Lock()
        self._supervisor: Supervisor | None = None
        self._emulator: StripeEmulator | None = None
        self._temporal: TemporalRuntime | None = None
        self._temporal_lock = threading.Lock()
        self._closed = False
        # Mock runs keep their in-memory payments and journal for a later re-approval.
        self._mock_parts: dict[str, tuple[Payments, Store]] = {}

    # -- starting and stopping -----------------------------------------------------------

    def start(self, request: RunRequest, *, listeners: tuple[Listener, ...] = ()) -> Run:
        """Register a run and start it in the background; `BusyError` if one is going.

        `listeners` are subscribed before the run starts, so they see every change.
        """
        config = self.config
        if request.mode is not None and request.mode != config.mode:
            config = config.with_mode(request.mode)
        sc = scenario(request.scenario)
        if config.mode == "mock" and config.engine == "temporal":
            raise UsageError(
                "mock runs are simulated in-process, without Temporal: "
                "switch to the standalone engine for mock"
            )
        titles = TEMPORAL_TITLES if config.engine == "temporal" else TITLES
        with self._lock:
            if self._closed:
                raise BusyError("the engine is shutting down")
            if self.current is not None and not self.current.finished:
                raise BusyError(f"run {self.current.run_id} is still going; one run at a time")
            names = [c for c in COLUMNS if c != "checked" or request.checked]
            run = Run(
                mode=config.mode,
                engine=config.engine,
                scenario=sc.id,
                title=sc.title,
                emulated=config.switches.names,
                settings=self._settings(config, request.checked),
                columns=[Column(name=n, title=titles[n]) for n in names],
                run_id=self.ids.run_id(),
                clock=self.clock,
            )
            run.pacer = request.pacer
            if config.fallback_reason:
                run.notes.append(config.fallback_reason)
            for listener in listeners:
                run.subscribe(listener)
            self.runs[run.run_id] = run
            self.current = run
        threading.Thread(
            target=self._execute, args=(run, sc, config), name=f"run-{run.run_id}", daemon=True
        ).start()
        return run

    def run(self, request: RunRequest, timeout: float | None = None) -> Run:
        """Start a run and wait for it to end."""
        run = self.start(request)
        run.wait(timeout)
        return run

    def stop(self) -> None:
        """Kill every worker of the current run."""
        current = self.current
        if current is not None and current.pacer is not None:
            current.pacer.release()  # nothing may wait for a presenter who is gone
        supervisor = self._supervisor
        if supervisor is not None:
            supervisor.stop()

    def close(self) -> None:
        """Stop workers and the emulator this engine started; no new runs after this."""
        with self._lock:
            self._closed = True
        self.stop()
        if self._emulator is not None:
            self._emulator.stop()
            self._emulator = None
        with self._temporal_lock:
            if self._temporal is not None:
                self._temporal.stop()
                self._temporal = None

    def temporal(self) -> TemporalRuntime:
        """Temporal's dev server and a client: started on first use, stopped by `close()`."""
        from interlock_demo.engine.temporal import TemporalRuntime  # temporalio is an extra

        with self._temporal_lock:
            if self._closed:
                raise BusyError("the engine is shutting down")
            if self._temporal is None:
                self._temporal = TemporalRuntime(self.config.paths).start()
            return self._temporal

    def reapprove(self, run: Run) -> None:
        """After interlock refused: a person grants a new approval and the gate sends under it.

        The new action takes the payment as it is now as its decision context (the person
        decided on that), names the refused action in its receipt, and the column's card is
        re-read from Stripe. What is wanted in Stripe now includes the re-approved refund.
        """
        col = run.column("interlock")
        refused = None if col.outcome is None else col.outcome.action_id
        if (
            not run.finished
            or col.outcome is None
            or col.outcome.status != "refused"
            or not refused
        ):
            raise BusyError("re-approval follows a finished run in which interlock refused")
        config = self.config if run.mode == self.config.mode else self.config.with_mode(run.mode)
        owned: Store | None = None
        if run.mode == "mock":
            payments, store = self._mock_parts[run.run_id]
        else:
            base = run.settings.get("stripe_base")
            key = EMULATOR_KEY if run.mode == "offline" else config.stripe_key.value  # type: ignore[union-attr]
            payments = StripePayments(
                make_stripe_client(key, timeout_s=config.timing.stripe_timeout_s, base_url=base)
            )
            owned = store = config.open_store()
        try:
            now = self.clock.wall()
            lease = store.grant_lease(
                Lease(
                    id=f"lease_{col.case_id}-reapproved-{len(col.action_ids)}",
                    kind="refund",
                    target=str(col.payment_intent),
                    cap=LEASE_CAP,
                    expires_at=now + LEASE_TTL_S,
                    granted_by="support (re-approved)",
                    granted_at=now,
                )
            )
            run.add_event("interlock", "reapprove", "a person approves the $20 refund again", None)
            gate = Gate(
                store,
                StripeRefund(payments),
                timing=config.timing,
                switches=config.switches,
                owner=Owner.current("reapprove"),
                on_event=lambda kind, data: _reapprove_event(run, kind, data),
                new_action_id=self.ids.action_id,
            )
            outcome = gate.reapprove(str(refused), lease.id, approved_by="support")
            runner = _ColumnRunner(run, col, scenario(run.scenario), config, payments, store)
            runner.case = Case(
                str(col.case_id),
                "interlock",
                str(col.payment_intent),
                lease.id,
                REFUND_AMOUNT,
                SUPPORT_REQUEST,
            )

            def record() -> None:
                col.outcome = ColumnOutcome(
                    status=outcome.status,
                    reason=outcome.reason,
                    refund_id=outcome.external_id,
                    action_id=outcome.action_id,
                    reapproves=refused,
                )
                col.action_ids.append(outcome.action_id)
                assert col.wanted is not None
                col.wanted = dataclasses.replace(
                    col.wanted,
                    text=f"{col.wanted.text}, then the re-approved $20",
                    agent_refunds=col.wanted.agent_refunds + 1,
                )

            run.update("interlock", record)
            runner.reapproved_card()
        finally:
            if owned is not None:
                owned.close()

    def _settings(self, config: DemoConfig, checked: bool) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "claim_ttl_s": config.timing.claim_ttl_s,
            "stripe_timeout_s": config.timing.stripe_timeout_s,
            "model": config.model_label,
            "stripe": config.stripe_label,
            "checked": checked,
            # The journal's backend, and for PostgreSQL where it is (never the password).
            "store": "memory" if config.mode == "mock" else config.store_backend,
        }
        if config.mode != "mock" and config.store_backend == "postgresql":
            settings["store_url"] = config.store_label
        if config.mode == "offline":
            settings["stripe_base"] = config.stripe_base or self._emulator_url()
        return settings

    def _emulator_url(self) -> str:
        if self._emulator is None:
            self._emulator = StripeEmulator().start()
        return self._emulator.url

    # -- one run -------------------------------------------------------------------------

    def _execute(self, run: Run, sc: Scenario, config: DemoConfig) -> None:
        try:
            if config.mode == "mock":
                self._execute_mock(run, sc, config)
            else:
                self._execute_processes(run, sc, config)
        except Exception as e:  # an infrastructure error: report it in the run, exit 3
            run.finish(error=error_text(e))
            return
        # Columns failing the same way (the network is down) are named once, together.
        failed: dict[str, list[str]] = {}
        for c in run.columns:
            if c.error:
                failed.setdefault(c.error, []).append(c.name)
        errors = [f"{', '.join(names)}: {error}" for error, names in failed.items()]
        run.finish(error="; ".join(errors) or None)

    def _execute_processes(self, run: Run, sc: Scenario, config: DemoConfig) -> None:
        base = None
        if config.mode == "offline":
            base = str(run.settings["stripe_base"])
            key = EMULATOR_KEY
        else:
            assert config.stripe_key is not None
            key = config.stripe_key.value
        client = make_stripe_client(key, timeout_s=config.timing.stripe_timeout_s, base_url=base)
        payments = StripePayments(client)
        store = config.open_store()
        supervisor = Supervisor()
        self._supervisor = supervisor
        # In-flight kills arm a fault on the emulator; only one this engine runs can take it.
        own = (
            self._emulator.model
            if self._emulator is not None and base == self._emulator.url
            else None
        )
        try:
            column: Callable[..., _ProcessColumn] = _ProcessColumn
            if config.engine == "temporal":
                from interlock_demo.engine.temporal import temporal_column  # temporalio: an extra

                column = temporal_column(self.temporal(), run, config)
            self._columns(
                run,
                lambda col: column(run, col, sc, config, payments, store, supervisor, base, own),
            )
        finally:
            supervisor.stop()
            store.close()

    def _execute_mock(self, run: Run, sc: Scenario, config: DemoConfig) -> None:
        payments = InProcessPayments(
            PaymentsModel(clock=self.clock.wall, new_id=self.ids.object_id)
        )

        def make(col: Column) -> _ColumnRunner:
            # Each column keeps claims in its own clock, which skips its simulated waits;
            # one shared store would let one column's skipped wait expire another's claim.
            clock = _MockClock(self.clock.wall())
            store = MemoryStore(clock=clock.now)
            if col.name == "interlock":
                self._mock_parts = {run.run_id: (payments, store)}
            return _MockColumn(
                run, col, sc, config, payments, store, self.mock_pace_s, clock, self.ids
            )

        self._columns(run, make)

    def _columns(self, run: Run, make: Callable[[Column], _ColumnRunner]) -> None:
        threads = []
        for col in run.columns:
            runner = make(col)
            t = threading.Thread(target=runner.run, name=f"{run.run_id}-{col.name}", daemon=True)
            threads.append(t)
            t.start()
        for t in threads:
            t.join()


class _ColumnRunner:
    """The steps of one column; subclasses say how a worker is started."""

    def __init__(
        self,
        run: Run,
        col: Column,
        sc: Scenario,
        config: DemoConfig,
        payments: Payments,
        store: Store,
    ) -> None:
        self.run_ = run
        self.col = col
        self.sc = sc
        self.config = config
        self.payments = payments
        self.store = store
        self.case: Case | None = None

    def run(self) -> None:
        try:
            self._steps()
        except Exception as e:
            msg = self._network_failure(e) or error_text(e)
            self.run_.update(self.col.name, lambda: self._fail(msg))

    def _network_failure(self, e: Exception) -> str | None:
        """Live only: a failure to reach Stripe or the model, in one line, or None.

        The engine's own Stripe calls raise it here; a worker's arrives as its error event.
        """
        if self.config.mode != "live":
            return None
        worker_errors = [ev.text for ev in reversed(self.col.events) if ev.kind == "error"]
        problems: list[BaseException | str] = [e, *worker_errors]
        for problem in problems:
            line = live_failure_line(problem)
            if line is not None:
                return line
        return None

    def _fail(self, msg: str) -> None:
        self.col.error = msg
        self.col.state = ColumnState.ERROR
        self.col.as_predicted = False

    def event(self, kind: str, text: str, pid: int | None = None) -> None:
        self.run_.add_event(self.col.name, kind, text, pid)

    def _steps(self) -> None:
        run, col, sc = self.run_, self.col, self.sc
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
            PAYMENT_AMOUNT, metadata={"case": case_id, "demo_run": run.run_id}
        )
        now = self.run_.clock.wall()
        lease = self.store.grant_lease(
            Lease(
                id=f"lease_{case_id}",
                kind="refund",
                target=payment.id,
                cap=LEASE_CAP,
                expires_at=now + LEASE_TTL_S,
                granted_by="support",
                granted_at=now,
            )
        )
        self.case = Case(case_id, col.name, payment.id, lease.id, REFUND_AMOUNT, SUPPORT_REQUEST)

        def set_case() -> None:
            col.payment_intent = payment.id
            col.lease_id = lease.id

        run.update(col.name, set_case)
        self.event("setup", f"new $100.00 payment {payment.id}; approval for refunds up to $20.00")
        if sc.fault is not None:
            self._fault_steps()
            return

        for n, point in enumerate(sc.kills):
            if n == 0:
                self.pace("decision")
            code = self.launch(point)
            if code != SIGKILL_EXIT:
                raise ColumnFailed(f"the worker was to die by SIGKILL at {point} but exited {code}")
            run.set_state(col.name, ColumnState.KILLED)
            if n == 0:
                self.pace("outage")
                self._outage()
                self.pace("restart")
            run.set_state(col.name, ColumnState.RESTARTING)
        last = self.launch(None)
        if last != 0:
            raise ColumnFailed(f"the restarted worker exited {last}; see its events")
        self.pace("result")
        self._card()

    def pace(self, phase: str) -> None:
        """In presenter mode, wait until the presenter opens `phase`; else go on at once."""
        pacer = self.run_.pacer
        if pacer is not None:
            pacer.wait(phase)

    def presenter_holds(self) -> bool:
        """Whether the presenter holds this run (a worker's time limit does not run then)."""
        pacer = self.run_.pacer
        return pacer is not None and pacer.held

    def _outage(self, *, held: bool = False) -> None:
        assert self.case is not None
        outage = self.sc.outage
        when = "while the refund call is held at Stripe, " if held else ""
        if outage == "hand-refund":
            refund = self.payments.create_refund(self.case.payment_intent, REFUND_AMOUNT)
            self.event(
                "outage",
                f"{when}support refunds $20.00 by hand ({refund.id}), no key, no metadata",
            )
        elif outage == "revoke":
            self.store.revoke_lease(self.case.lease_id, "support")
            self.event("outage", f"{when}support revokes the approval")
        else:
            self.event(
                "outage",
                f"{when}nobody does anything" if held else "nobody does anything during the outage",
            )

    def fault_model(self) -> PaymentsModel:
        """The emulator's model, to arm faults on; fault cells need one this engine runs."""
        raise ColumnFailed(
            "fault cells need real workers against the emulator this engine started "
            "(offline mode, standalone engine)"
        )

    def _fault_steps(self) -> None:
        """A fault-axis cell (`scenarios.FAULTS`): Stripe answers the first refund call
        with the cell's fault, and the outage action runs while that call is held.

        The first worker lives (or dies where the fault says) and handles the answer
        itself. A worker whose report settles nothing, or that died, is restarted once, as
        a supervisor would; a report of a refused key gets one more restart once support
        fixed the key. The card is read once the held call has ended at Stripe.
        """
        sc, col = self.sc, self.col
        assert self.case is not None and sc.fault is not None
        spec = FAULTS[sc.fault]
        model = self.fault_model()
        hold_ms = spec.hold_for(self.config.timing.stripe_timeout_s)
        failed: list[Exception] = []

        def while_held() -> None:
            # The emulator's request thread: the call has reached Stripe and waits for this.
            try:
                self._outage(held=True)
            except Exception as e:
                failed.append(e)

        held = model.add_fault(
            spec.kind,
            stage=spec.stage,
            hold_ms=hold_ms,
            payment_intent=self.case.payment_intent,
            on_start=while_held,
        )
        self.event("fault", f"armed for the first refund call: {spec.story}")
        self.pace("decision")
        first = None if spec.crash_point == "none" else spec.crash_point
        code = self.launch(first)
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
                self.run_.set_state(col.name, ColumnState.KILLED)
            if spec.restart_after_landing and not held.ended.wait(limit):
                raise ColumnFailed(f"the held refund call did not end within {limit:g} s")
            if spec.read_fault and col.name in READS_ON_RESTART and not key_fixed:
                model.add_fault(spec.read_fault, payment_intent=self.case.payment_intent)
            self.run_.set_state(col.name, ColumnState.RESTARTING)
            seen = len(col.events)
            code = self.launch(None)
            if code != 0:
                raise ColumnFailed(f"the restarted worker exited {code}; see its events")
            if not key_fixed and any(e.kind == "key-refused" for e in col.events[seen:]):
                key_fixed = True
                restarts = 1
                self.event("key-fixed", "support fixes the key and runs the worker again")
        if not held.ended.wait(limit):
            raise ColumnFailed(f"the held refund call did not end within {limit:g} s")
        self.pace("result")
        self._card()

    def _unsettled(self) -> bool:
        """Whether the column's last report settles nothing (unknown or pending)."""
        return self.col.outcome is not None and self.col.outcome.status in UNSETTLED

    def launch(self, crash_point: str | None) -> int | None:
        """Run one worker to its end; returns its exit code."""
        raise NotImplementedError

    def on_worker_event(self, ev: dict[str, Any], pid: int | None) -> None:
        """Record a worker's event; note outcomes and claim waits."""
        kind = str(ev.get("kind", "output"))
        col = self.col
        run = self.run_
        if kind == "crash":
            self.pace("kill")
        if kind == "gate-sending" and pid and ev.get("expires_at") is not None:
            # Workers read this host's clock: the renewed claim's end in run time, which a
            # presenter holding the run needs (the claim runs out while they talk).
            until = run.now() + float(ev["expires_at"]) - time.time()
            run.update(col.name, lambda: setattr(col, "claim_until", until))
        if kind == "outcome":
            outcome = ColumnOutcome.from_wire(ev)

            def set_outcome() -> None:
                col.outcome = outcome
                if outcome.action_id:
                    col.action_ids.append(outcome.action_id)

            run.update(col.name, set_outcome)
        elif kind == "gate-claim-wait":
            seconds = float(ev.get("seconds", 0.0))
            start = run.now()

            simulated = any(w.simulated for w in col.workers)

            def set_wait() -> None:
                col.state = ColumnState.WAITING
                col.claim_wait = ClaimWait(start, start + seconds, seconds, simulated=simulated)

            run.update(col.name, set_wait)
        elif kind in ("gate-claim", "gate-sending") and col.state is ColumnState.WAITING:
            run.set_state(col.name, ColumnState.RUNNING)
        run.add_event(col.name, kind, str(ev.get("text", "")), pid)

    def reapproved_card(self) -> None:
        """Re-read the card after a re-approval; the truth table no longer applies to it."""
        self._card(reapproved=True)

    def _card(self, *, reapproved: bool = False) -> None:
        run, col, sc = self.run_, self.col, self.sc
        assert self.case is not None and col.wanted is not None
        card = stripe_card(self.payments.list_refunds(self.case.payment_intent), self.case.case_id)
        exp = expectation(sc.id, col.name, run.emulated)
        verdict = judge(card, col.outcome, col.wanted, exp, reapproved=reapproved)
        deviations = list(verdict.deviations)
        receipt = verified = None
        if col.name == "interlock":
            actions = self.store.actions(self.case.metadata)
            for aid in actions:
                state = self.store.action(aid)
                if state is not None and state.receipt is not None:
                    receipt = state.receipt.to_dict()
            result = verify(self.store, self.payments, actions=actions).to_dict()
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
            col.claim_wait = None
            col.state = ColumnState.DONE

        run.update(col.name, fill)


class _ProcessColumn(_ColumnRunner):
    """A column whose workers are real processes, killed with a real SIGKILL."""

    def __init__(
        self,
        run: Run,
        col: Column,
        sc: Scenario,
        config: DemoConfig,
        payments: Payments,
        store: Store,
        supervisor: Supervisor,
        stripe_base: str | None,
        emulator: PaymentsModel | None,
    ) -> None:
        super().__init__(run, col, sc, config, payments, store)
        self.supervisor = supervisor
        self.stripe_base = stripe_base
        self.emulator = emulator

    def fault_model(self) -> PaymentsModel:
        """The emulator this engine started; a fault cell cannot run against another."""
        if self.emulator is None:
            return super().fault_model()
        return self.emulator

    def launch(self, crash_point: str | None) -> int | None:
        assert self.case is not None
        paths = self.config.paths
        case_file = paths.cases / f"{self.case.case_id}.json"
        with open_private(case_file, "w") as f:
            f.write(json.dumps(self.case.to_dict()))
        env = worker_env(
            self.config,
            self.stripe_base,
            column=self.col.name,
            asks_model=self.asks_model(),
            crash_point=None if crash_point == IN_FLIGHT else crash_point,
        )
        in_flight = None
        if crash_point == IN_FLIGHT:
            if self.emulator is None:
                raise ColumnFailed("in-flight kills need the emulator the engine started itself")
            # Stripe's answer is held after the refund is committed; the kill lands meanwhile.
            in_flight = self.emulator.add_fault(
                "hold", hold_ms=IN_FLIGHT_HOLD_MS, payment_intent=self.case.payment_intent
            )
        info = WorkerInfo(pid=None, crash_point=crash_point, started_at=self.run_.now())
        run, col = self.run_, self.col

        def on_state(worker: WorkerProcess, state: WorkerState) -> None:
            if state is WorkerState.RUNNING:

                def started() -> None:
                    info.pid = worker.pid
                    col.workers.append(info)
                    col.state = ColumnState.RUNNING

                run.update(col.name, started)
            elif state in (WorkerState.KILLED, WorkerState.EXITED):

                def ended() -> None:
                    info.exit_code = worker.exit_code
                    info.ended_at = run.now()

                run.update(col.name, ended)

        worker = WorkerProcess(
            self.argv(case_file),
            env,
            on_event=lambda ev: self.on_worker_event(ev, ev.get("pid") or worker.pid),
            on_state=on_state,
            log_path=paths.logs / f"{self.case.case_id}.log",
        )
        self.supervisor.spawn(worker)
        if in_flight is not None:
            self._kill_in_flight(worker, in_flight)
        limit = self.config.timing.renewal_s + self.config.timing.claim_ttl_s + WORKER_GRACE_S
        code = worker.wait(limit)
        while code is None and self.presenter_holds():
            code = worker.wait(limit)  # its events wait for the presenter, not the worker
        if code is None:
            worker.kill()
            raise ColumnFailed(f"worker {worker.pid} did not finish within {limit:g} s")
        if self.supervisor.stopped:
            raise ColumnFailed("the run was stopped")
        return code

    def argv(self, case_file: Path) -> list[str]:
        """The worker's command line."""
        return [sys.executable, "-m", "workers.standalone", str(case_file)]

    def asks_model(self) -> bool:
        """Whether the next worker will ask the model: this case has no saved decision yet.

        Only such a worker gets the model's key. Interlock's decision is its journaled
        intent; the others' is the decision file the worker saves before its send.
        """
        assert self.case is not None
        if self.col.name == "interlock":
            return not self.store.actions(self.case.metadata)
        return not decision_path(self.config.paths.demo, self.case).exists()

    def _kill_in_flight(self, worker: WorkerProcess, fault: Fault) -> None:
        limit = WORKER_GRACE_S
        if not fault.committed.wait(limit):
            worker.kill()
            raise ColumnFailed(f"the worker's refund did not reach the emulator within {limit:g} s")
        self.event("crash", f"SIGKILL while the refund request is in flight (pid {worker.pid})")
        worker.kill()


class _MockClock:
    """A column's clock in mock mode: sleeping moves it forward at once."""

    def __init__(self, start: float) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self._t += max(0.0, seconds)


class _MockColumn(_ColumnRunner):
    """A column whose workers run in-process: the crash is simulated, waits are not waited."""

    def __init__(
        self,
        run: Run,
        col: Column,
        sc: Scenario,
        config: DemoConfig,
        payments: Payments,
        store: Store,
        pace_s: float,
        clock: _MockClock,
        ids: Ids,
    ) -> None:
        super().__init__(run, col, sc, config, payments, store)
        self.pace_s = pace_s
        self.box = MemoryBox()
        self.clock = clock
        self.ids = ids
        self.n = 0

    def on_worker_event(self, ev: dict[str, Any], pid: int | None) -> None:
        """Record the event, then pause for the audience (presentation pacing only).

        A claim wait is simulated here: the mock clock skips it, so the event says so
        instead of counting down a wait that does not happen.
        """
        if ev.get("kind") == "gate-claim-wait":
            seconds = float(ev.get("seconds", 0.0))
            ev = {
                **ev,
                "text": f"simulated: waits out the dead worker's claim, {seconds:.1f} s on "
                "the mock clock (no real time passes)",
            }
        super().on_worker_event(ev, pid)
        if self.pace_s > 0:
            time.sleep(self.pace_s)

    def launch(self, crash_point: str | None) -> int | None:
        assert self.case is not None
        self.n += 1
        info = WorkerInfo(
            pid=None, crash_point=crash_point, started_at=self.run_.now(), simulated=True
        )
        run, col = self.run_, self.col

        def started() -> None:
            col.workers.append(info)
            col.state = ColumnState.RUNNING

        run.update(col.name, started)

        def crash(at: str) -> None:
            if at == crash_point:
                self.on_worker_event({"kind": "crash", "text": f"simulated SIGKILL at {at}"}, None)
                raise SimulatedCrash(at)

        if crash_point == IN_FLIGHT:
            self.payments.model.add_fault(  # type: ignore[attr-defined]
                "hold", payment_intent=self.case.payment_intent, on_commit=lambda: crash(IN_FLIGHT)
            )

        ctx = WorkerContext(
            case=self.case,
            payments=self.payments,
            store=self.store,
            box=self.box,
            emit=lambda kind, text, **data: self.on_worker_event(
                {"kind": kind, "text": text, **data}, None
            ),
            crash=crash,
            model=lambda: ScriptedModel(REFUND_AMOUNT),
            timing=self.config.timing,
            switches=self.config.switches,
            owner=Owner(f"mock-{col.name}-{self.n}", 0, 0.0, "mock"),
            clock=self.clock.now,
            sleep=self.clock.sleep,
            answerer=MOCK,
            new_action_id=self.ids.action_id,
        )
        self.on_worker_event(
            {"kind": "start", "text": f"{col.name} worker started (simulated)"}, None
        )
        try:
            run_worker(ctx)
            code = 0
        except SimulatedCrash:
            code = SIGKILL_EXIT

        def ended() -> None:
            info.exit_code = code
            info.ended_at = run.now()

        run.update(col.name, ended)
        return code


def _reapprove_event(run: Run, kind: str, data: Mapping[str, Any]) -> None:
    answerer = {"mock": MOCK, "offline": EMULATOR}.get(run.mode, STRIPE)
    text = gate_event_text(kind, data, answerer=answerer)
    if text is not None:
        run.add_event("interlock", f"gate-{kind}", text, None)
