"""What the gate costs per action, Stripe excluded (docs/design.md §7).

    python bench/gate_overhead.py [--actions N]

One run over the in-memory payments model (`InProcessPayments`, so no HTTP and no
Stripe) and a `SQLiteStore` (WAL, synchronous=FULL) in a temporary directory. It prints:

- `commits per action`: durable commits per first attempt, from `store.commits`
  (target 3: intent+claim, sending, outcome; the floor is 2, before and after the send);
- `stripe calls per first attempt` and `per recovery`, counted from the model's requests
  (target: one list and one create; a recovery one list and at most one create);
- `gate bookkeeping`: the time `Gate.submit` spends outside the payments calls, per
  action, against one durable SQLite commit of a tiny INSERT measured in the same run,
  interleaved with the actions so that both see the same disk (medians; target <= 4x).

It exits 1 when a count misses its target; timings are reported, never judged.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from interlock import (
    ACTION_METADATA_KEY,
    Gate,
    Intent,
    Lease,
    Owner,
    Payment,
    Refund,
    SQLiteStore,
    StripeRefund,
    Switches,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock_demo.payments import InProcessPayments

AMOUNT = 2000
WARMUP = 20
LIST = ("GET", "refunds")
CREATE = ("POST", "refunds")
T = TypeVar("T")


class TimedPayments:
    """`InProcessPayments` that adds up the time spent in its calls, to leave it out."""

    def __init__(self, inner: InProcessPayments) -> None:
        self.inner = inner
        self.model = inner.model
        self.spent_s = 0.0

    def _timed(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.spent_s += time.perf_counter() - start

    def create_payment(
        self, amount: int, *, currency: str = "usd", metadata: Mapping[str, str] | None = None
    ) -> Payment:
        """Create a payment (timed)."""
        return self._timed(self.inner.create_payment, amount, currency=currency, metadata=metadata)

    def get_payment(self, payment_intent: str) -> Payment:
        """Read a payment (timed)."""
        return self._timed(self.inner.get_payment, payment_intent)

    def list_refunds(self, payment_intent: str) -> list[Refund]:
        """List a payment's refunds (timed)."""
        return self._timed(self.inner.list_refunds, payment_intent)

    def create_refund(
        self,
        payment_intent: str,
        amount: int | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Refund:
        """Create a refund (timed)."""
        return self._timed(
            self.inner.create_refund,
            payment_intent,
            amount,
            idempotency_key=idempotency_key,
            metadata=metadata,
        )


class DurableCommit:
    """One tiny INSERT committed with WAL and synchronous=FULL: the unit of comparison."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")

    def timed(self) -> float:
        """Seconds for one durable commit."""
        start = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO t (v) VALUES (?)", ("x",))
        self.conn.execute("COMMIT")
        return time.perf_counter() - start


def _decision(payments: TimedPayments, store: SQLiteStore) -> Intent:
    """A new payment, an approval for it, and a decision to refund AMOUNT."""
    payment = payments.create_payment(5000)
    now = time.time()
    lease_id = f"lease-{payment.id}"
    store.grant_lease(Lease(lease_id, "refund", payment.id, AMOUNT, now + 3600, "bench", now))
    return Intent(
        action_id=new_action_id(),
        kind="refund",
        target=payment.id,
        amount=AMOUNT,
        lease_id=lease_id,
        fingerprint=refunds_fingerprint([]),
        created_at=now,
    )


def _calls(requests: list[tuple[str, str]]) -> tuple[int, int]:
    counts = Counter(requests)
    return counts[LIST], counts[CREATE]


def _one(counts: list[Any]) -> Any:
    """The value every run gave, or the worst one (the largest) when they differ."""
    return max(counts)


def _crashed(store: SQLiteStore, payments: TimedPayments, timing: Timing, landed: bool) -> str:
    """An action whose worker died after `sending` (and, if `landed`, after Stripe made it)."""
    intent = _decision(payments, store)
    dead = Owner("crashed-worker", pid=0, started_at=0.0, host="elsewhere")
    long_ago = time.time() - 10 * timing.claim_ttl_s
    # The dead worker wrote its claim long ago: a second handle on the file with that clock.
    past = SQLiteStore(store.path, clock=lambda: long_ago)
    try:
        epoch = past.begin(intent, dead, timing.claim_ttl_s, timing.grace_s).epoch
        past.mark_sending(intent.action_id, epoch, timing.renewal_s)
    finally:
        past.close()
    if landed:
        payments.create_refund(
            intent.target,
            intent.amount,
            idempotency_key=intent.action_id,
            metadata={ACTION_METADATA_KEY: intent.action_id},
        )
    return intent.action_id


def run(actions: int, workdir: Path) -> int:
    """Measure, print the report, and return the exit code."""
    payments = TimedPayments(InProcessPayments())
    store = SQLiteStore(workdir / "journal.sqlite3")
    baseline = DurableCommit(workdir / "baseline.sqlite3")
    timing = Timing()
    gate = Gate(store, StripeRefund(payments), timing=timing, switches=Switches(), signing_key=None)

    commits: list[int] = []
    calls: list[tuple[int, int]] = []
    bookkeeping_s: list[float] = []
    commit_s: list[float] = []
    for i in range(WARMUP + actions):
        intent = _decision(payments, store)
        one_commit = baseline.timed()
        c0, r0, p0 = store.commits, len(payments.model.requests), payments.spent_s
        start = time.perf_counter()
        outcome = gate.submit(intent)
        elapsed = time.perf_counter() - start
        if outcome.status != "sent":
            print(f"unexpected outcome: {outcome}", file=sys.stderr)
            return 1
        if i < WARMUP:
            continue
        commit_s.append(one_commit)
        bookkeeping_s.append(elapsed - (payments.spent_s - p0))
        commits.append(store.commits - c0)
        calls.append(_calls(payments.model.requests[r0:]))

    recoveries: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
    for i in range(min(actions, 50)):
        landed = bool(i % 2)
        aid = _crashed(store, payments, timing, landed)
        r0 = len(payments.model.requests)
        outcome = gate.recover_action(aid)
        if outcome.status != ("adopted" if landed else "sent"):
            print(f"unexpected recovery: {outcome}", file=sys.stderr)
            return 1
        recoveries[landed].append(_calls(payments.model.requests[r0:]))
    store.close()
    baseline.conn.close()

    per_action = _one(commits)
    lists, creates = _one([c[0] for c in calls]), _one([c[1] for c in calls])
    before = (_one([c[0] for c in recoveries[False]]), _one([c[1] for c in recoveries[False]]))
    after = (_one([c[0] for c in recoveries[True]]), _one([c[1] for c in recoveries[True]]))
    book_ms = statistics.median(bookkeeping_s) * 1000
    commit_ms = statistics.median(commit_s) * 1000
    print(
        f"gate overhead over {actions} actions: in-memory payments, "
        f"SQLite WAL synchronous=FULL in {workdir}"
    )
    print(f"commits per action: {per_action} (target 3, floor 2)")
    print(f"stripe calls per first attempt: {lists} list, {creates} create")
    print(
        f"per recovery: {before[0]} list, {before[1]} create (died before the call); "
        f"{after[0]} list, {after[1]} create (died after the refund landed)"
    )
    print(
        f"gate bookkeeping: {book_ms:.3f} ms/action = {book_ms / commit_ms:.1f} x one durable "
        f"commit ({commit_ms:.3f} ms); target <= 4x"
    )
    on_target = (
        per_action <= 3
        and (lists, creates) == (1, 1)
        and before[0] == after[0] == 1
        and before[1] <= 1
        and after[1] == 0
    )
    return 0 if on_target else 1


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run in a fresh temporary directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--actions", type=int, default=400, help="timed actions (default 400, after a warm-up)"
    )
    args = parser.parse_args(argv)
    if args.actions < 1:
        parser.error("--actions must be at least 1")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        return run(args.actions, Path(d))


if __name__ == "__main__":
    sys.exit(main())
