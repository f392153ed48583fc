"""`Engine`: runs a scenario's columns at once and keeps the runs of this process.

A run is one scenario over two or three columns, each its own case (payment, approval,
workers), all at the same time. `Engine` builds the run's parts by mode (live and offline:
a Stripe client, the journal and a supervisor of worker processes; mock: the in-memory
payments model and one journal per column) and plays one `ColumnScript` per column on
its own thread (`engine.column`: setup, kill, outage, restart, card). How a column's
workers run is its launcher's: `engine.process` (real processes, killed for real),
`engine.mock` (in-process, waits shown and not waited) or, with the Temporal engine
(`engine="temporal"`), `engine.temporal` (a `RefundCase` workflow whose
workers the process launcher spawns). The engine imports no Textual; views subscribe to
the `Run`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interlock import (
    Approvers,
    Event,
    GateOptions,
    Lease,
    MemoryStore,
    Owner,
    Payments,
    Store,
    StripePayments,
    format_amount,
    make_stripe_client,
)
from interlock.testing import InProcessPayments, PaymentsModel, StripeEmulator
from interlock_demo.core.columns import (
    COLUMN_KINDS,
    ColumnKind,
    column_kind,
    gated_column,
    optional_flags,
    shown_columns,
)
from interlock_demo.core.run import (
    SYSTEM_CLOCK,
    SYSTEM_IDS,
    Clock,
    Column,
    Ids,
    Listener,
    Pacer,
    Run,
    RunEventKind,
)
from interlock_demo.engine.column import (
    LEASE_TTL_S,
    SUPPORT_REQUEST,
    ColumnScript,
    Launcher,
    error_text,
    fill_card,
)
from interlock_demo.engine.mock import MockClock, MockLauncher
from interlock_demo.engine.process import ProcessLauncher
from interlock_demo.engine.supervisor import Supervisor
from interlock_demo.errors import BusyError
from interlock_demo.settings.approver import SUPPORT, support_approver
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import TEMPORAL
from interlock_demo.settings.receipt_key import receipt_anchors, receipt_key
from interlock_demo.settings.worker import EMULATOR_KEY
from scenarios import CURRENCY, LEASE_CAP, REFUND_AMOUNT, SCENARIOS, Scenario, scenario
from workers.interlock import LOG_EVERY, refund_gate
from workers.protocol import ColumnOutcome, event_fields, gate_kind
from workers.protocol.case import Case
from workers.protocol.words import gate_event_text

if TYPE_CHECKING:
    from interlock_demo.engine.temporal import TemporalRuntime


@dataclass(frozen=True)
class RunChoice:
    """What the next run is: its whole configuration (mode, engine, switches), its scenario,
    and which optional columns (`core.columns.OPTIONAL`: the checked one) run too.

    One value, so that whoever starts a run (the app's keys, its HTTP endpoint, a headless
    command) hands the engine everything at once and the engine keeps none of it between
    runs: what a view shows as chosen is what it passes to `Engine.start`.
    """

    config: DemoConfig
    scenario: str = next(iter(SCENARIOS))
    optional: frozenset[ColumnKind] = frozenset()

    def but(
        self,
        *,
        scenario: str | None = None,
        optional: frozenset[ColumnKind] | None = None,
        mode: str | None = None,
    ) -> RunChoice:
        """The same choice with these changed (None: as it is); `UsageError` when the mode
        cannot run here (live without keys, mock on Temporal)."""
        config = self.config
        if mode is not None and mode != config.mode:
            config = config.with_mode(mode)
        return RunChoice(
            config,
            self.scenario if scenario is None else scenario,
            self.optional if optional is None else optional,
        )


class Engine:
    """Runs scenarios, one at a time, and keeps the runs of this process in memory."""

    def __init__(
        self,
        config: DemoConfig,
        *,
        mock_pace_s: float = 0.0,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = SYSTEM_IDS,
        hold: Pacer | None = None,
        kill_beat_s: float = 0.0,
        fork_servers: bool = True,
    ) -> None:
        """`mock_pace_s` spaces out a mock run's events so an audience can follow them;
        `kill_beat_s` is how long a run outside presenter mode stays on its first kill
        (`ColumnScript.kill_beat_s`: a room watching the app must see it).
        `fork_servers=False` starts every worker process cold instead of forking it from
        its column's fork server (`engine.forkserver`; a benchmark's baseline).

        `config` is where the engine keeps what outlives a run (its paths, for Temporal's
        dev server); each run's own configuration comes with its `RunChoice`.

        `clock` times the runs (and starts mock runs' clocks); `ids` names the runs, the
        mock payments' objects and the actions of mock workers and re-approvals. A test
        passes its own of both to get the same run twice. `hold` is a pacer every column
        of every run also waits on, unseen by views (presenter mode gives each run its own,
        `start(pacer=...)`): a test holds runs at a phase with it.
        """
        self.paths = config.paths
        self.mock_pace_s = mock_pace_s
        self.clock = clock
        self.ids = ids
        self.hold = hold
        self.kill_beat_s = kill_beat_s
        self.fork_servers = fork_servers
        self.runs: dict[str, Run] = {}
        # The configuration each run ran with (its re-approval acts under the same).
        self._configs: dict[str, DemoConfig] = {}
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

    def start(
        self,
        choice: RunChoice,
        *,
        pacer: Pacer | None = None,
        listeners: tuple[Listener, ...] = (),
    ) -> Run:
        """Register a run of `choice` and start it in the background; `BusyError` if one
        is going.

        `pacer` (presenter mode) makes the run wait before each phase until it opens it.
        `listeners` are subscribed before the run starts, so they see every change.
        """
        config = choice.config
        sc = scenario(choice.scenario)
        with self._lock:
            if self._closed:
                raise BusyError("the engine is shutting down")
            if self.current is not None and not self.current.finished:
                raise BusyError(f"run {self.current.run_id} is still going; one run at a time")
            kinds = [COLUMN_KINDS[n] for n in shown_columns(choice.optional)]
            run = Run(
                mode=config.mode,
                engine=config.engine,
                scenario=sc.id,
                title=sc.title,
                emulated=config.switches.names,
                settings=self._settings(config, choice.optional),
                columns=[Column(name=k.name, title=k.title_on(config.engine)) for k in kinds],
                run_id=self.ids.run_id(),
                clock=self.clock,
            )
            run.pacer = pacer
            if config.fallback_reason:
                run.notes.append(config.fallback_reason)
            for listener in listeners:
                run.subscribe(listener)
            self.runs[run.run_id] = run
            self._configs[run.run_id] = config
            self.current = run
        threading.Thread(
            target=self._execute, args=(run, sc, config), name=f"run-{run.run_id}", daemon=True
        ).start()
        return run

    def run(self, choice: RunChoice, timeout: float | None = None) -> Run:
        """Start a run and wait for it to end."""
        run = self.start(choice)
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
                self._temporal = TemporalRuntime(self.paths).start()
            return self._temporal

    def reapprove(self, run: Run) -> None:
        """After interlock refused: a person grants a new approval and the gate sends under it.

        The new action takes the payment as it is now as its decision context (the person
        decided on that), names the refused action in its receipt, and the column's card is
        re-read from Stripe. What is wanted in Stripe now includes the re-approved refund.
        """
        gated = gated_column().name
        col = run.column(gated)
        refused = None if col.outcome is None else col.outcome.action_id
        if (
            not run.finished
            or col.outcome is None
            or col.outcome.status != "refused"
            or not refused
        ):
            raise BusyError("re-approval follows a finished run in which interlock refused")
        config = self._configs[run.run_id]
        owned: Store | None = None
        if config.run_mode.in_process:
            payments, store = self._mock_parts[run.run_id]
        else:
            payments = _stripe(config, run.settings.get("stripe_base"))
            owned = store = config.open_store()
        try:
            now = self.clock.wall()
            support = support_approver(config)
            lease = store.grant_lease(
                support.sign(
                    Lease(
                        id=f"lease_{col.case_id}-reapproved-{len(col.action_ids)}",
                        kind="refund",
                        target=str(col.payment_intent),
                        cap=LEASE_CAP,
                        expires_at=now + LEASE_TTL_S,
                        granted_by=SUPPORT,
                        granted_at=now,
                        currency=CURRENCY,
                    )
                )
            )
            run.add_event(
                gated,
                RunEventKind.REAPPROVE,
                f"a person approves the {format_amount(REFUND_AMOUNT, CURRENCY, trim=True)} "
                "refund again",
                None,
            )
            gate = refund_gate(
                store,
                payments,
                GateOptions(
                    timing=config.timing,
                    owner=Owner.current("reapprove"),
                    on_event=lambda event: _reapprove_event(run, config, event),
                    clock=self.clock.wall,
                    new_action_id=self.ids.action_id,
                    approvers=Approvers.of(support),
                    signing_key=receipt_key(config),
                    anchors=receipt_anchors(config, store),
                    log_every=LOG_EVERY,
                ),
                answerer=config.run_mode.answerer,
                switches=config.switches,
            )
            outcome = gate.reapprove(str(refused), lease.id, approved_by="support")
            case = Case(
                str(col.case_id),
                gated,
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
                    text=f"{col.wanted.text}, then the re-approved "
                    f"{format_amount(REFUND_AMOUNT, CURRENCY, trim=True)}",
                    agent_refunds=col.wanted.agent_refunds + 1,
                )

            run.update(gated, record)
            fill_card(run, col, payments, store, case, config, reapproved=True)
        finally:
            if owned is not None:
                owned.close()

    def _settings(self, config: DemoConfig, optional: frozenset[ColumnKind]) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "claim_ttl_s": config.timing.claim_ttl_s,
            "stripe_timeout_s": config.timing.stripe_timeout_s,
            "model": config.model_label,
            "stripe": config.stripe_label,
            **optional_flags(optional),
            # The journal's backend, and for PostgreSQL where it is (never the password).
            "store": "memory" if config.run_mode.in_process else config.store_backend,
        }
        if not config.run_mode.in_process and config.store_backend == "postgresql":
            settings["store_url"] = config.store_label
        if config.run_mode.emulator:
            settings["stripe_base"] = config.stripe_base or self._emulator_url()
        return settings

    def _emulator_url(self) -> str:
        if self._emulator is None:
            self._emulator = StripeEmulator().start()
        return self._emulator.url

    # -- one run -------------------------------------------------------------------------

    def _execute(self, run: Run, sc: Scenario, config: DemoConfig) -> None:
        try:
            if config.run_mode.in_process:
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
        base = str(run.settings["stripe_base"]) if config.run_mode.emulator else None
        payments = _stripe(config, base)
        store = config.open_store()
        supervisor = Supervisor()
        with self._lock:
            self._supervisor = supervisor
            closing = self._closed
        if closing:
            # close() came after this run started and before it had workers to kill: it
            # starts none (spawn refuses), and ends at once as stopped.
            supervisor.stop()
        # In-flight kills arm a fault on the emulator; only one this engine runs can take it.
        own = (
            self._emulator.model
            if self._emulator is not None and base == self._emulator.url
            else None
        )
        process = ProcessLauncher(config, supervisor, base, own, fork_servers=self.fork_servers)
        try:
            # The process launcher keeps nothing per column; Temporal's follows each workflow.
            temporal: Callable[[], Launcher] | None = None
            if config.engine == TEMPORAL:
                from interlock_demo.engine.temporal import temporal_launchers  # an extra

                temporal = temporal_launchers(self.temporal(), run, config, process)

            def script(col: Column) -> ColumnScript:
                launcher = process if temporal is None else temporal()
                return ColumnScript(run, col, sc, config, payments, store, launcher, hold=self.hold)

            self._play(run, script)
        finally:
            supervisor.stop()
            store.close()

    def _execute_mock(self, run: Run, sc: Scenario, config: DemoConfig) -> None:
        model = (
            PaymentsModel(clock=self.clock.wall)
            if self.ids.object_id is None
            else PaymentsModel(clock=self.clock.wall, new_id=self.ids.object_id)
        )
        payments = InProcessPayments(model)

        def script(col: Column) -> ColumnScript:
            # Each column keeps claims in its own clock, which skips its simulated waits;
            # one shared store would let one column's skipped wait expire another's claim.
            clock = MockClock(self.clock.wall())
            store = MemoryStore(clock=clock.now)
            if column_kind(col.name).signs_receipts:
                self._mock_parts = {run.run_id: (payments, store)}
            launcher = MockLauncher(
                model, clock, new_action_id=self.ids.action_id, pace_s=self.mock_pace_s
            )
            return ColumnScript(run, col, sc, config, payments, store, launcher, hold=self.hold)

        self._play(run, script)

    def _play(self, run: Run, script: Callable[[Column], ColumnScript]) -> None:
        """Play every column's script on its own thread; return when all have ended."""
        threads = []
        for col in run.columns:
            column = script(col)
            column.kill_beat_s = self.kill_beat_s
            t = threading.Thread(target=column.play, name=f"{run.run_id}-{col.name}", daemon=True)
            threads.append(t)
            t.start()
        for t in threads:
            t.join()


def _stripe(config: DemoConfig, base: str | None) -> StripePayments:
    """The run's Stripe: the emulator at `base` (offline) or Stripe test mode (live)."""
    if config.run_mode.emulator:
        key = EMULATOR_KEY
    else:
        assert config.stripe_key is not None  # a live config has one
        key = config.stripe_key.value
    client = make_stripe_client(key, timeout_s=config.timing.stripe_timeout_s, base_url=base)
    return StripePayments(client)


def _reapprove_event(run: Run, config: DemoConfig, event: Event) -> None:
    text = gate_event_text(event, answerer=config.run_mode.answerer)
    if text is not None:
        run.add_event(
            gated_column().name, gate_kind(event.kind), text, None, event_fields(event.data)
        )
