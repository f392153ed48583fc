"""The headless summary (`interlock-demo --headless` without `--json`) says what each run
came to: per run and per column "right", "wrong (as predicted)" or "not as predicted".

Mock runs, in-process. The words expected are written out from docs/design.md §3 by hand
rather than read from `scenarios.TRUTH`, so a wrong truth table fails here too.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from interlock_demo.core.columns import OPTIONAL
from interlock_demo.core.verdict import replay_note
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings.config import resolve
from interlock_demo.settings.modes import MODES
from interlock_demo.views.headless import run_headless
from scenarios import TRUTH, Expectation

RIGHT, WRONG, DEVIATION = "right", "wrong (as predicted)", "not as predicted"
FALSE_ALARM = "a false alarm (its own refund exists)"
# case -> (the command line's switch, the run's words, each column's words, columns whose
# report is a false alarm)
CASES: dict[str, tuple[str, str, dict[str, str], set[str]]] = {
    "hand-refund": (
        "",
        WRONG,
        {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT},
        set(),
    ),
    "revoked": ("", WRONG, {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT}, set()),
    "after-answer": (
        "",
        RIGHT,
        {"standard": RIGHT, "interlock": RIGHT, "checked": RIGHT},
        {"checked"},
    ),
    "after-answer+emulate-24h": (
        "--emulate-24h",
        WRONG,
        {"standard": WRONG, "interlock": RIGHT, "checked": RIGHT},
        {"checked"},
    ),
    "after-answer+no-lookup": (
        "--no-lookup",
        RIGHT,
        {"standard": RIGHT, "interlock": RIGHT, "checked": RIGHT},
        {"interlock", "checked"},
    ),
}


def _summary(tmp_path: Path, case: str) -> tuple[int, list[str]]:
    scenario, _, switch = case.partition("+")
    flags = {switch.replace("-", "_"): True} if switch else {}
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")}, **flags)
    out = io.StringIO()
    code = run_headless(config, scenario, optional=OPTIONAL, as_json=False, out=out)
    return code, out.getvalue().splitlines()


@pytest.mark.parametrize("case", list(CASES))
def test_the_summary_says_right_or_wrong_as_predicted(tmp_path: Path, case: str) -> None:
    """Each scenario's summary names its emulated switch and says what the run and each
    column came to: the standard agent that pays twice or ignores a revocation is wrong, as
    predicted; a false alarm beside the right money is said on its column's line."""
    switch, run_words, columns, alarms = CASES[case]
    code, lines = _summary(tmp_path, case)

    assert code == ExitCode.OK
    scenario = case.partition("+")[0]
    head = f"MOCK. {scenario}{' ' + switch if switch else ''} (mock, "
    assert lines[0].startswith(head), lines
    assert lines[0].endswith(f": finished, {run_words}"), lines
    assert len(lines) == 1 + len(columns), lines
    for line, (name, words) in zip(lines[1:], columns.items(), strict=True):
        assert line.startswith(f"MOCK.   {name:<9} {words}: $"), line
        assert (FALSE_ALARM in line) is (name in alarms), line


def test_a_deviation_is_not_as_predicted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column that ends otherwise than the truth table predicts is "not as predicted",
    its deviation on its line, and so is the run, which exits 1; the others keep theirs."""
    row = TRUTH[("after-answer", "")]
    two = Expectation(2, 0, "sent", None, "two refunds: wrong (the key expired)")
    monkeypatch.setitem(TRUTH, ("after-answer", ""), {**row, "standard": two})

    code, lines = _summary(tmp_path, "after-answer")

    assert code == ExitCode.DEVIATION
    assert lines[0].endswith(f": finished, {DEVIATION}"), lines
    standard, interlock, checked = lines[1:]
    assert standard.startswith(f"MOCK.   standard  {DEVIATION}: $20.00 refunded"), standard
    assert "the truth table says 2 and 0" in standard, standard
    assert interlock.startswith(f"MOCK.   interlock {RIGHT}: "), interlock
    assert checked.startswith(f"MOCK.   checked   {RIGHT}: "), checked


REPLAYED = "sent twice: {} replayed its first answer under the same key, no second refund"


@pytest.mark.parametrize(
    ("case", "replayed"), [("after-answer", True), ("after-answer+emulate-24h", False)]
)
def test_the_summary_says_why_a_resend_made_no_second_refund(
    tmp_path: Path, case: str, replayed: bool
) -> None:
    """In the control the standard agent sends again and Stripe (here the mock) answers with
    the first refund under the same key: its line says so. A day later (emulated) the key is
    gone, the resend makes a second refund, and the line says no replay."""
    _, lines = _summary(tmp_path, case)
    standard = lines[1]
    assert standard.startswith("MOCK.   standard "), standard
    assert standard.endswith(f"reported sent; {REPLAYED.format('the mock')}") is replayed, standard
    assert ("replayed" in standard) is replayed, standard


@pytest.mark.parametrize(
    ("mode", "who"), [("live", "Stripe"), ("offline", "the emulator"), ("mock", "the mock")]
)
def test_a_replay_is_said_of_who_answered_in_each_mode(tmp_path: Path, mode: str, who: str) -> None:
    """The replay is read from the answers' fields, the same in every mode; its words name
    who answered the refund calls, as the mode's row says it."""
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home")})
    engine = Engine(config)
    try:
        run = engine.run(RunChoice(config, "after-answer", optional=frozenset()))
    finally:
        engine.close()
    standard = run.snapshot().columns[0]
    assert replay_note(standard, MODES[mode].answerer) == REPLAYED.format(who)
