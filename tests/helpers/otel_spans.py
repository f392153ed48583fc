"""Test helper: a traced gate's spans, read back from the OpenTelemetry SDK's in-memory
exporter, and the checks every traced test makes of them (which spans are interlock's, and
that no amount or key reached an attribute)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# The instrumentation scope of `interlock.otel`'s spans (a framework's own spans may share
# a name, `execute_tool issue_refund`, but never the scope).
SCOPE = "interlock"


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that exports each span to memory as it ends, and its exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """Every ended span called `name`, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def calls(exporter: InMemorySpanExporter, tool_name: str) -> list[ReadableSpan]:
    """Interlock's `execute_tool {tool_name}` spans, in the order their calls started."""
    found = [
        s
        for s in named(exporter, f"execute_tool {tool_name}")
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == SCOPE
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as a plain dict."""
    return dict(span.attributes or {})


def gen_ai(span: ReadableSpan) -> dict[str, Any]:
    """The span's GenAI semantic convention attributes."""
    return {k: v for k, v in attributes(span).items() if k.startswith("gen_ai.")}


def event_action_ids(span: ReadableSpan) -> set[object]:
    """The action ids the span's step events name (the gate's steps each name theirs; the
    receipt's event, `interlock.receipt`, names its hash only)."""
    named_ids = ((e.attributes or {}).get("interlock.action_id") for e in span.events)
    return {i for i in named_ids if i is not None}


def values(spans: Iterable[ReadableSpan]) -> list[tuple[str, object]]:
    """Every attribute of every span, its events and links."""
    found: list[tuple[str, object]] = []
    for s in spans:
        found += list((s.attributes or {}).items())
        for e in s.events:
            found += list((e.attributes or {}).items())
        for link in s.links:
            found += list((link.attributes or {}).items())
    return found


def leaks(spans: Iterable[ReadableSpan], amounts: Iterable[int]) -> list[tuple[str, object]]:
    """Attributes naming an amount, holding one of `amounts` (as a number, or in text as
    cents or in major units), a key, or text that may hold one."""
    money = list(amounts)
    words = "|".join(rf"\b{a}\b|\b{a // 100}\.{a % 100:02d}\b" for a in money)
    pattern = re.compile(rf"{words}|sk_test_|PRIVATE KEY")
    return [
        (k, v)
        for k, v in values(spans)
        if "amount" in k
        or "idempotency_key" in k
        or v in money
        or (isinstance(v, str) and pattern.search(v))
    ]
