"""What the framework guards share: the action id of a tool call, and a person's approvals.

A framework guard (`interlock.langchain`, `interlock.pydantic_ai`,
`interlock.openai_agents`) turns an agent's tool call into an `Intent` and its `Outcome`
back into the tool's answer. What is the same for every framework lives here once:

- **The action id of a tool call**: `<framework>:<scope>:<tool call id>`, each part
  percent-encoded (so a `:` inside an id cannot make two ids meet, and whitespace or
  non-ASCII cannot reach Stripe's Idempotency-Key header), hashed past 200 characters as
  `interlock.temporal` does. The scope (a conversation) keeps a tool call id that repeats
  across conversations (a scripted model's, or a provider's reused one) from naming another
  conversation's refund; the framework's own resume replays the same call id, so it names
  the same action.
- **A person's approval after a refusal**: the gate refuses (the approval was revoked,
  the payment changed); a person may approve it again, through the framework's own way of
  asking. `approve_again` runs that re-approval under an action id derived from the
  refused one (`reapproval_id`), so a framework's re-run of the same call (LangGraph's
  node after a resume, a process resumed after a kill) finds the re-approval journaled
  and carries it on instead of deciding again.
- **Exact approvals**: `exact_approval(approver, question)` is what a person's tool grants
  for a guard's question: exactly that action (its kind, target and amount), once, signed
  by the person's key. What runs must then be what was approved: the gate refuses another
  amount, another target or a second action under it.
- **The words for the model** live in `interlock._integrations.words`, shared with the MCP desk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from interlock._core.approvals import Approver
from interlock._core.gate import Gate, Outcome
from interlock._core.journal import MAX_ID_LENGTH, Intent
from interlock._core.leases import Lease

_HASHED_HEAD = 120

APPROVAL_TYPE = "interlock_approval"
"""The type of a guard's question to a person before a send, so a client tells it from others."""
REAPPROVAL_TYPE = "interlock_reapproval"
"""The type of a guard's question to a person after a refusal: approve it again?"""


def exact_approval(
    approver: Approver, question: Mapping[str, Any], *, expires_in_s: float = 3600.0
) -> Lease:
    """The signed approval of exactly what a guard asked a person (`question`: its
    `kind`, `target`, `amount` and `action_id`), once. Store it (`store.grant_lease`) and
    resume with its id as the answer's `lease_id`; run this where the person's key is,
    never in the agent's worker."""
    action_id = str(question["action_id"])
    return approver.grant(
        kind=str(question["kind"]),
        target=str(question["target"]),
        amount=int(question["amount"]),
        expires_in_s=expires_in_s,
        lease_id=_hashed(f"exact:{action_id}", "exact"),
    )


def action_id_for(framework: str, scope: str, tool_call_id: str) -> str:
    """The action id of one tool call of one conversation, for `framework`'s guard."""
    for name, value in (("scope", scope), ("tool_call_id", tool_call_id)):
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"{framework}: the tool call has no {name} (got {value!r}); an action id needs "
                "the conversation and the tool call id the framework replays on resume"
            )
    plain = ":".join([framework, quote(scope, safe=""), quote(tool_call_id, safe="")])
    return _hashed(plain, framework)


def _hashed(plain: str, head: str) -> str:
    if len(plain) <= MAX_ID_LENGTH:
        return plain
    digest = hashlib.sha256(plain.encode("ascii")).hexdigest()
    return f"{head}!{plain[len(head) + 1 :][:_HASHED_HEAD]}!{digest}"


# `+` is percent-encoded in every part `action_id_for` joins, so no tool call id can name
# another call's re-approval.
_AGAIN = "+again"


def reapproval_id(action_id: str) -> str:
    """The action id a person's approval of the refused `action_id` is sent under.

    The same on every re-run, so a re-run finds it; hashed as `action_id_for` does when the
    chain of re-approvals grows past 200 characters."""
    return _hashed(action_id + _AGAIN, action_id.split(":", 1)[0].split("!", 1)[0])


def reapproved_from(action_id: str) -> str:
    """The action id of the tool call a re-approval's action id (`reapproval_id`, once or
    more) was derived from; any other action id as it is. A hashed chain (past 200
    characters) is returned as it is: its call's id is no longer in it."""
    while action_id.endswith(_AGAIN):
        action_id = action_id[: -len(_AGAIN)]
    return action_id


@dataclass(frozen=True)
class Reapproval:
    """A person's approval of a refused action: the new approval (lease) it is sent under."""

    action_id: str
    lease_id: str
    by: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready data, for the framework's saved state (metadata, run context)."""
        return {"action_id": self.action_id, "lease_id": self.lease_id, "by": self.by}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reapproval:
        """A re-approval from `to_dict` data; `ValueError` naming the field that is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(
                f"a re-approval must be a mapping with 'action_id', 'lease_id' and 'by', got "
                f"{data!r}; build it with Reapproval(...).to_dict()"
            )
        values = {}
        for name in ("action_id", "lease_id", "by"):
            value = data.get(name)
            if not isinstance(value, str) or not value:
                raise ValueError(
                    f"a re-approval needs {name!r} as a non-empty string, got {value!r}: the "
                    "refused action it answers, the approval the person granted, and who"
                )
            values[name] = value
        return cls(**values)


def under_approval(
    gate: Gate, intent: Intent, answer: Reapproval | None
) -> tuple[Intent, Reapproval | None]:
    """A person's answer that names this very call before it was journaled approves it
    under their own approval, such as an `exact_approval` of what they were shown: the call
    is sent under that lease instead of the one it named. Any other answer (a re-approval
    of a refused action, this one included once journaled) is left as it is."""
    if answer is None or answer.action_id != intent.action_id:
        return intent, answer
    if gate.store.action(intent.action_id) is not None:
        return intent, answer
    metadata = {**intent.metadata, "approved_by": answer.by}
    return replace(intent, lease_id=answer.lease_id, metadata=metadata), None


def approve_again(gate: Gate, refused: Outcome, lease_id: str, by: str) -> Outcome:
    """Send the refused action again under the person's new approval `lease_id`.

    A re-run of the same re-approval finds it journaled and carries it on (adopting a
    refund a killed process made) instead of deciding again on a state it changed."""
    again = reapproval_id(refused.action_id)
    if gate.store.action(again) is not None:
        return gate.recover_action(again)
    return gate.reapprove(refused.action_id, lease_id, by, new_action_id=again)


def carry_on(gate: Gate, outcome: Outcome, answer: Reapproval | None) -> Outcome:
    """Follow a refused action to its latest re-approval: those already journaled (a re-run
    finds them), then `answer` when it names the refused action it reached."""
    while outcome.status == "refused":
        again = reapproval_id(outcome.action_id)
        if gate.store.action(again) is not None:
            outcome = gate.recover_action(again)
        elif answer is not None and answer.action_id == outcome.action_id:
            outcome = gate.reapprove(
                outcome.action_id, answer.lease_id, answer.by, new_action_id=again
            )
        else:
            break
    return outcome
