"""Support's approver: the key that signs every approval the demo grants."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

from interlock import Approver
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.paths import Paths
from interlock_demo.settings.private import open_private, private_dir

SUPPORT = "support"
"""The demo's approver: the name its signed approvals are granted in."""


def support_approver(config: DemoConfig) -> Approver:
    """Support's approver, whose key signs every approval the demo grants.

    Made once under `INTERLOCK_HOME` (the private key 0600, its public key beside it for
    the workers, `worker_env`) and read back after; never shown, never given to a worker.
    A mock run, which writes no files, signs with a key of this process instead.
    """
    if config.run_mode.in_process:
        return _mock_support()
    return paths_support_approver(config.paths)


def paths_support_approver(paths: Paths) -> Approver:
    """Support's approver under `paths` (see `support_approver`), made there once."""
    if not paths.approver_key.exists():
        fresh = Approver.generate(SUPPORT)
        place_private(paths.approver_key, fresh.save)
    approver = Approver.load(SUPPORT, paths.approver_key)
    if not paths.approvers.exists():
        place_private(paths.approvers, lambda path: write_private(path, approver.public_pem()))
    return approver


@functools.cache
def _mock_support() -> Approver:
    return Approver.generate(SUPPORT)


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to a new 0600 file at `path`."""
    with open_private(path, "wb") as f:
        f.write(data)


def place_private(path: Path, write: Callable[[Path], object]) -> None:
    """Write a new private file whole under another name, then link it into place unless
    another engine placed one first (so no reader ever sees half a key). A link already
    at `path` is left as it is (`os.link` never follows it): the reader refuses it."""
    private_dir(path.parent)
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    write(fresh)
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass
    finally:
        fresh.unlink()
