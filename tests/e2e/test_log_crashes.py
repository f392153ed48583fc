"""The receipt log and its anchor across a SIGKILL at any point of publishing.

A real publisher process (tests/helpers/log_publisher.py) settles receipts and keeps the
log with a file anchor, and kills itself with SIGKILL at one point of the catch-up: inside
the transaction that numbers receipts, after the head's commit, halfway through the
anchor's record, after the anchor took the head, after the store marked it. Right after
the kill the anchor is never ahead of the store (every head it holds is one the store
has, byte for byte); after the next catch-up (what a restarted gate's `recover()` does) the
store is never behind what it anchored: every head is anchored, and verify with the
anchor holds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from interlock import FileAnchor, KeyList, SigningKey, SQLiteStore, verify
from interlock._core.log import LogKeeper

ROOT = Path(__file__).resolve().parents[2]
PUBLISHER = ROOT / "tests" / "helpers" / "log_publisher.py"
POINTS = ["integrate", "integrated", "torn", "published", "marked"]


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("point", POINTS)
def test_the_anchor_is_never_ahead_of_the_log_nor_the_log_behind_it(
    tmp_path: Path, point: str, nth: int
) -> None:
    """SIGKILL at `point` the `nth` time: then nothing anchored that the store lacks, and
    after one catch-up, everything the store signed is anchored and verify holds."""
    store_path = tmp_path / "journal.sqlite3"
    (tmp_path / "elsewhere").mkdir()
    anchor_path = tmp_path / "elsewhere" / "heads.jsonl"
    key = SigningKey.generate()
    key.save(tmp_path / "signing-key.pem")
    keys = KeyList()
    keys.add(key.public)

    proc = subprocess.run(
        [sys.executable, str(PUBLISHER), str(store_path), str(anchor_path),
         str(tmp_path / "signing-key.pem"), point, str(nth)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert proc.stdout.count("logged") == nth - 1, proc.stdout
    store = SQLiteStore(store_path)
    try:
        held = {h.body_text for h in store.heads()}
        anchored = FileAnchor(anchor_path).heads() if anchor_path.exists() else []
        assert {a.head.body_text for a in anchored} <= held, "the anchor is ahead of the log"

        status = LogKeeper(store, key, [FileAnchor(anchor_path)], every=1).catch_up()

        assert status.problem is None, status.problem
        stored = list(store.heads())
        assert stored and all(h.anchored_at is not None for h in stored)
        anchored_sizes = sorted(a.head.size for a in FileAnchor(anchor_path).heads())
        assert anchored_sizes == [h.size for h in stored]
        assert store.unlogged_count() == 0
        result = verify(store, keys=keys, anchors=[FileAnchor(anchor_path)])
        assert result.ok, result.problems
        assert result.log_size == sum(1 for _ in store.receipts())
    finally:
        store.close()
