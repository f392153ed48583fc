"""How fast a SIGKILLed worker's case recovers, in offline runs (docs/design.md §7).

    python bench/recovery.py [--runs N] [--cold-runs N] [--scenario ID|all]

Runs the demo engine in this process against a loopback Stripe emulator whose payments
model timestamps every request (with the monotonic clock the run's times are on), with
real worker processes, real SIGKILL and the checked column: in every run the three
columns die at the same crash point and their workers restart at once on this machine's
CPUs, each forked from its column's fork server (docs/design.md §7). Scenarios are
interleaved (a round runs each once). Then `--cold-runs` rounds of the baseline: every
worker started cold (`python -m workers.standalone`, no fork server) and one column's
restart at a time. One figure a line, each the median over all columns of all runs, with
its range and the mean 1-minute load average over the runs it comes from:

- `restart to first Stripe call (three at once)`: from a restarted worker's spawn to the
  first request naming its payment, less any claim wait in between (target under 0.1 s);
- `restart to first Stripe call (alone, cold)`: the same, in the baseline rounds;
- `kill to outcome less claim wait`: from the SIGKILL at the crash point to the restarted
  worker's outcome, less the time it waited for the dead worker's claim (target under
  0.5 s; this includes the outage action and the restart);
- `after-answer kill to adopted`: in `after-answer`, from the SIGKILL of interlock's worker
  to its `adopted` outcome, nothing subtracted (target under 1 s: the lookup finds the dead
  owner's refund, so there is nothing in flight to wait for);
- `restarts apart`: how far apart one run's three restarts were (how "at once" they were);
- `claim wait`: the waits subtracted above.

Timings are reported, never judged; it exits 1 when a run did not end as the truth table
says (its figures would mean nothing), 2 on bad usage. Unless set in the environment, the
timings are the short ones the tests use (claim 6 s, Stripe timeout 1 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere in a checkout
    sys.path.insert(0, str(ROOT))

from interlock.testing import (  # noqa: E402
    PaymentsModel,
    Reply,
    StripeEmulator,
)
from interlock_demo.core.columns import OPTIONAL  # noqa: E402
from interlock_demo.core.run import Column, Pacer, Run  # noqa: E402
from interlock_demo.engine import Engine, RunChoice  # noqa: E402
from interlock_demo.errors import UsageError  # noqa: E402
from interlock_demo.settings.config import resolve  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402

RESTART_TARGET_S = 0.1
RECOVERY_TARGET_S = 0.5
ADOPT_TARGET_S = 1.0
RUN_DEADLINE_S = 180.0
SHORT_TIMINGS = {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}


class TimedModel(PaymentsModel):
    """The payments model, noting when each request about a payment arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[float, str]] = []
        self._arrivals_lock = threading.Lock()

    def _note(self, payment_intent: object) -> None:
        if isinstance(payment_intent, str) and payment_intent:
            with self._arrivals_lock:
                self.arrivals.append((time.monotonic(), payment_intent))

    def serve(
        self,
        route: Any,
        ident: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> Reply:
        """Note the payment a request is about (a refund's, a payment read, a list of its
        refunds), then answer as the model does."""
        self._note(ident or params.get("payment_intent"))
        return super().serve(route, ident, params, idempotency_key)

    def first_after(self, payment_intent: str, t: float) -> float | None:
        """When the first request about this payment at or after `t` arrived."""
        with self._arrivals_lock:
            times = [a for a, pi in self.arrivals if pi == payment_intent and a >= t]
        return min(times) if times else None


class OneAtATime(Pacer):
    """A pacer (every phase open) that lets one column at a time from its restart to its
    result: each restart of the baseline has the machine to itself."""

    def __init__(self) -> None:
        super().__init__()
        self.release()
        self._turn = threading.Lock()
        self._holder: int | None = None

    def wait(self, phase: str) -> None:
        """Take the turn at `restart`, give it back at `result`; pass every other phase."""
        if phase == "restart":
            self._turn.acquire()
            self._holder = threading.get_ident()
        elif phase == "result" and self._holder == threading.get_ident():
            self._holder = None
            self._turn.release()


@dataclass(frozen=True)
class Sample:
    """One column's figures, in seconds on the run's clock."""

    scenario: str
    run: int
    column: str
    status: str
    restarted_at: float
    restart_to_call: float
    kill_to_outcome: float
    kill_to_outcome_all: float
    claim_wait: float
    # Whether the restarted worker started cold when a fork server should have forked it.
    fell_back: bool


def _event_time(col: Column, kind: str, after: float) -> float | None:
    return next((e.t for e in col.events if e.kind == kind and e.t >= after), None)


def measure(run: Run, model: TimedModel, scenario: str, index: int) -> list[Sample]:
    """The figures of every column of a finished run."""
    t0 = time.monotonic() - run.now()  # the run's time zero on the monotonic clock
    samples = []
    for col in run.columns:
        if len(col.workers) != 2 or col.payment_intent is None:
            raise RuntimeError(f"{col.name}: expected a killed and a restarted worker")
        killed, restarted = col.workers
        spawn = restarted.started_at
        kill = _event_time(col, "crash", killed.started_at)
        outcome = _event_time(col, "outcome", spawn)
        first_call = model.first_after(col.payment_intent, t0 + spawn)
        if kill is None or outcome is None or first_call is None:
            raise RuntimeError(f"{col.name}: missing the kill, the outcome or a Stripe call")
        wait_from = _event_time(col, "gate-claim-wait", spawn)
        wait_to = _event_time(col, "gate-claim", spawn) if wait_from is not None else None
        wait = (wait_to - wait_from) if wait_from is not None and wait_to is not None else 0.0
        # A worker may look its action up before it waits (an early take): the wait counts
        # against its first call only when it came first.
        call_wait = wait if wait_from is not None and first_call - t0 > wait_from else 0.0
        samples.append(
            Sample(
                scenario=scenario,
                run=index,
                column=col.name,
                status=str(None if col.outcome is None else col.outcome.status),
                restarted_at=spawn,
                restart_to_call=(first_call - t0) - spawn - call_wait,
                kill_to_outcome=outcome - kill - wait,
                kill_to_outcome_all=outcome - kill,
                claim_wait=wait,
                fell_back=any(
                    e.kind == "cold-start" and e.data.get("worker_pid") == restarted.pid
                    for e in col.events
                ),
            )
        )
    return samples


def _figures(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} s "
        f"(range {min(values):.3f}-{max(values):.3f} s over {len(values)})"
    )


def _load(loads: list[float]) -> str:
    return f"load {statistics.fmean(loads):.2f}" if loads else "load unknown"


def report(
    samples: list[Sample],
    runs: int,
    scenarios: list[str],
    timing: str,
    *,
    cold: list[Sample] | None = None,
    loads: list[float] | None = None,
    cold_loads: list[float] | None = None,
) -> list[str]:
    """The report's lines, one figure each, each with the mean 1-minute load average of
    the runs it comes from (`loads`; `cold_loads` for the cold baseline's)."""
    load = _load(loads or [])
    fell_back = sum(s.fell_back for s in samples)
    # A figure of forked restarts must say when some of them were cold after all.
    fallback = f" ({fell_back} started cold: their fork server failed)" if fell_back else ""
    adopted = [
        s.kill_to_outcome_all
        for s in samples
        if s.scenario == "after-answer" and s.column == "interlock" and s.status == "adopted"
    ]
    together: dict[tuple[str, int], list[float]] = {}
    for s in samples:
        together.setdefault((s.scenario, s.run), []).append(s.restarted_at)
    apart = [max(t) - min(t) for t in together.values()]
    waits = [s.claim_wait for s in samples if s.claim_wait > 0]
    return [
        f"recovery over {runs} round(s) of {', '.join(scenarios)}, offline ({timing}; "
        f"{len(samples)} columns, real SIGKILL, {os.cpu_count()} CPUs)",
        "restart to first Stripe call (three at once): "
        f"{_figures([s.restart_to_call for s in samples])}{fallback}; "
        f"target < {RESTART_TARGET_S} s; {load}",
        "restart to first Stripe call (alone, cold): "
        + (
            f"{_figures([s.restart_to_call for s in cold])}; {_load(cold_loads or [])}"
            if cold
            else "not measured (--cold-runs 0)"
        ),
        "kill to outcome less claim wait: "
        f"{_figures([s.kill_to_outcome for s in samples])}; target < {RECOVERY_TARGET_S} s; "
        f"{load}",
        "after-answer kill to adopted: "
        + (
            f"{_figures(adopted)}; target < {ADOPT_TARGET_S} s; {load}"
            if adopted
            else "not measured (the after-answer scenario did not run)"
        ),
        f"restarts apart: {_figures(apart)}; {load}",
        "claim wait: " + (f"{_figures(waits)}; {load}" if waits else "none"),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the report; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", "-n", type=int, default=5, help="rounds (5)")
    parser.add_argument(
        "--cold-runs", type=int, default=1, help="rounds of the cold, one-at-a-time baseline (1)"
    )
    parser.add_argument("--scenario", default="all", help="a scenario id, or all (all)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        print("recovery: --runs must be at least 1", file=sys.stderr)
        return 2
    if args.cold_runs < 0:
        print("recovery: --cold-runs must be 0 or more", file=sys.stderr)
        return 2
    if args.scenario != "all" and args.scenario not in SCENARIOS:
        print(f"recovery: --scenario must be one of {', '.join(SCENARIOS)} or all", file=sys.stderr)
        return 2
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    model = TimedModel()
    with (
        tempfile.TemporaryDirectory(prefix="interlock-bench-") as home,
        StripeEmulator(model=model) as emulator,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
        env.update({k: os.environ.get(k, v) for k, v in SHORT_TIMINGS.items()})
        env["INTERLOCK_HOME"] = home
        env.pop("STRIPE_SECRET_KEY", None)
        try:
            config = resolve(mode="offline", stripe_base=emulator.url, env=env)
        except UsageError as e:
            print(f"recovery: {e}", file=sys.stderr)
            return 2
        timing = (
            f"claim TTL {config.timing.claim_ttl_s:g} s, "
            f"Stripe timeout {config.timing.stripe_timeout_s:g} s"
        )
        arms = [("", Engine(config), args.runs)]
        if args.cold_runs:
            cold_engine = Engine(config, fork_servers=False, hold=OneAtATime())
            arms.append((" cold", cold_engine, args.cold_runs))
        samples: dict[str, list[Sample]] = {name: [] for name, _, _ in arms}
        loads: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        try:
            for name, engine, rounds in arms:
                for i in range(rounds):
                    for sid in scenarios:
                        run = engine.run(
                            RunChoice(config, sid, optional=OPTIONAL), timeout=RUN_DEADLINE_S
                        )
                        loads[name].append(os.getloadavg()[0])
                        if not run.finished or run.error or not run.all_as_predicted:
                            why = run.error or "a column did not end as the truth table says"
                            print(f"recovery: run {i + 1} of {sid}: {why}", file=sys.stderr)
                            return 1
                        samples[name].extend(measure(run, model, sid, i))
                        print(
                            f"run {i + 1}/{rounds}{name} {sid}: {run.elapsed_s:.1f} s",
                            file=sys.stderr,
                        )
        finally:
            for _, engine, _ in arms:
                engine.close()
    lines = report(
        samples[""],
        args.runs,
        scenarios,
        timing,
        cold=samples.get(" cold"),
        loads=loads[""],
        cold_loads=loads.get(" cold"),
    )
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
