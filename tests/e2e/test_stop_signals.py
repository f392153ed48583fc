"""One Ctrl-C (or SIGTERM) stops every command at once: what it started dies with it, and
one line says what finished and what did not.

Each case starts a real command in a session of its own, as a terminal starts a job,
waits for its output to show it is doing real work (and, where it runs workers, for a
worker process), then sends the signal: SIGINT to the whole process group, as a
terminal's Ctrl-C does, or SIGTERM to the command alone. The contract: it exits well
before finishing would, with its stop code, one line naming the signal and what was done,
no traceback, and no process of its own left: not the ones seen before the signal, not one
in its session, not one anywhere that runs with its INTERLOCK_HOME.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from interlock_demo.engine.temporal.probe import temporal_unavailable
from tests.helpers.headless import ROOT, Lines, cli_env
from tests.unit.test_receipts_verify import _store_with_receipts

pytestmark = pytest.mark.e2e

# Far below what any command here takes to finish; far above what stopping takes.
STOP_DEADLINE_S = 20.0
START_DEADLINE_S = 90.0
DEMO = [sys.executable, "-m", "interlock_demo.cli"]
LIBRARY = [sys.executable, "-m", "interlock"]
# A script's background job (`cmd &`) starts with SIGINT ignored; it stays so across exec.
SIGINT_IGNORED = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]
# The demo's timings: a run waits out a 15 s claim, so finishing one takes longer than
# STOP_DEADLINE_S.
SLOW_TIMINGS = {"INTERLOCK_CLAIM_TTL": "15", "INTERLOCK_STRIPE_TIMEOUT": "10"}


@dataclass
class Stopped:
    """How a command ended after the signal."""

    code: int
    took_s: float
    stdout: str
    stderr: str
    left: list[psutil.Process]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=10)
    return [p for p in alive if _running(p)]


def _running(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _ours(home: Path, session: int) -> list[psutil.Process]:
    """Processes in the command's session, or running with its INTERLOCK_HOME (its
    workers and runs, each in a session of its own)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid():
                continue
            if os.getsid(p.pid) == session or str(home) in p.environ().get("INTERLOCK_HOME", ""):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    return [p for p in found if _running(p)]


def _below(pid: int, looks_like: Callable[[str], bool]) -> list[psutil.Process]:
    """The processes under `pid` whose command line `looks_like` says is real work."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if looks_like(" ".join(child.cmdline())):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _worker(cmdline: str) -> bool:
    return "workers.standalone" in cmdline


def _stop(
    home: Path,
    command: list[str],
    started: str | None,
    *,
    on_stdout: bool = False,
    sig: signal.Signals = signal.SIGINT,
    working: Callable[[str], bool] | None = None,
    sigint_ignored: bool = False,
    env: dict[str, str] | None = None,
    ready: Callable[[], bool] | None = None,
) -> Stopped:
    """Start `command`, wait for `started` on its stderr (stdout with `on_stdout`), for a
    process under it that is `working`, and for `ready()`; send `sig`; see how it ends."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [*(SIGINT_IGNORED if sigint_ignored else []), *command],
        stdin=subprocess.PIPE,  # kept open: a stdio server ends when its stdin closes
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=cli_env(home, **(env or {})),
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout, START_DEADLINE_S), Lines(proc.stderr, START_DEADLINE_S)
    try:
        if started is not None:
            (out if on_stdout else err).until(started)
        deadline = time.monotonic() + START_DEADLINE_S
        while working is not None and not _below(proc.pid, working):
            assert time.monotonic() < deadline, f"no real work under it: {err.seen}"
            time.sleep(0.05)  # polling another process's children: no event to wait on
        if ready is not None:
            assert ready(), f"it never reached its real work: {err.seen}"
        seen = psutil.Process(proc.pid).children(recursive=True)
        sent = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the whole foreground group
        else:
            proc.send_signal(sig)
        code = proc.wait(STOP_DEADLINE_S)
        took = time.monotonic() - sent
        stdout = "".join(out.seen) + out.rest()
        stderr = "".join(err.seen) + err.rest()
        left = _alive(seen) + [p for p in _ours(home, proc.pid) if p not in seen]
    finally:
        for p in _ours(home, proc.pid):
            p.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        out.rest(), err.rest()  # the readers end at the pipes' end, before they close
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    return Stopped(code, took, stdout, stderr, left)


def _check(stopped: Stopped, code: int, line: str) -> str:
    """The common contract; returns the command's stop line (starting with `line`)."""
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    assert stopped.code == code, stopped.stderr[-3000:]
    assert stopped.took_s < STOP_DEADLINE_S
    assert not stopped.left, f"left running: {stopped.left}"
    found = [s for s in stopped.stderr.splitlines() if s.startswith(line)]
    assert len(found) == 1, stopped.stderr[-3000:]
    return found[0]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["ctrl-c", "sigterm", "ctrl-c-in-a-background-job"],
)
def test_sweep_stops_its_runs_at_once_and_counts_the_cells(
    tmp_path: Path, sig: signal.Signals, sigint_ignored: bool
) -> None:
    """A sweep with runs going: their workers die, nothing is printed on stdout, and one
    line counts the cells finished, stopped and never started (72 in all)."""
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "sweep", "--offline"],
        "[ 1/",
        sig=sig,
        working=_worker,
        sigint_ignored=sigint_ignored,
    )
    words = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    line = _check(stopped, 3, f"interlock-demo sweep stopped by {words}: ")
    counts = line.split(": ", 1)[1]
    finished, stopped_cells, not_started = (
        int(counts.split(" of 72 cells finished, ")[0]),
        int(counts.split(" cells finished, ")[1].split(" stopped")[0]),
        int(counts.split(" stopped, ")[1].split(" not started")[0]),
    )
    assert counts.endswith("not started; nothing written"), line
    assert finished >= 3 and stopped_cells >= 3, line
    assert finished + stopped_cells + not_started == 72, line
    assert stopped.stdout == ""


@pytest.mark.timeout(180)
def test_the_fault_sweep_stops_at_once_too(tmp_path: Path) -> None:
    """The fault sweep's held calls are not waited out: Ctrl-C with runs going ends it."""
    # Runs going: its first cells' workers. (Waiting for the first row's line instead, as
    # the crash-point sweep's test must to count finished cells, waited out that row's
    # held call, 13 s, only to signal as the next row's workers started.)
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "sweep", "--offline", "--faults"],
        "sweep: ",
        working=_worker,
        env=SLOW_TIMINGS,
    )
    line = _check(stopped, 3, "interlock-demo sweep stopped by Ctrl-C: ")
    assert " of 63 cells finished, " in line and line.endswith("; nothing written")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_record_stops_the_app_and_writes_no_cast(tmp_path: Path, sig: signal.Signals) -> None:
    """A recording stopped mid-run stops the app and its workers and writes no file, not
    even a partial one beside the cast."""
    out = tmp_path / "talk" / "hand-refund.cast"
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "record", "--scenario", "hand-refund", "--offline", "--out", str(out)],
        "record: the app (pid",
        sig=sig,
        working=_worker,
        env=SLOW_TIMINGS,
    )
    words = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    line = _check(stopped, 3, f"interlock-demo record stopped by {words}: ")
    assert line.endswith(f"the app and its workers stopped; nothing written to {out}")
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


@pytest.mark.timeout(180)
@pytest.mark.skipif(temporal_unavailable() is not None, reason="the report needs both engines")
def test_e2e_report_stops_its_runs_and_writes_no_report(tmp_path: Path) -> None:
    """The engine report stopped with its runs going: they and their workers die, and no
    report is written."""
    out = tmp_path / "report.md"
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "e2e-report", "--parallel", "2", "--out", str(out)],
        "offline runs, 2 at a time",
        working=_worker,
    )
    line = _check(stopped, 3, "interlock-demo e2e-report stopped by Ctrl-C: ")
    assert " of 10 runs finished, " in line and line.endswith(f"; nothing written to {out}")
    assert not out.exists()


@pytest.mark.timeout(180)
def test_screenshots_stop_the_run_and_say_which_files_were_written(tmp_path: Path) -> None:
    """Screenshots stopped during the first run: its workers die, and the line names the
    one file written before it (the idle screen)."""
    out = tmp_path / "shots"
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "screenshots", "--out", str(out), "--scenario", "hand-refund"],
        "screenshots: running hand-refund",
        working=_worker,
    )
    line = _check(stopped, 3, "interlock-demo screenshots stopped by Ctrl-C: ")
    written = sorted(p.name for p in out.iterdir())
    assert line.endswith(f"its workers stopped; wrote {', '.join(written)} to {out}"), line
    assert "idle.svg" in written and "hand-refund.svg" not in written


@pytest.mark.timeout(180)
def test_results_stop_in_their_step_and_name_what_was_done(tmp_path: Path) -> None:
    """`results` stopped in its offline runs: the mock runs are done (and written), the
    offline runs stopped with their workers, every later step not run."""
    out = tmp_path / "results"
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "results", "--out", str(out)],
        "results: offline runs...",
        sig=signal.SIGTERM,
        working=_worker,
    )
    line = _check(stopped, 3, "interlock-demo results stopped by SIGTERM: ")
    assert line.startswith(
        "interlock-demo results stopped by SIGTERM: offline runs stopped; done: mock runs; "
        "not run: sweep (offline), fault sweep (offline)"
    ), line
    assert (out / "runs_mock.json").exists() and not (out / "runs_offline.json").exists()


@pytest.mark.timeout(180)
@pytest.mark.skipif(temporal_unavailable() is not None, reason="doctor starts Temporal with it")
def test_doctor_stops_the_dev_server_it_was_starting(tmp_path: Path) -> None:
    """doctor stopped while Temporal's dev server starts: the server dies with it, and the
    line names the checks done; exit 3, not a verdict."""

    def dev_server(cmdline: str) -> bool:
        return "temporal" in cmdline and "server" in cmdline

    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "doctor", "--offline"],
        "emulator",
        on_stdout=True,
        working=dev_server,
    )
    line = _check(stopped, 3, "interlock-demo doctor stopped by Ctrl-C: ")
    assert "checks done (mode, keys, workers, forks, emulator)" in line, line
    assert line.endswith("the rest not run; not known to be ready"), line
    assert "ready" not in stopped.stdout.splitlines()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["ctrl-c", "in-a-background-job"])
def test_the_mcp_server_ends_on_ctrl_c_as_its_normal_end(
    tmp_path: Path, sigint_ignored: bool
) -> None:
    """The MCP server (its normal end is Ctrl-C, exit 0) stops its emulator and says a
    refund cut off mid-call is safe in its journal."""
    pytest.importorskip("mcp")
    stopped = _stop(
        tmp_path / "home",
        [*DEMO, "mcp", "--offline"],
        "serving get_payment and issue_refund",
        sigint_ignored=sigint_ignored,
    )
    line = _check(stopped, 0, "interlock-demo mcp stopped by Ctrl-C: ")
    assert "settled when it starts again, never sent twice" in line


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["ctrl-c", "sigterm", "ctrl-c-in-a-background-job"],
)
def test_verify_stopped_while_it_reads_stripe_exits_3(
    tmp_path: Path, sig: signal.Signals, sigint_ignored: bool
) -> None:
    """`python -m interlock verify --stripe` stopped while Stripe (here a server that takes
    the request and never answers) has it: exit 3 and one line, not its timeout's wait."""
    store = tmp_path / "journal.sqlite3"
    _store_with_receipts(store)
    silent = socket.create_server(("127.0.0.1", 0))
    silent.settimeout(START_DEADLINE_S)
    asked = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            conn, _ = silent.accept()
        except OSError:  # it never came: the test fails on `asked`
            return
        held.append(conn)
        asked.set()

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    try:
        stopped = _stop(
            tmp_path / "home",
            [*LIBRARY, "verify", "--stripe", str(store)],
            None,
            sig=sig,
            sigint_ignored=sigint_ignored,
            env={
                "STRIPE_SECRET_KEY": "sk_test_MadeUpForTheStopTest0000",
                "INTERLOCK_STRIPE_BASE": f"http://127.0.0.1:{silent.getsockname()[1]}",
            },
            ready=lambda: asked.wait(START_DEADLINE_S),
        )
    finally:
        acceptor.join(START_DEADLINE_S)
        silent.close()
        for conn in held:
            conn.close()
    words = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    line = _check(stopped, 3, f"python -m interlock verify stopped by {words} ")
    assert line.endswith(f"before it finished: no result; {store} was only read"), line
    assert stopped.stdout == ""
