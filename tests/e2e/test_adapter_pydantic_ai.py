"""`interlock.pydantic_ai`: Pydantic AI's own resume after a SIGKILL inside the guarded tool.

Each test is one row of the truth table, run across real processes (see
`tests/e2e/adapter_proof.py`): killed before the send with a hand refund during the
outage (only the hand refund, refused), before the send with the approval revoked (no
refund, refused), after Stripe's answer with nothing meanwhile, restarted as the guide
shows: `gate.recover()` first, which adopts the refund, then the resume, which the journal
answers "done" (one refund, adopted); and killed at its first check, before a first
attempt's one commit, with a hand refund meanwhile (nothing journaled; refused on resume).
"""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from tests.e2e.adapter_proof import BEFORE_COMMIT, CASES, prove_all

pytestmark = pytest.mark.e2e


SCENARIOS = tuple(sorted({**CASES, **BEFORE_COMMIT}))


@pytest.fixture(scope="module")
def proofs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Every row at once (each mostly waits out processes and a claim); what each raised."""
    return prove_all("pydantic-ai", tmp_path_factory.mktemp("pydantic-ai"), SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_resume_after_sigkill_matches_the_truth_table(
    scenario: str, proofs: dict[str, BaseException | None]
) -> None:
    """Pydantic AI's resume reaches the same action: the gate adopts or refuses."""
    if (raised := proofs[scenario]) is not None:
        raise raised
