"""The library's SQLite store keeps its files to their owner, whatever the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Lease, SQLiteStore


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common default umask, under which a plain create is world-readable (0644)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes_while_written(path: Path) -> dict[str, int]:
    """The mode of the store's file and of every file SQLite and the store keep beside it,
    read after one committed write while the store is open (the -wal and -shm exist then)."""
    store = SQLiteStore(path)
    try:
        now = time.time()
        store.grant_lease(Lease("lease_1", "refund", "pi_1", 2000, now + 3600, "test", now))
        return {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.glob(path.name + "*")}
    finally:
        store.close()


@pytest.mark.usefixtures("umask_022")
def test_a_new_store_and_its_wal_shm_and_writers_files_are_0600(tmp_path: Path) -> None:
    """Under umask 022 a new store's file, its -wal, -shm and -writers are 0600: others on
    the machine cannot read who approved what, or any receipt."""
    path = tmp_path / "interlock.sqlite3"

    modes = _modes_while_written(path)

    names = {f"interlock.sqlite3{s}" for s in ("", "-wal", "-shm", "-writers")}
    assert set(modes) == names
    assert modes == dict.fromkeys(names, 0o600)


@pytest.mark.usefixtures("umask_022")
def test_an_existing_store_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    """A store the user made group-readable (say, for a checker's group) stays so, and its
    -wal and -shm follow it: the store never changes a mode its owner chose."""
    path = tmp_path / "interlock.sqlite3"
    SQLiteStore(path).close()
    path.chmod(0o640)

    modes = _modes_while_written(path)

    assert modes["interlock.sqlite3"] == 0o640
    assert modes["interlock.sqlite3-wal"] == modes["interlock.sqlite3-shm"] == 0o640


def test_opening_a_store_again_keeps_the_locks_another_store_in_this_process_holds(
    tmp_path: Path,
) -> None:
    """A store open in this process holds SQLite's shared lock on the file, which stops
    another process from taking the file out of WAL mode (or, as the last one to close,
    checkpointing and deleting the -wal under it). Opening a second store on the file must
    keep that lock: opening and closing a descriptor on the file to set its mode would
    drop every POSIX lock this process holds on it."""
    path = tmp_path / "interlock.sqlite3"
    first = SQLiteStore(path)
    try:
        SQLiteStore(path).close()
        other = subprocess.run(
            [sys.executable, "-c", _LEAVE_WAL, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.close()
    assert other.stdout.strip() in ("wal", "locked"), other.stdout + other.stderr


# Another process tries, at once, to switch the file out of WAL mode: it needs every
# other connection's shared lock gone, and prints the mode the file is left in.
_LEAVE_WAL = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    print(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0])
except sqlite3.OperationalError as e:
    print("locked" if "locked" in str(e) else e)
"""
