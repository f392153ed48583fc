"""The headless summary (`interlock-demo --headless` without `--json`) says what each run
came to: per run and per column "right", "wrong (as predicted)" or "not as predicted".

Mock runs, in-process. The words expected are written out from docs/design.md §3 by hand
rather than read from `scenarios.TRUTH`, so a wrong truth table fails here too.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from interlock_demo.exit_codes import ExitCode
from interlock_demo.settings import resolve
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
    code = run_headless(config, scenario, checked=True, as_json=False, out=out)
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
