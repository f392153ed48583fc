"""The unit tier's guard refuses a process or a listening socket at once, in words."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.helpers.tier_guard import TierViolation, take_refused


def test_a_subprocess_is_refused_before_it_starts() -> None:
    """`subprocess.run` raises before any process exists, naming where the test belongs."""
    with pytest.raises(TierViolation, match=r"starts no process.*tests/e2e"):
        subprocess.run(["true"], check=True)
    assert take_refused() == ["subprocess.Popen ['true']"]


def test_a_fork_is_refused() -> None:
    """A bare fork is a process too."""
    with pytest.raises(TierViolation):
        os.fork()
    assert take_refused() == ["os.fork"]


def test_a_listening_socket_is_refused() -> None:
    """Binding a socket (what every server does first) is refused."""
    with socket.socket() as s, pytest.raises(TierViolation, match="tests/loopback"):
        s.bind(("127.0.0.1", 0))
    assert take_refused() == ["socket.bind ('127.0.0.1', 0)"]
