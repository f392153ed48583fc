"""Files under `INTERLOCK_HOME` are the user's alone: folders 0700, files 0600.

They are made so when they are created (`private_dir`, `open_private`,
`create_private_journal`, `Paths.prepare`), and the processes the demo starts run with
`PRIVATE_UMASK`. The demo never changes its own umask, so what it saves elsewhere
(`screenshots --out`) keeps the user's.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO, Any

# What the demo's child processes create is theirs alone: files 0600, folders 0700.
PRIVATE_UMASK = 0o077


def create_private_journal(path: Path) -> None:
    """Create an empty 0600 journal at `path` unless one appeared meanwhile.

    SQLite gives its `-wal` and `-shm` files the database file's mode, so they are 0600
    too. The folder must exist (`private_dir`).

    Made under another name and linked into place, so that no descriptor on the journal
    itself is ever opened and closed here: closing one would drop every SQLite lock this
    process holds on it (POSIX locks belong to the process), and another engine in this
    process may be writing to it.
    """
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass
    finally:
        fresh.unlink()


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents as 0700 folders; existing ones are left alone.

    (`Path.mkdir(parents=True)` would give the parents the default mode.)
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return path


def open_private(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """Open a file under `INTERLOCK_HOME` for writing; created 0600 in a 0700 folder.

    `mode` is `open()`'s ("a", "ab", "w", "wb"); an existing file keeps its mode.
    """
    private_dir(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode, **kwargs)
