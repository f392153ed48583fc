"""Test helper: a worker process that runs `gate.recover()` once, after a start barrier.

    python tests/helpers/recoverer.py STORE BASE_URL WORKER_ID   (STORE: a path or a URL)

It opens the store (a SQLite path or a PostgreSQL URL), builds a gate over the real
`stripe` SDK pointed at the emulator (key from `STRIPE_SECRET_KEY`, Timing(8, 3)), prints
`ready`, and waits for one line on stdin: the barrier, so that two recoverers start
together. Then it recovers and
prints one JSON line: its outcomes, how many creates it sent, and whether it waited on
another worker's claim. It trusts the approvers whose public keys `INTERLOCK_APPROVERS`
names; without it (the tests of claims and races) it takes unsigned approvals.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from interlock import (
    UNSIGNED_APPROVALS,
    Approvers,
    Gate,
    Owner,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    open_store,
)


def main(store_path: str, base_url: str, worker_id: str) -> int:
    """Recover every pending action once the barrier opens; report on stdout."""
    events: list[str] = []
    client = make_stripe_client(os.environ["STRIPE_SECRET_KEY"], timeout_s=3.0, base_url=base_url)
    store = open_store(store_path)
    gate = Gate(
        store,
        StripeRefund(StripePayments(client)),
        timing=Timing(claim_ttl_s=8, stripe_timeout_s=3),
        owner=Owner.current(worker_id),
        on_event=lambda event: events.append(event.kind),
        approvers=Approvers.from_env() or UNSIGNED_APPROVALS,
    )
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 3
    outcomes = gate.recover()
    report: dict[str, Any] = {
        "worker": worker_id,
        "pid": os.getpid(),
        "outcomes": [
            {"action_id": o.action_id, "status": o.status, "external_id": o.external_id}
            for o in outcomes
        ],
        "sends": events.count("before-send"),
        "waited": "claim-wait" in events,
    }
    print(json.dumps(report), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
