"""`python -m interlock verify` with no path looks where the demo writes its journal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import interlock
from interlock_demo.settings import Paths
from tests.helpers.headless import ROOT


def _verify(home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INTERLOCK_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "interlock", "verify"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def test_verify_without_a_path_finds_the_demos_store(tmp_path: Path) -> None:
    """With only the demo's journal under INTERLOCK_HOME, verify checks that one (exit 0)."""
    store_path = Paths.from_env({"INTERLOCK_HOME": str(tmp_path)}).store
    store_path.parent.mkdir(parents=True)
    interlock.SQLiteStore(store_path).close()
    done = _verify(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{store_path}: chain of 0 receipts")


def test_verify_prefers_a_library_store_at_the_top_of_home(tmp_path: Path) -> None:
    """A store right under INTERLOCK_HOME (the library's default) still comes first."""
    own = tmp_path / "interlock.sqlite3"
    demo = Paths.from_env({"INTERLOCK_HOME": str(tmp_path)}).store
    demo.parent.mkdir(parents=True)
    for path in (own, demo):
        interlock.SQLiteStore(path).close()
    done = _verify(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{own}: chain of 0 receipts")
