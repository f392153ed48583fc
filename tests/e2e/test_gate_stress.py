"""Many OS processes, each with its own Gate on one SQLite store, under random SIGKILLs,
Stripe faults and hand refunds, against the loopback emulator over the real SDK.

Bounded in time (a fixed number of rounds, each with a deadline); at the end a last
recovery runs once every claim has run out, and the invariants are checked against the
emulator: no action refunded twice, every outcome truthful, every lease within its cap,
nothing pending but an honest unknown, and `verify()` clean. The actions on one payment
are siblings (one decision made three times, one fingerprint), so they end as some order
one after the other would: at most one agent refund per payment, whether the approval's
cap leaves room for one and a half refunds or for all of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    Owner,
    PaymentsError,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock.testing import InProcessPayments, StripeEmulator
from tests.conftest import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "stress_worker.py"
PAYMENTS = 3
ACTIONS_PER_PAYMENT = 3
AMOUNT = 2_000
# Room for one and a half refunds (two actions racing on one lease must not both send),
# or for every action of the payment (only the payment's turn keeps siblings in order).
CAPS = (3_000, (ACTIONS_PER_PAYMENT + 1) * AMOUNT)
WORKERS = 4
ROUNDS = 3
ROUND_S = 12.0
START_S = 60.0
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
FAULTS = (
    ("drop", {}),
    ("error_429", {}),
    ("garbled_2xx", {}),
    ("hold", {"hold_ms": 2500, "stage": "before_commit"}),
    ("hold", {"hold_ms": 1500, "stage": "after_commit"}),
    ("error_500", {"stage": "after_commit"}),
)


def _spawn(
    store: Path, url: str, plan: Path, worker: str, seed: int, log: IO[str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(store), url, str(plan), worker, str(seed)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "STRIPE_SECRET_KEY": TEST_KEY, "PYTHONPATH": str(ROOT)},
    )


def _ready(procs: list[subprocess.Popen[str]], paths: list[Path]) -> list[subprocess.Popen[str]]:
    """The workers still running that have said `ready` (their gate is built)."""
    return [
        p
        for p, path in zip(procs, paths, strict=True)
        if p.poll() is None and path.read_text().startswith("ready")
    ]


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("seed", "cap"), [(11, CAPS[0]), (29, CAPS[1])])
def test_processes_racing_with_kills_faults_and_hand_refunds_keep_every_rule(
    emulator: StripeEmulator, tmp_path: Path, seed: int, cap: int
) -> None:
    """Whatever the interleaving, no refund twice, truthful outcomes, leases within their
    cap, at most one agent refund per payment (its actions are siblings)."""
    rng = random.Random(seed)
    model = emulator.model
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=TIMING.stripe_timeout_s, base_url=emulator.url)
    )
    hand = InProcessPayments(model)
    store_path = tmp_path / "journal.sqlite3"
    store = SQLiteStore(store_path)
    intents: list[Intent] = []
    for p in range(PAYMENTS):
        pi = payments.create_payment(10_000).id
        now = time.time()
        store.grant_lease(Lease(f"lease-{p}", "refund", pi, cap, now + 3600, "support", now))
        for _ in range(ACTIONS_PER_PAYMENT):
            intents.append(
                Intent(
                    new_action_id(),
                    "refund",
                    pi,
                    AMOUNT,
                    f"lease-{p}",
                    refunds_fingerprint([]),
                    metadata={"case": f"stress-{seed}"},
                    created_at=now,
                )
            )
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([i.to_dict() for i in intents]))
    targets = sorted({i.target for i in intents})

    kills = hand_refunds = 0
    for rnd in range(ROUNDS):
        paths = [tmp_path / f"w{rnd}-{n}.log" for n in range(WORKERS)]
        logs = [path.open("w") for path in paths]
        procs = [
            _spawn(store_path, emulator.url, plan, f"w{rnd}-{n}", rng.randrange(10**6), log)
            for n, log in enumerate(logs)
        ]

        # The chaos starts once a worker has built its gate, and only such workers are
        # killed: beside CPU burners a worker took seconds to start, every one was killed
        # before its first submit, and nothing was journaled in three rounds (seed 11).
        start_deadline = time.monotonic() + START_S
        while not _ready(procs, paths) and any(p.poll() is None for p in procs):
            assert time.monotonic() < start_deadline, f"no worker started in {START_S:g} s"
            time.sleep(0.05)  # other processes' output files: no event to wait on
        deadline = time.monotonic() + ROUND_S
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            kind, options = rng.choice(FAULTS)
            model.add_fault(kind, payment_intent=rng.choice(targets), **options)
            if rng.random() < 0.3:
                # Support's refund by hand may meet an armed fault too; made or not, it
                # names no action, so the rules below do not count it.
                with contextlib.suppress(PaymentsError):
                    hand.create_refund(rng.choice(targets), 500)
                hand_refunds += 1
            live = _ready(procs, paths)
            if rng.random() < 0.5 and live:
                os.kill(rng.choice(live).pid, signal.SIGKILL)
                kills += 1
            # Pacing of the chaos, not synchronization: nothing waits on this.
            time.sleep(rng.uniform(0.05, 0.6))
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        for log in logs:
            log.close()
        model.clear_faults()

    # The last recovery, once every claim (and its grace) has run out.
    time.sleep(TIMING.renewal_s + TIMING.grace_s + 0.5)
    last = Gate(
        store,
        StripeRefund(payments),
        timing=TIMING,
        owner=Owner.current("last"),
        approvers=UNSIGNED_APPROVALS,
    )
    last.recover()

    assert kills > 0
    spent_by_lease: dict[str, int] = {}
    journaled = 0
    for intent in intents:
        state = store.action(intent.action_id)
        own = [
            r
            for r in payments.list_refunds(intent.target)
            if r.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        ]
        if state is None:
            # No worker reached it before its kill or its round's end (a loaded machine
            # slows every worker): nothing was journaled, so nothing may have been sent.
            assert own == [], f"{intent.action_id} refunded but never journaled"
            continue
        journaled += 1
        assert len(own) <= 1, f"{intent.action_id} refunded {len(own)} times"
        counting = [r for r in own if r.counts]
        s = state.settlement
        if s is None:
            # Only an honest unknown stays pending, and then no refund of it exists.
            assert state.unknown is not None and counting == [], (intent.action_id, state)
            continue
        if s.status in ("sent", "adopted"):
            assert counting and s.external_id == counting[0].id, (intent.action_id, s)
            spent_by_lease[intent.lease_id] = spent_by_lease.get(intent.lease_id, 0) + AMOUNT
        else:
            assert counting == [], f"{intent.action_id} {s.status} while its refund exists"
    for p in range(PAYMENTS):
        lease = store.lease(f"lease-{p}")
        assert lease is not None
        assert lease.spent == spent_by_lease.get(f"lease-{p}", 0) <= cap
        # Siblings end as one after the other: the first to land changes the refunds, and
        # every later one is refused.
        assert lease.spent <= AMOUNT, f"lease-{p}: {lease.spent} refunded by its siblings"
    assert journaled > 0, "no worker journaled any intent: the rules were not exercised"
    result = verify(store, payments)
    assert result.ok, result.problems
    store.close()
    print(f"seed {seed}: {kills} kills, {hand_refunds} hand refunds, {journaled} of "
          f"{len(intents)} intents journaled, "
          f"{sum(spent_by_lease.values())} cents refunded by agents")  # fmt: skip
