"""Receipts: the gate's signed record of what it checked and what it decided.

A receipt's body is canonical JSON (sorted keys, no spaces) holding every field. Format 2,
written now: the body names the gate's Ed25519 key (`key_id`) and the signature is over
the body (as a COSE_Sign1 signature, `interlock._core.signing`), so anyone with the public
key checks it and no one without the private key forges one. Its hash is the body's RFC
9162 leaf hash: the receipt log (`interlock._core.log`) numbers it after its commit and
signs tree heads over it, which anchors keep outside the store. A gate without a key
writes `"signed": false`.

Format 1, written before the log, is still read: each body held its sequence number and
the previous receipt's hash (SHA-256 of the body text), chained, and with
`INTERLOCK_RECEIPT_KEY` the hash was signed with HMAC-SHA256, which only the secret's
holder can check (and forge). A receipt is the gate's statement, not proof: Stripe's
refund list is the evidence.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any

from interlock._core.merkle import leaf_hash
from interlock._core.signing import ENV_VERIFY_KEYS, RECEIPT_TYPE

if TYPE_CHECKING:
    from interlock._core.signing import KeyList, SigningKey

RECEIPT_VERSION = 2
CHAINED_VERSION = 1
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
    leaf: int | None = field(default=None, compare=False)
    """Its place in the receipt log, as a store's `receipts()` reads it (None: not in the
    log yet, or read where the place is not given)."""

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


def seal(seq: int, fields: Mapping[str, Any], key: SigningKey | None) -> Receipt:
    """The receipt with id `seq` of these fields, signed with `key` (None: unsigned)."""
    body = dict(fields)
    body.update({"v": RECEIPT_VERSION, "signed": key is not None, "key_id": key and key.key_id})
    text = canonical_json(body)
    payload = text.encode()
    signature = None if key is None else key.sign(payload, RECEIPT_TYPE)
    return Receipt(seq, str(fields["action_id"]), text, "", leaf_hash(payload).hex(), signature)


def seal_chained(
    seq: int, prev_hash: str, fields: Mapping[str, Any], key: bytes | None
) -> tuple[str, str, str | None]:
    """Body text, hash and HMAC of a format 1 receipt at `seq` following `prev_hash`: how
    stores before the log were written (tests build such stores with it)."""
    body = dict(fields)
    body.update(
        {"v": CHAINED_VERSION, "seq": seq, "prev_hash": prev_hash, "signed": key is not None}
    )
    text = canonical_json(body)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return text, digest, (sign(key, digest) if key is not None else None)


def chain_problems(
    receipts: Iterable[Receipt], keys: KeyList | None = None, hmac_key: bytes | None = None
) -> list[str]:
    """Every problem of the receipts themselves: hashes, signatures, and the order and gaps
    of the chained receipts written before the log. A body that cannot be parsed is a
    problem, never a crash. With `keys`, an unsigned format 2 receipt is a downgrade; with
    `hmac_key`, an unsigned format 1 receipt is."""
    return ReceiptCheck(keys, hmac_key).feed_all(receipts)


class ReceiptCheck:
    """The receipts' check, one receipt at a time in id order, so a large store is never
    loaded whole. Format 1 receipts come first (a store's receipts before its migration)
    and are checked as the chain they are; format 2 receipts each on their own (their
    order is the log's, checked by `interlock._core.log`)."""

    def __init__(self, keys: KeyList | None, hmac_key: bytes | None, *, vouched: int = 0) -> None:
        self.keys = keys
        self.key = hmac_key
        # Receipts at log places below this are under a head whose signature verified and
        # whose root the log check recomputed from them: their own signatures are not
        # checked (`verify(signatures="heads")`).
        self.vouched = vouched
        self.skipped = 0
        self.problems: list[str] = []
        self.length = 0
        self.all_signed = True
        # How many receipts of each kind: `ed25519`, `hmac` (format 1), `unsigned`.
        self.formats: dict[str, int] = {}
        self._chained = 0
        self._prev = GENESIS_HASH
        self._logged = False

    def feed_all(self, receipts: Iterable[Receipt]) -> list[str]:
        """Check each receipt in order; returns the problems found so far."""
        for r in receipts:
            self.feed(r)
        return self.problems

    def feed(self, r: Receipt) -> dict[str, Any] | None:
        """Check the next receipt; returns its parsed body, or None if it has none."""
        self.length += 1
        where = f"receipt {r.seq} ({r.action_id})"
        try:
            body = load_json(r.body_text)
        except (ValueError, TypeError):
            body = None
        # A body that cannot be read is checked by its row: only format 1 has a previous hash.
        chained = body.get("v") == CHAINED_VERSION if isinstance(body, dict) else bool(r.prev_hash)
        if chained and isinstance(body, dict):
            self._feed_chained(r, body, where)
        else:
            self._feed_signed(r, body, where)
        if not isinstance(body, dict):
            self.problems.append(f"{where}: its body is not a JSON object")
            self.all_signed = False
            return None
        if body.get("action_id") != r.action_id:
            self.problems.append(f"{where}: its action column does not match its body")
        return body

    def _count(self, kind: str) -> None:
        self.formats[kind] = self.formats.get(kind, 0) + 1
        self.all_signed = self.all_signed and kind != "unsigned"

    def _feed_signed(self, r: Receipt, body: Any, where: str) -> None:
        self._logged = True
        payload = str(r.body_text).encode()
        if leaf_hash(payload).hex() != r.hash:
            self.problems.append(f"{where}: its body does not match its hash (edited)")
        if not isinstance(body, dict):
            return
        if r.prev_hash != "":
            self.problems.append(
                f"{where}: its stored previous hash is not its body's (format 2 has none)"
            )
        if body.get("signed") is True:
            self._count("ed25519")
            if self.keys is None:
                self.problems.append(
                    f"{where}: signed by key {body.get('key_id')}, but no key list was given "
                    f"to check it (set {ENV_VERIFY_KEYS} or pass keys=)"
                )
                return
            if r.leaf is not None and r.leaf < self.vouched:
                self.skipped += 1
                return
            at = body.get("at")
            problem = self.keys.problem(
                body.get("key_id") if isinstance(body.get("key_id"), str) else None,
                float(at) if isinstance(at, (int, float)) else 0.0,
                payload,
                RECEIPT_TYPE,
                r.signature if isinstance(r.signature, str) else None,
            )
            if problem is not None:
                self.problems.append(f"{where}: {problem}")
            return
        self._count("unsigned")
        if r.signature is not None:
            self.problems.append(f"{where}: says unsigned but carries a signature")
        if self.keys is not None:
            self.problems.append(
                f"{where}: unsigned, but receipts are signed with the gate's key: a "
                "downgrade (written by someone who holds no key)"
            )

    def _feed_chained(self, r: Receipt, body: dict[str, Any], where: str) -> None:
        problems = self.problems
        if self._logged:
            problems.append(
                f"{where}: a chained receipt (format 1) after the log began: no gate of "
                "this version writes one (inserted by a store writer)"
            )
        self._chained += 1
        expected_seq = self._chained
        digest = hashlib.sha256(str(r.body_text).encode()).hexdigest()
        if digest != r.hash:
            problems.append(f"{where}: its body does not match its hash (edited)")
        if r.seq != expected_seq or body.get("seq") != r.seq:
            problems.append(f"{where}: out of order or a gap: expected receipt {expected_seq} here")
        if body.get("prev_hash") != self._prev or r.prev_hash != self._prev:
            problems.append(
                f"{where}: does not follow the receipt before it (reordered or dropped)"
            )
        signed = body.get("signed") is True
        self._count("hmac" if signed else "unsigned")
        if signed:
            if self.key is None:
                problems.append(
                    f"{where}: HMAC-signed (written before signed receipts), but no "
                    f"{ENV_RECEIPT_KEY} was given to check the signature"
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
