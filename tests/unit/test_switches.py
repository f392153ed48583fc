"""The emulated switches are named once: the demo's `Switches` spells their environment
names, the demo's flags follow from the same fields, the contracts (CLI flags, a run's
`emulated`, a receipt's `emulated`) keep their spelling, and a worker turns them into
`interlock.testing`'s wrappers of its effect (the gate reads none of them)."""

from __future__ import annotations

from dataclasses import fields

from interlock import StripeRefund
from interlock.testing import Emulate24h, InProcessPayments, NoLookup, PaymentsModel
from scenarios import SWITCH_EMULATE_24H, SWITCH_NO_LOOKUP, SWITCHES, TRUTH
from workers.interlock import emulating
from workers.protocol.switches import Switches


def test_every_switch_of_the_demo_is_offered_by_it() -> None:
    """Each field of `Switches` (`workers.protocol.switches`) has its environment name and a
    row in `SWITCHES`."""
    names = {f.name for f in fields(Switches)}
    assert set(Switches.ENV_NAMES) == names
    assert {s.field for s in SWITCHES} == names


def test_the_contract_spellings() -> None:
    """The flags, environment names and `emulated` values as docs/design.md and the README
    name them."""
    assert [(s.flag, s.env) for s in SWITCHES] == [
        ("--emulate-24h", "INTERLOCK_EMULATE_24H"),
        ("--no-lookup", "INTERLOCK_NO_LOOKUP"),
    ]
    assert Switches(emulate_24h=True, no_lookup=True).names == [
        "INTERLOCK_EMULATE_24H",
        "INTERLOCK_NO_LOOKUP",
    ]
    assert Switches.from_env({"INTERLOCK_NO_LOOKUP": "yes"}) == Switches(no_lookup=True)


def test_the_truth_table_rows_are_keyed_by_the_switches_names() -> None:
    """The emulated rows of the truth table are found by the names a run lists."""
    switched = {switch for _, switch in TRUTH if switch}
    assert switched == {SWITCH_EMULATE_24H, SWITCH_NO_LOOKUP} == {s.env for s in SWITCHES}


def test_a_worker_wraps_its_effect_in_what_its_run_emulates() -> None:
    """No switch: the effect itself. Each switch: its wrapper, named as the run names it,
    so the receipts list exactly the run's `emulated`, in its order."""
    effect = StripeRefund(InProcessPayments(PaymentsModel()))
    assert emulating(effect, Switches()) is effect

    both = emulating(effect, Switches(emulate_24h=True, no_lookup=True))

    assert isinstance(both, NoLookup) and isinstance(both.effect, Emulate24h)
    assert list(both.emulated) == Switches(emulate_24h=True, no_lookup=True).names
    assert both.lookup_skipped() == "INTERLOCK_NO_LOOKUP is set"
    [only] = emulating(effect, Switches(emulate_24h=True)).emulated
    assert only == SWITCH_EMULATE_24H
