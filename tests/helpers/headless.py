"""Test helper: running the headless CLI in a subprocess and checking its JSON runs.

Shared by the end-to-end tests of both engines (`tests/e2e/test_engine_e2e.py`,
`tests/e2e/test_temporal_e2e.py`) and the tests that start the CLI or a worker themselves.
The expectations are written out from docs/design.md §3 by hand rather than read from
`scenarios.TRUTH`, so a wrong truth table fails the tests too.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
# Keys, switches and settings a subprocess must not take from the outside environment.
SCRUBBED = (
    "STRIPE_SECRET_KEY",
    "ANTHROPIC_API_KEY",
    "INTERLOCK_EMULATE_24H",
    "INTERLOCK_NO_LOOKUP",
    "INTERLOCK_CRASH",
    "INTERLOCK_RECEIPT_KEY",
    "INTERLOCK_SIGNING_KEY",
    "INTERLOCK_VERIFY_KEYS",
    "INTERLOCK_HOME",
    "INTERLOCK_STORE",
    "INTERLOCK_APPROVERS",
    "INTERLOCK_CLAIM_TTL",
    "INTERLOCK_STRIPE_TIMEOUT",
    "INTERLOCK_ACTIVITY_TIMEOUT",
)
SHORT_TIMINGS = {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}
CLI = [sys.executable, "-m", "interlock_demo.cli", "--headless", "--json", "--offline"]

# (agent refunds, hand refunds, outcome status, words the reason must contain), docs/design.md §3.
Want = tuple[int, int, str, str | None]
TABLE: dict[str, dict[str, Want]] = {
    "hand-refund": {
        "standard": (1, 1, "sent", None),
        "interlock": (0, 1, "refused", "refunds changed"),
        "checked": (0, 1, "stopped", None),
    },
    "revoked": {
        "standard": (1, 0, "sent", None),
        "interlock": (0, 0, "refused", "revoked"),
        "checked": (0, 0, "stopped", None),
    },
    "after-answer": {
        "standard": (1, 0, "sent", None),
        "interlock": (1, 0, "adopted", "its own refund"),
        "checked": (1, 0, "stopped", None),
    },
    "after-answer+emulate-24h": {
        "standard": (2, 0, "sent", None),
        "interlock": (1, 0, "adopted", "its own refund"),
        "checked": (1, 0, "stopped", None),
    },
    "after-answer+no-lookup": {
        "standard": (1, 0, "sent", None),
        "interlock": (1, 0, "refused", "refunds changed"),
        "checked": (1, 0, "stopped", None),
    },
}
SWITCH = {
    "after-answer+emulate-24h": ["INTERLOCK_EMULATE_24H"],
    "after-answer+no-lookup": ["INTERLOCK_NO_LOOKUP"],
}
# Where each scenario's first worker is SIGKILLed (the others': after-answer).
CRASH_POINT = {"hand-refund": "before-send", "revoked": "before-send"}


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: no keys or switches from outside, short timings."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(SHORT_TIMINGS)
    env["INTERLOCK_HOME"] = str(home)
    env.update(extra)
    return env


def run(
    cmd: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` from the repository root with `env`, capturing its output as text."""
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )


def reap(proc: subprocess.Popen[str]) -> None:
    """Kill `proc` if it still runs, wait for it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class Lines:
    """A subprocess's stderr lines in a queue, to wait on with a deadline."""

    def __init__(self, stream: IO[str], deadline_s: float) -> None:
        self.seen: list[str] = []
        self.deadline_s = deadline_s
        self._q: queue.Queue[str | None] = queue.Queue()
        self._t = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._t.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def until(self, text: str, count: int = 1) -> list[str]:
        """The first `count` lines containing `text`; fails at the stream's end or deadline."""
        deadline = time.monotonic() + self.deadline_s
        found: list[str] = []
        while len(found) < count:
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} on stderr in time: {self.seen}") from None
            if line is None:
                raise AssertionError(f"stderr ended before {text!r}: {self.seen}")
            self.seen.append(line)
            if text in line:
                found.append(line)
        return found

    def rest(self) -> str:
        """Everything after the lines already read, once the stream ended."""
        self._t.join(self.deadline_s)
        out = []
        while not self._q.empty():
            line = self._q.get_nowait()
            if line is not None:
                out.append(line)
        return "".join(out)


def check_run(doc: dict[str, Any], case: str, engine: str) -> None:
    """A finished offline run of `case` on `engine`, every column as the truth table says."""
    assert doc["schema"] == "interlock-demo/run@2"
    assert (doc["engine"], doc["mode"], doc["status"], doc["error"]) == (
        engine,
        "offline",
        "finished",
        None,
    )
    assert doc["scenario"] == case.split("+")[0]
    assert doc["emulated"] == SWITCH.get(case, [])
    assert [c["name"] for c in doc["columns"]] == ["standard", "interlock", "checked"]
    crash_point = CRASH_POINT.get(doc["scenario"], "after-answer")
    for col in doc["columns"]:
        where = f"{case}/{col['name']}"
        agent, hand, status, reason = TABLE[case][col["name"]]
        refunds = col["stripe"]["refunds"]
        counting = [r for r in refunds if r["status"] in ("succeeded", "pending")]
        assert sum(r["by"] == "agent" for r in counting) == agent, where
        assert sum(r["by"] == "hand" for r in counting) == hand, where
        assert col["stripe"]["refunded_total"] == 2000 * (agent + hand), where
        for r in refunds:
            assert r["amount"] == 2000, where
            if r["by"] == "agent":
                assert r["metadata"]["column"] == col["name"], where
            else:
                assert r["metadata"] == {}, where
        assert col["outcome"]["status"] == status, where
        if reason is not None:
            assert reason in col["outcome"]["reason"], where
        first, second = col["workers"]
        assert (first["exit_code"], first["crash_point"]) == (-9, crash_point), where
        assert (second["exit_code"], second["crash_point"]) == (0, None), where
        assert first["pid"] != second["pid"], where
        assert first["ended_at"] <= second["started_at"], where
        # run@2: every event carries its fields, and views read these, not the words.
        events = col["events"]
        assert all(set(e) == {"t", "kind", "text", "pid", "data"} for e in events), where
        kills = [e["data"]["crash_point"] for e in events if e["kind"] == "crash"]
        assert kills[:1] == [crash_point], where
        reports = [e["data"]["status"] for e in events if e["kind"] == "outcome"]
        assert reports[-1:] == [status], where
        assert col["as_predicted"] is True, (where, col["deviations"])
        assert col["deviations"] == [], where
        assert col["error"] is None, where


def check_interlock_receipt(col: dict[str, Any]) -> None:
    """Interlock's column: its receipt matches its outcome and `verify()` finds nothing wrong."""
    assert col["name"] == "interlock"
    assert col["verify"]["ok"] is True
    assert col["verify"]["problems"] == []
    assert col["verify"]["chain_length"] >= 1
    check_receipt_logged(col)
    assert col["receipt"]["outcome"] == col["outcome"]["status"]
    assert col["receipt"]["action_id"] == col["outcome"]["action_id"]
    if col["outcome"]["status"] == "adopted":
        (own,) = col["stripe"]["refunds"]
        assert col["receipt"]["external_id"] == own["id"]
        assert own["metadata"]["interlock_action"] == col["outcome"]["action_id"]


def check_receipt_logged(col: dict[str, Any]) -> None:
    """Interlock's column: its receipts are signed with the gate's Ed25519 key and checked
    with the public key list, the run's receipt is in the receipt log (counted from 1, within
    the log's size; the log is every run's in INTERLOCK_HOME) and an anchored head covers
    it, as the card says ("signed · in the log at N · anchored")."""
    v = col["verify"]
    assert v["signed"] is True and set(v["formats"]) == {"ed25519"}, v
    assert v["unlogged"] == 0 and v["log_size"] == v["formats"]["ed25519"], v
    assert 1 <= v["log_place"] <= v["log_size"], v
    assert v["receipt_anchored"] is True and v["anchored"] >= 1, v


def check_no_lookup_refusal(col: dict[str, Any]) -> None:
    """Interlock's column with no lookup: refused, and `verify()` names the refund it lacks
    (the receipt itself is signed, logged and anchored all the same)."""
    assert col["receipt"]["outcome"] == "refused"
    check_receipt_logged(col)
    assert col["verify"]["ok"] is False
    (own,) = [r for r in col["stripe"]["refunds"] if r["by"] == "agent"]
    assert own["metadata"]["interlock_action"] == col["outcome"]["action_id"]
    assert any(own["id"] in p and "refused" in p for p in col["verify"]["problems"]), col["verify"]


def workers_under(proc: psutil.Process) -> list[psutil.Process]:
    """The demo's worker processes under `proc`, and nothing else it runs.

    Any child is not enough: the Stripe SDK's first request runs `uname -p` (for its
    user-agent header), and a test that took that short-lived child for a worker found no
    workers a moment later (8 of 135 starts beside CPU burners).
    """
    found = []
    for child in proc.children(recursive=True):
        try:
            if "workers.standalone" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue  # gone, or a zombie, between listing and reading
    return found
