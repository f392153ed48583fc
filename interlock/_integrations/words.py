"""The words a model reads about an outcome: one place for every guard and the MCP desk.

A tool's answer is the only thing the model learns of what the gate did, so each guard
(`interlock.langchain`, `interlock.pydantic_ai`, `interlock.openai_agents`) answers with
the same `outcome_words`, and the MCP desk's `desk_words` say the same things in its own
terms (a payment and the `request_id` a retry repeats). Whatever the wording, the meaning
of a status is the one in `REFUNDED`: only `sent` and `adopted` say done; `pending` (and
unknown) says *not done yet, do not retry and do not ask for a new refund*, since the gate
carries the same action on and a new one would be a second decision.
"""

from __future__ import annotations

from interlock._core.errors import InterlockError
from interlock._core.gate import REASON_WORLD_CHANGED, Outcome, Status
from interlock._core.money import format_amount

REFUNDED: dict[Status, bool | None] = {
    "sent": True,
    "adopted": True,
    "refused": False,
    "failed": False,
    "pending": None,
}
"""Whether the refund exists, by outcome status: True done, False not done, None not known
yet (being recovered); what the words of every status are held to."""

WORLD_CHANGED_WORDS = (
    "the payment's refunds changed since you read it: read it again and ask a person"
)
"""What a refused refund says when the payment's refunds changed after the model's read."""


def amount_words(amount: int | None, currency: str | None) -> str:
    """An amount in the action's currency for a guard's words (`format_amount`)."""
    return "the amount" if amount is None else format_amount(amount, currency)


def outcome_words(outcome: Outcome) -> str:
    """The outcome as the tool's answer to the model: what happened and what to do next."""
    aid = outcome.action_id
    if outcome.status == "sent":
        return (
            f"done: refunded {amount_words(outcome.amount, outcome.currency)}, refund "
            f"{outcome.external_id} (action {aid}). Tell the customer it is refunded; do not "
            "refund it again."
        )
    if outcome.status == "adopted":
        return (
            f"done: refunded {amount_words(outcome.amount, outcome.currency)}, refund "
            f"{outcome.external_id}, made by an earlier try of this same call and found at "
            f"Stripe, so nothing was sent twice (action {aid}). Tell the customer it is "
            "refunded; do not refund it again."
        )
    if outcome.status == "refused":
        return (
            f"not done, refused: {outcome.reason}. Nothing was sent (action {aid}). Do not retry "
            "and do not ask for another refund: tell the customer a person will review it, and "
            "leave it to a person."
        )
    if outcome.status == "failed":
        return (
            f"not done, Stripe said no ({outcome.code}): {outcome.reason} (action {aid}). A retry "
            "would get the same answer: tell the customer a person will look at it."
        )
    if outcome.unknown:
        return (
            f"not done yet, unknown: {outcome.reason} (action {aid}). The refund may exist; it is "
            "only looked up, never sent twice. Do not retry and do not ask for a new refund: tell "
            "the customer it is being checked, and a person checks Stripe."
        )
    return (
        f"not done yet: {outcome.reason} (action {aid}). The same action is carried on by "
        "recovery and never sent twice. Do not retry and do not ask for a new refund: tell the "
        "customer it is in progress."
    )


def error_words(error: BaseException, call_id: str | None = None) -> str:
    """The tool's answer when the guard raised instead of returning an outcome.

    A framework's default answer to an exception is often "please try again", which would
    send the model to decide the refund twice. Here the model is told that whether it was
    done is not known and that a person takes it from there. Interlock's own errors say
    what happened in words made for that; another exception is named by its type only,
    since its text was not written for the model to read.
    """
    what = type(error).__name__
    if isinstance(error, InterlockError):
        what = f"{what}: {error}"
    call = f" (tool call {call_id})" if call_id else ""
    return (
        f"not known whether it was done: the refund stopped with an error ({what}){call}. "
        "Whatever the gate journaled is finished by its recovery and never sent twice. Do not "
        "retry and do not ask for another refund: tell the customer a person will review it, "
        "and leave it to a person."
    )


def desk_words(outcome: Outcome, payment_intent: str, amount: int, request_id: str) -> str:
    """The outcome as the MCP desk's `issue_refund` answers it: the payment, and what to
    do with the `request_id` (a retry under it learns the outcome; a new one is a new
    refund decision)."""
    money = format_amount(amount, outcome.currency)
    status = outcome.status
    if status == "sent":
        return f"Refunded {money} on {payment_intent}: refund {outcome.external_id}."
    if status == "adopted":
        return (
            f"Refunded {money} on {payment_intent}: refund {outcome.external_id}. An earlier "
            "try of this request had already made it at Stripe (its answer was lost); it was "
            "found there and nothing was sent twice."
        )
    if status == "pending":
        return (
            f"Unknown, being recovered: Stripe's answer did not settle whether the refund of "
            f"{money} on {payment_intent} was made ({outcome.reason}). It is not failed: the "
            "server looks it up at Stripe before every call and on restart, and never sends "
            "it twice. Do not refund again with a new request_id; call issue_refund later "
            f"with the same request_id ({request_id}) to learn the outcome, and tell the "
            "customer the refund is being confirmed. If it stays unknown, ask a person to "
            "check the payment in Stripe."
        )
    if status == "refused" and outcome.reason == REASON_WORLD_CHANGED:
        return f"Not refunded: {WORLD_CHANGED_WORDS}. Nothing was sent."
    if status == "refused":
        return (
            f"Not refunded: {outcome.reason}. Nothing was sent. Do not retry; ask a person "
            "to look at the payment and its approval."
        )
    return (
        f"Not refunded: Stripe declined it ({outcome.code}: {outcome.reason}). Nothing "
        "was refunded; tell the customer or ask a person."
    )
