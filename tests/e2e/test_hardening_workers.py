"""Least-privilege workers: each launch gets an allow-list and only its secrets.

The end-to-end test runs real offline runs in-process, with each worker started through a
thin wrapper that records the environment it received and then runs the real worker
module. Planted in the demo's environment: an unrelated cloud secret, a token, and an old
HMAC receipt key and a signing key path of the presenter's own, each a made-up marker (the
demo signs with its own key, so these must reach no worker and break nothing). The unit
tests hold the one builder,
`worker.worker_env`, to the same rules in live mode (made-up keys; no network).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from interlock.testing import CrashPoint
from interlock_demo.core.columns import OPTIONAL
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.engine.process import ProcessLauncher
from interlock_demo.engine.temporal.launcher import TemporalLauncher
from interlock_demo.engine.temporal.probe import temporal_unavailable
from interlock_demo.settings.config import resolve
from interlock_demo.settings.worker import worker_env
from scenarios import sweep_scenario
from workers.protocol.case import Case

pytestmark = pytest.mark.e2e

RUN_DEADLINE_S = 90.0
AWS = "MadeUpAwsSecretAccessKey0000000000"
TOKEN = "ghp_MadeUpTokenForTheWorkerTests0000"
RECEIPT = "MadeUpReceiptKeyForTheWorkerTests"
# A presenter's own signing key setting: a path the demo must never hand on.
PRESENTERS_KEY = "/made/up/presenters-signing-key.pem"
STRIPE = "sk_test_MadeUpForWorkerEnvTests0000000000"
ANTHROPIC = "sk-ant-api03-MadeUpForWorkerEnvTests-0000"
# Written out by hand (not imported from the code under test): what a worker may see.
ALLOWED = {
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "PYTHONPATH",
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
    "PYTHONUNBUFFERED",
    "STRIPE_SECRET_KEY",
    "ANTHROPIC_API_KEY",
    "INTERLOCK_HOME",
    "INTERLOCK_STORE",
    # The approvers' public key file: what a worker checks approvals with.
    "INTERLOCK_APPROVERS",
    "INTERLOCK_CLAIM_TTL",
    "INTERLOCK_STRIPE_TIMEOUT",
    "INTERLOCK_CLAIM_GRACE",
    "INTERLOCK_SEND_SLACK",
    "INTERLOCK_MODEL",
    "INTERLOCK_EMULATE_24H",
    "INTERLOCK_NO_LOOKUP",
    "INTERLOCK_CRASH",
    "INTERLOCK_AGENT",
    "INTERLOCK_STRIPE_BASE",
    # The path of the demo's own receipt key: interlock's workers only.
    "INTERLOCK_SIGNING_KEY",
}
# Records the environment the worker got (as JSON, named by its pid), then runs it.
RECORD_AND_RUN = """
import json, os, runpy, sys
folder, module, *args = sys.argv[1:]
with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
    json.dump(dict(os.environ), f)
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _allowed(name: str) -> bool:
    return name in ALLOWED or name.startswith("LC_")


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets of other programs and the presenter's own receipt key settings in the demo's
    environment."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", RECEIPT)
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", PRESENTERS_KEY)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("INTERLOCK_CLAIM_TTL", "6")
    monkeypatch.setenv("INTERLOCK_STRIPE_TIMEOUT", "1")


def _record_environments(
    monkeypatch: pytest.MonkeyPatch, launcher_class: type[Any], folder: Path
) -> None:
    """Start each worker of `launcher_class` through RECORD_AND_RUN, into `folder`."""
    original = launcher_class.argv

    def recorded(self: Any, case: Case) -> list[str]:
        python, dash_m, module, *args = original(self, case)
        assert dash_m == "-m"
        return [python, "-c", RECORD_AND_RUN, str(folder), module, *args]

    monkeypatch.setattr(launcher_class, "argv", recorded)


def _check_workers(
    docs: list[dict[str, Any]], folder: Path, asks: dict[str, tuple[bool, bool]], home: Path
) -> None:
    """Every worker of every run got the allow-list and only the secrets it needed: the
    demo's receipt key's path for interlock's, never the key itself, nor the approver's."""
    key_file = home / "demo" / "receipt-signing-key.pem"
    private = {
        "the receipt key": key_file.read_text().strip(),
        "the approver's key": (home / "demo" / "support-approver.key").read_text().strip(),
    }
    environments = {int(p.stem): json.loads(p.read_text()) for p in folder.glob("*.json")}
    seen = 0
    for doc in docs:
        assert doc["status"] == "finished" and doc["error"] is None, doc["error"]
        for col in doc["columns"]:
            where = f"{doc['scenario']}/{col['name']}"
            assert len(col["workers"]) == 2, where
            for launch, worker in enumerate(col["workers"]):
                env: dict[str, str] = environments[worker["pid"]]
                seen += 1
                assert sorted(k for k in env if not _allowed(k)) == [], where
                values = " ".join(env.values())
                assert AWS not in values and TOKEN not in values, where
                assert RECEIPT not in values and PRESENTERS_KEY not in values, where
                assert not [name for name, text in private.items() if text in values], where
                assert "ANTHROPIC_API_KEY" not in env, where
                assert env["LC_ALL"] == "C.UTF-8", where
                if col["name"] == "interlock":
                    assert env["INTERLOCK_SIGNING_KEY"] == str(key_file), where
                else:
                    assert "INTERLOCK_SIGNING_KEY" not in env, where
                want = "scripted" if asks[doc["scenario"]][launch] else "none"
                assert env["INTERLOCK_AGENT"] == want, (where, launch)
            if doc["scenario"] == "hand-refund":
                assert col["as_predicted"] is True, (where, col["deviations"])
            assert col["truthful"] is True, where
            if col["name"] == "interlock":
                verified = col["verify"]
                assert verified["ok"] is True, (where, verified["problems"])
                assert verified["signed"] is True, where
                assert verified["formats"] == {"ed25519": verified["log_size"]}, where
                assert verified["log_place"] is not None, where
                assert verified["receipt_anchored"] is True, where
    assert seen == len(environments)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


@pytest.mark.timeout(240)
def test_real_workers_get_the_allow_list_and_only_the_secrets_they_need(
    planted: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In real offline runs no worker gets the planted secrets or anything off the allow-list;
    only interlock's workers get the path of the demo's receipt key (the presenter's own
    INTERLOCK_RECEIPT_KEY and INTERLOCK_SIGNING_KEY are ignored, and interlock's receipts
    are signed, logged and anchored all the same); a restart that acts on a saved decision is
    started without the model (hand-refund), one with nothing saved asks again
    (after-decision), and every column still ends as predicted."""
    folder = tmp_path / "environments"
    folder.mkdir()
    _record_environments(monkeypatch, ProcessLauncher, folder)
    after_decision = sweep_scenario(CrashPoint.AFTER_DECISION, "none").id
    config = resolve(mode="offline")
    engine = Engine(config)
    try:
        docs = [
            engine.run(RunChoice(config, sid, optional=OPTIONAL), RUN_DEADLINE_S).to_json()
            for sid in ("hand-refund", after_decision)
        ]
    finally:
        engine.close()
    # Whether each launch (first, restart) asks the model: hand-refund saves the decision
    # before its kill at before-send; after-decision dies before anything is saved.
    _check_workers(
        docs,
        folder,
        {"hand-refund": (True, False), after_decision: (True, True)},
        config.paths.home,
    )


@pytest.mark.skipif(temporal_unavailable() is not None, reason=str(temporal_unavailable()))
@pytest.mark.timeout(240)
def test_temporal_workers_get_the_allow_list_and_only_the_secrets_they_need(
    planted: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same under the Temporal engine, where the restart's decision is ask_model's result
    in the workflow's history: the restarted worker is started without the model."""
    folder = tmp_path / "environments"
    folder.mkdir()
    _record_environments(monkeypatch, TemporalLauncher, folder)
    monkeypatch.setenv("INTERLOCK_ACTIVITY_TIMEOUT", "20")
    config = resolve(mode="offline", engine="temporal")
    engine = Engine(config)
    try:
        doc = engine.run(
            RunChoice(config, "hand-refund", optional=OPTIONAL), RUN_DEADLINE_S
        ).to_json()
    finally:
        engine.close()
    _check_workers([doc], folder, {"hand-refund": (True, False)}, config.paths.home)


def _live_config() -> Any:
    env = {
        "STRIPE_SECRET_KEY": STRIPE,
        "ANTHROPIC_API_KEY": ANTHROPIC,
        "INTERLOCK_HOME": "/nonexistent/interlock-home",
        "PATH": "",
    }
    return resolve(mode="live", env=env)


PARENT = {
    "PATH": "/usr/bin",
    "HOME": "/home/presenter",
    "LANG": "en_GB.UTF-8",
    "LC_TIME": "en_GB.UTF-8",
    "AWS_SECRET_ACCESS_KEY": AWS,
    "GITHUB_TOKEN": TOKEN,
    "INTERLOCK_RECEIPT_KEY": RECEIPT,
    "INTERLOCK_SIGNING_KEY": PRESENTERS_KEY,
    "STRIPE_SECRET_KEY": STRIPE,
    "ANTHROPIC_API_KEY": ANTHROPIC,
    "INTERLOCK_EMULATE_24H": "1",
}


@pytest.mark.parametrize("column", ["standard", "interlock", "checked"])
def test_live_worker_that_asks_the_model_gets_its_key_and_no_other_secret(column: str) -> None:
    """Live, first launch: the Stripe key, the model and its key; the path of the demo's
    receipt key only for interlock (never the presenter's own receipt key settings); none of
    the other programs' secrets; no inherited switch."""
    config = _live_config()
    env = worker_env(config, None, column=column, asks_model=True, parent=PARENT)
    assert env["STRIPE_SECRET_KEY"] == STRIPE
    assert (env["INTERLOCK_AGENT"], env["ANTHROPIC_API_KEY"]) == ("anthropic", ANTHROPIC)
    assert "INTERLOCK_RECEIPT_KEY" not in env and RECEIPT not in env.values()
    signing = {str(config.paths.signing_key)} if column == "interlock" else set()
    assert {v for k, v in env.items() if k == "INTERLOCK_SIGNING_KEY"} == signing
    assert sorted(k for k in env if not _allowed(k)) == []
    assert AWS not in env.values() and TOKEN not in env.values()
    assert "INTERLOCK_EMULATE_24H" not in env
    assert (env["HOME"], env["LC_TIME"]) == ("/home/presenter", "en_GB.UTF-8")


@pytest.mark.parametrize("column", ["standard", "interlock", "checked"])
def test_live_restart_on_a_saved_decision_gets_no_model_key(column: str) -> None:
    """Live, a restart that only acts on its saved decision: the Stripe key, no model key."""
    env = worker_env(
        _live_config(), None, column=column, asks_model=False, crash_point=None, parent=PARENT
    )
    assert env["STRIPE_SECRET_KEY"] == STRIPE
    assert env["INTERLOCK_AGENT"] == "none"
    assert "ANTHROPIC_API_KEY" not in env
    assert ANTHROPIC not in env.values()
