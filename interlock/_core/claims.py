"""Who holds an action: owner identities and claims.

A claim says one worker may act on an action until `expires_at`, in the store's clock
(read after its write lock is taken, so that every worker on the store agrees). Taking one
is a compare-and-set in the store, and every take gets a new `epoch`: the gate's later
commits compare the epoch, never the owner's identity, so two gates of one identity are
told apart. The identity only tells whether the holder is alive.

A live claim is never taken, with two exceptions that cannot put a send in flight twice,
both only when the owner's process is provably gone (same host, its pid dead or reused):
it never journaled `sending`, or the taker's lookup found the action's own refund (there
is nothing in flight to wait for). A claim marked `sending` is taken otherwise only after
its expiry plus a grace.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Process start times from psutil are floats rounded by the kernel's clock tick.
_START_TIME_TOLERANCE_S = 0.05


def _proc_start_time(pid: int) -> float:
    """When process `pid` started, read from Linux's /proc the way psutil reads it (the
    start in clock ticks since boot, plus the boot time). `FileNotFoundError` when there
    is no such process; another `OSError`, `IndexError` or `StopIteration` when /proc
    cannot tell (not Linux, not readable)."""
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    boot = next(
        line for line in Path("/proc/stat").read_bytes().splitlines() if line.startswith(b"btime")
    )
    return float(fields[19]) / os.sysconf("SC_CLK_TCK") + float(boot.split()[1])


def _start_time(pid: int) -> float:
    """When process `pid` started, in seconds since the epoch, as psutil reckons it.

    On Linux from /proc, so that a restarted worker's identity and its dead-owner check
    cost no psutil import (about 30 ms of a restart); psutil on other systems.
    """
    try:
        return _proc_start_time(pid)
    except (OSError, IndexError, StopIteration):
        import psutil

        return float(psutil.Process(pid).create_time())


@dataclass(frozen=True)
class Owner:
    """A worker's identity: its id, pid, process start time and host."""

    worker_id: str
    pid: int
    started_at: float
    host: str

    @classmethod
    def current(cls, worker_id: str | None = None) -> Owner:
        """The identity of this process."""
        pid = os.getpid()
        return cls(
            worker_id=worker_id or f"worker-{uuid.uuid4().hex[:12]}",
            pid=pid,
            started_at=_start_time(pid),
            host=socket.gethostname(),
        )

    def label(self) -> str:
        """Short text for messages: worker id and pid."""
        return f"{self.worker_id} (pid {self.pid})"

    def is_gone(self) -> bool:
        """True only when this owner's process provably no longer runs.

        Only a process on this host can be checked; elsewhere the answer is False.
        """
        if self.host != socket.gethostname():
            return False
        if os.path.exists("/proc/self/stat"):
            try:
                started = _proc_start_time(self.pid)
            except FileNotFoundError:
                return True
            except (OSError, IndexError, StopIteration):
                pass  # /proc would not tell: psutil decides
            else:
                return bool(abs(started - self.started_at) > _START_TIME_TOLERANCE_S)
        import psutil

        try:
            started = psutil.Process(self.pid).create_time()
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False
        return bool(abs(started - self.started_at) > _START_TIME_TOLERANCE_S)

    def to_dict(self) -> dict[str, Any]:
        """The owner as JSON-ready data."""
        # Written out rather than dataclasses.asdict: it runs in every commit of the send path.
        return {
            "worker_id": self.worker_id,
            "pid": self.pid,
            "started_at": self.started_at,
            "host": self.host,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        """An owner from `to_dict` data."""
        return cls(
            worker_id=str(data["worker_id"]),
            pid=int(data["pid"]),
            started_at=float(data["started_at"]),
            host=str(data["host"]),
        )


@dataclass(frozen=True)
class Claim:
    """A claim on one action: who, which take, since when, until when, whether it sends."""

    owner: Owner
    claimed_at: float
    expires_at: float
    sending: bool = False
    epoch: int = 0

    def live(self, now: float) -> bool:
        """Whether the claim has not expired at `now`."""
        return now < self.expires_at

    def left(self, now: float) -> float:
        """Seconds of claim left at `now` (negative once expired)."""
        return self.expires_at - now

    def replaceable_by(
        self, owner: Owner, now: float, *, grace_s: float, found_own: bool = False
    ) -> bool:
        """Whether `owner` may take this claim at `now`.

        A `sending` claim may cover a request still in flight: nobody takes it before its
        expiry plus `grace_s`, not even its own owner, unless that owner is provably gone
        and the taker's lookup found the action's own refund (`found_own`). Any other claim
        may be taken once expired, by its own owner (the epoch fences the older take), or
        early when its owner is provably gone.
        """
        if self.sending:
            if now >= self.expires_at + grace_s:
                return True
            return found_own and self.owner.is_gone()
        if owner == self.owner or not self.live(now):
            return True
        return self.owner.is_gone()

    def blocks(self, now: float, *, grace_s: float) -> bool:
        """Whether this claim still keeps every other owner off at `now`: `replaceable_by`
        answers False for any owner but its own, given no lookup. A `sending` claim blocks
        until its expiry plus `grace_s` (its request may still be in flight); any other
        until it expires, unless its owner is provably gone. Its action holds its target's
        turn for as long (see `RuleStore`)."""
        if self.sending:
            return now < self.expires_at + grace_s
        return self.live(now) and not self.owner.is_gone()

    def to_dict(self) -> dict[str, Any]:
        """The claim as JSON-ready data."""
        return {
            "owner": self.owner.to_dict(),
            "claimed_at": self.claimed_at,
            "expires_at": self.expires_at,
            "sending": self.sending,
            "epoch": self.epoch,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Claim:
        """A claim from `to_dict` data."""
        return cls(
            owner=Owner.from_dict(data["owner"]),
            claimed_at=float(data["claimed_at"]),
            expires_at=float(data["expires_at"]),
            sending=bool(data.get("sending", False)),
            epoch=int(data.get("epoch", 0)),
        )
