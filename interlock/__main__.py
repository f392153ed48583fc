"""`python -m interlock verify [--store] STORE`: check a store's receipts and their log;
`python -m interlock proof ACTION [--store] STORE`: an action's receipt with its inclusion
proof; `python -m interlock stripe-emulator [--port N]`: the loopback Stripe emulator alone;
`python -m interlock keygen DIR`: a new receipt signing key and the key list that trusts it;
`pending`, `show ACTION`, `resolve ACTION`, `revoke LEASE` (each with STORE): the operator's
commands, described in `interlock._operator`.

STORE is a SQLite file's path or a `postgresql://` URL, given as the argument, as
`--store`, or in `INTERLOCK_STORE`; there is no default (the library keeps no folder of its
own). Exit 0 when the chain holds, 1 on any problem, 2 on bad usage (no store named, no
such file or database, or one that is not an interlock store, or `--stripe` without a
key or with one that is not a Stripe test key), 3 when Ctrl-C, SIGTERM or SIGHUP stops it
first (one line says so). The store is opened read-only (PostgreSQL: `READ ONLY`
transactions) and never written. `--stripe` also checks Stripe against the receipts (the
key from `STRIPE_SECRET_KEY`, a test key only: any other is refused before a request; the
API at `INTERLOCK_STRIPE_BASE` when set): refunds payment by payment and transfers account by
account; `--account-wide` adds the account's refunds (and its transfers, for a store that
has transfer actions) since the store's first action. A value in the store that cannot be
parsed (not JSON, nested too deeply, any size) is reported as a problem, never a traceback.
Receipts are checked with the gate's public keys only (`--keys FILE`, default
`INTERLOCK_VERIFY_KEYS`); `--anchor` (repeat it) compares the log with what an anchor
holds: a `FileAnchor`'s file, an `HttpWitness`'s URL, or a `TimestampAnchor`'s folder with
`--tsa-certs PEM`.

`proof` prints what anyone can check with SHA-256 and Ed25519 alone (docs/receipts.md):
the receipt's body and signature, its place in the log, the latest signed tree head and
the inclusion proof against it. Exit 1 when the action has no receipt in a head yet.

The emulator (`interlock.testing.StripeEmulator`) serves on 127.0.0.1 until Ctrl-C,
SIGTERM or SIGHUP (then exit 0) and prints its address and control token on stderr; point
`INTERLOCK_STRIPE_BASE` (or `make_stripe_client(base_url=...)`) at it.

`keygen` writes DIR/signing-key.pem (the gate's Ed25519 private key, mode 0600; it never
overwrites one) and adds the public key to DIR/keys.json (creating it), then prints the
key id, both paths and the two environment lines to set; never the key. Exit 0 when both
are written, 2 when the key exists already or a file cannot be written or read.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock._core.approvals import Approvers
from interlock._core.config import Timing
from interlock._core.errors import ConfigError, StoreError
from interlock._core.signals import Interrupted, stop_signals_interrupt
from interlock._core.signing import (
    ENV_SIGNING_KEY,
    ENV_VERIFY_KEYS,
    KeyList,
    SigningKey,
    key_list_from_env,
)
from interlock._core.verify import VerifyResult, verify
from interlock._operator import COMMANDS as OPERATOR_COMMANDS
from interlock._operator import add_parsers as add_operator_parsers
from interlock._operator import key_refusal, proof_data
from interlock._operator import run as run_operator
from interlock._operator import shown as _shown
from interlock._stores.open import open_store
from interlock._stores.postgres import PostgresStore, is_postgres_url

if TYPE_CHECKING:
    from interlock._core.anchors import Anchor
    from interlock._stripe.adapter import StripePayments

ENV_STORE = "INTERLOCK_STORE"
NO_STORE = (
    "name the store to check: python -m interlock verify PATH_OR_URL (or --store "
    f"PATH_OR_URL, or set {ENV_STORE}); PATH is a SQLite file, URL a postgresql:// one"
)


def _stripe(key: str) -> StripePayments:
    """Stripe over the library's own deadline client: only reads, so the default timing's
    timeout is a bound on each listing page, not a plan to keep."""
    from interlock._stripe.adapter import StripePayments, make_stripe_client

    base = os.environ.get("INTERLOCK_STRIPE_BASE") or None
    return StripePayments(
        make_stripe_client(key, timeout_s=Timing().stripe_timeout_s, base_url=base)
    )


def _version() -> str:
    try:
        return f"interlock {metadata.version('interlock')}"
    except metadata.PackageNotFoundError:
        return "interlock (not installed: run from a checkout)"


class _Parser(argparse.ArgumentParser):
    """A parser that answers `--version`, as each command's does (argparse makes
    subparsers of their parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=_version())


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    parser = _Parser(prog="python -m interlock", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="check a store's receipts and their log")
    named = v.add_mutually_exclusive_group()
    named.add_argument(
        "store", nargs="?", help=f"path of the SQLite store or a postgresql:// URL (or {ENV_STORE})"
    )
    named.add_argument("--store", dest="store_option", metavar="PATH_OR_URL", help="the same")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument(
        "--stripe",
        action="store_true",
        help="check Stripe against the receipts too (key: STRIPE_SECRET_KEY; API: "
        "INTERLOCK_STRIPE_BASE, default api.stripe.com)",
    )
    v.add_argument(
        "--account-wide",
        action="store_true",
        help="with --stripe: also read every refund (and transfer) on the account since the "
        "store's first action (for a store that is the account's only interlock store)",
    )
    v.add_argument(
        "--approvers",
        metavar="PEM",
        action="append",
        help="an approver's public key file (repeat for several; default: INTERLOCK_APPROVERS): "
        "every approval must carry a signature that verifies under one of them",
    )
    v.add_argument(
        "--keys",
        metavar="FILE",
        help="the gate's public keys (a key list from `keygen`; default: INTERLOCK_VERIFY_KEYS)",
    )
    v.add_argument(
        "--anchor",
        metavar="WHERE",
        action="append",
        default=[],
        help="compare the log with an anchor (repeat for several): a FileAnchor's file, an "
        "HttpWitness's http(s):// URL, or a TimestampAnchor's folder (with --tsa-certs)",
    )
    v.add_argument(
        "--heads-only",
        action="store_true",
        help="check each receipt under a signed tree head by that head (its signature and the "
        "root recomputed from the log) instead of by its own signature: about four times "
        "faster on a large store, and blind to a receipt a store writer put in before the log "
        "took it in (docs/receipts.md)",
    )
    v.add_argument(
        "--tsa-certs",
        metavar="PEM",
        help="the timestamp authority's certificates, for a TimestampAnchor's folder",
    )
    p = sub.add_parser("proof", help="an action's receipt with its inclusion proof")
    p.add_argument("action", help="the action's id")
    p.add_argument(
        "store", nargs="?", help=f"path of the SQLite store or a postgresql:// URL (or {ENV_STORE})"
    )
    p.add_argument("--store", dest="store_option", metavar="PATH_OR_URL", help="the same")
    p.add_argument("--json", action="store_true", help="print the proof as JSON")
    emu = sub.add_parser("stripe-emulator", help="serve the loopback Stripe emulator alone")
    emu.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    add_operator_parsers(sub)
    kg = sub.add_parser(
        "keygen", help="make a receipt signing key and add it to the key list verifiers trust"
    )
    kg.add_argument(
        "dir",
        metavar="DIR",
        help="folder for signing-key.pem (new; keep it with the gate) and keys.json (public)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.command == "stripe-emulator":
        from interlock.testing import serve_emulator

        return serve_emulator(args.port, prog="python -m interlock")
    if args.command == "keygen":
        return _keygen(Path(args.dir))
    if args.command == "proof":
        location = _location(args)
        return _proof(location, args) if location else 2
    if args.command in OPERATOR_COMMANDS:
        location = _location(args)
        return run_operator(args, location) if location else 2
    if args.account_wide and not args.stripe:
        print("--account-wide reads Stripe: give --stripe too", file=sys.stderr)
        return 2
    key = os.environ.get("STRIPE_SECRET_KEY", "")
    if args.stripe and not key:
        print("--stripe needs a Stripe key: set STRIPE_SECRET_KEY", file=sys.stderr)
        return 2
    if args.stripe and (refused := key_refusal(key)) is not None:
        print(f"python -m interlock verify: {refused}", file=sys.stderr)
        return 2
    location = _location(args)
    if not location:
        return 2
    try:
        with stop_signals_interrupt():
            return _verify(location, key, args)
    except Interrupted as stop:
        print(
            f"python -m interlock verify stopped by {stop.words} before it finished: no "
            f"result; {location} was only read",
            file=sys.stderr,
        )
        return 3


def _keygen(folder: Path) -> int:
    """Write a new signing key and add its public half to the key list in `folder`."""
    key_path, list_path = (folder / "signing-key.pem").absolute(), (folder / "keys.json").absolute()
    key = SigningKey.generate()
    saved = False
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Read the list first: a broken keys.json must stop us before a key exists that
        # no list trusts.
        keys = KeyList.load(list_path) if list_path.exists() else KeyList()
        keys.add(key.public)
        key.save(key_path)
        saved = True
        keys.save(list_path)
    except (ConfigError, OSError) as e:
        words = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) else str(e)
        print(f"python -m interlock keygen: {words}; nothing was changed", file=sys.stderr)
        if saved:
            key_path.unlink()  # the list could not take it: leave no key nothing trusts
        return 2
    print(f"signing key {key.key_id}")
    print(f"  private key: {key_path} (keep it with the gate only; never share it)")
    print(f"  key list:    {list_path} (public: give it to whoever verifies receipts)")
    print("set, for the gate and for verify:")
    print(f"  export {ENV_SIGNING_KEY}={shlex.quote(str(key_path))}")
    print(f"  export {ENV_VERIFY_KEYS}={shlex.quote(str(list_path))}")
    return 0


def _location(args: argparse.Namespace) -> str | None:
    """The store the command names, or None (said on stderr) when it names none that exists."""
    location: str | None = args.store or args.store_option or os.environ.get(ENV_STORE)
    if not location:
        print(NO_STORE, file=sys.stderr)
        return None
    if not is_postgres_url(location) and not Path(location).is_file():
        print(f"no interlock store at {location}: give the path of a store file", file=sys.stderr)
        return None
    return location


def _anchors(args: argparse.Namespace) -> list[Anchor]:
    """The anchors `--anchor` names; `ConfigError` in words for one that cannot be used."""
    from interlock._core.anchors import FileAnchor, HttpWitness, TimestampAnchor

    anchors: list[Anchor] = []
    for where in args.anchor:
        if where.startswith(("http://", "https://")):
            anchors.append(HttpWitness(where))
        elif Path(where).is_dir():
            if not args.tsa_certs:
                raise ConfigError(
                    f"--anchor {where} is a folder, a TimestampAnchor's: give the timestamp "
                    "authority's certificates with --tsa-certs PEM"
                )
            try:
                certificates = Path(args.tsa_certs).read_bytes()
            except OSError as e:
                raise ConfigError(f"--tsa-certs {args.tsa_certs}: cannot read it ({e})") from e
            anchors.append(TimestampAnchor(None, where, certificates=certificates))
        elif Path(where).is_file():
            anchors.append(FileAnchor(where))
        else:
            raise ConfigError(
                f"--anchor {where}: no such file or folder, and not an http(s):// URL"
            )
    return anchors


def _proof(location: str, args: argparse.Namespace) -> int:
    """Print an action's receipt with its inclusion proof; the exit code."""
    try:
        store = open_store(location, read_only=True)
    except StoreError as e:
        print(str(e), file=sys.stderr)
        return 2
    try:
        state = store.action(args.action)
        receipt = None if state is None else state.receipt
        proof = None if receipt is None else proof_data(store, args.action, receipt)
    finally:
        store.close()
    if receipt is None:
        said = "is not in the store" if state is None else "has no receipt (not settled)"
        print(f"action {_shown(args.action)} {said}", file=sys.stderr)
        return 1
    if proof is None:
        print(
            f"action {_shown(args.action)}'s receipt is not in a signed tree head yet: a gate "
            "puts it there at its next catch-up (recover(), or every log_every receipts)",
            file=sys.stderr,
        )
        return 1
    size = proof.pop("tree_size")
    if args.json:
        print(json.dumps(proof, indent=2))
        return 0
    print(f"action {_shown(args.action)}: receipt at log position {proof['leaf_index']} of {size}")
    print(f"receipt body: {_shown(receipt.body_text)}")
    print(f"receipt signature: {receipt.signature}")
    print(f"leaf hash: {proof['leaf_hash']}")
    print(f"tree head: {_shown(proof['tree_head']['body'])}")
    print(f"tree head signature: {proof['tree_head']['signature']}")
    print("inclusion proof:")
    for h in proof["inclusion_proof"]:
        print(f"  {h}")
    return 0


def _verify(location: str, key: str, args: argparse.Namespace) -> int:
    """Check the store at `location` and print the result; the exit code (2: not a store)."""
    try:
        # Read-only: checking a store must never change it (no schema, no migration).
        store = open_store(location, read_only=True)
    except StoreError as e:
        print(str(e), file=sys.stderr)
        return 2
    try:
        approvers = Approvers.load(*args.approvers) if args.approvers else Approvers.from_env()
        keys = KeyList.load(args.keys) if args.keys else key_list_from_env()
        anchors = _anchors(args)
    except ConfigError as e:
        store.close()
        print(str(e), file=sys.stderr)
        return 2
    payments = _stripe(key) if args.stripe else None
    try:
        result = verify(
            store,
            payments,
            account_wide=args.account_wide,
            approvers=approvers,
            keys=keys,
            anchors=anchors,
            signatures="heads" if args.heads_only else "every",
        )
    finally:
        store.close()
        if payments is not None:
            payments.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        state = "hold" if result.ok else "are BROKEN"
        where = PostgresStore.describe(location)
        print(f"{_shown(where)}: {result.chain_length} receipts ({_kinds(result)}) {state}")
        print(f"  {_log_words(result)}")
        for problem in result.problems:
            print(f"  - {_shown(problem)}")
    return 0 if result.ok else 1


def _kinds(result: VerifyResult) -> str:
    words = {
        "ed25519": "signed with the gate's Ed25519 key",
        "hmac": "HMAC-signed before the log, checkable only with the secret",
        "unsigned": "unsigned",
    }
    parts = [f"{n} {words[kind]}" for kind, n in sorted(result.formats.items()) if n]
    return "; ".join(parts) or "none"


def _log_words(result: VerifyResult) -> str:
    text = f"log: {result.log_size} receipts under {result.heads} signed tree heads"
    if result.unlogged:
        text += f", {result.unlogged} not in the log yet"
    if result.anchored:
        text += f"; compared with {result.anchored} anchored heads"
    if result.vouched is not None:
        text += (
            f"; {result.vouched} receipts checked by their signed heads only, not their own "
            "signatures (--heads-only)"
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
