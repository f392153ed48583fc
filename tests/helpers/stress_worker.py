"""Test helper: one OS process of the stress test, with its own Gate on the shared store.

`python tests/helpers/stress_worker.py STORE BASE_URL PLAN_JSON WORKER_ID SEED` submits
every intent of the plan in a random order (several workers submit the same intents, so
they race on the claims), then runs `recover()`. `ready` says its gate is built; each
outcome is printed as a JSON line; `done` ends the run. The parent SIGKILLs some of these
processes at random moments.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

from interlock import (
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    InterlockError,
    Outcome,
    Owner,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
)


def _say(outcome: Outcome) -> None:
    print(
        json.dumps(
            {
                "action_id": outcome.action_id,
                "status": outcome.status,
                "refund": outcome.external_id,
            }
        ),
        flush=True,
    )


def main(store_path: str, base_url: str, plan_path: str, worker_id: str, seed: str) -> int:
    """Submit the plan's intents in a random order, then recover; report each outcome."""
    rng = random.Random(int(seed))
    intents = [Intent.from_dict(d) for d in json.loads(Path(plan_path).read_text())]
    rng.shuffle(intents)
    client = make_stripe_client(os.environ["STRIPE_SECRET_KEY"], timeout_s=1.0, base_url=base_url)
    gate = Gate(
        SQLiteStore(store_path),
        StripeRefund(StripePayments(client)),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        owner=Owner.current(worker_id),
        approvers=UNSIGNED_APPROVALS,
    )
    print("ready", flush=True)  # the parent aims its kills only at workers that got here
    for intent in intents:
        try:
            _say(gate.submit(intent))
        except InterlockError as e:
            print(json.dumps({"action_id": intent.action_id, "error": str(e)}), flush=True)
    for outcome in gate.recover(wait=False):
        _say(outcome)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
