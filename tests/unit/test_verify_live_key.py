"""`python -m interlock verify --stripe` refuses a Stripe key that is not a test key, as
every `interlock-demo` command does, before it builds a client or sends any request."""

from __future__ import annotations

from pathlib import Path

import pytest

import interlock.__main__ as cli
from tests.unit.test_receipts_verify import _store_with_receipts

# Shaped like Stripe's keys, made up: neither is any account's.
LIVE_KEYS = {
    "sk_live_51MadeUpLiveSecretKey000": "a live secret key",
    "rk_live_51MadeUpLiveRestrictedKey0": "a live restricted key",
}


@pytest.mark.parametrize("key", LIVE_KEYS)
def test_verify_refuses_a_live_key_before_any_request(
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2, saying which key was refused, what kind it is and what to do; no Stripe
    client is ever made (so nothing is sent), and the key is nowhere in the output."""
    store = tmp_path / "journal.sqlite3"
    _store_with_receipts(store)
    clients: list[str] = []

    def no_client(given: str) -> object:
        clients.append(given)
        raise AssertionError("a Stripe client was made for a live key")

    monkeypatch.setattr(cli, "_stripe", no_client)
    monkeypatch.setenv("STRIPE_SECRET_KEY", key)
    monkeypatch.delenv("INTERLOCK_STRIPE_BASE", raising=False)
    code = cli.main(["verify", "--stripe", str(store)])
    out, err = capsys.readouterr()
    assert clients == []
    assert code == 2
    assert err == (
        "python -m interlock verify: refused the Stripe key from STRIPE_SECRET_KEY: it is "
        f"{LIVE_KEYS[key]}. This command reads Stripe only with test keys (sk_test_... or "
        "rk_test_...): set STRIPE_SECRET_KEY to a test key from the Stripe dashboard "
        "(Developers > API keys, test mode), or leave out --stripe to check the receipts "
        "alone.\n"
    )
    assert key not in out + err
    assert key[8:] not in out + err


def test_a_test_key_is_taken() -> None:
    """The rule refuses only what is not a test key."""
    assert cli.key_refusal("sk_test_loopbackEmulator") is None
    assert cli.key_refusal("rk_test_loopbackEmulator") is None
    assert "not a Stripe test key" in (cli.key_refusal("pk_test_abc") or "")
