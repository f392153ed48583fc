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
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (ROOT, BENCH):  # run as a script from anywhere in a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gate_overhead import DurableCommit, TimedPayments, decision  # noqa: E402

from interlock import Gate, SQLiteStore, StripeRefund, Switches, Timing  # noqa: E402
from interlock_demo.payments import InProcessPayments  # noqa: E402

WARMUP = 20
ARMS = ("gate", "DBOS one step", "DBOS three steps")


class GateArm:
    """First attempts through the gate; `run()` returns the bookkeeping seconds."""

    def __init__(self, workdir: Path) -> None:
        self.payments = TimedPayments(InProcessPayments())
        self.store = SQLiteStore(workdir / "journal.sqlite3")
        self.gate = Gate(
            self.store,
            StripeRefund(self.payments),
            timing=Timing(),
            switches=Switches(),
            signing_key=None,
        )

    def run(self) -> float:
        """One action; its time outside the payments calls."""
        intent = decision(self.payments, self.store)
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
    """One DBOS instance with a one-step and a three-step workflow."""

    def __init__(self, workdir: Path) -> None:
        from dbos import DBOS, DBOSConfig

        path = workdir / "dbos-system.sqlite3"
        # WAL is kept in the file: DBOS's connections then write ahead, as the gate's store.
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
        logging.getLogger("dbos").setLevel(logging.WARNING)
        config: DBOSConfig = {
            "name": "interlock-bench",
            "system_database_url": f"sqlite:///{path}",
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
        self._n = 0
        self.mode = _journal_mode(path)

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


def _journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def start_dbos(workdir: Path) -> tuple[DBOSArms | None, str | None]:
    """DBOS's arms, or None and the reason it cannot run here, in words."""
    try:
        import dbos  # noqa: F401
    except ImportError as e:
        return (
            None,
            f"dbos is not installed ({e}); install the bench extra: pip install -e '.[bench]'",
        )
    try:
        return DBOSArms(workdir), None
    except Exception as e:  # any failure to start is reported, never hidden
        return None, f"DBOS did not start here: {type(e).__name__}: {e}"


def _spread(values: list[float]) -> str:
    m, lo, hi = statistics.median(values), min(values), max(values)
    return f"{m:.1f}x one commit (median of {len(values)} rounds, range {lo:.1f}-{hi:.1f}x)"


def main(argv: list[str] | None = None) -> int:
    """Run the arms interleaved, round by round, and print one line an arm."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100, help="actions per arm and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
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
        ratios: dict[str, list[float]] = {name: [] for name in arms}
        commit_ms: list[float] = []
        try:
            for _ in range(WARMUP):
                commit.timed()
                for arm in arms.values():
                    arm()
            for _ in range(args.rounds):
                times: dict[str, list[float]] = {name: [] for name in arms}
                commits: list[float] = []
                for _ in range(args.actions):
                    commits.append(commit.timed())
                    for name, arm in arms.items():
                        times[name].append(arm())
                one = statistics.median(commits)
                commit_ms.append(one * 1000)
                for name in arms:
                    ratios[name].append(statistics.median(times[name]) / one)
        except RuntimeError as e:
            print(f"peers: {e}", file=sys.stderr)
            return 1
        finally:
            gate.close()
            commit.conn.close()
            if peer is not None:
                peer.close()
    print(
        f"peers: {args.rounds} rounds of {args.actions} actions per arm, interleaved in one "
        "process; SQLite WAL synchronous=FULL for every arm"
        + (f" (DBOS's system database: journal_mode={peer.mode})" if peer is not None else "")
    )
    m = statistics.median(commit_ms)
    print(f"one commit: 1.0x ({m:.3f} ms, median of {len(commit_ms)} rounds)")
    for name in ARMS:
        if name in ratios:
            print(f"{name}: {_spread(ratios[name])}")
        else:
            print(f"{name}: not measured: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
