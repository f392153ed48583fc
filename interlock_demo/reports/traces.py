"""A trace file as a viewer shows it: each trace a tree of its spans, in time order.

    python -m interlock_demo.reports.traces FILE

FILE holds one span a line, as `interlock-demo --otel-file` writes them (the SDK's
`ReadableSpan.to_json`). A span whose parent is not in the file (the action's own span
context, which no process ends, or the span of a SIGKILLed worker's call, which never
ended) is shown under a line that says so. Each span shows its duration, its status and
its `interlock.*` attributes; its events and links follow.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

# The attributes a tree line shows, in this order (the GenAI ones are in the span's name).
SHOWN = (
    "interlock.recovery",
    "interlock.outcome",
    "interlock.attempt",
    "interlock.epoch",
    "interlock.send.attempt",
    "interlock.external_id",
    "interlock.grant.signer",
    "interlock.receipt.log_index",
    "interlock.recovered",
    "error.type",
)


def read(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The spans of a trace file's lines (blank lines skipped); `ValueError` naming the
    line that is not a span."""
    spans = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            span = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"line {n} is not JSON ({e.msg}): not a trace file line") from e
        if not isinstance(span, dict) or "context" not in span or "name" not in span:
            raise ValueError(f"line {n} is not a span (no name or context)")
        spans.append(span)
    return spans


def render(spans: list[dict[str, Any]]) -> str:
    """Each trace as a tree, traces in the order their first span started."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in sorted(spans, key=lambda s: str(s.get("start_time"))):
        by_trace.setdefault(span["context"]["trace_id"], []).append(span)
    out: list[str] = []
    for trace_id, members in by_trace.items():
        ids = {s["context"]["span_id"] for s in members}
        action = next(
            (s["attributes"]["interlock.action_id"] for s in members if _action(s) is not None),
            None,
        )
        out.append(f"trace {trace_id}" + (f"  (action {action})" if action else ""))
        children: dict[str | None, list[dict[str, Any]]] = {}
        for s in members:
            parent = s.get("parent_id")
            children.setdefault(parent if parent in ids else _missing(parent), []).append(s)
        # The action's own span context: the parent of each call made outside a caller's
        # span, which no process ends (`interlock.otel.action_span_context`).
        own = {
            link["context"]["span_id"]
            for s in members
            for link in s.get("links", [])
            if link.get("attributes", {}).get("interlock.link") == "action"
        }
        # Each root span, and each span whose parent is missing under a line naming it.
        tops: list[tuple[str | None, list[dict[str, Any]]]] = [
            (None, [s]) for s in children.get(None, [])
        ]
        for parent, under in children.items():
            if parent is not None and parent.startswith("missing:"):
                span_id = parent[len("missing:") :]
                why = (
                    "the action's own span context"
                    if span_id in own
                    else "not in the file: its process died before it ended"
                )
                tops.append((f"{span_id} ({why})", under))
        for i, (head, under) in enumerate(tops):
            last = i == len(tops) - 1
            if head is None:
                _tree(under, children, out, "", last_one=last)
                continue
            out.append(f"{'└─' if last else '├─'} {head}")
            _tree(under, children, out, "   " if last else "│  ")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _action(span: Mapping[str, Any]) -> str | None:
    value = span.get("attributes", {}).get("interlock.action_id")
    return value if isinstance(value, str) else None


def _missing(parent: str | None) -> str | None:
    return None if parent is None else f"missing:{parent}"


def _tree(
    spans: list[dict[str, Any]],
    children: Mapping[str | None, list[dict[str, Any]]],
    out: list[str],
    indent: str,
    *,
    last_one: bool = True,
) -> None:
    """`spans` (siblings) under `indent`, each with its events, links and children; the
    last of them closes the branch when `last_one` (it has no sibling after it)."""
    for i, span in enumerate(spans):
        last = i == len(spans) - 1 and last_one
        out.append(f"{indent}{'└─' if last else '├─'} {_line(span)}")
        inner = indent + ("   " if last else "│  ")
        for event in span.get("events", []):
            out.append(f"{inner}· {event['name']}{_attributes(event.get('attributes', {}))}")
        for link in span.get("links", []):
            what = link.get("attributes", {}).get("interlock.link", "link")
            context = link["context"]
            out.append(f"{inner}↗ link ({what}) {context['trace_id']}/{context['span_id']}")
        _tree(children.get(span["context"]["span_id"], []), children, out, inner)


def _line(span: Mapping[str, Any]) -> str:
    took = _ms(span.get("start_time"), span.get("end_time"))
    status = span.get("status", {}).get("status_code", "UNSET")
    attributes = span.get("attributes", {})
    shown = {k: attributes[k] for k in SHOWN if k in attributes}
    return f"{span['name']}  {took}  {status}{_attributes(shown)}"


def _attributes(attributes: Mapping[str, Any]) -> str:
    if not attributes:
        return ""
    words = [
        f"{k.removeprefix('interlock.')}={v}"
        for k, v in attributes.items()
        # The action id is the trace's; a stack trace is for the viewer's detail pane.
        if k not in ("interlock.action_id", "exception.stacktrace")
    ]
    return ("  " + " ".join(words)) if words else ""


def _ms(start: object, end: object) -> str:
    try:
        took = datetime.fromisoformat(str(end).replace("Z", "+00:00")) - datetime.fromisoformat(
            str(start).replace("Z", "+00:00")
        )
    except ValueError:
        return "? ms"
    return f"{took.total_seconds() * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    """Print FILE's traces as trees; 2 with a message when it cannot be read."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m interlock_demo.reports.traces FILE", file=sys.stderr)
        return 2
    try:
        spans = read(Path(args[0]).read_text().splitlines())
    except (OSError, ValueError) as e:
        print(f"traces: {args[0]}: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(spans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
