"""Guard a LangChain v1 agent's irreversible tool with the gate (needs the `langchain` extra).

`InterlockMiddleware` is an `AgentMiddleware` whose `wrap_tool_call` (and
`awrap_tool_call`) takes over one tool, the one that does the irreversible thing (a
refund): it turns the model's call into an `Intent`, sends it through `Gate.submit`, and
answers the model with a `ToolMessage` in words it can act on. The tool's own body never
runs: the gate's effect is what sends. Every other tool passes through untouched.

- **One action per tool call, across LangGraph's own re-runs.** The action id is
  `langchain:<thread id>:<tool call id>` (`action_id_for`). LangGraph re-runs a node from
  the top after an `interrupt()` is resumed, and a process that died inside the tool is
  resumed from the checkpointer under the same thread id: both re-run the tools node over
  the same checkpointed `AIMessage`, so they reach the same tool call id and the same
  action, and the gate adopts the first run's refund instead of sending twice. Run the
  agent with a checkpointer and `durability="sync"`, so the model's turn is saved before
  the tool starts (with `"async"` a kill can lose it, and a new model turn is a new
  decision with a new call id).
- **The state the model saw.** The read tool (the one that shows the model the payment)
  returns its text with an artifact, `seen(target, fingerprint)`, and so is declared with
  `response_format="content_and_artifact"`. The artifact stays in the thread's messages,
  which the checkpointer keeps; the guard takes the last one for the target before the
  `AIMessage` that made the call. The model never copies the fingerprint, so it cannot
  get it wrong, and a read that came after the decision does not count. With no read the
  call is answered "not done: read it first", and nothing is journaled.
- **Approval through `interrupt()`.** With `approval=True` the guard asks a person first:
  `interrupt(value)` with `value["type"] == "interlock_approval"` (the action id, the
  target, the amount, the approval it will be sent under). Resume with
  `Command(resume={"approved": True, "by": "alice"})` (optionally `"lease_id"`: an
  approval the person granted for it: `exact_approval(approver, value)` signs exactly the
  action asked about, once, so what runs is what the person saw; the gate refuses any
  other amount or target under it) or `{"approved": False, "reason": "..."}`. The
  node re-runs from the top and only then calls the gate, so the gate's re-check of the
  approval and of the refunds happens after the wait: a revocation or a hand refund
  during it is refused. (LangGraph's `interrupt()` in `ainvoke` needs Python 3.11 or
  later.)
- **A person approves again after a refusal** with `reapproval=True`: when the gate
  refuses (the approval was revoked, the payment changed) the guard asks through
  `interrupt(value)` with `value["type"] == "interlock_reapproval"` (the refused action,
  the reason). Resume with `Command(resume={"approved": True, "by": "alice", "lease_id":
  new})`, the approval the person granted, and the gate's `reapprove` sends under it, as
  a new action the receipt links to the refused one; `{"approved": False, ...}` sends
  nothing. The node re-runs from the top: the gate's journal answers the first send
  (refused, as recorded) and the re-approval (under an id derived from the refused one),
  so neither is decided twice, even after a kill.
- **A restarted worker** calls `gate.recover()` first, before it takes new work: it
  finishes every action a dead worker left (a refund that reached Stripe is adopted and
  receipted, an unknown one looked up, never resent), even one whose thread is never
  resumed. Then it resumes each thread the dead worker left by its thread id:
  `agent.invoke(None, config)`, or, when it died after a person's answer, the same
  `Command(resume=...)` again; the re-run call is answered from the journal. Not from the
  user's prompt again: that is a new decision with new call ids.
- **Errors that are not the model's.** A run without a thread id raises `ValueError`
  before anything is journaled; an action id already journaled with another decision
  raises `ActionError` (the gate's), as does anything the store raises: they reach the
  caller of `invoke`, not the model.

What the model reads back (`outcome_words`; the `ToolMessage`'s artifact is
`outcome_data(outcome)`):

======== ====== =============================================================
status   status what the words say
======== ====== =============================================================
sent     ok     done, the refund's id
adopted  ok     done by an earlier try of this same call; nothing sent twice
refused  error  not done, why; do not retry, a person decides
failed   error  not done, what Stripe said; a retry gets the same answer
pending  error  not done yet (or unknown); do not retry, do not refund again
======== ====== =============================================================

The guide `docs/guides/langchain.md` has an example that runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command, interrupt
except ImportError as e:  # pragma: no cover - exercised in a subprocess without langchain
    raise ImportError(
        "interlock.langchain needs langchain and langgraph: "
        "pip install './packaging/interlock[langchain]' (the core of interlock works without them)"
    ) from e

from interlock._core.errors import IntentError
from interlock._core.gate import Gate, Outcome
from interlock._core.journal import Intent
from interlock._integrations import tool_calls as _tool_calls
from interlock._integrations.tool_calls import (
    APPROVAL_TYPE,
    REAPPROVAL_TYPE,
    Reapproval,
    exact_approval,
)
from interlock._integrations.words import amount_words, outcome_words

__all__ = [  # noqa: RUF022 - sorted case-insensitively, as interlock's own __all__
    "action_id_for",
    "APPROVAL_TYPE",
    "exact_approval",
    "fingerprint_seen",
    "InterlockMiddleware",
    "outcome_data",
    "outcome_words",
    "REAPPROVAL_TYPE",
    "seen",
    "SEEN_KEY",
    "tool_action_id",
    "ToolIntent",
]

SEEN_KEY = "interlock_seen"
"""The key of a read tool's artifact that records what it showed the model."""
_PREFIX = "langchain"


@dataclass(frozen=True)
class ToolIntent:
    """What a guarded call asks for, from its arguments: all of an `Intent` but the
    action id and the fingerprint, which the guard supplies."""

    kind: str
    target: str
    amount: int
    lease_id: str
    # The amount's currency (lowercase ISO 4217), when the read showed it: the intent
    # records it, the words and the approval are in it, and a refund in another one than
    # its payment's is refused.
    currency: str | None = None


IntentOf = Callable[[Mapping[str, Any]], ToolIntent]


def seen(target: str, fingerprint: str, currency: str | None = None) -> dict[str, Any]:
    """The artifact a read tool returns beside its text: the target and the fingerprint
    of its state as the tool showed it to the model (`interlock.refunds_fingerprint`),
    and its currency (`Payment.currency`): a guarded call whose `ToolIntent` gives none is
    in the currency its read showed."""
    record: dict[str, Any] = {"target": target, "fingerprint": fingerprint}
    if currency is not None:
        record["currency"] = currency.lower()
    return {SEEN_KEY: record}


def action_id_for(thread_id: str, tool_call_id: str) -> str:
    """The action id of one tool call in one thread: the same on every re-run of it.

    `langchain:<thread id>:<tool call id>`, each part percent-encoded where it is not a
    letter, digit or one of `_.-~` (so a `:` inside an id cannot make two ids meet).
    Longer than 200 characters, it becomes `langchain!<its first 120 characters>!<sha256>`.
    """
    return _tool_calls.action_id_for(_PREFIX, thread_id, tool_call_id)


def tool_action_id(request: ToolCallRequest) -> str:
    """The action id of the call in `request` (see `action_id_for`).

    Raises `ValueError` when the run has no thread id (no checkpointer, nothing to resume
    by) or the call has no id.
    """
    configurable = (request.runtime.config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError(
            "InterlockMiddleware needs the run's thread id: create the agent with a "
            "checkpointer and invoke it with config={'configurable': {'thread_id': ...}}, "
            "so a re-run of this tool call names the same action"
        )
    call_id = request.tool_call.get("id")
    if not call_id:
        raise ValueError(
            f"the call of tool {request.tool_call['name']!r} has no id: a guarded call needs "
            "the model's tool call id to name its action"
        )
    return action_id_for(thread_id, call_id)


def fingerprint_seen(messages: Sequence[BaseMessage], tool_call_id: str, target: str) -> str | None:
    """The fingerprint of `target` as a read tool last showed it before the model's turn
    that made `tool_call_id`; None when no read came before it."""
    fingerprint = _seen_record(messages, tool_call_id, target).get("fingerprint")
    return fingerprint if isinstance(fingerprint, str) else None


def _seen_record(
    messages: Sequence[BaseMessage], tool_call_id: str, target: str
) -> Mapping[str, Any]:
    """The `seen` record of the last read of `target` before the call's turn (empty: none)."""
    turn = next(
        (
            i
            for i, m in enumerate(messages)
            if isinstance(m, AIMessage) and any(c.get("id") == tool_call_id for c in m.tool_calls)
        ),
        None,
    )
    if turn is None:
        return {}
    for m in reversed(messages[:turn]):
        if not isinstance(m, ToolMessage) or not isinstance(m.artifact, Mapping):
            continue
        record = m.artifact.get(SEEN_KEY)
        if isinstance(record, Mapping) and record.get("target") == target:
            return record
    return {}


def outcome_data(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON-ready data: the answer's `ToolMessage.artifact`.

    Keys: `action_id`, `status`, `reason`, `external_id` (the refund), `amount` (in the
    smallest unit of `currency`, None when the action records none), `currency`, `code`,
    `unknown` and `receipt` (the receipt's hash, or None).
    """
    return {
        "action_id": outcome.action_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "external_id": outcome.external_id,
        "amount": outcome.amount,
        "currency": outcome.currency,
        "code": outcome.code,
        "unknown": outcome.unknown,
        "receipt": None if outcome.receipt is None else outcome.receipt.hash,
    }


class InterlockMiddleware(AgentMiddleware):
    """Sends one tool's calls through a `Gate`; see the module docstring.

    `tool`: the guarded tool's name (declare the tool as usual, for its schema and its
    description; its body never runs). `intent`: turns the call's arguments into a
    `ToolIntent` (a `KeyError`, `TypeError`, `ValueError` or `IntentError` from it is
    answered to the model as a bad call). `read_tool`: the name of the read tool, for the
    words when no read came first. `approval`: ask a person through `interrupt()` before
    each send. `reapproval`: when the gate refuses, ask a person through `interrupt()`
    whether to send it again under a new approval. The gate blocks on the store and on
    Stripe; the async path runs it in a worker thread.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        tool: str,
        intent: IntentOf,
        read_tool: str = "the read tool",
        approval: bool = False,
        reapproval: bool = False,
    ) -> None:
        super().__init__()
        self.gate = gate
        self.tool = tool
        self.read_tool = read_tool
        self.approval = approval
        self.reapproval = reapproval
        self._intent_of = intent

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the guarded tool's call through the gate; pass any other call to `handler`."""
        if request.tool_call["name"] != self.tool:
            return handler(request)
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        outcome = self.gate.submit(prepared)
        lease_id = prepared.lease_id
        while self.reapproval and outcome.status == "refused":
            again = _ask_again(request, prepared, outcome, lease_id)
            if isinstance(again, ToolMessage):
                return again
            lease_id = again.lease_id
            outcome = _tool_calls.approve_again(self.gate, outcome, again.lease_id, again.by)
        return _answer(request, outcome)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """`wrap_tool_call` for `ainvoke`/`astream`: the gate runs in a worker thread."""
        if request.tool_call["name"] != self.tool:
            return await handler(request)
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        outcome = await asyncio.to_thread(self.gate.submit, prepared)
        lease_id = prepared.lease_id
        while self.reapproval and outcome.status == "refused":
            again = _ask_again(request, prepared, outcome, lease_id)
            if isinstance(again, ToolMessage):
                return again
            lease_id = again.lease_id
            outcome = await asyncio.to_thread(
                _tool_calls.approve_again, self.gate, outcome, again.lease_id, again.by
            )
        return _answer(request, outcome)

    def _prepare(self, request: ToolCallRequest) -> Intent | ToolMessage:
        """The call's intent, after the person's answer when one is asked; or the answer
        to give the model instead, when there is nothing to send."""
        call = request.tool_call
        action_id = tool_action_id(request)
        call_id = call["id"] or ""
        try:
            asked = self._intent_of(call["args"])
        except (KeyError, TypeError, ValueError, IntentError) as e:
            return _error(
                request,
                f"not done: the call's arguments were not understood ({type(e).__name__}: {e}); "
                "nothing was sent. Call it again with the arguments its schema names.",
            )
        record = _seen_record(_messages(request.state), call_id, asked.target)
        fingerprint = record.get("fingerprint")
        if asked.currency is None and isinstance(record.get("currency"), str):
            asked = dataclasses.replace(asked, currency=record["currency"])
        if not isinstance(fingerprint, str):
            return _error(
                request,
                f"not done: {asked.target} was not read before this call, so there is nothing "
                f"to check the refund against; nothing was sent. Read it with {self.read_tool} "
                "first, then decide again.",
            )
        lease_id = asked.lease_id
        metadata: dict[str, str] = {}
        if self.approval:
            answer = interrupt(
                {
                    "type": APPROVAL_TYPE,
                    "action_id": action_id,
                    "tool_call_id": call_id,
                    "kind": asked.kind,
                    "target": asked.target,
                    "amount": asked.amount,
                    "currency": asked.currency,
                    "lease_id": lease_id,
                    "question": (
                        f"{asked.kind} {amount_words(asked.amount, asked.currency)} on "
                        f"{asked.target}?"
                    ),
                }
            )
            approved, by, lease_id, reason = _read_answer(answer, lease_id)
            if not approved:
                return _error(
                    request,
                    f"not done: {by} declined it ({reason}); nothing was sent. Do not retry: "
                    "tell the customer a person decided.",
                )
            metadata["approved_by"] = by
        try:
            return Intent(
                action_id,
                asked.kind,
                asked.target,
                asked.amount,
                lease_id,
                fingerprint,
                metadata,
                currency=asked.currency,
            )
        except IntentError as e:
            return _error(request, f"not done: {e}; nothing was sent.")


def _answer(request: ToolCallRequest, outcome: Outcome) -> ToolMessage:
    """The model's answer: the outcome in words, an error unless the refund exists."""
    ok = outcome.status in ("sent", "adopted")
    return ToolMessage(
        outcome_words(outcome),
        tool_call_id=request.tool_call["id"] or "",
        name=request.tool_call["name"],
        status="success" if ok else "error",
        artifact=outcome_data(outcome),
    )


def _ask_again(
    request: ToolCallRequest, intent: Intent, refused: Outcome, lease_id: str
) -> Reapproval | ToolMessage:
    """The person's answer to a refusal: the new approval, or the model's answer when they
    decline. On a re-run of the node, `interrupt()` returns the answers given, in order."""
    answer = interrupt(
        {
            "type": REAPPROVAL_TYPE,
            "action_id": refused.action_id,
            "tool_call_id": request.tool_call["id"],
            "reason": refused.reason,
            "kind": intent.kind,
            "target": intent.target,
            "amount": intent.amount,
            "currency": intent.currency,
            "lease_id": lease_id,
            "question": (
                f"refused because {refused.reason}: {intent.kind} "
                f"{amount_words(intent.amount, intent.currency)} on "
                f"{intent.target} under a new approval?"
            ),
        }
    )
    approved, by, lease_id, reason = _read_answer(answer, lease_id)
    if approved:
        return Reapproval(refused.action_id, lease_id, by)
    return ToolMessage(
        f"not done: refused because {refused.reason}, and {by} declined to approve it again "
        f"({reason}); nothing was sent (action {refused.action_id}). Do not retry: tell the "
        "customer a person decided.",
        tool_call_id=request.tool_call["id"] or "",
        name=request.tool_call["name"],
        status="error",
        artifact=outcome_data(refused),
    )


def _messages(state: Any) -> Sequence[BaseMessage]:
    messages = state.get("messages") if isinstance(state, Mapping) else None
    return messages if isinstance(messages, list) else []


def _error(request: ToolCallRequest, text: str) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(text, tool_call_id=call["id"] or "", name=call["name"], status="error")


def _read_answer(answer: Any, lease_id: str) -> tuple[bool, str, str, str]:
    """(approved, by, lease id, reason) from the person's resume value."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("approved"), bool):
        raise ValueError(
            f"the answer to an {APPROVAL_TYPE} or {REAPPROVAL_TYPE} interrupt must be a mapping "
            f"with 'approved': true or false (and 'by', 'lease_id', 'reason'); got {answer!r}. "
            "Resume the thread again with Command(resume={'approved': ..., 'by': ...})"
        )
    by = answer.get("by")
    by = by if isinstance(by, str) and by else "a person"
    lease = answer.get("lease_id", lease_id)
    if not isinstance(lease, str):
        raise ValueError(f"'lease_id' in the approval must be a string, got {lease!r}")
    reason = answer.get("reason")
    return answer["approved"], by, lease, reason if isinstance(reason, str) else "no reason given"
