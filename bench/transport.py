"""What the Stripe transport costs per action, against the loopback emulator.

    python bench/transport.py [--actions N]

Runs N first attempts (`Gate.submit`: one list of the payment's refunds, one create)
through `interlock.make_stripe_client` and the real `stripe` SDK against the loopback
emulator, each on its own payment, with an in-memory journal so that the time is the
gate's and the transport's, not a disk's. The emulator's server counts the connections
it accepts during the submits (server side, so the count does not trust the client). One
figure a line:

- `connections opened per 100 actions: N` (target at most 2: one kept-alive connection
  per Stripe host, reused across calls);
- `submit against the emulator`: the median and range of one `Gate.submit`, in ms.

Each line ends with the load average right after the submits (bench/common.py). Timings
are reported, never judged; it exits 1 when an action did not end `sent`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (ROOT, BENCH):  # run as a script from anywhere in a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from common import load_average, with_load  # noqa: E402

from interlock import (  # noqa: E402
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    SigningKey,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import StripeEmulator  # noqa: E402

KEY = "sk_test_MadeUpTransportBench"
AMOUNT = 100
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
CONNECTIONS_TARGET = 2


def main(argv: list[str] | None = None) -> int:
    """Run the submits and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=int, default=100, help="submits to time (default 100)")
    args = parser.parse_args(argv)
    if args.actions < 1:
        parser.error("--actions must be at least 1")

    server = StripeEmulator().start()
    try:
        url = server.url
        # The payments are made through another client, so the gate's starts cold.
        setup = StripePayments(make_stripe_client(KEY, timeout_s=1, base_url=url))
        payments = StripePayments(make_stripe_client(KEY, timeout_s=1, base_url=url))
        store = MemoryStore()
        gate = Gate(
            store,
            StripeRefund(payments),
            timing=TIMING,
            signing_key=SigningKey.generate(),
            approvers=UNSIGNED_APPROVALS,
        )
        intents = []
        for _ in range(args.actions):
            pi = setup.create_payment(AMOUNT).id
            now = time.time()
            store.grant_lease(Lease(f"lease-{pi}", "refund", pi, AMOUNT, now + 3600, "bench", now))
            intents.append(
                Intent(
                    new_action_id(), "refund", pi, AMOUNT, f"lease-{pi}", refunds_fingerprint([])
                )
            )
        opened_before = server.connections_accepted
        times = []
        for intent in intents:
            start = time.perf_counter()
            outcome = gate.submit(intent)
            times.append(time.perf_counter() - start)
            if outcome.status != "sent":
                print(f"an action ended {outcome.status}: {outcome.reason}", file=sys.stderr)
                return 1
        opened = server.connections_accepted - opened_before
        load = load_average()
    finally:
        server.stop()

    per_100 = opened * 100 / args.actions
    print(
        with_load(
            f"connections opened per 100 actions: {per_100:g}"
            f" (over {args.actions}; target <= {CONNECTIONS_TARGET})",
            load,
        )
    )
    ms = sorted(t * 1000 for t in times)
    print(
        with_load(
            f"submit against the emulator: median {statistics.median(ms):.2f} ms "
            f"(range {ms[0]:.2f}-{ms[-1]:.2f} ms over {len(ms)})",
            load,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
