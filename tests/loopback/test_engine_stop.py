"""A stopped engine starts no worker: a close() that lands before a run has its workers'
supervisor, and a column waiting on a call the emulator holds, both end the run at once.

Offline runs against an emulator of the test's own (so closing the engine does not take
Stripe away from the run), with the worker processes' supervisor held or stopped: no
process is started, as this tier's guard requires.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from interlock.testing import StripeEmulator
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.engine import engine as engine_module
from interlock_demo.engine.process import ProcessLauncher
from interlock_demo.engine.supervisor import Supervisor
from interlock_demo.errors import ColumnFailed
from interlock_demo.settings.config import DemoConfig, resolve

DEADLINE_S = 30.0


def _config(tmp_path: Path, emulator: StripeEmulator) -> DemoConfig:
    env = {"INTERLOCK_HOME": str(tmp_path / "home"), "PATH": ""}
    return resolve(mode="offline", stripe_base=emulator.url, env=env)


def test_a_close_before_the_run_has_its_supervisor_starts_no_worker(
    tmp_path: Path, emulator: StripeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() lands after start() and before the run made its supervisor (a sweep's
    Ctrl-C can): the run still ends at once, each column refused its worker."""
    reached, closed = threading.Event(), threading.Event()

    def held_supervisor() -> Supervisor:
        reached.set()
        assert closed.wait(DEADLINE_S)
        return Supervisor()

    monkeypatch.setattr(engine_module, "Supervisor", held_supervisor)
    config = _config(tmp_path, emulator)
    engine = Engine(config)
    try:
        run = engine.start(RunChoice(config, "hand-refund"))
        assert reached.wait(DEADLINE_S)
        engine.close()
        closed.set()
        assert run.wait(DEADLINE_S), "the run went on after close()"
    finally:
        closed.set()
        engine.close()
    assert all(not c.workers for c in run.columns), [c.workers for c in run.columns]
    assert all(c.error and "stopping" in c.error for c in run.columns), [
        c.error for c in run.columns
    ]


def test_a_wait_on_a_held_call_ends_when_the_run_is_stopped(tmp_path: Path) -> None:
    """A column waiting for a call the emulator holds (for seconds) stops waiting as soon
    as its run is stopped, and says so; unstopped, it waits out its limit."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path), "PATH": ""})
    supervisor = Supervisor()
    launcher = ProcessLauncher(config, supervisor, None, None)
    held = threading.Event()
    assert launcher.wait_held(held, 0.2) is False
    started = time.monotonic()
    stopper = threading.Thread(target=supervisor.stop)
    stopper.start()
    with pytest.raises(ColumnFailed, match="the run was stopped"):
        launcher.wait_held(held, DEADLINE_S)
    assert time.monotonic() - started < DEADLINE_S / 2
    stopper.join(DEADLINE_S)
    held.set()
    assert launcher.wait_held(held, DEADLINE_S) is True
