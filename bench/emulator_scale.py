"""What a refund create and a refund list cost in the emulator's model as refunds pile up.

    python bench/emulator_scale.py [--sizes 100,1000,10000] [--rounds 7] [--batch 200]

For each size it builds a `PaymentsModel` holding that many refunds (ten per payment, each
under its own idempotency key, as the demo and the gate make them), then times, in rounds
that visit every size in turn so that all sizes see the same machine:

- `create`: a refund under a fresh idempotency key (the idempotency layer, the refund and
  its indexes), on payments kept apart so that the listed ones keep ten refunds each;
- `list`: one payment's refunds (`payment_intent`, `limit=100`: ten of them), as the
  gate's lookup reads them.

It prints one figure a line: per size, the median per operation and its range over the
rounds; then, per operation, the largest size's median over the smallest's (flat is 1.0x).
The model is timed in-process: HTTP adds the same cost at every size. Every line ends with
the load average right after the rounds (bench/common.py): the machine is shared.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from interlock.testing import PaymentsModel

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # run as a script, or loaded by a test, from anywhere
    sys.path.insert(0, str(BENCH))

from common import with_load  # noqa: E402

REFUNDS_PER_PAYMENT = 10
# Large enough that refunds of one cent never run a payment out.
PAYMENT_AMOUNT = 99_999_999
OPERATIONS = ("create", "list")


class _World:
    """A model holding `size` refunds, and a counter for fresh idempotency keys."""

    def __init__(self, size: int) -> None:
        self.model = PaymentsModel()
        self.next_key = 0
        self.listed = [self._payment() for _ in range(max(1, size // REFUNDS_PER_PAYMENT))]
        self.created = [self._payment() for _ in range(REFUNDS_PER_PAYMENT)]
        for i in range(size):
            self.create(self.listed[i % len(self.listed)])

    def _payment(self) -> str:
        reply = self.model.post(
            "payment_intents",
            {
                "amount": str(PAYMENT_AMOUNT),
                "currency": "usd",
                "confirm": "true",
                "payment_method": "pm_card_visa",
            },
        )
        return str(reply.body["id"])

    def create(self, payment: str) -> None:
        self.next_key += 1
        reply = self.model.post(
            "refunds",
            {"payment_intent": payment, "amount": "1", "metadata": {"n": str(self.next_key)}},
            f"act_{self.next_key}",
        )
        if reply.status != 200:
            raise RuntimeError(f"a refund create failed: {reply.body}")

    def list(self, payment: str) -> None:
        reply = self.model.list_refunds({"payment_intent": payment, "limit": "100"})
        if reply.status != 200:
            raise RuntimeError(f"a refund list failed: {reply.body}")


def _per_op_ms(batch: int, op: Callable[[str], None], pool: list[str], rng: random.Random) -> float:
    payments = [rng.choice(pool) for _ in range(batch)]
    started = time.perf_counter()
    for payment in payments:
        op(payment)
    return (time.perf_counter() - started) * 1000 / batch


def measure(
    sizes: list[int], rounds: int, batch: int, seed: int = 7
) -> dict[tuple[str, int], list[float]]:
    """Milliseconds per operation, by (operation, size), one figure per round."""
    rng = random.Random(seed)
    worlds = {size: _World(size) for size in sizes}
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for size, world in worlds.items():
            for name, op, pool in (
                ("create", world.create, world.created),
                ("list", world.list, world.listed),
            ):
                times.setdefault((name, size), []).append(_per_op_ms(batch, op, pool, rng))
    return times


def report(times: dict[tuple[str, int], list[float]], sizes: list[int]) -> list[str]:
    """The report's lines, one figure each."""
    lines = []
    for name in OPERATIONS:
        for size in sizes:
            got = times[(name, size)]
            lines.append(
                f"{name} at {size} refunds: median {statistics.median(got):.4f} ms "
                f"(range {min(got):.4f}-{max(got):.4f} ms over {len(got)} rounds)"
            )
    for name in OPERATIONS:
        small = statistics.median(times[(name, sizes[0])])
        large = statistics.median(times[(name, sizes[-1])])
        lines.append(f"{name} at {sizes[-1]} vs {sizes[0]} refunds: {large / small:.2f}x")
    return lines


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of sizes like 100,1000") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be whole numbers of 1 or more")
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[100, 1000, 10000], help="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=7, help="rounds over all sizes (7)")
    parser.add_argument("--batch", type=int, default=200, help="operations per timing (200)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.batch < 1:
        parser.error("--rounds and --batch need 1 or more")
    for line in report(measure(args.sizes, args.rounds, args.batch), args.sizes):
        print(with_load(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
