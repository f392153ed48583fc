"""The anchors: one contract over a file, an HTTP witness and an RFC 3161 timestamp authority.

Every anchor keeps three rules: publishing the same head again changes nothing; a head
that contradicts one it holds (same size, another root) or is smaller than its largest is
refused in words; a record torn by a crash never leaves it unreadable. The witness and
the timestamp authority are the loopback ones of `interlock.testing`, over real sockets;
the torn write is a real SIGKILL of a publishing process.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.client
import ipaddress
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from interlock import (
    Anchor,
    AnchoredHead,
    AnchorError,
    FileAnchor,
    HttpWitness,
    TimestampAnchor,
)
from interlock._core import anchors
from interlock._core.anchors import record
from interlock._core.heads import LogLeaf, TreeHead, head_body
from interlock.testing import TimestampAuthority, WitnessServer

ROOT = Path(__file__).resolve().parents[2]


def _head(size: int, fork: str = "", at: float | None = None) -> TreeHead:
    """A head of `size` whose root is made up from the size (and `fork`, to make another)."""
    root = hashlib.sha256(f"root {size}{fork}".encode()).hexdigest()
    when = 1_700_000_000.0 + size if at is None else at
    body = head_body(size, root, when, "k1")
    return TreeHead(size, root, when, "k1", body, f"sig-{size}{fork}")


def _leaves(start: int, end: int) -> list[LogLeaf]:
    return [
        LogLeaf(i, f"act_{i}", hashlib.sha256(f"leaf {i}".encode()).hexdigest())
        for i in range(start, end)
    ]


@dataclass
class Harness:
    """An anchor under test, the file its records land in, and a way to open it anew."""

    anchor: Anchor
    file: Path
    reopen: Callable[[], Anchor]
    tokens: Callable[[], int]  # how many timestamps were asked for (0 where none are)


@pytest.fixture(params=["file", "witness", "timestamp"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    with contextlib.ExitStack() as stack:
        if request.param == "file":
            path = tmp_path / "heads.jsonl"
            yield Harness(FileAnchor(path), path, lambda: FileAnchor(path), lambda: 0)
        elif request.param == "witness":
            path = tmp_path / "witness.jsonl"
            server = stack.enter_context(WitnessServer(path))

            def restarted() -> Anchor:
                # The witness process is gone; a new one serves the same file.
                stack.close()
                return HttpWitness(stack.enter_context(WitnessServer(path)).url)

            yield Harness(HttpWitness(server.url), path, restarted, lambda: 0)
        else:
            tsa = stack.enter_context(TimestampAuthority())

            def anchor() -> Anchor:
                return TimestampAnchor(tsa.url, tmp_path, certificates=tsa.certificates)

            yield Harness(anchor(), tmp_path / "heads.jsonl", anchor, lambda: tsa.issued)


def _same(held: list[AnchoredHead]) -> list[tuple[str, str | None, tuple[LogLeaf, ...]]]:
    return [(h.head.body_text, h.head.signature, h.leaves) for h in held]


# -- the contract ------------------------------------------------------------------------


def test_heads_come_back_in_size_order_with_their_leaves(harness: Harness) -> None:
    """What was published reads back whole: body, signature, leaves, the anchor's name."""
    anchor = harness.anchor
    assert anchor.heads() == []
    before = time.time()
    anchor.publish(_head(2), _leaves(0, 2))
    anchor.publish(_head(5), _leaves(2, 5))
    after = time.time()
    held = anchor.heads()
    assert _same(held) == [
        (_head(2).body_text, "sig-2", tuple(_leaves(0, 2))),
        (_head(5).body_text, "sig-5", tuple(_leaves(2, 5))),
    ]
    assert {h.where for h in held} == {anchor.name}
    # A timestamp authority's time has whole seconds; every anchor's is its own clock's.
    assert all(int(before) <= h.anchored_at <= after for h in held)
    assert isinstance(anchor, Anchor)


def test_publishing_the_same_head_again_changes_nothing(harness: Harness) -> None:
    """A publisher killed after the anchor took a head but before it marked it published
    publishes it again: nothing is added, nothing refused, no second token is asked for."""
    anchor = harness.anchor
    anchor.publish(_head(2), _leaves(0, 2))
    anchor.publish(_head(5), _leaves(2, 5))
    held, tokens = anchor.heads(), harness.tokens()
    anchor.publish(_head(5), _leaves(2, 5))
    anchor.publish(_head(2), _leaves(0, 2))  # older, but identical to one held
    assert _same(anchor.heads()) == _same(held)
    assert harness.tokens() == tokens
    assert len(harness.file.read_text().splitlines()) == 2


def test_a_different_head_of_a_size_it_holds_is_refused(harness: Harness) -> None:
    """A rewritten log (same size, another root) is refused in words naming both roots."""
    anchor = harness.anchor
    anchor.publish(_head(2), _leaves(0, 2))
    anchor.publish(_head(5), _leaves(2, 5))
    held = anchor.heads()
    with pytest.raises(AnchorError) as refused:
        anchor.publish(_head(5, fork="rewritten"), _leaves(2, 5))
    words = str(refused.value)
    assert "already holds a different head of size 5" in words
    assert _head(5).root in words and _head(5, fork="rewritten").root in words
    assert "rewritten after it was anchored" in words
    with pytest.raises(AnchorError, match="different head of size 2"):
        anchor.publish(_head(2, fork="rewritten"), _leaves(0, 2))
    assert _same(anchor.heads()) == _same(held)


def test_a_head_smaller_than_the_largest_is_refused(harness: Harness) -> None:
    """A log never shrinks: a head below the largest held, not one it holds, is refused."""
    anchor = harness.anchor
    anchor.publish(_head(5), _leaves(0, 5))
    tokens = harness.tokens()
    with pytest.raises(AnchorError, match="a log never shrinks") as refused:
        anchor.publish(_head(3), _leaves(0, 3))
    assert "size 5" in str(refused.value) and "size 3" in str(refused.value)
    assert [h.head.size for h in anchor.heads()] == [5]
    assert harness.tokens() == tokens  # refused before any token is asked for


def test_a_head_of_the_same_size_and_root_at_a_later_time_is_kept(harness: Harness) -> None:
    """A log that took no receipt still signs a new head now and then: same size and root,
    a later time; it contradicts nothing and is kept beside the first."""
    anchor = harness.anchor
    anchor.publish(_head(5), _leaves(0, 5))
    later = _head(5, at=1_800_000_000.0)
    anchor.publish(later, [])
    assert [h.head.body_text for h in anchor.heads()] == [_head(5).body_text, later.body_text]


def test_a_torn_last_record_is_ignored_and_the_next_publish_works(harness: Harness) -> None:
    """Half a record at the end (a crash mid-write) reads as absent, everything before it
    stays, and the next publish (of that head or another) lands on a line of its own."""
    harness.anchor.publish(_head(2), _leaves(0, 2))
    line = json.dumps(record(_head(5), _leaves(2, 5), time.time(), None), sort_keys=True)
    with harness.file.open("a") as f:
        f.write(line[: len(line) // 2])
    anchor = harness.reopen()
    assert _same(anchor.heads()) == [(_head(2).body_text, "sig-2", tuple(_leaves(0, 2)))]
    anchor.publish(_head(5), _leaves(2, 5))
    anchor.publish(_head(7), _leaves(5, 7))
    assert [h.head.size for h in anchor.heads()] == [2, 5, 7]
    assert [json.loads(x)["head"]["body"] for x in harness.file.read_text().splitlines()] == [
        _head(2).body_text,
        _head(5).body_text,
        _head(7).body_text,
    ]


def test_what_was_anchored_survives_a_new_anchor_on_the_same_storage(harness: Harness) -> None:
    """A publisher (or witness) restarted on the same storage still keeps every rule."""
    harness.anchor.publish(_head(5), _leaves(0, 5))
    anchor = harness.reopen()
    assert [h.head.size for h in anchor.heads()] == [5]
    with pytest.raises(AnchorError, match="different head of size 5"):
        anchor.publish(_head(5, fork="rewritten"), [])


# -- a real SIGKILL while publishing -----------------------------------------------------

_CHILD = """
import json, os, sys, time
from interlock import FileAnchor
from interlock._core import anchors
from interlock._core.anchors import record
from tests.loopback.test_anchors import _head, _leaves
anchor = FileAnchor(sys.argv[1])
if sys.argv[2] == "torn":
    anchor.publish(_head(2), _leaves(0, 2))
    line = json.dumps(record(_head(5), _leaves(2, 5), time.time(), None), sort_keys=True)
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    os.write(fd, line[: len(line) // 2].encode())
    print("torn", flush=True)
    sys.stdin.read()  # killed here
elif sys.argv[2] == "race":
    print("ready", flush=True)
    sys.stdin.read()
    for size in range(1, 101):
        anchor.publish(_head(size), _leaves(size - 1, size))
else:
    size = 0
    while True:
        size += 1
        anchor.publish(_head(size), _leaves(size - 1, size))
        print(size, flush=True)
"""


@contextlib.contextmanager
def _publisher(path: Path, mode: str) -> Iterator[tuple[IO[str], Callable[[], None]]]:
    """A publishing process: its output (what it signals) and the SIGKILL for it. It is
    killed and reaped on the way out whatever the test did, so none is left running."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), mode],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None

        def kill() -> None:
            child.send_signal(signal.SIGKILL)
            assert child.wait() == -signal.SIGKILL

        try:
            yield child.stdout, kill
        finally:
            child.kill()
            child.wait()


def test_a_publisher_killed_mid_record_leaves_a_readable_file(tmp_path: Path) -> None:
    """SIGKILL after half a record was written: the file reads as the whole records before
    it, and the next publisher's head lands whole."""
    path = tmp_path / "heads.jsonl"
    with _publisher(path, "torn") as (signals, kill):
        assert signals.readline() == "torn\n"
        kill()
    assert not path.read_bytes().endswith(b"\n")  # the torn record is there
    anchor = FileAnchor(path)
    assert [h.head.size for h in anchor.heads()] == [2]
    anchor.publish(_head(5), _leaves(2, 5))
    assert _same(anchor.heads())[1] == (_head(5).body_text, "sig-5", tuple(_leaves(2, 5)))
    assert len(path.read_text().splitlines()) == 2


def test_a_publisher_killed_at_any_point_of_a_publish_loses_no_acknowledged_head(
    tmp_path: Path,
) -> None:
    """SIGKILL while publishing in a tight loop: every head whose publish returned is read
    back, the heads are 1..k with no gap, and publishing k+1 (perhaps taken already) and
    k+2 works."""
    path = tmp_path / "heads.jsonl"
    acknowledged = 0
    with _publisher(path, "loop") as (signals, kill):
        while acknowledged < 30:
            acknowledged = int(signals.readline())
        kill()
    anchor = FileAnchor(path)
    sizes = [h.head.size for h in anchor.heads()]
    assert sizes == list(range(1, len(sizes) + 1))
    assert len(sizes) >= acknowledged
    k = len(sizes)
    anchor.publish(_head(k + 1), _leaves(k, k + 1))
    anchor.publish(_head(k + 2), _leaves(k + 1, k + 2))
    assert [h.head.size for h in anchor.heads()] == list(range(1, k + 3))


# -- the file ----------------------------------------------------------------------------


def test_publishers_racing_on_one_file_append_each_head_once(tmp_path: Path) -> None:
    """Four processes publishing the same log at once: every head lands exactly once, in
    order, and none is refused (the file lock orders each check with its append)."""
    path = tmp_path / "heads.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    publishers = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), "race"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        # Each says it is ready; then all are let go at once.
        for publisher in publishers:
            assert publisher.stdout is not None
            assert publisher.stdout.readline() == "ready\n"
        for publisher in publishers:
            assert publisher.stdin is not None
            publisher.stdin.close()
        assert [publisher.wait() for publisher in publishers] == [0, 0, 0, 0]
    finally:
        for publisher in publishers:
            publisher.kill()
            publisher.wait()
            if publisher.stdout is not None:
                publisher.stdout.close()
    assert [h.head.size for h in FileAnchor(path).heads()] == list(range(1, 101))
    assert len(path.read_text().splitlines()) == 100


def test_the_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "heads.jsonl"
    FileAnchor(path).publish(_head(1), _leaves(0, 1))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_symbolic_link_is_refused_in_words(tmp_path: Path) -> None:
    """The anchor file cannot be pointed elsewhere: a link is refused, its target untouched."""
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    link = tmp_path / "heads.jsonl"
    link.symlink_to(target)
    anchor = FileAnchor(link)
    with pytest.raises(AnchorError, match="is a symbolic link"):
        anchor.publish(_head(1), _leaves(0, 1))
    with pytest.raises(AnchorError, match="is a symbolic link"):
        anchor.heads()
    assert target.read_text() == ""


def test_a_damaged_record_before_the_last_is_reported_not_skipped(tmp_path: Path) -> None:
    """Only a torn LAST record is a crash's; a bad line before it is damage, named by line."""
    path = tmp_path / "heads.jsonl"
    anchor = FileAnchor(path)
    anchor.publish(_head(1), _leaves(0, 1))
    anchor.publish(_head(2), _leaves(1, 2))
    lines = path.read_text().splitlines()
    path.write_text(lines[0][:-3] + "\n" + lines[1] + "\n")
    with pytest.raises(AnchorError, match="line 1 is not an anchored head") as damaged:
        anchor.heads()
    assert "restore it from a copy" in str(damaged.value)
    with pytest.raises(AnchorError, match="line 1"):
        anchor.publish(_head(3), [])


def test_without_posix_file_locks_a_file_anchor_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no flock (Windows), a file anchor is refused when made, in words."""
    monkeypatch.setattr(anchors, "fcntl", None)
    with pytest.raises(AnchorError, match="needs a POSIX system"):
        FileAnchor(tmp_path / "heads.jsonl")


def test_a_record_the_storage_took_only_part_of_is_an_error_and_cut_off_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk takes half a record: publish says the head is not anchored, the file
    still reads, and publishing again (with room) writes the record whole."""
    path = tmp_path / "heads.jsonl"
    anchor = FileAnchor(path)
    anchor.publish(_head(1), _leaves(0, 1))
    write = os.write

    def half(fd: int, data: bytes) -> int:
        return write(fd, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(AnchorError, match=r"size 2 could not be written.*publish again"):
        anchor.publish(_head(2), _leaves(1, 2))
    monkeypatch.setattr(os, "write", write)
    assert [h.head.size for h in anchor.heads()] == [1]
    anchor.publish(_head(2), _leaves(1, 2))
    assert [h.head.size for h in anchor.heads()] == [1, 2]
    assert len(path.read_text().splitlines()) == 2


def test_a_file_in_a_missing_folder_is_refused_in_words(tmp_path: Path) -> None:
    anchor = FileAnchor(tmp_path / "no such folder" / "heads.jsonl")
    assert anchor.heads() == []
    with pytest.raises(AnchorError, match=r"cannot be opened.*check that its folder exists"):
        anchor.publish(_head(1), [])


# -- the witness -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://witness.example/",
        "http://10.0.0.1:8080",
        "http://127.0.0.1.witness.example/",
        "http://localhost.witness.example/",
    ],
)
def test_plain_http_to_another_host_is_refused_before_any_connection(url: str) -> None:
    """Over plain http anyone on the path can answer for the witness: refused when the
    witness is made, so no request is ever sent."""
    with pytest.raises(AnchorError, match=r"plain http to another host.*use https"):
        HttpWitness(url)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/", "http://localhost:9", "http://[::1]:9", "https://w.example"]
)
def test_https_anywhere_and_plain_http_on_this_machine_are_accepted(url: str) -> None:
    assert HttpWitness(url).name.startswith("witness ")


def _tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 signed by a private CA, and a client context trusting it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "witness test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp_path / "server.pem").write_bytes(
        server.public_bytes(pem)
        + server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "server.pem")
    trusting = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return serving, trusting


def test_https_is_verified_by_default(tmp_path: Path) -> None:
    """A witness whose certificate the system does not trust is not talked to; given a
    context that trusts its CA, it is."""
    serving, trusting = _tls(tmp_path)
    with WitnessServer(tls=serving) as server:
        assert server.url.startswith("https://127.0.0.1:")
        with pytest.raises(AnchorError, match=r"could not be reached.*CERTIFICATE_VERIFY_FAILED"):
            HttpWitness(server.url).publish(_head(1), [])
        assert server.records == []
        trusted = HttpWitness(server.url, ssl_context=trusting)
        trusted.publish(_head(1), _leaves(0, 1))
        assert [h.head.size for h in trusted.heads()] == [1]


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(AnchorError, match="not an http"):
        HttpWitness("ftp://127.0.0.1/heads")


def test_a_witness_that_cannot_be_reached_is_an_anchor_error() -> None:
    with WitnessServer() as server:
        url = server.url
    with pytest.raises(AnchorError, match=r"could not be reached.*publish again"):
        HttpWitness(url).publish(_head(1), [])


def test_the_witness_answers_a_bad_body_with_words() -> None:
    with WitnessServer() as server:
        host, port = server.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("POST", "/heads", body=b'{"head": 1}')
        answer = connection.getresponse()
        assert answer.status == 400
        assert "not a head and its leaves" in json.loads(answer.read())["error"]
        connection.close()
        assert server.records == []


def test_a_redirect_is_not_followed() -> None:
    """A witness's answer is the one asked: a redirect (perhaps to plain http elsewhere) is
    an error, not a second request, even to a real witness that would answer."""
    with (
        WitnessServer() as real,
        _redirecting(real.url + "/heads") as redirecting,
        pytest.raises(AnchorError, match="HTTP 302"),
    ):
        HttpWitness(redirecting).heads()


@contextlib.contextmanager
def _redirecting(location: str) -> Iterator[str]:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- the timestamp authority -------------------------------------------------------------


@pytest.fixture
def tsa() -> Iterator[TimestampAuthority]:
    with TimestampAuthority() as authority:
        yield authority


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def test_each_head_carries_the_authoritys_token(tsa: TimestampAuthority, tmp_path: Path) -> None:
    """The evidence is a real RFC 3161 token over the head's hash, as rfc3161-client reads it."""
    import rfc3161_client

    anchor = TimestampAnchor(tsa.url, tmp_path, certificates=tsa.certificates)
    anchor.publish(_head(3), _leaves(0, 3))
    (held,) = anchor.heads()
    assert held.evidence is not None
    # A granted TimeStampResp around the token: SEQUENCE { SEQUENCE { INTEGER 0 }, token }.
    wrapped = bytes.fromhex("3003020100") + base64.b64decode(held.evidence)
    reply = bytes([0x30, 0x82]) + len(wrapped).to_bytes(2, "big") + wrapped
    response = rfc3161_client.decode_timestamp_response(reply)
    assert response.tst_info.message_imprint.message == bytes.fromhex(_head(3).hash)
    assert held.anchored_at == response.tst_info.gen_time.timestamp()


def test_a_token_moved_to_another_head_is_refused(tsa: TimestampAuthority, tmp_path: Path) -> None:
    """A store writer who swaps tokens between heads (to move one's time) is caught on read."""
    anchor = TimestampAnchor(tsa.url, tmp_path, certificates=tsa.certificates)
    anchor.publish(_head(2), _leaves(0, 2))
    anchor.publish(_head(5), _leaves(2, 5))
    path = tmp_path / "heads.jsonl"
    records = _records(path)
    records[0]["evidence"], records[1]["evidence"] = records[1]["evidence"], records[0]["evidence"]
    _write(path, records)
    with pytest.raises(AnchorError, match="token for the head of size 2 does not verify"):
        anchor.heads()


def test_a_tampered_token_is_refused(tsa: TimestampAuthority, tmp_path: Path) -> None:
    """One byte of the token's signature changed: it no longer verifies."""
    anchor = TimestampAnchor(tsa.url, tmp_path, certificates=tsa.certificates)
    anchor.publish(_head(2), _leaves(0, 2))
    path = tmp_path / "heads.jsonl"
    records = _records(path)
    token = bytearray(base64.b64decode(str(records[0]["evidence"])))
    token[-5] ^= 0x01  # inside the ECDSA signature, the token's last field
    records[0]["evidence"] = base64.b64encode(bytes(token)).decode()
    _write(path, records)
    with pytest.raises(AnchorError, match="size 2 does not verify"):
        anchor.heads()


def test_a_token_that_is_not_a_token_is_refused(tsa: TimestampAuthority, tmp_path: Path) -> None:
    anchor = TimestampAnchor(tsa.url, tmp_path, certificates=tsa.certificates)
    anchor.publish(_head(2), _leaves(0, 2))
    path = tmp_path / "heads.jsonl"
    for evidence, words in [("bm90IGEgdG9rZW4=", "cannot be read"), (None, "has no token")]:
        records = _records(path)
        records[0]["evidence"] = evidence
        _write(path, records)
        with pytest.raises(AnchorError, match=words):
            anchor.heads()


def test_a_token_from_another_authority_is_refused(tsa: TimestampAuthority, tmp_path: Path) -> None:
    """Signed by another key: refused when asked for (nothing kept), and when read from
    the file of an anchor that trusts only this authority."""
    with TimestampAuthority(name="other") as other:
        mistrusting = TimestampAnchor(other.url, tmp_path / "a", certificates=tsa.certificates)
        (tmp_path / "a").mkdir()
        with pytest.raises(AnchorError, match="size 2 does not verify"):
            mistrusting.publish(_head(2), _leaves(0, 2))
        assert mistrusting.heads() == []
        assert other.issued == 1
        (tmp_path / "b").mkdir()
        TimestampAnchor(other.url, tmp_path / "b", certificates=other.certificates).publish(
            _head(2), _leaves(0, 2)
        )
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "heads.jsonl").write_bytes((tmp_path / "b" / "heads.jsonl").read_bytes())
    with pytest.raises(AnchorError, match="size 2 does not verify"):
        TimestampAnchor(tsa.url, mine, certificates=tsa.certificates).heads()


class _Replaying(TimestampAuthority):
    """An authority (or someone in its place) that answers every query with its first reply."""

    first: bytes | None = None

    def reply(self, query: bytes) -> bytes:
        if self.first is None:
            self.first = super().reply(query)
        return self.first


def test_a_replayed_reply_is_refused_by_its_nonce(tmp_path: Path) -> None:
    """A reply made for an earlier query of the same head (another nonce) is not this one's."""
    with _Replaying() as replaying:
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
        TimestampAnchor(
            replaying.url, tmp_path / "first", certificates=replaying.certificates
        ).publish(_head(2), [])
        second = TimestampAnchor(
            replaying.url, tmp_path / "second", certificates=replaying.certificates
        )
        with pytest.raises(AnchorError, match="Nonce mismatch"):
            second.publish(_head(2), [])
        assert second.heads() == []


def test_certificates_that_are_not_pem_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AnchorError, match="not PEM certificates"):
        TimestampAnchor("http://127.0.0.1:9", tmp_path, certificates=b"not a certificate")


@pytest.mark.parametrize("body", [b"garbage", bytes.fromhex("3003020101"), b""])
def test_the_authority_answers_what_is_not_a_query_with_words(
    tsa: TimestampAuthority, body: bytes
) -> None:
    host, port = tsa.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(
        "POST", "/", body=body, headers={"Content-Type": "application/timestamp-query"}
    )
    answer = connection.getresponse()
    assert answer.status == 400
    assert answer.read().startswith((b"not a timestamp query", b"send an application"))
    connection.close()
    assert tsa.issued == 0


def test_an_answer_that_is_not_a_timestamp_reply_is_refused(tmp_path: Path) -> None:
    """Pointed at something else (here a witness): refused in words, nothing kept."""
    with WitnessServer() as witness, TimestampAuthority() as authority:
        anchor = TimestampAnchor(witness.url, tmp_path, certificates=authority.certificates)
        with pytest.raises(AnchorError, match="refused the request \\(HTTP 404"):
            anchor.publish(_head(1), [])
        assert anchor.heads() == []


class _Refusing(TimestampAuthority):
    """An authority that answers every query with a refusal (PKIStatus rejection)."""

    def reply(self, query: bytes) -> bytes:
        # TimeStampResp { PKIStatusInfo { rejection (2), { "no" } } } with no token.
        words = b"\x0c\x02no"
        text = b"\x30" + bytes([len(words)]) + words
        info = b"\x02\x01\x02" + text
        status = b"\x30" + bytes([len(info)]) + info
        return b"\x30" + bytes([len(status)]) + status


def test_a_refusal_from_the_authority_keeps_nothing(tmp_path: Path) -> None:
    with _Refusing() as refusing:
        anchor = TimestampAnchor(refusing.url, tmp_path, certificates=refusing.certificates)
        with pytest.raises(AnchorError, match=r"size 1 does not verify.*not GRANTED"):
            anchor.publish(_head(1), [])
        assert anchor.heads() == []
