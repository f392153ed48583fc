"""Test helper: a worker process that submits one refund through a gate, then waits.

    python tests/helpers/refund_worker.py STORE BASE_URL INTENT_JSON [STOP_AT]

It opens the SQLite store, builds a gate over the real `stripe` SDK pointed at the
emulator (key from `STRIPE_SECRET_KEY`, receipts signed with the key the file
`INTERLOCK_SIGNING_KEY` holds and numbered into the receipt log at the library's default
pace, so a worker killed soon after its settle leaves its receipt unlogged; Timing(6, 1))
and submits the intent. With STOP_AT (a gate event) it prints
`STOP_AT ACTION_ID` when the gate emits that event and blocks there, inside the gate, for
the test to SIGKILL it. With `INTERLOCK_OTEL_FILE` set the gate is traced into that
file as the demo's workers trace theirs (`workers.traces`), each span as it ends.
Otherwise it prints the outcome as one JSON line once the gate
returns and waits for one line on stdin: `close` closes the store and exits 0 (the last
close checkpoints the -wal into the file); a test that wants the -wal left as it is
SIGKILLs it instead.
"""

from __future__ import annotations

import json
import os
import sys

from interlock import (
    UNSIGNED_APPROVALS,
    Event,
    Gate,
    Intent,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
)
from workers.traces import traced_to_file


def main(store_path: str, base_url: str, intent_json: str, stop_at: str | None = None) -> int:
    """Submit the intent; report the outcome or stop at `stop_at`, as the docstring says."""
    client = make_stripe_client(os.environ["STRIPE_SECRET_KEY"], timeout_s=1.0, base_url=base_url)
    store = SQLiteStore(store_path)

    def on_event(event: Event) -> None:
        if event.kind == stop_at:
            print(f"{stop_at} {event.action_id}", flush=True)
            # Held here until the test kills this process: nothing after the event may run,
            # so a closed stdin ends the process at once rather than letting the gate go on.
            sys.stdin.readline()
            os._exit(3)

    gate = Gate(
        store,
        StripeRefund(StripePayments(client)),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        on_event=on_event,
        approvers=UNSIGNED_APPROVALS,
    )
    gate = traced_to_file(gate)
    outcome = gate.submit(Intent.from_dict(json.loads(intent_json)))
    report = {
        "action_id": outcome.action_id,
        "status": outcome.status,
        "external_id": outcome.external_id,
    }
    print(json.dumps(report), flush=True)
    if sys.stdin.readline().strip() != "close":
        return 3
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
