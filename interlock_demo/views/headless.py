"""`interlock-demo --headless`: run scenarios without a screen, for CI and rehearsals.

With `--json`, stdout carries exactly one JSON document (a run, or a list of runs for
`all`) and nothing else; without it, stdout carries a human summary: per run a line with
its verdict, then one line per column (verdict, money, reason), the verdicts in the words
of `Finding` ("right", "wrong (as predicted)", "not as predicted"), as the JSON's.
Progress always goes to stderr. Exit codes: 0 every column ended as the truth table says,
1 a deviation, 3 a run could not finish (its `error` says why). Usage errors (2) are
decided before anything runs, by the CLI. SIGHUP (the terminal closed), SIGTERM and SIGINT
stop the workers and end the same way: exit 3, and the JSON printed with each unfinished
run's `error` naming the signal.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from dataclasses import replace
from types import FrameType
from typing import Any, TextIO

from interlock import format_amount
from interlock_demo.core.columns import ColumnKind
from interlock_demo.core.run import Run
from interlock_demo.core.verdict import replay_note, untruth
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import line_mark, mode_named
from interlock_demo.stopping import STOP_SIGNALS
from scenarios import CURRENCY, SCENARIOS, SWITCHES

# An emulated switch as the run names it (its environment name), as the command line takes it.
_FLAG = {s.env: s.flag for s in SWITCHES}


class _Progress:
    """Prints each new event of a run to stderr as it happens."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, run: Run, column: str | None) -> None:
        if column is None:
            return
        col = run.column(column)
        with self.lock:
            start = self.seen.get(column, 0)
            new = col.events[start:]
            self.seen[column] = start + len(new)
            for e in new:
                pid = f" pid {e.pid}" if e.pid else ""
                mark = line_mark(mode_named(run.mode))
                self.out.write(f"{mark}[{e.t:6.2f}s] {column:<9}{pid}: {e.text}\n")
            self.out.flush()


def run_headless(
    config: DemoConfig,
    scenario_id: str,
    *,
    optional: frozenset[ColumnKind],
    as_json: bool,
    out: TextIO = sys.stdout,
) -> int:
    """Run one scenario or `all`; print the result; return the exit code."""
    ids = list(SCENARIOS) if scenario_id == "all" else [scenario_id]
    engine = Engine(config)
    runs: list[Run] = []
    interrupted = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        interrupted.set()
        engine.stop()

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        for sid in ids:
            if interrupted.is_set():
                break
            if config.run_mode.in_process:
                sys.stderr.write(
                    f"{line_mark(config.run_mode)}simulated run: in-memory payments, no processes\n"
                )
            run = engine.start(
                RunChoice(config, sid, optional=optional), listeners=(_Progress(sys.stderr),)
            )
            runs.append(run)
            # A mock run has no processes for stop() to kill: Ctrl-C must not wait for it.
            while not run.wait(0.2) and not interrupted.is_set():
                pass
            # With --json the summary must not mix into the document: stderr then.
            (sys.stderr if as_json else out).write(_summary(run))
            out.flush()
    finally:
        engine.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    snapshots = [r.snapshot() for r in runs]
    if interrupted.is_set():
        stopped = f"stopped by {received[0]} before the run finished; its workers were killed"
        snapshots = [
            replace(s, error=stopped + (f" ({s.error})" if s.error else ""))
            if s.status != "finished" or s.error
            else s
            for s in snapshots
        ]
    if as_json:
        docs: list[dict[str, Any]] = [s.to_json() for s in snapshots]
        out.write(json.dumps(docs if scenario_id == "all" else docs[0], indent=2) + "\n")
    out.flush()
    if interrupted.is_set() or any(s.error for s in snapshots):
        return ExitCode.UNFINISHED
    if not all(s.as_predicted for s in snapshots):
        return ExitCode.DEVIATION
    return ExitCode.OK


def _summary(run: Run) -> str:
    snapshot = run.snapshot()
    mock = line_mark(mode_named(snapshot.mode))
    # The emulated rows' predictions differ from the base row's: the line names the switch.
    switches = "".join(f" {_FLAG[e]}" for e in snapshot.emulated)
    verdict = "" if snapshot.verdict is None else f", {snapshot.verdict}"
    lines = [
        f"{mock}{snapshot.scenario}{switches} ({snapshot.mode}, {snapshot.elapsed_s:.1f} s): "
        f"{snapshot.status}{verdict}"
    ]
    if snapshot.error:
        lines.append(f"{mock}  error: {snapshot.error}")
    for c in snapshot.columns:
        total = None if c.stripe is None else c.stripe.refunded_total
        money = f"{format_amount(total, CURRENCY)} refunded" if total is not None else "no result"
        finding = c.finding or "not judged"
        reported = "nothing" if c.outcome is None else c.outcome.status
        if c.outcome is not None and c.outcome.reason:
            reported += f" ({c.outcome.reason})"
        # One line per column, an untrue report, a replayed resend and deviations included,
        # so that `grep standard` shows it all.
        untrue = untruth(c)
        if untrue is not None:
            reported += f": {untrue}"
        replayed = replay_note(c, mode_named(snapshot.mode).answerer)
        if replayed is not None:
            reported += f"; {replayed}"
        deviations = "".join(f"; {d}" for d in c.deviations)
        lines.append(f"{mock}  {c.name:<9} {finding}: {money}, reported {reported}{deviations}")
    return "\n".join(lines) + "\n"
