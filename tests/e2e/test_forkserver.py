"""A column's fork server: its workers are real processes, SIGKILLed and restarted from it,
and a fork server that is broken or gone means a cold start that says so.

The worker is the real `workers.standalone`, forked by the real `workers.zygote`. Its case
file is a FIFO: the worker blocks opening it until the test writes, so it is alive for as
long as the test needs, with no sleep. Every test ends with each pid it saw gone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from interlock.testing import PaymentsModel, Reply, StripeEmulator
from interlock_demo.core.run import RunEventKind
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.engine.forkserver import ForkServer
from interlock_demo.engine.supervisor import Supervisor, WorkerProcess, WorkerState
from interlock_demo.settings.config import resolve
from tests.helpers.worker_events import Recorder
from workers.protocol import EXIT_ERROR, EXIT_ORPHANED, SIGKILL_EXIT

pytestmark = pytest.mark.e2e

DEADLINE_S = 30.0


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "INTERLOCK_HOME": str(tmp_path / "home"),
    }


def _worker(tmp_path: Path, case: Path, rec: Recorder, server: ForkServer | None) -> WorkerProcess:
    return WorkerProcess(
        [sys.executable, "-m", "workers.standalone", str(case)],
        _env(tmp_path),
        on_event=rec.on_event,
        on_state=rec.on_state,
        log_path=tmp_path / "logs" / "worker.log",
        fork_server=server,
    )


def _server(tmp_path: Path, column: str = "standard") -> ForkServer:
    return ForkServer(column, _env(tmp_path), tmp_path / "logs" / "forkserver.log")


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "case.fifo"
    if not path.exists():
        os.mkfifo(path)
    return path


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _assert_gone(pids: list[int]) -> None:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=DEADLINE_S)
    assert [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.fixture(autouse=True)
def _logs(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()


def test_a_worker_is_forked_sigkilled_and_restarted_from_the_fork_server(tmp_path: Path) -> None:
    """Each worker is a process of its own (not a thread of the supervisor), the fork
    server's child in a new session; a SIGKILL kills it, the fork server reports the
    SIGKILL as its exit code, and the restart is another process forked the same way."""
    supervisor = Supervisor()
    server = supervisor.fork_server(_server(tmp_path))
    fifo = _fifo(tmp_path)
    seen: list[int] = []
    try:
        first = supervisor.spawn(_worker(tmp_path, fifo, rec := Recorder(), server))
        assert first.forked and first.cold_reason is None
        assert first.pid is not None and server.pid is not None
        seen += [first.pid, server.pid]
        proc = psutil.Process(first.pid)
        assert proc.ppid() == server.pid != os.getpid()
        # It forked, so it had imported everything: still no thread but its main one.
        assert psutil.Process(server.pid).num_threads() == 1
        assert os.getsid(first.pid) == first.pid  # its own session, as a cold start's
        assert first.pid not in {t.id for t in psutil.Process().threads()}
        # `ps` and psutil name it as they would a cold start.
        assert " ".join(proc.cmdline()) == f"{sys.executable} -m workers.standalone {fifo}"
        first.kill()
        assert first.wait(DEADLINE_S) == SIGKILL_EXIT
        assert rec.states == [WorkerState.RUNNING, WorkerState.KILLED]

        again = supervisor.spawn(_worker(tmp_path, fifo, rec2 := Recorder(), server))
        assert again.forked and again.pid is not None
        seen.append(again.pid)
        assert again.pid != first.pid
        assert psutil.Process(again.pid).ppid() == server.pid
        fifo.write_text("not a case")  # it reads it and says what is wrong with it
        assert again.wait(DEADLINE_S) == EXIT_ERROR
        error = rec2.events.get(timeout=DEADLINE_S)
        assert error["kind"] == "error" and error["pid"] == again.pid
        assert rec2.states == [WorkerState.RUNNING, WorkerState.EXITED]
    finally:
        supervisor.stop()
    _assert_gone(seen)


def test_a_killed_fork_server_means_a_cold_start_that_says_so(tmp_path: Path) -> None:
    """A fork server SIGKILLed between workers: the next worker starts cold (the
    supervisor's own child), its `cold_reason` and its log say the fork server is gone."""
    supervisor = Supervisor()
    server = supervisor.fork_server(_server(tmp_path))
    fifo = _fifo(tmp_path)
    seen: list[int] = []
    try:
        first = supervisor.spawn(_worker(tmp_path, fifo, Recorder(), server))
        assert first.forked and first.pid is not None and server.pid is not None
        seen += [first.pid, server.pid]
        first.kill()
        assert first.wait(DEADLINE_S) == SIGKILL_EXIT
        psutil.Process(server.pid).kill()

        cold = supervisor.spawn(_worker(tmp_path, fifo, Recorder(), server))
        assert cold.pid is not None
        seen.append(cold.pid)
        assert not cold.forked
        assert cold.cold_reason is not None and "gone" in cold.cold_reason
        assert psutil.Process(cold.pid).ppid() == os.getpid()
        log = (tmp_path / "logs" / "worker.log").read_text()
        assert "the fork server cannot give a worker: it is gone" in log
        assert "starting it cold" in log
        fifo.write_text("not a case")
        assert cold.wait(DEADLINE_S) == EXIT_ERROR
    finally:
        supervisor.stop()
    _assert_gone(seen)


def test_a_fork_server_that_cannot_import_means_a_cold_start(tmp_path: Path) -> None:
    """A fork server for a column with no worker module stops at its imports: the worker
    starts cold and the reason names the import failure."""
    supervisor = Supervisor()
    server = supervisor.fork_server(_server(tmp_path, column="no-such-column"))
    fifo = _fifo(tmp_path)
    try:
        cold = supervisor.spawn(_worker(tmp_path, fifo, Recorder(), server))
        assert not cold.forked and cold.pid is not None
        assert cold.cold_reason is not None
        assert "cannot import its worker" in cold.cold_reason
        assert "no-such-column" in cold.cold_reason
        fifo.write_text("not a case")
        assert cold.wait(DEADLINE_S) == EXIT_ERROR
    finally:
        supervisor.stop()
    assert server.pid is not None
    _assert_gone([server.pid, cold.pid])


def test_a_worker_whose_fork_server_dies_is_not_left_behind(tmp_path: Path) -> None:
    """The fork server SIGKILLed under a running worker: the worker's reader ends (the exit
    code went with the fork server: the worker stops as orphaned) and no process is left."""
    supervisor = Supervisor()
    server = supervisor.fork_server(_server(tmp_path))
    fifo = _fifo(tmp_path)
    try:
        worker = supervisor.spawn(_worker(tmp_path, fifo, Recorder(), server))
        assert worker.forked and worker.pid is not None and server.pid is not None
        psutil.Process(server.pid).kill()
        assert worker.wait(DEADLINE_S) == EXIT_ORPHANED
        assert not _alive(worker.pid)
    finally:
        supervisor.stop()
    _assert_gone([server.pid, worker.pid])


class Arrivals(PaymentsModel):
    """The payments model, noting when each request about a payment arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, str]] = []

    def serve(
        self, route: Any, ident: str, params: Any, idempotency_key: str | None = None
    ) -> Reply:
        """Note the payment a request is about, then answer as the model does."""
        pi = ident or params.get("payment_intent")
        if isinstance(pi, str):
            self.seen.append((time.monotonic(), pi))
        return super().serve(route, ident, params, idempotency_key)


@pytest.mark.timeout(120)
def test_a_run_restarts_each_column_s_worker_from_its_fork_server(tmp_path: Path) -> None:
    """A real offline run (after-answer): each column's killed worker and its restart come
    from the same fork server (their parent, not this process), with different pids, no
    cold start, and the restarted worker's first Stripe call comes after its restart."""
    model = Arrivals()
    with StripeEmulator(model=model) as emulator:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
        env.update(
            INTERLOCK_HOME=str(tmp_path / "home"),
            INTERLOCK_CLAIM_TTL="6",
            INTERLOCK_STRIPE_TIMEOUT="1",
        )
        env.pop("STRIPE_SECRET_KEY", None)
        config = resolve(mode="offline", stripe_base=emulator.url, env=env)
        engine = Engine(config)
        try:
            run = engine.run(RunChoice(config, "after-answer"), timeout=DEADLINE_S * 3)
        finally:
            engine.close()
    assert run.finished and run.error is None and run.all_as_predicted
    t0 = time.monotonic() - run.now()
    for col in run.columns:
        assert not [e for e in col.events if e.kind == RunEventKind.COLD_START]
        starts = [e for e in col.events if e.kind == "start"]
        assert len(starts) == 2 == len(col.workers)
        killed, restarted = starts
        assert killed.pid != restarted.pid
        assert killed.data["parent"] == restarted.data["parent"] != os.getpid()
        assert [w.pid for w in col.workers] == [killed.pid, restarted.pid]
        after = [t for t, pi in model.seen if pi == col.payment_intent and t - t0 >= restarted.t]
        assert after, f"{col.name}: no Stripe call after the restart"
    _assert_gone([w.pid for c in run.columns for w in c.workers if w.pid is not None])


def test_fork_request_wire_refuses_what_is_not_an_object() -> None:
    """The wire's decoder refuses a message that is not a JSON object, in words."""
    from workers.protocol.forkserver import decode, encode

    assert decode(encode({"pid": 3})) == {"pid": 3}
    with pytest.raises(ValueError, match="JSON object"):
        decode(json.dumps([1]).encode())
