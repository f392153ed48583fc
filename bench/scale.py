"""Whether the gate, the restart path and verify() stay flat as the store grows (§7).

    python bench/scale.py [--sizes 1000,10000,100000] [--repeats 5] [--actions 100]

It grows one `SQLiteStore` (WAL, synchronous=FULL) to each size in turn with settled
actions shaped like the demo's (a payment each, metadata naming a case and a column, a
sent outcome with its checks and receipt; the filling runs through the store's own calls
with synchronous=OFF to save time, and every measured call runs with FULL). At each size
it prints one figure a line, each the median with its range over the repeats:

- `gate per action`: a first attempt through `Gate.submit` against the in-memory payments
  model, payments excluded, after a warm-up, and the same over one durable commit measured
  interleaved;
- `restart reads`: what a restarted worker reads before its first Stripe call: its case's
  actions by metadata, each one's state, and the pending list of its kind;
- `store open`: opening the store as a worker does (the schema check; the whole-file
  integrity check runs in `verify()`, not on open);
- `verify time` and `verify peak RSS`: `python -m interlock verify PATH --keys KEYS`'s
  work in a child process (the chain, every receipt's Ed25519 signature, the log and the
  store, no Stripe), its wall time and its maximum resident set as the child reads it
  (VmHWM: not its rusage, which carries this process's peak; see bench/common.py);
- `verify at SIZE: X s cpu, Y MB peak`: the same command's own CPU seconds and peak, as
  the child measured them, then the same with `--heads-only` (docs/receipts.md).

The receipts are signed with a key made for the run, as a gate with a key signs them, and
numbered into the log with signed heads. `--verify PATH --keys FILE` measures verify
alone on a store built elsewhere (as a million actions are: filling one through the gate
takes an hour here).

then, per figure, the largest size over the smallest (flat is 1.0x), both measured in this
run. Every line ends with the load average when its size's figures were taken (the
machine is shared; a growth line gives both sizes'). Timings are reported,
never judged; it exits 1 when an action does not end as it should or verify finds a
problem, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere in a checkout
    sys.path.insert(0, str(ROOT))
BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from common import ChildFigures, load_average, run_interlock, with_load  # noqa: E402
from gate_overhead import DurableCommit, TimedPayments  # noqa: E402

from interlock import (  # noqa: E402
    UNSIGNED_APPROVALS,
    Check,
    Gate,
    Intent,
    KeyList,
    Lease,
    Owner,
    Settlement,
    SigningKey,
    SQLiteStore,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments  # noqa: E402

AMOUNT = 2000
COLUMNS = ("standard", "interlock", "checked")
LOOKUPS = 50
# A freshly opened store's WAL grows until its first checkpoint (1000 pages, about 50
# actions), and commits that grow the file cost more: the gate's timed actions come after.
WARMUP = 100
# After filling, the disk may still be writing the filling back: measured commits wait
# until one durable commit costs at most this much more than before the filling.
SETTLED_WITHIN = 1.5
SETTLE_DEADLINE_S = 120.0
OWNER = Owner("scale-filler", 1, 0.0, "bench-host")


@dataclass
class Figures:
    """One size's measurements (seconds, or bytes for the RSS), one value per repeat."""

    size: int
    gate_s: list[float]
    ratio: list[float]
    restart_s: list[float]
    open_s: list[float]
    verify_s: list[float]
    verify_rss: list[float]
    load: str = ""  # the load average when this size's measurements ended
    verify_cpu: list[float] = field(default_factory=list)
    heads_cpu: list[float] = field(default_factory=list)
    heads_rss: list[float] = field(default_factory=list)


def _label(size: int) -> str:
    if size >= 10**6 and size % 10**6 == 0:
        return f"{size // 10**6}M"
    return f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size)


def fill(store: SQLiteStore, start: int, end: int, key: SigningKey | None = None) -> None:
    """Settle actions `start` .. `end - 1` as a gate would have, each on its own payment,
    their receipts signed with `key` and numbered into the log."""
    timing = Timing()
    now = time.time()
    checks = [
        Check("lookup", "a refund naming this action", "none", True),
        Check("world_unchanged", {"fingerprint": "fp"}, {"fingerprint": "fp"}, True),
        Check("approval", "approval live", "ok", True),
        Check("claim", ">= 8 s of claim left", 39.9, True),
    ]
    for i in range(start, end):
        payment = f"pi_fill{i:08d}"
        lease = f"lease-{payment}"
        store.grant_lease(Lease(lease, "refund", payment, AMOUNT, now + 3600, "bench", now))
        intent = Intent(
            action_id=new_action_id(),
            kind="refund",
            target=payment,
            amount=AMOUNT,
            lease_id=lease,
            fingerprint=refunds_fingerprint([]),
            metadata={"case": f"case-{i // len(COLUMNS)}", "column": COLUMNS[i % len(COLUMNS)]},
            context={"model": "scripted"},
            created_at=now,
        )
        epoch = store.begin(intent, OWNER, timing.claim_ttl_s, timing.grace_s).epoch
        store.mark_sending(intent.action_id, epoch, timing.renewal_s)
        verdict = Settlement("sent", None, f"re_fill{i:08d}", AMOUNT)
        extra = {"context": dict(intent.context), "idempotency_key": intent.action_id}
        if store.settle(intent.action_id, epoch, OWNER, verdict, checks, extra, key) is None:
            raise RuntimeError(f"filling: action {i} did not settle")
    while store.integrate(key) is not None:
        pass


def commit_cost(baseline: DurableCommit, n: int = 20) -> float:
    """The median of `n` durable commits."""
    return statistics.median(baseline.timed() for _ in range(n))


def settle_disk(baseline: DurableCommit, reference_s: float) -> float:
    """Commit until a durable commit costs what it did before the filling (or the deadline
    passes); returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_DEADLINE_S:
        if commit_cost(baseline) <= SETTLED_WITHIN * reference_s:
            break
    return time.monotonic() - start


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def gate_repeat(
    path: Path, workdir: Path, actions: int, key: SigningKey | None = None
) -> tuple[float, float]:
    """Median bookkeeping per first attempt in the store at `path`, and its ratio to one
    durable commit measured interleaved."""
    payments = TimedPayments(InProcessPayments())
    store = SQLiteStore(path)
    baseline = DurableCommit(workdir / f"baseline-{time.monotonic_ns()}.sqlite3")
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(),
        signing_key=key,
        approvers=UNSIGNED_APPROVALS,
    )
    book: list[float] = []
    commit: list[float] = []
    try:
        for i in range(WARMUP + actions):
            payment = payments.create_payment(5000)
            now = time.time()
            lease = f"lease-{payment.id}"
            store.grant_lease(Lease(lease, "refund", payment.id, AMOUNT, now + 3600, "bench", now))
            intent = Intent(
                action_id=new_action_id(),
                kind="refund",
                target=payment.id,
                amount=AMOUNT,
                lease_id=lease,
                fingerprint=refunds_fingerprint([]),
                metadata={"case": f"gate-{payment.id}", "column": "interlock"},
                created_at=now,
            )
            one_commit = baseline.timed()
            if i >= WARMUP:
                commit.append(one_commit)
            p0 = payments.spent_s
            start = time.perf_counter()
            outcome = gate.submit(intent)
            elapsed = time.perf_counter() - start
            if outcome.status != "sent":
                raise RuntimeError(f"unexpected outcome: {outcome}")
            if i >= WARMUP:
                book.append(elapsed - (payments.spent_s - p0))
    finally:
        gate.close()  # its receipts into the log now, and its log timer stopped
        store.close()
        baseline.conn.close()
    return statistics.median(book), statistics.median(book) / statistics.median(commit)


def restart_reads(store: SQLiteStore, filled: int, rng: random.Random) -> float:
    """Median time of what a restarted worker reads about its case, over random cases."""
    cases = max(1, filled // len(COLUMNS))
    times = []
    for _ in range(LOOKUPS):
        case = {"case": f"case-{rng.randrange(cases)}", "column": "interlock"}

        def read(case: dict[str, str] = case) -> None:
            mine = store.actions(case)
            states = [store.action(aid) for aid in mine]
            if not mine or any(s is None or s.settlement is None for s in states):
                raise RuntimeError(f"case {case} has no settled action")
            store.pending("refund")

        times.append(_timed(read))
    return statistics.median(times)


def verify_child(path: Path, keys: Path | None = None) -> tuple[float, int]:
    """Wall time (the whole process, as a person waits for it) and peak RSS (bytes, as the
    child itself read it: see bench/common.py) of `python -m interlock verify PATH`."""
    wall, child = verify_figures(path, keys)
    return wall, child.peak_bytes


def verify_figures(path: Path, keys: Path | None, *options: str) -> tuple[float, ChildFigures]:
    """The whole verify process's wall time, and what the child measured of itself (its
    own CPU seconds and peak), for `verify PATH [--keys KEYS] [options]`."""
    given = ["--keys", str(keys)] if keys is not None else []
    start = time.perf_counter()
    child = run_interlock(path.parent, "verify", str(path), *given, *options)
    return time.perf_counter() - start, child


def make_keys(workdir: Path) -> tuple[SigningKey, Path]:
    """A signing key for the run, and the key list that trusts it (written in `workdir`)."""
    key = SigningKey.generate()
    trusted = KeyList()
    trusted.add(key.public)
    path = workdir / "keys.json"
    trusted.save(path)
    return key, path


def measure_verify(f: Figures, path: Path, keys: Path) -> None:
    """One repeat of verify into `f`: every signature checked, then heads only."""
    wall, every = verify_figures(path, keys)
    _, heads = verify_figures(path, keys, "--heads-only")
    f.verify_s.append(wall)
    f.verify_rss.append(every.peak_bytes)
    f.verify_cpu.append(every.cpu_s)
    f.heads_cpu.append(heads.cpu_s)
    f.heads_rss.append(heads.peak_bytes)


def measure(
    path: Path,
    workdir: Path,
    size: int,
    filled: int,
    repeats: int,
    actions: int,
    key: tuple[SigningKey, Path],
) -> Figures:
    """Every figure at one size, `repeats` times over (each repeat visits every figure);
    the first `filled` actions are the filler's, with cases numbered from 0."""
    rng = random.Random(size)
    f = Figures(size, [], [], [], [], [], [])
    for _ in range(repeats):
        f.open_s.append(_timed(lambda: SQLiteStore(path).close()))
        store = SQLiteStore(path)
        try:
            f.restart_s.append(restart_reads(store, filled, rng))
        finally:
            store.close()
        measure_verify(f, path, key[1])
        gate_s, ratio = gate_repeat(path, workdir, actions, key[0])
        f.gate_s.append(gate_s)
        f.ratio.append(ratio)
    f.load = load_average()
    return f


def _spread(values: list[float], scale: float, fmt: str, unit: str) -> str:
    m, lo, hi = (statistics.median(values) * scale, min(values) * scale, max(values) * scale)
    return f"{m:{fmt}}{unit} (median of {len(values)}, range {lo:{fmt}}-{hi:{fmt}}{unit})"


def lines_for(f: Figures) -> list[str]:
    """One size's report lines."""
    n = _label(f.size)
    lines = [
        f"{n} actions: gate per action: {_spread(f.gate_s, 1000, '.3f', ' ms')}",
        f"{n} actions: gate vs one commit: {_spread(f.ratio, 1, '.1f', 'x')}",
        f"{n} actions: restart reads: {_spread(f.restart_s, 1000, '.3f', ' ms')}",
        f"{n} actions: store open: {_spread(f.open_s, 1000, '.1f', ' ms')}",
        f"{n} actions: verify time: {_spread(f.verify_s, 1, '.2f', ' s')}",
        f"{n} actions: verify peak RSS: {_spread(f.verify_rss, 1 / 2**20, '.0f', ' MB')}",
        *verify_lines(f),
    ]
    return [with_load(line, f.load) for line in lines]


def verify_lines(f: Figures) -> list[str]:
    """Verify's own CPU seconds and peak (medians), every signature checked and heads
    only: the figures issue 36 names."""
    n, mb = _label(f.size), 1 / 2**20
    return [
        f"verify{how} at {n}: {statistics.median(cpu):.2f} s cpu, "
        f"{statistics.median(rss) * mb:.0f} MB peak (median of {len(cpu)})"
        for how, cpu, rss in (
            ("", f.verify_cpu, f.verify_rss),
            (" --heads-only", f.heads_cpu, f.heads_rss),
        )
    ]


def growth(first: Figures, last: Figures) -> list[str]:
    """Each figure at the largest size over the smallest."""
    span = f"{_label(last.size)} over {_label(first.size)}"

    def ratio(a: list[float], b: list[float]) -> str:
        return f"{statistics.median(b) / statistics.median(a):.1f}x"

    # Each growth is a ratio of two sizes measured in this run, under their own loads.
    loads = f"load average {first.load.removeprefix('load average ')} at {_label(first.size)}"
    loads += f", {last.load.removeprefix('load average ')} at {_label(last.size)}"
    lines = [
        f"growth {span}: gate per action {ratio(first.gate_s, last.gate_s)}",
        f"growth {span}: restart reads {ratio(first.restart_s, last.restart_s)}",
        f"growth {span}: store open {ratio(first.open_s, last.open_s)}",
        f"growth {span}: verify time {ratio(first.verify_s, last.verify_s)}",
        f"growth {span}: verify peak RSS {ratio(first.verify_rss, last.verify_rss)}",
    ]
    return [with_load(line, loads) for line in lines]


def _sizes(text: str) -> list[int]:
    sizes = [int(s) for s in text.split(",") if s.strip()]
    if not sizes or any(s < 1 for s in sizes) or sizes != sorted(set(sizes)):
        raise ValueError(text)
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, grow the store size by size, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="store sizes, ascending")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per size (5)")
    parser.add_argument(
        "--actions", type=int, default=100, help="gate actions per repeat, after a warm-up (100)"
    )
    parser.add_argument(
        "--verify", metavar="PATH", type=Path, help="measure verify alone on this store"
    )
    parser.add_argument("--keys", metavar="FILE", type=Path, help="with --verify: its key list")
    args = parser.parse_args(argv)
    if args.verify is not None:
        if args.keys is None or args.repeats < 1:
            parser.error("--verify needs --keys FILE (the key list its receipts verify under)")
        return verify_only(args.verify, args.keys, args.repeats)
    try:
        sizes = _sizes(args.sizes)
    except ValueError:
        parser.error(f"--sizes must be ascending positive integers, got {args.sizes!r}")
    if args.repeats < 1 or args.actions < 1:
        parser.error("--repeats and --actions must be at least 1")
    print(
        with_load(
            "scale: SQLite WAL synchronous=FULL, demo-shaped settled actions, sizes "
            + ", ".join(_label(s) for s in sizes)
        )
    )
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        workdir = Path(d)
        path = workdir / "journal.sqlite3"
        probe = DurableCommit(workdir / "probe.sqlite3")
        reference_s = commit_cost(probe, 50)
        key = make_keys(workdir)
        filled = 0
        try:
            for size in sizes:
                filler = SQLiteStore(path)
                filler._conn.execute("PRAGMA synchronous=OFF")  # filling only; measured FULL
                try:
                    # The gate's own actions from earlier sizes count towards the size.
                    end = size - _gate_actions(figures, args.repeats, args.actions)
                    fill(filler, filled, end, key[0])
                    # Write the filling into the file and sync it now, so that no measured
                    # commit pays for a checkpoint of the unsynced filling.
                    filler._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    filler.close()
                os.sync()
                waited = settle_disk(probe, reference_s)
                print(f"({_label(size)}: the disk settled in {waited:.1f} s)", file=sys.stderr)
                filled = max(filled, size - _gate_actions(figures, args.repeats, args.actions))
                f = measure(path, workdir, size, filled, args.repeats, args.actions, key)
                figures.append(f)
                for line in lines_for(f):
                    print(line, flush=True)
        except RuntimeError as e:
            print(f"scale: {e}", file=sys.stderr)
            return 1
        finally:
            probe.conn.close()
    if len(figures) > 1:
        for line in growth(figures[0], figures[-1]):
            print(line)
    return 0


def verify_only(path: Path, keys: Path, repeats: int) -> int:
    """Verify's own figures alone, on a store built elsewhere."""
    store = SQLiteStore.open_read_only(path)
    try:
        size = sum(1 for _ in store.receipts())
    finally:
        store.close()
    f = Figures(size, [], [], [], [], [], [])
    try:
        for _ in range(repeats):
            measure_verify(f, path, keys)
    except RuntimeError as e:
        print(f"scale: {e}", file=sys.stderr)
        return 1
    f.load = load_average()
    for line in verify_lines(f):
        print(with_load(line, f.load), flush=True)
    return 0


def _gate_actions(figures: list[Figures], repeats: int, actions: int) -> int:
    """Actions the gate added to the store at the sizes measured so far."""
    return len(figures) * repeats * (WARMUP + actions)


if __name__ == "__main__":
    sys.exit(main())
