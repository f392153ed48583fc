"""A dead-owner check reads a process's start time without psutil, as psutil reports it."""

from __future__ import annotations

import os

import psutil

from interlock._core.claims import _START_TIME_TOLERANCE_S, Owner, _start_time


def test_the_start_time_is_psutils() -> None:
    """The start time read without psutil is the one psutil reports for the same process,
    so a dead-owner check on another worker's identity compares like with like."""
    for pid in (os.getpid(), os.getppid(), 1):
        assert abs(_start_time(pid) - psutil.Process(pid).create_time()) < _START_TIME_TOLERANCE_S
    me = Owner.current("w")
    assert not me.is_gone()


def _free_pid() -> int:
    """A pid no process has now (the highest below the kernel's limit not in /proc)."""
    with open("/proc/sys/kernel/pid_max") as f:
        limit = int(f.read())
    return next(p for p in range(limit - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))


def test_a_dead_owner_check_agrees_with_psutil_without_it() -> None:
    """Read from /proc, a dead-owner check gives psutil's answer for a live process, a
    pid no process has, and a pid reused by another process (its start time differs)."""
    me = Owner.current("w")
    gone = Owner("w", _free_pid(), me.started_at, me.host)
    reused = Owner("w", 1, me.started_at, me.host)  # init: started long before this test

    assert [o.is_gone() for o in (me, gone, reused)] == [False, True, True]
    assert not psutil.pid_exists(gone.pid)
    assert abs(psutil.Process(reused.pid).create_time() - me.started_at) > _START_TIME_TOLERANCE_S
