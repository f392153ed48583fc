"""The HTTP endpoint under a flood of clients that never finish their headers.

The endpoint runs alone in a subprocess with a file limit of 256; the test opens 600
connections to it on loopback, each sending a request line and one header and then
nothing, and closes each one the endpoint has closed as it goes, so that the test itself
holds about as many descriptors as the endpoint's table, not 600. Before the endpoint
closed such connections, they used up its file descriptors: probes went unanswered and
the next run failed with "Too many open files".
"""

from __future__ import annotations

import http.client
import json
import os
import select
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.headless import ROOT, reap

NOFILE = 256
SLOW_CLIENTS = 600
HEADER_TIMEOUT_S = 2.0
# The endpoint keeps at most 64 connections; the rest of its descriptors are its own.
MAX_CONNECTIONS = 64
PROBE_TIMEOUT_S = 5.0
DEADLINE_S = 30.0

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    """The endpoint in its own process, file limit 256, its port and its token."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "tests/helpers/http_server.py",
            str(NOFILE),
            str(HEADER_TIMEOUT_S),
            str(tmp_path / "home"),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port, token = proc.stdout.readline().split()
        yield proc, int(port), token
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(DEADLINE_S)
        finally:
            reap(proc)


def _request(
    port: int, method: str, path: str, body: bytes = b"", token: str = ""
) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)
    try:
        headers = {"Content-Type": "application/json"} if method == "POST" else {}
        if token:
            headers["Authorization"] = f"token {token}"
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _wait_all_closed(socks: list[socket.socket], deadline: float) -> list[bytes]:
    """What the server sent on each socket before closing it; fails at the deadline."""
    received = {s: b"" for s in socks}
    with selectors.DefaultSelector() as sel:
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            assert left > 0, f"{len(sel.get_map())} slow connections still open"
            for key, _ in sel.select(left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    received[sock] += chunk
                else:
                    sel.unregister(sock)
                    sock.close()
    return list(received.values())


def _close_the_closed(socks: list[socket.socket], wait_s: float = 0.0) -> list[bytes]:
    """Close (and drop from `socks`) each connection the endpoint has closed; their answers.

    `wait_s` waits that long at most for the first one (a loaded machine's endpoint closes
    a connection that gave way a moment after the newcomer arrived)."""
    readable, _, _ = select.select(socks, [], [], wait_s)
    answers = []
    for sock in readable:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if data and not data.startswith(b"HTTP/1.1 408 "):
            continue  # not closed yet: read again at the end
        socks.remove(sock)
        sock.close()
        answers.append(data)
    return answers


def test_slow_clients_cannot_exhaust_the_endpoint(
    server: tuple[subprocess.Popen[str], int, str],
) -> None:
    """600 clients that never finish their headers leave the endpoint answering probes, within
    its descriptor budget; it closes each of them within the header timeout; a run then starts
    and finishes; and its log never says "Too many open files"."""
    proc, port, token = server
    assert _request(port, "GET", "/api/run")[0] == 404
    before = _descriptors(proc.pid)
    t0 = time.monotonic()
    head = f"GET /api/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    slow: list[socket.socket] = []
    gave_way: list[bytes] = []
    try:
        for _ in range(SLOW_CLIENTS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S)
            slow.append(sock)
            sock.sendall(head)
            full = len(slow) >= 2 * MAX_CONNECTIONS
            gave_way += _close_the_closed(slow, PROBE_TIMEOUT_S if full else 0.0)
            assert len(slow) <= 2 * MAX_CONNECTIONS, "the endpoint closes none to make room"
        status, body = _request(port, "GET", "/api/run")  # answered during the flood
        assert (status, "no run yet" in body["error"]) == (404, True)
        peak = _descriptors(proc.pid)
        assert peak <= before + MAX_CONNECTIONS + 2, (before, peak)
        answers = _wait_all_closed(slow, t0 + HEADER_TIMEOUT_S + DEADLINE_S)
    finally:
        for sock in slow:
            sock.close()
    elapsed = time.monotonic() - t0
    # Each one gave way to a newer one (closed, no answer) or timed out with a 408.
    answers += gave_way
    assert len(answers) == SLOW_CLIENTS
    assert all(a == b"" or a.startswith(b"HTTP/1.1 408 ") for a in answers)
    assert sum(a.startswith(b"HTTP/1.1 408 ") for a in answers) >= 1
    assert elapsed < HEADER_TIMEOUT_S + DEADLINE_S
    status, started = _request(port, "POST", "/api/runs", b'{"scenario": "hand-refund"}', token)
    assert status == 202, started
    deadline = time.monotonic() + DEADLINE_S
    while (run := _request(port, "GET", started["url"])[1])["status"] != "finished":
        assert time.monotonic() < deadline, run["status"]
        time.sleep(0.05)  # the poll's interval; the deadline above decides
    assert run["error"] is None
    assert _descriptors(proc.pid) <= before + 2
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(DEADLINE_S) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "Too many open files" not in log
    assert "Traceback" not in log
