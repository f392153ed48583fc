"""The demo's key rules: where the Stripe key comes from, test keys only, never shown.

Every key here is made up. The `stripe` CLI is replaced by a small script on PATH.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from interlock_demo.errors import KeyRefusedError
from interlock_demo.settings.keys import (
    Secret,
    check_test_key,
    find_anthropic_key,
    find_stripe_key,
    is_test_key,
    key_kind,
)

SK_TEST = "sk_test_" + "51FakeKeyForTestsOnlyAbCdEf0123"
RK_TEST = "rk_test_" + "51FakeRestrictedKeyGhIjKl4567"
CLI_SOURCE = "`stripe config --list`"

REFUSED = [
    ("sk_live_" + "Qz7Vw3Nc9Lp2Hx8Rt4Ym6Kb1", "a live secret key"),
    ("rk_live_" + "Jd8Fs2Kq5Wn7Tb3Gv6Hy1Pe4", "a live restricted key"),
    ("pk_test_" + "Mb4Xc6Vz1Lq9Wr2Et5Yu8Io3", "a publishable key, which cannot create refunds"),
    ("pk_live_" + "Hg5Fd3Sa1Zx7Cv9Bn2Mq4Wp6", "a publishable key (and a live one)"),
    ("sk_test_" + "Rt6Yh8Uj-Ik2Ol4Pq9Az", "not a Stripe secret key (malformed)"),
    ("sk_test_", "not a Stripe secret key (malformed)"),
    ("SK_TEST_" + "Vb7Nm3Kj9Hg2Fd5", "not a Stripe secret key (malformed)"),
    ("whsec_" + "Lk8Jh6Gf4Ds2Aq1Zw", "not a Stripe secret key (malformed)"),
    ("Pw3Er5Ty7Ui9Op1As", "not a Stripe secret key (malformed)"),
    ("sk_test_" + "Zx9Cv8 Bn7Mq6Wp5", "not a Stripe secret key (malformed)"),
]


def _secret_part(key: str) -> str:
    """The part of a key after its type prefix (all of it when it has none)."""
    for prefix in (
        "sk_live_",
        "rk_live_",
        "pk_test_",
        "pk_live_",
        "sk_test_",
        "SK_TEST_",
        "whsec_",
    ):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _assert_hides(key: str, *texts: str) -> None:
    """No 6-character piece of the key's secret part appears in any of `texts`."""
    secret = _secret_part(key)
    pieces = {secret[i : i + 6] for i in range(len(secret) - 5)}
    assert pieces or len(secret) < 6
    for text in texts:
        leaked = [p for p in pieces if p in text]
        assert not leaked, f"key pieces {leaked} leaked into {text!r}"


def _fake_stripe_cli(directory: Path, output: str, *, exit_code: int = 0) -> Path:
    """A `stripe` executable that prints `output` for `config --list` and logs that it ran."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "stripe"
    ran = directory / "ran"
    printed = directory / "config.txt"
    printed.write_text(output + "\n")
    # Shell builtins only: PATH holds nothing but this directory.
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s ' \"$@\" >> '{ran}'\n"
        'if [ "$1" = config ] && [ "$2" = --list ]; then\n'
        f"  while IFS= read -r line; do printf '%s\\n' \"$line\"; done < '{printed}'\n"
        "fi\n"
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return ran


def _config(key: str, quote: str = "'") -> str:
    return (
        "[default]\n"
        f"device_name = {quote}test-box{quote}\n"
        f"test_mode_api_key = {quote}{key}{quote}\n"
        f"test_mode_pub_key = {quote}pk_test_Xy1Za2Bc3{quote}\n"
        "display_name = 'Demo account'"
    )


# -- where the key comes from ----------------------------------------------------------


@pytest.mark.parametrize("key", [SK_TEST, RK_TEST])
def test_env_test_key_is_accepted(key: str) -> None:
    """A sk_test_ or rk_test_ key in STRIPE_SECRET_KEY is returned as a Secret from that source."""
    secret = find_stripe_key({"STRIPE_SECRET_KEY": key})
    assert secret is not None
    assert (secret.value, secret.source) == (key, "STRIPE_SECRET_KEY")


def test_env_key_is_read_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit mapping, find_stripe_key reads os.environ (surrounding space ignored)."""
    monkeypatch.setenv("STRIPE_SECRET_KEY", f"  {SK_TEST}\n")
    secret = find_stripe_key()
    assert secret is not None and secret.value == SK_TEST


def test_env_key_wins_over_cli(tmp_path: Path) -> None:
    """When STRIPE_SECRET_KEY is set, the CLI is not even run."""
    ran = _fake_stripe_cli(tmp_path / "bin", _config(RK_TEST))
    secret = find_stripe_key({"STRIPE_SECRET_KEY": SK_TEST, "PATH": str(tmp_path / "bin")})
    assert secret is not None and secret.value == SK_TEST
    assert not ran.exists()


def test_missing_cli_gives_none(tmp_path: Path) -> None:
    """With no env key and no `stripe` on PATH, there is no key (None), not an error."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find_stripe_key({"PATH": str(empty)}) is None


# -- test keys only --------------------------------------------------------------------


@pytest.mark.parametrize(("key", "kind"), REFUSED)
def test_non_test_keys_are_refused_without_showing_them(key: str, kind: str) -> None:
    """Live, publishable and malformed keys are refused with their kind named and no key text."""
    with pytest.raises(KeyRefusedError) as err:
        find_stripe_key({"STRIPE_SECRET_KEY": key, "PATH": ""})
    assert isinstance(err.value, ValueError)
    assert err.value.kind == kind == key_kind(key)
    assert err.value.source == "STRIPE_SECRET_KEY"
    message = str(err.value)
    assert kind in message
    assert "STRIPE_SECRET_KEY" in message
    assert "test key" in message  # it says what to do instead
    _assert_hides(key, message, repr(err.value), repr(err.value.args))


@pytest.mark.parametrize(("key", "kind"), REFUSED)
def test_check_test_key_refuses_the_same_keys(key: str, kind: str) -> None:
    """check_test_key refuses what find_stripe_key refuses, and is_test_key says no."""
    assert not is_test_key(key)
    with pytest.raises(KeyRefusedError) as err:
        check_test_key(Secret(key, "a test"))
    assert err.value.kind == kind
    _assert_hides(key, str(err.value))


@pytest.mark.parametrize("key", [SK_TEST, RK_TEST, "sk_test_a", "rk_test_under_scores_ok"])
def test_test_keys_pass_the_check(key: str) -> None:
    """sk_test_ and rk_test_ keys pass check_test_key unchanged and are kind 'a test key'."""
    secret = Secret(key, "somewhere")
    assert is_test_key(key)
    assert check_test_key(secret) is secret
    assert key_kind(key) == "a test key"


# -- secrets are never shown -----------------------------------------------------------


def test_secret_text_never_shows_the_value() -> None:
    """A Secret's str, repr and formatted forms name the source but never the key."""
    secret = Secret(SK_TEST, "STRIPE_SECRET_KEY")
    shown = [
        str(secret),
        repr(secret),
        f"{secret}",
        f"{secret!r}",
        repr([secret]),
        str({"k": secret}),
    ]
    for text in shown:
        assert "STRIPE_SECRET_KEY" in text
        _assert_hides(SK_TEST, text)
    assert secret.value == SK_TEST


def test_anthropic_key_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """ANTHROPIC_API_KEY comes back as a Secret that does not show it, or None when unset."""
    key = "sk-ant-" + "api03-Fake9Key8For7Tests6Only"
    assert find_anthropic_key({}) is None
    assert find_anthropic_key({"ANTHROPIC_API_KEY": "  "}) is None
    assert find_anthropic_key() is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    secret = find_anthropic_key()
    assert secret is not None
    assert (secret.value, secret.source) == (key, "ANTHROPIC_API_KEY")
    _assert_hides(key[len("sk-ant-") :], str(secret), repr(secret))
