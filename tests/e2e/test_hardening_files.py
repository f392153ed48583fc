"""Files a run writes under INTERLOCK_HOME are the user's alone.

A real offline headless run (real workers, the loopback emulator, short timings) runs
under a permissive umask (0o022): every folder it leaves under INTERLOCK_HOME must be
0700 and every file 0600, the journal's `-wal` and `-shm` included (looked at while the
run holds the journal open). The app's screenshot key, and the Temporal dev server's
database, go under INTERLOCK_HOME too. What the user saves elsewhere (`screenshots --out`)
keeps the user's umask.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from interlock_demo.engine.temporal.probe import temporal_unavailable
from interlock_demo.engine.temporal.runtime import TemporalRuntime
from interlock_demo.settings.config import resolve
from interlock_demo.settings.paths import Paths
from interlock_demo.views.tui.app import make_app
from tests.helpers.headless import CLI, ROOT, Lines, cli_env, reap

pytestmark = pytest.mark.e2e

DEADLINE_S = 90.0
PERMISSIVE_UMASK = 0o022
SCREENSHOTS = [sys.executable, "-m", "interlock_demo.cli", "screenshots"]
# Another process trying to write to a SQLite file at once: prints "locked" or "wrote".
TRY_TO_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
try:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("COMMIT")
    print("wrote")
except sqlite3.OperationalError:
    print("locked")
"""


def modes(home: Path) -> dict[str, int]:
    """Every path under `home` (and `home` itself), relative, with its permission bits."""
    return {
        str(p.relative_to(home.parent)): stat.S_IMODE(p.lstat().st_mode)
        for p in [home, *home.rglob("*")]
    }


def open_to_others(found: dict[str, int], home: Path) -> list[str]:
    """Paths whose mode is not 0700 for a folder or 0600 for a file."""
    wrong = []
    for rel, mode in found.items():
        path = home.parent / rel
        want = 0o700 if path.is_dir() else 0o600
        if mode != want:
            wrong.append(f"{rel}: {mode:o}")
    return wrong


@pytest.mark.timeout(150)
def test_offline_run_leaves_only_private_files(tmp_path: Path) -> None:
    """Under umask 022, a real offline run's journal (with -wal and -shm), case files, logs
    and decision files are 0600 in 0700 folders."""
    home = tmp_path / "interlock-home"
    proc = subprocess.Popen(
        [*CLI, "--checked", "--scenario", "hand-refund"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=cli_env(home),
        umask=PERMISSIVE_UMASK,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = Lines(proc.stderr, DEADLINE_S)
        lines.until("outcome:")  # a worker has written to the journal the CLI holds open
        during = modes(home)
        doc = json.loads(proc.stdout.read())
        assert proc.wait(DEADLINE_S) == 0, lines.rest()
    finally:
        reap(proc)
    assert doc["error"] is None
    after = modes(home)
    journal = "interlock-home/demo/interlock.sqlite3"
    assert {journal, f"{journal}-wal", f"{journal}-shm"} <= set(during), sorted(during)
    for kind in ("cases", "logs", "decisions"):
        assert any(rel.startswith(f"interlock-home/demo/{kind}/") for rel in after), kind
    assert open_to_others(during, home) == []
    assert open_to_others(after, home) == []


async def test_screenshot_key_saves_a_private_file(tmp_path: Path) -> None:
    """The app's screenshot key writes its SVG 0600 in a 0700 folder under INTERLOCK_HOME."""
    home = tmp_path / "interlock-home"
    app = make_app(resolve(mode="mock", env={"INTERLOCK_HOME": str(home), "PATH": ""}))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("s")
        await pilot.pause()
    shots = list((home / "demo" / "screenshots").glob("*.svg"))
    assert len(shots) == 1
    assert shots[0].read_text().startswith("<svg")
    assert open_to_others(modes(home), home) == []


@pytest.mark.skipif(temporal_unavailable() is not None, reason=str(temporal_unavailable()))
@pytest.mark.timeout(120)
def test_temporal_dev_server_files_are_private(tmp_path: Path) -> None:
    """The Temporal dev server's database, lock and log are 0600 in a 0700 folder."""
    home = tmp_path / "interlock-home"
    runtime = TemporalRuntime(Paths(home)).start()
    try:
        during = modes(home)
    finally:
        runtime.stop()
    names = {Path(rel).name for rel in during}
    assert {"dev-server.sqlite3", "dev-server.lock", "server.log"} <= names, sorted(names)
    assert open_to_others(during, home) == []


@pytest.mark.timeout(150)
def test_screenshots_out_saves_the_finished_run_with_the_users_umask(tmp_path: Path) -> None:
    """`interlock-demo screenshots --out DIR --scenario ID` runs offline and saves the idle
    screen, the claim-wait countdown and the finished run (at the smaller projectors' sizes
    too); outside INTERLOCK_HOME it writes with the user's umask (027 here: folders 0750,
    files 0640), not the demo's private one, and nothing lands in ./results.

    One run serves both the content checks and the umask's: a screenshots run is one of the
    suite's slowest steps (a scenario run to its end at three sizes)."""
    out = tmp_path / "shots"
    done = subprocess.run(
        [*SCREENSHOTS, "--out", str(out), "--scenario", "hand-refund"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(tmp_path / "interlock-home"),
        umask=0o027,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    svgs = sorted(out.glob("*.svg"))
    assert sorted(p.stem for p in svgs) == [
        "hand-refund",
        "hand-refund-100x30",
        "hand-refund-80x24",
        "hand-refund-countdown",
        "idle",
    ]
    assert {stat.S_IMODE(p.stat().st_mode) for p in svgs} == {0o640}
    countdown = (out / "hand-refund-countdown.svg").read_text().replace("&#160;", " ")
    assert "request could still land" in countdown
    small = (out / "hand-refund-80x24.svg").read_text().replace("&#160;", " ")
    assert "retried blindly: $40.00" in small and "(1/3)" in small
    svg = (out / "hand-refund.svg").read_text().replace("&#160;", " ")
    assert svg.startswith("<svg")
    assert "OFFLINE REHEARSAL" in svg
    assert svg.count("RESULT") == 3  # the checked column is on
    assert "✗ wrong" in svg and "✓ right" in svg
    assert "finished · " in svg
    idle = (out / "idle.svg").read_text().replace("&#160;", " ")
    assert "ready: press enter to run" in idle
    if shutil.which("rsvg-convert"):
        png = out / "hand-refund.png"
        assert png.read_bytes().startswith(b"\x89PNG")
        assert stat.S_IMODE(png.stat().st_mode) == 0o640
    assert not (tmp_path / "results").exists()


def test_preparing_the_home_never_drops_this_process_sqlite_locks(tmp_path: Path) -> None:
    """`Paths.prepare()` while this process holds a lock on the journal leaves the lock held:
    opening and closing the file would drop it (POSIX locks belong to the process), and with
    several engines in one process (the sweep) that corrupted the journal."""
    paths = Paths(tmp_path / "interlock-home").prepare()
    conn = sqlite3.connect(paths.store, isolation_level=None, timeout=0)
    try:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("BEGIN EXCLUSIVE")
        paths.prepare()
        other = subprocess.run(
            [sys.executable, "-c", TRY_TO_WRITE, str(paths.store)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert other.stdout.strip() == "locked", other.stderr
    assert stat.S_IMODE(paths.store.stat().st_mode) == 0o600
