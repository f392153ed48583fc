"""Test helper: an agent process whose refund tool is guarded by a framework adapter.

    python tests/helpers/adapter_agent.py FRAMEWORK PHASE STATE STORE BASE_URL PAYMENT LEASE [CRASH]

FRAMEWORK is `pydantic-ai` or `openai-agents`; the model is the framework's own offline
test model (Pydantic AI's `FunctionModel`, the Agents SDK's `ScriptedModel`), scripted to
read the payment and then ask for $20 back with the fingerprint it was shown. Payments go
through the real `stripe` SDK to the emulator at BASE_URL (key from `STRIPE_SECRET_KEY`).

- `decide`: runs the agent until the refund tool asks for approval, saves the framework's
  own state to STATE (Pydantic AI: the message history as JSON; the SDK: `RunState`
  JSON), prints `saved`.
- `resume`: loads STATE, approves the refund and runs on, the framework's own resume.
  With CRASH (a gate event: `before-send`, `after-answer`), it prints `crash-point CRASH`
  and SIGKILLs itself when the gate reaches it. Otherwise it prints one JSON line: the
  action id the tool used and the model's final answer (which quotes the tool's words).
- `restart`: a restarted worker as the guides show it: `gate.recover()` first (what it
  finished is in the JSON line, `recovered`), then `resume`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

# Both frameworks at module level: their tools' annotations are resolved against it.
import agents as oa_agents
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from interlock import (
    UNSIGNED_APPROVALS,
    Event,
    Gate,
    GateEvent,
    Intent,
    SQLiteStore,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
    refunds_fingerprint,
)
from interlock import openai_agents as oa
from interlock import pydantic_ai as pa

TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
AMOUNT = 2_000
SCOPE = "case-1"  # the app's name for the conversation (openai-agents)


class Rig:
    """The gate, the payments and the tool bodies both frameworks' tools call."""

    def __init__(self, store: str, base_url: str, payment: str, lease: str, crash: str | None):
        client = make_stripe_client(os.environ["STRIPE_SECRET_KEY"], timeout_s=1, base_url=base_url)
        self.payments = StripePayments(client)
        self.payment = payment
        self.lease = lease
        self.crash = crash
        self.action_ids: list[str] = []
        self.gate = Gate(
            SQLiteStore(store),
            StripeRefund(self.payments),
            timing=TIMING,
            on_event=self.on_event,
            approvers=UNSIGNED_APPROVALS,
        )

    def on_event(self, event: Event) -> None:
        if event.kind is GateEvent.JOURNALED and event.action_id not in self.action_ids:
            self.action_ids.append(event.action_id)
        if event.kind == self.crash:
            print(f"crash-point {self.crash}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def read(self, payment_intent: str) -> str:
        refunds = self.payments.list_refunds(payment_intent)
        return json.dumps(
            {
                "payment_intent": payment_intent,
                "refunds": [{"id": r.id, "amount": r.amount} for r in refunds],
                "refunds_fingerprint": refunds_fingerprint(refunds),
            }
        )

    def intent(self, action_id: str, payment_intent: str, amount: int, seen: str) -> Intent:
        return Intent(action_id, "refund", payment_intent, amount, self.lease, seen)


def fingerprint_in(tool_output: str) -> str:
    return str(json.loads(tool_output)["refunds_fingerprint"])


async def pydantic_ai(rig: Rig, phase: str, state: Path) -> dict[str, Any]:
    def script(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        returns = {
            p.tool_name: p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        }
        if "get_payment" not in returns:
            args = {"payment_intent": rig.payment}
            return ModelResponse(parts=[ToolCallPart("get_payment", args)])
        if "issue_refund" not in returns:
            seen = fingerprint_in(str(returns["get_payment"].content))
            args = {"payment_intent": rig.payment, "amount": AMOUNT, "refunds_fingerprint": seen}
            return ModelResponse(parts=[ToolCallPart("issue_refund", args)])
        return ModelResponse(
            parts=[TextPart(f"issue_refund said: {returns['issue_refund'].content}")]
        )

    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    def get_payment(payment_intent: str) -> str:
        return rig.read(payment_intent)

    @tools.tool_plain
    def issue_refund(payment_intent: str, amount: int, refunds_fingerprint: str) -> str:
        raise AssertionError("the guard sends; the tool's body never runs")

    guarded = pa.InterlockToolset(
        tools,
        gate=rig.gate,
        tool="issue_refund",
        intent=lambda a: pa.ToolIntent(
            "refund", a["payment_intent"], a["amount"], rig.lease, a["refunds_fingerprint"]
        ),
        approval=True,
    )
    agent = Agent(
        FunctionModel(script), toolsets=[guarded], output_type=[str, DeferredToolRequests]
    )

    if phase == "decide":
        result = await agent.run(f"The customer on {rig.payment} wants $20 back.")
        assert isinstance(result.output, DeferredToolRequests), result.output
        state.write_bytes(result.all_messages_json())
        return {"saved": [c.tool_call_id for c in result.output.approvals]}
    history = ModelMessagesTypeAdapter.validate_json(state.read_bytes())
    pending = [
        p.tool_call_id
        for p in history[-1].parts
        if isinstance(history[-1], ModelResponse) and isinstance(p, ToolCallPart)
    ]
    approved = DeferredToolResults(approvals=dict.fromkeys(pending, True))
    result = await agent.run(message_history=history, deferred_tool_results=approved)
    return {"action_ids": rig.action_ids, "final": str(result.output)}


async def openai_agents(rig: Rig, phase: str, state: Path) -> dict[str, Any]:
    oa_agents.set_tracing_disabled(True)
    config = oa_agents.RunConfig(tracing_disabled=True)
    guard = oa.ToolGate(rig.gate)

    def outputs(call: ModelCall) -> dict[str, str]:
        items = call.input if isinstance(call.input, list) else []
        return {
            str(i["call_id"]): str(i["output"])
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }

    def ask_refund(call: ModelCall) -> Any:
        seen = fingerprint_in(outputs(call)["call_read"])
        args = {"payment_intent": rig.payment, "amount": AMOUNT, "refunds_fingerprint": seen}
        return [function_call("issue_refund", args, call_id="call_refund")]

    def answer(call: ModelCall) -> Any:
        return [assistant_message(f"issue_refund said: {outputs(call)['call_refund']}")]

    @oa_agents.function_tool
    def get_payment(payment_intent: str) -> str:
        """The payment, its refunds and their fingerprint."""
        return rig.read(payment_intent)

    @oa_agents.function_tool(needs_approval=True)
    async def issue_refund(
        ctx: ToolContext[Any], payment_intent: str, amount: int, refunds_fingerprint: str
    ) -> str:
        """Refund `amount` cents of the payment, given the fingerprint get_payment showed."""
        return await guard.send(
            rig.intent(oa.tool_action_id(ctx, SCOPE), payment_intent, amount, refunds_fingerprint)
        )

    if phase == "decide":
        read = [function_call("get_payment", {"payment_intent": rig.payment}, call_id="call_read")]
        model = ScriptedModel([read, ModelStep.respond(ask_refund)])
        agent = oa_agents.Agent("refunds", model=model, tools=[get_payment, issue_refund])
        result = await oa_agents.Runner.run(
            agent, f"Refund $20 on {rig.payment}.", run_config=config
        )
        assert result.interruptions, result.final_output
        state.write_text(json.dumps(result.to_state().to_json()))
        return {"saved": [i.tool_name for i in result.interruptions]}
    model = ScriptedModel([ModelStep.respond(answer)])
    agent = oa_agents.Agent("refunds", model=model, tools=[get_payment, issue_refund])
    run_state = await oa_agents.RunState.from_json(agent, json.loads(state.read_text()))
    for item in run_state.get_interruptions():
        run_state.approve(item)
    result = await oa_agents.Runner.run(agent, run_state, run_config=config)
    return {"action_ids": rig.action_ids, "final": str(result.final_output)}


def main(argv: list[str]) -> int:
    framework, phase, state, store, base_url, payment, lease = argv[:7]
    rig = Rig(store, base_url, payment, lease, argv[7] if len(argv) > 7 else None)
    run = {"pydantic-ai": pydantic_ai, "openai-agents": openai_agents}[framework]
    recovered = []
    if phase == "restart":  # the guides' restart: recover() before any run resumes
        recovered = [[o.action_id, o.status] for o in rig.gate.recover()]
        phase = "resume"
    report = asyncio.run(run(rig, phase, Path(state)))
    print(json.dumps({**report, "recovered": recovered}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
