"""`bench/peers.py` prints one line an arm (shapes only: timings are never judged)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from interlock_demo.engine.temporal.probe import temporal_unavailable

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "peers.py"
RATIO = r"\d+\.\dx one commit \(median of 2 rounds, range \d+\.\d-\d+\.\dx\)"
LOAD = re.compile(r"(.*); load average \d+\.\d\d \d+\.\d\d \d+\.\d\d")


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, cwd=ROOT, timeout=150
    )


def _over(unit: str) -> str:
    """A ratio of two arms taken round by round."""
    return rf"\d+\.\d\dx {unit} \(median of 2 rounds, range \d+\.\d\d-\d+\.\d\dx\)"


def test_peers_prints_the_gate_the_commit_and_each_peer_arm() -> None:
    """The gate and one commit always print, on SQLite and on PostgreSQL, each with its
    durability as reported; DBOS's and Temporal's arms print a ratio when their extra is
    installed, and say exactly why not otherwise; every line carries the load average."""
    done = _bench("--actions", "3", "--rounds", "2", "--warmup", "1")

    assert done.returncode == 0, done.stdout + done.stderr
    loaded = [LOAD.fullmatch(line) for line in done.stdout.splitlines()]
    assert all(loaded), done.stdout
    lines = [m[1] for m in loaded if m]
    assert lines[0].startswith("peers: 2 rounds of 3 actions per arm, interleaved in one process")
    assert re.fullmatch(r"one commit: 1\.0x \(\d+\.\d{3} ms, median of 2 rounds\)", lines[1])
    assert re.fullmatch(rf"gate: {RATIO}", lines[2]), lines[2]
    dbos = importlib.util.find_spec("dbos") is not None
    dbos_arms = ("DBOS one step", "DBOS three steps", "gate over DBOS one step")
    if dbos:
        assert "journal_mode=wal synchronous=FULL" in lines[0], lines[0]
        for line, arm in zip(lines[3:5], dbos_arms[:2], strict=True):
            assert re.fullmatch(rf"{arm}: {RATIO}", line), line
        assert re.fullmatch(rf"gate over DBOS one step: {_over('DBOS one step')}", lines[5])
    else:
        for line, arm in zip(lines[3:6], dbos_arms, strict=True):
            assert line.startswith(f"{arm}: not measured: dbos is not installed"), line
    missing = temporal_unavailable()
    if missing is None:
        assert "Temporal: its dev server's own SQLite file" in lines[0], lines[0]
        assert re.fullmatch(rf"temporal one plain activity: {RATIO}", lines[6]), lines[6]
        assert re.fullmatch(
            rf"gate in a temporal activity: {_over('one plain activity')}", lines[7]
        ), lines[7]
    else:
        for line, arm in zip(lines[6:8], ("temporal one plain", "gate in a temporal"), strict=True):
            assert line.startswith(arm) and line.endswith(f": not measured: {missing}"), line
    assert lines[8].startswith("postgres: synchronous_commit=on on the commit's connection")
    assert re.fullmatch(
        r"one postgres commit: 1\.0x \(\d+\.\d{3} ms, median of 2 rounds\)", lines[9]
    )
    pg_ratio = RATIO.replace("one commit", "one postgres commit")
    assert re.fullmatch(rf"gate on postgres: {pg_ratio}", lines[10]), lines[10]
    pg_over = "gate on postgres over DBOS one step on postgres"
    if dbos:
        assert "on DBOS's system database: synchronous_commit=on" in lines[8], lines[8]
        assert re.fullmatch(rf"DBOS one step on postgres: {pg_ratio}", lines[11]), lines[11]
        assert re.fullmatch(rf"{pg_over}: {_over('DBOS one step on postgres')}", lines[12])
    else:
        assert lines[11].startswith("DBOS one step on postgres: not measured: dbos is not")
        assert lines[12].startswith(f"{pg_over}: not measured: dbos is not installed")
    assert len(lines) == 13


def test_peers_leaves_temporal_out_when_asked() -> None:
    """`--no-temporal` starts no dev server: its arms say they were left out."""
    done = _bench("--actions", "1", "--rounds", "1", "--warmup", "0", "--no-postgres",
                  "--no-temporal")  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    lines = [m[1] for m in map(LOAD.fullmatch, done.stdout.splitlines()) if m]
    assert lines[6:] == [
        "temporal one plain activity: not measured: left out (--no-temporal)",
        "gate in a temporal activity: not measured: left out (--no-temporal)",
    ]


def test_peers_refuses_a_bad_count() -> None:
    """`--rounds 0` is bad usage: exit 2, a message, no report."""
    done = _bench("--rounds", "0")

    assert done.returncode == 2
    assert done.stdout == ""
    assert "--actions and --rounds must be at least 1" in done.stderr
