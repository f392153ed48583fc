"""The framework guards' shared parts: a tool call's action id, and an outcome in words.

And the extras stay optional: `import interlock` loads neither guard nor framework.
"""

from __future__ import annotations

import pytest

from interlock import Intent, Outcome
from interlock._integrations.tool_calls import action_id_for, approve_again, reapproval_id
from interlock._integrations.words import outcome_words
from tests.helpers.gate_rig import AMOUNT, Crash, GateWorld, gone_owner

pa = pytest.importorskip("interlock.pydantic_ai", reason="the pydantic-ai extra is not installed")
oa = pytest.importorskip(
    "interlock.openai_agents", reason="the openai-agents extra is not installed"
)


def test_one_tool_call_names_one_action_and_another_call_another() -> None:
    """The same conversation and call id give the same id; any other part gives another."""
    first = pa.action_id_for("conv-1", "call_1")
    assert first == pa.action_id_for("conv-1", "call_1") == "pydantic-ai:conv-1:call_1"
    others = {
        pa.action_id_for("conv-2", "call_1"),
        pa.action_id_for("conv-1", "call_2"),
        oa.action_id_for("conv-1", "call_1"),
    }
    assert first not in others and len(others) == 3


def test_a_colon_inside_a_part_cannot_make_two_ids_meet() -> None:
    """`a:b` + `c` and `a` + `b:c` would both read `a:b:c` unencoded."""
    assert action_id_for("fw", "a:b", "c") != action_id_for("fw", "a", "b:c")


def test_any_call_id_makes_a_valid_intent() -> None:
    """Whitespace, non-ASCII and long ids are encoded and hashed into what Intent accepts."""
    for call_id in ("call 1\n", "appel-é", "x" * 500):
        aid = oa.action_id_for("case-1", call_id)
        assert len(aid) <= 200
        Intent(aid, "refund", "pi_1", 2_000, "lease_1", "fp")
    assert oa.action_id_for("case-1", "x" * 500) != oa.action_id_for("case-1", "x" * 501)


def test_an_empty_part_is_refused_in_words() -> None:
    """A tool call without an id cannot name an action its resume would find again."""
    with pytest.raises(ValueError, match="no tool_call_id"):
        action_id_for("openai-agents", "case-1", "")


def test_a_re_approval_id_is_the_same_on_every_run_and_valid_however_long() -> None:
    """Derived from the refused id alone, so a re-run finds it; a chain of them stays an id
    an Intent accepts, and two chains never meet."""
    aid = pa.action_id_for("conv-1", "call_1")
    assert reapproval_id(aid) == reapproval_id(aid) != aid
    for call_id in ("call_1+again", "call_1~again", "call_1%2Bagain"):
        assert pa.action_id_for("conv-1", call_id) != reapproval_id(aid)
    chain = [oa.action_id_for("case-1", "x" * 500)]
    for _ in range(5):
        chain.append(reapproval_id(chain[-1]))
    assert len(set(chain)) == len(chain)
    for link in chain:
        assert len(link) <= 200 and link.startswith("openai-agents")
        Intent(link, "refund", "pi_1", 2_000, "lease_1", "fp")


def test_a_re_approval_run_again_after_a_kill_adopts_its_refund_and_sends_no_second() -> None:
    """Killed after Stripe answered the re-approval's send: running the same re-approval
    again (a framework's re-run) finds it journaled and adopts its refund, even though its
    approval has room for a second one and the payment changed since the person decided."""
    world = GateWorld()
    old, fresh = world.grant(AMOUNT), world.grant(2 * AMOUNT)
    intent = world.decide(AMOUNT, old.id)
    world.store.revoke_lease(old.id, "support")
    refused = world.gate(gone_owner()).submit(intent)
    assert refused.status == "refused"
    with pytest.raises(Crash):
        approve_again(world.gate(gone_owner(), crash_at="after-answer"), refused, fresh.id, "carol")
    assert len(world.agent_refunds()) == 1
    again = approve_again(world.gate(gone_owner()), refused, fresh.id, "carol")
    assert again.status == "adopted" and again.action_id == reapproval_id(refused.action_id)
    assert len(world.agent_refunds()) == 1


@pytest.mark.parametrize(
    ("outcome", "says"),
    [
        (
            Outcome("a", "sent", external_id="re_1", amount=2_000, currency="usd"),
            "done: refunded $20.00",
        ),
        (Outcome("a", "adopted", external_id="re_1", amount=2_000), "found at Stripe"),
        (Outcome("a", "refused", "the approval was revoked"), "not done, refused"),
        (Outcome("a", "failed", "too much", code="amount_too_large"), "not done, Stripe said no"),
        (Outcome("a", "pending", "claimed by w1"), "not done yet"),
        (Outcome("a", "pending", "HTTP 500", unknown=True), "not done yet, unknown"),
    ],
)
def test_only_a_refund_that_exists_is_called_done(outcome: Outcome, says: str) -> None:
    """The model is told done exactly when the refund exists, and never to retry otherwise."""
    words = outcome_words(outcome)
    assert says in words
    assert words.startswith("done") == (outcome.status in ("sent", "adopted"))
    if outcome.reason:
        assert outcome.reason in words
    if not words.startswith("done"):
        assert "Do not retry" in words or "A retry would get the same answer" in words
