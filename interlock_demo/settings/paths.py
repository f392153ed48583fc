"""Where a demo run keeps its state: `INTERLOCK_HOME` and the demo's folder in it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from interlock_demo.settings.private import create_private_journal, private_dir


@dataclass(frozen=True)
class Paths:
    """Where a demo run keeps its state: everything under `INTERLOCK_HOME/demo/`."""

    home: Path

    @property
    def demo(self) -> Path:
        """The demo's folder."""
        return self.home / "demo"

    @property
    def store(self) -> Path:
        """The journal (cases' approvals and interlock's actions and receipts)."""
        return self.demo / "interlock.sqlite3"

    @property
    def cases(self) -> Path:
        """Case files the workers read."""
        return self.demo / "cases"

    @property
    def approver_key(self) -> Path:
        """Support's private approval key: the engine grants with it; no worker reads it."""
        return self.demo / "support-approver.key"

    @property
    def approvers(self) -> Path:
        """The approvers' public keys (support's): what workers check approvals with."""
        return self.demo / "approvers.pem"

    @property
    def logs(self) -> Path:
        """Workers' stderr and other logs."""
        return self.demo / "logs"

    @property
    def screenshots(self) -> Path:
        """Screenshots the app saves."""
        return self.demo / "screenshots"

    def prepare(self) -> Paths:
        """Make the demo's folders (0700) and its journal file (0600) before a run uses them.

        The journal is created here, empty, so that SQLite, which gives its `-wal` and
        `-shm` files the database file's mode, makes them 0600 too. A `demo` folder left
        open by an older version is closed to other users here, once, in this one place.
        """
        private_dir(self.demo)
        if self.demo.stat().st_mode & 0o077:
            self.demo.chmod(0o700)
        for folder in (self.cases, self.logs):
            private_dir(folder)
        if not self.store.exists():
            create_private_journal(self.store)
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Paths:
        """`INTERLOCK_HOME`, default `.interlock/`."""
        env = os.environ if env is None else env
        return cls(Path(env.get("INTERLOCK_HOME") or ".interlock").absolute())
