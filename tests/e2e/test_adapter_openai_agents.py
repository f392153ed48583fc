"""`interlock.openai_agents`: the Agents SDK's own resume after a SIGKILL inside the tool.

Each test is one row of the truth table, run across real processes (see
`tests/e2e/adapter_proof.py`): killed before the send with a hand refund during the
outage (only the hand refund, refused), before the send with the approval revoked (no
refund, refused), after Stripe's answer with nothing meanwhile, restarted as the guide
shows: `gate.recover()` first, which adopts the refund, then the resume, which the journal
answers "done" (one refund, adopted).
"""

from __future__ import annotations

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from tests.e2e.adapter_proof import CASES, prove_all

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def proofs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Every row at once (each mostly waits out processes and a claim); what each raised."""
    return prove_all("openai-agents", tmp_path_factory.mktemp("openai-agents"))


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_resume_after_sigkill_matches_the_truth_table(
    scenario: str, proofs: dict[str, BaseException | None]
) -> None:
    """The SDK's RunState resume reaches the same action: the gate adopts or refuses."""
    if (raised := proofs[scenario]) is not None:
        raise raised
