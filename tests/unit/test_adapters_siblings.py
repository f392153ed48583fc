"""Each framework guard under its framework's own parallel tool execution: one model turn
asks for the same $20 refund twice (two tool calls, one fingerprint), under an approval
whose cap covers both.

Pydantic AI, the OpenAI Agents SDK and LangGraph's tool node run a turn's tool calls at
once; the guards run each through one shared gate in a worker thread. Without the
payment's turn both calls read the refunds before either lands and both send. The gate's
effect holds each call's first read until every call has read or been told to wait its
turn (`tests/helpers/siblings.py`), so the old race is certain, not a matter of timing.
With the turn: one refund, and the model is told the second was refused.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")
pytest.importorskip("langchain", reason="the langchain extra is not installed")

import agents as oa_agents
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    Owner,
    StripeRefund,
    Timing,
    refunds_fingerprint,
)
from interlock import openai_agents as oa
from interlock import pydantic_ai as pa
from interlock.testing import InProcessPayments
from tests.helpers import lc_agent
from tests.helpers.siblings import HeldReads, Rendezvous

AMOUNT = 2_000
CALLS = 2


class Twins:
    """A $100 payment, an approval whose cap covers both calls, and one gate whose reads
    wait at a rendezvous of the two calls."""

    def __init__(self) -> None:
        self.payments = InProcessPayments()
        self.pi = self.payments.create_payment(10_000).id
        self.store = MemoryStore()
        # `lease_<payment>`: the approval tests/helpers/lc_agent.py's calls name.
        self.lease = f"lease_{self.pi}"
        now = time.time()
        cap = (CALLS + 1) * AMOUNT
        self.store.grant_lease(Lease(self.lease, "refund", self.pi, cap, now + 3600, "s", now))
        rendezvous = Rendezvous(CALLS)
        self.gate = Gate(
            self.store,
            HeldReads(StripeRefund(self.payments), rendezvous),
            timing=Timing(6, 1),
            owner=Owner.current("agent"),
            on_event=rendezvous.on_event,
        )

    def fingerprint(self) -> str:
        return refunds_fingerprint(self.payments.list_refunds(self.pi))

    def intent(self, action_id: str, seen: str) -> Intent:
        return Intent(action_id, "refund", self.pi, AMOUNT, self.lease, seen)

    def check(self, answers: list[str]) -> None:
        """One refund at Stripe; one call told done, the other told not done, because the
        refunds changed."""
        refunds = self.payments.list_refunds(self.pi)
        assert [(r.amount, ACTION_METADATA_KEY in r.metadata) for r in refunds] == [(AMOUNT, True)]
        done, refused = sorted(answers)
        assert done.startswith("done: refunded $20.00"), answers
        assert refused.startswith("not done") and REASON_WORLD_CHANGED in refused, answers


async def test_pydantic_ai_two_refund_calls_of_one_response_refund_once() -> None:
    """Pydantic AI runs the two `issue_refund` calls of one `ModelResponse` at once."""
    twins = Twins()

    def script(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("get_payment", {})])
        if len(returns) == 1:
            seen = str(returns[0].content)
            calls = [ToolCallPart("issue_refund", {"seen": seen}) for _ in range(CALLS)]
            return ModelResponse(parts=list(calls))
        told = [str(p.content) for p in returns if p.tool_name == "issue_refund"]
        return ModelResponse(parts=[TextPart(json.dumps(told))])

    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    def get_payment() -> str:
        return twins.fingerprint()

    @tools.tool_plain
    def issue_refund(seen: str) -> str:
        raise AssertionError("the guard sends; the tool's body never runs")

    guarded = pa.InterlockToolset(
        tools,
        gate=twins.gate,
        tool="issue_refund",
        intent=lambda a: pa.ToolIntent("refund", twins.pi, AMOUNT, twins.lease, a["seen"]),
    )
    result = await Agent(FunctionModel(script), toolsets=[guarded]).run("refund $20")

    twins.check(json.loads(str(result.output)))


async def test_openai_agents_two_function_calls_of_one_turn_refund_once() -> None:
    """The Agents SDK runs the two `issue_refund` function calls of one turn at once."""
    twins = Twins()
    guard = oa.ToolGate(twins.gate)

    @oa_agents.function_tool
    def get_payment() -> str:
        """The payment's refunds' fingerprint."""
        return twins.fingerprint()

    @oa_agents.function_tool
    async def issue_refund(ctx: ToolContext[Any], seen: str) -> str:
        """Refund $20, given the fingerprint get_payment showed."""
        return await guard.send(twins.intent(oa.tool_action_id(ctx, "case-1"), seen))

    def outputs(call: ModelCall) -> dict[str, str]:
        items = call.input if isinstance(call.input, list) else []
        return {
            str(i["call_id"]): str(i["output"])
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }

    def ask_twice(call: ModelCall) -> Any:
        seen = outputs(call)["c_read"]
        return [
            function_call("issue_refund", {"seen": seen}, call_id=f"c_refund_{i}")
            for i in range(CALLS)
        ]

    def say(call: ModelCall) -> Any:
        told = [v for k, v in outputs(call).items() if k.startswith("c_refund_")]
        return [assistant_message(json.dumps(told))]

    model = ScriptedModel(
        [
            [function_call("get_payment", {}, call_id="c_read")],
            ModelStep.respond(ask_twice),
            ModelStep.respond(say),
        ]
    )
    agent = oa_agents.Agent("refunds", model=model, tools=[get_payment, issue_refund])
    config = oa_agents.RunConfig(tracing_disabled=True)
    result = await oa_agents.Runner.run(agent, "refund $20", run_config=config)

    twins.check(json.loads(str(result.final_output)))


class _TwinRefunds(lc_agent.ScriptedModel):
    """The refund conversation with one turn that asks for the refund twice."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        if answers and answers[-1].name == "get_payment":
            payment = lc_agent._payment_named(messages)
            calls = [
                {
                    "name": "issue_refund",
                    "args": {"payment_intent": payment, "amount": AMOUNT},
                    "id": f"call_twin_{i}",
                }
                for i in range(CALLS)
            ]
            return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=calls))])
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize("path", ["invoke", "ainvoke"])
async def test_langgraph_two_tool_calls_of_one_ai_message_refund_once(path: str) -> None:
    """LangGraph's tool node runs the two `issue_refund` calls of one `AIMessage` at once
    (threads for `invoke`, tasks for `ainvoke`), each through `InterlockMiddleware`."""
    twins = Twins()
    agent = lc_agent.refund_agent(twins.gate, twins.payments, InMemorySaver(), model=_TwinRefunds())
    ask = {"messages": [HumanMessage(f"Refund $20 on {twins.pi}.")]}
    config: Any = {"configurable": {"thread_id": f"thread-{path}"}}

    if path == "invoke":
        result = agent.invoke(ask, config)
    else:
        result = await agent.ainvoke(ask, config)

    told = [
        str(m.content)
        for m in result["messages"]
        if isinstance(m, ToolMessage) and m.name == "issue_refund"
    ]
    twins.check(told)
