"""SQLite and PostgreSQL side by side: the gate's bookkeeping, and many processes on one store.

    python bench/stores.py [--pg URL] [--actions N] [--repeats R] [--per-process M]
                           [--processes 1,2,4,8,16] [--markdown FILE]

PostgreSQL is the server at `--pg` (or `INTERLOCK_STORE` when it is a `postgresql://`
URL), else a local one started from the `pgserver` package for the run. Each store lives
in a fresh schema (PostgreSQL) or a fresh file (SQLite, WAL, synchronous=FULL).

1. **Bookkeeping per action** (Stripe excluded): first attempts through a `Gate` over the
   in-memory payments model, each interleaved with one durable commit of a tiny INSERT
   on the same backend (PostgreSQL: its own connection and table; SQLite: another file),
   so both see the same server and disk at the same moment. Printed per backend:
   `commits per action` (from `store.commits`), `statements per action` (counted on the
   store's connection, BEGIN and COMMIT included), `one durable commit` and `bookkeeping
   per action` (medians, ms) and `bookkeeping vs one commit` (median and range over the
   repeats).
2. **N processes on one store** (N = 1, 2, 4, 8, 16 by default), each with its own
   payments model and lease, `M` first attempts each on distinct actions, started
   together through a barrier (at least `--min-total` actions in all, so N = 1 is not a
   handful): `throughput` (actions per second of wall time), `p50` and
   `p99` of one `Gate.submit`, and `errors` (exceptions and outcomes other than `sent`).

One figure a line. Timings are reported, never judged; the machine's load shows in them.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate_overhead import TimedPayments

from interlock import (
    Gate,
    Intent,
    Lease,
    Owner,
    PostgresStore,
    SQLiteStore,
    Store,
    StripeRefund,
    Switches,
    Timing,
    new_action_id,
    redact_dsn,
    refunds_fingerprint,
)
from interlock_demo.payments import InProcessPayments
from interlock_demo.reports.local_postgres import postgres_url

AMOUNT = 2000
WARMUP = 10
PROCESSES = (1, 2, 4, 8, 16)
BACKENDS = ("sqlite", "postgresql")


# -- where the stores live -----------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A fresh store location: a SQLite file, or a PostgreSQL URL with its own schema."""

    backend: str
    location: str

    def open(self) -> Store:
        """A new handle on the store."""
        if self.backend == "sqlite":
            return SQLiteStore(self.location)
        dsn, schema = self.location.split("#", 1)
        return PostgresStore(dsn, schema=schema)


def fresh(backend: str, pg: str, workdir: Path) -> Place:
    """A new, empty store of `backend`."""
    tag = uuid.uuid4().hex[:10]
    if backend == "sqlite":
        return Place(backend, str(workdir / f"store-{tag}.sqlite3"))
    return Place(backend, f"{pg}#bench_{tag}")


class DurableCommit:
    """One tiny INSERT committed durably on the backend: the unit of comparison."""

    def __init__(self, place: Place, workdir: Path) -> None:
        self.backend = place.backend
        if place.backend == "sqlite":
            self.conn: Any = sqlite3.connect(workdir / "baseline.sqlite3", isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
        else:
            import psycopg

            dsn, schema = place.location.split("#", 1)
            self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
            self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}_base"')
            self.table = f'"{schema}_base".t'
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (id serial, v text)")

    def timed(self) -> float:
        """Seconds for one durable commit."""
        start = time.perf_counter()
        if self.backend == "sqlite":
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO t (v) VALUES (?)", ("x",))
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("BEGIN")
            self.conn.execute(f"INSERT INTO {self.table} (v) VALUES (%s)", ("x",))
            self.conn.execute("COMMIT")
        return time.perf_counter() - start

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def _decision(payments: Any, store: Store, cap: int = AMOUNT) -> Intent:
    """A new payment, an approval for it, and a decision to refund AMOUNT."""
    payment = payments.create_payment(5000)
    now = time.time()
    lease_id = f"lease-{payment.id}"
    store.grant_lease(Lease(lease_id, "refund", payment.id, cap, now + 3600, "bench", now))
    return Intent(new_action_id(), "refund", payment.id, AMOUNT, lease_id, refunds_fingerprint([]))


# -- 1. bookkeeping per action -------------------------------------------------------------


class _CountingCursor:
    """A psycopg cursor that counts what it executes (the bench reads the store's session)."""

    def __init__(self, inner: Any, seen: list[str]) -> None:
        self._inner, self._seen = inner, seen

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._seen.append(str(query))
        return self._inner.execute(query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _CountingConnection:
    def __init__(self, inner: Any, seen: list[str]) -> None:
        self._inner, self._seen = inner, seen

    def cursor(self, *args: Any, **kwargs: Any) -> _CountingCursor:
        return _CountingCursor(self._inner.cursor(*args, **kwargs), self._seen)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _statements(store: Store, gate: Gate, payments: Any) -> int:
    """Statements of one first attempt on the store's connection, BEGIN/COMMIT included."""
    intent = _decision(payments, store)
    seen: list[str] = []
    if isinstance(store, SQLiteStore):
        store._conn.set_trace_callback(seen.append)
        try:
            gate.submit(intent)
        finally:
            store._conn.set_trace_callback(None)
    else:
        assert isinstance(store, PostgresStore)
        real = store._connection()
        store._conn = _CountingConnection(real, seen)
        try:
            gate.submit(intent)
        finally:
            store._conn = real
    return len(seen)


@dataclass
class Bookkeeping:
    """One repeat on one backend: counts and medians."""

    commits: float
    statements: int
    bookkeeping_s: float
    commit_s: float

    @property
    def ratio(self) -> float:
        """Bookkeeping over one durable commit."""
        return self.bookkeeping_s / self.commit_s


def bookkeeping(place: Place, actions: int, workdir: Path) -> Bookkeeping:
    """`actions` timed first attempts, each interleaved with one durable commit."""
    payments = TimedPayments(InProcessPayments())
    store = place.open()
    baseline = DurableCommit(place, workdir)
    gate = Gate(store, StripeRefund(payments), timing=Timing(), switches=Switches())
    try:
        statements = _statements(store, gate, payments)
        commits, spent, base = [], [], []
        for i in range(WARMUP + actions):
            intent = _decision(payments, store)
            one = baseline.timed()
            c0, p0 = store.commits, payments.spent_s
            start = time.perf_counter()
            outcome = gate.submit(intent)
            elapsed = time.perf_counter() - start
            if outcome.status != "sent":
                raise RuntimeError(f"unexpected outcome: {outcome}")
            if i >= WARMUP:
                commits.append(store.commits - c0)
                spent.append(elapsed - (payments.spent_s - p0))
                base.append(one)
        return Bookkeeping(
            statistics.mean(commits), statements, statistics.median(spent), statistics.median(base)
        )
    finally:
        baseline.close()
        store.close()


# -- 2. many processes on one store ----------------------------------------------------------


def _worker(place: Place, count: int, barrier: Any, results: Any) -> None:
    """One process: `count` first attempts on distinct actions after the start barrier."""
    latencies: list[float] = []
    errors: list[str] = []
    store: Store | None = None
    intents: list[Intent] = []
    try:
        payments = InProcessPayments()
        store = place.open()
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=Timing(),
            switches=Switches(),
            owner=Owner.current(f"bench-{os.getpid()}"),
        )
        intents = [_decision(payments, store) for _ in range(count)]
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
    # Everyone (the parent too) meets here once ready, so start-up is never timed.
    barrier.wait()
    try:
        for intent in intents:
            t0 = time.perf_counter()
            try:
                outcome = gate.submit(intent)
                if outcome.status != "sent":
                    errors.append(f"{outcome.status}: {outcome.reason}")
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
            latencies.append(time.perf_counter() - t0)
    finally:
        if store is not None:
            store.close()
    # perf_counter is the system-wide monotonic clock on Linux: comparable across processes.
    results.put((latencies, errors, time.perf_counter()))


@dataclass
class Scale:
    """N processes on one store: what they did together."""

    processes: int
    actions: int
    wall_s: float
    p50_s: float
    p99_s: float
    errors: list[str]

    @property
    def throughput(self) -> float:
        """Actions per second of wall time."""
        return self.actions / self.wall_s


def scale(place: Place, processes: int, per_process: int) -> Scale:
    """`processes` workers, `per_process` actions each, started together."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(place, per_process, barrier, results))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    time_zero = time.perf_counter()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    latencies = sorted(x for lat, _, _ in got for x in lat)
    errors = [e for _, errs, _ in got for e in errs]
    wall = max(end for _, _, end in got) - time_zero
    return Scale(
        processes,
        len(latencies),
        wall,
        _percentile(latencies, 50),
        _percentile(latencies, 99),
        errors,
    )


def _percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(pct / 100 * (len(sorted_values) - 1)))
    return sorted_values[index]


# -- the report ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run both parts on both backends; print one figure a line (and a Markdown table)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", metavar="URL", help="PostgreSQL server (default: a local one)")
    parser.add_argument("--actions", type=int, default=100, help="timed actions per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-process", type=int, default=25, help="actions per process")
    parser.add_argument(
        "--min-total", type=int, default=200, help="at least this many actions per N in all"
    )
    parser.add_argument("--processes", default=",".join(map(str, PROCESSES)))
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write a table")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    with postgres_url(args.pg) as pg, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        say(f"postgresql server: {redact_dsn(pg)}")
        books: dict[str, list[Bookkeeping]] = {b: [] for b in BACKENDS}
        for _ in range(args.repeats):
            for backend in BACKENDS:
                books[backend].append(
                    bookkeeping(fresh(backend, pg, workdir), args.actions, workdir)
                )
        for backend in BACKENDS:
            rs = books[backend]
            ratios = sorted(r.ratio for r in rs)
            say(f"{backend} commits per action: {statistics.mean(r.commits for r in rs):.2f}")
            say(f"{backend} statements per action: {max(r.statements for r in rs)}")
            say(
                f"{backend} one durable commit: "
                f"{statistics.median(r.commit_s for r in rs) * 1000:.2f} ms"
            )
            say(
                f"{backend} bookkeeping per action: "
                f"{statistics.median(r.bookkeeping_s for r in rs) * 1000:.2f} ms"
            )
            say(
                f"{backend} bookkeeping vs one commit: {statistics.median(ratios):.2f}x "
                f"(range {ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} repeats)"
            )
        scales: dict[tuple[str, int], Scale] = {}
        for n in counts:
            for backend in BACKENDS:
                per_process = max(args.per_process, -(-args.min_total // n))
                s = scale(fresh(backend, pg, workdir), n, per_process)
                scales[backend, n] = s
                say(
                    f"{backend} N={n}: {s.throughput:.0f} actions/s, p50 {s.p50_s * 1000:.1f} ms,"
                    f" p99 {s.p99_s * 1000:.1f} ms, errors {len(s.errors)} of {s.actions}"
                )
                for e in sorted(set(s.errors))[:3]:
                    say(f"  error: {e}")
    if args.markdown is not None:
        args.markdown.write_text(_markdown(books, scales, counts, args, lines))
    errors = sum(len(s.errors) for s in scales.values())
    bad_commits = any(r.commits != 3 for rs in books.values() for r in rs)
    return 1 if errors or bad_commits else 0


def _markdown(
    books: dict[str, list[Bookkeeping]],
    scales: dict[tuple[str, int], Scale],
    counts: list[int],
    args: argparse.Namespace,
    lines: list[str],
) -> str:
    out = [
        "# Stores: SQLite and PostgreSQL side by side",
        "",
        "<!-- Generated by `interlock-demo results` (bench/stores.py); do not edit by hand. -->",
        f"_Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
        f"`python bench/stores.py --markdown results/stores.md` (PostgreSQL 16 from pgserver "
        f"unless a server was given; {os.cpu_count()} CPUs shared with other work)._",
        "",
        "## The gate's bookkeeping per action (Stripe excluded)",
        "",
        f"{args.repeats} repeats of {args.actions} first attempts; each action interleaved "
        "with one durable commit of a tiny INSERT on the same backend.",
        "",
        "| backend | commits | statements | one durable commit | bookkeeping | ratio (range) |",
        "|---|---|---|---|---|---|",
    ]
    for backend, rs in books.items():
        ratios = sorted(r.ratio for r in rs)
        out.append(
            f"| {backend} | {statistics.mean(r.commits for r in rs):.2f} | "
            f"{max(r.statements for r in rs)} | "
            f"{statistics.median(r.commit_s for r in rs) * 1000:.2f} ms | "
            f"{statistics.median(r.bookkeeping_s for r in rs) * 1000:.2f} ms | "
            f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
        )
    out += [
        "",
        f"## N processes on one store (distinct actions: {args.per_process} each, at least "
        f"{args.min_total} in all)",
        "",
        "| N | SQLite actions/s | SQLite p50 / p99 | SQLite errors "
        "| PostgreSQL actions/s | PostgreSQL p50 / p99 | PostgreSQL errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in counts:
        row = [str(n)]
        for backend in BACKENDS:
            s = scales[backend, n]
            row += [
                f"{s.throughput:.0f}",
                f"{s.p50_s * 1000:.1f} / {s.p99_s * 1000:.1f} ms",
                f"{len(s.errors)} of {s.actions}",
            ]
        out.append("| " + " | ".join(row) + " |")
    out += ["", "## Raw output", "", "```", *lines, "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
