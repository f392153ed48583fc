"""Test helper: a worker built exactly as `docs/guides/stripe.md`'s example builds one.

    python tests/helpers/readme_worker.py STORE BASE_URL submit INTENT_JSON
    python tests/helpers/readme_worker.py STORE BASE_URL recover

`make_stripe_client(key, timeout_s=30)` and a `Gate` with the timing from the environment
(`INTERLOCK_CLAIM_TTL`, `INTERLOCK_STRIPE_TIMEOUT`), as a worker configured by the
documented settings would be. It prints one JSON line: the statuses it reported, or the
`ConfigError` that refused it (exit 2).
"""

from __future__ import annotations

import json
import os
import sys

from interlock import (
    UNSIGNED_APPROVALS,
    ConfigError,
    Gate,
    Intent,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    make_stripe_client,
)


def main(store_path: str, base_url: str, mode: str, intent_json: str = "") -> int:
    """Submit the intent or recover, and report what this worker said happened."""
    key = os.environ["STRIPE_SECRET_KEY"]
    store = SQLiteStore(store_path)
    try:
        payments = StripePayments(make_stripe_client(key, timeout_s=30, base_url=base_url))
        gate = Gate(store, StripeRefund(payments), approvers=UNSIGNED_APPROVALS)
    except ConfigError as e:
        print(json.dumps({"refused_at_start": str(e)}), flush=True)
        return 2
    print(json.dumps({"started": True}), flush=True)
    if mode == "submit":
        statuses = [gate.submit(Intent(**json.loads(intent_json))).status]
    else:
        statuses = [o.status for o in gate.recover()]
    print(json.dumps({"statuses": statuses}), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
