"""End to end: the headless CLI in offline mode, real worker processes, real SIGKILL.

Every case runs `python -m interlock_demo.cli --headless --json --offline ...` in its own
subprocess with its own INTERLOCK_HOME and short timings (claim 10 s, Stripe timeout 5 s).
The scenario runs start together in one module fixture, so the file's wall time is
about one run's. The expectations below are written out from docs/design.md §3 by hand rather than
read from `scenarios.TRUTH`, so a wrong truth table fails here too; the table and the
checks of a run's JSON are shared with the Temporal engine's tests (`tests/helpers/headless.py`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import stripe

from interlock.testing import StripeEmulator
from interlock_demo.core.run import Column
from interlock_demo.core.verdict import replay_note
from tests.conftest import TEST_KEY
from tests.helpers.headless import (
    CLI,
    ROOT,
    Lines,
    check_interlock_receipt,
    check_no_lookup_refusal,
    check_run,
    cli_env,
    reap,
)

pytestmark = pytest.mark.e2e

RUN_DEADLINE_S = 100.0
LINE_DEADLINE_S = 30.0
ORPHAN_DEADLINE_S = 5.0
# Six runs start at once, eighteen workers on the machine: with the shortest timings the
# gate takes (6 s, 1 s), a worker's read of its payment from its run's loopback emulator
# outlasted 1 s beside two CPU burners, and the worker exited 1 where it was to be SIGKILLed.
TIMINGS = {"INTERLOCK_CLAIM_TTL": "10", "INTERLOCK_STRIPE_TIMEOUT": "5"}
CASES: dict[str, list[str]] = {
    "hand-refund": ["--scenario", "hand-refund"],
    "revoked": ["--scenario", "revoked"],
    "after-answer": ["--scenario", "after-answer"],
    "after-answer+emulate-24h": ["--scenario", "after-answer", "--emulate-24h"],
    "after-answer+no-lookup": ["--scenario", "after-answer", "--no-lookup"],
}


@dataclass
class Finished:
    """A CLI run that ended: its exit code, its JSON document and its stderr."""

    code: int
    doc: Any
    stderr: str
    home: Path


class Started:
    """A CLI subprocess writing stdout and stderr to files."""

    def __init__(self, args: list[str], home: Path, env: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.out_path = home.parent / f"{home.name}.stdout"
        self.err_path = home.parent / f"{home.name}.stderr"
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*CLI, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=ROOT, env=env
            )

    def finish(self) -> Finished:
        """Wait for the exit and parse stdout as exactly one JSON document."""
        try:
            code = self.proc.wait(RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        stderr = self.err_path.read_text()
        stdout = self.out_path.read_text()
        try:
            doc = json.loads(stdout)
        except ValueError as e:
            raise AssertionError(f"stdout is not one JSON document ({e}); stderr:\n{stderr}") from e
        return Finished(code, doc, stderr, self.home)


@pytest.fixture(scope="module")
def own_emulator() -> Iterator[StripeEmulator]:
    """An emulator this test module started, for the `--stripe-base` run."""
    with StripeEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, own_emulator: StripeEmulator
) -> dict[str, Finished]:
    """Every scenario case, plus one run on our own emulator, started together."""
    base = tmp_path_factory.mktemp("e2e")
    started: dict[str, Started] = {}
    for name, args in CASES.items():
        home = base / name
        started[name] = Started([*args, "--checked"], home, cli_env(home, **TIMINGS))
    home = base / "stripe-base"
    started["stripe-base"] = Started(
        ["--scenario", "hand-refund", "--checked", "--stripe-base", own_emulator.url],
        home,
        cli_env(home, **TIMINGS),
    )
    try:
        return {name: s.finish() for name, s in started.items()}
    finally:
        for s in started.values():
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()


def _check_run(run: Finished, case: str) -> None:
    doc = run.doc
    assert run.code == 0, run.stderr[-3000:]
    assert isinstance(doc, dict)
    check_run(doc, case, "standalone")
    assert doc["settings"]["stripe"] == "emulator"
    assert doc["settings"]["claim_ttl_s"] == 10
    assert doc["settings"]["stripe_timeout_s"] == 5


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", list(CASES))
def test_scenario_offline(runs: dict[str, Finished], case: str) -> None:
    """Each scenario ends in Stripe and in every column's report as the truth table says."""
    _check_run(runs[case], case)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "case", ["hand-refund", "revoked", "after-answer", "after-answer+emulate-24h"]
)
def test_interlock_receipts_verify(runs: dict[str, Finished], case: str) -> None:
    """Interlock's receipt matches its outcome and `verify()` finds nothing wrong."""
    check_interlock_receipt(runs[case].doc["columns"][1])


@pytest.mark.timeout(180)
def test_an_offline_receipt_says_its_lookup_read_the_emulator(runs: dict[str, Finished]) -> None:
    """Offline, the receipt's lookup check names the emulator it read, not Stripe."""
    receipt = runs["after-answer"].doc["columns"][1]["receipt"]
    (lookup,) = [c for c in receipt["checks"] if c["name"] == "lookup"]
    assert lookup["expected"] == (
        "a refund at the emulator naming this action and matching it, if one exists"
    )


@pytest.mark.timeout(180)
def test_the_emulators_replay_is_read_from_the_answers(runs: dict[str, Finished]) -> None:
    """Offline, the standard worker's resend in the control is answered by the emulator
    with its first refund (a replay, read from the answers' fields: no second refund);
    a day later (emulated) the key is gone and the resend's answer is a new refund."""
    replayed = {}
    for case in ("after-answer", "after-answer+emulate-24h"):
        standard = Column.from_json(runs[case].doc["columns"][0])
        replayed[case] = replay_note(standard, "the emulator")
    assert replayed == {
        "after-answer": (
            "sent twice: the emulator replayed its first answer under the same key, "
            "no second refund"
        ),
        "after-answer+emulate-24h": None,
    }


@pytest.mark.timeout(180)
def test_no_lookup_verify_reports_the_unrecorded_refund(runs: dict[str, Finished]) -> None:
    """With no lookup, interlock refuses and `verify()` names the refund its receipt lacks."""
    check_no_lookup_refusal(runs["after-answer+no-lookup"].doc["columns"][1])


@pytest.mark.timeout(180)
def test_stdout_is_only_json_and_progress_is_on_stderr(runs: dict[str, Finished]) -> None:
    """Headless stdout is one JSON document; the workers' progress lines went to stderr."""
    run = runs["hand-refund"]
    assert "SIGKILL at before-send" in run.stderr
    assert "worker started" in run.stderr
    assert "hand-refund (offline" in run.stderr


@pytest.mark.timeout(180)
def test_stripe_base_refunds_reread_with_own_client(
    runs: dict[str, Finished], own_emulator: StripeEmulator
) -> None:
    """A run on our own emulator leaves exactly the refunds its JSON reports, read with `stripe`."""
    run = runs["stripe-base"]
    _check_run(run, "hand-refund")
    assert run.doc["settings"]["stripe_base"] == own_emulator.url
    client = stripe.StripeClient(TEST_KEY, base_addresses={"api": own_emulator.url})
    for col in run.doc["columns"]:
        page = client.v1.refunds.list(params={"payment_intent": col["payment_intent"]})
        ours = sorted(
            (r.id, r.amount, r.to_dict()["metadata"] or {}) for r in page.auto_paging_iter()
        )
        reported = sorted((r["id"], r["amount"], r["metadata"]) for r in col["stripe"]["refunds"])
        assert ours == reported, col["name"]
        assert sum(amount for _, amount, _ in ours) == col["stripe"]["refunded_total"]


# -- interrupting a run ----------------------------------------------------------------


def _workers_of(home: Path) -> list[psutil.Process]:
    """Live worker processes whose command line names a case file under `home`."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "workers.standalone" in cmd and str(home) in cmd:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.NoSuchProcess:
                continue
    return found


def _spawn_cli(args: list[str], home: Path, **env: str) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [*CLI, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=cli_env(home, **env),
    )


@pytest.mark.timeout(120)
def test_sigint_stops_the_run_and_leaves_no_worker(tmp_path: Path) -> None:
    """Ctrl-C mid-run kills every worker, and the CLI exits 3 with the run's error in JSON."""
    home = tmp_path / "interrupted"
    # A long claim keeps the run going well past the interrupt.
    proc = _spawn_cli(
        ["--scenario", "hand-refund"],
        home,
        INTERLOCK_CLAIM_TTL="30",
        INTERLOCK_STRIPE_TIMEOUT="10",
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        lines = Lines(proc.stderr, LINE_DEADLINE_S)
        lines.until("worker started")
        proc.send_signal(signal.SIGINT)
        stdout = proc.stdout.read()
        code = proc.wait(LINE_DEADLINE_S)
        assert _workers_of(home) == []
        doc = json.loads(stdout)
        assert code == 3, lines.rest()
        assert doc["status"] == "failed" or doc["error"]
        assert doc["error"]
        assert all(c["as_predicted"] is not True for c in doc["columns"])
        assert any(w["pid"] for c in doc["columns"] for w in c["workers"])
    finally:
        reap(proc)


@pytest.mark.timeout(120)
def test_sigkilled_supervisor_leaves_no_worker_behind(tmp_path: Path) -> None:
    """When the CLI is SIGKILLed, its workers see stdin close and exit within seconds."""
    home = tmp_path / "orphaned"
    # A 30 s claim: the restarted interlock worker would wait that long if it did not notice.
    # (hand-refund: the dead worker died before its send, so nothing found ends the wait early.)
    proc = _spawn_cli(
        ["--scenario", "hand-refund"],
        home,
        INTERLOCK_CLAIM_TTL="30",
        INTERLOCK_STRIPE_TIMEOUT="10",
    )
    try:
        assert proc.stderr is not None
        lines = Lines(proc.stderr, LINE_DEADLINE_S)
        lines.until("waiting for the claim")
        workers = _workers_of(home)
        assert workers, "the waiting worker should be alive"
        proc.kill()
        proc.wait(LINE_DEADLINE_S)
        deadline = time.monotonic() + ORPHAN_DEADLINE_S
        while _workers_of(home) and time.monotonic() < deadline:
            psutil.wait_procs(_workers_of(home), timeout=0.1)
        assert _workers_of(home) == []
    finally:
        reap(proc)
