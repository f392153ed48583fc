"""SQLite and PostgreSQL side by side: the gate's bookkeeping, and many processes on one store.

    python bench/stores.py [--pg URL] [--actions N] [--repeats R] [--per-process M]
                           [--processes 1,2,4,8,16] [--sample-at N] [--unsigned]
                           [--markdown FILE]

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
   `p99` of one `Gate.submit`, and `errors` (exceptions and outcomes other than `sent`);
   then PostgreSQL's throughput at N = 1 and 8 and its scaling, p99 over p50 at N = 8 on
   each backend, and `left pending` (actions left without an outcome in all the runs,
   which makes the exit status 1). Where the time goes at N = 8 (`--sample-at`) on
   PostgreSQL, to tell lock contention from a machine out of CPU: `postgres N=8
   backends:` the share of
   samples (every 10 ms, from `pg_stat_activity`) of the workers' backends running,
   waiting on a lock (by wait event), waiting for their worker inside a transaction, and
   idle between transactions; `machine CPU busy during postgres N=8:` the whole
   machine's busy share of its CPUs over the run (the server's and the workers' time, and
   anything else running). `machine CPU busy during postgres N=1:` the same for one
   worker, and `postgres scaling ceiling from CPU:` its inverse: what N = 8 could reach
   over N = 1 if each action cost the machine as much CPU as it does alone, with every
   CPU busy (a scaling target above it needs less CPU per action, not less locking).

3. **The receipt log at N = 8** (`--sample-at`). Every gate signs its receipts with an
   Ed25519 key made for the run (`--unsigned`: without) and keeps the library's default
   log cadence (`log_every=100`, `log_interval_s=5`): with 100 actions per process, each
   gate integrates at least once, as it would in service, so the receipt log's lock is
   taken in the run. `postgres receipt-log lock wait share at N=8:` the share of backend
   samples (every 10 ms, `pg_stat_activity` joined with the ungranted rows of `pg_locks`)
   waiting on the store's or the receipt log's advisory lock (before the log, commit 3
   took the store's lock for the chain's head), then each lock apart (an action's, any
   advisory lock, any lock at all) and the tree heads signed. `postgres CPU per action
   at N=1` and at N=8: the CPU time of the workers (`time.process_time()` in each),
   their server backends (read from /proc by each worker before it closes its
   connection) and the server's other processes, per action. `postgres ceiling from
   CPU:` the best N=8 over N=1 throughput the machine's CPUs allow at N=1's CPU per
   action (N=1's busy CPUs into all of them, at most 8x), then on 4 and 8 CPUs, and
   `postgres scaling over its CPU ceiling` (target at least 0.8). `postgres CPUs used by
   the run` at N=1 and N=8 says how much of the machine the run got: on a shared machine
   other work takes the rest, and the ceiling assumes every CPU. The bookkeeping part
   counts the log's commits apart (`receipt-log commits per action`): they are a
   batch's, not an action's. The script also runs on a library from before the receipt
   log (then unsigned, without heads), for before/after figures.

Intents carry metadata as the demo's do; each backend's durability is printed as its
own connection reports it. The machine is shared: every line ends with the load average
(1, 5 and 15 minutes, bench/common.py) its figures were measured under: the N it names,
or the moment right after the part that measured it.

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
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import LogCommits, load_average, with_load
from gate_overhead import TimedPayments

import interlock
from interlock import (
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    Owner,
    PostgresStore,
    SQLiteStore,
    Store,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments
from interlock_demo.reports.local_postgres import postgres_url

# The library before the receipt log (b001503) had no Ed25519 key: the bench runs on it
# too, unsigned, so the same script gives the before and after figures.
SigningKey: Any = getattr(interlock, "SigningKey", None)

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
    # Shaped as the demo's decisions: with metadata naming the case and the column.
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


def durability(place: Place) -> str:
    """The store's durability as its own connection reports it."""
    store = place.open()
    try:
        if isinstance(store, SQLiteStore):
            mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = store._conn.execute("PRAGMA synchronous").fetchone()[0]
            names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
            return f"journal_mode={mode} synchronous={names.get(sync, sync)}"
        assert isinstance(store, PostgresStore)
        conn = store._connection()
        with conn.transaction():
            # What a store write runs under: its transaction sets synchronous_commit.
            conn.execute("SELECT set_config('synchronous_commit', 'on', true)")
            sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
            fsync = conn.execute("SHOW fsync").fetchone()[0]
        return f"synchronous_commit={sync} fsync={fsync}"
    finally:
        store.close()


def left_pending(place: Place) -> int:
    """Actions with an intent and no outcome left in the store after a run."""
    store = place.open()
    try:
        return len(store.pending())
    finally:
        store.close()


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

    def pipeline(self) -> Any:
        # One pipeline is one round trip (its statements are not counted as trips).
        self._seen.append("-- round trip")
        return self._inner.pipeline()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _statements(store: Store, gate: Gate, payments: Any) -> tuple[int, int]:
    """Statements and round trips of one first attempt on the store's connection,
    BEGIN/COMMIT included (SQLite: every statement; it is in-process). A gate reads the
    receipt log's latest head once per process, for its first send's metadata: one
    uncounted submit goes first, so the count is every later action's."""
    gate.submit(_decision(payments, store))
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
    trips = seen.count("-- round trip")
    return len(seen) - trips, trips or len(seen)


@dataclass
class Bookkeeping:
    """One repeat on one backend: counts and medians."""

    commits: float
    statements: int
    round_trips: int
    bookkeeping_s: float
    commit_s: float
    log_commits: float = 0.0

    @property
    def ratio(self) -> float:
        """Bookkeeping over one durable commit."""
        return self.bookkeeping_s / self.commit_s


def bookkeeping(
    place: Place, actions: int, workdir: Path, key_path: str | None = None
) -> Bookkeeping:
    """`actions` timed first attempts, each interleaved with one durable commit. The
    receipt log's commits (the gate's `integrate`, every 100 settles or 5 s) are counted
    apart: they are the log's, shared by the actions of a batch, not one action's."""
    payments = TimedPayments(InProcessPayments())
    store = place.open()
    baseline = DurableCommit(place, workdir)
    keyed = {} if key_path is None else {"signing_key": SigningKey.load(key_path)}
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(),
        approvers=UNSIGNED_APPROVALS,
        **keyed,
    )
    logged = LogCommits(store)
    try:
        statements, trips = _statements(store, gate, payments)
        commits, spent, base, log = [], [], [], []
        for i in range(WARMUP + actions):
            intent = _decision(payments, store)
            one = baseline.timed()
            with logged.held():
                (c0, l0), p0 = logged.read(), payments.spent_s
                start = time.perf_counter()
                outcome = gate.submit(intent)
                elapsed = time.perf_counter() - start
                c1, l1 = logged.read()
            if outcome.status != "sent":
                raise RuntimeError(f"unexpected outcome: {outcome}")
            if i >= WARMUP:
                log.append(l1 - l0)
                commits.append(c1 - c0 - log[-1])
                spent.append(elapsed - (payments.spent_s - p0))
                base.append(one)
        return Bookkeeping(
            statistics.mean(commits),
            statements,
            trips,
            statistics.median(spent),
            statistics.median(base),
            statistics.mean(log),
        )
    finally:
        baseline.close()
        store.close()


# -- 2. many processes on one store ----------------------------------------------------------


def _worker(place: Place, count: int, key_path: str | None, barrier: Any, results: Any) -> None:
    """One process: `count` first attempts on distinct actions after the start barrier,
    through a gate with the library's default log cadence (and, given `key_path`, its
    Ed25519 receipt key); it reports the CPU time it and its PostgreSQL backend spent
    between the barrier and its last action, read here before its connection closes."""
    latencies: list[float] = []
    errors: list[str] = []
    store: Store | None = None
    intents: list[Intent] = []
    backend: Any = None
    try:
        payments = InProcessPayments()
        store = place.open()
        keyed = {} if key_path is None else {"signing_key": SigningKey.load(key_path)}
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=Timing(),
            owner=Owner.current(f"bench-{os.getpid()}"),
            approvers=UNSIGNED_APPROVALS,
            **keyed,
        )
        intents = [_decision(payments, store) for _ in range(count)]
        backend = _backend_process(store)
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
    # Everyone (the parent too) meets here once ready, so start-up is never timed.
    barrier.wait()
    cpu0, server0 = time.process_time(), _cpu_s(backend)
    cpu_s = server_s = 0.0
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
        cpu_s, server_s = time.process_time() - cpu0, _cpu_s(backend) - server0
    finally:
        if store is not None:
            store.close()
    # perf_counter is the system-wide monotonic clock on Linux: comparable across processes.
    backend_pid = None if backend is None else backend.pid
    results.put((latencies, errors, time.perf_counter(), cpu_s, server_s, backend_pid))


def _backend_process(store: Store) -> Any:
    """The PostgreSQL server process serving this store's connection (None on SQLite)."""
    import psutil

    if not isinstance(store, PostgresStore):
        return None
    pid = store._connection().execute("SELECT pg_backend_pid()").fetchone()[0]
    return psutil.Process(pid)


def _cpu_s(process: Any) -> float:
    """User and system CPU seconds of a process so far (0 for none, or one gone)."""
    import psutil

    if process is None:
        return 0.0
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


class ServerCpu:
    """CPU time of a PostgreSQL server's processes other than the given client backends
    (the postmaster, WAL writer, checkpointer, ...) from `start()` on: those alive then."""

    def __init__(self, dsn: str) -> None:
        import psutil
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            # Read while the backend lives: it exits when the connection closes.
            self._master = psutil.Process(pid).parent()
        self._start: dict[int, tuple[Any, float]] = {}

    def start(self) -> None:
        """Read every server process's CPU time so far."""
        processes = [self._master, *self._master.children()] if self._master else []
        self._start = {p.pid: (p, _cpu_s(p)) for p in processes}

    def spent_s(self, excluding: set[int]) -> float:
        """CPU seconds since `start()` of those processes, less the `excluding` pids."""
        return sum(
            max(0.0, _cpu_s(p) - before)
            for pid, (p, before) in self._start.items()
            if pid not in excluding
        )


class Waits:
    """Samples what a PostgreSQL store's other backends are doing, every 10 ms, until stopped.

    Its own connection reads `pg_stat_activity` for the database's client backends
    (not its own), each joined with the lock it waits for in `pg_locks` (a backend waits
    for one at most); each sample of each backend counts once under what it was doing,
    and once under the lock it waited for (`locks`: by `lock_name`, "none" if none).
    """

    INTERVAL_S = 0.01

    def __init__(self, dsn: str, advisory: dict[tuple[int, int, int], str]) -> None:
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self._conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self._advisory = advisory
        self.samples: Counter[str] = Counter()
        self.locks: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-waits", daemon=True)

    def __enter__(self) -> Waits:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._conn.close()

    def _run(self) -> None:
        query = (
            "SELECT a.state, a.wait_event_type, a.wait_event, l.locktype, l.classid, l.objid,"
            " l.objsubid FROM pg_stat_activity a"
            " LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted"
            " WHERE a.datname = current_database() AND a.backend_type = 'client backend'"
            " AND a.pid <> pg_backend_pid()"
        )
        while True:  # at least one sample, however short the run
            for state, wait_type, wait, *lock in self._conn.execute(query).fetchall():
                self.samples[_doing(state, wait_type, wait)] += 1
                self.locks[lock_name(self._advisory, *lock)] += 1
            if self._stop.wait(self.INTERVAL_S):
                return

    def summary(self) -> str:
        """Each activity's share of the samples, largest first."""
        total = sum(self.samples.values())
        if not total:
            return "no samples"
        return ", ".join(
            f"{what} {count / total:.0%}" for what, count in self.samples.most_common()
        )

    def share(self, *names: str) -> float:
        """The share of backend samples waiting on one of the locks `names`; "any advisory"
        and "any lock" count every advisory lock, and every lock."""
        total = sum(self.locks.values())
        if not total:
            return float("nan")
        waiting = sum(
            count
            for name, count in self.locks.items()
            if name != "none"
            and (
                name in names
                or "any lock" in names
                or ("any advisory" in names and name in ADVISORY_NAMES)
            )
        )
        return waiting / total


STORE_LOCK = "the store's lock"
LOG_LOCK = "the receipt log's lock"
ACTION_LOCK = "an action's lock"
OTHER_ADVISORY = "another advisory lock"
ADVISORY_NAMES = (STORE_LOCK, LOG_LOCK, ACTION_LOCK, OTHER_ADVISORY)


def advisory_keys(place: Place) -> dict[tuple[int, int, int], str]:
    """How `pg_locks` shows the store's advisory locks, (classid, objid, objsubid) to a name:
    its store-wide lock (before the receipt log, every commit 3 took it for the chain's
    head; now only an open that creates or migrates the tables), the receipt log's lock
    (taken by `integrate`, never waited for), and an action's lock (by its class alone)."""
    store = place.open()
    try:
        keys = {STORE_LOCK: store._lock_key, LOG_LOCK: getattr(store, "_log_key", None)}
        action_class = store._action_lock_class
    finally:
        store.close()
    # A bigint key shows as its high and low 32 bits, objsubid 1; (int, int) as both, 2.
    named = {
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF, 1): name
        for name, key in keys.items()
        if key is not None
    }
    named[(action_class & 0xFFFFFFFF, -1, 2)] = ACTION_LOCK
    return named


def lock_name(
    advisory: dict[tuple[int, int, int], str],
    locktype: str | None,
    classid: int | None,
    objid: int | None,
    objsubid: int | None,
) -> str:
    """What a backend waits for: "none", one of the store's advisory locks, or a lock type."""
    if locktype is None:
        return "none"
    if locktype != "advisory":
        return f"a {locktype} lock"
    key = (int(classid or 0), int(objid or 0), int(objsubid or 0))
    return advisory.get(key) or advisory.get((key[0], -1, key[2])) or OTHER_ADVISORY


def _doing(state: str | None, wait_type: str | None, wait: str | None) -> str:
    if state == "idle in transaction":
        return "waiting for its worker in a transaction"
    if state == "idle":
        return "idle between transactions"
    if state == "active" and wait_type is None:
        return "running"
    if state == "active" and wait_type in {"Lock", "LWLock", "IO", "IPC"}:
        return f"waiting on {wait_type}/{wait}"
    return f"{state} {wait_type or ''}/{wait or ''}".strip()


def _cpu_busy(before: Any, after: Any) -> float:
    """The machine's busy share of its CPUs between two `psutil.cpu_times()`."""
    total = sum(after) - sum(before)
    idle = (after.idle + after.iowait) - (before.idle + before.iowait)
    return 1 - idle / total if total > 0 else float("nan")


@dataclass
class Scale:
    """N processes on one store: what they did together."""

    processes: int
    actions: int
    wall_s: float
    p50_s: float
    p99_s: float
    errors: list[str]
    cpu_busy: float = float("nan")
    waits: str = field(default="")
    cpu_workers_s: float = 0.0
    cpu_backends_s: float = 0.0
    cpu_server_rest_s: float = 0.0
    lock_shares: dict[str, float] = field(default_factory=dict)
    heads: int | None = None
    load: str = ""

    @property
    def throughput(self) -> float:
        """Actions per second of wall time."""
        return self.actions / self.wall_s

    @property
    def cpu_per_action_s(self) -> float:
        """CPU seconds per action of the workers, their backends and the rest of the server."""
        spent = self.cpu_workers_s + self.cpu_backends_s + self.cpu_server_rest_s
        return spent / self.actions if self.actions else float("nan")

    def ceiling(self, processes: int, cpus: int) -> float:
        """The best throughput `processes` workers could reach over this run's, if each
        action cost the CPU it costs here and `cpus` CPUs were all theirs: the busy CPUs
        of this run (CPU per action times throughput) into `cpus`, at most `processes`
        over this run's own worker count."""
        busy = self.cpu_per_action_s * self.throughput
        return min(processes / self.processes, cpus / busy) if busy > 0 else float("nan")


def scale(
    place: Place,
    processes: int,
    per_process: int,
    sample: bool = False,
    key_path: str | None = None,
) -> tuple[Scale, int]:
    """`processes` workers, `per_process` actions each, started together; with `sample`, on
    PostgreSQL, what the server's backends did and waited for and how busy the machine was.
    On PostgreSQL it also measures the CPU the workers and the server spent."""
    import psutil

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(place, per_process, key_path, barrier, results))
        for _ in range(processes)
    ]
    on_pg = place.backend == "postgresql"
    dsn = place.location.split("#", 1)[0]
    # Created before the workers so that they do not race to create the tables.
    advisory = advisory_keys(place) if on_pg else {}
    server = ServerCpu(dsn) if on_pg else None
    for p in procs:
        p.start()
    waits = Waits(dsn, advisory) if sample and on_pg else None
    cpu_before = psutil.cpu_times()
    barrier.wait(timeout=300)
    time_zero = time.perf_counter()
    if server is not None:
        server.start()
    if waits is not None:
        with waits:
            got = [results.get(timeout=600) for _ in procs]
    else:
        got = [results.get(timeout=600) for _ in procs]
    cpu_busy = _cpu_busy(cpu_before, psutil.cpu_times())
    backends = {pid for *_, pid in got if pid is not None}
    rest_s = 0.0
    if server is not None:
        rest_s = server.spent_s(backends | ({waits.pid} if waits is not None else set()))
    load = load_average()
    for p in procs:
        p.join(60)
    latencies = sorted(x for lat, *_ in got for x in lat)
    errors = [e for _, errs, *_ in got for e in errs]
    wall = max(end for _, _, end, *_ in got) - time_zero
    shares = {}
    if waits is not None:
        shares = {
            "receipts": waits.share(STORE_LOCK, LOG_LOCK),
            STORE_LOCK: waits.share(STORE_LOCK),
            LOG_LOCK: waits.share(LOG_LOCK),
            ACTION_LOCK: waits.share(ACTION_LOCK),
            "any advisory": waits.share("any advisory"),
            "any lock": waits.share("any lock"),
        }
    result = Scale(
        processes,
        len(latencies),
        wall,
        _percentile(latencies, 50),
        _percentile(latencies, 99),
        errors,
        cpu_busy,
        waits.summary() if waits is not None else "",
        cpu_workers_s=sum(g[3] for g in got),
        cpu_backends_s=sum(g[4] for g in got),
        cpu_server_rest_s=rest_s,
        lock_shares=shares,
        heads=heads(place),
        load=load,
    )
    return result, left_pending(place)


def heads(place: Place) -> int | None:
    """How many tree heads the receipt log holds (None: a library without the log)."""
    store = place.open()
    try:
        read = getattr(store, "heads", None)
        return None if read is None else sum(1 for _ in read())
    finally:
        store.close()


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
    parser.add_argument(
        "--per-process",
        type=int,
        default=100,
        help="actions per process (100: each gate reaches the library's log cadence once)",
    )
    parser.add_argument(
        "--unsigned", action="store_true", help="receipts without the gate's Ed25519 key"
    )
    parser.add_argument(
        "--min-total", type=int, default=200, help="at least this many actions per N in all"
    )
    parser.add_argument("--processes", default=",".join(map(str, PROCESSES)))
    parser.add_argument(
        "--sample-at", type=int, default=8, metavar="N", help="sample PostgreSQL's waits at N"
    )
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write a table")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    lines: list[str] = []

    def say(text: str) -> None:
        # Every line carries the load average: the one its figures were measured under
        # when the line names it, else the load now, right after they were measured.
        if "load average" not in text:
            text = with_load(text)
        lines.append(text)
        print(text, flush=True)

    with postgres_url(args.pg) as pg, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        say(f"postgresql server: {PostgresStore.describe(pg)}")
        for backend in BACKENDS:
            say(f"{backend} durability: {durability(fresh(backend, pg, workdir))}")
        key_path = None
        if SigningKey is None:
            say("receipts: a hash chain under the store's lock, unsigned (no receipt log)")
        elif args.unsigned:
            say("receipts: unsigned, into the receipt log at the gate's default cadence")
        else:
            key_path = str(workdir / "signing-key.pem")
            SigningKey.generate().save(key_path)
            say(
                "receipts: signed with an Ed25519 key, into the receipt log at the gate's "
                "default cadence (every 100 settles of a gate, or 5 s)"
            )
        say("before the runs")
        books: dict[str, list[Bookkeeping]] = {b: [] for b in BACKENDS}
        for _ in range(args.repeats):
            for backend in BACKENDS:
                books[backend].append(
                    bookkeeping(fresh(backend, pg, workdir), args.actions, workdir, key_path)
                )
        say("after bookkeeping")
        for backend in BACKENDS:
            rs = books[backend]
            ratios = sorted(r.ratio for r in rs)
            say(f"{backend} commits per action: {statistics.mean(r.commits for r in rs):.2f}")
            say(
                f"{backend} receipt-log commits per action: "
                f"{statistics.mean(r.log_commits for r in rs):.2f}"
            )
            say(f"{backend} statements per action: {max(r.statements for r in rs)}")
            say(f"{backend} round trips per action: {max(r.round_trips for r in rs)}")
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
        pending = 0
        for n in counts:
            for backend in BACKENDS:
                per_process = max(args.per_process, -(-args.min_total // n))
                sample = backend == "postgresql" and n == args.sample_at
                s, left = scale(fresh(backend, pg, workdir), n, per_process, sample, key_path)
                pending += left
                scales[backend, n] = s
                say(
                    f"{backend} N={n}: {s.throughput:.0f} actions/s, p50 {s.p50_s * 1000:.1f} ms,"
                    f" p99 {s.p99_s * 1000:.1f} ms, errors {len(s.errors)} of {s.actions}; "
                    f"{s.load}"
                )
                for e in sorted(set(s.errors))[:3]:
                    say(f"  error: {e}")
        pg1, pg8 = scales.get(("postgresql", 1)), scales.get(("postgresql", 8))
        for label, one in (("1", pg1), ("8", pg8)):
            if one is not None:
                say(f"postgres throughput N={label}: {one.throughput:.0f} actions/s; {one.load}")
        if pg1 is not None and pg8 is not None:
            say(
                f"postgres scaling N=8 over N=1: {pg8.throughput / pg1.throughput:.1f}x; "
                f"load average {pg1.load.removeprefix('load average ')} at N=1, "
                f"{pg8.load.removeprefix('load average ')} at N=8"
            )
        if pg1 is not None:
            say(f"machine CPU busy during postgres N=1: {pg1.cpu_busy:.0%}; {pg1.load}")
            if pg1.cpu_busy > 0:
                say(f"postgres scaling ceiling from CPU: {1 / pg1.cpu_busy:.1f}x; {pg1.load}")
        sampled = scales.get(("postgresql", args.sample_at))
        if sampled is not None:
            n = args.sample_at
            say(f"postgres N={n} backends: {sampled.waits}; {sampled.load}")
            say(f"machine CPU busy during postgres N={n}: {sampled.cpu_busy:.0%}; {sampled.load}")
        for s in (pg1, sampled):
            if s is not None:
                say(
                    f"postgres CPU per action at N={s.processes}: "
                    f"{s.cpu_per_action_s * 1000:.2f} ms (workers "
                    f"{s.cpu_workers_s / s.actions * 1000:.2f}, their backends "
                    f"{s.cpu_backends_s / s.actions * 1000:.2f}, rest of the server "
                    f"{s.cpu_server_rest_s / s.actions * 1000:.2f}; {s.load})"
                )
                # What the run got of the machine: below all its CPUs, other work had the rest.
                say(
                    f"postgres CPUs used by the run at N={s.processes}: "
                    f"{s.cpu_per_action_s * s.throughput:.2f} of {os.cpu_count()} (workers and "
                    f"server; {s.load})"
                )
        if pg1 is not None:
            cpus = os.cpu_count() or 1
            top = pg1.ceiling(8, cpus)
            say(
                f"postgres ceiling from CPU: {top:.1f}x (N=8 over N=1 on {cpus} CPUs, at N=1's "
                f"CPU per action; {pg1.load})"
            )
            for more in (4, 8):
                say(
                    f"postgres ceiling from CPU on {more} CPUs: {pg1.ceiling(8, more):.1f}x; "
                    f"{pg1.load}"
                )
            if pg8 is not None:
                say(
                    f"postgres scaling over its CPU ceiling: "
                    f"{pg8.throughput / pg1.throughput / top:.2f} (target at least 0.8; "
                    f"{pg8.load})"
                )
        if sampled is not None and sampled.lock_shares:
            n, sh = args.sample_at, sampled.lock_shares
            logged = "no receipt log" if sampled.heads is None else f"{sampled.heads} heads signed"
            say(
                f"postgres receipt-log lock wait share at N={n}: {sh['receipts']:.0%} (the "
                f"store's or the receipt log's lock; the store's {sh[STORE_LOCK]:.0%}, the "
                f"receipt log's {sh[LOG_LOCK]:.0%}, an action's {sh[ACTION_LOCK]:.0%}, any "
                f"advisory {sh['any advisory']:.0%}, any lock {sh['any lock']:.0%}; {logged}; "
                f"{sampled.load})"
            )
        for backend, label in (("postgresql", "postgres"), ("sqlite", "sqlite")):
            s8 = scales.get((backend, 8))
            if s8 is not None:
                say(f"{label} p99 over p50 at N=8: {s8.p99_s / s8.p50_s:.1f}x; {s8.load}")
        say(f"left pending: {pending}")
    if args.markdown is not None:
        args.markdown.write_text(_markdown(books, scales, counts, args, lines))
    errors = sum(len(s.errors) for s in scales.values())
    bad_commits = any(r.commits != 2 for rs in books.values() for r in rs)
    return 1 if errors or bad_commits or pending else 0


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
