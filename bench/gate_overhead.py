"""What the gate costs per action, Stripe excluded (docs/design.md §7).

    python bench/gate_overhead.py [--actions N] [--repeats R]

Each repeat runs N first attempts through a `Gate` over the in-memory payments model
(`InProcessPayments`: no HTTP, no Stripe) and a fresh `SQLiteStore` (WAL,
synchronous=FULL) in a temporary directory, each action interleaved with one durable
commit of a tiny INSERT in another file, so both see the same disk at the same moment.
It prints one figure a line:

- `durable commits per first attempt`: from `store.commits` (target 2: the intent, claim
  and `sending` together before the send, the outcome after it), the receipt log's apart;
- `receipt-log commits per action`: the log's catch-ups (one commit per 100 settles, or
  per 5 s idle), averaged over the actions;
- `statements per action`: SQL statements per first attempt, BEGIN and COMMIT included,
  counted with sqlite3's trace callback on the store's connection (outside the timed runs);
- `stripe calls per first attempt` and `per recovery`, counted from the model's requests
  (target: one list and one create; a recovery one list and at most one create);
- `bookkeeping vs one commit`: the time `Gate.submit` spends outside the payments calls,
  over one durable commit (median over the actions of a repeat; then the median and
  range over the repeats; target at most 2.6x on a quiet machine);
- `bookkeeping per action` and `one durable commit`: the same medians in milliseconds.

Every line ends with the load average right after the repeats (bench/common.py): the
machine is shared. It exits 1 when a count misses its target; timings are reported, never
judged.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    Owner,
    Payment,
    Refund,
    SQLiteStore,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # imported by the other benchmarks, or run from anywhere
    sys.path.insert(0, str(BENCH))

from common import LogCommits, with_load  # noqa: E402

AMOUNT = 2000
WARMUP = 20
RECOVERIES = 50
STATEMENT_SAMPLES = 5
TARGET_RATIO = 2.6
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


def decision(payments: TimedPayments, store: SQLiteStore) -> Intent:
    """A new payment, an approval for it, and a decision to refund AMOUNT (with metadata
    naming its case and column, as the demo's decisions carry)."""
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
        metadata={"case": f"case-{payment.id}", "column": "interlock"},
        created_at=now,
    )


def _calls(requests: list[tuple[str, str]]) -> tuple[int, int]:
    counts = Counter(requests)
    return counts[LIST], counts[CREATE]


def _crashed(store: SQLiteStore, payments: TimedPayments, timing: Timing, landed: bool) -> str:
    """An action whose worker died after `sending` (and, if `landed`, after Stripe made it)."""
    intent = decision(payments, store)
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


@dataclass
class Repeat:
    """One repeat's counts and medians."""

    commits: int
    log_commits: float
    statements: int
    calls: tuple[int, int]
    recovery_before: tuple[int, int]
    recovery_after: tuple[int, int]
    bookkeeping_s: float
    commit_s: float

    @property
    def ratio(self) -> float:
        """Bookkeeping over one durable commit."""
        return self.bookkeeping_s / self.commit_s


def _statements(store: SQLiteStore, gate: Gate, payments: TimedPayments) -> int:
    """SQL statements of one first attempt (the most over a few), BEGIN/COMMIT included.

    A gate reads the receipt log's latest head once per process, for its first send's
    metadata: one untraced submit goes first, so the count is every later action's."""
    gate.submit(decision(payments, store))
    counts = []
    for _ in range(STATEMENT_SAMPLES):
        intent = decision(payments, store)
        seen: list[str] = []
        # The bench reads the store's own connection: the count is what the gate sends it.
        store._conn.set_trace_callback(seen.append)
        try:
            gate.submit(intent)
        finally:
            store._conn.set_trace_callback(None)
        counts.append(len(seen))
    return max(counts)


def repeat(actions: int, workdir: Path) -> Repeat:
    """One repeat in a fresh store: counts, then `actions` timed first attempts, recoveries."""
    workdir.mkdir(parents=True)
    payments = TimedPayments(InProcessPayments())
    store = SQLiteStore(workdir / "journal.sqlite3")
    baseline = DurableCommit(workdir / "baseline.sqlite3")
    timing = Timing()
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=timing,
        signing_key=None,
        approvers=UNSIGNED_APPROVALS,
    )
    logged = LogCommits(store)
    try:
        statements = _statements(store, gate, payments)
        commits: list[int] = []
        log_commits: list[int] = []
        calls: list[tuple[int, int]] = []
        bookkeeping_s: list[float] = []
        commit_s: list[float] = []
        for i in range(WARMUP + actions):
            intent = decision(payments, store)
            one_commit = baseline.timed()
            with logged.held():
                (c0, l0), r0, p0 = logged.read(), len(payments.model.requests), payments.spent_s
                start = time.perf_counter()
                outcome = gate.submit(intent)
                elapsed = time.perf_counter() - start
                c1, l1 = logged.read()
            if outcome.status != "sent":
                raise RuntimeError(f"unexpected outcome: {outcome}")
            if i < WARMUP:
                continue
            commit_s.append(one_commit)
            bookkeeping_s.append(elapsed - (payments.spent_s - p0))
            # The receipt log's batched commits (one per catch-up) are counted apart.
            log_commits.append(l1 - l0)
            commits.append(c1 - c0 - log_commits[-1])
            calls.append(_calls(payments.model.requests[r0:]))

        recoveries: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
        for i in range(min(actions, RECOVERIES)):
            landed = bool(i % 2)
            aid = _crashed(store, payments, timing, landed)
            r0 = len(payments.model.requests)
            outcome = gate.recover_action(aid)
            if outcome.status != ("adopted" if landed else "sent"):
                raise RuntimeError(f"unexpected recovery: {outcome}")
            recoveries[landed].append(_calls(payments.model.requests[r0:]))
    finally:
        store.close()
        baseline.conn.close()
    return Repeat(
        commits=max(commits),
        log_commits=sum(log_commits) / len(log_commits),
        statements=statements,
        calls=_worst(calls),
        recovery_before=_worst(recoveries[False]),
        recovery_after=_worst(recoveries[True]),
        bookkeeping_s=statistics.median(bookkeeping_s),
        commit_s=statistics.median(commit_s),
    )


def _worst(calls: list[tuple[int, int]]) -> tuple[int, int]:
    """The most lists and the most creates any one action made (0, 0 when none ran)."""
    return (max((c[0] for c in calls), default=0), max((c[1] for c in calls), default=0))


def _spread(values: list[float], fmt: str, unit: str) -> str:
    """Median, then the range, as `M<unit> (range A-B<unit> over N repeats)`."""
    m, lo, hi = statistics.median(values), min(values), max(values)
    return f"{m:{fmt}}{unit} (median of {len(values)} repeats, range {lo:{fmt}}-{hi:{fmt}}{unit})"


def report(repeats: list[Repeat], actions: int) -> list[str]:
    """The report's lines, one figure each."""
    commits = max(r.commits for r in repeats)
    statements = max(r.statements for r in repeats)
    lists, creates = _worst([r.calls for r in repeats])
    before = _worst([r.recovery_before for r in repeats])
    after = _worst([r.recovery_after for r in repeats])
    return [
        f"gate overhead: {len(repeats)} repeats of {actions} actions, in-memory payments, "
        "SQLite WAL synchronous=FULL",
        f"durable commits per first attempt: {commits} (target 2)",
        "receipt-log commits per action: "
        + f"{statistics.mean(r.log_commits for r in repeats):.2f} (one per catch-up of the log)",
        f"statements per action: {statements} (BEGIN and COMMIT included)",
        f"stripe calls per first attempt: {lists} list, {creates} create",
        f"per recovery: {before[0]} list, {before[1]} create (died before the call); "
        f"{after[0]} list, {after[1]} create (died after the refund landed)",
        "bookkeeping vs one commit: "
        + _spread([r.ratio for r in repeats], ".1f", "x")
        + f"; target <= {TARGET_RATIO}x",
        "bookkeeping per action: "
        + _spread([r.bookkeeping_s * 1000 for r in repeats], ".3f", " ms"),
        "one durable commit: " + _spread([r.commit_s * 1000 for r in repeats], ".3f", " ms"),
    ]


def on_target(repeats: list[Repeat]) -> bool:
    """Whether every count is on its target (timings are never judged)."""
    return all(
        r.commits <= 2
        and r.calls == (1, 1)
        and r.recovery_before[0] == r.recovery_after[0] == 1
        and r.recovery_before[1] <= 1
        and r.recovery_after[1] == 0
        for r in repeats
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the repeats in a fresh temporary directory, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--actions", type=int, default=400, help="timed actions per repeat (400, after a warm-up)"
    )
    parser.add_argument("--repeats", type=int, default=10, help="repeats (10)")
    args = parser.parse_args(argv)
    if args.actions < 1:
        parser.error("--actions must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        try:
            repeats = [repeat(args.actions, Path(d) / str(i)) for i in range(args.repeats)]
        except RuntimeError as e:
            print(f"gate_overhead: {e}", file=sys.stderr)
            return 1
    for line in report(repeats, args.actions):
        print(with_load(line))
    return 0 if on_target(repeats) else 1


if __name__ == "__main__":
    sys.exit(main())
