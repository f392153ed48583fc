"""The unit tier's guard: a unit test starts no process and binds no socket.

Each phase of a unit test (setup, call, teardown) runs under `tests/helpers/tier_guard.py`;
anything it refused fails that phase, naming what was done, even if the code under test
caught the error. Servers over loopback belong in `tests/loopback`, processes in `tests/e2e`.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.helpers.tier_guard import guarding


def _guarded(item: pytest.Item) -> Generator[None, None, None]:
    with guarding(item.nodeid) as refused:
        yield
    if refused:
        pytest.fail(f"{item.nodeid} started a process or bound a socket: {refused}", False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Module and session fixtures a unit test sets up are guarded too."""
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """The test itself."""
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Its fixtures' teardown. After the session's last test this also ends every session
    fixture, whichever tier set it up (stopping the e2e tier's PostgreSQL server runs
    `pg_ctl`), so that teardown is not the unit test's and is not guarded."""
    if nextitem is None:
        return (yield)
    return (yield from _guarded(item))
