"""`interlock.otel` under the Pydantic AI guard, the OpenAI Agents SDK guard and the MCP
desk: each framework drives its guarded tool the way a user's agent does (Pydantic AI's
`FunctionModel`, the SDK's `ScriptedModel`, the official `mcp` client in memory), over a
traced gate, and the spans are read back from the SDK's in-memory exporter.

What a user looks for in their trace backend: one `execute_tool <tool>` span per guarded
call, carrying the tool call id the framework gave the call, the gate's steps on it, the
outcome (`unknown` apart from a failure), `error.type` on a failure, and no amount or key.
Two calls of one model turn run at once are two spans that never share a step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")
pytest.importorskip("mcp", reason="the mcp extra is not installed")

import agents as oa_agents
import anyio
import mcp.shared._otel as mcp_otel
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.toolsets import FunctionToolset

from interlock import (
    Gate,
    Intent,
    Lease,
    MemoryStore,
    Owner,
    PaymentsAuthError,
    StripeRefund,
    Timing,
    refunds_fingerprint,
)
from interlock import openai_agents as oa
from interlock import pydantic_ai as pa
from interlock._integrations.tool_calls import reapproval_id
from interlock.mcp import RefundDesk, action_id_for, add_refund_tools, grant_approval
from interlock.otel import action_span_context, traced
from interlock.testing import InProcessPayments, NoLookup
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import GateWorld, gone_owner
from tests.helpers.otel_spans import (
    SCOPE,
    attributes,
    calls,
    event_action_ids,
    gen_ai,
    leaks,
    memory_provider,
    named,
)
from tests.helpers.siblings import HeldReads, Rendezvous

TOOL = "issue_refund"
# Amounts no id, count or hash of a run spells as a whole word: the refund sent, one over
# its approval's cap, and the cap itself.
SENT, CAP, OVER_CAP = 1234, 2345, 4321
MONEY = (SENT, CAP, OVER_CAP)
# The cap of an approval that covers two refunds of SENT; a refund larger than the $100
# payment (Stripe refuses it) and an approval that covers it.
TWIN_CAP, BIG, BIG_CAP = 3 * SENT, 12_345, 15_000


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A tracer provider exporting each span as it ends, and every span it ended."""
    provider, exporter = memory_provider()
    yield provider, exporter
    exporter.shutdown()


def steps(span: ReadableSpan) -> list[str]:
    """The names of the span's step events, in order."""
    return [e.name for e in span.events]


def assert_call_span(
    span: ReadableSpan, *, call_id: str, action_id: str, framework: str | None, outcome: str
) -> None:
    """The span of one guarded call: the GenAI tool call as the framework made it, its
    action, its outcome, and every step of it (none of another call's)."""
    assert gen_ai(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": TOOL,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": call_id,
    }
    a = attributes(span)
    assert a["interlock.action_id"] == action_id
    assert a.get("interlock.framework") == framework
    assert a["interlock.outcome"] == outcome
    # A first attempt reads and checks before its one commit journals it.
    assert steps(span)[0] == "interlock.lookup" and "interlock.journal" in steps(span)
    assert event_action_ids(span) == {action_id}


def assert_in_actions_trace(span: ReadableSpan) -> None:
    """A call made under no span of the caller's (the framework traces nothing in
    OpenTelemetry) is the child of its action's own span context, in the action's trace."""
    action = action_span_context(str(attributes(span)["interlock.action_id"]))
    assert span.context.trace_id == action.trace_id
    assert span.parent is not None and span.parent.span_id == action.span_id


# -- Pydantic AI ----------------------------------------------------------------------------


class Turns:
    """A Pydantic AI `FunctionModel` script: read the payment, then each turn's refund calls
    (a list of amounts, all asked at once in one response), then say what the tool said."""

    def __init__(self, *turns: list[int]) -> None:
        self.turns = turns

    def __call__(self, messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        read = [p for p in returns if p.tool_name == "get_payment"]
        told = [str(p.content) for p in returns if p.tool_name == TOOL]
        if not read:
            return ModelResponse(parts=[ToolCallPart("get_payment", {})])
        done = sum(1 for m in messages if isinstance(m, ModelResponse)) - 1
        if done < len(self.turns):
            seen = str(read[-1].content)
            args = [{"seen": seen, "amount": amount} for amount in self.turns[done]]
            return ModelResponse(parts=[ToolCallPart(TOOL, a) for a in args])
        return ModelResponse(parts=[TextPart(json.dumps(told))])


def pydantic_toolset(
    gate: Gate, payments: InProcessPayments, pi: str, lease: str, **asks: bool
) -> pa.InterlockToolset:
    """The agent's tools, `issue_refund` guarded through `gate` (`asks`: `approval`,
    `reapproval`)."""
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    def get_payment() -> str:
        return refunds_fingerprint(payments.list_refunds(pi))

    @tools.tool_plain
    def issue_refund(seen: str, amount: int) -> str:
        raise AssertionError("the guard sends; the tool's body never runs")

    return pa.InterlockToolset(
        tools,
        gate=gate,
        tool=TOOL,
        intent=lambda a: pa.ToolIntent("refund", pi, a["amount"], lease, a["seen"]),
        **asks,
    )


def pydantic_agent(
    gate: Gate, payments: InProcessPayments, pi: str, lease: str, turns: Turns
) -> Agent[None, str]:
    """A Pydantic AI agent whose `issue_refund` (its toolset wrapped) goes through `gate`."""
    return Agent(FunctionModel(turns), toolsets=[pydantic_toolset(gate, payments, pi, lease)])


def pydantic_calls(messages: list[ModelMessage]) -> list[ToolCallPart]:
    """The guarded tool's calls as the model made them, in order."""
    return [
        p
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_name == TOOL
    ]


async def test_pydantic_ai_each_guarded_call_is_a_span_with_the_models_tool_call_id(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A refund sent, then one over its approval refused: two spans, each with the
    `tool_call_id` of its `ToolCallPart`, its own steps, its outcome (a refusal is no
    error), and no amount in any attribute."""
    provider, exporter = memory
    world = GateWorld()
    lease = world.grant(CAP)
    gate = traced(world.gate(gone_owner()), tracer_provider=provider, tool_name=TOOL)
    agent = pydantic_agent(gate, world.payments, world.pi, lease.id, Turns([SENT], [OVER_CAP]))

    result = await agent.run("refund $12.34, then $43.21")

    told = json.loads(result.output)
    assert told[0].startswith("done") and told[1].startswith("not done, refused"), told
    sent_call, refused_call = pydantic_calls(result.all_messages())
    sent, refused = calls(exporter, TOOL)
    conversation = result.all_messages()[0].conversation_id  # type: ignore[union-attr]
    for span, call, outcome in ((sent, sent_call, "sent"), (refused, refused_call, "refused")):
        assert_call_span(
            span,
            call_id=call.tool_call_id,
            action_id=pa.action_id_for(str(conversation), call.tool_call_id),
            framework="pydantic-ai",
            outcome=outcome,
        )
        assert span.status.status_code is StatusCode.UNSET
        assert_in_actions_trace(span)
    assert "interlock.sending" in steps(sent) and "interlock.sending" not in steps(refused)
    assert leaks(exporter.get_finished_spans(), MONEY) == []


async def test_pydantic_ai_instrumented_the_guards_span_is_inside_pydantic_ais_tool_span(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """With Pydantic AI's own instrumentation on the same provider (`include_content=False`:
    by default it records the call's arguments and answer, amount included), the guard's
    span is the child of Pydantic AI's `execute_tool issue_refund` span, with the same
    `gen_ai.tool.call.id`, in the agent run's trace; no span holds an amount."""
    provider, exporter = memory
    world = GateWorld()
    lease = world.grant(CAP)
    gate = traced(world.gate(gone_owner()), tracer_provider=provider, tool_name=TOOL)
    settings = InstrumentationSettings(tracer_provider=provider, include_content=False)
    agent = Agent(
        FunctionModel(Turns([SENT])),
        toolsets=[pydantic_toolset(gate, world.payments, world.pi, lease.id)],
        capabilities=[Instrumentation(settings=settings)],
    )

    result = await agent.run("refund $12.34")

    [call] = pydantic_calls(result.all_messages())
    [ours] = calls(exporter, TOOL)
    [theirs] = [s for s in named(exporter, f"execute_tool {TOOL}") if s is not ours]
    [run] = named(exporter, "invoke_agent agent")
    assert theirs.instrumentation_scope is not None
    assert theirs.instrumentation_scope.name != SCOPE
    assert ours.parent is not None and ours.parent.span_id == theirs.context.span_id
    assert ours.context.trace_id == run.context.trace_id
    assert gen_ai(ours)["gen_ai.tool.call.id"] == call.tool_call_id
    assert attributes(theirs)["gen_ai.tool.call.id"] == call.tool_call_id
    assert attributes(ours)["interlock.outcome"] == "sent"
    assert leaks(exporter.get_finished_spans(), MONEY) == []


class Twins:
    """A $100 payment, an approval that covers two refunds of SENT, and one traced gate
    (real clock) whose first read of each action waits until both calls have read or been
    told to wait their turn: so the two calls of one turn are inside the gate together."""

    def __init__(self, provider: TracerProvider) -> None:
        self.payments = InProcessPayments()
        self.pi = self.payments.create_payment(10_000).id
        self.store = MemoryStore()
        self.lease = f"lease_{self.pi}"
        now = time.time()
        self.store.grant_lease(
            APPROVER.sign(Lease(self.lease, "refund", self.pi, TWIN_CAP, now + 3600, "s", now))
        )
        rendezvous = Rendezvous(2)
        self.gate = traced(
            Gate(
                self.store,
                HeldReads(StripeRefund(self.payments), rendezvous),
                timing=Timing(6, 1),
                owner=Owner.current("agent"),
                on_event=rendezvous.on_event,
                approvers=APPROVERS,
            ),
            tracer_provider=provider,
            tool_name=TOOL,
        )


def assert_twins(spans: list[ReadableSpan], call_ids: dict[str, str]) -> None:
    """Two calls of one turn at once: one span each, with its own call id and only its own
    steps, one sent and the other refused on a second read, made once the other had the
    target's turn (it waited for it, or found it taken at its commit); neither span inside
    the other."""
    assert len(spans) == 2
    assert {gen_ai(s)["gen_ai.tool.call.id"] for s in spans} == set(call_ids)
    by_outcome = {attributes(s)["interlock.outcome"]: s for s in spans}
    assert set(by_outcome) == {"sent", "refused"}
    for span in spans:
        action_id = call_ids[gen_ai(span)["gen_ai.tool.call.id"]]
        assert attributes(span)["interlock.action_id"] == action_id
        assert event_action_ids(span) == {action_id}
        assert span.parent is None or span.parent.span_id not in {s.context.span_id for s in spans}
    assert steps(by_outcome["refused"]).count("interlock.lookup") == 2
    assert steps(by_outcome["sent"]).count("interlock.lookup") == 1
    assert "interlock.turn_wait" not in steps(by_outcome["sent"])
    assert "interlock.sending" not in steps(by_outcome["refused"])


async def test_pydantic_ai_two_calls_of_one_response_run_at_once_are_two_spans(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Pydantic AI runs the two `issue_refund` calls of one `ModelResponse` at once (each in
    its own worker thread): two spans, never mixed, each with its own `tool_call_id`."""
    provider, exporter = memory
    twins = Twins(provider)
    agent = pydantic_agent(twins.gate, twins.payments, twins.pi, twins.lease, Turns([SENT, SENT]))

    result = await agent.run("refund $12.34 twice")

    conversation = str(result.all_messages()[0].conversation_id)  # type: ignore[union-attr]
    ids = {
        c.tool_call_id: pa.action_id_for(conversation, c.tool_call_id)
        for c in pydantic_calls(result.all_messages())
    }
    assert len(ids) == 2
    assert_twins(calls(exporter, TOOL), ids)
    assert leaks(exporter.get_finished_spans(), [*MONEY, TWIN_CAP]) == []


@pytest.mark.parametrize("outcome", ["unknown", "failed"])
async def test_pydantic_ai_an_unknown_send_is_not_a_failure_and_a_failure_has_its_error_type(
    memory: tuple[TracerProvider, InMemorySpanExporter], outcome: str
) -> None:
    """A 500 after Stripe made the refund, with no lookup to find it: `unknown`, status
    unset, no `error.type` (nobody knows it failed; the model is told not done yet). A
    refund larger than the payment, which Stripe refuses: `failed`, ERROR with
    `error.type` Stripe's code. Neither span holds the amount or Stripe's words."""
    provider, exporter = memory
    world = GateWorld()
    if outcome == "unknown":
        lease, amount = world.grant(CAP), SENT
        world.model.add_fault("error_500", stage="after_commit")
        gate = world.gate(gone_owner(), emulate=NoLookup)
    else:
        lease, amount = world.grant(BIG_CAP), BIG
        gate = world.gate(gone_owner())
    traced(gate, tracer_provider=provider, tool_name=TOOL)
    agent = pydantic_agent(gate, world.payments, world.pi, lease.id, Turns([amount]))

    [told] = json.loads((await agent.run("refund it")).output)

    [span] = calls(exporter, TOOL)
    a = attributes(span)
    assert a["interlock.outcome"] == outcome
    if outcome == "unknown":
        assert told.startswith("not done yet"), told
        assert span.status.status_code is StatusCode.UNSET and "error.type" not in a
        assert "interlock.unknown" in steps(span)
    else:
        assert told.startswith("not done"), told
        assert span.status.status_code is StatusCode.ERROR
        assert a["error.type"] == a["interlock.code"] == "invalid_request_error"
    assert leaks(exporter.get_finished_spans(), [*MONEY, BIG, BIG_CAP]) == []


async def test_pydantic_ai_a_reapproved_call_keeps_the_models_tool_call_id(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A deferred call approved, refused (its approval revoked meanwhile), approved again
    under a new approval: the re-approval runs as a new action (`<action id>+again`), yet
    it is the same tool call, so its span carries the model's `tool_call_id`, not the
    action id's tail."""
    provider, exporter = memory
    world = GateWorld()
    lease = world.grant(CAP)
    gate = traced(world.gate(gone_owner()), tracer_provider=provider, tool_name=TOOL)
    toolset = pydantic_toolset(
        gate, world.payments, world.pi, lease.id, approval=True, reapproval=True
    )
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(Turns([SENT])), toolsets=[toolset], output_type=[str, DeferredToolRequests]
    )

    async def resume(asked: Any, metadata: dict[str, Any] | None = None) -> Any:
        [call] = asked.output.approvals
        results = DeferredToolResults(
            approvals={call.tool_call_id: True},
            metadata={call.tool_call_id: metadata} if metadata is not None else {},
        )
        return await agent.run(message_history=asked.all_messages(), deferred_tool_results=results)

    asked = await agent.run("refund $12.34")
    world.store.revoke_lease(lease.id, "support")
    again = await resume(asked)
    [call] = again.output.approvals
    refused_id = again.output.metadata[call.tool_call_id]["action_id"]
    fresh = world.grant(CAP)
    done = await resume(again, pa.Reapproval(refused_id, fresh.id, "carol").to_dict())

    [told] = json.loads(str(done.output))
    assert told.startswith("done"), told
    by_action = {attributes(s)["interlock.action_id"]: s for s in calls(exporter, TOOL)}
    reapproved = by_action[reapproval_id(refused_id)]
    assert attributes(reapproved)["interlock.outcome"] == "sent"
    assert gen_ai(reapproved)["gen_ai.tool.call.id"] == call.tool_call_id
    assert gen_ai(by_action[refused_id])["gen_ai.tool.call.id"] == call.tool_call_id


# -- OpenAI Agents SDK ------------------------------------------------------------------------

CASE = "case-1"  # the app's name for the conversation (the Agents SDK guard's scope)


def tool_outputs(call: ModelCall) -> dict[str, str]:
    """The function call outputs the scripted model was given, by call id."""
    items = call.input if isinstance(call.input, list) else []
    return {
        str(i["call_id"]): str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


async def run_agents_sdk(
    gate: Gate, payments: InProcessPayments, pi: str, lease: str, *turns: dict[str, int]
) -> list[str]:
    """Run an Agents SDK agent whose guarded `issue_refund` goes through `gate`: it reads
    the payment, then each turn's function calls (call id: amount) at once; returns what
    the tool told it for each call, in call order."""
    guard = oa.ToolGate(gate)

    @oa_agents.function_tool
    def get_payment() -> str:
        """The payment's refunds' fingerprint."""
        return refunds_fingerprint(payments.list_refunds(pi))

    @oa_agents.function_tool(failure_error_function=oa.failure_words)
    async def issue_refund(ctx: ToolContext[Any], seen: str, amount: int) -> str:
        """Refund `amount` cents, given the fingerprint get_payment showed."""
        intent = Intent(oa.tool_action_id(ctx, CASE), "refund", pi, amount, lease, seen)
        return await guard.send(intent)

    def ask(turn: dict[str, int]) -> ModelStep:
        def step(call: ModelCall) -> Any:
            seen = tool_outputs(call)["c_read"]
            return [
                function_call(TOOL, {"seen": seen, "amount": amount}, call_id=call_id)
                for call_id, amount in turn.items()
            ]

        return ModelStep.respond(step)

    def say(call: ModelCall) -> Any:
        return [assistant_message(json.dumps(tool_outputs(call)))]

    model = ScriptedModel(
        [
            [function_call("get_payment", {}, call_id="c_read")],
            *(ask(turn) for turn in turns),
            ModelStep.respond(say),
        ]
    )
    agent = oa_agents.Agent("refunds", model=model, tools=[get_payment, issue_refund])
    config = oa_agents.RunConfig(tracing_disabled=True)
    result = await oa_agents.Runner.run(agent, "refund it", run_config=config)
    told = json.loads(str(result.final_output))
    return [told[call_id] for turn in turns for call_id in turn]


async def test_openai_agents_each_guarded_call_is_a_span_with_the_function_call_id(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A refund sent, then one over its approval refused: two spans, each with the
    `call_id` of its function call, its own steps, its outcome, and no amount."""
    provider, exporter = memory
    world = GateWorld()
    lease = world.grant(CAP)
    gate = traced(world.gate(gone_owner()), tracer_provider=provider, tool_name=TOOL)

    told = await run_agents_sdk(
        gate, world.payments, world.pi, lease.id, {"c_sent": SENT}, {"c_over": OVER_CAP}
    )

    assert told[0].startswith("done") and told[1].startswith("not done, refused"), told
    sent, refused = calls(exporter, TOOL)
    for span, call_id, outcome in ((sent, "c_sent", "sent"), (refused, "c_over", "refused")):
        assert_call_span(
            span,
            call_id=call_id,
            action_id=oa.action_id_for(CASE, call_id),
            framework="openai-agents",
            outcome=outcome,
        )
        assert span.status.status_code is StatusCode.UNSET
        assert_in_actions_trace(span)
    assert leaks(exporter.get_finished_spans(), MONEY) == []


async def test_openai_agents_two_function_calls_of_one_turn_run_at_once_are_two_spans(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """The SDK runs the two `issue_refund` function calls of one turn at once: two spans,
    never mixed, each with its own `call_id`."""
    provider, exporter = memory
    twins = Twins(provider)
    turn = {"c_refund_0": SENT, "c_refund_1": SENT}

    await run_agents_sdk(twins.gate, twins.payments, twins.pi, twins.lease, turn)

    assert_twins(calls(exporter, TOOL), {c: oa.action_id_for(CASE, c) for c in turn})
    assert leaks(exporter.get_finished_spans(), [*MONEY, TWIN_CAP]) == []


async def test_openai_agents_a_guard_that_raises_is_an_error_span_and_the_model_is_told(
    memory: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Stripe refuses the key mid-send (`PaymentsAuthError`): the SDK answers the model
    with `failure_words` (not known, do not retry), and the call's span and its send span
    end ERROR with `error.type` naming the error; the key is in no attribute."""
    provider, exporter = memory
    world = GateWorld()
    lease = world.grant(CAP)
    gate = traced(world.gate(gone_owner()), tracer_provider=provider, tool_name=TOOL)

    def refuse(*_: Any, **__: Any) -> Any:
        raise PaymentsAuthError("create refund", 401, "Invalid API Key provided: sk_test_****1234")

    gate.effect.send = refuse  # type: ignore[method-assign]

    [told] = await run_agents_sdk(gate, world.payments, world.pi, lease.id, {"c_key": SENT})

    assert "do not" in told.lower() and "Please try again" not in told, told
    [span] = calls(exporter, TOOL)
    [send] = named(exporter, "interlock.send")
    assert gen_ai(span)["gen_ai.tool.call.id"] == "c_key"
    for s in (span, send):
        assert s.status.status_code is StatusCode.ERROR
        assert attributes(s)["error.type"] == "PaymentsAuthError"
    assert send.parent is not None and send.parent.span_id == span.context.span_id
    assert leaks(exporter.get_finished_spans(), MONEY) == []


# -- the MCP desk -----------------------------------------------------------------------------

HAND = 777  # a refund made by hand, from the dashboard


class Desk:
    """An MCP server with the refund tools over a desk whose gate is traced, and the MCP
    SDK's own server spans (`tools/call issue_refund`, on by default in the SDK, sent to the
    global tracer provider) sent to the test's provider instead."""

    def __init__(self, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch) -> None:
        # The SDK's spans go to the tracer its `_otel` module took from the global provider;
        # the global one can be set once per process, so the test points that tracer here.
        monkeypatch.setattr(mcp_otel, "_tracer", provider.get_tracer("mcp-python-sdk"))
        self.payments = InProcessPayments()
        self.store = MemoryStore()
        self.desk = RefundDesk(
            self.payments,
            self.store,
            timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
            approvers=APPROVERS,
        )
        traced(self.desk.gate, tracer_provider=provider, tool_name=TOOL)
        self.server = MCPServer("refunds", log_level="WARNING")
        add_refund_tools(self.server, self.desk)

    def payment(self, cap: int) -> str:
        """A new $100 payment, approved for refunds up to `cap`."""
        pi = self.payments.create_payment(10_000).id
        grant_approval(self.store, pi, cap, hours=1, by="ana", approver=APPROVER)
        return pi


async def mcp_read(client: Client, pi: str) -> str:
    """The refunds fingerprint `get_payment` shows the model."""
    seen = await client.call_tool("get_payment", {"payment_intent": pi})
    assert isinstance(seen.structured_content, dict), seen
    return str(seen.structured_content["refunds_fingerprint"])


async def mcp_refund(
    client: Client, pi: str, amount: int, request_id: str, seen: str | None = None
) -> dict[str, Any]:
    """Refund `amount` under `request_id`, passing the fingerprint read (`seen`, else a
    read right now: the SDK's in-memory client keeps no session); the structured answer."""
    args = {
        "payment_intent": pi,
        "amount": amount,
        "request_id": request_id,
        "refunds_fingerprint": seen if seen is not None else await mcp_read(client, pi),
    }
    result = await client.call_tool(TOOL, args)
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def mcp_parent(span: ReadableSpan, exporter: InMemorySpanExporter) -> ReadableSpan:
    """The MCP SDK's `tools/call issue_refund` span the call's span sits under."""
    [parent] = [
        s
        for s in named(exporter, f"tools/call {TOOL}")
        if span.parent is not None and s.context.span_id == span.parent.span_id
    ]
    return parent


async def test_the_mcp_desks_calls_are_spans_under_the_mcp_servers_tools_call_spans(
    memory: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the official `mcp` client: a refund sent, one refused (a hand refund after
    its read), one Stripe refuses (larger than what is left): one span each, its call id
    the desk's action id of the model's request_id, a child of the MCP SDK's own
    `tools/call issue_refund` span for that request; `failed` is the only ERROR, and no
    amount is in any span, the SDK's included."""
    provider, exporter = memory
    desk = Desk(provider, monkeypatch)
    pi = desk.payment(BIG_CAP)

    async with Client(desk.server) as client:
        sent = await mcp_refund(client, pi, SENT, "req-sent-0001")
        stale = await mcp_read(client, pi)
        desk.payments.create_refund(pi, HAND)
        refused = await mcp_refund(client, pi, SENT, "req-stale-0002", stale)
        failed = await mcp_refund(client, pi, BIG, "req-large-0003")

    assert [sent["status"], refused["status"], failed["status"]] == ["sent", "refused", "failed"]
    spans = calls(exporter, TOOL)
    assert len(spans) == 3
    requests = set()
    asked = [("req-sent-0001", "sent"), ("req-stale-0002", "refused"), ("req-large-0003", "failed")]
    for span, (rid, outcome) in zip(spans, asked, strict=True):
        action_id = action_id_for(pi, rid)
        assert_call_span(
            span, call_id=action_id, action_id=action_id, framework="mcp", outcome=outcome
        )
        server = mcp_parent(span, exporter)
        assert attributes(server)["gen_ai.tool.name"] == TOOL
        requests.add(attributes(server)["jsonrpc.request.id"])
    assert len(requests) == 3, "each call under its own MCP request"
    assert [s.status.status_code for s in spans] == [
        StatusCode.UNSET,
        StatusCode.UNSET,
        StatusCode.ERROR,
    ]
    assert attributes(spans[2])["error.type"] == "invalid_request_error"
    assert leaks(exporter.get_finished_spans(), [*MONEY, HAND, BIG, BIG_CAP]) == []


async def test_two_mcp_tool_calls_at_once_are_two_spans_each_under_its_request(
    memory: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `issue_refund` calls sent at once (the SDK runs each in a worker thread; the
    desk takes them one at a time at the gate): two spans, each with its own action, only
    its own steps, under its own MCP request's span."""
    provider, exporter = memory
    desk = Desk(provider, monkeypatch)
    payments = [desk.payment(CAP), desk.payment(CAP)]
    answers: dict[str, dict[str, Any]] = {}

    async with Client(desk.server) as client:

        async def refund(pi: str) -> None:
            answers[pi] = await mcp_refund(client, pi, SENT, f"req-{pi}")

        async with anyio.create_task_group() as tg:
            for pi in payments:
                tg.start_soon(refund, pi)

    assert [answers[pi]["status"] for pi in payments] == ["sent", "sent"]
    spans = calls(exporter, TOOL)
    by_action = {attributes(s)["interlock.action_id"]: s for s in spans}
    assert set(by_action) == {action_id_for(pi, f"req-{pi}") for pi in payments}
    for action_id, span in by_action.items():
        assert gen_ai(span)["gen_ai.tool.call.id"] == action_id
        assert attributes(span)["interlock.framework"] == "mcp"
        assert event_action_ids(span) == {action_id}
    parents = {attributes(mcp_parent(s, exporter))["jsonrpc.request.id"] for s in spans}
    assert len(parents) == 2
