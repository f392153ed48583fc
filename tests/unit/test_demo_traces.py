"""`interlock-demo --otel-file PATH`: a run's spans appended to PATH, one JSON line each.

A mock run, in-process (its workers run in this process and its crash is simulated):
the crashed worker's call span, its send, and the restart's recovery, all in the action's
own trace. The command line refuses a path it must not write through.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.otel import action_span_context
from interlock_demo import cli
from interlock_demo.exit_codes import ExitCode
from interlock_demo.reports import traces as report
from interlock_demo.settings.environment import ENV_OTEL_FILE
from workers import traces


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The run's setting is put back as it was; the file providers it made are shut."""
    monkeypatch.setenv(ENV_OTEL_FILE, "")
    yield
    for path in list(traces._providers):
        traces._providers.pop(path).shutdown()


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_mock_run_writes_the_crash_and_the_recovery_into_the_actions_trace(
    tmp_path: Path, otel_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """after-answer: the interlock worker dies after Stripe answered and its restart adopts
    the refund. The file holds the send, the dead call (ended by the simulated crash), and
    the recovery, every one in the trace derived from the action id, the recovery linked
    to it; no amount in any attribute."""
    path = tmp_path / "traces.jsonl"
    code = cli.main(
        ["--mock", "--headless", "--scenario", "after-answer", "--otel-file", str(path)]
    )
    assert code == ExitCode.OK, capsys.readouterr()

    spans = _spans(path)
    send, dead, recovery = spans
    assert [s["name"] for s in spans] == [
        "interlock.send",
        "execute_tool issue_refund",
        "execute_tool issue_refund",
    ]
    action_id = recovery["attributes"]["interlock.action_id"]
    trace_id = f"0x{action_span_context(action_id).trace_id:032x}"
    assert {s["context"]["trace_id"] for s in spans} == {trace_id}
    assert send["parent_id"] == dead["context"]["span_id"]
    assert (
        dead["status"]["status_code"] == "ERROR" and "interlock.outcome" not in dead["attributes"]
    )
    assert recovery["attributes"]["interlock.outcome"] == "adopted"
    assert recovery["attributes"]["interlock.recovery"] is True
    assert [link["attributes"] for link in recovery["links"]] == [{"interlock.link": "action"}]
    assert not [k for s in spans for k in s["attributes"] if "amount" in k]

    # As docs/tracing.md shows it: one tree, under the action's own span context.
    tree = report.render(report.read(path.read_text().splitlines())).splitlines()
    own = f"{action_span_context(action_id).span_id:016x}"
    assert tree[:2] == [
        f"trace {trace_id}  (action {action_id})",
        f"└─ 0x{own} (the action's own span context)",
    ]
    assert tree[2].startswith("   ├─ execute_tool issue_refund") and "ERROR" in tree[2]
    assert "error.type=SimulatedCrash" in tree[2]
    [send_line] = [line.strip(" │") for line in tree if "interlock.send " in line]
    refund = send["attributes"]["interlock.external_id"]
    assert send_line.startswith("└─ interlock.send ")
    assert send_line.endswith(f"OK  send.attempt=1 external_id={refund}")
    assert tree[-1].strip().startswith(f"↗ link (action) {trace_id}/0x{own}")


def test_a_trace_file_line_that_is_not_a_span_is_named() -> None:
    """The tree of a file that is not a trace file: an error naming the line."""
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        report.read(['{"name": "x", "context": {}}', "not json"])
    with pytest.raises(ValueError, match="line 1 is not a span"):
        report.read(['{"name": "x"}'])


def test_a_symlink_at_the_path_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, otel_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink planted where the traces go is not followed: a usage error saying so."""
    target = tmp_path / "elsewhere"
    target.write_text("theirs\n")
    link = tmp_path / "traces.jsonl"
    link.symlink_to(target)

    code = cli.main(["--mock", "--headless", "--otel-file", str(link)])

    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"cannot write traces to {link}" in err and "symlink" in err
    assert target.read_text() == "theirs\n"


def test_without_the_sdk_the_run_says_what_to_install(
    tmp_path: Path,
    otel_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The SDK is the demo's `otel` extra: without it, a usage error naming it."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "opentelemetry.sdk" else find_spec(name, *a),
    )
    path = tmp_path / "traces.jsonl"

    assert cli.main(["--mock", "--headless", "--otel-file", str(path)]) == ExitCode.USAGE
    assert "pip install opentelemetry-sdk" in capsys.readouterr().err
    assert not path.exists()
