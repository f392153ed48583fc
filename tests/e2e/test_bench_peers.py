"""`bench/peers.py` prints one line an arm (shapes only: timings are never judged)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "peers.py"
RATIO = r"\d+\.\dx one commit \(median of 2 rounds, range \d+\.\d-\d+\.\dx\)"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_peers_prints_the_gate_the_commit_and_each_peer_arm() -> None:
    """The gate and one commit always print, on SQLite and on PostgreSQL, each with its
    durability as reported; DBOS's arms print a ratio when the bench extra is installed,
    and say exactly why not otherwise."""
    done = _bench("--actions", "3", "--rounds", "2")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("peers: 2 rounds of 3 actions per arm, interleaved in one process")
    assert re.fullmatch(r"one commit: 1\.0x \(\d+\.\d{3} ms, median of 2 rounds\)", lines[1])
    assert re.fullmatch(rf"gate: {RATIO}", lines[2]), lines[2]
    if importlib.util.find_spec("dbos") is not None:
        assert "journal_mode=wal synchronous=FULL" in lines[0], lines[0]
        for line, arm in zip(lines[3:5], ("DBOS one step", "DBOS three steps"), strict=True):
            assert re.fullmatch(rf"{arm}: {RATIO}", line), line
    else:
        for line, arm in zip(lines[3:5], ("DBOS one step", "DBOS three steps"), strict=True):
            assert line.startswith(f"{arm}: not measured: dbos is not installed"), line
    assert lines[5].startswith("postgres: synchronous_commit=on on the commit's connection")
    assert re.fullmatch(
        r"one postgres commit: 1\.0x \(\d+\.\d{3} ms, median of 2 rounds\)", lines[6]
    )
    pg_ratio = RATIO.replace("one commit", "one postgres commit")
    assert re.fullmatch(rf"gate on postgres: {pg_ratio}", lines[7]), lines[7]
    if importlib.util.find_spec("dbos") is not None:
        assert "on DBOS's system database: synchronous_commit=on" in lines[5], lines[5]
        assert re.fullmatch(rf"DBOS one step on postgres: {pg_ratio}", lines[8]), lines[8]
    assert len(lines) == 9


def test_peers_refuses_a_bad_count() -> None:
    """`--rounds 0` is bad usage: exit 2, a message, no report."""
    done = _bench("--rounds", "0")

    assert done.returncode == 2
    assert done.stdout == ""
    assert "--actions and --rounds must be at least 1" in done.stderr
