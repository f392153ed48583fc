"""`bench/receipts.py` runs as its own process and prints one figure a line (shapes only:
timings are reported by the benchmark, never judged by a test)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.helpers.headless import ROOT, SCRUBBED, run

pytestmark = pytest.mark.e2e

BENCH = ROOT / "bench" / "receipts.py"
N = r"\d+(\.\d+)?"
LOAD = rf"load average {N} {N} {N}"


def _bench(*args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    done = run([sys.executable, str(BENCH), *args], env, timeout=240)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.timeout(300)
def test_receipts_bench_prints_every_figure_in_its_format() -> None:
    """A small log (120 actions: two integrates) gives every line, each with its load
    average where it is a timing, and the proof at 120 leaves has the computed length."""
    code, out, err = _bench("--signs", "20", "--actions", "120")

    assert code == 0, err[-3000:]
    patterns = [
        rf"receipts: a real gate's receipt, \d+ bytes of body, Ed25519 \(cryptography\), \d+ "
        rf"CPUs; {LOAD}",
        rf"receipt sign: {N} us CPU per receipt \({N} us wall, over 20\); {LOAD}",
        rf"receipt verify: {N} us CPU per receipt \({N} us wall, over 20\); {LOAD}",
        rf"receipts signed per second on one core: \d+ \(target at least 5000; {LOAD}\)",
        rf"head signing per integrate: {N} us CPU \({N} us wall; one head per integrate, "
        rf"whatever its batch\); {LOAD}",
        rf"integrate of 100 receipts: median {N} ms \(SQLite, synchronous=OFF, over 2\); {LOAD}",
        rf"verify of 120 actions with the public key list: {N} s wall, {N} s CPU, peak RSS "
        rf"\d+ MB \(the child's own\); {LOAD}",
        r"inclusion proof at 1k leaves: at most 10 hashes, 320 bytes \(640 as hex\)",
        r"inclusion proof at 100k leaves: at most 17 hashes, 544 bytes \(1088 as hex\)",
        r"inclusion proof at 1M leaves: at most 20 hashes, 640 bytes \(1280 as hex\)",
        # Leaf 60 of 120 sits at depth 7 of its tree: one hash a level (RFC 9162 2.1.3).
        rf"inclusion proof generation at 120 leaves: {N} ms wall, {N} ms CPU "
        rf"\(`python -m interlock proof`, 7 hashes, 224 bytes\); {LOAD}",
    ]
    lines = out.splitlines()
    assert len(lines) == len(patterns), out
    for pattern, line in zip(patterns, lines, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)


def test_receipts_bench_refuses_bad_usage() -> None:
    """A count below 1 exits 2 with a message and no report."""
    for flag in ("--signs", "--actions"):
        code, out, err = _bench(flag, "0")
        assert code == 2, (flag, out, err)
        assert "must be at least 1" in err and out == ""
