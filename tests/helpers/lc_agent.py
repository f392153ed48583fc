"""Test helper: a LangChain v1 agent whose refund tool is guarded by `interlock.langchain`.

As a module it gives the parts the unit tests build agents from: `ScriptedModel`, a chat
model that plays the refund conversation from the messages it is given (read the payment,
refund $20, then say what the tool answered), and `refund_agent`. As a process it is the
agent the end-to-end test kills:

    python -m tests.helpers.lc_agent STORE CHECKPOINTS STRIPE_BASE THREAD PAYMENT CRASH [recover]

`CRASH` is `none` or a gate event (`before-send`, `after-answer`): on reaching it the
process prints `{"event": "crash-point", ...}` and blocks until it is SIGKILLed. With an
existing thread in CHECKPOINTS it resumes that thread (`invoke(None, ...)`, LangGraph's
own way), else it starts one. With `recover` it starts as the guide's restarted worker
does: `gate.recover()` first (`{"event": "recovered", "outcomes": [...]}`), then the
resume. It prints one JSON line per gate event, then `{"event": "done", ...}` with the
guarded tool's answer and the model's last words.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from interlock import (
    UNSIGNED_APPROVALS,
    Event,
    Gate,
    Owner,
    Payments,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    refunds_fingerprint,
)
from interlock.langchain import InterlockMiddleware, ToolIntent, seen

AMOUNT = 2_000
TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)


class ScriptedModel(BaseChatModel):
    """An offline chat model that plays one refund conversation from its messages.

    No tool answer yet: it calls `get_payment` on the payment the user named. After the
    read: `issue_refund` of $20. After the refund's answer: a last message repeating it.
    Every tool call gets a fresh random id, so a model turn that ran again would be a new
    decision with a new id: only a resumed checkpoint reaches the same call.
    """

    turns: int = 0

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        """The script knows its tools; binding changes nothing."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.turns += 1
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        payment = _payment_named(messages)
        if not answers:
            reply = _call("get_payment", {"payment_intent": payment})
        elif answers[-1].name == "get_payment":
            reply = _call("issue_refund", {"payment_intent": payment, "amount": AMOUNT})
        else:
            reply = AIMessage(f"The refund tool said: {answers[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "interlock-scripted"


def _payment_named(messages: Sequence[BaseMessage]) -> str:
    for m in messages:
        if isinstance(m, HumanMessage) and (found := re.search(r"pi_\w+", str(m.content))):
            return found.group()
    raise ValueError("the user's message names no payment (pi_...)")


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}"}]
    )


def refund_tools(payments: Payments) -> list[Any]:
    """`get_payment` (text plus the `seen` artifact) and `issue_refund` (never run)."""

    @tool(response_format="content_and_artifact")
    def get_payment(payment_intent: str) -> tuple[str, dict[str, Any]]:
        """Read a payment and its refunds."""
        p = payments.get_payment(payment_intent)
        text = f"{p.id}: {p.amount} cents, refunded {p.amount_refunded}, {len(p.refunds)} refunds"
        return text, seen(p.id, refunds_fingerprint(p.refunds), p.currency)

    @tool
    def issue_refund(payment_intent: str, amount: int) -> str:
        """Refund `amount` cents of a payment the customer was charged."""
        raise RuntimeError("issue_refund runs through InterlockMiddleware, never on its own")

    return [get_payment, issue_refund]


def refund_intent(args: Mapping[str, Any]) -> ToolIntent:
    """The refund the call asks for, under the payment's approval `lease_<payment>`."""
    return ToolIntent(
        "refund", args["payment_intent"], args["amount"], f"lease_{args['payment_intent']}"
    )


def refund_agent(
    gate: Gate,
    payments: Payments,
    checkpointer: BaseCheckpointSaver[Any],
    *,
    approval: bool = False,
    reapproval: bool = False,
    model: ScriptedModel | None = None,
) -> Any:
    """The agent: the scripted model, both tools, the guard, the checkpointer."""
    return create_agent(
        model if model is not None else ScriptedModel(),
        refund_tools(payments),
        middleware=[
            InterlockMiddleware(
                gate,
                tool="issue_refund",
                intent=refund_intent,
                read_tool="get_payment",
                approval=approval,
                reapproval=reapproval,
            )
        ],
        checkpointer=checkpointer,
    )


def emit(kind: str, **data: Any) -> None:
    """One JSON line on stdout, flushed before anything else can happen."""
    print(json.dumps({"event": kind, **data}, default=str), flush=True)


def _listener(crash_at: str) -> Callable[[str, Mapping[str, Any]], None]:
    def on_event(event: Event) -> None:
        emit("gate", step=event.kind, action_id=event.action_id)
        if event.kind == crash_at:
            emit("crash-point", at=event.kind, pid=os.getpid())
            threading.Event().wait()  # until the test's SIGKILL

    return on_event


def main(
    store_path: str,
    checkpoints: str,
    base_url: str,
    thread: str,
    payment: str,
    crash_at: str,
    restart: str = "",
) -> int:
    """Run or resume the thread once; see the module docstring."""
    payments = StripePayments(
        make_stripe_client(
            os.environ["STRIPE_SECRET_KEY"], timeout_s=TIMING.stripe_timeout_s, base_url=base_url
        )
    )
    store = SQLiteStore(store_path)
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=TIMING,
        owner=Owner.current(f"lc-agent-{os.getpid()}"),
        on_event=_listener(crash_at),
        approvers=UNSIGNED_APPROVALS,
    )
    if restart == "recover":  # the guide's restart: finish what a dead worker left, first
        outcomes = [{"action_id": o.action_id, "status": o.status} for o in gate.recover()]
        emit("recovered", outcomes=outcomes)
    config = {"configurable": {"thread_id": thread}}
    with sqlite3.connect(checkpoints, check_same_thread=False) as conn:
        saver = SqliteSaver(conn)
        agent = refund_agent(gate, payments, saver)
        resuming = saver.get_tuple(config) is not None
        emit("start", pid=os.getpid(), resuming=resuming)
        ask = None if resuming else {"messages": [HumanMessage(f"Refund $20 on {payment}.")]}
        result = agent.invoke(ask, config, durability="sync")
    answer = next(
        m
        for m in reversed(result["messages"])
        if isinstance(m, ToolMessage) and m.name == "issue_refund"
    )
    emit(
        "done",
        status=answer.status,
        words=answer.content,
        outcome=answer.artifact,
        said=result["messages"][-1].content,
    )
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
