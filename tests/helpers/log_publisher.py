"""Test helper: settle receipts and keep the receipt log, until it SIGKILLs itself at a point.

    python tests/helpers/log_publisher.py STORE ANCHOR_FILE KEY_FILE POINT N

For each new action: the gate's three commits (no payments in between), then the gate's
catch-up (`LogKeeper` with `log_every=1`: integrate, publish to a `FileAnchor`, mark
anchored). At the N-th time the publisher reaches POINT it kills itself with SIGKILL, the
way a worker dies there:

- `integrate`: inside the transaction that numbers the receipts, before its commit;
- `integrated`: the head committed in the store, before any anchor saw it;
- `torn`: half of the anchor's record written to its file;
- `published`: the anchor took the head, before the store marked it anchored;
- `marked`: the head marked anchored.

It prints `logged SIZE` after each whole catch-up.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import interlock._core.anchors as anchors
import interlock._core.journal as journal
from interlock import (
    Check,
    FileAnchor,
    Intent,
    Lease,
    Owner,
    Settlement,
    SigningKey,
    SQLiteStore,
    new_action_id,
)
from interlock._core.log import LogKeeper

TARGET = "pi_log_publisher"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _Countdown:
    def __init__(self, n: int) -> None:
        self.left = n

    def hit(self) -> None:
        self.left -= 1
        if self.left == 0:
            _die()


def _after(countdown: _Countdown, call: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        countdown.hit()
        return result

    return wrapped


class _TornOs:
    """The anchors module's `os`, whose write lands half a record and dies at the N-th."""

    def __init__(self, countdown: _Countdown) -> None:
        self.countdown = countdown

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes) -> int:
        if self.countdown.left == 1:
            os.write(fd, data[: len(data) // 2])
            os.fsync(fd)
            _die()
        self.countdown.left -= 1
        return os.write(fd, data)


def main(store_path: str, anchor_path: str, key_path: str, point: str, n: int) -> int:
    """Settle and log until killed at `point`."""
    store = SQLiteStore(store_path)
    anchor = FileAnchor(anchor_path)
    countdown = _Countdown(n)
    if point == "integrate":
        journal.integrate = _after(countdown, journal.integrate)  # type: ignore[attr-defined]
    elif point == "integrated":
        store.integrate = _after(countdown, store.integrate)  # type: ignore[method-assign]
    elif point == "torn":
        anchors.os = _TornOs(countdown)  # type: ignore[assignment]
    elif point == "published":
        anchor.publish = _after(countdown, anchor.publish)  # type: ignore[method-assign]
    elif point == "marked":
        store.mark_anchored = _after(countdown, store.mark_anchored)  # type: ignore[method-assign]
    else:
        print(f"no such point: {point}", file=sys.stderr)
        return 2
    key = SigningKey.load(key_path)
    keeper = LogKeeper(store, key, [anchor], every=1)
    owner = Owner.current("log-publisher")
    now = time.time()
    lease = Lease("lease-log-publisher", "refund", TARGET, 100_000_000, now + 3600, "test", now)
    store.grant_lease(lease)
    while True:
        intent = Intent(
            action_id=new_action_id(),
            kind="refund",
            target=TARGET,
            amount=100,
            lease_id=lease.id,
            fingerprint="sha256:test",
            created_at=time.time(),
        )
        aid = intent.action_id
        epoch = store.begin(intent, owner, 60.0, 2.0).epoch
        assert store.mark_sending(aid, epoch, 60.0).status == "ok"
        verdict = Settlement("sent", None, f"re_{aid}", 100)
        store.settle(aid, epoch, owner, verdict, [Check("claim", "held", "held", True)], {}, key)
        status = keeper.settled()
        if status is None or status.problem is not None:
            print(f"error {status}", flush=True)
            return 1
        print(f"logged {status.head.size if status.head else '-'}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
