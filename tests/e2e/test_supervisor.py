"""The supervisor: exit codes in words, a worker's states and events, and killing a tree.

The children are tiny real Python processes (`python -c ...`); the tests wait on their
events and exits with deadlines, never on sleeps.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from interlock_demo.engine.supervisor import (
    Supervisor,
    WorkerProcess,
    WorkerState,
    kill_tree,
)
from interlock_demo.exit_codes import describe_exit
from tests.helpers.worker_events import Recorder
from workers.protocol import SIGKILL_EXIT

DEADLINE_S = 10.0

# Prints two JSON events and a line that is not JSON, then SIGKILLs itself.
PRINT_AND_DIE = """
import json, os, signal
print(json.dumps({"kind": "first", "text": "one"}), flush=True)
print(json.dumps({"kind": "second", "text": "two"}), flush=True)
print("not json at all", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

# Starts a grandchild that sleeps, reports its pid, then blocks on stdin (its lifeline).
SPAWN_GRANDCHILD = """
import json, subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(json.dumps({"kind": "grandchild", "pid": grandchild.pid}), flush=True)
sys.stdin.read()
"""


def _worker(code: str, rec: Recorder, tmp_path: Path) -> WorkerProcess:
    return WorkerProcess(
        [sys.executable, "-c", code],
        {"PATH": "/usr/bin:/bin"},
        on_event=rec.on_event,
        on_state=rec.on_state,
        log_path=tmp_path / "logs" / "worker.log",
    )


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], deadline_s: float = DEADLINE_S) -> list[int]:
    deadline = time.monotonic() + deadline_s
    left = [p for p in pids if not _gone(p)]
    while left and time.monotonic() < deadline:
        psutil.wait_procs([psutil.Process(p) for p in left if not _gone(p)], timeout=0.2)
        left = [p for p in left if not _gone(p)]
    return left


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (-9, "exit -9 (SIGKILL)"),
        (-15, "exit -15 (SIGTERM)"),
        (0, "exit 0"),
        (3, "exit 3"),
        (None, "running"),
        (-200, "exit -200 (signal 200)"),
    ],
)
def test_describe_exit(code: int | None, words: str) -> None:
    """Exit codes read in words: negative ones name the signal, -9 is SIGKILL."""
    assert describe_exit(code) == words


def test_worker_reports_events_in_order_then_killed(tmp_path: Path) -> None:
    """A worker that SIGKILLs itself goes starting -> running -> killed, with every event first."""
    rec = Recorder()
    worker = _worker(PRINT_AND_DIE, rec, tmp_path)
    assert worker.state is WorkerState.STARTING
    assert worker.pid is None
    Supervisor().spawn(worker)
    assert worker.pid is not None
    assert worker.wait(DEADLINE_S) == SIGKILL_EXIT
    assert worker.exit_code == -signal.SIGKILL
    assert rec.states == [WorkerState.RUNNING, WorkerState.KILLED]
    assert worker.state is WorkerState.KILLED
    events = rec.drain()
    assert [e["kind"] for e in events] == ["first", "second", "output"]
    assert events[2]["text"] == "not json at all"
    assert describe_exit(worker.exit_code) == "exit -9 (SIGKILL)"


def test_worker_that_exits_cleanly_is_exited(tmp_path: Path) -> None:
    """A worker that returns normally ends in EXITED with its exit code, not KILLED."""
    rec = Recorder()
    worker = _worker('import sys; print(\'{"kind": "hi"}\'); sys.exit(4)', rec, tmp_path)
    Supervisor().spawn(worker)
    assert worker.wait(DEADLINE_S) == 4
    assert rec.states == [WorkerState.RUNNING, WorkerState.EXITED]
    assert [e["kind"] for e in rec.drain()] == ["hi"]


def test_supervisor_stop_kills_the_whole_tree(tmp_path: Path) -> None:
    """`Supervisor.stop()` SIGKILLs a worker and the grandchild it started, and reaps the worker."""
    rec = Recorder()
    supervisor = Supervisor()
    worker = supervisor.spawn(_worker(SPAWN_GRANDCHILD, rec, tmp_path))
    assert worker.pid is not None
    try:
        event = rec.events.get(timeout=DEADLINE_S)
        grandchild = int(event["pid"])
        assert not _gone(grandchild)
        assert worker.exit_code is None
        supervisor.stop()
        assert supervisor.stopped
        assert worker.exit_code == SIGKILL_EXIT
        assert rec.states == [WorkerState.RUNNING, WorkerState.KILLED]
        assert _wait_gone([worker.pid, grandchild]) == []
        with pytest.raises(RuntimeError, match="stopping"):
            supervisor.spawn(_worker("pass", Recorder(), tmp_path))
    finally:
        supervisor.stop()


def test_kill_tree_kills_a_parent_and_the_child_it_started() -> None:
    """`kill_tree` SIGKILLs a process and the child it spawned (the child listed before the
    parent dies, so it is not lost when it moves to init)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", SPAWN_GRANDCHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    child: int | None = None
    try:
        child = int(json.loads(parent.stdout.readline())["pid"])
        assert not _gone(child)
        kill_tree(parent.pid)
        assert parent.wait(DEADLINE_S) == SIGKILL_EXIT
        assert _wait_gone([child]) == []
    finally:
        # Whatever the test left alive: SIGKILL by the plain route, not the one under test.
        for pid in (child, parent.pid if parent.poll() is None else None):
            if pid is not None and not _gone(pid):
                psutil.Process(pid).kill()
        parent.wait(DEADLINE_S)
        parent.stdin.close()
        parent.stdout.close()
