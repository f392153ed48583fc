"""The support agent: a tool-use loop with `get_payment` and `issue_refund`.

The same loop runs on the real model (the official `anthropic` SDK) and on the scripted
proposal of offline and mock runs, which answers through the same tool calls as a
sensible model would. The loop does not execute `issue_refund`: the model's call is the
decision, and the worker sends it through its column's path (plain, Interlock, checked).
The decision records the payment as the model saw it, so the gate can check later
whether the world moved.

`anthropic` is imported only when a real model is asked, never on a restart path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from interlock import Payment, Payments, format_amount, refunds_fingerprint
from workers.protocol.case import DEFAULT_MODEL, ENV_MODEL

MAX_TURNS = 6

SYSTEM = (
    "You are a payments support agent. You can read a payment with get_payment and refund "
    "it with issue_refund. Amounts are in cents. Refund only what the customer asked for, "
    "and only if the payment's existing refunds do not already cover it. Read the payment "
    "before you refund."
)

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_payment",
        "description": "Read a Stripe payment (PaymentIntent) with all its refunds.",
        "input_schema": {
            "type": "object",
            "properties": {"payment_intent": {"type": "string", "description": "pi_..."}},
            "required": ["payment_intent"],
        },
    },
    {
        "name": "issue_refund",
        "description": "Refund part of a payment. The amount is in cents.",
        "input_schema": {
            "type": "object",
            "properties": {
                "payment_intent": {"type": "string"},
                "amount": {"type": "integer", "description": "cents"},
                "reason": {"type": "string"},
            },
            "required": ["payment_intent", "amount"],
        },
    },
]


class AgentError(RuntimeError):
    """The model did not reach a decision; the message says why."""


@dataclass(frozen=True)
class Decision:
    """What the model decided, and the payment as it saw it when it decided."""

    payment_intent: str
    amount: int | None
    reason: str
    text: str
    fingerprint: str
    payment_seen: Mapping[str, Any]
    model: str
    tool_call: Mapping[str, Any] = field(default_factory=dict)

    @property
    def refund(self) -> bool:
        """Whether the model called `issue_refund`."""
        return self.amount is not None

    def to_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready data."""
        return {
            "payment_intent": self.payment_intent,
            "amount": self.amount,
            "reason": self.reason,
            "text": self.text,
            "fingerprint": self.fingerprint,
            "payment_seen": dict(self.payment_seen),
            "model": self.model,
            "tool_call": dict(self.tool_call),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """A decision from `to_dict` data."""
        return cls(
            payment_intent=str(data["payment_intent"]),
            amount=None if data.get("amount") is None else int(data["amount"]),
            reason=str(data.get("reason", "")),
            text=str(data.get("text", "")),
            fingerprint=str(data["fingerprint"]),
            payment_seen=dict(data.get("payment_seen") or {}),
            model=str(data.get("model", "")),
            tool_call=dict(data.get("tool_call") or {}),
        )


class Model(Protocol):
    """One turn of a Messages-API-shaped conversation; blocks come back as dicts."""

    name: str

    def turn(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The assistant's content blocks for this conversation."""
        ...


class AnthropicModel:
    """The real model through the official SDK (`messages.create` with tools)."""

    def __init__(
        self, api_key: str, *, model: str | None = None, client: Any = None, timeout_s: float = 60
    ) -> None:
        import anthropic  # costs about a second: only a worker that must decide pays it

        self.name = model or os.environ.get(ENV_MODEL) or DEFAULT_MODEL
        self._client: Any = client or anthropic.Anthropic(
            api_key=api_key, timeout=timeout_s, max_retries=2
        )

    def turn(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Ask the model for its next message; `AgentError` says why the call failed."""
        import anthropic

        try:
            reply = self._client.messages.create(
                model=self.name, max_tokens=1024, system=SYSTEM, tools=TOOLS, messages=messages
            )
        except anthropic.APIError as e:
            # A worker reports AgentError as an event; anything else would die unexplained.
            raise AgentError(f"the model call failed ({type(e).__name__}): {e}") from e
        blocks: list[dict[str, Any]] = []
        for block in reply.content:
            if block.type == "text":
                blocks.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                blocks.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
        return blocks


class ScriptedModel:
    """A scripted proposal that acts like a sensible model, through the same tools.

    It reads the payment, then refunds the amount the customer asked for unless the
    payment it read already shows refunds covering it; then it answers without a refund.
    """

    name = "scripted"

    def __init__(self, requested_amount: int) -> None:
        self.requested_amount = requested_amount
        self._turns = 0

    def turn(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The next scripted message."""
        self._turns += 1
        payment = _last_payment_result(messages)
        pi = _payment_intent_asked(messages)
        if payment is None:
            return [
                {"type": "text", "text": "Let me look at the payment first."},
                {
                    "type": "tool_use",
                    "id": f"toolu_scripted_{self._turns}",
                    "name": "get_payment",
                    "input": {"payment_intent": pi},
                },
            ]
        if int(payment.get("amount_refunded", 0)) >= self.requested_amount:
            return [
                {
                    "type": "text",
                    "text": (
                        "The payment already shows "
                        f"{format_amount(payment['amount_refunded'], payment.get('currency'))} "
                        "refunded, which covers the request; no further refund."
                    ),
                }
            ]
        return [
            {"type": "text", "text": "The payment has no refund covering this; refunding."},
            {
                "type": "tool_use",
                "id": f"toolu_scripted_{self._turns}",
                "name": "issue_refund",
                "input": {
                    "payment_intent": payment["id"],
                    "amount": self.requested_amount,
                    "reason": "requested_by_customer",
                },
            },
        ]


def payment_view(payment: Payment) -> dict[str, Any]:
    """The payment as the `get_payment` tool shows it to the model."""
    return {
        "id": payment.id,
        "amount": payment.amount,
        "currency": payment.currency,
        "status": payment.status,
        "amount_refunded": payment.amount_refunded,
        "refunds": [{"id": r.id, "amount": r.amount, "status": r.status} for r in payment.refunds],
    }


def decide(model: Model, payments: Payments, payment_intent: str, request: str) -> Decision:
    """Run the tool-use loop until the model calls `issue_refund` or answers without it."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"{request}\n\nPayment: {payment_intent}"}
    ]
    seen: Payment | None = None
    for _ in range(MAX_TURNS):
        blocks = model.turn(messages)
        messages.append({"role": "assistant", "content": blocks})
        text = " ".join(b["text"] for b in blocks if b["type"] == "text").strip()
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            if seen is None:
                raise AgentError("the model answered without reading the payment")
            return _decision(model, seen, None, text, {})
        results: list[dict[str, Any]] = []
        for use in uses:
            if use["name"] == "get_payment":
                seen = payments.get_payment(payment_intent)
                content = json.dumps(payment_view(seen))
                results.append(
                    {"type": "tool_result", "tool_use_id": use["id"], "content": content}
                )
            elif use["name"] == "issue_refund" and seen is not None:
                amount = int(use["input"]["amount"])
                return _decision(model, seen, amount, text, use)
            else:
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": use["id"],
                        "is_error": True,
                        "content": "Read the payment with get_payment before refunding."
                        if use["name"] == "issue_refund"
                        else f"Unknown tool {use['name']}.",
                    }
                )
        messages.append({"role": "user", "content": results})
    raise AgentError(f"the model did not decide within {MAX_TURNS} turns")


def _decision(
    model: Model, seen: Payment, amount: int | None, text: str, use: Mapping[str, Any]
) -> Decision:
    return Decision(
        payment_intent=seen.id,
        amount=amount,
        reason=str(use.get("input", {}).get("reason", "")) if use else "",
        text=text,
        fingerprint=refunds_fingerprint(seen.refunds),
        payment_seen=payment_view(seen),
        model=model.name,
        tool_call={"name": use["name"], "input": dict(use["input"])} if use else {},
    )


def _last_payment_result(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    for message in reversed(messages):
        if message["role"] != "user" or not isinstance(message["content"], list):
            continue
        for block in message["content"]:
            if block.get("type") == "tool_result" and not block.get("is_error"):
                data: dict[str, Any] = json.loads(block["content"])
                return data
    return None


def _payment_intent_asked(messages: list[dict[str, Any]]) -> str:
    first = messages[0]["content"]
    text = first if isinstance(first, str) else ""
    for word in text.replace(":", " ").split():
        if word.startswith("pi_"):
            return word
    raise AgentError("the request names no payment")
