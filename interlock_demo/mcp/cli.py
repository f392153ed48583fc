"""`interlock-demo mcp`: serve the refund tools over stdio, and grant or revoke approvals.

    interlock-demo mcp [--offline [--stripe-base URL]] [--approve PAYMENT --cap CENTS]
    interlock-demo mcp approve PAYMENT --cap CENTS [--hours H]
    interlock-demo mcp revoke PAYMENT

Everything is kept in `INTERLOCK_HOME/mcp/interlock.sqlite3` (the journal, the approvals
and the receipts), so the commands and the server meet there. Stdout belongs to the MCP
protocol while serving: the server writes its log to stderr. Building the parser imports
nothing beyond argparse; the `mcp` SDK (through `interlock.mcp`, which holds the desk and
the tools) is imported only to run a command. What is the demo's own: INTERLOCK_HOME, its
timing, the key finder, and `--offline`'s emulator and payment.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock_demo.exit_codes import ExitCode
from interlock_demo.stopping import Stopped

if TYPE_CHECKING:
    from interlock import (
        Approver,
        Approvers,
        Event,
        FileAnchor,
        Payment,
        Payments,
        SigningKey,
        SQLiteStore,
    )

OFFLINE_PAYMENT = 10_000
OFFLINE_CAP = 2_000


def add_mcp_parser(sub: Any) -> None:
    """Add the `mcp` command (with `approve` and `revoke`) to the CLI's subparsers."""
    p = sub.add_parser(
        "mcp",
        help="the guarded refund tool as an MCP server over stdio (needs the mcp extra)",
        description=(
            "Serve get_payment and issue_refund over stdio; every refund goes through "
            "interlock.Gate under an approval a person grants."
        ),
    )
    p.add_argument(
        "--offline",
        action="store_true",
        dest="mcp_offline",
        help="use the loopback Stripe emulator (started in-process) instead of Stripe test mode",
    )
    p.add_argument(
        "--stripe-base",
        metavar="URL",
        dest="mcp_stripe_base",
        help="with --offline: use an emulator already listening at URL",
    )
    p.add_argument("--approve", metavar="PAYMENT", dest="mcp_approve", help="approve refunds on")
    p.add_argument("--cap", type=int, metavar="CENTS", dest="mcp_cap", help="the approval's cap")
    p.add_argument(
        "--hours", type=float, default=24.0, dest="mcp_hours", help="approval lifetime (24)"
    )
    cmds = p.add_subparsers(dest="mcp_command")
    approve = cmds.add_parser("approve", help="approve refunds on a payment, capped")
    approve.add_argument("payment", metavar="PAYMENT")
    approve.add_argument(
        "--cap",
        type=int,
        required=True,
        metavar="AMOUNT",
        dest="cap",
        help="the cap, in the smallest unit of the payment's currency (cents; whole yen)",
    )
    approve.add_argument(
        "--exact",
        action="store_true",
        help="approve one refund of exactly the cap, once (what the person saw), not a cap",
    )
    approve.add_argument("--hours", type=float, default=24.0, dest="hours")
    approve.add_argument("--by", default=None, help="who approves (default: $USER)")
    approve.add_argument(
        "--stripe-base",
        default=None,
        metavar="URL",
        dest="approve_stripe_base",
        help="check the payment at this emulator instead of Stripe test mode",
    )
    revoke = cmds.add_parser("revoke", help="revoke a payment's approval")
    revoke.add_argument("payment", metavar="PAYMENT")
    revoke.add_argument("--by", default=None, help="who revokes (default: $USER)")


def run(args: argparse.Namespace) -> int:
    """Run `interlock-demo mcp ...` from the parsed arguments; returns the exit code."""
    from interlock import InterlockError, format_amount

    try:
        from interlock.mcp import grant_approval, lease_currency, revoke_approval
    except ImportError:
        print(
            "interlock-demo mcp needs the official MCP SDK: pip install 'interlock-demo[mcp]'",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.mcp_command in ("approve", "revoke"):
        store = _open_store()
        if store is None:
            return ExitCode.USAGE
        by = args.by or os.environ.get("USER") or "a person"
        try:
            if args.mcp_command == "approve":
                payment = _payment_to_approve(args.payment, args.approve_stripe_base)
                if isinstance(payment, str):
                    print(f"interlock-demo mcp: {payment}", file=sys.stderr)
                    return ExitCode.USAGE
                lease = grant_approval(
                    store, args.payment, args.cap, hours=args.hours, by=by, now=time.time(),
                    approver=_approver(), currency=payment.currency or None, exact=args.exact,
                )  # fmt: skip
                money = format_amount(lease.cap, lease_currency(lease))
                what = f"one refund of exactly {money}" if lease.exact else f"refunds up to {money}"
                print(
                    f"approved {what} on {args.payment} until "
                    f"{_utc(lease.expires_at)} (approval {lease.id})"
                )
            else:
                lease = revoke_approval(store, args.payment, by=by, now=time.time())
                print(f"revoked the approval for {args.payment} ({lease.id})")
        except InterlockError as e:
            print(f"interlock-demo mcp: {e}", file=sys.stderr)
            return ExitCode.USAGE
        finally:
            store.close()
        return ExitCode.OK
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    from mcp.server.mcpserver import MCPServer

    from interlock import (
        ConfigError,
        InterlockError,
        Owner,
        StripePayments,
        format_amount,
        make_stripe_client,
    )
    from interlock.mcp import (
        SERVER_NAME,
        RefundDesk,
        add_refund_tools,
        approval_state,
        current_approval,
        grant_approval,
        lease_currency,
    )
    from interlock_demo.errors import KeyRefusedError
    from interlock_demo.settings.keys import find_stripe_key
    from interlock_demo.settings.timing import demo_timing
    from interlock_demo.settings.worker import EMULATOR_KEY
    from workers.protocol.words import gate_event_text

    def log(text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} interlock-demo mcp: {text}", file=sys.stderr, flush=True)

    def usage(text: str) -> int:
        log(text)
        return ExitCode.USAGE

    if args.mcp_stripe_base and not args.mcp_offline:
        return usage("--stripe-base points the server at an emulator: add --offline")
    if (args.mcp_approve is None) != (args.mcp_cap is None):
        return usage("--approve PAYMENT and --cap CENTS go together")
    try:
        timing = demo_timing()
    except ConfigError as e:
        return usage(str(e))
    if args.mcp_offline:
        key = EMULATOR_KEY
    else:
        try:
            secret = find_stripe_key()
        except KeyRefusedError as e:
            return usage(str(e))
        if secret is None:
            return usage(
                "Stripe test mode needs a test key: set STRIPE_SECRET_KEY (sk_test_...) or "
                "run `stripe login`; or add --offline to use the loopback emulator"
            )
        key = secret.value
    store = _open_store()
    if store is None:
        return ExitCode.USAGE
    emulator = None
    try:
        base = args.mcp_stripe_base
        if args.mcp_offline and base is None:
            from interlock.testing import StripeEmulator

            emulator = StripeEmulator().start()
            base = emulator.url
        payments = StripePayments(
            make_stripe_client(key, timeout_s=timing.stripe_timeout_s, base_url=base)
        )
        now = time.time()
        notes = []
        if args.mcp_approve is not None:
            checked = _payment_to_approve(args.mcp_approve, base, payments)
            if isinstance(checked, str):
                return usage(checked)
            existing = current_approval(store, args.mcp_approve)
            if existing is None:
                lease = grant_approval(
                    store, args.mcp_approve, args.mcp_cap, hours=args.mcp_hours,
                    by="the --approve flag", now=now, approver=_approver(),
                    currency=checked.currency or None,
                )  # fmt: skip
                cap = format_amount(lease.cap, lease_currency(lease))
                log(f"approved refunds on {lease.target} up to {cap}")
            else:
                # A restarted server must not undo a revocation or refill a spent cap.
                cap = format_amount(existing.cap, lease_currency(existing))
                log(
                    f"{args.mcp_approve} already has an approval ({approval_state(existing, now)}, "
                    f"{cap} cap); --approve grants only a first one: use "
                    "`interlock-demo mcp revoke` and `approve` to change it"
                )
        elif args.mcp_offline:
            payment = payments.create_payment(OFFLINE_PAYMENT, metadata={"case": "mcp-offline"})
            lease = grant_approval(
                store, payment.id, OFFLINE_CAP, hours=args.mcp_hours, by="--offline", now=now,
                approver=_approver(), currency=payment.currency or None,
            )  # fmt: skip
            notes.append(
                f"Offline demo: payment {payment.id} "
                f"({format_amount(payment.amount, payment.currency)}) is approved for refunds "
                f"up to {format_amount(lease.cap, lease_currency(lease))}. The customer asked "
                f"for {format_amount(OFFLINE_CAP, payment.currency)} back."
            )
            log(notes[-1])

        def on_event(event: Event) -> None:
            text = gate_event_text(event)
            if text is not None:
                log(text)

        desk = RefundDesk(
            payments,
            store,
            timing=timing,
            owner=Owner.current("mcp-server"),
            log=log,
            on_event=on_event,
            approvers=_trusted(),
            signing_key=_receipt_key(),
            anchors=(_anchor(),),
        )
        desk.recover()
        where = "the loopback Stripe emulator" if args.mcp_offline else "Stripe test mode"
        instructions = " ".join(
            [
                f"Stripe refunds ({where}) guarded by interlock: read the payment with "
                "get_payment, then refund with issue_refund and a new request_id per decision.",
                *notes,
            ]
        )
        log(f"serving get_payment and issue_refund over stdio ({where})")
        # WARNING: at INFO the SDK's log setup would also print every Stripe request line.
        server = MCPServer(name=SERVER_NAME, instructions=instructions, log_level="WARNING")
        add_refund_tools(server, desk)
        server.run("stdio")
    except InterlockError as e:
        return usage(str(e))
    except Stopped as stop:
        # The server's normal end (the CLI's stop code for mcp is 0); the gate's journal
        # is what makes a refund cut off mid-call safe to leave.
        raise stop.having(
            "a refund cut off mid-call is in its journal and is settled when it starts "
            "again, never sent twice"
        ) from None
    finally:
        store.close()
        if emulator is not None:
            emulator.stop()
    return ExitCode.OK


def _payment_to_approve(
    payment: str, stripe_base: str | None, payments: Payments | None = None
) -> Payment | str:
    """The payment as Stripe has it (an approval is granted in its currency), or why it
    cannot be approved (not a payment at Stripe, or Stripe unreachable): an approval for a
    payment that does not exist would wait for one to appear."""
    from interlock import (
        PaymentsRejectedError,
        PaymentsUnsettledError,
        StripePayments,
        make_stripe_client,
    )
    from interlock.mcp import DeskError, check_payment_id
    from interlock_demo.errors import KeyRefusedError
    from interlock_demo.settings.keys import find_stripe_key

    try:
        check_payment_id(payment)
    except DeskError as e:
        return str(e)
    if payments is None:
        try:
            secret = find_stripe_key()
        except KeyRefusedError as e:
            return str(e)
        if secret is None:
            return (
                f"approving {payment} checks it at Stripe first: set STRIPE_SECRET_KEY to a test "
                "key (sk_test_...), or pass --stripe-base URL for an emulator"
            )
        client = make_stripe_client(secret.value, timeout_s=10.0, base_url=stripe_base)
        payments = StripePayments(client)
    try:
        return payments.get_payment(payment)
    except PaymentsRejectedError as e:
        return (
            f"not approved: Stripe has no payment {payment} ({e.code}: {e.provider_message}); "
            "check the id"
        )
    except PaymentsUnsettledError as e:
        return f"not approved: could not read {payment} at Stripe ({e.detail}); try again"


def _approver() -> Approver:
    """Support's approver, the demo's (made once under INTERLOCK_HOME, 0600): `approve`
    signs with it. The server only checks with its public key, except that its --approve
    and --offline grants at start sign with it too (a rehearsal's shortcut)."""
    from interlock_demo.settings.approver import paths_support_approver
    from interlock_demo.settings.paths import Paths

    return paths_support_approver(Paths.from_env())


def _trusted() -> Approvers:
    """The approvers the server's gate trusts: support's public key, from its file."""
    from interlock import Approvers
    from interlock_demo.settings.approver import paths_support_approver
    from interlock_demo.settings.paths import Paths

    paths = Paths.from_env()
    if not paths.approvers.exists():
        paths_support_approver(paths)  # made once, by whichever demo command runs first
    return Approvers.load(paths.approvers)


def _receipt_key() -> SigningKey:
    """The demo's receipt key (made once under INTERLOCK_HOME, 0600): the server's receipts
    are signed with it, never with a key from the presenter's environment."""
    from interlock_demo.settings.paths import Paths
    from interlock_demo.settings.receipt_key import paths_receipt_key

    return paths_receipt_key(Paths.from_env())


def _anchor() -> FileAnchor:
    """Where the server's receipt log is anchored: a folder of its own beside its journal,
    apart from the journal's file (the demo's runs have theirs)."""
    from interlock import FileAnchor
    from interlock_demo.settings.paths import Paths
    from interlock_demo.settings.private import private_dir

    folder = Path(Paths.from_env().home) / "mcp" / "anchor"
    private_dir(folder)
    return FileAnchor(folder / "heads.jsonl")


def _open_store() -> SQLiteStore | None:
    from interlock import SQLiteStore, StoreError
    from interlock_demo.settings.paths import Paths
    from interlock_demo.settings.private import create_private_journal, private_dir

    path = Path(Paths.from_env().home) / "mcp" / "interlock.sqlite3"
    try:
        # Who approved what, and every receipt: the user's alone, as the demo's journal is.
        private_dir(path.parent)
        if path.parent.stat().st_mode & 0o077:
            path.parent.chmod(0o700)
        if not path.exists():
            create_private_journal(path)
        return SQLiteStore(path)
    except StoreError as e:
        print(f"interlock-demo mcp: {e}", file=sys.stderr)
        return None
    except OSError as e:
        print(
            f"interlock-demo mcp: cannot keep the journal in {path.parent}: "
            f"{e.strerror or e}; set INTERLOCK_HOME to a folder of yours",
            file=sys.stderr,
        )
        return None


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))
