"""End to end with the Temporal engine: a real dev server, real worker processes, real SIGKILL.

One module fixture runs `interlock-demo e2e-report` once, with its own INTERLOCK_HOME and
short timings (claim 14 s, Stripe timeout 1 s, so the refund activity's start-to-close
is 20 s and its heartbeat timeout 3 s). The report runs every row of the truth table on
both engines at once, each as `interlock-demo --headless --json --offline --checked
--engine ...` in its own subprocess (its own emulator, and for Temporal its own dev
server), and keeps each run's JSON: the Temporal tests read those, the report test reads
the file. The expectations are written out from docs/design.md §3 by hand, not read from
`scenarios.TRUTH`, and shared with the standalone engine's tests
(`tests/helpers/headless.py`). Tests that need the `temporal` extra are skipped, saying
so, where it is not installed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.text import Text

from interlock_demo.engine.temporal.probe import (
    INSTALL_HINT,
    refund_timeouts,
    temporal_unavailable,
)
from interlock_demo.engine.temporal.runtime import TemporalRuntime
from interlock_demo.settings.config import resolve
from interlock_demo.settings.paths import Paths
from interlock_demo.views.tui.app import make_app
from interlock_demo.views.tui.widgets import ColumnPane, MessageLine, RunHeader
from tests.helpers.headless import (
    CLI,
    ROOT,
    TABLE,
    Lines,
    check_interlock_receipt,
    check_no_lookup_refusal,
    check_run,
    cli_env,
    reap,
    run,
)

MISSING = temporal_unavailable()
needs_temporal = pytest.mark.skipif(
    MISSING is not None, reason=f"the temporal extra is not installed: {MISSING}"
)
pytestmark = pytest.mark.e2e

REPORT_DEADLINE_S = 240.0
# A retry waits for the dead attempt's `sending` claim (the renewal plus the grace after
# commit 2) from the moment its new worker runs the activity: the heartbeat timeout after
# the kill, Temporal's retry, and the new worker's start, which is slow on a loaded runner.
# With the tests' usual 6 s claim (renewal 9 s) that wait was 2.9 s against a 3 s heartbeat
# timeout in CI, which would not show the retry living through a wait longer than its
# heartbeat timeout; a 14 s claim (renewal 14 s) keeps it near 8 s.
REPORT_CLAIM_TTL_S = 14
LINE_DEADLINE_S = 60.0
GONE_DEADLINE_S = 10.0
TITLES = {
    "standard": "Temporal alone",
    "interlock": "Temporal + Interlock",
    "checked": "Temporal + hand-written check",
}


@dataclass
class Report:
    """The e2e-report command's run: exit code, stderr, the file, and every run's JSON."""

    code: int
    stderr: str
    text: str
    home: Path
    runs: dict[tuple[str, str], dict[str, Any]]

    def stderr_of(self, engine: str, case: str) -> str:
        """The headless run's own stderr (its progress lines)."""
        return (self.home / "demo" / "e2e-report" / f"{engine}-{case}" / "stderr.log").read_text()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """`interlock-demo e2e-report` once: every case on both engines, all at once."""
    if MISSING is not None:
        pytest.skip(f"the temporal extra is not installed: {MISSING}")
    base = tmp_path_factory.mktemp("temporal-e2e")
    home = base / "home"
    out = base / "e2e_offline.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "interlock_demo.cli",
            "e2e-report",
            "--out",
            str(out),
            "--parallel",
            "10",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(home, INTERLOCK_CLAIM_TTL=str(REPORT_CLAIM_TTL_S)),
        timeout=REPORT_DEADLINE_S,
        check=False,
    )
    runs = {}
    for folder in sorted((home / "demo" / "e2e-report").iterdir()):
        engine, _, case = folder.name.partition("-")
        runs[(engine, case)] = json.loads((folder / "stdout.json").read_text())
    return Report(proc.returncode, proc.stderr, out.read_text(), home, runs)


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
@pytest.mark.parametrize("case", list(TABLE))
def test_temporal_run_ends_as_the_truth_table_says(report: Report, case: str) -> None:
    """On Temporal, each scenario ends in Stripe and in every column's report as the truth table
    (docs/design.md §3) says."""
    doc = report.runs[("temporal", case)]
    check_run(doc, case, "temporal")
    for col in doc["columns"]:
        assert col["title"] == TITLES[col["name"]], f"{case}/{col['name']}"


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
@pytest.mark.parametrize("case", list(TABLE))
def test_temporal_events_are_read_from_temporal(report: Report, case: str) -> None:
    """Each column shows the decision from the history, each retry from describe(), the close."""
    doc = report.runs[("temporal", case)]
    for col in doc["columns"]:
        where = f"{case}/{col['name']}"
        events = col["events"]
        kinds = [e["kind"] for e in events]

        def first(kind: str, events: list[dict[str, Any]] = events) -> dict[str, Any]:
            return next(e for e in events if e["kind"] == kind)

        dead = col["workers"][0]
        assert "temporal-started" in kinds, where
        decision = first("temporal-decision")
        assert "ask_model's result: issue_refund($20.00)" in decision["text"], where
        retry = first("temporal-retry")
        assert "refund attempt 2" in retry["text"], where
        assert f"worker {dead['pid']}@" in retry["text"], where
        assert "Heartbeat timeout" in retry["text"], where
        assert retry["t"] >= dead["ended_at"], where
        activity = [e for e in events if e["kind"] == "temporal-activity"]
        if col["name"] == "interlock" and col["outcome"]["status"] == "refused":
            # interlock.temporal ends the activity with a non-retryable error on a refusal.
            failed = "activity task failed (InterlockRefused, not retried): refused: "
            assert any(failed in e["text"] for e in activity), where
        else:
            assert any("refund completed on attempt 2" in e["text"] for e in activity), where
        closed = first("temporal-closed")
        assert closed["text"].startswith(
            f"Temporal history: workflow completed: {col['outcome']['status']}"
        ), where
        crash = first("crash")
        assert crash["pid"] == dead["pid"], where
        assert kinds.index("crash") < kinds.index("temporal-retry") < kinds.index("temporal-closed")
        second = [e for e in events if e["pid"] == col["workers"][1]["pid"]]
        assert any("attempt 2 (Temporal's retry)" in e["text"] for e in second), where


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
@pytest.mark.parametrize(
    "case", ["hand-refund", "revoked", "after-answer", "after-answer+emulate-24h"]
)
def test_temporal_interlock_receipt_and_verify(report: Report, case: str) -> None:
    """On Temporal, interlock's receipt matches its outcome and `verify()` finds nothing wrong."""
    col = report.runs[("temporal", case)]["columns"][1]
    check_interlock_receipt(col)
    assert col["receipt"]["owner"]["pid"] == col["workers"][1]["pid"]


# Whether interlock's retry must wait for the dead attempt's claim: before-send left it
# `sending` with nothing at Stripe; after-answer's refund is found and adopted at once,
# unless the lookup is switched off.
CLAIM_WAIT = {
    "hand-refund": True,
    "revoked": True,
    "after-answer": False,
    "after-answer+emulate-24h": False,
    "after-answer+no-lookup": True,
}


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
@pytest.mark.parametrize("case", list(TABLE))
def test_temporal_interlock_runs_on_the_library_helper(report: Report, case: str) -> None:
    """The Temporal + Interlock column is `interlock.temporal`: its action is named by the
    workflow and the refund activity (the workflow's second), the same in both attempts;
    a retry that waits for the dead attempt's claim longer than the heartbeat timeout
    lives through the wait on its heartbeats and ends on attempt 2."""
    doc = report.runs[("temporal", case)]
    col = doc["columns"][1]
    where = f"{case}/{col['name']}"
    action = f"temporal:default:refund-case-{doc['run_id']}-interlock:2"
    assert col["outcome"]["action_id"] == action, where
    assert col["receipt"]["action_id"] == action, where
    for refund in col["stripe"]["refunds"]:
        if refund["by"] == "agent":
            assert refund["metadata"]["interlock_action"] == action, where
    heartbeat_s = doc["settings"]["temporal"]["heartbeat_timeout_s"]
    waits = [e for e in col["events"] if e["kind"] == "gate-claim-wait"]
    texts = [e["text"] for e in col["events"]]
    if CLAIM_WAIT[case]:
        [wait] = waits
        assert wait["pid"] == col["workers"][1]["pid"], where
        taken = next(e for e in col["events"] if e["kind"] == "gate-claim")
        assert taken["t"] - wait["t"] > heartbeat_s, where
    else:
        assert waits == [], where
    assert not any("refund attempt 3" in text for text in texts), where


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
def test_temporal_no_lookup_verify_reports_the_unrecorded_refund(report: Report) -> None:
    """On Temporal with no lookup, interlock refuses and `verify()` names the refund it lacks."""
    check_no_lookup_refusal(report.runs[("temporal", "after-answer+no-lookup")]["columns"][1])


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
@pytest.mark.parametrize("engine", ["standalone", "temporal"])
def test_offline_runs_say_the_money_was_read_at_the_emulator(report: Report, engine: str) -> None:
    """Offline, both engines say where interlock found its refund as the screen does: "at the
    emulator" in the run JSON's outcome and in the events (the worker's and, on Temporal, the
    history's, which quote the workflow's result), never "at Stripe"; so does the report."""
    adopted = report.runs[(engine, "after-answer")]["columns"][1]
    assert adopted["outcome"]["reason"] == "found its own refund at the emulator"
    for (of, case), doc in report.runs.items():
        if of != engine:
            continue
        for col in doc["columns"]:
            where = f"{engine} {case}/{col['name']}"
            assert "at Stripe" not in (col["outcome"]["reason"] or ""), where
            for e in col["events"]:
                if "its own refund" in e["text"]:
                    assert "at Stripe" not in e["text"], f"{where}: {e['text']}"
    assert "What the emulator holds for each column's payment" in report.text
    assert "refunds at Stripe" not in report.text


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
def test_dev_server_on_loopback_with_its_files_under_home(report: Report) -> None:
    """Each Temporal run's dev server listened on 127.0.0.1 and kept its files in its home."""
    for (engine, case), doc in report.runs.items():
        if engine != "temporal":
            assert "temporal" not in doc["settings"]
            continue
        t = doc["settings"]["temporal"]
        assert t["address"].startswith("127.0.0.1:"), case
        assert t["ui"].startswith("http://127.0.0.1:"), case
        # 14 s and 1 s: renewal max(14, 1 + 5 + 2 + 1) = 14; 14 + 2 + 1 + 1 + 2 = 20; 1 + 2 = 3.
        assert (t["refund_start_to_close_s"], t["heartbeat_timeout_s"]) == (20, 3), case
        folder = report.home / "demo" / "e2e-report" / f"temporal-{case}" / "home" / "demo"
        assert (folder / "temporal" / "dev-server.sqlite3").stat().st_size > 0, case
        assert "Temporal Server:" in (folder / "temporal" / "server.log").read_text(), case
        assert "Temporal describe: refund attempt 2" in report.stderr_of("temporal", case)


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
def test_no_process_outlives_the_runs(report: Report) -> None:
    """When the report has finished, no dev server or Temporal worker of its runs is left."""
    home = str(report.home)
    queues = {
        f"interlock-demo-{doc['run_id']}" for (e, _), doc in report.runs.items() if e == "temporal"
    }
    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if (home in cmd and "start-dev" in cmd) or any(q in cmd for q in queues):
            left.append(cmd)
    assert left == []


@pytest.mark.timeout(REPORT_DEADLINE_S + 60)
def test_report_compares_both_engines_from_the_runs(report: Report) -> None:
    """The report says how it was made, has every run side by side, and explains the check."""
    text = report.text
    assert report.code == 0, report.stderr
    assert "Generated by `interlock-demo e2e-report` on " in text
    assert "in **offline** mode" in text
    assert "Regenerate with `interlock-demo e2e-report`" in text
    for case in TABLE:
        for column in ("standard", "interlock", "checked"):
            row = next(
                line for line in text.splitlines() if line.startswith(f"| {case} | {column} |")
            )
            # Each engine's cell ends as predicted: right, or wrong as the truth table says.
            assert row.count("; right") + row.count("; wrong (as predicted)") == 2, row
            assert "not as predicted" not in row, row
    for (_, _), doc in report.runs.items():
        assert doc["run_id"] in text
    false_alarm = report.runs[("temporal", "after-answer")]["columns"][2]
    (own,) = false_alarm["stripe"]["refunds"]
    assert f"holds its own refund {own['id']}" in text
    assert "a false alarm" in text
    assert "### The receipt and verify()" in text
    assert "a send the receipts do not show" in text
    assert "Not demonstrated by these runs" in text and "docs/design.md §4" in text
    assert "same refunds and the same reported outcome on both engines" in text


# -- usage errors ------------------------------------------------------------------------


def test_engine_temporal_without_the_extra_exits_2(tmp_path: Path) -> None:
    """Without temporalio, `--engine temporal` exits 2 and says what to install."""
    blocked = (
        "import sys; sys.modules['temporalio'] = None; "
        "from interlock_demo.cli import main; "
        "sys.exit(main(['--headless', '--json', '--offline', '--engine', 'temporal', "
        "'--scenario', 'hand-refund']))"
    )
    proc = run([sys.executable, "-c", blocked], cli_env(tmp_path / "home"))
    assert proc.returncode == 2, proc.stderr
    assert INSTALL_HINT in proc.stderr
    assert proc.stdout == ""


def test_mock_with_engine_temporal_exits_2(tmp_path: Path) -> None:
    """`--mock --engine temporal` is a usage error: mock runs have no Temporal."""
    proc = run(
        [*CLI[:5], "--mock", "--engine", "temporal", "--scenario", "hand-refund"],
        cli_env(tmp_path / "home"),
    )
    assert proc.returncode == 2, proc.stderr
    assert "without Temporal" in proc.stderr
    assert proc.stdout == ""


@needs_temporal
def test_activity_timeout_too_short_for_the_claim_wait_exits_2(tmp_path: Path) -> None:
    """A start-to-close timeout that cannot hold the retry's claim wait is refused up front."""
    proc = run(
        [*CLI, "--engine", "temporal", "--scenario", "hand-refund"],
        cli_env(tmp_path / "home", INTERLOCK_ACTIVITY_TIMEOUT="2"),
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot hold a retry's wait for the claim" in proc.stderr
    assert proc.stdout == ""


@needs_temporal
@pytest.mark.parametrize(
    ("env", "want"),
    [
        # The demo's 15 s claim and 10 s Stripe timeout: a retry may wait out a renewal
        # (10 + 5 + 2 slack + 1 = 18 s) and the 2 s grace, then read and send (10 s each),
        # plus 2 s of local steps: 42 s; a heartbeat covers one request and 2 s: 12 s.
        ({}, (42.0, 12.0)),
        # 6 s and 1 s: renewal max(6, 1 + 5 + 2 + 1) = 9; 9 + 2 + 1 + 1 + 2 = 15; 1 + 2 = 3.
        ({"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}, (15.0, 3.0)),
        ({"INTERLOCK_ACTIVITY_TIMEOUT": "60"}, (60.0, 12.0)),
    ],
)
def test_refund_timeouts_follow_the_claim(env: dict[str, str], want: tuple[float, float]) -> None:
    """The refund activity's timeouts follow interlock.temporal's rule, unless raised."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": "unused", **env})
    timeouts = refund_timeouts(config, env)
    assert (timeouts.start_to_close_s, timeouts.heartbeat_s) == want


@needs_temporal
@pytest.mark.timeout(60)
def test_two_dev_servers_in_one_home_take_separate_databases(tmp_path: Path) -> None:
    """A second demo on the same INTERLOCK_HOME starts its own server on its own database."""
    paths = Paths(tmp_path / "home")
    first = TemporalRuntime(paths).start()
    try:
        second = TemporalRuntime(paths).start()
        try:
            assert first.server is not None and second.server is not None
            assert first.server.db_path != second.server.db_path
            assert first.server.db_path.parent == paths.demo / "temporal"
            assert second.server.db_path.parent == paths.demo / "temporal"
            assert first.address != second.address
        finally:
            second.stop()
    finally:
        first.stop()
    again = TemporalRuntime(paths).start()
    try:
        assert again.server is not None and again.server.db_path == first.server.db_path
    finally:
        again.stop()


# -- a SIGKILLed supervisor -----------------------------------------------------------------


def _gone(pids: list[int], deadline_s: float) -> list[int]:
    """The pids still alive (not zombies) after waiting up to `deadline_s` for them."""
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.wait(max(0.0, deadline_s))
        except (psutil.NoSuchProcess, psutil.TimeoutExpired, psutil.ZombieProcess):
            pass
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


@needs_temporal
@pytest.mark.timeout(120)
def test_sigkilled_cli_leaves_no_worker_and_no_dev_server(tmp_path: Path) -> None:
    """When the CLI is SIGKILLed mid-run, its Temporal workers and its dev server die too."""
    home = tmp_path / "orphaned"
    # A long claim keeps the run going well past the kill.
    proc = subprocess.Popen(
        [*CLI, "--engine", "temporal", "--scenario", "hand-refund"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=cli_env(home, INTERLOCK_CLAIM_TTL="30", INTERLOCK_STRIPE_TIMEOUT="10"),
    )
    try:
        assert proc.stderr is not None
        lines = Lines(proc.stderr, LINE_DEADLINE_S)
        started = lines.until("Temporal worker started", count=2)
        workers = [int(line.split(" pid ")[1].split(":")[0]) for line in started]
        servers = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if "start-dev" in " ".join(p.info["cmdline"] or [])
            and str(home) in " ".join(p.info["cmdline"] or [])
        ]
        assert len(servers) == 1
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(LINE_DEADLINE_S) == -signal.SIGKILL
        assert _gone([*workers, *servers], GONE_DEADLINE_S) == []
    finally:
        reap(proc)


# -- the app's t key ---------------------------------------------------------------------


def _plain(widget: Any) -> str:
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


@needs_temporal
@pytest.mark.timeout(60)
async def test_t_switches_to_temporal_and_back(tmp_path: Path) -> None:
    """t starts Temporal's dev server, shows its web UI and the Temporal titles; t again leaves."""
    app = make_app(resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path / "home")}))
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            assert app.check_action("switch_engine", ()) is True
            await pilot.press("t")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.config.engine == "temporal"
            runtime = app.engine.temporal()
            assert runtime.server is not None and runtime.server.exit_code() is None
            header = _plain(app.query_one(RunHeader))
            assert f"· temporal (web UI {runtime.ui_url})" in header
            assert runtime.ui_url is not None and runtime.ui_url.startswith("http://127.0.0.1:")
            titles = {p.column_name: p.column_title for p in app.query(ColumnPane)}
            assert titles == TITLES

            await pilot.press("t")
            await pilot.pause()
            assert app.config.engine == "standalone"
            assert "temporal" not in _plain(app.query_one(RunHeader))
            server_pid = runtime.server.pid
    finally:
        app.engine.close()
    assert server_pid is not None and _gone([server_pid], GONE_DEADLINE_S) == []


async def test_t_is_off_with_a_reason_without_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the extra, t changes nothing and says in one line what to install."""
    reason = f"the Temporal engine needs temporalio: {INSTALL_HINT}"
    monkeypatch.setattr("interlock_demo.views.tui.app.temporal_unavailable", lambda: reason)
    app = make_app(resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path / "home")}))
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()
            await pilot.press("t")
            await pilot.pause()
            assert app.config.engine == "standalone"
            assert _plain(app.query_one(MessageLine)) == f"Temporal is off: {reason}."
            assert "temporal" not in _plain(app.query_one(RunHeader))
    finally:
        app.engine.close()


@pytest.fixture(autouse=True)
def _no_activity_timeout_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """No activity timeout from outside changes what these tests expect."""
    monkeypatch.delenv("INTERLOCK_ACTIVITY_TIMEOUT", raising=False)
