"""`bench/recovery.py` runs real offline recoveries and prints one figure a line (shapes
only: timings are reported by the benchmark, never judged by a test)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.helpers.headless import ROOT, SCRUBBED, run

pytestmark = pytest.mark.e2e

BENCH = ROOT / "bench" / "recovery.py"
RUN_DEADLINE_S = 120.0
N = r"\d+\.\d{3}"


def _figures(n: int) -> str:
    return rf"median {N} s \(range {N}-{N} s over {n}\)"


def _bench(*args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    done = run([sys.executable, str(BENCH), *args], env, timeout=RUN_DEADLINE_S)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.timeout(150)
def test_recovery_bench_prints_one_figure_a_line() -> None:
    """One round of after-answer prints the restart (forked, three at once; and the cold
    baseline, one at a time), recovery and adoption figures, each a median with its range
    and the load average, and how far apart the three restarts were; every forked restart
    was forked (a fallback would be named on its line)."""
    code, out, err = _bench("--runs", "1", "--scenario", "after-answer")

    assert code == 0, err[-3000:]
    lines = out.splitlines()
    assert re.fullmatch(
        r"recovery over 1 round\(s\) of after-answer, offline \(claim TTL 6 s, Stripe timeout "
        r"1 s; 3 columns, real SIGKILL, \d+ CPUs\)",
        lines[0],
    ), lines[0]
    load = r"load \d+\.\d\d"
    assert re.fullmatch(
        rf"restart to first Stripe call \(three at once\): {_figures(3)}; target < 0\.1 s; "
        rf"{load}",
        lines[1],
    ), lines[1]
    assert re.fullmatch(
        rf"restart to first Stripe call \(alone, cold\): {_figures(3)}; {load}", lines[2]
    ), lines[2]
    assert re.fullmatch(
        rf"kill to outcome less claim wait: {_figures(3)}; target < 0\.5 s; {load}", lines[3]
    ), lines[3]
    assert re.fullmatch(
        rf"after-answer kill to adopted: {_figures(1)}; target < 1\.0 s; {load}", lines[4]
    ), lines[4]
    assert re.fullmatch(rf"restarts apart: {_figures(1)}; {load}", lines[5]), lines[5]
    assert lines[6].startswith("claim wait: "), lines[6]
    assert len(lines) == 7


def test_recovery_bench_refuses_bad_usage() -> None:
    """`--runs 0` or an unknown scenario exits 2 with a message and no report."""
    for args in (["--runs", "0"], ["--cold-runs", "-1"], ["--scenario", "nope"]):
        code, out, err = _bench(*args)
        assert code == 2
        assert out == ""
        assert "recovery: --" in err
