"""The emulator's model looks refunds and keys up by index: right answers, flat cost.

Pages and cursors through the indexes agree with a plain sort of every refund; the amount
left on a payment follows status changes; `bench/emulator_scale.py` runs and prints its
lines; and a create or list among 10,000 refunds costs about what it costs among 100.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from interlock.testing import InProcessPayments, PaymentsModel

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "emulator_scale.py"


def _bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("emulator_scale", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _walk(model: PaymentsModel, query: dict[str, str]) -> list[str]:
    """Every refund id reached by following starting_after from the first page."""
    seen: list[str] = []
    page = model.list_refunds(query).body
    while True:
        ids = [r["id"] for r in page["data"]]
        seen.extend(ids)
        if not page["has_more"] or not ids:
            return seen
        page = model.list_refunds({**query, "starting_after": ids[-1]}).body


def test_pages_through_the_indexes_agree_with_a_full_sort() -> None:
    """For each payment and for all refunds, every limit and both cursors give Stripe's order."""
    payments = InProcessPayments()
    rng = random.Random(3)
    pis = [payments.create_payment(100_000).id for _ in range(3)]
    for i in range(40):
        payments.create_refund(rng.choice(pis), 1, idempotency_key=f"k{i}")
    payments.model.advance(5)  # later refunds a few seconds on: order follows creation
    for i in range(40, 50):
        payments.create_refund(rng.choice(pis), 1, idempotency_key=f"k{i}")
    model = payments.model
    everything = model.list_refunds({"limit": "100"}).body["data"]
    newest_first = sorted(everything, key=lambda r: r["created"], reverse=True)
    assert [r["created"] for r in everything] == [r["created"] for r in newest_first]
    for pi in [None, *pis]:
        expected = [r["id"] for r in everything if pi is None or r["payment_intent"] == pi]
        only = {"payment_intent": pi} if pi else {}
        for limit in (1, 3, 7, 100):
            assert _walk(model, {"limit": str(limit), **only}) == expected
        before = model.list_refunds({"limit": "2", "ending_before": expected[-1], **only}).body
        assert [r["id"] for r in before["data"]] == expected[-3:-1]
        assert before["has_more"] is (len(expected) > 3)


def test_cursor_of_another_payment_is_resource_missing() -> None:
    """A cursor that is a refund of another payment is not in this list: 404 on that param."""
    payments = InProcessPayments()
    a, b = payments.create_payment(1000).id, payments.create_payment(1000).id
    other = payments.create_refund(b, 10)
    reply = payments.model.list_refunds({"payment_intent": a, "starting_after": other.id})
    assert (reply.status, reply.body["error"]["param"]) == (404, "starting_after")


@pytest.mark.parametrize(
    ("steps", "left"),
    [
        ([("failed",)], 1000),
        ([("pending",)], 600),
        ([("failed",), ("succeeded",)], 600),
        ([("canceled",), ("requires_action",), ("failed",)], 1000),
    ],
)
def test_amount_left_follows_status_changes(steps: list[tuple[str]], left: int) -> None:
    """The per-payment refunded sum moves as a refund fails, is canceled or counts again."""
    payments = InProcessPayments()
    pi = payments.create_payment(1000).id
    refund = payments.create_refund(pi, 400)
    for (status,) in steps:
        payments.model.set_refund_status(refund.id, status)
    too_much = payments.model.post("refunds", {"payment_intent": pi, "amount": str(left + 1)})
    assert too_much.status == 400
    assert payments.create_refund(pi, left).amount == left


def test_expired_keys_are_pruned_oldest_first() -> None:
    """After 24 h, keys used before are fresh again; a key used later still replays."""
    payments = InProcessPayments()
    pi = payments.create_payment(100_000).id
    early = [payments.create_refund(pi, 1, idempotency_key=f"early{i}").id for i in range(3)]
    payments.model.advance(12 * 3600)
    late = payments.create_refund(pi, 1, idempotency_key="late").id
    payments.model.advance(12 * 3600 + 1)
    assert payments.create_refund(pi, 1, idempotency_key="early0").id not in early
    assert payments.create_refund(pi, 1, idempotency_key="late").id == late


def test_create_and_list_stay_flat_from_100_to_10000_refunds() -> None:
    """Among 10,000 refunds a create and a list cost well under 4x what they cost among 100.

    Scanning every key and refund, as the model once did, made it 13x and 8x; the bound is
    loose so that a busy machine cannot fail it, and compares each size's best round.
    """
    bench: Any = _bench_module()
    times = bench.measure([100, 10_000], rounds=5, batch=100)
    for name in bench.OPERATIONS:
        small, large = min(times[(name, 100)]), min(times[(name, 10_000)])
        assert large < 4 * small, f"{name}: {large:.4f} ms at 10k vs {small:.4f} ms at 100"
