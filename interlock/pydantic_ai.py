"""Guard a Pydantic AI tool with the gate (needs the `pydantic-ai` extra).

`InterlockToolset` is a `WrapperToolset`: wrap the toolset that holds the irreversible
tool (a refund) and its `call_tool` takes that one tool over. It turns the model's call
into an `Intent` (`intent` reads the call's arguments), runs it through the gate in a
worker thread, and answers the model in words it can act on. The tool's own body never
runs: the gate's effect is what sends. Every other tool of the toolset passes through.

- **One action per tool call.** The action id is
  `pydantic-ai:<conversation id>:<tool call id>` (`action_id_for`). Both are in the
  message history (Pydantic AI resumes a conversation under the `conversation_id` its
  history carries), so a resume of the same call, `agent.run(message_history=saved,
  deferred_tool_results=...)`, names the same action: the gate finds it journaled, waits
  out a dead process's claim, adopts the refund that process made, or re-checks the
  approval and the refunds the model saw, and refuses if either changed.
- **The refunds the model saw** travel in the call: the read tool shows the payment with
  its `refunds_fingerprint` and the refund tool takes it as an argument, so a resume
  replays the decision as it was made (a fresh read would hide a change made meanwhile).
- **A person approves through Pydantic AI's deferred tools.** With `approval=True` the
  call raises `ApprovalRequired` before anything is journaled: the run ends with
  `DeferredToolRequests` (its `metadata[call id]["type"] == "interlock_approval"`); save
  `result.all_messages_json()` and run again with the saved history and
  `DeferredToolResults(approvals={call id: True})`. With `reapproval=True`, a refusal
  (the approval was revoked, the payment changed) raises `ApprovalRequired` again, typed
  `"interlock_reapproval"` and naming the refused action and why; approve it with
  `metadata={call id: Reapproval(refused action, new lease, by).to_dict()}` and the gate's
  `reapprove` sends under the new approval, as a new action the receipt links to the
  refused one. `ToolDenied` sends nothing (Pydantic AI answers the model itself). Every
  resume re-runs the call from the top: the journal answers the first send (refused, as
  recorded) and the re-approval (under an id derived from the refused one), so neither
  is decided twice, even after a kill. To approve exactly what the person saw, sign
  `exact_approval(approver, metadata[call id])` (that action, once) and approve with
  `metadata={call id: Reapproval(this call's action id, its lease id, by).to_dict()}`: the
  call is sent under it, and the gate refuses another amount or target under it.
- **A restarted worker** calls `gate.recover()` first, before it takes new work: it
  finishes every action a dead worker left (a refund that reached Stripe is adopted and
  receipted, an unknown one looked up, never resent), even one whose run is never
  resumed. Then it resumes each run the dead worker left from its saved history and the
  same deferred results; the resumed call is answered from the journal. Not from the
  user's prompt again: that is a new decision with new call ids.
- **Words for the model** (`outcome_words`): *done* for `sent` and `adopted`; *not done,
  refused* with the reason (do not retry, a person decides); *not done yet* for pending and
  unknown (do not retry, do not ask for a new refund: the same action is carried on).
  Arguments the `intent` function cannot read (a `KeyError`, `TypeError`, `ValueError` or
  `IntentError`) are a `ModelRetry`: nothing is journaled.

The guide's example (`docs/guides/pydantic-ai.md`) runs in-process against the fake
payments with Pydantic AI's own `FunctionModel`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

try:
    from pydantic_ai import ApprovalRequired, ModelRetry, RunContext
    from pydantic_ai.toolsets import WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as e:  # pragma: no cover - exercised in a subprocess without pydantic-ai
    raise ImportError(
        "interlock.pydantic_ai needs Pydantic AI: pip install './packaging/interlock[pydantic-ai]' "
        "(the core of interlock works without it)"
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
    "FRAMEWORK",
    "InterlockToolset",
    "outcome_words",
    "Reapproval",
    "REAPPROVAL_TYPE",
    "tool_action_id",
    "ToolIntent",
]

FRAMEWORK = "pydantic-ai"
"""The first part of every action id this module makes."""


@dataclass(frozen=True)
class ToolIntent:
    """What a guarded call asks for, from its arguments: all of an `Intent` but the action
    id, which the guard supplies from the call."""

    kind: str
    target: str
    amount: int
    lease_id: str
    fingerprint: str
    # The amount's currency (lowercase ISO 4217), when the read showed it: the intent
    # records it, the words and the approval are in it, and a refund in another one than
    # its payment's is refused.
    currency: str | None = None


def action_id_for(conversation_id: str, tool_call_id: str) -> str:
    """The action id of one tool call: `pydantic-ai:<conversation id>:<tool call id>`.

    Each part percent-encoded where it is not a letter, digit or one of `_.-~`; longer than
    200 characters it becomes `pydantic-ai!<its first 120 characters>!<sha256 of it>`.
    """
    return _tool_calls.action_id_for(FRAMEWORK, conversation_id, tool_call_id)


def tool_action_id(ctx: RunContext[Any]) -> str:
    """The action id of the tool call `ctx` runs (see `action_id_for`)."""
    if ctx.tool_call_id is None or ctx.conversation_id is None:
        raise RuntimeError(
            "interlock.pydantic_ai.tool_action_id() needs the RunContext of a running tool call "
            f"(tool_call_id={ctx.tool_call_id!r}, conversation_id={ctx.conversation_id!r}); "
            "call it inside the tool, with the ctx Pydantic AI passes to it"
        )
    return action_id_for(ctx.conversation_id, ctx.tool_call_id)


@dataclass
class InterlockToolset(WrapperToolset[Any]):
    """Sends one tool's calls through a `Gate`; see the module docstring.

    `tool`: the guarded tool's name (declare it in the wrapped toolset as usual, for its
    schema and its description; its body never runs). `intent`: the `ToolIntent` of the
    call's arguments. `approval`: ask a person before each send. `reapproval`: ask a person
    again after a refusal. Make one per process and share it between runs.
    """

    _: KW_ONLY
    gate: Gate
    tool: str
    intent: Callable[[Mapping[str, Any]], ToolIntent]
    approval: bool = False
    reapproval: bool = False

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the guarded tool's call through the gate; pass any other call through."""
        if name != self.tool:
            return await super().call_tool(name, tool_args, ctx, tool)
        action_id = tool_action_id(ctx)
        try:
            asked = self.intent(tool_args)
            intent = Intent(
                action_id,
                asked.kind,
                asked.target,
                asked.amount,
                asked.lease_id,
                asked.fingerprint,
                currency=asked.currency,
            )
        except (KeyError, TypeError, ValueError, IntentError) as e:
            raise ModelRetry(
                f"not done: the call's arguments were not understood ({type(e).__name__}: {e}); "
                "nothing was sent. Call it again with the arguments its schema names."
            ) from e
        if self.approval and not ctx.tool_call_approved:
            raise ApprovalRequired(_question(APPROVAL_TYPE, intent, action_id))
        outcome = await asyncio.to_thread(self._run, intent, _reapproval(ctx))
        if self.reapproval and outcome.status == "refused":
            raise ApprovalRequired(
                _question(REAPPROVAL_TYPE, intent, outcome.action_id, outcome.reason)
            )
        return outcome_words(outcome)

    def _run(self, intent: Intent, answer: Reapproval | None) -> Outcome:
        intent, answer = _tool_calls.under_approval(self.gate, intent, answer)
        return _tool_calls.carry_on(self.gate, self.gate.submit(intent), answer)


def _reapproval(ctx: RunContext[Any]) -> Reapproval | None:
    """The person's re-approval the resume carries in `DeferredToolResults.metadata`."""
    data = ctx.tool_call_metadata
    if not ctx.tool_call_approved or not isinstance(data, Mapping):
        return None
    if "lease_id" not in data and "action_id" not in data:
        return None
    return Reapproval.from_dict(data)


def _question(
    kind: str, intent: Intent, action_id: str, reason: str | None = None
) -> dict[str, Any]:
    """What `DeferredToolRequests.metadata` shows the person for this call."""
    ask = f"{intent.kind} {amount_words(intent.amount, intent.currency)} on {intent.target}"
    if reason is not None:
        ask = f"refused because {reason}: {ask} under a new approval"
    return {
        "type": kind,
        "action_id": action_id,
        "reason": reason,
        "kind": intent.kind,
        "target": intent.target,
        "amount": intent.amount,
        "currency": intent.currency,
        "lease_id": intent.lease_id,
        "question": ask + "?",
    }
