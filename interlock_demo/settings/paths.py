"""Where a demo run keeps its state: `INTERLOCK_HOME` and the demo's folder in it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from interlock_demo.settings.private import create_private_journal, private_dir
from workers.protocol.case import anchor_path


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
    def signing_key(self) -> Path:
        """The gate's private receipt key (PEM): of the workers, only the interlock column's
        is told where it is (`INTERLOCK_SIGNING_KEY`); the engine's own gate (a
        re-approval) signs with it too; `verify()` never reads it."""
        return self.demo / "receipt-signing-key.pem"

    @property
    def verify_keys(self) -> Path:
        """The receipt key's public key list (keys.json's format): what `verify()` reads."""
        return self.demo / "receipt-keys.json"

    @property
    def anchor(self) -> Path:
        """Where the gate anchors its receipt log's tree heads: a folder apart from the
        journal's (`workers.protocol.case.anchor_path`, which the worker reads too)."""
        return anchor_path(self.demo)

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
        for folder in (self.cases, self.logs, self.anchor.parent):
            private_dir(folder)
        if not self.store.exists():
            create_private_journal(self.store)
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Paths:
        """`INTERLOCK_HOME`, default `.interlock/`."""
        env = os.environ if env is None else env
        return cls(Path(env.get("INTERLOCK_HOME") or ".interlock").absolute())
