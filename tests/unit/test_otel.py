"""`interlock.otel`: a traced gate's spans, read back from the SDK's in-memory exporter.

The gate runs in-process over the in-memory Stripe model (tests/helpers/gate_rig.py); a
crash is the rig's simulated one (its event sink raises), the restart a new gate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from interlock import Gate, Owner, PaymentsAuthError
from interlock._integrations.tool_calls import action_id_for
from interlock.otel import action_span_context, traced
from tests.helpers import otel_spans
from tests.helpers.gate_rig import Crash, GateWorld, gone_owner
from tests.helpers.otel_spans import memory_provider, named

# An amount no id, count or hash of a run spells as a whole word.
AMOUNT = 1234


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A tracer provider exporting each span as it ends, and every span it ended."""
    provider, exporter = memory_provider()
    yield provider, exporter
    exporter.shutdown()


@pytest.fixture
def exporter(memory: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    """Every span a test's provider ends, kept in memory."""
    return memory[1]


@pytest.fixture
def provider(memory: tuple[TracerProvider, InMemorySpanExporter]) -> TracerProvider:
    """A tracer provider exporting each span as it ends."""
    return memory[0]


def traced_gate(world: GateWorld, provider: TracerProvider, **kw: Any) -> Gate:
    return traced(world.gate(gone_owner(), log_every=1), tracer_provider=provider, **kw)


def test_a_guarded_refund_is_one_execute_tool_span_with_its_steps_and_a_send_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """A framework guard's refund: the GenAI tool span (the tool call id taken back out of
    the guard's action id), every gate step in order, the grant, the receipt in the log,
    and the create call as a CLIENT child span."""
    world = GateWorld()
    lease = world.grant(5000)
    gate = traced_gate(world, provider, tool_name="issue_refund")
    intent = world.decide(AMOUNT, lease.id)
    aid = action_id_for("langchain", "thread 1", "call:7")
    outcome = gate.submit(type(intent)(**{**intent.__dict__, "action_id": aid}))

    assert outcome.status == "sent"
    [span] = named(exporter, "execute_tool issue_refund")
    [send] = named(exporter, "interlock.send")
    a = dict(span.attributes or {})
    assert {k: a[k] for k in a if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "call:7",
    }
    assert a["interlock.action_id"] == aid and a["interlock.framework"] == "langchain"
    assert (a["interlock.outcome"], a["interlock.external_id"]) == ("sent", outcome.external_id)
    assert (a["interlock.attempt"], a["interlock.epoch"], a["interlock.recovery"]) == (1, 1, False)
    assert a["interlock.grant.digest"] == lease.digest()
    assert a["interlock.grant.signer"] == lease.key_id and a["interlock.grant.by"] == "support"
    assert outcome.receipt is not None and a["interlock.receipt.hash"] == outcome.receipt.hash
    assert a["interlock.receipt.log_index"] == 0, "log_every=1: its settle logged it first"
    assert span.status.status_code is StatusCode.UNSET
    # A first attempt reads and checks, then journals, claims and marks `sending` at once.
    assert [e.name for e in span.events] == [
        "interlock.lookup",
        "interlock.world_check",
        "interlock.approval_signature_check",
        "interlock.approval_check",
        "interlock.journal",
        "interlock.sending",
        "interlock.settle",
        "interlock.receipt",
        "interlock.logged",
    ]
    assert send.parent is not None and send.parent.span_id == span.context.span_id
    assert send.kind.name == "CLIENT" and send.status.status_code is StatusCode.OK
    assert dict(send.attributes or {})["interlock.external_id"] == outcome.external_id


def test_an_unknown_outcome_is_not_an_error_and_its_send_says_what_answered(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """A 500 after Stripe made the refund, and the lookup cannot see it: the call's span
    says `unknown` (status unset: nobody knows it failed); the send span is the 500."""
    world = GateWorld()
    lease = world.grant(5000)
    world.model.add_fault("error_500", stage="after_commit")
    gate = traced(
        world.gate(gone_owner(), emulate=_no_lookup), tracer_provider=provider, tool_name="refund"
    )
    outcome = gate.submit(world.decide(AMOUNT, lease.id))

    assert outcome.status == "pending" and outcome.unknown
    [span] = named(exporter, "execute_tool refund")
    sends = named(exporter, "interlock.send")
    a = dict(span.attributes or {})
    assert a["interlock.outcome"] == "unknown"
    assert span.status.status_code is StatusCode.UNSET and "error.type" not in a
    assert "interlock.unknown" in [e.name for e in span.events]
    assert "interlock.left_to_recovery" in [e.name for e in span.events]
    assert sends[0].status.status_code is StatusCode.ERROR
    assert dict(sends[0].attributes or {})["error.type"] == "http_500"


def _no_lookup(effect: Any) -> Any:
    from interlock.testing import NoLookup

    return NoLookup(effect)


@pytest.mark.parametrize("sensitive", [False, True])
def test_no_amount_or_key_reaches_an_attribute_unless_the_user_opts_in(
    exporter: InMemorySpanExporter, provider: TracerProvider, sensitive: bool
) -> None:
    """A refund refused for more than its approval covers (its reason names both amounts):
    by default no attribute holds an amount, the reason or a key; with `sensitive=True`
    the amount and the reason are there (so the check above can see one)."""
    world = GateWorld()
    lease = world.grant(AMOUNT - 1)
    # The default is what is tested: only the opt-in passes the flag.
    gate = traced_gate(world, provider, **({"sensitive": True} if sensitive else {}))
    outcome = gate.submit(world.decide(AMOUNT, lease.id))
    assert outcome.status == "refused" and str(AMOUNT) in (outcome.reason or "")
    # And a sent one, whose send carries its idempotency key.
    assert gate.submit(world.decide(AMOUNT, world.grant(5000).id)).status == "sent"

    leaks = otel_spans.leaks(exporter.get_finished_spans(), [AMOUNT])
    if sensitive:
        keys = {k for k, _ in leaks}
        assert {"interlock.amount", "interlock.reason", "interlock.idempotency_key"} <= keys
    else:
        assert leaks == []
    [refused, _] = named(exporter, "execute_tool refund")
    assert dict(refused.attributes or {})["interlock.outcome"] == "refused"
    assert refused.status.status_code is StatusCode.UNSET


def test_an_exception_ends_the_span_as_an_error_and_reaches_the_caller(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """A refused key (PaymentsAuthError) raised out of the send: the span and the open send
    span end with ERROR naming it; the caller gets the exception as before."""
    world = GateWorld()
    lease = world.grant(5000)
    gate = traced_gate(world, provider)

    def refuse(*_: Any, **__: Any) -> Any:
        raise PaymentsAuthError("create refund", 401, "the key was refused")

    gate.effect.send = refuse  # type: ignore[method-assign]
    with pytest.raises(PaymentsAuthError):
        gate.submit(world.decide(AMOUNT, lease.id))

    [span] = named(exporter, "execute_tool refund")
    [send] = named(exporter, "interlock.send")
    for s in (span, send):
        assert s.status.status_code is StatusCode.ERROR
        assert dict(s.attributes or {})["error.type"] == "PaymentsAuthError"
    assert [e.name for e in span.events][-1] == "exception"


def test_a_recovery_after_a_crash_links_to_the_dead_workers_action(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """The worker dies after Stripe answered; a new gate's `recover()` adopts the refund.
    Both calls sit in the action's own trace (derived from its id) and link to it: the
    recovery is beside the dead worker's spans, and links to its `interlock.recover`."""
    world = GateWorld()
    lease = world.grant(5000)
    intent = world.decide(AMOUNT, lease.id)
    dead = traced(world.gate(gone_owner(), crash_at="after-answer"), tracer_provider=provider)
    with pytest.raises(Crash):
        dead.submit(intent)
    world.clock.sleep(30)  # the dead worker's claim runs out
    outcomes = traced(world.gate(Owner.current("restarted")), tracer_provider=provider).recover()

    assert [o.status for o in outcomes] == ["adopted"]
    first, again = named(exporter, "execute_tool refund")
    [send] = named(exporter, "interlock.send")
    [recover] = named(exporter, "interlock.recover")
    action = action_span_context(intent.action_id)
    assert first.context.trace_id == send.context.trace_id == action.trace_id
    assert first.parent is not None and first.parent.span_id == action.span_id
    assert dict(first.attributes or {})["error.type"] == "Crash"
    assert again.context.trace_id == action.trace_id
    assert again.parent is not None and again.parent.span_id == action.span_id
    to_action, to_batch = again.links
    assert (to_action.context.trace_id, to_action.context.span_id) == (
        action.trace_id,
        action.span_id,
    )
    assert to_batch.context.span_id == recover.context.span_id
    a = dict(again.attributes or {})
    assert (a["interlock.recovery"], a["interlock.outcome"], a["interlock.attempt"]) == (
        True,
        "adopted",
        2,
    )
    assert dict(recover.attributes or {})["interlock.recovered"] == 1


def test_a_gate_is_traced_once_and_its_own_listener_still_hears_every_event(
    provider: TracerProvider,
) -> None:
    """A second `traced` of one gate would trace every call twice: it is refused."""
    world = GateWorld()
    gate = traced_gate(world, provider)
    with pytest.raises(ValueError, match="traced already"):
        traced(gate, tracer_provider=provider)
    gate.submit(world.decide(AMOUNT, world.grant(5000).id))
    kinds = [e.kind for e in world.events]
    assert kinds[:1] == ["check"] and kinds.count("journaled") == 1
    assert world.events[-1].kind == "logged"


def test_a_temporal_activity_gate_traces_the_copy_it_runs(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """`interlock.temporal.ActivityGate` runs a copy of the gate it wraps per activity: a
    traced gate's copy is traced alike (its heartbeats still beat)."""
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    from temporalio.testing import ActivityEnvironment

    from interlock import temporal as it

    world = GateWorld()
    lease = world.grant(5000)
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    activity_gate = it.ActivityGate(traced_gate(world, provider, tool_name="refund_activity"))
    action_id = str(env.run(it.activity_action_id))
    intent = world.decide(AMOUNT, lease.id)
    intent = type(intent)(**{**intent.__dict__, "action_id": action_id})

    outcome = env.run(activity_gate.send, intent)

    assert outcome.status == "sent" and beats
    [span] = named(exporter, "execute_tool refund_activity")
    a = dict(span.attributes or {})
    assert (a["interlock.action_id"], a["interlock.framework"]) == (action_id, "temporal")
    assert a["interlock.outcome"] == "sent"
    assert len(named(exporter, "interlock.send")) == 1


def test_a_langchain_agents_guarded_tool_call_is_its_execute_tool_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """A real `create_agent` agent (the scripted model) whose `issue_refund` goes through
    `interlock.langchain`'s guard over a traced gate: one span, the model's tool call id
    as `gen_ai.tool.call.id`, under no span of the agent's (LangChain traces nothing here),
    so in the action's trace."""
    pytest.importorskip("langchain", reason="the langchain extra is not installed")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from interlock import UNSIGNED_APPROVALS, Lease, MemoryStore, StripeRefund, Timing
    from interlock.testing import InProcessPayments
    from tests.helpers.lc_agent import AMOUNT as LC_AMOUNT
    from tests.helpers.lc_agent import refund_agent

    payments = InProcessPayments()
    pi = payments.create_payment(10_000).id
    store = MemoryStore()
    # The lease the helper agent names for its payment.
    store.grant_lease(Lease(f"lease_{pi}", "refund", pi, LC_AMOUNT, 4e9, "support", 1.7e9))
    gate = Gate(store, StripeRefund(payments), timing=Timing(6, 1), approvers=UNSIGNED_APPROVALS)
    agent = refund_agent(
        traced(gate, tracer_provider=provider, tool_name="issue_refund"),
        payments,
        InMemorySaver(),
    )

    result = agent.invoke(
        {"messages": [HumanMessage(f"Refund $20 on {pi}.")]},
        {"configurable": {"thread_id": "thread-1"}},
    )

    [call] = [
        c
        for m in result["messages"]
        if isinstance(m, AIMessage)
        for c in m.tool_calls
        if c["name"] == "issue_refund"
    ]
    [span] = named(exporter, "execute_tool issue_refund")
    a = dict(span.attributes or {})
    assert a["gen_ai.tool.call.id"] == call["id"]
    assert a["interlock.action_id"] == action_id_for("langchain", "thread-1", call["id"])
    assert (a["interlock.framework"], a["interlock.outcome"]) == ("langchain", "sent")
    assert span.context.trace_id == action_span_context(a["interlock.action_id"]).trace_id


def test_recover_puts_its_log_catch_up_and_an_action_it_could_not_recover_on_its_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """`recover()` first numbers a receipt left out of the log (`interlock.logged` on the
    batch's span), then an action whose read raises is reported and recovery goes on: its
    span ends ERROR naming the error, the batch's span has `interlock.recover_error`."""
    world = GateWorld()
    lease = world.grant(5000)
    assert world.gate(gone_owner()).submit(world.decide(AMOUNT, lease.id)).status == "sent"
    with pytest.raises(Crash):
        world.gate(gone_owner(), crash_at="sending").submit(world.decide(AMOUNT, lease.id))
    world.clock.sleep(30)
    gate = traced(world.gate(Owner.current("restarted")), tracer_provider=provider)

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the payments reader broke")

    gate.effect.observe = broken  # type: ignore[method-assign]
    [outcome] = gate.recover()

    assert outcome.status == "pending" and "RuntimeError" in (outcome.reason or "")
    [batch] = named(exporter, "interlock.recover")
    [failed] = named(exporter, "execute_tool refund")
    assert [(e.name, dict(e.attributes or {})) for e in batch.events] == [
        ("interlock.logged", {"interlock.size": 1}),
        ("interlock.recover_error", {"interlock.action_id": outcome.action_id}),
    ]
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "RuntimeError"
