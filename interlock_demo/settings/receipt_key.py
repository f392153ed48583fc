"""The gate's receipt key, the public key list a verifier reads, and the receipt log's anchor.

Kept as support's approver key is (`approver.py`): the private key is made once under
`INTERLOCK_HOME`, 0600, and only the interlock column's worker is told where it is
(`worker_env`); the engine's `verify()` (the card, headless JSON, results) reads only the
public key list beside it. The gate anchors its receipt log's tree heads in a file of a
folder of its own (`Paths.anchor`), apart from the journal, so a writer of the journal
who re-signs a receipt and rebuilds the heads is still caught by what was anchored.

A mock run, which writes no files, signs with a key of this process and anchors in memory.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interlock import (
    Anchor,
    AnchoredHead,
    AnchorError,
    ConfigError,
    FileAnchor,
    KeyList,
    SigningKey,
    Store,
)
from interlock_demo.settings.approver import place_private, write_private
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.paths import Paths
from interlock_demo.settings.private import private_dir
from workers.protocol.case import anchor_path


def receipt_key(config: DemoConfig) -> SigningKey:
    """The gate's receipt key: made once under `INTERLOCK_HOME` (0600, its key list beside
    it) and read back after; a mock run's is this process's own."""
    if config.run_mode.in_process:
        return _mock_key()
    return paths_receipt_key(config.paths)


def paths_receipt_key(paths: Paths) -> SigningKey:
    """The receipt key under `paths` (see `receipt_key`), made there once with its key list.

    `ConfigError` when the key's path is a symbolic link or not a plain file: the demo
    reads only the key it made, never one a link points it to.
    """
    path = paths.signing_key
    if not path.exists() and not path.is_symlink():
        place_private(path, SigningKey.generate().save)
    _refuse_links(path)
    key = SigningKey.load(path)
    if not paths.verify_keys.exists() and not paths.verify_keys.is_symlink():
        keys = KeyList()
        keys.add(key.public)
        place_private(paths.verify_keys, lambda p: write_private(p, keys.to_text().encode()))
    return key


def prepare_receipt_signing(paths: Paths) -> None:
    """Before a worker that signs receipts starts: its key made (`paths_receipt_key`) and
    its anchor's folder (0700), which the worker only writes into."""
    paths_receipt_key(paths)
    private_dir(paths.anchor.parent)


def verify_keys(config: DemoConfig) -> KeyList:
    """The public keys `verify()` checks receipts with: the key list under `INTERLOCK_HOME`
    (made with the key, `paths_receipt_key`), or a mock run's key's."""
    if config.run_mode.in_process:
        keys = KeyList()
        keys.add(_mock_key().public)
        return keys
    paths = config.paths
    if not paths.verify_keys.exists():
        paths_receipt_key(paths)
    _refuse_links(paths.verify_keys)
    return KeyList.load(paths.verify_keys)


def receipt_anchors(config: DemoConfig, store: Store) -> tuple[Anchor, ...]:
    """Where the gate over `store` anchors its receipt log: the journal's own file in the
    folder of `Paths.anchor` (`anchor_path`; the folder made 0700 here), or a mock run's
    store's own anchor in memory."""
    if config.run_mode.in_process:
        with _MEMORY_LOCK:
            anchor = _MEMORY.get(store)
            if anchor is None:
                anchor = _MEMORY[store] = MemoryAnchor()
        return (anchor,)
    private_dir(config.paths.anchor.parent)
    return (FileAnchor(anchor_path(config.paths.demo, config.store_location)),)


class MemoryAnchor:
    """An anchor in this process's memory, for a mock run's in-memory store: it holds heads
    as a `FileAnchor` does (the same head again is a no-op; a contradicting or smaller one
    is refused), in nothing that outlives the run."""

    name = "the mock run's anchor (in memory)"

    def __init__(self) -> None:
        self._held: list[AnchoredHead] = []
        self._lock = threading.Lock()

    def publish(self, head: Any, leaves: Sequence[Any]) -> None:
        """Keep `head` with the leaves added since the previous head."""
        with self._lock:
            if any(h.head.body_text == head.body_text for h in self._held):
                return
            largest = max((h.head.size for h in self._held), default=0)
            if any(h.head.size == head.size for h in self._held) or head.size < largest:
                raise AnchorError(
                    f"{self.name} holds a head that contradicts the head of size {head.size}: "
                    "the log was rewritten after it was anchored"
                )
            self._held.append(AnchoredHead(head, tuple(leaves), time.time(), None, self.name))

    def heads(self) -> list[AnchoredHead]:
        """Every head held, in size order."""
        with self._lock:
            return sorted(self._held, key=lambda h: h.head.size)


_MEMORY: weakref.WeakKeyDictionary[Store, MemoryAnchor] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


@functools.cache
def _mock_key() -> SigningKey:
    return SigningKey.generate()


def _refuse_links(path: Path) -> None:
    if path.is_symlink() or not path.is_file():
        raise ConfigError(
            f"{path} is not a plain file (a symbolic link, or something else): the demo "
            "reads only the receipt key and key list it made there; move it away and the "
            "next run makes new ones"
        )
