"""`results/performance.md`: the performance table, measured by the benchmarks in `bench/`.

`write_performance` runs each benchmark as its own process (as a person would), keeps its
output, one figure a line, and writes the table: what was measured before (the figures
taken before the performance work), what the benchmarks measure now, and the target, next to
Temporal's kill-to-retry as the engine comparison (`results/e2e_offline.md`) states it.
The benchmarks live in a source checkout; without one the step is skipped and says why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from interlock_demo.engine.supervisor import kill_tree
from interlock_demo.exit_codes import ExitCode
from interlock_demo.output import write_output
from interlock_demo.settings.environment import bench_env
from interlock_demo.stopping import on_stop

# Where the package sits: a source checkout when installed with `pip install -e .`.
ROOT = Path(__file__).resolve().parents[2]
COMMAND = "interlock-demo results"
BENCH_DEADLINE_S = 1800.0


@dataclass(frozen=True)
class Bench:
    """One benchmark: its script, its arguments, and what it is called in the file."""

    key: str
    script: str
    args: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The command that reproduces it, from the repository's root."""
        return " ".join(["python", f"bench/{self.script}", *self.args])


BENCHES = (
    Bench("gate", "gate_overhead.py"),
    Bench("peers", "peers.py"),
    Bench("recovery", "recovery.py"),
    Bench("scale", "scale.py"),
    Bench("emulator", "emulator_scale.py"),
)

# The figures taken before the performance work (on main then, on these 2-core machines).
BEFORE = {
    "gate": "3 fsyncs, about 26 statements; 3.4-5.2x one durable commit (median 4.0x)",
    "peers": "gate 3.6x, DBOS one step 10.4x, three steps 18.3x one commit",
    "adopted": "16 s (the whole claim wait), in both engines",
    "restart": "0.42 s median (0.73 s under load); the import path alone 0.25 s",
    "recovery": "not measured apart",
    "many": "actions left pending at N = 8-16; p99 0.5 s",
    "restart_scale": "store.actions scans with json_extract: 0.146 s at 100k instead of 0.001 s",
    "verify": (
        "3.3 s at 100k receipts, 190 MB traced, 656 MB RSS for the CLI; it checked the chain "
        "and each settled action, not yet each action's history and every approval"
    ),
    "emulator": "create 3.6 ms, list 1.7 ms at 10k refunds",
}


def run_bench(bench: Bench) -> list[str]:
    """The benchmark's output lines; a failure raises with its exit code and stderr's end.

    Past its deadline, or on a stop signal, it is killed with everything it started.
    """
    with (
        subprocess.Popen(
            [sys.executable, str(checkout() / "bench" / bench.script), *bench.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=checkout(),
            env=bench_env(),
        ) as proc,
        on_stop(lambda: kill_tree(proc.pid)),
    ):
        try:
            out, err = proc.communicate(timeout=BENCH_DEADLINE_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            raise
    if proc.returncode != 0:
        raise RuntimeError(f"{bench.command} exited {proc.returncode}: {err.strip()[-800:]}")
    return out.splitlines()


# What every benchmark line ends with (bench/common.py's `; load average 1.23 0.98 0.80`,
# or `; load 0.85`): the load its figures were measured under. The table states the
# figures; each benchmark's output below it keeps the load.
_LOAD = re.compile(r"; load (?:average )?\d[^);]*")


def without_load(lines: list[str]) -> list[str]:
    """The benchmark's lines less the load average beside each figure."""
    return [_LOAD.sub("", line) for line in lines]


def figure(lines: list[str], label: str) -> str:
    """The text after `label: ` on the first line that starts with it (less the target it
    names: the table has a column for that), else a dash."""
    prefix = f"{label}: "
    text = next((line[len(prefix) :] for line in lines if line.startswith(prefix)), "—")
    return text.split("; target")[0]


@dataclass(frozen=True)
class Temporal:
    """What the engine comparison says about Temporal's retry after a kill."""

    heartbeat_s: str
    first_interval_s: str
    generated: str
    after_answer: str


def temporal_from(e2e: Path) -> Temporal | None:
    """Temporal's kill-to-retry as `results/e2e_offline.md` states it, or None without it."""
    try:
        text = e2e.read_text()
    except OSError:
        return None
    heartbeat = re.search(r"a (\d+(?:\.\d+)?) s heartbeat timeout", text)
    interval = re.search(r"\((\d+(?:\.\d+)?) s first interval", text)
    generated = re.search(r"on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", text)
    row = re.search(r"\| after-answer \| `run_\w+`, ([\d.]+ s)[^|]*\| `run_\w+`, ([\d.]+ s)", text)
    if heartbeat is None or interval is None:
        return None
    return Temporal(
        heartbeat_s=heartbeat[1],
        first_interval_s=interval[1],
        generated=generated[1] if generated else "an unknown date",
        after_answer=(
            f"its after-answer run took {row[2]} (standalone {row[1]})" if row else "no run time"
        ),
    )


def _largest(lines: list[str], what: str) -> str:
    """A scale figure at the largest size printed, with that size."""
    sized = [line for line in lines if re.match(rf"\d+k? actions: {re.escape(what)}: ", line)]
    if not sized:
        return "—"
    size, _, value = sized[-1].partition(" actions: ")
    return f"at {size} actions {value.removeprefix(what + ': ')}"


def _emulator(lines: list[str], op: str) -> str:
    """The emulator's cost of `op` at the most refunds printed, with that count."""
    sized = [line for line in lines if re.match(rf"{op} at \d+ refunds: ", line)]
    if not sized:
        return "—"
    label, _, value = sized[-1].partition(": ")
    return f"{value} ({label.removeprefix(op + ' ')})"


def table(out: Mapping[str, list[str]], temporal: Temporal | None, stores: bool) -> list[str]:
    """The performance table: each figure before, measured now, and its target."""
    out = {key: without_load(lines) for key, lines in out.items()}
    gate, peers = out["gate"], out["peers"]
    recovery, scale, emulator = out["recovery"], out["scale"], out["emulator"]

    def grew(what: str) -> str:
        for line in scale:
            found = re.fullmatch(rf"growth (\S+) over (\S+): {re.escape(what)} ([\d.]+x)", line)
            if found:
                return f"{found[3]} from {found[2]} to {found[1]}"
        return "—"

    if temporal is None:
        retry = "Temporal: not available (results/e2e_offline.md is missing or says no timeout)"
    else:
        retry = (
            f"Temporal retries a killed activity only once its {temporal.heartbeat_s} s "
            f"heartbeat timeout notices the death, then after {temporal.first_interval_s} s "
            f"(results/e2e_offline.md, {temporal.generated}; {temporal.after_answer})"
        )
    many = (
        "see `stores.md` (bench/stores.py: N = 1..16 processes, throughput, p50/p99, errors)"
        if stores
        else "bench/stores.py has not written `stores.md` here"
    )
    rows = [
        (
            "gate bookkeeping per action, Stripe excluded",
            BEFORE["gate"],
            f"{figure(gate, 'durable commits per first attempt').split(' (')[0]} commits, "
            f"{figure(gate, 'statements per action').split(' (')[0]} statements; "
            f"{figure(gate, 'bookkeeping vs one commit')}",
            "at most 2.6x one commit on a quiet machine",
        ),
        (
            "same, against DBOS 3.4 and Temporal (SQLite, same process, interleaved)",
            BEFORE["peers"],
            f"gate {figure(peers, 'gate')}; DBOS one step {figure(peers, 'DBOS one step')}; "
            f"three steps {figure(peers, 'DBOS three steps')}; Temporal one plain activity "
            f"{figure(peers, 'temporal one plain activity')}; the gate in a Temporal activity "
            f"{figure(peers, 'gate in a temporal activity')}",
            "stay the fastest",
        ),
        (
            "after-answer: SIGKILL to `adopted`",
            BEFORE["adopted"],
            f"standalone {figure(recovery, 'after-answer kill to adopted')}. {retry}",
            "under 1 s standalone",
        ),
        (
            "worker restart to first Stripe call, three columns at once",
            BEFORE["restart"],
            f"forked from the column's fork server "
            f"{figure(recovery, 'restart to first Stripe call (three at once)')}; cold, one at "
            f"a time {figure(recovery, 'restart to first Stripe call (alone, cold)')}",
            "under 0.1 s median, forked",
        ),
        (
            "SIGKILL to outcome, less the claim wait",
            BEFORE["recovery"],
            figure(recovery, "kill to outcome less claim wait"),
            "under 0.5 s",
        ),
        ("many processes on one store", BEFORE["many"], many, "no action pending for that"),
        (
            "restart path (a worker's reads) as the store grows",
            BEFORE["restart_scale"],
            f"{_largest(scale, 'restart reads')}, {grew('restart reads')}. Opening the store: "
            f"{_largest(scale, 'store open')}, {grew('store open')}",
            "flat from 1k to 100k",
        ),
        (
            "`verify()` as receipts grow",
            BEFORE["verify"],
            f"python -m interlock verify {_largest(scale, 'verify time')}; peak RSS "
            f"{_largest(scale, 'verify peak RSS')}, {grew('verify peak RSS')}",
            "linear and streamed, under 64 MB RSS at 100k",
        ),
        (
            "emulator at 10k refunds",
            BEFORE["emulator"],
            f"create {_emulator(emulator, 'create')}; list {_emulator(emulator, 'list')}",
            "flat (keyed look-ups)",
        ),
    ]
    lines = ["| what | before the performance work | measured now | target |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines


def render(
    out: Mapping[str, list[str]],
    temporal: Temporal | None,
    stores: bool,
    benches: tuple[Bench, ...] = BENCHES,
) -> str:
    """The whole file."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    parts = [
        "# Performance: the gate, recovery and the store at scale",
        "",
        f"<!-- Generated by `{COMMAND}` from the benchmarks in bench/; do not edit by hand. -->",
        f"_Generated {now} by `{COMMAND}` on {os.cpu_count()} CPUs "
        f"(load average {load} when written: the machine is shared, so timings move; "
        "counts do not)._",
        "",
        "Every figure comes from a benchmark below, run as its own process; each prints one "
        "figure a line, as the median with its range over repeated, interleaved runs, and "
        "the load average it was measured under (kept in each benchmark's output below). "
        "Ratios to one durable commit are measured in the same run, so they hold across "
        "machines better than milliseconds do.",
        "",
        *table(out, temporal, stores),
        "",
    ]
    for bench in benches:
        parts += [f"## `{bench.command}`", "", "```", *out[bench.key], "```", ""]
    return "\n".join(parts)


def checkout(start: Path | None = None) -> Path:
    """The source checkout whose `bench/` the benchmarks run from.

    The current directory or the nearest parent with a `bench/` (a plain `pip install .`
    puts the package in site-packages, away from the checkout it is run from), else the
    package's own folder (an editable install).
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "bench" / BENCHES[0].script).is_file():
            return folder
    return ROOT


def unavailable(start: Path | None = None) -> str | None:
    """Why the benchmarks cannot run here (no checkout with a bench/ around), or None."""
    bench = checkout(start) / "bench"
    missing = [b.script for b in BENCHES if not (bench / b.script).is_file()]
    if missing:
        return f"the benchmarks are in a source checkout's bench/ ({', '.join(missing)} not here)"
    return None


def write_performance(out: Path, benches: tuple[Bench, ...] = BENCHES) -> int:
    """Run the benchmarks and write `out/performance.md`; 1 (said on stderr, the file left
    as it was) when a benchmark fails."""
    lines: dict[str, list[str]] = {}
    for bench in benches:
        sys.stderr.write(f"results: running {bench.command}\n")
        try:
            lines[bench.key] = run_bench(bench)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            sys.stderr.write(f"results: {e}; performance.md is left as it was\n")
            return ExitCode.STEP_FAILED
    temporal = temporal_from(out / "e2e_offline.md")
    text = render(lines, temporal, (out / "stores.md").is_file(), benches)
    write_output(out / "performance.md", text)
    return ExitCode.OK
