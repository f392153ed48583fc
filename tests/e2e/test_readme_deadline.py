"""One deadline: the Stripe timeout a gate plans its claims with is the one its calls run
under. Real worker processes built as the Stripe guide (`docs/guides/stripe.md`) shows,
the real `stripe` SDK, the loopback emulator holding the create longer than the plan but
inside the client's own timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    Intent,
    Lease,
    SQLiteStore,
    StripePayments,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY
from tests.helpers.headless import ROOT, SCRUBBED

pytestmark = pytest.mark.e2e

WORKER = ROOT / "tests" / "helpers" / "readme_worker.py"
# The documented short timing; the guide's client says 30 s.
TIMINGS = {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}
HOLD_MS = 14_000
WAIT_S = 45.0


def _spawn(store: Path, emulator: StripeEmulator, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(TIMINGS, STRIPE_SECRET_KEY=TEST_KEY)
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(store), emulator.url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _report(proc: subprocess.Popen[str]) -> tuple[int, list[dict[str, object]]]:
    out, err = proc.communicate(timeout=WAIT_S)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, err[-2000:]
    return proc.returncode, lines


@pytest.mark.timeout(120)
def test_a_client_deadline_past_the_plan_is_refused_before_anything_is_sent(
    emulator: StripeEmulator, tmp_path: Path
) -> None:
    """A create held 14 s (inside the guide client's 30 s, past the planned 1 s) while
    support refunds by hand and a second worker recovers: the workers refuse to start,
    so Stripe never holds the agent's refund next to the hand one."""
    payments = StripePayments(make_stripe_client(TEST_KEY, timeout_s=5, base_url=emulator.url))
    payment = payments.create_payment(5000)
    store_path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(store_path)
    now = time.time()
    store.grant_lease(
        Lease(f"lease-{payment.id}", "refund", payment.id, 2000, now + 3600, "test", now)
    )
    intent = Intent(
        action_id=new_action_id(),
        kind="refund",
        target=payment.id,
        amount=2000,
        lease_id=f"lease-{payment.id}",
        fingerprint=refunds_fingerprint(payments.list_refunds(payment.id)),
    )
    fault = emulator.model.add_fault("hold", stage="before_commit", hold_ms=HOLD_MS)

    first = _spawn(store_path, emulator, "submit", json.dumps(asdict(intent)))
    deadline = time.monotonic() + WAIT_S
    while first.poll() is None and not fault.started.wait(0.05):
        assert time.monotonic() < deadline, "the first worker neither sent nor stopped"
    if fault.started.is_set():  # the create is held at Stripe: the story goes on
        payments.create_refund(payment.id, 2000)  # support refunds $20 by hand
    second = _spawn(store_path, emulator, "recover")
    reports = [_report(first), _report(second)]

    refunds = payments.list_refunds(payment.id)
    agent = [r for r in refunds if r.metadata.get(ACTION_METADATA_KEY) == intent.action_id]
    assert agent == [], f"Stripe holds the agent's refund beside the hand one; {reports}"
    for code, lines in reports:
        assert code == 2, lines
        refusal = str(lines[0]["refused_at_start"])
        assert "30 s per call" in refusal and "(1 s)" in refusal, refusal
    assert fault.started.is_set() is False
    assert verify(store, payments).ok
    store.close()


def _guide_example() -> str:
    text = (ROOT / "docs" / "guides" / "stripe.md").read_text(encoding="utf-8")
    section = text[text.index("# The library against Stripe") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timings", [{}, TIMINGS], ids=["defaults", "documented-short"])
def test_the_stripe_guide_example_runs_as_written(
    emulator: StripeEmulator, tmp_path: Path, timings: dict[str, str]
) -> None:
    """The Stripe guide's example, run as a script against the emulator, with the
    default and with the documented short timing, sends the refund once."""
    script = tmp_path / "example.py"
    script.write_text(_guide_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(timings, STRIPE_SECRET_KEY=TEST_KEY, INTERLOCK_STRIPE_BASE=emulator.url)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["sent"]
    assert emulator.model.requests.count(("POST", "refunds")) == 1
