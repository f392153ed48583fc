"""A tracer provider that appends each span to a file as one JSON line (`workers.traces`).

Imported only when a run is traced: it loads the OpenTelemetry SDK.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def json_lines_provider(path: str) -> TracerProvider:
    """A provider whose spans are appended to `path` as each ends (`JsonLinesExporter`)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "interlock-demo"}))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    return provider


def open_append(path: str) -> int:
    """`path` opened to append, created if missing (0600), never through a symlink;
    `OSError` naming the path and what to do otherwise."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise OSError(
            e.errno,
            f"cannot write traces to {path}: {e.strerror} (a symlink there is refused: name "
            "a plain file in a directory you own)",
        ) from e


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file as one JSON line (the SDK's `ReadableSpan.to_json`,
    the format `ConsoleSpanExporter` prints, on one line)."""

    def __init__(self, path: str) -> None:
        self._fd = open_append(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append each span in one `write`, so the lines of several processes never mix."""
        for span in spans:
            os.write(self._fd, (span.to_json(indent=None) + "\n").encode())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every span is written as it ends."""
        return True
