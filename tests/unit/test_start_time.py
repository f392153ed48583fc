"""A dead-owner check reads a process's start time without psutil, as psutil reports it."""

from __future__ import annotations

import os

import psutil

from interlock._claims import _START_TIME_TOLERANCE_S, Owner, _start_time


def test_the_start_time_is_psutils() -> None:
    """The start time read without psutil is the one psutil reports for the same process,
    so a dead-owner check on another worker's identity compares like with like."""
    for pid in (os.getpid(), os.getppid(), 1):
        assert abs(_start_time(pid) - psutil.Process(pid).create_time()) < _START_TIME_TOLERANCE_S
    me = Owner.current("w")
    assert not me.is_gone()
