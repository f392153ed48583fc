"""Test helper: a worker process that submits one sibling decision, in step with the test.

    python tests/helpers/sibling_worker.py STORE BASE_URL WORKER_ID INTENT_JSON

It opens the store (a SQLite path or a PostgreSQL URL), builds a gate over the real
`stripe` SDK pointed at the emulator (key from `STRIPE_SECRET_KEY`, Timing(8, 3), the
approvers' public keys from `INTERLOCK_APPROVERS`), prints
`ready` and waits for `go` on stdin. Then it submits the intent and says where it got to,
one line each: `read` right after its first read of the payment (then it waits for
`continue`, so the test decides when a reader may go on), `busy` when the gate journaled
it behind another action on the payment, and last its outcome as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

from interlock import (
    Event,
    Gate,
    GateEvent,
    Intent,
    Observation,
    Owner,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    open_store,
)


class _SaysRead(StripeRefund):
    """The Stripe refund whose first read is announced and then waits for the test."""

    read = False

    def observe(self, intent: Intent) -> Observation:
        obs = super().observe(intent)
        if not self.read:
            self.read = True
            print("read", flush=True)
            if sys.stdin.readline().strip() != "continue":
                raise SystemExit(3)
        return obs


def _on_event(event: Event) -> None:
    if event.kind is GateEvent.JOURNALED and event.data["claim"] == "busy":
        print("busy", flush=True)


def main(store_path: str, base_url: str, worker_id: str, intent_json: str) -> int:
    """Submit the intent once the test says go; report on stdout."""
    client = make_stripe_client(os.environ["STRIPE_SECRET_KEY"], timeout_s=3.0, base_url=base_url)
    store = open_store(store_path)
    gate = Gate(
        store,
        _SaysRead(StripePayments(client)),
        timing=Timing(claim_ttl_s=8, stripe_timeout_s=3),
        owner=Owner.current(worker_id),
        on_event=_on_event,
    )
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 3
    outcome = gate.submit(Intent.from_dict(json.loads(intent_json)))
    report = {"action_id": outcome.action_id, "status": outcome.status, "reason": outcome.reason}
    print(json.dumps(report), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
