"""What every benchmark in bench/ shares to stay honest about the machine it ran on.

- `load_average()` and `with_load(line)`: the machine is shared (2 CPUs here, with other
  work), so every figure a benchmark prints carries the load average (1, 5 and 15 minutes)
  read when it was measured; a figure without it cannot be told from a quiet machine's.
- `run_interlock(workdir, argv)`: `python -m interlock ARGV` in a child process that reads
  its own CPU time, wall time and peak RSS before it exits. No `ru_maxrss` is the child's
  own: Linux carries the peak of the process it was forked from across exec, into
  `wait4`'s and `RUSAGE_CHILDREN`'s and into the child's own `getrusage(RUSAGE_SELF)` (a
  bench holding 300 MB saw verify of a 1k-action store "use" 310 MB; a bare interpreter
  started from it reads 311 MB of RUSAGE_SELF and 9 MB of VmHWM). VmHWM in
  /proc/self/status is the high-water mark of the memory the child has had since its
  exec: its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Keys a benchmark's child never needs: none of them reaches a measured command.
SECRETS = ("INTERLOCK_RECEIPT_KEY", "INTERLOCK_SIGNING_KEY", "INTERLOCK_VERIFY_KEYS")


def load_average() -> str:
    """`load average 1.23 0.98 0.80`: the machine's, over 1, 5 and 15 minutes, now."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def with_load(line: str, load: str | None = None) -> str:
    """`line` with the load average beside it (`load`, read when the figure was measured,
    or now): `LINE; load average 1.23 0.98 0.80`."""
    return f"{line}; {load if load is not None else load_average()}"


@dataclass(frozen=True)
class ChildFigures:
    """What a child measured of itself: the command's exit code, its CPU and wall seconds
    (the command alone, not the interpreter's start), and its own peak RSS in bytes."""

    code: int
    cpu_s: float
    wall_s: float
    peak_bytes: int
    stdout: str


# Runs in the child: times the command alone, then reads its own peak before it exits.
_CHILD = """
import json, sys, time
from interlock.__main__ import main

out_path, argv = sys.argv[1], sys.argv[2:]
cpu0, wall0 = time.process_time(), time.perf_counter()
code = main(argv)
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
with open("/proc/self/status") as status:
    kb = int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
with open(out_path, "w") as out:
    json.dump({"code": code, "cpu_s": cpu, "wall_s": wall, "peak_kb": kb}, out)
sys.exit(code)
"""


def run_interlock(workdir: Path, *argv: str) -> ChildFigures:
    """`python -m interlock ARGV` in a child, from the checkout, without the receipt keys in
    its environment; what it measured of itself. A non-zero exit raises `RuntimeError`
    with the command and the end of its output."""
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    figures = workdir / f"child-{os.getpid()}.json"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(figures), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`python -m interlock {' '.join(argv[:1])}` exited {done.returncode}: "
            f"{(done.stdout + done.stderr)[-800:]}"
        )
    measured = json.loads(figures.read_text())
    figures.unlink()
    return ChildFigures(
        code=int(measured["code"]),
        cpu_s=float(measured["cpu_s"]),
        wall_s=float(measured["wall_s"]),
        peak_bytes=int(measured["peak_kb"]) * 1024,
        stdout=done.stdout,
    )


class LogCommits:
    """The commits `store.integrate` makes from now on, counted apart from a gate's own.

    The gate's log keeper also integrates from its timer's thread, and the store's commit
    counter is shared by every thread: while an action is timed (`held()`) the timer's
    catch-up waits, so the action's commits are its own and the log's (a catch-up the
    action itself makes, every 100 settles) are counted apart. The timer's catch-ups run
    between the timed actions. Stays 0 on a library without the receipt log.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        # Re-entered by a catch-up the timed action makes itself.
        self.lock = threading.RLock()
        self.n = 0
        real = getattr(store, "integrate", None)
        if real is None:
            return

        def integrate(key: Any) -> Any:
            with self.lock:
                before = store.commits
                try:
                    return real(key)
                finally:
                    self.n += store.commits - before

        store.integrate = integrate

    def read(self) -> tuple[int, int]:
        """The store's commits and the receipt log's among them, read together."""
        with self.lock:
            return self.store.commits, self.n

    def held(self) -> threading.RLock:
        """Held around a timed action: no other thread's catch-up commits meanwhile."""
        return self.lock
