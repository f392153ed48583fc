"""What the Temporal column shows from Temporal itself, read from hand-built protobufs.

`interlock_demo.engine.temporal.history` turns history events and describe()'s pending
activities into the column's event lines; these tests build the events as Temporal's
server would send them (temporalio's own protobuf classes) and need no server.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.converter import DataConverter

from interlock_demo.engine.temporal.history import (
    Activities,
    Closing,
    Note,
    model_answered,
    read_event,
    result_payloads,
    retry_notes,
)

WORKFLOW = "refund-case-run_1-interlock"
QUEUE = "interlock-demo-run_1-interlock"


def _event(event_id: int, kind: str) -> HistoryEvent:
    return HistoryEvent(event_id=event_id, event_type=EventType.Value(f"EVENT_TYPE_{kind}"))


def _scheduled(event_id: int, name: str) -> HistoryEvent:
    event = _event(event_id, "ACTIVITY_TASK_SCHEDULED")
    event.activity_task_scheduled_event_attributes.activity_type.name = name
    return event


def _started(event_id: int, scheduled: int, attempt: int) -> HistoryEvent:
    event = _event(event_id, "ACTIVITY_TASK_STARTED")
    attrs = event.activity_task_started_event_attributes
    attrs.scheduled_event_id = scheduled
    attrs.attempt = attempt
    return event


def _completed(event_id: int, scheduled: int, result: Any) -> HistoryEvent:
    event = _event(event_id, "ACTIVITY_TASK_COMPLETED")
    attrs = event.activity_task_completed_event_attributes
    attrs.scheduled_event_id = scheduled
    attrs.result.payloads.extend(DataConverter.default.payload_converter.to_payloads([result]))
    return event


def _failed(
    event_id: int, message: str, failure_type: str | None, non_retryable: bool
) -> HistoryEvent:
    event = _event(event_id, "ACTIVITY_TASK_FAILED")
    failure = event.activity_task_failed_event_attributes.failure
    failure.message = message
    if failure_type is not None:
        failure.application_failure_info.type = failure_type
        failure.application_failure_info.non_retryable = non_retryable
    return event


def _read(event: HistoryEvent, activities: Activities, result: Any = None) -> Note | Closing | None:
    return read_event(event, activities, result, workflow_id=WORKFLOW, task_queue=QUEUE)


def _pending(
    name: str, attempt: int, maximum: int, worker: str, failure: str
) -> PendingActivityInfo:
    info = PendingActivityInfo(
        attempt=attempt, maximum_attempts=maximum, last_worker_identity=worker
    )
    info.activity_type.name = name
    info.last_failure.message = failure
    return info


def test_the_workflow_start_names_the_workflow_and_its_task_queue() -> None:
    """WORKFLOW_EXECUTION_STARTED becomes a `temporal-started` line with the id and queue."""
    assert _read(_event(1, "WORKFLOW_EXECUTION_STARTED"), Activities()) == Note(
        "temporal-started", f"Temporal: workflow {WORKFLOW} started on task queue {QUEUE}"
    )


def test_a_completed_activity_is_named_with_the_attempt_it_completed_on() -> None:
    """Scheduling and starting show nothing; the completion names the activity from its
    scheduled event, the attempt from its started event, and the outcome in words."""
    activities = Activities()
    assert _read(_scheduled(5, "refund"), activities) is None
    assert _read(_started(6, 5, 2), activities) is None
    result = {"status": "sent", "refund_id": "re_1", "reason": "the gate sent it"}
    assert _read(_completed(7, 5, result), activities, result) == Note(
        "temporal-activity",
        "Temporal history: refund completed on attempt 2: sent (re_1): the gate sent it",
    )


def test_a_completion_whose_scheduling_was_not_seen_says_activity_attempt_one() -> None:
    """A completion read without its scheduled and started events still reads in words."""
    assert _read(_completed(9, 3, "done"), Activities(), "done") == Note(
        "temporal-activity", "Temporal history: activity completed on attempt 1: 'done'"
    )


@pytest.mark.parametrize(
    ("result", "decided"),
    [
        ({"amount": 4000, "text": "refund it"}, "issue_refund($40.00)"),
        ({"amount": None, "text": "not eligible"}, "no refund (not eligible)"),
    ],
)
def test_ask_models_result_is_the_models_decision(result: dict[str, Any], decided: str) -> None:
    """ask_model's completion is a `temporal-decision` line saying what the model decided."""
    activities = Activities()
    _read(_scheduled(5, "ask_model"), activities)
    assert _read(_completed(7, 5, result), activities, result) == Note(
        "temporal-decision",
        f"Temporal history: the model's decision, recorded as ask_model's result: {decided}",
    )


@pytest.mark.parametrize(
    ("failure_type", "non_retryable", "words"),
    [
        ("Refused", True, " (Refused, not retried)"),
        ("StripeUnreachable", False, " (StripeUnreachable, retryable)"),
        (None, False, ""),
    ],
)
def test_a_failed_activity_says_why_and_whether_temporal_retries_it(
    failure_type: str | None, non_retryable: bool, words: str
) -> None:
    """ACTIVITY_TASK_FAILED shows the application failure's type and retry, then the message."""
    event = _failed(8, "the claim is held", failure_type, non_retryable)
    assert _read(event, Activities()) == Note(
        "temporal-activity", f"Temporal history: activity task failed{words}: the claim is held"
    )


def test_a_timed_out_activity_says_so_with_its_failure_message() -> None:
    """ACTIVITY_TASK_TIMED_OUT reads in words with the timeout's own message."""
    event = _event(8, "ACTIVITY_TASK_TIMED_OUT")
    event.activity_task_timed_out_event_attributes.failure.message = "activity StartToClose timeout"
    assert _read(event, Activities()) == Note(
        "temporal-activity",
        "Temporal history: activity task timed out: activity StartToClose timeout",
    )


def test_a_completed_workflow_closes_with_its_result() -> None:
    """WORKFLOW_EXECUTION_COMPLETED is the closing, `completed`, carrying the result dict."""
    result = {"status": "adopted", "refund_id": "re_2", "action_id": "act_1"}
    closing = _read(_event(20, "WORKFLOW_EXECUTION_COMPLETED"), Activities(), result)
    assert closing == Closing(
        "completed", result, "Temporal history: workflow completed: adopted (re_2)"
    )
    assert isinstance(closing, Closing)
    assert closing.note == Note("temporal-closed", closing.text)


def test_a_workflow_completed_without_a_dict_closes_with_no_result() -> None:
    """A result that is not an outcome is shown as it is and gives the column no outcome."""
    closing = _read(_event(20, "WORKFLOW_EXECUTION_COMPLETED"), Activities(), None)
    assert closing == Closing("completed", None, "Temporal history: workflow completed: None")


@pytest.mark.parametrize(
    ("kind", "status", "text"),
    [
        (
            "WORKFLOW_EXECUTION_TERMINATED",
            "terminated",
            "workflow execution terminated: the demo run ended before the workflow closed",
        ),
        ("WORKFLOW_EXECUTION_FAILED", "failed", "workflow execution failed: boom"),
        ("WORKFLOW_EXECUTION_TIMED_OUT", "timed out", "workflow execution timed out"),
        ("WORKFLOW_EXECUTION_CANCELED", "canceled", "workflow execution canceled"),
        (
            "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
            "continued as new",
            "workflow execution continued as new",
        ),
    ],
)
def test_every_other_close_ends_the_workflow_with_its_status_and_why(
    kind: str, status: str, text: str
) -> None:
    """Each non-completed close is a `Closing` with no result, saying the reason it carries."""
    event = _event(20, kind)
    if kind == "WORKFLOW_EXECUTION_TERMINATED":
        event.workflow_execution_terminated_event_attributes.reason = (
            "the demo run ended before the workflow closed"
        )
    if kind == "WORKFLOW_EXECUTION_FAILED":
        event.workflow_execution_failed_event_attributes.failure.message = "boom"
    assert _read(event, Activities()) == Closing(status, None, f"Temporal history: {text}")


def test_events_the_column_does_not_show_read_as_nothing() -> None:
    """Workflow tasks and timers are Temporal's bookkeeping: no line for them."""
    for kind in ("WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_COMPLETED", "TIMER_FIRED"):
        assert _read(_event(2, kind), Activities()) is None


def test_result_payloads_are_the_completions_results_only() -> None:
    """The payloads to decode are an activity's or the workflow's result; other events have none."""
    done = _completed(7, 5, {"status": "sent"})
    (payload,) = result_payloads(done)
    assert DataConverter.default.payload_converter.from_payloads([payload]) == [{"status": "sent"}]
    closed = _event(20, "WORKFLOW_EXECUTION_COMPLETED")
    closed.workflow_execution_completed_event_attributes.result.payloads.extend(
        DataConverter.default.payload_converter.to_payloads(["over"])
    )
    assert len(result_payloads(closed)) == 1
    assert result_payloads(_scheduled(5, "refund")) == []
    assert result_payloads(_failed(8, "no", None, False)) == []


def test_the_model_answered_once_ask_models_completion_is_in_the_history() -> None:
    """Only ask_model's completion counts: scheduled alone, or another activity done, does not."""
    asked = [_event(1, "WORKFLOW_EXECUTION_STARTED"), _scheduled(5, "ask_model")]
    assert not model_answered(asked)
    assert model_answered([*asked, _started(6, 5, 1), _completed(7, 5, {"amount": 4000})])
    refund = [_scheduled(5, "refund"), _completed(7, 5, {"status": "sent"})]
    assert not model_answered(refund)


def test_retry_notes_say_each_retry_once_with_why_the_attempt_before_failed() -> None:
    """Attempt 2 on describe() is one `temporal-retry` line; polled again it is not repeated,
    and attempt 1 (no retry yet) says nothing."""
    seen: set[tuple[str, int]] = set()
    first = _pending("ask_model", 1, 3, "worker-1", "")
    retry = _pending("refund", 2, 0, "worker-1@host", "worker killed")
    assert retry_notes([first, retry], seen) == [
        Note(
            "temporal-retry",
            "Temporal describe: refund attempt 2 of unlimited; attempt 1 on worker "
            "worker-1@host failed: worker killed",
        )
    ]
    assert retry_notes([first, retry], seen) == []
    third = _pending("refund", 3, 5, "", "")
    assert retry_notes([third], seen) == [
        Note(
            "temporal-retry",
            "Temporal describe: refund attempt 3 of 5; attempt 2 on worker a worker failed: "
            "no failure recorded",
        )
    ]
