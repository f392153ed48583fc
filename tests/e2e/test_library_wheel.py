"""The library on its own: its wheel, built from this checkout, installs in a fresh venv
with none of the demo's packages and guards a refund against the in-process fake Stripe;
its description on a package index is its own README, which names nothing of the demo.

The fresh venv is installed offline (`--no-index`) from the wheelhouse the README's test
command fills (`pip wheel -w .venv/wheelhouse ./packaging/interlock`): tests never touch
the network, so the library's dependencies must already be on disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "packaging" / "interlock"
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
DEMO_ONLY = {"textual", "textual-serve", "rich", "anthropic", "aiohttp"}
# What only the demo has, as the library's page would name it.
DEMO_WORDS = re.compile(r"demo|presenter|\bmodes?\b|scenarios?|columns?", re.I)

GUARDED_REFUND = textwrap.dedent(
    """
    import json, sys
    import interlock
    from interlock.testing import InProcessPayments

    payments = InProcessPayments()
    store = interlock.SQLiteStore(sys.argv[1])
    support = interlock.Approver.generate("support")
    key = interlock.SigningKey.generate()
    trusted = interlock.KeyList()
    trusted.add(key.public)
    gate = interlock.Gate(
        store, interlock.StripeRefund(payments), signing_key=key,
        approvers=interlock.Approvers.of(support), log_every=1,
    )
    payment = payments.create_payment(10_000)
    lease = support.grant(kind="refund", target=payment.id, cap=2_000, expires_in_s=3600)
    store.grant_lease(lease)
    intent = interlock.Intent(
        interlock.new_action_id(), "refund", payment.id, 2_000, lease.id,
        interlock.refunds_fingerprint(payments.list_refunds(payment.id)),
    )
    first = gate.submit(intent)
    again = gate.submit(intent)  # the same decision again: its recorded outcome, no send
    refunds = payments.list_refunds(payment.id)
    result = interlock.verify(store, payments, keys=trusted)
    print(json.dumps({
        "first": first.status, "again": again.status,
        "same_refund": first.external_id == again.external_id,
        "refunds": [r.amount for r in refunds], "verify_ok": result.ok,
        "formats": result.formats, "log_size": result.log_size,
        "demo_importable": __import__("importlib.util").util.find_spec("interlock_demo")
        is not None,
    }))
    """
)


def _description(wheel: Path) -> str:
    """The long description a package index shows for the wheel: its METADATA's body."""
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = z.read(name).decode()
    headers, body = metadata.split("\n\n", 1)
    assert "Description-Content-Type: text/markdown" in headers.splitlines()
    return body


def test_the_library_has_a_page_of_its_own_with_nothing_of_the_demo() -> None:
    """The library's README (its package page) is a file of its own, not the repository's,
    and names nothing of the demo: no demo app, presenter, modes, scenarios or columns."""
    page = LIBRARY / "README.md"
    assert page.is_file() and not page.is_symlink()
    text = page.read_text(encoding="utf-8")
    assert "## Quickstart" in text and "interlock.Gate(" in text
    assert DEMO_WORDS.findall(text) == []


def test_the_demo_words_are_caught() -> None:
    found = DEMO_WORDS.findall("run interlock-demo; the presenter; two modes; a scenario; column")
    assert len(found) == 5


def _run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    if not any(WHEELHOUSE.glob("stripe-*.whl")):
        reason = (
            f"no wheelhouse at {WHEELHOUSE}: run the README's test command, which fills it "
            "with `pip wheel -w .venv/wheelhouse ./packaging/interlock`"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return WHEELHOUSE


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_library_wheel_installs_alone_and_guards_a_refund(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """Built from the checkout with the standard tools, installed with no extras: stripe
    and psutil come along, no demo package does, and a guarded refund is sent once."""
    built = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "-w", tmp_path / "dist", LIBRARY, cwd=tmp_path,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("interlock-*.whl")
    assert _description(wheel) == (LIBRARY / "README.md").read_text(encoding="utf-8")

    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        python, "-m", "pip", "install", "--no-index", "--find-links", wheelhouse, wheel,
        cwd=tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr

    listed = _run(python, "-m", "pip", "list", "--format", "json", cwd=tmp_path)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"interlock", "stripe", "psutil", "cryptography"} <= names
    assert not names & DEMO_ONLY, names & DEMO_ONLY
    assert "mcp" not in names  # the `mcp` extra's, not the base install's

    script = tmp_path / "guarded.py"
    script.write_text(GUARDED_REFUND)
    ran = _run(python, script, tmp_path / "store.sqlite3", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {
        "first": "sent",
        "again": "sent",
        "same_refund": True,
        "refunds": [2_000],
        "verify_ok": True,
        "formats": {"ed25519": 1},
        "log_size": 1,
        "demo_importable": False,
    }
