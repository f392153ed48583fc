"""The framework guards in one process, on the gate rig (in-memory Stripe, fake clock).

Each framework runs with its own offline test model: the resume of one approved refund
call names the same action (one refund, told done twice), and a hand refund made after
the model read the payment is refused in words the model sees. The crash-and-restart
proof with real processes is in `tests/e2e/test_adapter_*.py`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")

import agents as oa_agents
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from interlock import (
    ACTION_METADATA_KEY,
    REASON_WORLD_CHANGED,
    Intent,
    Owner,
    new_action_id,
    refunds_fingerprint,
)
from interlock import openai_agents as oa
from interlock import pydantic_ai as pa
from tests.helpers.approvals import APPROVER
from tests.helpers.gate_rig import AMOUNT, GateWorld, gone_owner


class World(GateWorld):
    """The rig with a $20 approval and the read both frameworks' tools share."""

    def __init__(self) -> None:
        super().__init__()
        self.lease = self.grant(AMOUNT)

    def read(self) -> str:
        refunds = self.refunds()
        return json.dumps({"refunds_fingerprint": refunds_fingerprint(refunds)})

    def intent(self, action_id: str, amount: int, seen: str) -> Intent:
        return Intent(action_id, "refund", self.pi, amount, self.lease.id, seen)


def pydantic_agent(
    world: World, *, reapproval: bool = False, owner: Owner | None = None
) -> Agent[None, str | DeferredToolRequests]:
    """The model reads the payment and asks for $20 with the fingerprint it was shown; the
    refund tool is guarded by wrapping its toolset."""

    def script(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        seen = {
            p.tool_name: str(p.content)
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        }
        if "get_payment" not in seen:
            return ModelResponse(parts=[ToolCallPart("get_payment", {})])
        if "issue_refund" not in seen:
            fp = json.loads(seen["get_payment"])["refunds_fingerprint"]
            return ModelResponse(parts=[ToolCallPart("issue_refund", {"seen": fp})])
        return ModelResponse(parts=[TextPart(seen["issue_refund"])])

    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    def get_payment() -> str:
        return world.read()

    @tools.tool_plain
    def issue_refund(seen: str) -> str:
        raise AssertionError("the guard sends; the tool's body never runs")

    guarded = pa.InterlockToolset(
        tools,
        gate=world.gate(owner if owner is not None else gone_owner()),
        tool="issue_refund",
        intent=lambda a: pa.ToolIntent("refund", world.pi, AMOUNT, world.lease.id, a["seen"]),
        approval=True,
        reapproval=reapproval,
    )
    return Agent(FunctionModel(script), toolsets=[guarded], output_type=[str, DeferredToolRequests])


async def _pydantic_resume(
    world: World, asked: Any, results: DeferredToolResults, *, reapproval: bool = False
) -> Any:
    agent = pydantic_agent(world, reapproval=reapproval)
    return await agent.run(message_history=asked.all_messages(), deferred_tool_results=results)


def _approve(asked: Any, metadata: dict[str, Any] | None = None) -> DeferredToolResults:
    calls = [c.tool_call_id for c in asked.output.approvals]
    return DeferredToolResults(
        approvals=dict.fromkeys(calls, True),
        metadata={c: metadata for c in calls} if metadata is not None else {},
    )


async def test_pydantic_ai_resume_of_one_call_refunds_once() -> None:
    """Two runs from the same saved history and approval: one action, one refund, done twice."""
    world = World()
    asked = await pydantic_agent(world).run("refund $20")
    assert isinstance(asked.output, DeferredToolRequests)
    [call] = asked.output.approvals
    assert asked.output.metadata[call.tool_call_id]["type"] == pa.APPROVAL_TYPE
    assert world.refunds() == []
    answers = [(await _pydantic_resume(world, asked, _approve(asked))).output for _ in range(2)]
    assert len(world.agent_refunds()) == 1
    assert all(str(a).startswith("done: refunded $20.00") for a in answers), answers
    assert answers[0] == answers[1]


async def test_pydantic_ai_an_exact_approval_of_what_the_person_saw_is_what_runs() -> None:
    """The person signs exactly the deferred call they were shown and approves it under
    that: it is sent under it, once; under the same approval another amount is refused."""
    world = World()
    asked = await pydantic_agent(world).run("refund $20")
    [call] = asked.output.approvals
    question = asked.output.metadata[call.tool_call_id]
    exact = world.store.grant_lease(pa.exact_approval(APPROVER, question))
    answer = pa.Reapproval(question["action_id"], exact.id, "alice").to_dict()

    done = (await _pydantic_resume(world, asked, _approve(asked, answer))).output

    assert str(done).startswith("done: refunded $20.00"), done
    state = world.store.action(question["action_id"])
    assert state is not None and state.intent.lease_id == exact.id
    assert state.intent.metadata["approved_by"] == "alice"
    changed = world.intent(new_action_id(), AMOUNT - 1, refunds_fingerprint(world.refunds()))
    outcome = world.gate(gone_owner()).submit(replace(changed, lease_id=exact.id))
    assert outcome.reason == f"approval is for exactly {AMOUNT}, not {AMOUNT - 1}"
    assert len(world.agent_refunds()) == 1


async def test_pydantic_ai_hand_refund_after_the_read_is_refused_in_words() -> None:
    """A refund by hand between the read and the approval: the model is told refused, why."""
    world = World()
    asked = await pydantic_agent(world).run("refund $20")
    assert isinstance(asked.output, DeferredToolRequests)
    world.payments.create_refund(world.pi, AMOUNT)
    answer = (await _pydantic_resume(world, asked, _approve(asked))).output
    assert world.agent_refunds() == [] and len(world.hand_refunds()) == 1
    assert str(answer).startswith(f"not done, refused: {REASON_WORLD_CHANGED}")


async def _refused_and_asked_again(world: World) -> tuple[Any, Any, dict[str, Any]]:
    """Approved, then revoked before the resume: the refusal defers the call again."""
    asked = await pydantic_agent(world, reapproval=True).run("refund $20")
    world.store.revoke_lease(world.lease.id, "support")
    again = await _pydantic_resume(world, asked, _approve(asked), reapproval=True)
    assert isinstance(again.output, DeferredToolRequests), again.output
    [call] = again.output.approvals
    return asked, again, dict(again.output.metadata[call.tool_call_id])


async def test_pydantic_ai_a_refused_call_is_sent_once_under_a_new_approval() -> None:
    """reapproval=True: the revoked approval's refusal is a new ApprovalRequired naming the
    refused action; approved with a new lease in the metadata, the gate re-approves and
    sends once (a second resume of the same answer finds it), the receipt naming the refusal."""
    world = World()
    _, again, question = await _refused_and_asked_again(world)
    assert question["type"] == pa.REAPPROVAL_TYPE
    assert question["reason"].startswith("approval revoked")
    refused = question["action_id"]
    assert world.refunds() == []

    fresh = world.grant(AMOUNT)
    answer = pa.Reapproval(refused, fresh.id, "carol").to_dict()
    outputs = [
        (await _pydantic_resume(world, again, _approve(again, answer), reapproval=True)).output
        for _ in range(2)
    ]
    assert all(str(o).startswith("done: refunded $20.00") for o in outputs), outputs
    [refund] = world.refunds()
    state = world.store.action(refund.metadata[ACTION_METADATA_KEY])
    assert state is not None and state.receipt is not None
    assert state.intent.lease_id == fresh.id
    assert state.receipt.body["context"] == {"reapproves": refused, "approved_by": "carol"}
    original = world.store.action(refused)
    assert original is not None and original.settlement is not None
    assert original.settlement.status == "refused"


async def test_pydantic_ai_a_declined_reapproval_sends_nothing() -> None:
    """The person denies the second question: Pydantic AI answers the model, nothing is sent."""
    world = World()
    _, again, question = await _refused_and_asked_again(world)
    [call] = again.output.approvals
    denied = DeferredToolResults(approvals={call.tool_call_id: ToolDenied("carol: fraud hold")})
    result = await _pydantic_resume(world, again, denied, reapproval=True)
    assert world.refunds() == []
    assert world.store.actions() == [question["action_id"]]
    assert "fraud hold" in str(result.output)


async def test_pydantic_ai_an_answer_naming_another_action_is_asked_again() -> None:
    """A re-approval that names some other action approves nothing: the call is deferred
    again, naming the refused action, and nothing is sent."""
    world = World()
    _, again, question = await _refused_and_asked_again(world)
    stale = pa.Reapproval("pydantic-ai:other:call", world.grant(AMOUNT).id, "carol").to_dict()
    result = await _pydantic_resume(world, again, _approve(again, stale), reapproval=True)
    assert isinstance(result.output, DeferredToolRequests)
    [call] = result.output.approvals
    assert result.output.metadata[call.tool_call_id]["action_id"] == question["action_id"]
    assert world.refunds() == []


def test_pydantic_ai_action_id_outside_a_tool_call_says_where_to_call_it() -> None:
    """A RunContext with no tool call cannot name an action: a clear error, not a random id."""
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    with pytest.raises(RuntimeError, match="call it inside the tool"):
        pa.tool_action_id(ctx)


def openai_agent(
    world: World, steps: list[Any], *, guarded_failures: bool = True
) -> oa_agents.Agent[Any]:
    """The agent of the guide: its refund tool answers an exception in the guard's words
    (`failure_words`), or in the SDK's default ones with `guarded_failures=False`."""
    guard = oa.ToolGate(world.gate(gone_owner()))

    @oa_agents.function_tool
    def get_payment() -> str:
        """The payment's refunds' fingerprint."""
        return world.read()

    failures: Any = {"failure_error_function": oa.failure_words} if guarded_failures else {}

    @oa_agents.function_tool(needs_approval=True, **failures)
    async def issue_refund(ctx: ToolContext[Any], seen: str) -> str:
        """Refund $20, given the fingerprint get_payment showed."""
        intent = world.intent(oa.tool_action_id(ctx, "case-1"), AMOUNT, seen)
        return await guard.send(intent, again=oa.reapproval_in(ctx))

    model = ScriptedModel(steps)
    return oa_agents.Agent("refunds", model=model, tools=[get_payment, issue_refund])


def _outputs(call: ModelCall) -> dict[str, str]:
    items = call.input if isinstance(call.input, list) else []
    return {
        str(i["call_id"]): str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


async def _openai_decide(world: World, config: oa_agents.RunConfig) -> dict[str, Any]:
    def ask(call: ModelCall) -> Any:
        fp = json.loads(_outputs(call)["c_read"])["refunds_fingerprint"]
        return [function_call("issue_refund", {"seen": fp}, call_id="c_refund")]

    read = [function_call("get_payment", {}, call_id="c_read")]
    agent = openai_agent(world, [read, ModelStep.respond(ask)])
    result = await oa_agents.Runner.run(agent, "refund $20", run_config=config)
    assert result.interruptions
    return result.to_state().to_json()


async def _openai_resume(
    world: World,
    saved: dict[str, Any],
    config: oa_agents.RunConfig,
    *,
    again: oa.Reapproval | None = None,
    approve: bool = True,
    guarded_failures: bool = True,
) -> str:
    def say(call: ModelCall) -> Any:
        return [assistant_message(_outputs(call)["c_refund"])]

    agent = openai_agent(world, [ModelStep.respond(say)], guarded_failures=guarded_failures)
    context = None if again is None else {oa.REAPPROVAL_KEY: again.to_dict()}
    state = await oa_agents.RunState.from_json(agent, saved, context_override=context)
    for item in state.get_interruptions():
        if approve:
            state.approve(item)
        else:
            state.reject(item, rejection_message="carol declined: fraud hold")
    return str((await oa_agents.Runner.run(agent, state, run_config=config)).final_output)


async def test_openai_agents_resume_of_one_call_refunds_once() -> None:
    """Two resumes of the same saved RunState: one action, one refund, done twice."""
    world = World()
    config = oa_agents.RunConfig(tracing_disabled=True)
    saved = await _openai_decide(world, config)
    answers = [await _openai_resume(world, saved, config) for _ in range(2)]
    [refund] = world.agent_refunds("openai-agents:case-1:c_refund")
    assert refund.amount == AMOUNT
    assert all(a.startswith("done: refunded $20.00") for a in answers), answers
    assert "openai-agents:case-1:c_refund" in answers[0]


async def test_openai_agents_revocation_before_the_approval_is_refused_in_words() -> None:
    """The approval revoked while the run waited for a person: refused, and the model is told."""
    world = World()
    config = oa_agents.RunConfig(tracing_disabled=True)
    saved = await _openai_decide(world, config)
    world.store.revoke_lease(world.lease.id, "support")
    answer = await _openai_resume(world, saved, config)
    assert world.refunds() == []
    assert answer.startswith("not done, refused: "), answer


@pytest.mark.parametrize("guarded_failures", [True, False])
async def test_openai_agents_an_exception_in_the_guard_is_answered_do_not_retry(
    guarded_failures: bool,
) -> None:
    """The call's action id already journaled with another decision (a scope reused across
    conversations): the guard raises. With `failure_words` as the tool's
    failure_error_function the model is told not to retry, a person will review it; the
    SDK's default (the other case) would tell it to try again."""
    world = World()
    config = oa_agents.RunConfig(tracing_disabled=True)
    saved = await _openai_decide(world, config)
    seen = json.loads(world.read())["refunds_fingerprint"]
    other = world.intent("openai-agents:case-1:c_refund", AMOUNT // 2, seen)
    assert world.gate(gone_owner()).submit(other).status == "sent"

    answer = await _openai_resume(world, saved, config, guarded_failures=guarded_failures)

    assert len(world.agent_refunds()) == 1  # the other decision's; nothing more was sent
    if not guarded_failures:
        assert answer == "An error occurred while running the tool. Please try again."
        return
    assert "Please try again" not in answer
    assert answer.startswith("not known whether it was done: the refund stopped with an error ")
    assert "ActionError" in answer and "different decision" in answer
    assert "(tool call c_refund)" in answer
    assert "Do not retry and do not ask for another refund" in answer
    assert "a person will review it" in answer


async def test_openai_agents_a_refused_call_is_sent_once_under_a_new_approval() -> None:
    """Refused (revoked while the run waited): the saved interruption is resumed again,
    approved, with a Reapproval in the run context; the same call's re-run finds its refusal
    in the journal and the gate re-approves under the new lease, once across two resumes."""
    world = World()
    config = oa_agents.RunConfig(tracing_disabled=True)
    saved = await _openai_decide(world, config)
    world.store.revoke_lease(world.lease.id, "support")
    refused_words = await _openai_resume(world, saved, config)
    assert refused_words.startswith("not done, refused: approval revoked"), refused_words
    guard = oa.ToolGate(world.gate(gone_owner()))
    refused = guard.outcome(oa.action_id_for("case-1", "c_refund"))
    assert refused is not None and refused.status == "refused"

    again = oa.Reapproval(refused.action_id, world.grant(AMOUNT).id, "carol")
    answers = [await _openai_resume(world, saved, config, again=again) for _ in range(2)]
    assert all(a.startswith("done: refunded $20.00") for a in answers), answers
    [refund] = world.refunds()
    done = guard.outcome(refused.action_id)
    assert done is not None and done.status == "sent" and done.external_id == refund.id
    assert done.receipt is not None
    assert done.receipt.body["context"] == {"reapproves": refused.action_id, "approved_by": "carol"}
    assert refund.metadata[ACTION_METADATA_KEY] == done.action_id


async def test_openai_agents_a_declined_reapproval_sends_nothing() -> None:
    """The person rejects the interruption the second time: the SDK answers the model with
    the rejection, the tool never runs, nothing is sent."""
    world = World()
    config = oa_agents.RunConfig(tracing_disabled=True)
    saved = await _openai_decide(world, config)
    world.store.revoke_lease(world.lease.id, "support")
    await _openai_resume(world, saved, config)
    answer = await _openai_resume(world, saved, config, approve=False)
    assert "fraud hold" in answer, answer
    assert world.refunds() == []
    assert world.store.actions() == [oa.action_id_for("case-1", "c_refund")]


async def test_openai_agents_a_call_approved_exactly_runs_only_as_approved() -> None:
    """A person's exact approval of the call, passed as the call's own `Reapproval`, is the
    lease it is sent under; the same approval refuses the call with another amount."""
    world = World()
    fingerprint = refunds_fingerprint(world.refunds())
    call = world.intent(oa.action_id_for("case-9", "c_exact"), AMOUNT, fingerprint)
    question = {"action_id": call.action_id, "kind": "refund", "target": world.pi}
    exact = world.store.grant_lease(oa.exact_approval(APPROVER, {**question, "amount": AMOUNT}))
    guard = oa.ToolGate(world.gate(gone_owner()))
    changed = replace(call, action_id=oa.action_id_for("case-9", "c_changed"), amount=AMOUNT - 1)

    refused = await guard.submit(changed, oa.Reapproval(changed.action_id, exact.id, "alice"))
    sent = await guard.submit(call, oa.Reapproval(call.action_id, exact.id, "alice"))

    assert refused.reason == f"approval is for exactly {AMOUNT}, not {AMOUNT - 1}"
    assert sent.status == "sent"
    state = world.store.action(call.action_id)
    assert state is not None and state.intent.lease_id == exact.id
    assert len(world.agent_refunds()) == 1


def test_openai_agents_a_malformed_reapproval_says_what_to_send() -> None:
    """A run context whose re-approval lacks the lease is a ValueError naming the field."""
    with pytest.raises(ValueError, match="'lease_id' as a non-empty string"):
        oa.Reapproval.from_dict({"action_id": "a", "by": "carol"})
