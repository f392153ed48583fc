"""The Stripe key from the `stripe` CLI: the demo runs `stripe config --list` (a small script
on PATH stands in for the CLI) and takes a test key only, never showing it.

Every key here is made up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock_demo.errors import KeyRefusedError
from interlock_demo.settings.keys import (
    find_stripe_key,
)
from tests.unit.test_keys import (
    CLI_SOURCE,
    REFUSED,
    RK_TEST,
    SK_TEST,
    _assert_hides,
    _config,
    _fake_stripe_cli,
)


@pytest.mark.parametrize("quote", ["'", '"', ""])
def test_cli_config_key_is_used_when_env_is_unset(tmp_path: Path, quote: str) -> None:
    """Without STRIPE_SECRET_KEY the key is test_mode_api_key from `stripe config --list`."""
    ran = _fake_stripe_cli(tmp_path / "bin", _config(RK_TEST, quote))
    secret = find_stripe_key({"PATH": str(tmp_path / "bin")})
    assert secret is not None
    assert (secret.value, secret.source) == (RK_TEST, CLI_SOURCE)
    assert ran.read_text().split() == ["config", "--list"]


def test_cli_is_found_through_the_process_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no mapping given, the CLI is looked up on the process PATH."""
    _fake_stripe_cli(tmp_path / "bin", _config(SK_TEST))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    secret = find_stripe_key()
    assert secret is not None and secret.value == SK_TEST


def test_blank_env_key_falls_through_to_cli(tmp_path: Path) -> None:
    """A STRIPE_SECRET_KEY of only spaces counts as unset."""
    _fake_stripe_cli(tmp_path / "bin", _config(SK_TEST))
    secret = find_stripe_key({"STRIPE_SECRET_KEY": "   ", "PATH": str(tmp_path / "bin")})
    assert secret is not None and secret.source == CLI_SOURCE


@pytest.mark.parametrize(
    ("output", "exit_code"),
    [
        ("[default]\ndevice_name = 'box'", 0),
        ("", 1),
        ("test_mode_api_key_old = 'sk_test_abc'", 0),
    ],
)
def test_cli_without_a_test_key_gives_none(tmp_path: Path, output: str, exit_code: int) -> None:
    """A CLI that is not logged in, fails, or prints no test_mode_api_key yields None."""
    _fake_stripe_cli(tmp_path / "bin", output, exit_code=exit_code)
    assert find_stripe_key({"PATH": str(tmp_path / "bin")}) is None


def test_cli_live_key_is_refused_naming_the_cli(tmp_path: Path) -> None:
    """A live key from the CLI config is refused, naming the CLI as the source, not the key."""
    live = REFUSED[0][0]
    _fake_stripe_cli(tmp_path / "bin", _config(live))
    with pytest.raises(KeyRefusedError) as err:
        find_stripe_key({"PATH": str(tmp_path / "bin")})
    assert err.value.source == CLI_SOURCE
    assert CLI_SOURCE in str(err.value)
    assert "live secret key" in str(err.value)
    _assert_hides(live, str(err.value), repr(err.value))
