"""OpenTelemetry traces of a gate: one span per guarded call, each gate step on it.

`traced(gate)` makes a gate (the one a framework guard, the MCP desk, a Temporal activity
or your own code holds) trace every call it runs, with the OpenTelemetry API's global
tracer provider or the one given. Needs the `otel` extra (`opentelemetry-api`; an SDK and
an exporter of your choice configure where the spans go). `import interlock` never
imports OpenTelemetry: only importing this module does.

What a traced gate produces:

- **`execute_tool {tool_name}`** per guarded call (`submit`, `recover_action`,
  `reapprove`), named and tagged as the GenAI semantic conventions name a tool call:
  `gen_ai.operation.name=execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.type=function`,
  `gen_ai.tool.call.id` (the framework's tool call id when the action id is a guard's or a
  re-approval of one, else the action id). What the conventions lack is under
  `interlock.*`: `action_id`, `framework` (`langchain`, `pydantic-ai`, `openai-agents`,
  `temporal`, or `mcp` for the MCP desk), `kind`, `target`, `currency`, `recovery` (a
  recovery, not a new decision), `attempt` and `epoch` (the claim's), `outcome` (`sent`,
  `adopted`, `refused`, `failed`, `pending`, or `unknown`: a send nobody can tell landed,
  which is not an error), `external_id`, `code`, `grant.digest`, `grant.signer` (the
  approval's key id), `grant.by`, `receipt.hash`, `receipt.seq` and `receipt.log_index`
  (when the receipt entered the receipt log during the call). A `failed` outcome or an
  exception sets the status to ERROR with `error.type`; `refused` and `unknown` leave it
  unset.
- **Span events** for the steps: `interlock.journal`, `interlock.claim`,
  `interlock.claim_wait`, `interlock.turn_wait`, `interlock.lookup`,
  `interlock.currency_check`, `interlock.world_check`, `interlock.approval_signature_check`,
  `interlock.approval_check`, `interlock.read_unsettled`, `interlock.sending`,
  `interlock.unknown`, `interlock.in_flight_wait`, `interlock.conflict`,
  `interlock.reapprove_adopts`, `interlock.settle`, `interlock.receipt`, `interlock.logged`,
  `interlock.left_to_recovery`.
- **`interlock.send`** (kind CLIENT), a child span per send attempt, from the create call
  to its answer: `interlock.send.attempt`, `interlock.external_id` on an answer, ERROR with
  `error.type` (the provider's code, or `http_<status>` / `unsettled`) when the answer was
  a refusal or settled nothing.
- **`interlock.recover`** around `gate.recover()` (`interlock.recovered`: how many
  actions), with its log catch-up (`interlock.logged`) and each action it could not
  recover (`interlock.recover_error`) as events; each action's span links to it
  (`interlock.link=recover`).
- **A link across a crash**: every call's span links to its action's own span context
  (`action_span_context`: a trace id and span id derived from the action id alone,
  `interlock.link=action`) and, when no span of the caller's is running (a worker's plain
  `submit`, a `recover()`), is its child: every process's spans of one action share that
  trace, and a recovery after a SIGKILL points at the dead worker's, with nothing written
  to the journal or sent to Stripe for it.

No amount of money and no text that may hold one (reasons, the provider's messages), no
idempotency key, no secret is in any attribute unless `sensitive=True`: then
`interlock.amount`, `interlock.reason`, `interlock.problem`, `interlock.error` and
`interlock.idempotency_key` are added where known, and an exception's event carries its
message and stack trace (by default its type alone). Events from the receipt log's timer
thread (no call is running) are not traced.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from interlock._core.events import Event, GateEvent
from interlock._core.gate import Gate, Outcome
from interlock._core.journal import Intent
from interlock._integrations.mcp_desk import SOURCE as _MCP_SOURCE
from interlock._integrations.mcp_desk import SOURCE_KEY as _MCP_SOURCE_KEY
from interlock._integrations.tool_calls import reapproved_from

__all__ = ["action_span_context", "traced"]

_SCOPE = "interlock"
# The framework guards' action ids (`tool_calls.action_id_for`), and Temporal's
# (`temporal:<namespace>:<workflow id>:<activity id>`, no tool call id inside).
_FRAMEWORKS = ("langchain", "pydantic-ai", "openai-agents")
_HEADS = (*_FRAMEWORKS, "temporal")

# A gate event's step name on the span, and its data fields that are safe by default
# (ids, counts, flags; never an amount, a key, or text that may hold an amount).
_STEPS: Mapping[GateEvent, tuple[str, tuple[str, ...]]] = {
    GateEvent.JOURNALED: ("interlock.journal", ("claim",)),
    GateEvent.CLAIM: ("interlock.claim", ("attempt", "epoch", "recovery", "early")),
    GateEvent.CLAIM_WAIT: ("interlock.claim_wait", ("owner", "seconds", "sending")),
    GateEvent.TURN_WAIT: ("interlock.turn_wait", ("holder", "target", "seconds", "sending")),
    GateEvent.READ_UNSETTLED: ("interlock.read_unsettled", ()),
    GateEvent.SENDING: ("interlock.sending", ("epoch",)),
    GateEvent.UNKNOWN: ("interlock.unknown", ()),
    GateEvent.IN_FLIGHT_WAIT: ("interlock.in_flight_wait", ("seconds",)),
    GateEvent.CONFLICT: ("interlock.conflict", ("external_id",)),
    GateEvent.REAPPROVE_ADOPTS: ("interlock.reapprove_adopts", ("external_id",)),
    GateEvent.SETTLED: ("interlock.settle", ("status", "external_id")),
    GateEvent.LOGGED: ("interlock.logged", ("size",)),
    GateEvent.LEFT_TO_RECOVERY: ("interlock.left_to_recovery", ()),
    GateEvent.RECOVER_ERROR: ("interlock.recover_error", ()),
}
_CHECKS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "lookup": ("interlock.lookup", ("found",)),
    "currency": ("interlock.currency_check", ("passed",)),
    "world_unchanged": ("interlock.world_check", ("passed",)),
    "approval_signature": ("interlock.approval_signature_check", ("passed",)),
    "approval": ("interlock.approval_check", ("passed",)),
}
# Text fields that may carry an amount or a provider's words: only with `sensitive=True`.
_TEXT = {"reason": "interlock.reason", "problem": "interlock.problem", "error": "interlock.error"}


def traced(
    gate: Gate,
    *,
    tracer_provider: TracerProvider | None = None,
    tool_name: str | None = None,
    sensitive: bool = False,
) -> Gate:
    """Make `gate` trace every call it runs (see the module docstring); returns the gate.

    `tool_name` is the tool's name as the model knows it (`gen_ai.tool.name`; default: the
    effect's kind, `refund`). `sensitive=True` adds amounts, reasons and the idempotency
    key to the attributes: only where your trace backend may hold them. The gate's own
    `on_event` listener still hears every event, after the tracer. Tracing a gate twice
    raises `ValueError`.
    """
    if getattr(gate, "_interlock_tracing", None) is not None:
        raise ValueError(
            "this gate is traced already: call interlock.otel.traced(gate) once per gate"
        )
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    tracing = _Tracing(gate, provider, tool_name or gate.effect.kind, sensitive)
    gate._interlock_tracing = tracing  # type: ignore[attr-defined]
    return gate


@dataclass
class _Call:
    """The span of one guarded call, and what its events taught it so far."""

    span: Span
    action_id: str
    lease_id: str | None
    send: Span | None = None
    sends: int = 0
    logged_size: int | None = None


class _Tracing:
    """A gate's tracer: wraps its public calls and listens to its events."""

    def __init__(
        self, gate: Gate, provider: TracerProvider, tool_name: str, sensitive: bool
    ) -> None:
        self.gate = gate
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(_SCOPE)
        self.tool_name = tool_name
        self.sensitive = sensitive
        self.current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
            f"interlock_otel_{id(self)}", default=None
        )
        self.recovering: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
            f"interlock_otel_recover_{id(self)}", default=None
        )
        # The tracer hears each event first: the user's listener may block or raise (a
        # test's crash), and the step it saw is on the span by then.
        listener = gate._emit_to

        def on_event(event: Event) -> None:
            self.on_event(event)
            if listener is not None:
                listener(event)

        gate._emit_to = on_event
        submit, recover_action = gate.submit, gate.recover_action
        reapprove, recover = gate.reapprove, gate.recover

        @functools.wraps(submit)
        def traced_submit(intent: Intent) -> Outcome:
            with self.call(intent.action_id, intent=intent) as call:
                return self.finish(call, submit(intent))

        @functools.wraps(recover_action)
        def traced_recover_action(action_id: str, *, wait: bool = True) -> Outcome:
            with self.call(action_id, recovery=True) as call:
                return self.finish(call, recover_action(action_id, wait=wait))

        @functools.wraps(reapprove)
        def traced_reapprove(
            action_id: str,
            lease_id: str,
            approved_by: str,
            *,
            new_action_id: str | None = None,
        ) -> Outcome:
            with self.call(action_id, recovery=True) as call:
                outcome = reapprove(action_id, lease_id, approved_by, new_action_id=new_action_id)
                return self.finish(call, outcome)

        @functools.wraps(recover)
        def traced_recover(*, wait: bool = True) -> list[Outcome]:
            with self.tracer.start_as_current_span("interlock.recover") as span:
                token = self.recovering.set(span)
                try:
                    outcomes = recover(wait=wait)
                finally:
                    self.recovering.reset(token)
                span.set_attribute("interlock.recovered", len(outcomes))
                return outcomes

        # Instance attributes: the gate's own `self.submit` (from `reapprove`) and
        # `self.recover_action` (from `submit`, `recover`) go through them too.
        gate.submit = traced_submit  # type: ignore[method-assign]
        gate.recover_action = traced_recover_action  # type: ignore[method-assign]
        gate.reapprove = traced_reapprove  # type: ignore[method-assign]
        gate.recover = traced_recover  # type: ignore[method-assign]

    def copy_onto(self, gate: Gate) -> Gate:
        """`gate` (a copy of this one, as `interlock.temporal` makes per activity) traced
        as this one is."""
        return traced(
            gate,
            tracer_provider=self.provider,
            tool_name=self.tool_name,
            sensitive=self.sensitive,
        )

    # -- the span of a call --------------------------------------------------------------

    @contextmanager
    def call(
        self, action_id: str, *, intent: Intent | None = None, recovery: bool = False
    ) -> Iterator[_Call]:
        """The call's span: the running one when it is this action's (a `submit` whose
        claim was held goes on in `recover_action`), else a new one linked to the action's
        own span context (`action_span_context`), and its child when no span is running."""
        running = self.current.get()
        if running is not None and running.action_id == action_id:
            yield running
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.tool_name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": _tool_call_id(action_id),
            "interlock.action_id": action_id,
            "interlock.recovery": recovery,
        }
        if intent is None:
            # A recovery names only the action: what it decided is in the journal.
            state = self.gate.store.action(action_id)
            intent = None if state is None else state.intent
        if intent is not None:
            attributes.update(self.intent_attributes(intent))
        framework = _framework(action_id, intent)
        if framework is not None:
            attributes["interlock.framework"] = framework
        action = action_span_context(action_id)
        links = [Link(action, {"interlock.link": "action"})]
        parent = None
        current, batch = trace.get_current_span(), self.recovering.get()
        # A recovery of `recover()` goes into its action's trace, beside the dead worker's
        # spans, and links to the batch; a call under the caller's span (an agent's run)
        # stays in the caller's trace.
        if batch is not None and current is batch:
            links.append(Link(batch.get_span_context(), {"interlock.link": "recover"}))
        if (batch is not None and current is batch) or not current.get_span_context().is_valid:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(action))
        span = self.tracer.start_span(
            f"execute_tool {self.tool_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        call = _Call(span, action_id, None if intent is None else intent.lease_id)
        token = self.current.set(call)
        try:
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                yield call
        except BaseException as e:
            error = type(e).__qualname__
            self.end_send(call, StatusCode.ERROR, error)
            self.record_exception(span, e)
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
            raise
        finally:
            self.current.reset(token)
            self.end_send(call, StatusCode.ERROR, "interrupted")
            span.end()

    def record_exception(self, span: Span, error: BaseException) -> None:
        """The exception as the span's `exception` event: its type only, unless `sensitive`.

        Its message and stack trace may hold the provider's words (a 401's masked key), an
        amount or a reason, as `exception.message` and in the trace's last line."""
        if self.sensitive:
            span.record_exception(error)
            return
        kind = type(error)
        module = kind.__module__
        name = kind.__qualname__ if module in ("builtins", "") else f"{module}.{kind.__qualname__}"
        span.add_event("exception", {"exception.type": name})

    def intent_attributes(self, intent: Intent) -> dict[str, Any]:
        """What the span says of the decision: never its amount unless `sensitive`."""
        attributes: dict[str, Any] = {
            "interlock.kind": intent.kind,
            "interlock.target": intent.target,
        }
        if intent.currency is not None:
            attributes["interlock.currency"] = intent.currency
        if self.sensitive:
            attributes["interlock.amount"] = intent.amount
        return attributes

    def finish(self, call: _Call, outcome: Outcome) -> Outcome:
        """The outcome onto the span: `unknown` apart from `pending`, ERROR only on `failed`."""
        span = call.span
        status = "unknown" if outcome.unknown else outcome.status
        span.set_attribute("interlock.outcome", status)
        if outcome.external_id is not None:
            span.set_attribute("interlock.external_id", outcome.external_id)
        if outcome.code is not None:
            span.set_attribute("interlock.code", outcome.code)
        if self.sensitive and outcome.reason is not None:
            span.set_attribute("interlock.reason", outcome.reason)
        if self.sensitive and outcome.amount is not None:
            span.set_attribute("interlock.amount", outcome.amount)
        receipt = outcome.receipt
        if receipt is not None:
            span.set_attribute("interlock.receipt.hash", receipt.hash)
            span.set_attribute("interlock.receipt.seq", receipt.seq)
            index = self.log_index(call, receipt.seq)
            if index is not None:
                span.set_attribute("interlock.receipt.log_index", index)
        if outcome.status == "failed":
            error = outcome.code or "failed"
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        return outcome

    def log_index(self, call: _Call, seq: int) -> int | None:
        """The receipt's place in the receipt log, when this call's settle put it there."""
        size = call.logged_size
        if size is None:
            return None
        # Leaves are numbered in receipt order: search the places for the receipt's id.
        low, high = 0, size - 1
        while low <= high:
            middle = (low + high) // 2
            entry = next(iter(self.gate.store.logged(middle)), None)
            if entry is None:
                return None
            if entry.seq == seq:
                return entry.leaf
            if entry.seq < seq:
                low = middle + 1
            else:
                high = middle - 1
        return None

    # -- the steps -----------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """One gate event onto the running call's span; with none running, onto the
        running `recover()`'s (its log catch-up, an action it could not recover), else
        not traced (the receipt log's timer thread)."""
        call = self.current.get()
        kind, data = event.kind, event.data
        if call is None:
            batch = self.recovering.get()
            if batch is not None and kind in (GateEvent.LOGGED, GateEvent.RECOVER_ERROR):
                self.add_step(batch, kind, data)
            return
        span = call.span
        if kind is GateEvent.BEFORE_SEND:
            call.sends += 1
            attributes: dict[str, Any] = {
                "interlock.action_id": call.action_id,
                "interlock.send.attempt": call.sends,
            }
            if data.get("currency") is not None:
                attributes["interlock.currency"] = data["currency"]
            if self.sensitive:
                attributes["interlock.amount"] = data["amount"]
                attributes["interlock.idempotency_key"] = data["idempotency_key"]
            call.send = self.tracer.start_span(
                "interlock.send",
                context=trace.set_span_in_context(span),
                kind=SpanKind.CLIENT,
                attributes=attributes,
            )
            return
        if kind is GateEvent.AFTER_ANSWER:
            if call.send is not None:
                call.send.set_attribute("interlock.external_id", str(data["external_id"]))
            self.end_send(call, StatusCode.OK, None)
            return
        if kind is GateEvent.ANSWER:
            if self.sensitive and call.send is not None and data.get("message") is not None:
                call.send.set_attribute("interlock.error", str(data["message"]))
            self.end_send(call, StatusCode.ERROR, str(data.get("code") or "rejected"))
            return
        if kind is GateEvent.ANSWER_UNSETTLED:
            status = data.get("http_status")
            self.end_send(
                call, StatusCode.ERROR, "unsettled" if status is None else f"http_{status}"
            )
            return
        if not self.add_step(span, kind, data):
            return
        if kind is GateEvent.SETTLED:
            span.add_event("interlock.receipt", {"interlock.receipt.hash": str(data["receipt"])})
        self.on_step(call, kind, data)

    def add_step(self, span: Span, kind: GateEvent, data: Mapping[str, Any]) -> bool:
        """The event as a step on `span` (False: not a step, such as a send's answer)."""
        if kind is GateEvent.CHECK:
            name, fields = _CHECKS.get(
                str(data.get("name")), (f"interlock.{data.get('name')}_check", ())
            )
        elif kind in _STEPS:
            name, fields = _STEPS[kind]
        else:
            return False
        attributes: dict[str, Any] = {}
        if data.get("action_id"):  # a catch-up of the log names none
            attributes["interlock.action_id"] = str(data["action_id"])
        for field in fields:
            value = data.get(field)
            if value is not None:
                attributes[f"interlock.{field}"] = value
        if self.sensitive:
            for field, key in _TEXT.items():
                if data.get(field) is not None:
                    attributes[key] = str(data[field])
            if data.get("amount") is not None:
                attributes["interlock.amount"] = data["amount"]
        span.add_event(name, attributes)
        return True

    def on_step(self, call: _Call, kind: GateEvent, data: Mapping[str, Any]) -> None:
        """What a step tells the call's span itself: the claim, the grant, the receipt."""
        span = call.span
        if kind is GateEvent.CLAIM:
            span.set_attribute("interlock.attempt", int(data["attempt"]))
            span.set_attribute("interlock.epoch", int(data["epoch"]))
        elif kind is GateEvent.JOURNALED and data["claim"] == "taken":
            span.set_attribute("interlock.attempt", 1)
        elif kind is GateEvent.SENDING:
            span.set_attribute("interlock.epoch", int(data["epoch"]))
        elif kind is GateEvent.CHECK and data.get("name") == "approval" and data.get("passed"):
            self.grant(call)
        elif kind is GateEvent.LOGGED and data.get("size") is not None:
            call.logged_size = int(data["size"])

    def grant(self, call: _Call) -> None:
        """The approval that passed: its digest (what the send's metadata names) and signer."""
        lease = None if call.lease_id is None else self.gate.store.lease(call.lease_id)
        if lease is None:
            return
        call.span.set_attribute("interlock.grant.digest", lease.digest())
        call.span.set_attribute("interlock.grant.signer", lease.key_id or "unsigned")
        call.span.set_attribute("interlock.grant.by", lease.granted_by)

    def end_send(self, call: _Call, status: StatusCode, error: str | None) -> None:
        """End the send attempt's span, if one is open."""
        send, call.send = call.send, None
        if send is None:
            return
        if error is not None:
            send.set_attribute("error.type", error)
        send.set_status(Status(status, error) if status is StatusCode.ERROR else Status(status))
        send.end()


def _framework(action_id: str, intent: Intent | None) -> str | None:
    """The framework guard whose action id this is (`action_id_for`), `mcp` for the MCP
    desk's (its ids are hashes: its intents say where they came from), or None."""
    head = action_id.split(":", 1)[0].split("!", 1)[0]
    if head in _HEADS:
        return head
    if intent is not None and intent.metadata.get(_MCP_SOURCE_KEY) == _MCP_SOURCE:
        return _MCP_SOURCE
    return None


def _tool_call_id(action_id: str) -> str:
    """The framework's tool call id inside a guard's action id (`<framework>:<scope>:<id>`,
    percent-encoded, or a re-approval of it: the same tool call); the action id itself for
    any other (a plain submit's, a hashed one)."""
    parts = reapproved_from(action_id).split(":")
    if len(parts) == 3 and parts[0] in _FRAMEWORKS and parts[2]:
        return unquote(parts[2])
    return action_id


def action_span_context(action_id: str) -> SpanContext:
    """The span context every traced call of `action_id` links to (and, when no span is
    running, is the child of): its trace id and span id are derived from the action id
    alone, so a process that recovers the action after its first worker was SIGKILLed
    points at the dead worker's spans without reading anything the dead one wrote. Search
    your trace backend for the trace id `format(action_span_context(aid).trace_id, "032x")`."""
    digest = hashlib.sha256(f"interlock-action:{action_id}".encode()).digest()
    return SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
