"""The demo's traces: every gate of a run traced into one JSON-lines file, when asked.

`interlock-demo --otel-file PATH` sets `INTERLOCK_OTEL_FILE` (an absolute path), which
each worker inherits; `traced_to_file(gate)` then traces the gate (`interlock.otel`) with
an exporter that appends each span as one line (the SDK's `ReadableSpan.to_json`, on one
line) the moment it ends, in one `write`: the workers of one run append to one file, and a
worker SIGKILLed mid-refund leaves every span it had ended. Without the setting nothing
of OpenTelemetry is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from interlock import Gate

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

ENV_OTEL_FILE = "INTERLOCK_OTEL_FILE"
"""The file a run's spans are appended to (set by `interlock-demo --otel-file`)."""
TOOL_NAME = "issue_refund"
"""The demo agent's refund tool, as its model calls it (`gen_ai.tool.name`)."""

# One provider per process and file: each gate of a worker shares it.
_providers: dict[str, TracerProvider] = {}


def traced_to_file(gate: Gate, env: Mapping[str, str] | None = None) -> Gate:
    """`gate`, traced into the file `INTERLOCK_OTEL_FILE` names when it is set."""
    path = (os.environ if env is None else env).get(ENV_OTEL_FILE)
    if not path:
        return gate
    from interlock.otel import traced

    return traced(gate, tracer_provider=file_provider(path), tool_name=TOOL_NAME)


def file_provider(path: str) -> TracerProvider:
    """The tracer provider of this process that appends its spans to `path`."""
    provider = _providers.get(path)
    if provider is None:
        from workers.trace_file import json_lines_provider

        provider = _providers[path] = json_lines_provider(path)
    return provider
