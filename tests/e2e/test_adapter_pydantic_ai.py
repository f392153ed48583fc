"""`interlock.pydantic_ai`: Pydantic AI's own resume after a SIGKILL inside the guarded tool.

Each test is one row of the truth table, run across real processes (see
`tests/e2e/adapter_proof.py`): killed before the send with a hand refund during the
outage (only the hand refund, refused), before the send with the approval revoked (no
refund, refused), after Stripe's answer with nothing meanwhile, restarted as the guide
shows: `gate.recover()` first, which adopts the refund, then the resume, which the journal
answers "done" (one refund, adopted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from interlock.testing import StripeEmulator
from tests.e2e.adapter_proof import BEFORE_COMMIT, CASES, prove

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("scenario", sorted({**CASES, **BEFORE_COMMIT}))
def test_resume_after_sigkill_matches_the_truth_table(
    scenario: str, emulator: StripeEmulator, tmp_path: Path
) -> None:
    """Pydantic AI's resume reaches the same action: the gate adopts or refuses."""
    prove("pydantic-ai", scenario, emulator, tmp_path)
