"""`interlock.openai_agents`: the Agents SDK's own resume after a SIGKILL inside the tool.

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

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from interlock.testing import StripeEmulator
from tests.e2e.adapter_proof import CASES, prove

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_resume_after_sigkill_matches_the_truth_table(
    scenario: str, emulator: StripeEmulator, tmp_path: Path
) -> None:
    """The SDK's RunState resume reaches the same action: the gate adopts or refuses."""
    prove("openai-agents", scenario, emulator, tmp_path)
