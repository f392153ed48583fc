"""A LangChain agent guarded by `interlock.langchain`, SIGKILLed inside its refund tool.

Each case runs the agent (`tests/helpers/lc_agent.py`: a scripted model, LangGraph's
SQLite checkpointer, the real `stripe` SDK against the loopback emulator) in its own OS
process, kills it with SIGKILL when it reports a crash point inside the guarded tool,
acts during the outage as a person would, then starts a new process that resumes the
thread from the checkpointer (same thread id, `invoke(None, ...)`). Stripe must hold what
the truth table wants, and the tool's answer to the model must say what happened. The last
test restarts it as `docs/guides/langchain.md` shows: `gate.recover()` first, then the
resume.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    Lease,
    SQLiteStore,
    StripePayments,
    make_stripe_client,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY, isolate_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
AMOUNT = 2_000
# A resumed run waits out the dead run's in-flight window (Stripe timeout 1 s + 5 s).
DEADLINE_S = 60.0


class Agent:
    """One agent process; its stdout's JSON lines arrive on a queue, read with deadlines."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "STRIPE_SECRET_KEY": TEST_KEY, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.lc_agent", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def until(self, event: str) -> dict[str, Any]:
        """The first line of this event, within the deadline; fails on exit or timeout."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the agent did not report {event!r} within {DEADLINE_S} s")
            if line is None:
                pytest.fail(f"the agent exited ({self.proc.wait()}) before {event!r}: {self.seen}")
            self.seen.append(line)
            if line["event"] == event:
                return line

    def kill(self) -> int:
        """SIGKILL the process; its exit code (-9)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout=DEADLINE_S)


@dataclass
class Case:
    """A payment with a $20 approval, the journal and the checkpoints the runs share."""

    payments: StripePayments
    payment_intent: str
    store_path: Path
    checkpoints: Path
    url: str
    thread: str

    def run(self, crash: str, agents: list[Agent], *restart: str) -> Agent:
        agent = Agent(
            [
                str(self.store_path),
                str(self.checkpoints),
                self.url,
                self.thread,
                self.payment_intent,
                crash,
                *restart,
            ]
        )
        agents.append(agent)
        return agent

    def refunds(self) -> list[tuple[str, int]]:
        """Each refund at the emulator as (`agent` or `hand`, amount)."""
        return [
            ("agent" if ACTION_METADATA_KEY in r.metadata else "hand", r.amount)
            for r in self.payments.list_refunds(self.payment_intent)
        ]


def _reap(started: list[Agent]) -> None:
    """Kill and reap any agent process still running; close its pipe."""
    for a in started:
        if a.proc.poll() is None:
            a.kill()
        a.reader.join(timeout=DEADLINE_S)
        assert a.proc.stdout is not None
        a.proc.stdout.close()


def _new_case(emulator: StripeEmulator, tmp_path: Path) -> Case:
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=2.0, base_url=emulator.url))
    pi = payments.create_payment(10_000).id
    store_path = tmp_path / "interlock.sqlite3"
    with closing(SQLiteStore(store_path)) as store:
        now = time.time()
        store.grant_lease(Lease(f"lease_{pi}", "refund", pi, AMOUNT, now + 3600, "support", now))
    return Case(
        payments, pi, store_path, tmp_path / "checkpoints.sqlite3", emulator.url, str(uuid.uuid4())
    )


# (crash, outage, wanted at Stripe, the action's status) of each resumed row.
RESUMED = [
    ("before-send", "hand-refund", [("hand", AMOUNT)], "refused"),
    ("before-send", "revoked", [], "refused"),
    ("after-answer", "none", [("agent", AMOUNT)], "adopted"),
]
RESTARTED = "restarted-as-the-guide-shows"


def _resumed(
    case: Case, agents: list[Agent], crash: str, outage: str, wanted: list[Any], status: str
) -> None:
    first = case.run(crash, agents)
    at = first.until("crash-point")
    assert at["at"] == crash
    assert first.kill() == -signal.SIGKILL
    dead_action = next(e["action_id"] for e in first.seen if e["event"] == "gate")

    if outage == "hand-refund":
        case.payments.create_refund(case.payment_intent, AMOUNT)
    elif outage == "revoked":
        with closing(SQLiteStore(case.store_path)) as store:
            store.revoke_lease(f"lease_{case.payment_intent}", "support")

    second = case.run("none", agents)
    assert second.until("start")["resuming"] is True
    done = second.until("done")
    assert second.proc.wait(timeout=DEADLINE_S) == 0

    assert sorted(case.refunds()) == sorted(wanted)
    assert done["outcome"]["action_id"] == dead_action
    assert done["outcome"]["status"] == status
    if status == "adopted":
        assert done["status"] == "success"
        assert done["words"].startswith("done: refunded")
        assert "made by an earlier try of this same call" in done["words"]
        assert "before-send" not in [e.get("step") for e in second.seen]
    else:
        assert done["status"] == "error"
        assert done["words"].startswith("not done, refused: ")
        reason = "revoked" if outage == "revoked" else "refunds changed"
        assert reason in done["outcome"]["reason"]
    with closing(SQLiteStore(case.store_path)) as store:
        assert verify(store, case.payments).ok


def _restarted(case: Case, agents: list[Agent]) -> None:
    first = case.run("after-answer", agents)
    assert first.until("crash-point")["at"] == "after-answer"
    assert first.kill() == -signal.SIGKILL
    dead_action = next(e["action_id"] for e in first.seen if e["event"] == "gate")

    second = case.run("none", agents, "recover")
    recovered = second.until("recovered")["outcomes"]
    assert recovered == [{"action_id": dead_action, "status": "adopted"}]
    assert second.until("start")["resuming"] is True
    done = second.until("done")
    assert second.proc.wait(timeout=DEADLINE_S) == 0

    assert case.refunds() == [("agent", AMOUNT)]
    assert (done["outcome"]["action_id"], done["outcome"]["status"]) == (dead_action, "adopted")
    assert done["status"] == "success"
    assert done["words"].startswith("done: refunded $20.00")
    assert done["said"].endswith(done["words"])  # what the model told the user
    assert "before-send" not in [e.get("step") for e in second.seen]
    with closing(SQLiteStore(case.store_path)) as store:
        checked = verify(store, case.payments)
        assert checked.ok, checked.problems


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Every row at once, each in a thread with its own emulator, journal and checkpoints:
    a row mostly waits (the agents' starts, the dead run's in-flight window). What each row
    raised (None when it held), for its test to raise; the environment is a test's
    (`isolate_env`: a module fixture runs before the tests' own isolation)."""
    base = tmp_path_factory.mktemp("langchain")
    outcomes: dict[str, BaseException | None] = {}

    def one(name: str, body: Callable[[Case, list[Agent]], None]) -> None:
        folder = base / name
        folder.mkdir()
        started: list[Agent] = []
        try:
            with StripeEmulator() as emulator:
                try:
                    body(_new_case(emulator, folder), started)
                finally:
                    _reap(started)
        except BaseException as e:  # raised again by the row's own test
            outcomes[name] = e
        else:
            outcomes[name] = None

    bodies: dict[str, Callable[[Case, list[Agent]], None]] = {
        RESTARTED: _restarted,
        **{
            f"{crash}+{outage}": functools.partial(
                _resumed, crash=crash, outage=outage, wanted=wanted, status=status
            )
            for crash, outage, wanted, status in RESUMED
        },
    }
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate_env(monkeypatch, base)
        threads = [threading.Thread(target=one, args=item) for item in bodies.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return outcomes


@pytest.mark.parametrize(("crash", "outage", "wanted", "status"), RESUMED)
def test_a_killed_agent_resumed_from_its_checkpoint_ends_as_the_truth_table_says(
    rows: dict[str, BaseException | None], crash: str, outage: str, wanted: list[Any], status: str
) -> None:
    """Killed inside the guarded tool and resumed by thread id, the agent reaches the same
    action: it adopts its own refund, or refuses after a hand refund or a revocation."""
    if (raised := rows[f"{crash}+{outage}"]) is not None:
        raise raised


def test_a_killed_agent_restarted_as_the_guide_shows_recovers_first_then_is_told_done(
    rows: dict[str, BaseException | None],
) -> None:
    """SIGKILLed after Stripe's answer; the new process starts as `docs/guides/langchain.md`
    shows: `gate.recover()` adopts the refund (receipted), then `invoke(None, thread)`
    re-runs the same call, answered from the journal: one refund, verify clean, done."""
    if (raised := rows[RESTARTED]) is not None:
        raise raised
