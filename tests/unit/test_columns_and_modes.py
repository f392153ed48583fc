"""The column table and the mode table: each fact about a column or a mode is a row's, and a
name that is in neither table raises, in words, where it is used."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from interlock import ConfigError
from interlock_demo.core.columns import (
    COLUMN_KINDS,
    OPTIONAL,
    column_kind,
    gated_column,
    optional_flags,
    optional_from,
    shown_columns,
)
from interlock_demo.engine import RunChoice
from interlock_demo.errors import UsageError
from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.settings.modes import MODES, line_mark, mode_named
from interlock_demo.settings.worker import worker_env
from scenarios import SCENARIOS, TRUTH, by_id
from workers.run import story

STRIPE_KEY = "sk_test_madeUpForTheModeTable4242424242"
ANTHROPIC_KEY = "sk-ant-api03-madeUpForTheModeTable-0000"


def _config(tmp_path: Path, mode: str, **keys: str) -> DemoConfig:
    return resolve(mode=mode, env={"INTERLOCK_HOME": str(tmp_path), "PATH": "", **keys})


# -- columns -----------------------------------------------------------------------------


def test_every_truth_row_judges_exactly_the_tables_columns() -> None:
    """Every row of every scenario's truth table has each column of the table, and no other."""
    for rows in TRUTH.values():
        assert set(rows) == set(COLUMN_KINDS)


@pytest.mark.parametrize("attribute", ["id", "key"])
def test_two_scenario_modules_sharing_an_id_or_a_key_are_refused(attribute: str) -> None:
    """A new scenario's module copied from another and not yet renamed is refused, naming
    both, instead of one silently hiding the other (or two answering one key)."""
    first, second = list(SCENARIOS.values())[:2]
    copy = dataclasses.replace(second, **{attribute: getattr(first, attribute)})

    with pytest.raises(ConfigError, match=f"share the {attribute}"):
        by_id([first, copy])
    assert list(by_id([second, first])) == [first.id, second.id]


def test_every_column_has_its_worker_and_only_the_gated_one_runs_through_a_gate() -> None:
    """A column's worker is the module named after it; it runs through a gate exactly when
    its column signs receipts. A column without one is refused in words."""
    assert {name: story(name).gated for name in COLUMN_KINDS} == {
        k.name: k.signs_receipts for k in COLUMN_KINDS.values()
    }
    with pytest.raises(ValueError, match="column 'blind-retry', which has no worker"):
        story("blind-retry")
    with pytest.raises(ValueError, match="column 'protocol', which has no worker"):
        story("protocol")
    with pytest.raises(ValueError, match=r"column '\.\./checked', which has no worker"):
        story("../checked")


def test_an_unknown_column_raises_naming_the_columns() -> None:
    """Asking for a column the table lacks is a `UsageError` that lists the real ones."""
    with pytest.raises(UsageError) as caught:
        column_kind("blind-retry")
    assert str(caught.value) == (
        "unknown column 'blind-retry'; the columns are standard, interlock, checked"
    )


def test_only_the_gated_column_signs_receipts() -> None:
    """One column acts through the gate: it signs receipts and a re-approval is for it."""
    assert [k.name for k in COLUMN_KINDS.values() if k.signs_receipts] == ["interlock"]
    assert gated_column() is COLUMN_KINDS["interlock"]


def test_the_standard_worker_alone_reads_nothing_on_restart() -> None:
    """The standard worker resends on its saved decision; the others read the payment first."""
    reads = {k.name: k.reads_on_restart for k in COLUMN_KINDS.values()}
    assert reads == {"standard": False, "interlock": True, "checked": True}


def test_the_optional_column_runs_only_when_asked() -> None:
    """The checked column is in a run only when its set has it; the others always are. Its
    flag (the run JSON's, the HTTP body's, the command line's) is named after it."""
    assert {COLUMN_KINDS["checked"]} == OPTIONAL
    assert shown_columns(frozenset()) == ["standard", "interlock"]
    assert shown_columns(OPTIONAL) == ["standard", "interlock", "checked"]
    assert optional_flags(OPTIONAL) == {"checked": True}
    assert optional_flags(frozenset()) == {"checked": False}
    assert optional_from({"checked": False}, OPTIONAL) == frozenset()
    assert optional_from({"scenario": "revoked"}, OPTIONAL) == OPTIONAL
    assert optional_from({}, frozenset()) == frozenset()


def test_each_engine_has_its_own_pane_titles() -> None:
    """On Temporal the panes say so; the standalone titles are the plain ones."""
    kind = column_kind("standard")
    assert kind.title_on("standalone") == "Standard agent"
    assert kind.title_on("temporal") == "Temporal alone"


def test_the_receipt_key_goes_only_to_the_column_that_signs_receipts(tmp_path: Path) -> None:
    """A worker launch is told where the demo's receipt key is (`INTERLOCK_SIGNING_KEY`)
    exactly when its column signs receipts; the presenter's own receipt key settings reach
    none."""
    config = _config(tmp_path, "offline")
    parent = {"INTERLOCK_RECEIPT_KEY": "a-receipt-key", "INTERLOCK_SIGNING_KEY": "/theirs.pem"}
    envs = {
        name: worker_env(config, None, column=name, asks_model=False, parent=parent)
        for name in COLUMN_KINDS
    }
    given = {name: env.get("INTERLOCK_SIGNING_KEY") for name, env in envs.items()}
    assert given == {
        k.name: str(config.paths.signing_key) if k.signs_receipts else None
        for k in COLUMN_KINDS.values()
    }
    assert [name for name, env in envs.items() if "INTERLOCK_RECEIPT_KEY" in env] == []
    with pytest.raises(UsageError, match="unknown column 'nope'"):
        worker_env(config, None, column="nope", asks_model=False, parent=parent)


# -- modes -------------------------------------------------------------------------------


def test_an_unknown_mode_raises_naming_the_modes(tmp_path: Path) -> None:
    """A mode the table lacks is refused in words, by name and when a config is built."""
    expected = "unknown mode 'turbo'; use one of live, offline, mock"
    with pytest.raises(UsageError) as caught:
        mode_named("turbo")
    assert str(caught.value) == expected
    with pytest.raises(UsageError) as caught:
        resolve(mode="turbo", env={"INTERLOCK_HOME": str(tmp_path)})
    assert str(caught.value) == expected
    with pytest.raises(UsageError) as caught:
        dataclasses.replace(_config(tmp_path, "mock"), mode="turbo")
    assert str(caught.value) == expected


def test_what_each_mode_can_do() -> None:
    """The capabilities, row by row: only live is real Stripe and the real model (so it
    needs the keys), only offline has the emulator, only mock is in-process (and so never
    on Temporal)."""
    caps = {
        m.name: (m.real_stripe, m.real_model, m.emulator, m.in_process, m.takes_switches)
        for m in MODES.values()
    }
    assert caps == {
        "live": (True, True, False, False, False),
        "offline": (False, False, True, False, True),
        "mock": (False, False, False, True, True),
    }
    assert [m.name for m in MODES.values() if m.needs_keys] == ["live"]
    assert [m.name for m in MODES.values() if m.refusal("temporal")] == ["mock"]
    assert all(m.refusal("standalone") is None for m in MODES.values())
    assert {m.name: line_mark(m) for m in MODES.values()} == {
        "live": "",
        "offline": "",
        "mock": "MOCK. ",
    }


def test_mock_on_temporal_is_refused_in_one_text_wherever_it_is_asked(tmp_path: Path) -> None:
    """The command line, a switch of mode and a switch of engine all meet the same refusal:
    a configuration of mock on Temporal cannot be built at all."""
    reason = mode_named("mock").refusal("temporal")
    assert reason == "mock runs are simulated in-process, without Temporal"
    refused = []
    with pytest.raises(UsageError) as caught:
        resolve(mode="mock", engine="temporal", env={"INTERLOCK_HOME": str(tmp_path)})
    refused.append(str(caught.value))
    offline_on_temporal = dataclasses.replace(_config(tmp_path, "offline"), engine="temporal")
    with pytest.raises(UsageError) as caught:
        offline_on_temporal.with_mode("mock")
    refused.append(str(caught.value))
    with pytest.raises(UsageError) as caught:
        dataclasses.replace(_config(tmp_path, "mock"), engine="temporal")
    refused.append(str(caught.value))
    assert len(set(refused)) == 1
    assert refused[0].startswith(f"{reason}; ")
    assert "--engine temporal" in refused[0]


def test_a_mode_change_keeps_only_what_the_mode_takes(tmp_path: Path) -> None:
    """Leaving offline for live drops the emulated switches and the emulator's address;
    live without both keys is refused, naming the one missing."""
    keys = {"STRIPE_SECRET_KEY": STRIPE_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    env = {"INTERLOCK_HOME": str(tmp_path), "PATH": "", **keys}
    offline = resolve(mode="offline", no_lookup=True, stripe_base="http://127.0.0.1:1", env=env)
    live = offline.with_mode("live")
    assert (live.switches.names, live.stripe_base) == ([], None)
    assert offline.with_mode("mock").switches.names == ["INTERLOCK_NO_LOOKUP"]
    no_anthropic = _config(tmp_path, "offline", STRIPE_SECRET_KEY=STRIPE_KEY)
    with pytest.raises(UsageError, match="live mode needs ANTHROPIC_API_KEY"):
        no_anthropic.with_mode("live")


def test_a_run_choice_changes_only_what_it_is_told(tmp_path: Path) -> None:
    """`RunChoice.but` keeps the rest of the choice: another mode keeps the engine, the
    scenario and the optional columns; leaving something out keeps it as it was."""
    offline = _config(tmp_path, "offline")
    choice = RunChoice(offline, "revoked", optional=OPTIONAL)
    assert choice.but() == choice
    mocked = choice.but(mode="mock")
    assert (mocked.config.mode, mocked.config.engine, mocked.scenario, mocked.optional) == (
        "mock",
        "standalone",
        "revoked",
        OPTIONAL,
    )
    assert choice.but(optional=frozenset(), scenario="after-answer") == RunChoice(
        offline, "after-answer", optional=frozenset()
    )
    with pytest.raises(UsageError, match="unknown mode 'turbo'"):
        choice.but(mode="turbo")
