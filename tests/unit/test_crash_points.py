"""The crash points are one table, `interlock.testing.CrashPoint`.

A word that is not in it raises, naming the ones that are, wherever it comes in (the
table itself, `INTERLOCK_CRASH`, a sweep scenario id, a certify cell); every point with a
gate event is an event the gate emits; and every point is certified in-process or swept
with the demo's workers (whose kills `test_engine_mock.py` shows).
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from interlock import ConfigError, GateEvent, Owner, Timing
from interlock.testing import CRASH_POINTS, Cell, CrashPoint
from scenarios import SWEEP_CRASH_POINTS, scenario
from tests.helpers.gate_rig import AMOUNT, Crash, GateWorld, gone_owner
from workers.context import WorkerContext
from workers.process import crash_point_from_env
from workers.protocol.case import Case
from workers.protocol.switches import Switches
from workers.run import run_worker

EVERY_NAME = ", ".join(p.value for p in CrashPoint)


def test_an_unknown_crash_point_raises_naming_every_crash_point() -> None:
    """A misspelt word is a `ConfigError` (a ValueError) that lists the table."""
    with pytest.raises(ConfigError) as raised:
        CrashPoint("after-jornal")

    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == (
        f"unknown crash point 'after-jornal'; the crash points are {EVERY_NAME}"
    )


def test_interlock_crash_is_read_from_the_table() -> None:
    """`INTERLOCK_CRASH` is a crash point a worker kills itself at, or unset; any other
    word, or a point only a supervisor causes, is refused in words."""
    assert crash_point_from_env({}) is None
    assert crash_point_from_env({"INTERLOCK_CRASH": ""}) is None
    assert crash_point_from_env({"INTERLOCK_CRASH": "before-send"}) is CrashPoint.BEFORE_SEND
    with pytest.raises(
        ConfigError, match=f"^INTERLOCK_CRASH: unknown crash point 'none'; .*{EVERY_NAME}$"
    ):
        crash_point_from_env({"INTERLOCK_CRASH": "none"})
    with pytest.raises(ConfigError, match="INTERLOCK_CRASH=in-flight: no worker kills itself"):
        crash_point_from_env({"INTERLOCK_CRASH": "in-flight"})


def test_a_sweep_id_with_an_unknown_crash_point_names_the_crash_points() -> None:
    """A sweep cell's id is read through the table: a typo is a KeyError listing it; a real
    point the sweep does not run is one listing the sweep's rows."""
    with pytest.raises(KeyError, match=f"no sweep cell after-jornal/none: .*{EVERY_NAME}"):
        scenario("sweep/after-jornal/none")
    with pytest.raises(KeyError, match="no sweep cell after-check/none; the sweep's crash points"):
        scenario("sweep/after-check/none")
    assert scenario("sweep/in-flight/none").crash_point is CrashPoint.IN_FLIGHT


def test_a_certify_cell_reads_its_crash_point_from_the_table() -> None:
    """A cell given a word takes its crash point; the gate event's own word is not one."""
    assert Cell("before-send", "ok", "none").crash is CrashPoint.BEFORE_SEND  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown crash point 'journaled'"):
        Cell("journaled", "ok", "none")  # type: ignore[arg-type]


def test_every_gate_event_crash_point_is_an_event_the_gate_emits() -> None:
    """A send whose answer is lost, and a send whose worker died before it and a restart
    recovered: between them the gate emits the event of every crash point that has one."""
    world = GateWorld()
    lease = world.grant(2 * AMOUNT)
    # Two drops: the transport resends a dropped create once, and its answer is lost too.
    world.model.add_fault("drop", count=2)
    lost = world.gate(Owner.current("lost")).submit(world.decide(AMOUNT, lease.id))
    assert lost.status == "adopted"
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at=GateEvent.BEFORE_SEND).submit(
            world.decide(AMOUNT, lease.id)
        )
    [recovered] = world.gate(Owner.current("restart")).recover()
    assert recovered.status == "sent"

    emitted = {e.kind for e in world.events}
    assert {p: p.event for p in CrashPoint if p.event is not None and p.event not in emitted} == {}


def test_every_crash_point_is_certified_or_swept() -> None:
    """Each row is run somewhere: a gate event of a first send in every certify cell, a
    worker's own step, the supervisor's hold and a recovery's kill in the sweep."""
    certified = {p for p in CRASH_POINTS if p is not None}

    assert certified | set(SWEEP_CRASH_POINTS) == set(CrashPoint)
    assert all(p.event is not None and not p.recovery for p in certified)
    assert {p for p in CrashPoint if p.event is None or p.recovery} <= set(SWEEP_CRASH_POINTS)
    assert CRASH_POINTS[0] is None and len(CRASH_POINTS) == len(set(CRASH_POINTS))


@pytest.mark.parametrize("column", ["standard", "checked"])
@pytest.mark.parametrize("point", [p for p in CrashPoint if p.gate_only])
def test_a_worker_without_a_gate_refuses_a_gate_only_crash_point(
    column: str, point: CrashPoint
) -> None:
    """Told to die at a step of the gate's own, a worker with no gate refuses before it
    runs anything (it would have run through and reported as if spared), naming the
    points it does reach."""
    touched: list[str] = []

    def untouched(name: str) -> Any:
        def call(*_: object, **__: object) -> Any:
            touched.append(name)
            raise AssertionError(f"{name} was used")

        return call

    ctx = WorkerContext(
        case=Case("case-1", column, "pi_1", "lease-1", AMOUNT, "refund $20"),
        payments=cast(Any, None),
        store=cast(Any, None),
        box=cast(Any, None),
        emit=untouched("emit"),
        crash=untouched("crash"),
        model=untouched("model"),
        timing=Timing(),
        switches=Switches(),
        owner=Owner.current("test"),
        clock=untouched("clock"),
        sleep=untouched("sleep"),
        crash_point=point,
    )
    with pytest.raises(ValueError, match="never reaches the crash point") as raised:
        run_worker(ctx)
    assert point.value in str(raised.value)
    assert "its crash points are after-decision, after-journal" in str(raised.value)
    assert touched == []
