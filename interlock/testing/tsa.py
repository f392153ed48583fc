"""A loopback RFC 3161 timestamp authority for tests, real enough for rfc3161-client's verifier.

`TimestampAuthority` makes its own CA and a TSA certificate (extendedKeyUsage
id-kp-timeStamping, critical) with `cryptography`, and answers a POSTed
`application/timestamp-query` with an `application/timestamp-reply`: a CMS SignedData over
a TSTInfo (the request's message imprint and nonce, its own serial and time), with the
signed attributes content-type, signing-time, message-digest and signing-certificate-v2
(RFC 5816), signed with ECDSA P-256. `certificates` is the CA in PEM, what a
`TimestampAnchor` is given to trust. A test double: its keys live only in memory.

Needs `asn1crypto` (in the demo's `test` extra) to build the DER.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from interlock.testing.loopback import LoopbackServer

try:
    from asn1crypto import cms, core, tsp
    from asn1crypto import x509 as asn1_x509
except ImportError as e:  # pragma: no cover - the test extra installs it
    raise ImportError(
        "interlock.testing.tsa needs the asn1crypto package to build timestamp replies: "
        "pip install asn1crypto (the demo's test extra has it)"
    ) from e

# The policy the test authority states in each token (an arbitrary private-use arc).
POLICY = "1.3.6.1.4.1.99999.3161"
# A body larger than this is not a timestamp query.
MAX_QUERY = 1 << 16


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


class TimestampAuthority:
    """An RFC 3161 timestamp authority on 127.0.0.1 (a free port), served while in `with`.

    `url` is where to POST queries; `certificates` its CA certificate in PEM.
    `issued` counts the tokens it signed.
    """

    def __init__(self, name: str = "interlock test") -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        # Valid from a day back, so a token's time is inside it on any clock skew a test has.
        start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=365)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{name} timestamp CA"))
            .issuer_name(_name(f"{name} timestamp CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(signs_certificates=True), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        self._key = ec.generate_private_key(ec.SECP256R1())
        tsa = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{name} timestamp authority"))
            .issuer_name(self._ca.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(signs_certificates=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True
            )
            .sign(ca_key, hashes.SHA256())
        )
        self._tsa_der = tsa.public_bytes(serialization.Encoding.DER)
        self.certificates = self._ca.public_bytes(serialization.Encoding.PEM)
        self.issued = 0
        self._lock = threading.Lock()
        self._serving = LoopbackServer(_handler(self), "tsa")
        self.url = self._serving.url

    def reply(self, query: bytes) -> bytes:
        """The DER timestamp reply to a DER timestamp query (`ValueError` if it is not one)."""
        request = tsp.TimeStampReq.load(query)
        # Parsing is lazy in asn1crypto: reading the fields checks them.
        imprint = request["message_imprint"]
        nonce = request["nonce"].native
        if imprint["hash_algorithm"]["algorithm"].native not in ("sha256", "sha384", "sha512"):
            raise ValueError("the message imprint's hash is not SHA-2")
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        info: dict[str, Any] = {
            "version": "v1",
            "policy": POLICY,
            "message_imprint": imprint,
            "serial_number": secrets.randbits(63),
            "gen_time": now,
            "accuracy": {"seconds": 1},
        }
        if nonce is not None:
            info["nonce"] = nonce
        tst_info = tsp.TSTInfo(info).dump()
        certificate = asn1_x509.Certificate.load(self._tsa_der)
        issuer_serial = {
            "issuer": [asn1_x509.GeneralName({"directory_name": certificate.issuer})],
            "serial_number": certificate.serial_number,
        }
        signed_attrs = cms.CMSAttributes(
            [
                cms.CMSAttribute({"type": "content_type", "values": ["tst_info"]}),
                cms.CMSAttribute({"type": "signing_time", "values": [cms.Time({"utc_time": now})]}),
                cms.CMSAttribute(
                    {"type": "message_digest", "values": [hashlib.sha256(tst_info).digest()]}
                ),
                cms.CMSAttribute(
                    {
                        "type": "signing_certificate_v2",
                        "values": [
                            {
                                "certs": [
                                    {
                                        "hash_algorithm": {"algorithm": "sha256"},
                                        "cert_hash": hashlib.sha256(self._tsa_der).digest(),
                                        "issuer_serial": issuer_serial,
                                    }
                                ]
                            }
                        ],
                    }
                ),
            ]
        )
        # The signature covers the attributes DER-encoded as a SET (RFC 5652 5.4).
        signature = self._key.sign(signed_attrs.dump(), ec.ECDSA(hashes.SHA256()))
        signer = cms.SignerInfo(
            {
                "version": "v1",
                "sid": cms.SignerIdentifier(
                    {
                        "issuer_and_serial_number": {
                            "issuer": certificate.issuer,
                            "serial_number": certificate.serial_number,
                        }
                    }
                ),
                "digest_algorithm": {"algorithm": "sha256"},
                "signed_attrs": signed_attrs,
                "signature_algorithm": {"algorithm": "sha256_ecdsa"},
                "signature": signature,
            }
        )
        signed_data = cms.SignedData(
            {
                "version": "v3",
                "digest_algorithms": [{"algorithm": "sha256"}],
                "encap_content_info": {
                    "content_type": "tst_info",
                    "content": core.ParsableOctetString(tst_info),
                },
                "certificates": [certificate],
                "signer_infos": [signer],
            }
        )
        response = tsp.TimeStampResp(
            {
                "status": {"status": "granted"},
                "time_stamp_token": {"content_type": "signed_data", "content": signed_data},
            }
        )
        with self._lock:
            self.issued += 1
        der: bytes = response.dump()
        return der

    def __enter__(self) -> TimestampAuthority:
        self._serving.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._serving.stop()


def _handler(authority: TimestampAuthority) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.headers.get("Content-Type") != "application/timestamp-query" or not (
                0 < length <= MAX_QUERY
            ):
                self._answer(
                    HTTPStatus.BAD_REQUEST, "text/plain", b"send an application/timestamp-query"
                )
                return
            try:
                reply = authority.reply(self.rfile.read(length))
            except ValueError as e:
                self._answer(
                    HTTPStatus.BAD_REQUEST, "text/plain", f"not a timestamp query: {e}".encode()
                )
                return
            self._answer(HTTPStatus.OK, "application/timestamp-reply", reply)

        def _answer(self, status: HTTPStatus, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Quiet: a test's output is its own.
            pass

    return Handler
