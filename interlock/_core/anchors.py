"""Anchors: signed tree heads kept outside the store, where a store writer cannot undo them.

A store writer can drop the last receipts or rebuild the log after an edit; what it cannot
do is reach into a place it cannot write. An anchor is such a place: each tree head the
log produces (with the leaves added since the previous one) is published to it, and a
later `verify` compares the store's heads with the anchor's, naming any receipt dropped or
altered after it was anchored. Three kinds:

- `FileAnchor`: an append-only JSON-lines file, on storage the store's writers cannot
  write (another disk, another account, a mounted bucket);
- `HttpWitness`: a witness service that keeps the heads it is sent;
- `TimestampAnchor`: an RFC 3161 timestamp authority signs each head's hash, proving the
  head existed at the authority's time, which no store writer can back-date.

Every anchor keeps the same rules: publishing the same head again changes nothing (a
publisher killed before it marked a head published simply publishes it again); a head
that contradicts one it holds (same size, another root) or that is smaller than the
largest it holds is refused, since a log never shrinks; and a write torn by a crash never
leaves it unreadable (a partial last record is ignored). An anchor stores what it is
given: checking a head's signature is `verify`'s work, not the anchor's.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import errno
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

try:
    import fcntl
except ImportError:  # Windows: FileAnchor says, when made, that it needs a POSIX system
    fcntl = None  # type: ignore[assignment]

from interlock._core.errors import InterlockError
from interlock._core.heads import LogLeaf, TreeHead, parse_head

if TYPE_CHECKING:
    from rfc3161_client import Verifier

RECORD_VERSION = 1
# Hosts a witness may be reached at over plain http: only this machine, where no one on
# the network path can answer in its place.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class AnchorError(InterlockError):
    """An anchor refused a head, or cannot be reached or read; the message says what to do."""


@dataclass(frozen=True)
class AnchoredHead:
    """A tree head as an anchor holds it.

    `leaves` are the leaves added since the previous anchored head, so a later check can
    name which receipt was dropped or altered; `anchored_at` is when the anchor took it
    (for a timestamp authority, the authority's time); `evidence` is what the anchor
    adds of its own (the base64 RFC 3161 token), None for the others; `where` names the
    anchor in words.
    """

    head: TreeHead
    leaves: tuple[LogLeaf, ...]
    anchored_at: float
    evidence: str | None
    where: str


@runtime_checkable
class Anchor(Protocol):
    """A place outside the store that keeps the log's tree heads.

    `publish` is idempotent (the same head again is a no-op) and raises `AnchorError` for
    a head that contradicts one it holds or is smaller than its largest; `heads` returns
    what it holds in size order, ignoring a record torn by a crash.
    """

    name: str

    def publish(self, head: TreeHead, leaves: Sequence[LogLeaf]) -> None:
        """Keep `head` with the leaves added since the previous head."""
        ...

    def heads(self) -> list[AnchoredHead]:
        """Every head held, in size order."""
        ...


def record(
    head: TreeHead, leaves: Sequence[LogLeaf], anchored_at: float, evidence: str | None
) -> dict[str, Any]:
    """An anchored head as JSON-ready data: the form a file keeps and a witness is sent."""
    return {
        "v": RECORD_VERSION,
        "head": head.to_dict(),
        "leaves": [leaf.to_dict() for leaf in leaves],
        "anchored_at": anchored_at,
        "evidence": evidence,
    }


def parse_record(data: object, where: str) -> AnchoredHead:
    """An anchored head from `record`'s data; `ValueError` saying what is wrong."""
    if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
        raise ValueError(f"it is not a version {RECORD_VERSION} anchored head record")
    head_data, leaves_data = data.get("head"), data.get("leaves")
    anchored_at, evidence = data.get("anchored_at"), data.get("evidence")
    if not isinstance(head_data, dict) or not isinstance(leaves_data, list):
        raise ValueError("it lacks a head or its leaves")
    body, signature = head_data.get("body"), head_data.get("signature")
    if not isinstance(body, str) or not (signature is None or isinstance(signature, str)):
        raise ValueError("its head lacks a body")
    head = parse_head(body, signature)
    leaves = []
    for leaf in leaves_data:
        if not isinstance(leaf, dict):
            raise ValueError("a leaf is not an object")
        index, action_id, leaf_hash = (
            leaf.get("index"),
            leaf.get("action_id"),
            leaf.get("leaf_hash"),
        )
        if (
            not isinstance(index, int)
            or not isinstance(action_id, str)
            or not isinstance(leaf_hash, str)
        ):
            raise ValueError("a leaf lacks its index, action id or leaf hash")
        leaves.append(LogLeaf(index, action_id, leaf_hash))
    if isinstance(anchored_at, bool) or not isinstance(anchored_at, (int, float)):
        raise ValueError("it lacks the time it was anchored")
    if not (evidence is None or isinstance(evidence, str)):
        raise ValueError("its evidence is not text")
    return AnchoredHead(head, tuple(leaves), float(anchored_at), evidence, where)


def admit(held: Sequence[AnchoredHead], head: TreeHead, where: str) -> bool:
    """Whether `head` is new to an anchor holding `held`: False if it holds the same head
    (publishing again is a no-op), True if it may be added; `AnchorError` if it
    contradicts one held (same size, another root) or is smaller than the largest held."""
    if any(h.head.body_text == head.body_text for h in held):
        return False
    for h in held:
        if h.head.size == head.size and h.head.root != head.root:
            raise AnchorError(
                f"{where} already holds a different head of size {head.size} "
                f"(root {h.head.root}, this one {head.root}): the log was rewritten after it "
                "was anchored; keep the anchor as it is and run verify --anchor to see which "
                "receipts changed"
            )
    largest = max((h.head.size for h in held), default=0)
    if head.size < largest:
        raise AnchorError(
            f"{where} holds a head of size {largest}, larger than this head of size "
            f"{head.size}: a log never shrinks, so receipts were dropped after the larger head "
            "was anchored; run verify --anchor to see which"
        )
    return True


def _by_size(held: list[AnchoredHead]) -> list[AnchoredHead]:
    return sorted(held, key=lambda h: (h.head.size, h.anchored_at))


class FileAnchor:
    """Heads kept in an append-only JSON-lines file, one record per head.

    Put the file where the store's writers cannot write (another disk, another account, a
    bucket mounted read-write only for the publisher): an anchor on storage a store
    writer can rewrite bounds nothing. Each record is written with one `write` and an
    `fsync`; the file is created with mode 0600 and a symbolic link is refused. A record
    torn by a crash is ignored when read and cut off by the next publish.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = f"file {self.path}"
        if fcntl is None or not hasattr(os, "O_NOFOLLOW"):
            raise AnchorError(
                f"{self.name}: a file anchor needs a POSIX system (file locks and O_NOFOLLOW); "
                "on this one use an HttpWitness"
            )

    def publish(self, head: TreeHead, leaves: Sequence[LogLeaf]) -> None:
        """Append `head` with `leaves` unless this file holds it already."""
        self._append(head, leaves, time.time(), None)

    def heads(self) -> list[AnchoredHead]:
        """Every head in the file, in size order; a torn last record is left out."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise self._unusable(e) from None
        try:
            return self._read(fd)[0]
        finally:
            os.close(fd)

    def _append(
        self, head: TreeHead, leaves: Sequence[LogLeaf], anchored_at: float, evidence: str | None
    ) -> bool:
        """Append one record unless the file holds `head`; whether it was appended."""
        existed = self.path.exists() or self.path.is_symlink()
        try:
            fd = os.open(
                self.path,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as e:
            raise self._unusable(e) from None
        try:
            if not existed:
                self._sync_directory()
            # One publisher at a time, so the check of what is held and the append agree.
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, complete = self._read(fd)
            if not admit(held, head, self.name):
                return False
            if os.fstat(fd).st_size > complete:
                # A record torn by a crash: cut it off so the next one starts on its own line.
                os.ftruncate(fd, complete)
            line = json.dumps(record(head, leaves, anchored_at, evidence), sort_keys=True)
            data = (line + "\n").encode()
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "the storage took only part of the record")
                os.fsync(fd)
            except OSError as e:
                raise AnchorError(
                    f"{self.name}: the head of size {head.size} could not be written "
                    f"({e.strerror}); it is not anchored: fix the storage (space, permissions) "
                    "and publish again, which cuts off any part written"
                ) from None
            return True
        finally:
            os.close(fd)

    def _read(self, fd: int) -> tuple[list[AnchoredHead], int]:
        """The records in the file and the length of its complete lines."""
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        complete = data.rfind(b"\n") + 1
        held = []
        # Split on newlines alone: JSON escapes every other line break inside a record.
        for number, line in enumerate(data[:complete].split(b"\n")[:-1], start=1):
            try:
                held.append(parse_record(json.loads(line), self.name))
            except ValueError as e:
                raise AnchorError(
                    f"{self.name}: line {number} is not an anchored head ({e}): the file was "
                    "damaged or edited; restore it from a copy, since the heads it holds are "
                    "the evidence"
                ) from None
        return _by_size(held), complete

    def _sync_directory(self) -> None:
        # A new file's name is durable only once its directory is.
        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _unusable(self, error: OSError) -> AnchorError:
        if self.path.is_symlink():
            return AnchorError(
                f"{self.name} is a symbolic link: an anchor file must be a plain file, so no "
                "one can point it elsewhere; give the file's real path"
            )
        return AnchorError(
            f"{self.name} cannot be opened ({error.strerror}): check that its folder exists "
            "and this process may write it"
        )


def _parse_url(url: str, what: str, *, plain_http_anywhere: bool) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AnchorError(f"{what} {url!r} is not an http(s) URL: give one like https://host/path")
    if parts.scheme == "http" and not plain_http_anywhere and parts.hostname not in LOOPBACK_HOSTS:
        raise AnchorError(
            f"{what} {url!r} uses plain http to another host: over http anyone on the path "
            "can answer in the witness's place; use https (or http only on 127.0.0.1)"
        )
    return url.rstrip("/")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect could lead from https to plain http elsewhere: an answer is the one asked.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context or ssl.create_default_context()),
        _NoRedirect(),
    )


class HttpWitness:
    """A witness service: POST `{url}/heads` keeps a head, GET `{url}/heads` returns all.

    The body sent is `{"head": {"body", "signature"}, "leaves": [...]}`; the witness
    answers 409 when a head contradicts one it holds (its words become the
    `AnchorError`), and GET answers `{"heads": [record, ...]}`. https is verified (pass
    `ssl_context` for a private CA); plain http is allowed only to this machine.
    """

    def __init__(
        self, url: str, *, timeout_s: float = 5.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.url = _parse_url(url, "witness", plain_http_anywhere=False)
        self.name = f"witness {self.url}"
        self.timeout_s = timeout_s
        self._opener = _opener(ssl_context)

    def publish(self, head: TreeHead, leaves: Sequence[LogLeaf]) -> None:
        """Send `head` with `leaves` to the witness."""
        body = json.dumps(
            {"head": head.to_dict(), "leaves": [leaf.to_dict() for leaf in leaves]}
        ).encode()
        request = urllib.request.Request(
            f"{self.url}/heads",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        self._call(request, "publish the head")

    def heads(self) -> list[AnchoredHead]:
        """Every head the witness holds, in size order."""
        answer = self._call(urllib.request.Request(f"{self.url}/heads"), "read the heads")
        try:
            records = json.loads(answer)["heads"]
            return _by_size([parse_record(r, self.name) for r in records])
        except (ValueError, KeyError, TypeError) as e:
            raise AnchorError(
                f"{self.name} answered heads that cannot be read ({e}): check the URL is a "
                "witness's"
            ) from None

    def _call(self, request: urllib.request.Request, doing: str) -> bytes:
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as e:
            words = _words(e.read())
            if e.code == 409:
                raise AnchorError(f"{self.name} refused the head: {words}") from None
            raise AnchorError(
                f"{self.name} could not {doing} (HTTP {e.code}: {words}); the head is not "
                "anchored there: publish it again later"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise AnchorError(
                f"{self.name} could not be reached to {doing} ({reason}); if it was a publish, "
                "publish again (the same head again changes nothing)"
            ) from None


def _words(body: bytes) -> str:
    """A refusal's words: the `error` of a JSON answer, else its text."""
    text = body.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, str):
            return error
    return text[:500] or "no reason given"


# A TimeStampResp around a stored token: status granted (SEQUENCE { INTEGER 0 }), so the
# client's verifier, which reads responses, can read a token kept on its own.
_GRANTED = bytes.fromhex("3003020100")


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


class TimestampAnchor:
    """Heads timestamped by an RFC 3161 timestamp authority, kept in `directory/heads.jsonl`.

    For each head the authority signs a token over SHA-256 of the head's body (its
    `hash`), checked against `certificates` (PEM: the authority's root, and any chain)
    and the request's nonce before the head is kept; `heads` checks every stored token
    again. The token proves the head existed at the authority's time, which a store
    writer cannot back-date. Plain http to the authority is allowed: the token is signed,
    so the path cannot forge it. Needs `rfc3161-client` (`pip install 'interlock[timestamp]'`).
    """

    def __init__(
        self,
        url: str | None,
        directory: str | os.PathLike[str],
        *,
        certificates: bytes,
        timeout_s: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`url` None: only read what `directory` keeps (`verify --anchor`), publish nothing."""
        self.url = (
            None
            if url is None
            else _parse_url(url, "timestamp authority", plain_http_anywhere=True)
        )
        self.name = f"timestamp authority {self.url or Path(directory)}"
        self.timeout_s = timeout_s
        self._file = FileAnchor(Path(directory) / "heads.jsonl")
        self._opener = _opener(ssl_context)
        try:
            import rfc3161_client
            from cryptography import x509
        except ImportError:
            raise AnchorError(
                "TimestampAnchor needs the rfc3161-client package: "
                "pip install 'interlock[timestamp]'"
            ) from None
        self._client = rfc3161_client
        try:
            self._trusted = x509.load_pem_x509_certificates(certificates)
        except ValueError:
            raise AnchorError(
                f"{self.name}: the certificates given are not PEM certificates: give the "
                "authority's root certificate (and its chain) in PEM"
            ) from None

    def publish(self, head: TreeHead, leaves: Sequence[LogLeaf]) -> None:
        """Have the authority timestamp `head`, check the token, and keep it with `leaves`."""
        rc = self._client
        if self.url is None:
            raise AnchorError(
                f"{self.name} was opened to read only (no authority's URL): give the URL to "
                "publish heads"
            )
        # Checked before asking the authority: a refused head costs no token.
        if not admit(self._file.heads(), head, self.name):
            return
        request = (
            rc.TimestampRequestBuilder()
            .data(head.body_text.encode())
            .hash_algorithm(rc.HashAlgorithm.SHA256)
            .nonce(nonce=True)
            .cert_request(cert_request=True)
            .build()
        )
        http = urllib.request.Request(
            self.url,
            data=request.as_bytes(),
            method="POST",
            headers={"Content-Type": "application/timestamp-query"},
        )
        try:
            with self._opener.open(http, timeout=self.timeout_s) as answer:
                reply: bytes = answer.read()
        except urllib.error.HTTPError as e:
            raise AnchorError(
                f"{self.name} refused the request (HTTP {e.code}: {_words(e.read())}); the head "
                "is not anchored: publish it again later"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise AnchorError(
                f"{self.name} could not be reached ({getattr(e, 'reason', e)}); the head is "
                "not anchored: publish it again later"
            ) from None
        try:
            response = rc.decode_timestamp_response(reply)
            token = bytes(response.time_stamp_token())
        except ValueError as e:
            raise AnchorError(
                f"{self.name} answered something that is not a timestamp reply ({e}); check "
                "the URL is the authority's"
            ) from None
        assert request.nonce is not None  # the request was built with one
        gen_time = self._check(response, head, self._verifier(request.nonce))
        self._file._append(head, leaves, gen_time, base64.b64encode(token).decode())

    def heads(self) -> list[AnchoredHead]:
        """Every head kept, each token checked again, in size order."""
        checked = []
        verifier = self._verifier(None)
        for held in self._file.heads():
            if held.evidence is None:
                raise AnchorError(
                    f"{self.name}: the head of size {held.head.size} has no token: it was not "
                    "timestamped, so nothing proves when it existed; publish it again"
                )
            try:
                token = base64.b64decode(held.evidence, validate=True)
                wrapped = _GRANTED + token
                response = self._client.decode_timestamp_response(
                    b"\x30" + _der_length(len(wrapped)) + wrapped
                )
            except ValueError:
                raise AnchorError(
                    f"{self.name}: the token of the head of size {held.head.size} cannot be "
                    "read: the file was damaged or edited; restore it from a copy"
                ) from None
            gen_time = self._check(response, held.head, verifier)
            checked.append(AnchoredHead(held.head, held.leaves, gen_time, held.evidence, self.name))
        return checked

    def _verifier(self, nonce: int | None) -> Verifier:
        builder = self._client.VerifierBuilder()
        for certificate in self._trusted:
            builder = builder.add_root_certificate(certificate)
        if nonce is not None:
            builder = builder.nonce(nonce)
        return builder.build()

    def _check(self, response: Any, head: TreeHead, verifier: Verifier) -> float:
        """The token's time, once it is checked to sign this head; `AnchorError` if not."""
        try:
            verifier.verify(response, bytes.fromhex(head.hash))
        except (self._client.VerificationError, ValueError) as e:
            raise AnchorError(
                f"{self.name}: the token for the head of size {head.size} does not verify "
                f"({e}): it is not the authority's signature over this head; the head is "
                "not proven to have existed then"
            ) from None
        gen_time: datetime.datetime = response.tst_info.gen_time
        return gen_time.timestamp()
