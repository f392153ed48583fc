"""The `interlock-demo` command: exit 2 for bad usage or configuration, keys never shown.

Each case runs the real command (`python -m interlock_demo.cli`) in a subprocess with a
clean environment: no keys or switches from outside and a PATH without the `stripe` CLI,
so that a developer's `stripe login` cannot change the outcome. Keys here are made up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import ConfigError
from interlock_demo.settings.config import resolve
from interlock_demo.settings.timing import demo_timing
from interlock_demo.settings.worker import worker_env
from tests.helpers.headless import ROOT, SCRUBBED
from tests.unit.test_engine_mock import FEW_SECONDS, _check_columns

LIVE_KEY = "sk_live_51Hq8ZbQ4eC39HqLyjWDarjtT1zdp7dcMadeUp"
STRIPE_TEST_KEY = "sk_test_51Hq8ZbQ9xT4kVwNpMadeUpTestKey00"
ANTHROPIC_KEY = "sk-ant-api03-Zq7XvB2mN8pLkJ4hMadeUpAnthropic"
HEADLESS = ["--headless", "--json", "--scenario", "revoked"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no outside keys or switches, no `stripe` CLI on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin"
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path, **env),
        timeout=60,
        check=False,
    )


def _shows_no_part_of(key: str, text: str) -> bool:
    """Whether `text` shows neither the key's start nor any 6 characters of its secret part.

    The prefix alone (`sk_test_` and the like) is not secret: messages name it as advice.
    """
    prefix = key[:8] if key[:3] in ("sk_", "rk_", "pk_") else key[:7]
    body = key[len(prefix) :]
    return key[: len(prefix) + 4] not in text and not any(
        body[i : i + 6] in text for i in range(len(body) - 5)
    )


@pytest.mark.parametrize("mode", [["--mock"], ["--offline"], [], ["--live"]])
def test_refused_key_exits_2_in_every_mode(tmp_path: Path, mode: list[str]) -> None:
    """A live Stripe key is refused in every mode, with a message that does not echo it."""
    done = _run(
        [*mode, *HEADLESS], tmp_path, STRIPE_SECRET_KEY=LIVE_KEY, ANTHROPIC_API_KEY=ANTHROPIC_KEY
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "refused the Stripe key from STRIPE_SECRET_KEY" in done.stderr
    assert "live secret key" in done.stderr
    assert "sk_test_" in done.stderr  # it says what to use instead
    assert _shows_no_part_of(LIVE_KEY, done.stderr + done.stdout)
    assert _shows_no_part_of(ANTHROPIC_KEY, done.stderr + done.stdout)


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("pk_test_51Hq8ZbQ4eC39HqLyjWDarjMadeUp", "publishable key"),
        ("rk_live_51Hq8ZbQ4eC39HqLyjWDarjMadeUp", "live restricted key"),
        ("not-a-key-Q4eC39HqLyjWDarj", "malformed"),
    ],
)
def test_other_non_test_keys_are_refused(tmp_path: Path, key: str, kind: str) -> None:
    """Publishable, live restricted and malformed keys are refused too, named by kind only."""
    done = _run(["--mock", *HEADLESS], tmp_path, STRIPE_SECRET_KEY=key)
    assert done.returncode == 2
    assert kind in done.stderr
    assert _shows_no_part_of(key, done.stderr + done.stdout)


def test_live_without_keys_names_both_missing(tmp_path: Path) -> None:
    """`--live` with no keys exits 2 naming the Stripe key and ANTHROPIC_API_KEY."""
    done = _run(["--live", *HEADLESS], tmp_path)
    assert done.returncode == 2
    assert "live mode needs" in done.stderr
    assert "STRIPE_SECRET_KEY" in done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert "--offline" in done.stderr


@pytest.mark.parametrize(
    ("env", "missing", "present_key"),
    [
        ({"ANTHROPIC_API_KEY": ANTHROPIC_KEY}, "a Stripe test key", ANTHROPIC_KEY),
        ({"STRIPE_SECRET_KEY": STRIPE_TEST_KEY}, "ANTHROPIC_API_KEY", STRIPE_TEST_KEY),
    ],
)
def test_live_with_one_key_names_the_other_and_shows_neither(
    tmp_path: Path, env: dict[str, str], missing: str, present_key: str
) -> None:
    """`--live` with one key exits 2 naming only the missing one, and never shows the other."""
    done = _run(["--live", *HEADLESS], tmp_path, **env)
    assert done.returncode == 2
    needs = done.stderr.split("live mode needs", 1)[1].split(":", 1)[0]
    assert needs.strip() == missing or needs.strip().startswith(missing)
    assert " and " not in needs
    assert _shows_no_part_of(present_key, done.stderr + done.stdout)


@pytest.mark.parametrize("switch", ["--emulate-24h", "--no-lookup"])
def test_live_with_an_emulated_switch_exits_2(tmp_path: Path, switch: str) -> None:
    """A live run refuses the emulated switches, even with both keys present."""
    done = _run(
        ["--live", switch, *HEADLESS],
        tmp_path,
        STRIPE_SECRET_KEY=STRIPE_TEST_KEY,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
    )
    assert done.returncode == 2
    assert "--emulate-24h and --no-lookup are emulated switches" in done.stderr
    assert _shows_no_part_of(STRIPE_TEST_KEY, done.stderr)
    assert _shows_no_part_of(ANTHROPIC_KEY, done.stderr)


def test_live_never_inherits_switches_from_the_environment() -> None:
    """Switches set in the environment are dropped from a live config and its workers' env."""
    env = {
        "STRIPE_SECRET_KEY": STRIPE_TEST_KEY,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "INTERLOCK_EMULATE_24H": "1",
        "INTERLOCK_NO_LOOKUP": "1",
        "PATH": "/usr/bin:/bin",
    }
    live = resolve(env=env)
    assert live.mode == "live"
    assert live.switches.names == []
    launched = worker_env(live, None, column="interlock", asks_model=True, parent=env)
    assert not {"INTERLOCK_EMULATE_24H", "INTERLOCK_NO_LOOKUP"} & set(launched)
    offline = resolve(mode="offline", env=env)
    assert offline.switches.names == ["INTERLOCK_EMULATE_24H", "INTERLOCK_NO_LOOKUP"]


def test_mock_with_temporal_exits_2(tmp_path: Path) -> None:
    """`--mock --engine temporal` is bad usage: mock runs in-process without Temporal."""
    done = _run(["--mock", "--engine", "temporal", *HEADLESS], tmp_path)
    assert done.returncode == 2
    assert "--engine temporal" in done.stderr
    assert done.stdout == ""


def test_stripe_base_needs_offline(tmp_path: Path) -> None:
    """`--stripe-base` with `--mock` is bad usage."""
    done = _run(["--mock", "--stripe-base", "http://127.0.0.1:1", *HEADLESS], tmp_path)
    assert done.returncode == 2
    assert "--offline" in done.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "2"},
        {"INTERLOCK_CLAIM_TTL": "soon"},
        {"INTERLOCK_STRIPE_TIMEOUT": "fast"},
    ],
)
def test_bad_timing_exits_2_with_the_librarys_message(tmp_path: Path, env: dict[str, str]) -> None:
    """A timing the library refuses exits 2 and shows the library's message, values included."""
    with pytest.raises(ConfigError) as refused:
        demo_timing(env)
    message = str(refused.value)
    for value in env.values():
        assert value in message
    done = _run(["--offline", *HEADLESS], tmp_path, **env)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""


def test_timing_message_names_both_values(tmp_path: Path) -> None:
    """A claim of 6 s with a 2 s timeout is refused naming 6 s and 2 s."""
    done = _run(
        ["--mock", *HEADLESS], tmp_path, INTERLOCK_CLAIM_TTL="6", INTERLOCK_STRIPE_TIMEOUT="2"
    )
    assert done.returncode == 2
    assert "claim TTL 6 s with Stripe timeout 2 s is refused" in done.stderr


@pytest.mark.parametrize(
    "args", [["--headless", "--json"], ["--headless", "--json", "--scenario", "nope"]]
)
def test_headless_needs_a_known_scenario(tmp_path: Path, args: list[str]) -> None:
    """`--headless` without a scenario, or with an unknown one, exits 2 listing the valid ones."""
    done = _run(["--mock", *args], tmp_path)
    assert done.returncode == 2
    assert "hand-refund, revoked, after-answer or all" in done.stderr
    assert done.stdout == ""


def test_unknown_option_exits_2(tmp_path: Path) -> None:
    """An option the command does not know is bad usage."""
    done = _run(["--mock", "--frobnicate"], tmp_path)
    assert done.returncode == 2


def test_headless_stdout_is_one_json_document(tmp_path: Path) -> None:
    """In headless mode stdout is exactly one JSON document; progress lines are on stderr."""
    done = _run(["--mock", *HEADLESS], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "interlock-demo/run@2"
    assert doc["scenario"] == "revoked"
    assert "MOCK. " in done.stderr
    assert "support revokes the approval" in done.stderr
    assert "revoked (mock" in done.stderr


def test_headless_without_json_prints_a_summary_on_stdout(tmp_path: Path) -> None:
    """Without `--json`, stdout is a human summary: the run, then one line per column with
    its verdict, money and reason; the progress lines stay on stderr."""
    done = _run(["--mock", "--headless", "--scenario", "revoked"], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("MOCK. revoked (mock, "), lines
    assert lines[0].endswith(": finished, wrong (as predicted)"), lines
    columns = lines[1:]
    assert [line.split()[1] for line in columns] == ["standard", "interlock", "checked"]
    assert columns[0].split(": ")[0].endswith("standard  wrong (as predicted)"), columns[0]
    assert columns[1].split(": ")[0].endswith("interlock right"), columns[1]
    for line in columns:
        assert "refunded" in line, line
        assert "reported " in line, line
    assert "revoked" in columns[1].split("reported ", 1)[1], columns[1]
    assert "support revokes the approval" not in done.stdout
    assert "support revokes the approval" in done.stderr


def test_headless_does_not_import_textual_or_rich(tmp_path: Path) -> None:
    """A headless JSON run never imports Textual or rich (it runs in CI without a screen)."""
    # httpx (which the test extra's agent frameworks bring, and stripe imports when it is
    # there) loads its optional CLI, and rich with it, whenever click is importable: hiding
    # click keeps the probe on what this tree imports (as test_public_api's probe does).
    hide_click = "import sys, runpy; sys.modules['click'] = None; "
    run = "runpy.run_module('interlock_demo.cli', run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", hide_click + run, "--mock", *HEADLESS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert {"interlock_demo", "workers", "scenarios", "stripe"} <= imported
    assert "textual" not in imported
    assert "rich" not in imported


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_default_mode_without_keys_is_offline_and_says_why(tmp_path: Path) -> None:
    """With no keys the default is an offline run whose notes name the missing keys."""
    procs = {}
    short = {"INTERLOCK_CLAIM_TTL": "6", "INTERLOCK_STRIPE_TIMEOUT": "1"}
    for name, extra in (("none", {}), ("stripe-only", {"STRIPE_SECRET_KEY": STRIPE_TEST_KEY})):
        env = _env(tmp_path / name, **short, **extra)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "interlock_demo.cli", *HEADLESS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=env,
        )
    docs: dict[str, Any] = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        docs[name] = json.loads(out)
    none, stripe_only = docs["none"], docs["stripe-only"]
    for doc in (none, stripe_only):
        assert doc["mode"] == "offline"
        assert doc["settings"]["stripe"] == "emulator"
        assert all(c["as_predicted"] for c in doc["columns"])
    (note,) = none["notes"]
    assert "Stripe test key" in note and "ANTHROPIC_API_KEY" in note
    (note,) = stripe_only["notes"]
    assert "ANTHROPIC_API_KEY" in note and "Stripe" not in note
    assert _shows_no_part_of(STRIPE_TEST_KEY, json.dumps(stripe_only))


def test_scenario_by_the_apps_key_runs_that_scenario(tmp_path: Path) -> None:
    """`--scenario 1` (the key the app uses for hand-refund) runs hand-refund headless."""
    done = _run(["--mock", "--headless", "--json", "--scenario", "1"], tmp_path)
    assert done.returncode != 2, done.stderr  # not a usage error: the run's verdict is its own
    assert json.loads(done.stdout)["scenario"] == "hand-refund"


def test_unknown_scenario_says_what_is_wrong_and_suggests(tmp_path: Path) -> None:
    """A misspelt scenario is named as unknown, with the valid ids, the keys and a suggestion."""
    done = _run(["--mock", "--headless", "--json", "--scenario", "handrefund"], tmp_path)
    assert done.returncode == 2
    assert "unknown scenario 'handrefund'" in done.stderr
    assert "hand-refund, revoked, after-answer or all" in done.stderr
    assert "1, 2, 3" in done.stderr
    assert "Did you mean hand-refund?" in done.stderr
    assert "needs --scenario" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--json"], "--json prints a headless run"),
        (["--json", "--scenario", "all"], "--json prints a headless run"),
        (["--scenario", "2"], "--scenario chooses what --headless runs"),
    ],
)
def test_headless_options_without_headless_are_usage_errors(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """`--json` or `--scenario` without `--headless` exit 2 at once instead of opening the app.

    A CI job that forgets `--headless` would otherwise hang on the app.
    """
    done = subprocess.run(
        [sys.executable, "-m", "interlock_demo.cli", "--mock", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2
    assert says in done.stderr
    assert "--headless" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("value", ["99999", "0", "-1", "eighty"])
def test_bad_http_port_is_a_usage_error(tmp_path: Path, value: str) -> None:
    """`--http 99999` exits 2 saying the port is not one, without a traceback."""
    done = _run(["--mock", "--http", value], tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--http" in done.stderr
    assert "port" in done.stderr


@pytest.mark.parametrize("value", ["1e9", "100000", "3600"])
def test_absurd_claim_ttl_is_refused(tmp_path: Path, value: str) -> None:
    """An absurd claim TTL is refused at once (exit 2) naming the variable, instead of a run
    that waits for hours."""
    done = _run(["--mock", *HEADLESS], tmp_path, INTERLOCK_CLAIM_TTL=value)
    assert done.returncode == 2
    assert "INTERLOCK_CLAIM_TTL" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["--offline", "--no-checked", "serve", "--port", "8123"],
        ["serve", "--offline", "--no-checked", "--port", "8123"],
    ],
)
def test_serve_takes_the_apps_options_before_or_after(argv: list[str]) -> None:
    """`serve --offline --no-checked` means what `--offline --no-checked serve` does."""
    from interlock_demo.cli import _app_argv, _parser

    args = _parser().parse_args(argv)
    assert (args.command, args.port) == ("serve", 8123)
    assert _app_argv(args) == ["--offline", "--no-checked"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--checked"],
        ["--headless", "--scenario", "1"],
        ["record", "--scenario", "revoked", "--out", "x.cast"],
    ],
)
def test_the_third_column_is_on_unless_left_out(argv: list[str]) -> None:
    """The app, a headless run and a recording have the hand-written check column unless
    `--no-checked` leaves it out; a browser tab gets the app's default."""
    from interlock_demo.cli import _app_argv, _parser

    assert _parser().parse_args(argv).checked is True
    assert _parser().parse_args([*argv, "--no-checked"]).checked is False
    assert _app_argv(_parser().parse_args(["--offline", "serve"])) == ["--offline"]


def test_serve_hands_the_emulated_switches_on_to_each_tab() -> None:
    """`--offline --no-lookup --emulate-24h serve` opens every browser tab with both switches,
    spelled as the command line takes them."""
    from interlock_demo.cli import _app_argv, _parser

    args = _parser().parse_args(["--offline", "--no-lookup", "--emulate-24h", "serve"])
    assert _app_argv(args) == ["--offline", "--emulate-24h", "--no-lookup"]
    assert _app_argv(_parser().parse_args(["--offline", "serve"])) == ["--offline"]


@pytest.mark.parametrize("argv", [["--mock", "doctor"], ["doctor", "--mock"]])
def test_doctor_takes_the_mode_before_or_after(argv: list[str]) -> None:
    """`doctor --mock` checks mock mode, as `--mock doctor` does; left out, no mode is set."""
    from interlock_demo.cli import _parser

    assert _parser().parse_args(argv).mode == "mock"
    assert _parser().parse_args(["doctor"]).mode is None


def _every_command() -> list[list[str]]:
    """Each subcommand the parser knows (and the MCP desk's own), so a new one is covered."""
    import argparse

    from interlock_demo.cli import _parser

    commands: list[list[str]] = [[]]
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands.append([name])
                for inner in sub._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        commands += [[name, inner_name] for inner_name in inner.choices]
    return commands


def test_every_command_refuses_a_live_key_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every subcommand (the emulator, the MCP desk offline and its approve, the reports)
    with a live key set exits 2 with the same refusal and creates nothing, before parsing."""
    from interlock_demo.cli import main

    commands = _every_command()
    assert ["stripe-emulator"] in commands and ["mcp", "approve"] in commands
    home = tmp_path / "home"
    monkeypatch.setenv("INTERLOCK_HOME", str(home))
    monkeypatch.setenv("STRIPE_SECRET_KEY", LIVE_KEY)
    monkeypatch.setenv("PATH", "/nonexistent")
    # A refusal that stopped working would write its report files here, not in the checkout.
    monkeypatch.chdir(tmp_path)
    messages = set()
    for command in commands:
        if command == ["doctor"]:
            continue  # the venue check names the refused key on its keys line instead
        extra = ["--offline"] if command == ["mcp"] else []
        assert main([*command, *extra]) == 2, command
        out = capsys.readouterr()
        assert out.out == "" and _shows_no_part_of(LIVE_KEY, out.err), command
        messages.add(out.err)
    # Only the command is exempt, not an argument that reads like it.
    assert main(["e2e-report", "--out", "doctor"]) == 2
    messages.add(capsys.readouterr().err)
    (message,) = messages
    assert "refused the Stripe key from STRIPE_SECRET_KEY: it is a live secret key" in message
    assert not home.exists() and not (tmp_path / "doctor").exists()


def test_mock_cli_all_scenarios(tmp_path: Path) -> None:
    """`--mock --scenario all` prints a list of runs, each labelled mock, and exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["INTERLOCK_HOME"] = str(tmp_path / "home")
    cmd = [sys.executable, "-m", "interlock_demo.cli", "--headless", "--json", "--mock"]
    done = subprocess.run(
        [*cmd, "--scenario", "all", "--checked"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    docs = json.loads(done.stdout)
    assert [d["scenario"] for d in docs] == ["hand-refund", "revoked", "after-answer"]
    for doc in docs:
        assert doc["mode"] == "mock"
        assert doc["elapsed_s"] < FEW_SECONDS
        _check_columns(doc, doc["scenario"])
    progress = [line for line in done.stderr.splitlines() if line.strip()]
    assert progress and all(line.startswith("MOCK. ") for line in progress)


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command line the parser takes: itself, then each subcommand, nested ones too."""
    yield path
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_version_everywhere_in_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` answers on the command and on every subcommand (nested ones too), exit 0,
    naming the demo's version and the library's."""
    from interlock_demo.cli import _parser, main

    lines = list(_commands(_parser()))
    assert ("sweep",) in lines and ("mcp", "approve") in lines
    for line in lines:
        assert main([*line, "--version"]) == 0, line
        out = capsys.readouterr().out
        assert re.fullmatch(r"interlock-demo \S+ \(interlock \S+\)\n", out), (line, out)


def test_version_is_answered_with_a_live_key_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--version` starts nothing, so a live key in the environment does not refuse it."""
    from interlock_demo.cli import main

    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_live_" + "MadeUp" * 4)
    assert main(["sweep", "--version"]) == 0
    assert main(["sweep"]) == 2


def test_version_everywhere_in_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m interlock --version` and each of its commands' `--version` print the
    library's version and exit 0."""
    from interlock.__main__ import main

    for line in ((), ("verify",), ("stripe-emulator",)):
        assert main([*line, "--version"]) == 0
        assert re.fullmatch(r"interlock \S+\n", capsys.readouterr().out), line


def test_a_run_on_another_journal_is_not_checked_against_the_first_ones_anchor(
    tmp_path: Path,
) -> None:
    """A run on the default journal, then one on another (`--store`) from the same home:
    each journal's receipt log has an anchor file of its own, so the second run's verify
    holds. With one file for both, the second log read as rewritten after it was anchored
    (a false alarm on the card, and `interlock-demo results`' PostgreSQL sweep failed)."""
    base = ["--offline", "--headless", "--json", "--scenario", "after-answer"]
    runs = [_run(base, tmp_path), _run([*base, "--store", str(tmp_path / "other.db")], tmp_path)]

    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
        [gated] = [c for c in json.loads(done.stdout)["columns"] if c["name"] == "interlock"]
        assert gated["verify"]["ok"] is True, gated["verify"]["problems"]
    anchors = sorted(p.name for p in (tmp_path / "home").rglob("heads*.jsonl"))
    assert len(anchors) == 2 and "heads.jsonl" in anchors, anchors
