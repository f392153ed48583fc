"""Views read events' fields, not their words: reworded event lines tell the same story.

`workers/protocol/words.py` is where a worker's event lines are worded; the phase lines and the
verdict strip read the fields those lines are made from (run@2's event `data`), so a
mock run whose lines are worded otherwise shows the same phases and the same verdicts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.testing import CrashPoint
from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.run import Run
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.settings.config import resolve
from interlock_demo.views.tui.widgets.story import WHERE_KILLED, phase_lines
from interlock_demo.views.tui.widgets.verdict_strip import reason
from scenarios import SCENARIOS
from workers.protocol import words

RUN_DEADLINE_S = 30.0
# What a room reads per column at the end of each scenario: the phase lines, then the
# verdict strip's reason.
TOLD: dict[str, dict[str, tuple[list[tuple[str, str]], str]]] = {
    "hand-refund": {
        "standard": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "hand refund $20"),
                ("restart", "new worker"),
                ("checks", "none: retries"),
                ("sends", "again"),
                ("outcome", "sent"),
            ],
            "retried blindly: $40.00",
        ),
        "interlock": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "hand refund $20"),
                ("restart", "new worker"),
                ("wait", "mock clock"),
                ("checks", "refunds CHANGED"),
                ("outcome", "refused"),
            ],
            "saw the hand refund: refused",
        ),
        "checked": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "hand refund $20"),
                ("restart", "new worker"),
                ("checks", "re-read: CHANGED"),
                ("outcome", "stopped"),
            ],
            "re-checked, saw the hand refund: stopped",
        ),
    },
    "revoked": {
        "standard": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "approval revoked"),
                ("restart", "new worker"),
                ("checks", "none: retries"),
                ("sends", "again"),
                ("outcome", "sent"),
            ],
            "retried blindly: $20.00 despite the revocation",
        ),
        "interlock": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "approval revoked"),
                ("restart", "new worker"),
                ("wait", "mock clock"),
                ("checks", "approval revoked"),
                ("outcome", "refused"),
            ],
            "saw the revocation: refused",
        ),
        "checked": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "before the send"),
                ("outage", "approval revoked"),
                ("restart", "new worker"),
                ("checks", "re-read: revoked"),
                ("outcome", "stopped"),
            ],
            "re-checked, saw the revocation: stopped",
        ),
    },
    "after-answer": {
        "standard": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "after the answer"),
                ("outage", "nothing happens"),
                ("restart", "new worker"),
                ("checks", "none: retries"),
                ("sends", "again"),
                ("answer", "the same refund"),
                ("outcome", "sent"),
            ],
            "sent twice, one refund: the key replayed",
        ),
        "interlock": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "after the answer"),
                ("outage", "nothing happens"),
                ("restart", "new worker"),
                ("wait", "mock clock"),
                ("checks", "found its own refund"),
                ("outcome", "adopted"),
            ],
            "found its own refund: adopted",
        ),
        "checked": (
            [
                ("decided", "refund $20.00"),
                ("SIGKILL", "after the answer"),
                ("outage", "nothing happens"),
                ("restart", "new worker"),
                ("checks", "re-read: CHANGED"),
                ("outcome", "stopped"),
            ],
            "re-checked, but stopped on its own refund",
        ),
    },
}


def reworded(text: str) -> str:
    """The same line in other words: none of its words survive."""
    return f"«{text[::-1]}»"


def reword_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change every sentence `workers/protocol/words.py` renders, wherever it was imported."""
    renderers = {
        name: fn
        for name, fn in vars(words).items()
        if callable(fn) and getattr(fn, "__module__", None) == words.__name__
    }
    assert {"gate_event_text", "outcome_text", "send_text", "said_at"} <= set(renderers)

    def other_words(fn: Callable[..., str | None]) -> Callable[..., str | None]:
        def render(*args: Any, **kwargs: Any) -> str | None:
            text = fn(*args, **kwargs)
            return None if text is None else reworded(text)

        return render

    modules = [words] + [
        m
        for name, m in list(sys.modules.items())
        if name.split(".")[0] in ("workers", "interlock_demo")
    ]
    patched = 0
    for module in modules:
        for name, fn in renderers.items():
            if getattr(module, name, None) is fn:
                monkeypatch.setattr(module, name, other_words(fn))
                patched += 1
    assert patched > len(renderers), "the renderers are imported nowhere"


def reword_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change every event line a run records, the engine's own included."""
    add_event = Run.add_event

    def add(self: Run, column: str, kind: str, text: str, *rest: Any) -> None:
        add_event(self, column, kind, reworded(text), *rest)

    monkeypatch.setattr(Run, "add_event", add)


def told(home: Path, scenario: str) -> dict[str, tuple[list[tuple[str, str]], str]]:
    """Each column's phase lines and verdict reason at the end of a mock run."""
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(home)})
    engine = Engine(config)
    engine.mock_pace_s = 0.0
    engine.kill_beat_s = 0.0
    try:
        run = engine.start(RunChoice(config, scenario, optional=OPTIONAL))
        assert run.wait(RUN_DEADLINE_S), "the mock run did not finish"
        snapshot = run.snapshot()
    finally:
        engine.close()
    assert snapshot.error is None, snapshot.error
    return {c.name: (phase_lines(c), reason(c)) for c in snapshot.columns}


@pytest.mark.parametrize("reword", [None, reword_texts, reword_every_line])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_story_and_the_verdicts_do_not_depend_on_the_words(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    scenario: str,
    reword: Callable[[pytest.MonkeyPatch], None] | None,
) -> None:
    """As worded, with words.py's sentences changed, or with every line changed, a run
    tells the same phases and the same verdicts."""
    if reword is not None:
        reword(monkeypatch)
    assert told(tmp_path / "home", scenario) == TOLD[scenario]


def test_every_crash_point_has_its_words_in_the_phase_lines() -> None:
    """A kill's phase line names where it happened from the event's `crash_point`: every
    row of the table has its words (a new row without them fails here, not on stage)."""
    assert set(WHERE_KILLED) == set(CrashPoint)
    assert all(WHERE_KILLED.values())
