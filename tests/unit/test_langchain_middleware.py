"""`interlock.langchain`: the guard as LangChain v1 middleware, in one process.

A real `create_agent` agent (the scripted model of `tests/helpers/lc_agent.py`, LangGraph's
in-memory checkpointer) over the in-process payments model and a `MemoryStore`. The
process kills and the SQLite checkpointer are in `tests/e2e/test_adapter_langchain.py`.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Approvers,
    Event,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    Owner,
    Store,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._core.journal import MAX_ID_LENGTH
from interlock.langchain import (
    APPROVAL_TYPE,
    REAPPROVAL_TYPE,
    SEEN_KEY,
    action_id_for,
    exact_approval,
    fingerprint_seen,
    seen,
)
from interlock.testing import InProcessPayments
from tests.helpers.approvals import APPROVER
from tests.helpers.gate_rig import Clock, Crash, gone_owner
from tests.helpers.lc_agent import AMOUNT, ScriptedModel, refund_agent


class World:
    """A $100 payment with a $20 approval, a gate, and agents over them."""

    def __init__(self) -> None:
        self.payments = InProcessPayments()
        self.pi = self.payments.create_payment(10_000).id
        self.store = MemoryStore()
        self.lease = f"lease_{self.pi}"
        now = time.time()
        self.store.grant_lease(Lease(self.lease, "refund", self.pi, AMOUNT, now + 3600, "s", now))
        self.gate = Gate(
            self.store,
            StripeRefund(self.payments),
            timing=Timing(6, 1),
            # The guard's tests grant unsigned leases; the exact-approval test signs its own
            # with the tests' approver, whose key this list holds.
            approvers=Approvers([APPROVER.public_key], allow_unsigned=True),
        )
        self.saver = InMemorySaver()
        self.config: Any = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:8]}"}}

    def agent(
        self,
        *,
        approval: bool = False,
        reapproval: bool = False,
        model: ScriptedModel | None = None,
    ) -> Any:
        return refund_agent(
            self.gate,
            self.payments,
            self.saver,
            approval=approval,
            reapproval=reapproval,
            model=model,
        )

    def grant(self, lease_id: str) -> str:
        now = time.time()
        self.store.grant_lease(Lease(lease_id, "refund", self.pi, AMOUNT, now + 3600, "s", now))
        return lease_id

    def ask(self) -> dict[str, Any]:
        return {"messages": [HumanMessage(f"Refund $20 on {self.pi}.")]}

    def refunds(self) -> list[tuple[str, int]]:
        return [
            ("agent" if ACTION_METADATA_KEY in r.metadata else "hand", r.amount)
            for r in self.payments.list_refunds(self.pi)
        ]


def answer(result: dict[str, Any]) -> ToolMessage:
    """The guarded tool's answer to the model."""
    return next(
        m
        for m in reversed(result["messages"])
        if isinstance(m, ToolMessage) and m.name == "issue_refund"
    )


def test_a_guarded_call_is_sent_through_the_gate_and_answered_in_words() -> None:
    """invoke: the refund is made once by the gate (the tool's body never runs), and the
    model reads `done` with the refund's id."""
    w = World()
    result = w.agent().invoke(w.ask(), w.config)
    told = answer(result)
    assert told.status == "success"
    assert told.artifact["status"] == "sent"
    assert told.content.startswith("done: refunded $20.00")
    assert told.artifact["external_id"] in told.content
    assert w.refunds() == [("agent", AMOUNT)]
    assert told.artifact["action_id"] == action_id_for(
        w.config["configurable"]["thread_id"], told.tool_call_id
    )


def test_a_refund_of_a_yen_payment_is_in_yen_as_its_read_showed() -> None:
    """The read's `seen` artifact gives the currency: the intent, the receipt and the
    model's words are in yen (JPY is zero-decimal: 2000 is ¥2,000, not $20.00)."""
    w = World()
    w.pi = w.payments.create_payment(10_000, currency="jpy").id
    w.lease = f"lease_{w.pi}"
    now = time.time()
    w.store.grant_lease(
        Lease(w.lease, "refund", w.pi, AMOUNT, now + 3600, "s", now, currency="jpy")
    )
    told = answer(w.agent().invoke(w.ask(), w.config))
    assert told.content.startswith("done: refunded ¥2,000, refund")
    assert (told.artifact["status"], told.artifact["currency"]) == ("sent", "jpy")
    state = w.store.action(told.artifact["action_id"])
    assert state is not None and state.intent.currency == "jpy"
    assert state.receipt is not None and state.receipt.body["currency"] == "jpy"


async def test_the_async_path_sends_through_the_gate_in_a_worker_thread() -> None:
    """ainvoke: awrap_tool_call runs the blocking gate off the event loop, same outcome."""
    w = World()
    loop_threads: list[str] = []
    sends = w.gate.effect.send

    def send(*args: Any) -> Any:
        import threading

        loop_threads.append(threading.current_thread().name)
        return sends(*args)

    w.gate.effect.send = send  # type: ignore[method-assign]
    result = await w.agent().ainvoke(w.ask(), w.config)
    assert answer(result).artifact["status"] == "sent"
    assert w.refunds() == [("agent", AMOUNT)]
    assert loop_threads and loop_threads[0] != "MainThread"


def test_replaying_the_same_tool_call_from_its_checkpoint_sends_nothing() -> None:
    """LangGraph re-runs the tools node from the checkpoint before it (time travel): the
    same call names the same action, so the gate answers with its recorded outcome and
    sends nothing."""
    w = World()
    agent = w.agent()
    first = answer(agent.invoke(w.ask(), w.config))
    before_tools = next(
        s
        for s in agent.get_state_history(w.config)
        if s.next == ("tools",)
        and any(c["name"] == "issue_refund" for c in s.values["messages"][-1].tool_calls)
    )
    again = answer(agent.invoke(None, before_tools.config))
    assert again.tool_call_id == first.tool_call_id
    assert again.artifact["action_id"] == first.artifact["action_id"]
    assert again.artifact["status"] == "sent"
    assert again.artifact["external_id"] == first.artifact["external_id"]
    assert w.payments.model.requests.count(("POST", "refunds")) == 1
    assert w.refunds() == [("agent", AMOUNT)]


def test_a_refund_call_without_a_read_first_is_not_sent() -> None:
    """The model refunds without reading the payment: nothing to check against, so the
    model is told to read it first and nothing is journaled."""
    w = World()

    class Hasty(ScriptedModel):
        def _generate(
            self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            if any(isinstance(m, ToolMessage) for m in messages):
                return super()._generate(messages, stop, **kwargs)
            call = {"name": "issue_refund", "args": {"payment_intent": w.pi, "amount": AMOUNT}}
            from langchain_core.outputs import ChatGeneration, ChatResult

            return ChatResult(
                generations=[
                    ChatGeneration(message=AIMessage("", tool_calls=[{**call, "id": "call_x"}]))
                ]
            )

    told = answer(w.agent(model=Hasty()).invoke(w.ask(), w.config))
    assert told.status == "error"
    assert "was not read before this call" in told.content
    assert "get_payment" in told.content
    assert w.refunds() == []
    assert w.store.action(action_id_for(w.config["configurable"]["thread_id"], "call_x")) is None


def test_an_exact_approval_of_what_the_person_saw_sends_that_once_and_nothing_else() -> None:
    """The person grants exactly the action the interrupt showed (signed, once) and resumes
    with it: the gate sends it; the same approval refuses another amount or target, and a
    second action."""
    w = World()
    agent = w.agent(approval=True)
    (asked,) = agent.invoke(w.ask(), w.config)["__interrupt__"]
    lease = w.store.grant_lease(exact_approval(APPROVER, asked.value))
    assert lease.exact and (lease.target, lease.cap) == (w.pi, AMOUNT)

    resume = {"approved": True, "by": "alice", "lease_id": lease.id}
    told = answer(agent.invoke(Command(resume=resume), w.config))

    assert told.artifact["status"] == "sent"
    state = w.store.action(asked.value["action_id"])
    assert state is not None and state.intent.lease_id == lease.id
    # Decided on the payment as it is now, so only the approval can refuse them.
    fingerprint = refunds_fingerprint(w.payments.list_refunds(w.pi))
    changed = Intent(new_action_id(), "refund", w.pi, AMOUNT - 1, lease.id, fingerprint)
    again = Intent(new_action_id(), "refund", w.pi, AMOUNT, lease.id, fingerprint)
    assert w.gate.submit(changed).reason == f"approval is for exactly {AMOUNT}, not {AMOUNT - 1}"
    assert "already used" in str(w.gate.submit(again).reason)
    assert w.refunds() == [("agent", AMOUNT)]


def test_the_approval_interrupts_before_the_gate_and_sends_after_the_resume() -> None:
    """approval=True: the first run stops at interrupt() with nothing journaled; resumed
    with an approval, the node re-runs from the top and the gate sends, under the action
    the interrupt named, recording who approved."""
    w = World()
    agent = w.agent(approval=True)
    stopped = agent.invoke(w.ask(), w.config)
    (asked,) = stopped["__interrupt__"]
    assert asked.value["type"] == APPROVAL_TYPE
    assert asked.value["amount"] == AMOUNT and asked.value["target"] == w.pi
    assert w.store.action(asked.value["action_id"]) is None
    assert w.refunds() == []

    told = answer(agent.invoke(Command(resume={"approved": True, "by": "alice"}), w.config))
    assert told.artifact["status"] == "sent"
    assert told.artifact["action_id"] == asked.value["action_id"]
    state = w.store.action(asked.value["action_id"])
    assert state is not None and state.intent.metadata["approved_by"] == "alice"
    assert w.refunds() == [("agent", AMOUNT)]


@pytest.mark.parametrize("during_the_wait", ["hand-refund", "revoked"])
def test_what_happens_while_the_person_decides_is_re_checked_after_the_resume(
    during_the_wait: str,
) -> None:
    """A hand refund or a revocation between the interrupt and the approval: the gate's
    check runs after the resume, so the approved call is refused."""
    w = World()
    agent = w.agent(approval=True)
    agent.invoke(w.ask(), w.config)
    if during_the_wait == "hand-refund":
        w.payments.create_refund(w.pi, AMOUNT)
    else:
        w.store.revoke_lease(w.lease, "support")
    told = answer(agent.invoke(Command(resume={"approved": True, "by": "alice"}), w.config))
    assert told.status == "error"
    assert told.artifact["status"] == "refused"
    assert told.content.startswith("not done, refused: ")
    assert w.refunds() == ([("hand", AMOUNT)] if during_the_wait == "hand-refund" else [])


def test_a_declined_approval_is_answered_and_nothing_is_journaled() -> None:
    """The person says no: the model is told who declined and why; the gate never ran."""
    w = World()
    agent = w.agent(approval=True)
    (asked,) = agent.invoke(w.ask(), w.config)["__interrupt__"]
    resume = Command(resume={"approved": False, "by": "bob", "reason": "duplicate ticket"})
    told = answer(agent.invoke(resume, w.config))
    assert told.status == "error"
    assert "bob declined it (duplicate ticket)" in told.content
    assert w.store.action(asked.value["action_id"]) is None
    assert w.refunds() == []


def _clocked_gate(
    store: Store, payments: InProcessPayments, clock: Clock, owner: Owner, on_event: Any
) -> Gate:
    """A worker's gate on `clock` (the restart stories below make one per process)."""
    return Gate(
        store,
        StripeRefund(payments),
        timing=Timing(6, 1),
        owner=owner,
        on_event=on_event,
        clock=clock,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        approvers=UNSIGNED_APPROVALS,
    )


def _refused_then_asked(w: World, agent: Any, *, asynchronous: bool = False) -> Any:
    """Ask for approval, revoke it while the person decides, approve: the gate refuses and
    the guard asks again; the interrupt that asks."""
    agent.invoke(w.ask(), w.config)
    w.store.revoke_lease(w.lease, "support")
    stopped = agent.invoke(Command(resume={"approved": True, "by": "alice"}), w.config)
    (asked,) = stopped["__interrupt__"]
    return asked


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
async def test_a_refused_call_is_sent_once_under_the_approval_a_person_grants_again(
    asynchronous: bool,
) -> None:
    """reapproval=True: the revoked approval's refusal stops at interrupt(); resumed with a
    new approval, the node re-runs from the top, the journal answers the refused send as
    recorded, and the gate's re-approval sends once, its receipt naming the refused action."""
    w = World()
    agent = w.agent(approval=True, reapproval=True)
    asked = _refused_then_asked(w, agent)
    assert asked.value["type"] == REAPPROVAL_TYPE
    assert asked.value["reason"].startswith("approval revoked")
    refused = asked.value["action_id"]
    assert w.refunds() == []

    resume = Command(resume={"approved": True, "by": "carol", "lease_id": w.grant("lease_2")})
    if asynchronous:
        result = await agent.ainvoke(resume, w.config, durability="sync")
    else:
        result = agent.invoke(resume, w.config, durability="sync")
    told = answer(result)
    assert told.status == "success", told.content
    assert told.artifact["status"] == "sent"
    assert w.refunds() == [("agent", AMOUNT)]
    again = w.store.action(told.artifact["action_id"])
    assert again is not None and again.receipt is not None
    assert again.intent.lease_id == "lease_2"
    assert again.intent.context["reapproves"] == refused
    assert again.intent.context["approved_by"] == "carol"
    assert again.receipt.body["context"]["reapproves"] == refused
    original = w.store.action(refused)
    assert original is not None and original.settlement is not None
    assert original.settlement.status == "refused"

    # The same thread replayed from the checkpoint before the resume finds both actions.
    assert answer(agent.invoke(resume, w.config))
    assert w.refunds() == [("agent", AMOUNT)]


def test_a_person_who_declines_to_approve_again_sends_nothing() -> None:
    """The refusal stands when the person says no: the model is told, nothing is sent."""
    w = World()
    agent = w.agent(approval=True, reapproval=True)
    asked = _refused_then_asked(w, agent)
    resume = Command(resume={"approved": False, "by": "carol", "reason": "fraud hold"})
    told = answer(agent.invoke(resume, w.config))
    assert told.status == "error"
    assert "carol declined to approve it again (fraud hold)" in told.content
    assert told.artifact["action_id"] == asked.value["action_id"]
    assert w.refunds() == []
    assert w.store.actions() == [asked.value["action_id"]]


def test_a_re_approval_killed_after_stripe_answered_is_adopted_on_the_re_run(
    tmp_path: Path,
) -> None:
    """Killed (simulated) after Stripe answered the re-approval's send, the thread resumed
    from LangGraph's SQLite checkpointer re-runs the node: the refused send and the
    re-approval are found in the journal, nobody is asked again, the refund is adopted."""
    clock = Clock()
    payments = InProcessPayments()
    pi = payments.create_payment(10_000).id
    store = MemoryStore(clock=clock)
    for lease in (f"lease_{pi}", "lease_2"):
        store.grant_lease(Lease(lease, "refund", pi, AMOUNT, clock() + 3600, "s", clock()))
    config: Any = {"configurable": {"thread_id": "ticket-8"}}
    path = tmp_path / "checkpoints.sqlite3"

    def crash(event: Event) -> None:
        if event.kind == "after-answer":
            raise Crash(event.kind)

    def agent(owner: Any, on_event: Any, conn: sqlite3.Connection) -> Any:
        gate = _clocked_gate(store, payments, clock, owner, on_event)
        return refund_agent(gate, payments, SqliteSaver(conn), approval=True, reapproval=True)

    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        first = agent(gone_owner(), crash, conn)
        first.invoke(w_ask(pi), config, durability="sync")
        store.revoke_lease(f"lease_{pi}", "support")
        approve = Command(resume={"approved": True, "by": "alice"})
        (asked,) = first.invoke(approve, config, durability="sync")["__interrupt__"]
        assert asked.value["type"] == REAPPROVAL_TYPE
        again = Command(resume={"approved": True, "by": "carol", "lease_id": "lease_2"})
        with pytest.raises(Crash):
            first.invoke(again, config, durability="sync")
    assert len(payments.list_refunds(pi)) == 1
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        result = agent(Owner.current("restarted"), None, conn).invoke(
            None, config, durability="sync"
        )
    assert "__interrupt__" not in result
    told = answer(result)
    assert told.artifact["status"] == "adopted", told.content
    state = store.action(told.artifact["action_id"])
    assert state is not None and state.intent.context["reapproves"] == asked.value["action_id"]
    assert len(payments.list_refunds(pi)) == 1


def test_an_answer_that_is_not_an_approval_is_an_error_that_says_what_to_send() -> None:
    """A resume value without `approved` raises, naming the shape; nothing is sent."""
    w = World()
    agent = w.agent(approval=True)
    agent.invoke(w.ask(), w.config)
    with pytest.raises(ValueError, match="'approved': true or false"):
        agent.invoke(Command(resume="yes"), w.config)
    assert w.refunds() == []


def test_a_run_without_a_thread_id_is_refused_before_anything_is_journaled() -> None:
    """No checkpointer and no thread id: nothing to resume by, so no stable action id."""
    w = World()
    agent = refund_agent(w.gate, w.payments, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the run's thread id"):
        agent.invoke(w.ask())
    assert w.refunds() == []


def test_action_ids_are_distinct_per_part_printable_and_bounded() -> None:
    """A ':' inside an id cannot make two calls meet; long ids are hashed under 200."""
    assert action_id_for("a:b", "c") != action_id_for("a", "b:c")
    assert action_id_for("t", "call_1") == "langchain:t:call_1"
    long = action_id_for("t" * 300, "call_1")
    assert len(long) <= MAX_ID_LENGTH and long.startswith("langchain!")
    assert long != action_id_for("t" * 299, "call_1")


def test_the_fingerprint_is_the_last_read_before_the_decision() -> None:
    """Reads after the model's turn do not count; another target's read does not count."""
    turn = AIMessage("", tool_calls=[{"name": "issue_refund", "args": {}, "id": "c2"}])
    read = ToolMessage("old", tool_call_id="c1", artifact=seen("pi_1", "fp-old"))
    newer = ToolMessage("new", tool_call_id="c0", artifact=seen("pi_1", "fp-new"))
    other = ToolMessage("x", tool_call_id="c3", artifact=seen("pi_2", "fp-other"))
    late = ToolMessage("late", tool_call_id="c4", artifact=seen("pi_1", "fp-late"))
    assert fingerprint_seen([read, newer, other, turn, late], "c2", "pi_1") == "fp-new"
    assert fingerprint_seen([other, turn, late], "c2", "pi_1") is None
    assert fingerprint_seen([read], "c2", "pi_1") is None
    assert SEEN_KEY in seen("pi_1", "fp")


def test_a_crash_in_the_send_after_the_approval_resumes_without_asking_again(
    tmp_path: Path,
) -> None:
    """Killed (simulated) right before the send that followed the approval, the thread
    resumed from LangGraph's SQLite checkpointer keeps the person's answer: no second
    question, the same action, one refund."""
    clock = Clock()
    payments = InProcessPayments()
    pi = payments.create_payment(10_000).id
    store = MemoryStore(clock=clock)
    store.grant_lease(Lease(f"lease_{pi}", "refund", pi, AMOUNT, clock() + 3600, "s", clock()))
    config: Any = {"configurable": {"thread_id": "ticket-7"}}
    path = tmp_path / "checkpoints.sqlite3"

    def crash(event: Event) -> None:
        if event.kind == "before-send":
            raise Crash(event.kind)

    def agent(owner: Any, on_event: Any, conn: sqlite3.Connection) -> Any:
        gate = _clocked_gate(store, payments, clock, owner, on_event)
        return refund_agent(gate, payments, SqliteSaver(conn), approval=True)

    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        first = agent(gone_owner(), crash, conn)
        (asked,) = first.invoke(w_ask(pi), config, durability="sync")["__interrupt__"]
        with pytest.raises(Crash):
            first.invoke(
                Command(resume={"approved": True, "by": "alice"}), config, durability="sync"
            )
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        result = agent(Owner.current("restarted"), None, conn).invoke(
            None, config, durability="sync"
        )
    assert "__interrupt__" not in result
    told = answer(result)
    assert told.artifact["action_id"] == asked.value["action_id"]
    assert told.artifact["status"] == "sent"
    assert [r.amount for r in payments.list_refunds(pi)] == [AMOUNT]


@pytest.mark.parametrize("resume", ["invoke(None)", "Command(resume) again"])
def test_a_worker_killed_after_the_approved_send_restarts_as_the_guide_shows(
    tmp_path: Path, resume: str
) -> None:
    """Killed (simulated) after Stripe answered the approved send, the worker restarts as
    `docs/guides/langchain.md` shows: `gate.recover()` first adopts the refund (receipted,
    verify clean), then the thread resumed by its thread id, with `invoke(None, thread)`
    or by sending the same `Command(resume=...)` again, re-runs the same call, which the
    journal answers: the model is told done, nobody is asked again, one refund."""
    clock = Clock()
    payments = InProcessPayments()
    pi = payments.create_payment(10_000).id
    store = MemoryStore(clock=clock)  # the journal outlives the worker, as a file would
    store.grant_lease(Lease(f"lease_{pi}", "refund", pi, AMOUNT, clock() + 3600, "s", clock()))
    thread: Any = {"configurable": {"thread_id": "ticket-9"}}
    path = tmp_path / "checkpoints.sqlite3"

    def crash(event: Event) -> None:
        if event.kind == "after-answer":
            raise Crash(event.kind)

    def worker(owner: Owner, on_event: Any) -> Gate:
        return _clocked_gate(store, payments, clock, owner, on_event)

    approve = Command(resume={"approved": True, "by": "alice"})
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        first = refund_agent(
            worker(gone_owner(), crash), payments, SqliteSaver(conn), approval=True
        )
        (asked,) = first.invoke(w_ask(pi), thread, durability="sync")["__interrupt__"]
        with pytest.raises(Crash):
            first.invoke(approve, thread, durability="sync")
    assert len(payments.list_refunds(pi)) == 1

    gate = worker(Owner.current("restarted"), None)
    [recovered] = gate.recover()  # first: finish what the dead worker left
    assert (recovered.action_id, recovered.status) == (asked.value["action_id"], "adopted")
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        agent = refund_agent(gate, payments, SqliteSaver(conn), approval=True)
        assert agent.get_state(thread).next  # it stopped inside a node
        again = None if resume == "invoke(None)" else approve
        result = agent.invoke(again, thread, durability="sync")

    assert "__interrupt__" not in result
    told = answer(result)
    assert told.artifact["action_id"] == asked.value["action_id"]
    assert told.artifact["status"] == "adopted"
    assert str(told.content).startswith("done: refunded $20.00")
    assert str(result["messages"][-1].content).endswith(str(told.content))
    assert [r.amount for r in payments.list_refunds(pi)] == [AMOUNT]
    checked = verify(store, payments)
    assert checked.ok, checked.problems


def w_ask(pi: str) -> dict[str, Any]:
    """The user's message asking for $20 back on `pi`."""
    return {"messages": [HumanMessage(f"Refund $20 on {pi}.")]}
