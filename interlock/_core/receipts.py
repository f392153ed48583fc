"""Receipts: a hash-chained record of what the gate checked and what it decided.

Each receipt's body is canonical JSON (sorted keys, no spaces) holding every field,
including its sequence number and the previous receipt's hash; the hash is SHA-256 of
that text, so an edited, reordered or dropped-from-the-middle receipt breaks the chain.
With `INTERLOCK_RECEIPT_KEY` set the hash is also signed with HMAC-SHA256; without it the
receipt says `"signed": false`. A receipt is the gate's record, not proof: Stripe's refund
list is the evidence, and a truncated tail is only caught if the head is kept elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from json.scanner import make_scanner
from typing import Any

RECEIPT_VERSION = 1
GENESIS_HASH = "0" * 64
ENV_RECEIPT_KEY = "INTERLOCK_RECEIPT_KEY"


@dataclass(frozen=True)
class Check:
    """One check the gate made: what it expected, what it saw, whether it passed."""

    name: str
    expected: Any
    observed: Any
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON-ready data."""
        return {
            "name": self.name,
            "expected": self.expected,
            "observed": self.observed,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class Receipt:
    """A stored receipt: its canonical body text, hash and optional signature."""

    seq: int
    action_id: str
    body_text: str
    prev_hash: str
    hash: str
    signature: str | None

    @property
    def body(self) -> dict[str, Any]:
        """The parsed body."""
        data: dict[str, Any] = load_json(self.body_text)
        return data

    @property
    def outcome(self) -> str:
        """`sent`, `adopted`, `refused` or `failed`."""
        return str(self.body["outcome"])

    @property
    def checks(self) -> list[dict[str, Any]]:
        """Each check as recorded."""
        return list(self.body["checks"])

    @property
    def signed(self) -> bool:
        """Whether the receipt was signed with a receipt key."""
        return bool(self.body.get("signed"))

    def to_dict(self) -> dict[str, Any]:
        """The receipt as JSON-ready data (body parsed)."""
        return {
            "seq": self.seq,
            "hash": self.hash,
            "prev_hash": self.prev_hash,
            "signature": self.signature,
            **self.body,
        }


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no spaces: one text for one value."""
    return _CANONICAL.encode(data)


# The decoder is the scanner's context (typeshed types the argument as the scanner itself).
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def load_json(text: Any) -> Any:
    """`json.loads`, a quarter faster on the texts the store writes (`verify()` reads about
    ten per action). The C scanner reads a value straight from the first character; text with
    whitespace around it, or that fails, goes through `json.loads` for its exact answer or
    error. Text nested deeper than the parser's recursion limit (`[` a hundred thousand
    times) is a `ValueError` like any other text that is not JSON, never a RecursionError:
    every reader of a stored value catches the one and would be stopped by the other."""
    try:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError, TypeError):
            return json.loads(text)
        return value if end == len(text) else json.loads(text)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply to read") from None


def receipt_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """The HMAC key from `INTERLOCK_RECEIPT_KEY`, or None for unsigned receipts."""
    env = os.environ if env is None else env
    raw = env.get(ENV_RECEIPT_KEY, "")
    return raw.encode() if raw else None


def sign(key: bytes, digest: str) -> str:
    """HMAC-SHA256 of a receipt hash."""
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def seal(
    seq: int, prev_hash: str, fields: Mapping[str, Any], key: bytes | None
) -> tuple[str, str, str | None]:
    """Body text, hash and signature for the receipt at `seq` following `prev_hash`."""
    body = dict(fields)
    body.update(
        {"v": RECEIPT_VERSION, "seq": seq, "prev_hash": prev_hash, "signed": key is not None}
    )
    text = canonical_json(body)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return text, digest, (sign(key, digest) if key is not None else None)


def chain_problems(receipts: Iterable[Receipt], key: bytes | None) -> list[str]:
    """Every break in the chain: hashes, order, gaps and signatures.

    With a `key`, every receipt must carry a valid signature: one marked unsigned is a
    downgrade. A body that cannot be parsed is a problem, never a crash.
    """
    return ChainCheck(key).feed_all(receipts)


class ChainCheck:
    """The chain check, one receipt at a time, so a large store is never loaded whole."""

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.problems: list[str] = []
        self.length = 0
        self.all_signed = True
        self._prev = GENESIS_HASH

    def feed_all(self, receipts: Iterable[Receipt]) -> list[str]:
        """Check each receipt in order; returns the problems found so far."""
        for r in receipts:
            self.feed(r)
        return self.problems

    def feed(self, r: Receipt) -> dict[str, Any] | None:
        """Check the next receipt; returns its parsed body, or None if it has none."""
        self.length += 1
        expected_seq = self.length
        problems = self.problems
        where = f"receipt {r.seq} ({r.action_id})"
        digest = hashlib.sha256(str(r.body_text).encode()).hexdigest()
        if digest != r.hash:
            problems.append(f"{where}: its body does not match its hash (edited)")
        try:
            body = load_json(r.body_text)
        except (ValueError, TypeError):
            body = None
        if not isinstance(body, dict):
            problems.append(f"{where}: its body is not a JSON object")
            self.all_signed = False
            self._prev = r.hash
            return None
        if r.seq != expected_seq or body.get("seq") != r.seq:
            problems.append(f"{where}: out of order or a gap: expected receipt {expected_seq} here")
        if body.get("prev_hash") != self._prev or r.prev_hash != self._prev:
            problems.append(
                f"{where}: does not follow the receipt before it (reordered or dropped)"
            )
        if body.get("action_id") != r.action_id:
            problems.append(f"{where}: its action column does not match its body")
        signed = body.get("signed") is True
        self.all_signed = self.all_signed and signed
        if signed:
            if self.key is None:
                problems.append(
                    f"{where}: signed, but no {ENV_RECEIPT_KEY} was given to check the signature"
                )
            elif not isinstance(r.signature, str) or not hmac.compare_digest(
                sign(self.key, str(r.hash)), r.signature
            ):
                problems.append(f"{where}: bad signature")
        else:
            if r.signature is not None:
                problems.append(f"{where}: says unsigned but carries a signature")
            if self.key is not None:
                problems.append(
                    f"{where}: unsigned, but receipts are signed with {ENV_RECEIPT_KEY}: "
                    "a downgrade (re-sealed without the key)"
                )
        self._prev = r.hash
        return body
