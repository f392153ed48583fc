"""`python -m interlock verify` as its own process: exit 0, 1 or 2, JSON, signatures (the
gate's public key list, and the secret of receipts written before the log), the
store named by argument, option or environment (never guessed), and the store it checks
left as it was (read-only, never written, no file beside it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.__main__ import ENV_STORE
from tests.unit.test_receipts_verify import (
    DEEP,
    EDITED_COLUMNS,
    HMAC_KEY,
    HUGE,
    KEYS,
    ROOT,
    _edit_id,
    _sends_on_one_payment,
    _store_with_receipts,
    _v4_store,
)


def _cli(
    *args: str,
    home: Path | None = None,
    keys: Path | None = None,
    secret: bytes | None = None,
    store: str | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """The command in its own process, with only the keys given here in its environment:
    `keys` as INTERLOCK_VERIFY_KEYS, `secret` (of format 1 receipts) as
    INTERLOCK_RECEIPT_KEY."""
    outside = ("INTERLOCK_RECEIPT_KEY", "INTERLOCK_VERIFY_KEYS", "INTERLOCK_SIGNING_KEY", ENV_STORE)
    env = {k: v for k, v in os.environ.items() if k not in outside}
    if home is not None:
        env["INTERLOCK_HOME"] = str(home)
    if keys is not None:
        env["INTERLOCK_VERIFY_KEYS"] = str(keys)
    if secret is not None:
        env["INTERLOCK_RECEIPT_KEY"] = secret.decode()
    if store is not None:
        env[ENV_STORE] = store
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


def _key_list(tmp_path: Path) -> Path:
    """The gate's public key list (KEYS) as a file, as `keygen` writes it."""
    path = tmp_path / "keys.json"
    KEYS.save(path)
    return path


def _holds(path: Path, n: int = 3) -> str:
    """What the command prints of a store of `n` unsigned receipts not yet in the log."""
    return (
        f"{path}: {n} receipts ({n} unsigned) hold\n"
        f"  log: 0 receipts under 0 signed tree heads, {n} not in the log yet\n"
    )


def test_cli_exits_0_on_intact_receipts(tmp_path: Path) -> None:
    """`python -m interlock verify STORE` exits 0 and says the receipts hold, and what of
    them is in the log."""
    path = tmp_path / "journal.sqlite3"
    _store_with_receipts(path)

    done = _cli("verify", str(path))

    assert done.returncode == 0, done.stderr
    assert done.stdout == _holds(path)


def test_cli_exits_1_on_a_tampered_receipt_and_prints_the_problem(tmp_path: Path) -> None:
    """An edited receipt makes the command exit 1 and print what is wrong."""
    path = tmp_path / "journal.sqlite3"
    receipts = _store_with_receipts(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE receipts SET body=replace(body, '\"amount\":2000', '\"amount\":200000')"
            " WHERE seq=2"
        )
    conn.close()

    done = _cli("verify", str(path))

    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{path}: 3 receipts (3 unsigned) are BROKEN",
        "  log: 0 receipts under 0 signed tree heads, 3 not in the log yet",
        f"  - receipt 2 ({receipts[1].action_id}): its body does not match its hash (edited)",
    ]


def test_cli_json_and_signatures(tmp_path: Path) -> None:
    """`--json` prints the result; signed receipts in the log verify with the key list
    from the environment or `--keys`, and not without one."""
    path = tmp_path / "journal.sqlite3"
    _sends_on_one_payment(path, 3)
    keys = _key_list(tmp_path)

    signed = _cli("verify", "--json", str(path), keys=keys)
    option = _cli("verify", "--json", "--keys", str(keys), str(path))
    keyless = _cli("verify", "--json", str(path))

    assert signed.returncode == 0, signed.stderr
    assert json.loads(signed.stdout) == {
        "ok": True,
        "chain_length": 3,
        "signed": True,
        "problems": [],
        "checked_refunds": 0,
        "formats": {"ed25519": 3},
        "log_size": 3,
        "unlogged": 0,
        "heads": 3,
        "anchored": 0,
    }
    assert option.returncode == 0 and option.stdout == signed.stdout, option.stderr
    assert keyless.returncode == 1
    problems = json.loads(keyless.stdout)["problems"]
    assert len(problems) == 6, problems  # each receipt and each head: no key list to check
    assert all("no key list was given" in p for p in problems), problems
    text = _cli("verify", str(path), keys=keys)
    assert text.stdout == (
        f"{path}: 3 receipts (3 signed with the gate's Ed25519 key) hold\n"
        "  log: 3 receipts under 3 signed tree heads\n"
    )


def test_cli_reads_a_store_written_before_the_log_with_its_secret(tmp_path: Path) -> None:
    """A version 4 store's HMAC-signed chain holds with INTERLOCK_RECEIPT_KEY, and is
    broken without it, or under another secret."""
    path = _v4_store(tmp_path)

    done = _cli("verify", str(path), secret=HMAC_KEY)
    keyless = _cli("verify", str(path))
    wrong = _cli("verify", str(path), secret=b"another key")

    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{path}: 4 receipts (4 HMAC-signed before the log, checkable only with the secret) "
        "hold\n  log: 0 receipts under 0 signed tree heads, 4 not in the log yet\n"
    )
    assert keyless.returncode == 1
    assert keyless.stdout.count("no INTERLOCK_RECEIPT_KEY was given") == 4
    assert wrong.returncode == 1 and wrong.stdout.count(": bad signature") == 4


def test_cli_takes_the_store_from_the_option_or_the_environment(tmp_path: Path) -> None:
    """`--store PATH` and `INTERLOCK_STORE` name the store as the argument does; the
    argument and the option together are bad usage."""
    path = tmp_path / "journal.sqlite3"
    _store_with_receipts(path)

    option = _cli("verify", "--store", str(path))
    env = _cli("verify", store=str(path))
    both = _cli("verify", str(path), "--store", str(path))

    assert option.returncode == 0, option.stderr
    assert env.returncode == 0, env.stderr
    assert option.stdout == env.stdout == _holds(path)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_cli_without_a_store_says_what_to_pass(tmp_path: Path) -> None:
    """No argument, no `--store`, no `INTERLOCK_STORE`: exit 2 naming all three, even with
    a store file in the working folder and under INTERLOCK_HOME (the library has no
    default folder to look in)."""
    _store_with_receipts(tmp_path / "interlock.sqlite3")
    _store_with_receipts(tmp_path / "demo" / "interlock.sqlite3")

    done = _cli("verify", home=tmp_path, cwd=tmp_path)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "name the store to check: python -m interlock verify PATH_OR_URL (or --store "
        "PATH_OR_URL, or set INTERLOCK_STORE); PATH is a SQLite file, URL a postgresql:// one\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["verify", "missing.sqlite3"], id="missing-store"),
        pytest.param(["verify", "not-a-store"], id="not-a-store"),
        pytest.param([], id="no-command"),
        pytest.param(["check"], id="unknown-command"),
        pytest.param(["verify", "--strict", "x"], id="unknown-option"),
    ],
)
def test_cli_exits_2_on_bad_usage(tmp_path: Path, args: list[str]) -> None:
    """A missing or unusable store path, or bad usage, exits 2 with a message on stderr."""
    (tmp_path / "not-a-store").write_bytes(b"plain text, not SQLite\n" * 100)
    args = [str(tmp_path / a) if a in ("missing.sqlite3", "not-a-store") else a for a in args]

    done = _cli(*args)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip()
    assert not (tmp_path / "missing.sqlite3").exists(), "verify must not create a store"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_never_writes_to_the_store_it_checks(tmp_path: Path) -> None:
    """`python -m interlock verify` opens read-only: the file is byte for byte the same."""
    path = tmp_path / "journal.sqlite3"
    _store_with_receipts(path)
    before = _sha(path)

    done = _cli("verify", str(path))

    assert done.returncode == 0, done.stderr
    assert _sha(path) == before


@pytest.mark.parametrize("damage", ["dropped-receipts", "empty-file", "other-sqlite"])
def test_cli_exits_2_for_a_file_that_is_not_an_interlock_store_and_leaves_it_alone(
    tmp_path: Path, damage: str
) -> None:
    """A dropped receipts table is not re-created, an empty file gets no schema: exit 2."""
    path = tmp_path / "journal.sqlite3"
    if damage == "empty-file":
        path.write_bytes(b"")
    elif damage == "other-sqlite":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.close()
    else:
        _store_with_receipts(path)
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE receipts")
        conn.close()
    before = _sha(path)

    done = _cli("verify", str(path))

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "not an interlock store" in done.stderr or "damaged" in done.stderr
    assert _sha(path) == before


def _read_only_store(tmp_path: Path) -> tuple[Path, Path]:
    """A store in a folder of its own, file and folder made read-only."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "journal.sqlite3"
    _store_with_receipts(path)
    path.chmod(0o444)
    folder.chmod(0o555)
    return folder, path


def test_cli_creates_no_file_beside_a_read_only_store(tmp_path: Path) -> None:
    """Checking a store in a read-only folder exits 0 and leaves the folder as it was: no
    `-wal`, no `-shm` (root ignores the modes, so the folder's listing is the witness)."""
    folder, path = _read_only_store(tmp_path)
    before = sorted(p.name for p in folder.iterdir())
    try:
        done = _cli("verify", str(path))
        after = sorted(p.name for p in folder.iterdir())
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    # The writers' lock file (`-writers`) is the store's own, left by the writes that made it.
    assert after == before and "journal.sqlite3" in before
    assert not {"journal.sqlite3-wal", "journal.sqlite3-shm"} & set(after)


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user may enter, outside pytest's own: pytest's base folder
    (/tmp/pytest-of-root) may be 0700, which no other user gets through. Removed after."""
    folder = Path(tempfile.mkdtemp(prefix="interlock-verify-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
def test_cli_verifies_for_a_user_who_may_only_read_the_store(open_folder: Path) -> None:
    """As `nobody`, who can read the store but write nothing beside it, verify still
    checks it (exit 0); before, SQLite's `-shm` could not be made and the check failed."""
    try:
        subprocess.run([sys.executable, "-c", "pass"], user=65534, check=True, timeout=60)
    except (PermissionError, subprocess.CalledProcessError):
        pytest.skip("user nobody cannot run this Python (its folders are private)")
    folder, path = _read_only_store(open_folder)
    before = sorted(p.name for p in folder.iterdir())
    try:
        done = subprocess.run(
            [sys.executable, "-m", "interlock", "verify", str(path)],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
            user=65534, group=65534, env={**os.environ, "HOME": str(open_folder)},
        )  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, (done.stdout, done.stderr)
    # The writers' lock file (`-writers`) is the store's own, left by the writes that made it.
    assert sorted(p.name for p in folder.iterdir()) == before
    assert not {"journal.sqlite3-wal", "journal.sqlite3-shm"} & set(before)


def test_cli_escapes_control_characters_from_the_store(tmp_path: Path) -> None:
    """An action id holding terminal escapes (written by hand into the file) cannot hide
    the BROKEN line: the text output carries no control character, only its escape."""
    path = tmp_path / "journal.sqlite3"
    _store_with_receipts(path)
    hide = "act\x1b[1A\x1b[2K\r\x1b[32mall good\x1b[0m"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE receipts SET action_id=? WHERE seq=1", (hide,))
    conn.close()

    done = _cli("verify", str(path))

    assert done.returncode == 1
    assert done.stdout.splitlines()[0].endswith(" are BROKEN")
    assert not any(c != "\n" and not c.isprintable() for c in done.stdout), done.stdout
    assert "\\x1b[1A" in done.stdout


@pytest.mark.parametrize("value", [DEEP, HUGE], ids=_edit_id)
def test_cli_reports_a_value_it_cannot_parse_in_any_column_as_damaged(
    tmp_path: Path, value: str
) -> None:
    """JSON nested a hundred thousand deep, or 50 MB, in every column verify reads of one
    action (its intent, claim and settlement, its journal data, its approval, its receipt):
    the command reports the store broken, naming it, with no traceback."""
    path = tmp_path / "journal.sqlite3"
    _, (_, intent, _) = _sends_on_one_payment(path, 3)
    conn = sqlite3.connect(path)
    with conn:
        for table, column, where in EDITED_COLUMNS:
            if column in ("intent", "claim", "settlement", "data", "lease", "body"):
                conn.execute(
                    f"UPDATE {table} SET {column}=:value WHERE {where}",
                    {"value": value, "action": intent.action_id, "lease": intent.lease_id},
                )
    conn.close()

    done = _cli("verify", str(path), keys=_key_list(tmp_path))

    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not done.stderr, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].endswith(" are BROKEN")
    assert intent.action_id in done.stdout
