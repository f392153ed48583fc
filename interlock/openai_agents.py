"""Guard an OpenAI Agents SDK function tool with the gate (needs the `openai-agents` extra).

The agent's refund tool (a `function_tool`, best with `needs_approval=True`) builds an
`Intent` from its arguments and hands it to `ToolGate.send`, which runs it through the gate
and answers the model in words it can act on. A restarted process resumes the SDK's way:
`RunState.from_json(agent, saved)` (or `from_string`), approve, `Runner.run(agent,
state)`, which calls the same tool with the same call id again:

- **One action per tool call.** `tool_action_id(ctx, scope)` is
  `openai-agents:<scope>:<call id>` (see `action_id_for`). The call id is the model's, kept
  in the serialized `RunState`; the scope is the app's name for the conversation (a case
  or thread id it keeps with the saved state), because a call id alone may repeat across
  conversations. So the resumed call names the same action: the gate finds it journaled,
  waits out a dead process's claim, adopts the refund that process made, or re-checks the
  approval and the refunds the model saw, and refuses if either changed.
- **A restarted worker** calls `gate.recover()` first, before it takes new work: it
  finishes every action a dead worker left (a refund that reached Stripe is adopted and
  receipted, an unknown one looked up, never resent), even one whose run is never
  resumed. Then it resumes each saved run as above; the resumed call is answered from the
  journal. Not from the user's prompt again: that is a new decision with new call ids.
- **The refunds the model saw** travel in the call: the read tool shows the payment with
  its `refunds_fingerprint` and the refund tool takes it as an argument, so a resume
  replays the decision as it was made.
- **Words for the model** (`outcome_words`): *done* for `sent` and `adopted`; *not done,
  refused* with the reason; *not done yet* for pending and unknown (do not retry, do not
  ask for a new refund: the same action is carried on).
- **When the guard raises** (a store it cannot write, an action id journaled with another
  decision), the SDK answers with the tool's `failure_error_function`, by default "An
  error occurred while running the tool. Please try again.": give the guarded tool
  `failure_error_function=failure_words`, which tells the model that whether it was done
  is not known, not to retry, and that a person will review it.

With `needs_approval=True` the run stops with `result.interruptions`; save
`result.to_state().to_json()` and resume from it once a person approved. That saved state
is also what a process that died inside the tool resumes from.

**After a refusal** (the approval was revoked, the payment changed while the run waited)
a person may approve the call again, through the same interruption: resume the saved
state once more with `RunState.from_json(agent, saved, context_override=...)`, the run
context carrying `{REAPPROVAL_KEY: Reapproval(refused action, new lease, by).to_dict()}`,
and `state.approve(item)`. The SDK calls the same tool with the same call id; the gate's
journal answers the first send (refused, as recorded) and `send(intent, again=...)` runs
the gate's `reapprove` under the new approval, as a new action the receipt links to the
refused one, under an id derived from it: a resume of the same answer (after a kill, or
twice) carries that action on and never decides it twice. `ToolGate.outcome(action_id)`
is the latest outcome of a call's action (its re-approvals followed): the refused action
to name, or the refund made. `state.reject(item)` sends nothing. The guide's example
(`docs/guides/openai-agents.md`) runs in-process against the fake payments with the
SDK's own `agents.testing.ScriptedModel`.

**Exactly what the person saw.** A person may approve a call under an approval of their
own: `exact_approval(approver, {"action_id": ..., "kind": ..., "target": ..., "amount":
...})` signs exactly that action, once; pass `Reapproval(that call's own action id, its
lease id, by)` as `again` and the call is sent under it. What runs must be what was
approved: the gate refuses another amount or target, or a second action, under it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

try:
    from agents.run_context import RunContextWrapper
    from agents.tool_context import ToolContext
except ImportError as e:  # pragma: no cover - exercised in a subprocess without the SDK
    raise ImportError(
        "interlock.openai_agents needs the OpenAI Agents SDK: pip install "
        "'./packaging/interlock[openai-agents]' (the core of interlock works without it)"
    ) from e

from interlock._core.gate import Gate, Outcome
from interlock._core.journal import Intent
from interlock._integrations import tool_calls as _tool_calls
from interlock._integrations.tool_calls import Reapproval, exact_approval
from interlock._integrations.words import error_words, outcome_words

__all__ = [  # noqa: RUF022 - sorted case-insensitively, as interlock's own __all__
    "action_id_for",
    "exact_approval",
    "failure_words",
    "FRAMEWORK",
    "outcome_words",
    "Reapproval",
    "REAPPROVAL_KEY",
    "reapproval_in",
    "tool_action_id",
    "ToolGate",
]

FRAMEWORK = "openai-agents"
"""The first part of every action id this module makes."""
REAPPROVAL_KEY = "interlock_reapproval"
"""The key of a mapping run context under which a resume carries a person's `Reapproval`."""


def action_id_for(scope: str, call_id: str) -> str:
    """The action id of one tool call: `openai-agents:<scope>:<call id>`.

    Each part percent-encoded where it is not a letter, digit or one of `_.-~`; longer than
    200 characters it becomes `openai-agents!<its first 120 characters>!<sha256 of it>`.
    """
    return _tool_calls.action_id_for(FRAMEWORK, scope, call_id)


def tool_action_id(ctx: ToolContext[Any], scope: str) -> str:
    """The action id of the tool call `ctx` runs, in the conversation `scope` names."""
    return action_id_for(scope, ctx.tool_call_id)


def reapproval_in(ctx: ToolContext[Any]) -> Reapproval | None:
    """The person's re-approval the run context carries (see `REAPPROVAL_KEY`), if any."""
    context = ctx.context
    if not isinstance(context, Mapping) or context.get(REAPPROVAL_KEY) is None:
        return None
    return Reapproval.from_dict(context[REAPPROVAL_KEY])


def failure_words(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """The guarded tool's answer when it raised: give it as the tool's
    `failure_error_function`.

    `@function_tool(needs_approval=True, failure_error_function=failure_words)`. Without
    it the SDK answers any exception with "An error occurred while running the tool.
    Please try again.", which invites the model to decide the refund again; these words
    say that whether it was done is not known, not to retry, and that a person will review
    it (`ToolGate.send` itself answers every outcome in words and raises only when it
    cannot reach one: a store it cannot write, an action id journaled with another
    decision, a malformed re-approval).
    """
    return error_words(error, getattr(ctx, "tool_call_id", None))


class ToolGate:
    """A `Gate` for function tools: runs an intent and answers the model in words.

    Make one per process and share it between runs; the gate blocks on the store and on
    Stripe, so `send` runs it in a worker thread and the event loop keeps going.
    """

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def submit(self, intent: Intent, again: Reapproval | None = None) -> Outcome:
        """Run `intent` through the gate in a worker thread, then its re-approvals (those
        journaled, and `again` when it names the refused action reached); the outcome."""
        return await asyncio.to_thread(self._run, intent, again)

    async def send(self, intent: Intent, again: Reapproval | None = None) -> str:
        """`submit`; the outcome as the tool's answer to the model."""
        return outcome_words(await self.submit(intent, again))

    def outcome(self, action_id: str) -> Outcome | None:
        """The recorded outcome of a call's action, its re-approvals followed (read from
        the journal, nothing sent); None when the call journaled nothing yet."""
        state = self.gate.store.action(action_id)
        while state is not None:
            outcome = Outcome.from_state(state)
            again = self.gate.store.action(_tool_calls.reapproval_id(action_id))
            if outcome.status != "refused" or again is None:
                return outcome
            action_id, state = again.intent.action_id, again
        return None

    def _run(self, intent: Intent, again: Reapproval | None) -> Outcome:
        intent, again = _tool_calls.under_approval(self.gate, intent, again)
        return _tool_calls.carry_on(self.gate, self.gate.submit(intent), again)
