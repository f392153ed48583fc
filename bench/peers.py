"""The gate's bookkeeping against a durable-execution peer, in one process (§7).

    python bench/peers.py [--actions N] [--rounds R]

Arms, interleaved action by action so that all see the same disk at the same moment:

- `one commit`: one tiny INSERT committed in SQLite (WAL, synchronous=FULL): the unit;
- `gate`: `Gate.submit` of a refund over the in-memory payments model, the payments calls
  excluded (as in bench/gate_overhead.py): 3 durable commits and the checks;
- `DBOS one step` and `DBOS three steps`: a DBOS workflow of one (three) steps that do
  nothing, on DBOS's SQLite system database, set to WAL with synchronous=FULL like the
  gate's store (DBOS records the workflow, each step's result and the outcome).

Each round takes the median of each arm over its actions, over the round's median commit;
it prints one line an arm, `NAME: X.Xx one commit`, with the median and range over the
rounds. The peers come from the `bench` extra (`pip install -e '.[bench]'`); when DBOS
cannot run here its arms say exactly why and the gate and the commit are still printed.
Timings are reported, never judged; it exits 1 only when the gate's outcome is wrong.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (ROOT, BENCH):  # run as a script from anywhere in a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gate_overhead import DurableCommit, TimedPayments, decision  # noqa: E402

from interlock import (  # noqa: E402
    UNSIGNED_APPROVALS,
    Gate,
    PostgresStore,
    SQLiteStore,
    StripeRefund,
    Timing,
)
from interlock.testing import InProcessPayments  # noqa: E402
from interlock_demo.reports.local_postgres import postgres_url  # noqa: E402

WARMUP = 20
ARMS = ("gate", "DBOS one step", "DBOS three steps")


class GateArm:
    """First attempts through the gate; `run()` returns the bookkeeping seconds."""

    def __init__(self, workdir: Path) -> None:
        self.payments = TimedPayments(InProcessPayments())
        self.store: SQLiteStore | PostgresStore = SQLiteStore(workdir / "journal.sqlite3")
        self.gate = Gate(
            self.store,
            StripeRefund(self.payments),
            timing=Timing(),
            signing_key=None,
            approvers=UNSIGNED_APPROVALS,
        )

    def run(self) -> float:
        """One action; its time outside the payments calls."""
        intent = decision(self.payments, self.store)  # type: ignore[arg-type]
        p0 = self.payments.spent_s
        start = time.perf_counter()
        outcome = self.gate.submit(intent)
        elapsed = time.perf_counter() - start
        if outcome.status != "sent":
            raise RuntimeError(f"unexpected gate outcome: {outcome}")
        return elapsed - (self.payments.spent_s - p0)

    def close(self) -> None:
        """Close the store."""
        self.store.close()


class DBOSArms:
    """One DBOS instance with a one-step and a three-step workflow, on SQLite (a file in
    `workdir`) or on the PostgreSQL server at `pg`."""

    def __init__(self, workdir: Path, pg: str | None = None) -> None:
        import sqlalchemy as sa
        from dbos import DBOS, DBOSConfig

        path = workdir / "dbos-system.sqlite3"
        if pg is None:
            # WAL is kept in the file: DBOS's connections then write ahead, as the gate's.
            first = sqlite3.connect(path)
            first.execute("PRAGMA journal_mode=WAL")
            first.close()
            url = f"sqlite:///{path}"
        else:
            url = _database(pg, "interlock_bench_dbos")
        logging.getLogger("dbos").setLevel(logging.WARNING)
        config: DBOSConfig = {
            "name": "interlock-bench",
            "system_database_url": url,
            "log_level": "WARNING",
        }
        self.dbos = DBOS(config=config)

        @DBOS.step()
        def step(x: int) -> int:
            return x + 1

        @DBOS.workflow()
        def one_step(x: int) -> int:
            return step(x)

        @DBOS.workflow()
        def three_steps(x: int) -> int:
            return step(step(step(x)))

        self._one: Callable[[int], int] = one_step
        self._three: Callable[[int], int] = three_steps
        self._destroy = DBOS.destroy
        DBOS.launch()
        engine = self.dbos._sys_db.engine

        # Durability set explicitly on every connection DBOS opens, as on the gate's.
        def durable(dbapi_conn: Any, _record: Any) -> None:
            if pg is None:
                dbapi_conn.execute("PRAGMA synchronous=FULL")
            else:
                with dbapi_conn.cursor() as cur:
                    cur.execute("SET synchronous_commit = on")

        sa.event.listen(engine.engine.pool, "connect", durable)
        engine.engine.pool.dispose()
        with engine.connect() as pooled:
            if pg is None:
                mode = pooled.exec_driver_sql("PRAGMA journal_mode").scalar()
                sync = pooled.exec_driver_sql("PRAGMA synchronous").scalar()
                level = _SYNC.get(sync, sync) if isinstance(sync, int) else sync
                self.mode = f"journal_mode={mode} synchronous={level}"
            else:
                sync = pooled.exec_driver_sql("SHOW synchronous_commit").scalar()
                self.mode = f"synchronous_commit={sync}"
        self._n = 0

    def _timed(self, workflow: Callable[[int], int], steps: int) -> float:
        self._n += 1
        start = time.perf_counter()
        result = workflow(self._n)
        elapsed = time.perf_counter() - start
        if result != self._n + steps:
            raise RuntimeError(f"DBOS workflow answered {result}")
        return elapsed

    def one(self) -> float:
        """One workflow of one step."""
        return self._timed(self._one, 1)

    def three(self) -> float:
        """One workflow of three steps."""
        return self._timed(self._three, 3)

    def close(self) -> None:
        """Shut DBOS down."""
        self._destroy()


_SYNC = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _database(pg: str, name: str) -> str:
    """`pg` naming another database on the same server."""
    parts = urlsplit(pg)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


class PostgresCommit:
    """One tiny INSERT committed on PostgreSQL (synchronous_commit=on): the unit there."""

    def __init__(self, pg: str) -> None:
        import psycopg

        self.conn = psycopg.connect(pg, autocommit=True, prepare_threshold=None)
        self.conn.execute("SET synchronous_commit = on")
        self.conn.execute("CREATE SCHEMA IF NOT EXISTS interlock_bench_base")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS interlock_bench_base.t (id serial, v text NOT NULL)"
        )
        row = self.conn.execute("SHOW synchronous_commit").fetchone()
        self.mode = f"synchronous_commit={row[0] if row else '?'}"

    def timed(self) -> float:
        """Seconds for one durable commit."""
        start = time.perf_counter()
        self.conn.execute("BEGIN")
        self.conn.execute("INSERT INTO interlock_bench_base.t (v) VALUES (%s)", ("x",))
        self.conn.execute("COMMIT")
        return time.perf_counter() - start


class PostgresGateArm(GateArm):
    """First attempts through the gate over a `PostgresStore` in a fresh schema."""

    def __init__(self, pg: str) -> None:
        self.payments = TimedPayments(InProcessPayments())
        self.store = PostgresStore(pg, schema=f"bench_peers_{uuid.uuid4().hex[:10]}")
        self.gate = Gate(
            self.store,
            StripeRefund(self.payments),
            timing=Timing(),
            signing_key=None,
            approvers=UNSIGNED_APPROVALS,
        )


def start_dbos(workdir: Path, pg: str | None = None) -> tuple[DBOSArms | None, str | None]:
    """DBOS's arms, or None and the reason it cannot run here, in words."""
    try:
        import dbos  # noqa: F401
    except ImportError as e:
        return (
            None,
            f"dbos is not installed ({e}); install the bench extra: pip install -e '.[bench]'",
        )
    try:
        return DBOSArms(workdir, pg), None
    except Exception as e:  # any failure to start is reported, never hidden
        return None, f"DBOS did not start here: {type(e).__name__}: {e}"


def _spread(values: list[float]) -> str:
    m, lo, hi = statistics.median(values), min(values), max(values)
    return f"{m:.1f}x one commit (median of {len(values)} rounds, range {lo:.1f}-{hi:.1f}x)"


def _rounds(
    commit: Callable[[], float], arms: dict[str, Callable[[], float]], actions: int, rounds: int
) -> tuple[dict[str, list[float]], list[float]]:
    """Each arm's median over its round's median commit, per round; the commits' ms."""
    ratios: dict[str, list[float]] = {name: [] for name in arms}
    commit_ms: list[float] = []
    for _ in range(WARMUP):
        commit()
        for arm in arms.values():
            arm()
    for _ in range(rounds):
        times: dict[str, list[float]] = {name: [] for name in arms}
        commits: list[float] = []
        for _ in range(actions):
            commits.append(commit())
            for name, arm in arms.items():
                times[name].append(arm())
        one = statistics.median(commits)
        commit_ms.append(one * 1000)
        for name in arms:
            ratios[name].append(statistics.median(times[name]) / one)
    return ratios, commit_ms


def _on_postgres(pg: str, workdir: Path, actions: int, rounds: int) -> list[str]:
    """The gate and DBOS's one step on PostgreSQL, over one PostgreSQL commit."""
    commit = PostgresCommit(pg)
    gate = PostgresGateArm(pg)
    peer, why = start_dbos(workdir, pg)
    arms: dict[str, Callable[[], float]] = {"gate on postgres": gate.run}
    if peer is not None:
        arms["DBOS one step on postgres"] = peer.one
    try:
        ratios, commit_ms = _rounds(commit.timed, arms, actions, rounds)
    finally:
        gate.close()
        commit.conn.close()
        if peer is not None:
            peer.close()
    lines = [
        f"postgres: {commit.mode} on the commit's connection, on the gate's store (set in"
        " each write)" + (f", on DBOS's system database: {peer.mode}" if peer is not None else ""),
        f"one postgres commit: 1.0x ({statistics.median(commit_ms):.3f} ms, median of"
        f" {len(commit_ms)} rounds)",
    ]
    for name in ("gate on postgres", "DBOS one step on postgres"):
        if name in ratios:
            lines.append(f"{name}: {_spread(ratios[name]).replace('commit', 'postgres commit')}")
        else:
            lines.append(f"{name}: not measured: {why}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the arms interleaved, round by round, and print one line an arm."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100, help="actions per arm and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--pg", metavar="URL", help="PostgreSQL server for the postgres arms (default: a local one)"
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="SQLite arms only (no PostgreSQL server)"
    )
    args = parser.parse_args(argv)
    if args.actions < 1 or args.rounds < 1:
        parser.error("--actions and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        workdir = Path(d)
        commit = DurableCommit(workdir / "baseline.sqlite3")
        gate = GateArm(workdir)
        peer, why = start_dbos(workdir)
        arms: dict[str, Callable[[], float]] = {"gate": gate.run}
        if peer is not None:
            arms.update({"DBOS one step": peer.one, "DBOS three steps": peer.three})
        assert isinstance(gate.store, SQLiteStore)
        level = gate.store._conn.execute("PRAGMA synchronous").fetchone()[0]
        gate_sync = _SYNC.get(level, level)
        try:
            ratios, commit_ms = _rounds(commit.timed, arms, args.actions, args.rounds)
        except RuntimeError as e:
            print(f"peers: {e}", file=sys.stderr)
            return 1
        finally:
            gate.close()
            commit.conn.close()
            if peer is not None:
                peer.close()
        postgres: list[str] = []
        if not args.no_postgres:
            # DBOS is one instance a process: the SQLite one is gone before this one starts.
            try:
                with postgres_url(args.pg) as pg:
                    postgres = _on_postgres(pg, workdir, args.actions, args.rounds)
            except RuntimeError as e:
                print(f"peers: {e}", file=sys.stderr)
                return 1
    print(
        f"peers: {args.rounds} rounds of {args.actions} actions per arm, interleaved in one "
        f"process; SQLite WAL synchronous=FULL set for every arm (the gate's store reports "
        f"synchronous={gate_sync})"
        + (f" (DBOS's system database: {peer.mode})" if peer is not None else "")
    )
    m = statistics.median(commit_ms)
    print(f"one commit: 1.0x ({m:.3f} ms, median of {len(commit_ms)} rounds)")
    for name in ARMS:
        if name in ratios:
            print(f"{name}: {_spread(ratios[name])}")
        else:
            print(f"{name}: not measured: {why}")
    for line in postgres:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
