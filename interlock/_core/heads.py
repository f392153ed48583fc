"""Signed tree heads and log leaves: what the receipt log states, and what an anchor keeps.

A tree head says "the log holds `size` receipts whose RFC 9162 Merkle root is `root`", at
a time, signed by the gate's key. Its body is canonical JSON; its hash (SHA-256 of that
text) is what an anchor or a Stripe send's metadata carries. A leaf is one receipt's place
in the log: its index (from 0), its action, and its RFC 9162 leaf hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

HEAD_VERSION = 1
HEAD_KIND = "interlock tree head"


@dataclass(frozen=True)
class LogLeaf:
    """One receipt's place in the log."""

    index: int
    action_id: str
    leaf_hash: str

    def to_dict(self) -> dict[str, Any]:
        """The leaf as JSON-ready data."""
        return {"index": self.index, "action_id": self.action_id, "leaf_hash": self.leaf_hash}


@dataclass(frozen=True)
class TreeHead:
    """A tree head: its canonical body text and the signature over it (None: unsigned)."""

    size: int
    root: str
    at: float
    key_id: str | None
    body_text: str
    signature: str | None

    @property
    def hash(self) -> str:
        """SHA-256 of the body text, hex: what anchors and send metadata carry."""
        return hashlib.sha256(self.body_text.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The head as JSON-ready data (its body is the signed part)."""
        return {"body": self.body_text, "signature": self.signature}


def head_body(size: int, root: str, at: float, key_id: str | None) -> str:
    """The canonical body of a tree head."""
    body = {"v": HEAD_VERSION, "kind": HEAD_KIND, "size": size, "root": root, "at": at}
    body["key_id"] = key_id
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def parse_head(body_text: str, signature: str | None) -> TreeHead:
    """A tree head from its stored body and signature; `ValueError` saying what is wrong."""
    try:
        body = json.loads(body_text)
    except (ValueError, RecursionError):
        # Nested past the parser's limit is as unreadable as any other text that is not
        # JSON: a reader of the store reports it, never stops on it.
        raise ValueError("its body is not JSON") from None
    if not isinstance(body, dict) or body.get("kind") != HEAD_KIND:
        raise ValueError("its body is not an interlock tree head")
    size, root, at, key_id = body.get("size"), body.get("root"), body.get("at"), body.get("key_id")
    if (
        not isinstance(size, int)
        or size < 0
        or not isinstance(root, str)
        or len(root) != 64
        or not isinstance(at, (int, float))
        or not (key_id is None or isinstance(key_id, str))
    ):
        raise ValueError("its body lacks a size, a root, a time or a key id")
    return TreeHead(size, root, float(at), key_id, body_text, signature)
