"""`python -m interlock keygen DIR` as its own process: a key the written list trusts, the
key never printed, and a second run refusing to overwrite it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from interlock._core.signing import (
    ENV_SIGNING_KEY,
    ENV_VERIFY_KEYS,
    RECEIPT_TYPE,
    KeyList,
    SigningKey,
)

ROOT = Path(__file__).resolve().parents[2]


def _keygen(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_SIGNING_KEY, ENV_VERIFY_KEYS)}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "interlock", "keygen", str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )


def test_keygen_writes_a_key_its_list_trusts_and_prints_no_key(tmp_path: Path) -> None:
    """The key file is 0600 PEM, keys.json names its public key, a signature made with
    it passes the list's check, and the output gives the id, the paths and the env lines."""
    folder = tmp_path / "keys"
    done = _keygen(folder)
    assert done.returncode == 0, done.stderr
    key_path, list_path = folder / "signing-key.pem", folder / "keys.json"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    key, keys = SigningKey.load(key_path), KeyList.load(list_path)
    assert [e.key_id for e in keys.entries] == [key.key_id]
    body = b'{"action":"a1"}'
    assert keys.problem(key.key_id, 1.0, body, RECEIPT_TYPE, key.sign(body, RECEIPT_TYPE)) is None
    assert key.key_id in done.stdout
    assert f"export {ENV_SIGNING_KEY}={key_path}" in done.stdout
    assert f"export {ENV_VERIFY_KEYS}={list_path}" in done.stdout
    pem_body = "".join(key_path.read_text().splitlines()[1:-1])
    assert pem_body not in done.stdout + done.stderr and "PRIVATE" not in done.stdout


def test_a_second_keygen_refuses_to_overwrite_and_changes_nothing(tmp_path: Path) -> None:
    """Run again on the same folder: exit 2 with words, the key and the list as they were."""
    folder = tmp_path / "keys"
    assert _keygen(folder).returncode == 0
    key_before = (folder / "signing-key.pem").read_bytes()
    list_before = (folder / "keys.json").read_bytes()
    again = _keygen(folder)
    assert again.returncode == 2
    assert "already exists: a signing key is never overwritten" in again.stderr
    assert "nothing was changed" in again.stderr
    assert (folder / "signing-key.pem").read_bytes() == key_before
    assert (folder / "keys.json").read_bytes() == list_before


def test_keygen_adds_to_an_existing_list_and_refuses_a_broken_one(tmp_path: Path) -> None:
    """A folder holding only keys.json (a rotation) gets the new key added beside the old
    one; a broken keys.json stops keygen before any key is written."""
    old = SigningKey.generate()
    keys = KeyList()
    keys.add(old.public)
    folder = tmp_path / "rotated"
    folder.mkdir()
    keys.save(folder / "keys.json")
    assert _keygen(folder).returncode == 0
    new = SigningKey.load(folder / "signing-key.pem")
    assert [e.key_id for e in KeyList.load(folder / "keys.json").entries] == [
        old.key_id,
        new.key_id,
    ]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "keys.json").write_text("{not json")
    done = _keygen(broken)
    assert done.returncode == 2 and "is not JSON" in done.stderr
    assert not (broken / "signing-key.pem").exists()
