"""A 50 MB value edited into any column verify reads is a problem verify names, never a
stall: the 50 MB cases of `tests/unit/test_receipts_verify.py`'s hand edits, here for the
seconds each takes. The signed store, the columns and the check are that module's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_receipts_verify import (
    EDITED_COLUMNS,
    HUGE,
    Sends,
    _edit_id,
    check_edited_value,
    signed_sends,  # noqa: F401 (the module's fixture, found by pytest under its name)
)


@pytest.mark.parametrize("value", [HUGE], ids=_edit_id)
@pytest.mark.parametrize(("table", "column", "where"), EDITED_COLUMNS)
def test_any_edited_value_is_a_problem_never_a_crash(
    signed_sends: Sends,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    table: str,
    column: str,
    where: str,
    value: object,
) -> None:
    """Whatever a hand edit leaves in a column verify reads, verify (with Stripe, account
    wide) reports a problem naming the action or approval edited, and goes on."""
    check_edited_value(signed_sends, tmp_path, table, column, where, value)
