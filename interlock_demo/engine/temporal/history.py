"""What Temporal says about a column's workflow, as lines for the column's events.

Plain functions over Temporal's own protobufs, so they are tested without a server:
`read_event` turns one history event into a `Note` (or the workflow's `Closing`), with
`Activities` carrying what earlier events said (each activity's name and attempt);
`retry_notes` turns describe()'s pending activities into one note per retry, which the
history has no event for; `model_answered` says whether ask_model's result is recorded.

The payloads an event carries are decoded by the caller (that needs the client's data
converter): `result_payloads` says which, and `read_event` takes the decoded value.
temporalio is imported inside the functions, as the package's other modules do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from interlock import format_amount
from interlock_demo.core.run import RunEventKind
from scenarios import CURRENCY

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.api.workflow.v1 import PendingActivityInfo

_WORKFLOW_CLOSES = frozenset(
    {
        "WORKFLOW_EXECUTION_FAILED",
        "WORKFLOW_EXECUTION_TIMED_OUT",
        "WORKFLOW_EXECUTION_TERMINATED",
        "WORKFLOW_EXECUTION_CANCELED",
        "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
    }
)


@dataclass(frozen=True)
class Note:
    """One line for the column's events: its kind (`temporal-...`) and its text."""

    kind: str
    text: str


@dataclass(frozen=True)
class Closing:
    """How the workflow closed (`completed`, `failed`, `terminated`, ...), its result when
    it completed with one, and the line for the column's events (kind `temporal-closed`)."""

    status: str
    result: dict[str, Any] | None
    text: str

    @property
    def note(self) -> Note:
        """The closing line as a column event."""
        return Note(RunEventKind.TEMPORAL_CLOSED, self.text)


@dataclass
class Activities:
    """What a workflow's history has said so far of its activities, by scheduled event id."""

    names: dict[int, str] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)

    def see(self, event: HistoryEvent) -> None:
        """Remember an activity's name when it is scheduled and its attempt when started."""
        kind = _event_kind(event)
        if kind == "ACTIVITY_TASK_SCHEDULED":
            attrs = event.activity_task_scheduled_event_attributes
            self.names[event.event_id] = attrs.activity_type.name
        elif kind == "ACTIVITY_TASK_STARTED":
            started = event.activity_task_started_event_attributes
            self.attempts[started.scheduled_event_id] = started.attempt

    def completed(self, event: HistoryEvent) -> str | None:
        """The name of the activity this event completes (`activity` if it was never seen
        scheduled), or None when the event completes no activity."""
        if _event_kind(event) != "ACTIVITY_TASK_COMPLETED":
            return None
        done = event.activity_task_completed_event_attributes
        return self.names.get(done.scheduled_event_id, "activity")


def result_payloads(event: HistoryEvent) -> list[Payload]:
    """The payloads whose decoded value `read_event` needs: a completed activity's or the
    completed workflow's result; none for any other event."""
    kind = _event_kind(event)
    if kind == "ACTIVITY_TASK_COMPLETED":
        return list(event.activity_task_completed_event_attributes.result.payloads)
    if kind == "WORKFLOW_EXECUTION_COMPLETED":
        return list(event.workflow_execution_completed_event_attributes.result.payloads)
    return []


def read_event(
    event: HistoryEvent,
    activities: Activities,
    result: Any = None,
    *,
    workflow_id: str,
    task_queue: str,
) -> Note | Closing | None:
    """One history event as a column event, the workflow's `Closing`, or None.

    `result` is the first of `result_payloads(event)`, decoded. `activities` is updated
    from the event first, so call this with every event in the history's order.
    """
    from workers.temporal_workflows import ACTIVITY_ASK_MODEL

    activities.see(event)
    kind = _event_kind(event)
    if kind == "WORKFLOW_EXECUTION_STARTED":
        return Note(
            RunEventKind.TEMPORAL_STARTED,
            f"Temporal: workflow {workflow_id} started on task queue {task_queue}",
        )
    name = activities.completed(event)
    if name is not None:
        done = event.activity_task_completed_event_attributes
        attempt = activities.attempts.get(done.scheduled_event_id, 1)
        if name == ACTIVITY_ASK_MODEL and isinstance(result, dict):
            return Note(RunEventKind.TEMPORAL_DECISION, _decision_text(result))
        return Note(
            RunEventKind.TEMPORAL_DECISION
            if name == ACTIVITY_ASK_MODEL
            else RunEventKind.TEMPORAL_ACTIVITY,
            f"Temporal history: {name} completed on attempt {attempt}: {_outcome_words(result)}",
        )
    if kind in ("ACTIVITY_TASK_FAILED", "ACTIVITY_TASK_TIMED_OUT"):
        return Note(
            RunEventKind.TEMPORAL_ACTIVITY,
            f"Temporal history: {_words(kind)}{_kind(event)}{_why(event)}",
        )
    if kind == "WORKFLOW_EXECUTION_COMPLETED":
        text = f"Temporal history: workflow completed: {_outcome_words(result)}"
        return Closing("completed", result if isinstance(result, dict) else None, text)
    if kind in _WORKFLOW_CLOSES:
        text = f"Temporal history: {_words(kind)}{_why(event)}"
        return Closing(_words(kind).removeprefix("workflow execution "), None, text)
    return None


def model_answered(events: Iterable[HistoryEvent]) -> bool:
    """Whether the history records ask_model as completed: the model's decision is in it."""
    from workers.temporal_workflows import ACTIVITY_ASK_MODEL

    activities = Activities()
    for event in events:
        activities.see(event)
        if activities.completed(event) == ACTIVITY_ASK_MODEL:
            return True
    return False


def retry_notes(pending: Iterable[PendingActivityInfo], seen: set[tuple[str, int]]) -> list[Note]:
    """A note for each pending activity on a retry (attempt 2 or later) not in `seen`,
    saying why its previous attempt failed; adds what it notes to `seen`."""
    notes = []
    for activity in pending:
        name = activity.activity_type.name
        key = (name, activity.attempt)
        if activity.attempt > 1 and key not in seen:
            seen.add(key)
            failure = activity.last_failure.message or "no failure recorded"
            worker = activity.last_worker_identity or "a worker"
            notes.append(
                Note(
                    RunEventKind.TEMPORAL_RETRY,
                    f"Temporal describe: {name} attempt {activity.attempt} of "
                    f"{activity.maximum_attempts or 'unlimited'}; attempt "
                    f"{activity.attempt - 1} on worker {worker} failed: {failure}",
                )
            )
    return notes


def _event_kind(event: HistoryEvent) -> str:
    """The event's type without its prefix: `ACTIVITY_TASK_COMPLETED`."""
    from temporalio.api.enums.v1 import EventType

    # Typed through a variable: without the optional temporalio, EventType is Any.
    name: str = EventType.Name(event.event_type)
    return name.removeprefix("EVENT_TYPE_")


def _words(kind: str) -> str:
    return kind.replace("_", " ").lower()


def _why(event: HistoryEvent) -> str:
    """The failure message or reason an ending event carries, as ': ...', or ''."""
    which = event.WhichOneof("attributes")
    attrs = getattr(event, which) if which else None
    failure = getattr(attrs, "failure", None)
    message = getattr(failure, "message", "") or getattr(attrs, "reason", "")
    return f": {message}" if message else ""


def _kind(event: HistoryEvent) -> str:
    """An application failure's type and whether Temporal retries it, as ' (...)', or ''."""
    failure = event.activity_task_failed_event_attributes.failure
    if not failure.HasField("application_failure_info"):
        return ""
    info = failure.application_failure_info
    return f" ({info.type}, {'not retried' if info.non_retryable else 'retryable'})"


def _outcome_words(result: Any) -> str:
    if not isinstance(result, dict):
        return repr(result)
    text = str(result.get("status"))
    if result.get("refund_id"):
        text += f" ({result['refund_id']})"
    if result.get("reason"):
        text += f": {result['reason']}"
    return text


def _decision_text(result: dict[str, Any]) -> str:
    """ask_model's result: the refund it asked for, or the model's words when it asked none."""
    amount = result.get("amount")
    decided = (
        f"issue_refund({format_amount(int(amount), CURRENCY)})"
        if amount is not None
        else f"no refund ({result.get('text')})"
    )
    return f"Temporal history: the model's decision, recorded as ask_model's result: {decided}"
