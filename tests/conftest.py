"""Shared fixtures: a loopback Stripe emulator, an isolated INTERLOCK_HOME, clean env."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import StripePayments, make_stripe_client
from interlock.testing import PaymentsModel, StripeEmulator
from interlock.testing import model as model_module
from tests.helpers import early_lint

# NO_COLOR changes Textual's rendering and would break snapshot comparisons.
os.environ.pop("NO_COLOR", None)

TEST_KEY = "sk_test_interlockTestsOnly0000"


def isolate_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An INTERLOCK_HOME under `tmp_path` and no keys or switches from outside: what every
    test gets, and what a module fixture that runs processes applies for its own span."""
    for name in (
        "STRIPE_SECRET_KEY",
        "ANTHROPIC_API_KEY",
        "INTERLOCK_EMULATE_24H",
        "INTERLOCK_NO_LOOKUP",
        "INTERLOCK_CRASH",
        "INTERLOCK_RECEIPT_KEY",
        "INTERLOCK_SIGNING_KEY",
        "INTERLOCK_VERIFY_KEYS",
        "INTERLOCK_STORE",
        "INTERLOCK_APPROVERS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("INTERLOCK_HOME", str(tmp_path / "interlock-home"))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test gets its own INTERLOCK_HOME and sees no keys or switches from outside."""
    isolate_env(monkeypatch, tmp_path)


@pytest.fixture
def emulator() -> Iterator[StripeEmulator]:
    """A loopback Stripe emulator on a free port."""
    with StripeEmulator() as emu:
        yield emu


def emulator_handler_threads() -> set[threading.Thread]:
    """The emulator's request threads alive now."""
    return {t for t in threading.enumerate() if "process_request_thread" in t.name}


def join_emulator_handlers(before: set[threading.Thread], timeout_s: float = 10.0) -> None:
    """Wait (bounded) for the emulator's request threads started since `before` to end.

    A kept-alive connection holds its thread until the client closes it: collecting first
    closes those of clients a test dropped (a raised error's traceback keeps them in a cycle).
    """
    gc.collect()
    deadline = time.monotonic() + timeout_s
    for t in emulator_handler_threads() - before:
        t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), "an emulator request thread did not finish"


@pytest.fixture(scope="module")
def shared_emulator() -> Iterator[StripeEmulator]:
    """One emulator per test module, its threads and socket made once."""
    with StripeEmulator() as emu:
        yield emu


@pytest.fixture
def emu(shared_emulator: StripeEmulator) -> Iterator[StripeEmulator]:
    """The module's emulator serving a fresh model; waits for its request threads at teardown."""
    shared_emulator.model = shared_emulator._server.model = PaymentsModel()
    before = emulator_handler_threads()
    yield shared_emulator
    join_emulator_handlers(before)


@pytest.fixture
def stripe_payments(emulator: StripeEmulator) -> StripePayments:
    """`StripePayments` over the real SDK, pointed at the emulator, 2 s deadline."""
    return StripePayments(make_stripe_client(TEST_KEY, timeout_s=2.0, base_url=emulator.url))


class _ReleasableTime:
    """Stands in for the model's `time` module: a hold lasts until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.release.wait(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def release_hold(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds end when the test sets this event (or at teardown), not after their full length."""
    shim = _ReleasableTime()
    monkeypatch.setattr(model_module, "time", shim)
    yield shim.release
    shim.release.set()


# -- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server for the session: INTERLOCK_TEST_PG_DSN, else one pgserver starts.

    pgserver ships PostgreSQL's binaries in its wheel (the `test` extra installs it); the
    server runs from a fresh temporary directory and is stopped and deleted at the end.
    (INTERLOCK_STORE, which the demo reads, is not taken here: tests never use the user's.)
    """
    from interlock_demo.reports.local_postgres import postgres_url

    given = os.environ.get("INTERLOCK_TEST_PG_DSN") or None
    with postgres_url(given, from_env=False) as url:
        yield url


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema of its own for one test (dropped afterwards), so tests never share rows."""
    import uuid

    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- nothing outlives the session --------------------------------------------------------


def leftover_threads() -> list[threading.Thread]:
    """Threads that would keep the interpreter alive after pytest's summary: non-daemon ones
    other than the main thread (a daemon thread dies with the interpreter)."""
    return [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]


def leftover_children() -> list[Any]:
    """Child processes of this pytest still alive (zombies are dead: reaping is their owner's)."""
    import psutil

    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def _describe(child: Any) -> str:
    try:
        return f"pid {child.pid} {' '.join(child.cmdline())[:160]}"
    except Exception:
        return f"pid {child.pid}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """mypy starts beside the suite when its test is selected (tests/helpers/early_lint.py)."""
    early_lint.start(item.nodeid for item in session.items)


# Last, so the leak report follows the summary (and reads the children every test left).
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that leaks a process or a non-daemon thread fails the session, naming it.

    Left alone, an orphaned child and the pipe-reading thread that waits on it held a CI
    run open for minutes after its summary. Leftover children are killed and reaped here,
    which also ends a thread reading their pipes; a thread cannot be killed, so one still
    running is named. Those already ending get a few seconds first.
    """
    import psutil

    early_lint.stop()
    deadline = time.monotonic() + 5.0

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    for thread in leftover_threads():
        thread.join(left())
    psutil.wait_procs(leftover_children(), timeout=left())
    children = leftover_children()
    lines = [f"child process left running (killed): {_describe(c)}" for c in children]
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=5)
    for thread in leftover_threads():
        thread.join(1.0)
    lines += [f"non-daemon thread left running: {t!r}" for t in leftover_threads()]
    if not lines:
        return
    message = "tests leaked what would outlive the session:\n  " + "\n  ".join(lines)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "leak check", red=True)
        reporter.write_line(message)
    else:
        print(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
