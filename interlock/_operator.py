"""The operator's commands of `python -m interlock`: `pending`, `show`, `resolve`, `revoke`.

`pending STORE` lists every action with an intent and no outcome: its state (`journaled`,
`claimed`, `sending`, `unknown`), why it is unsettled, since when, who holds its claim
until when, and the evidence the journal holds (each send attempt with its idempotency
key, an unknown mark); `--stripe` adds a lookup of each at Stripe. `show ACTION STORE` is
one action's journal records, its receipt and its inclusion proof once logged.

`resolve ACTION STORE --by NAME` settles an action whose outcome is unknown, or one left
pending after a send: `--stripe` looks its send up, and a refund found is adopted through
the gate's own recovery (the receipt's owner is `operator:NAME`, and it records their name
and any `--reason`, as a refusal's does); with `--refused --reason
TEXT` the person named marks it refused (code `refused_by_person`, their name and reason
in its receipt). Nothing is ever sent: a lookup that finds nothing changes nothing.
`revoke LEASE STORE --by NAME [--reason TEXT]` revokes an approval: every later check
refuses under it, and a receipt of its own (who revoked which approval, when, why; owner
`operator:NAME`) is written in the same commit, which `verify` holds the approval's row to
and `show` points at from each action under it.

Every command refuses a live Stripe key in `STRIPE_SECRET_KEY` (`sk_live_`, `rk_live_`),
prints what it will change and asks before it writes (`--yes` answers for a script; with
no terminal and no `--yes` it writes nothing), and has `--json` (no key in it). Exit 0
when done, 1 when there is nothing to do as asked (no such action, already settled, not
unknown, nothing found at Stripe, declined), 2 on bad usage (a live key, no store, no
`--yes` without a terminal), 3 when a stop signal came first.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from interlock._core.approvals import UNSIGNED_APPROVALS, Approvers
from interlock._core.claims import Owner
from interlock._core.config import Timing
from interlock._core.effects import Effect, Found, Observation, StripeRefund, StripeTransfer
from interlock._core.errors import (
    ActionError,
    ConfigError,
    InterlockError,
    LeaseError,
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    StoreError,
)
from interlock._core.gate import Gate
from interlock._core.journal import (
    CODE_REFUSED_BY_PERSON,
    CONFLICT_PREFIX,
    ActionState,
    JournalRecord,
    Settlement,
    Store,
)
from interlock._core.leases import Lease
from interlock._core.log import LogKeeper, inclusion
from interlock._core.merkle import leaf_hash
from interlock._core.payments import Transfers, is_test_key
from interlock._core.receipts import Check, Receipt, load_json
from interlock._core.signals import Interrupted, stop_signals_interrupt
from interlock._core.signing import (
    HEAD_TYPE,
    RECEIPT_TYPE,
    SigningKey,
    cose_sign1,
    signing_key_from_env,
)
from interlock._stores.open import open_store
from interlock._stores.postgres import PostgresStore

if TYPE_CHECKING:
    from interlock._stripe.adapter import StripePayments

COMMANDS = ("pending", "show", "resolve", "revoke")
# The longest `--by` and `--reason` taken: a name, and a sentence or two.
MAX_WORDS = {"by": 200, "reason": 2000}
PROG = "python -m interlock"


class _Refused(Exception):
    """What stops a command, in words, with its exit code (1: nothing to do as asked; 2:
    bad usage)."""

    def __init__(self, words: str, code: int = 1) -> None:
        super().__init__(words)
        self.words = words
        self.code = code


# -- shared with `proof` ------------------------------------------------------------------


def shown(text: str) -> str:
    """`text` with every control character escaped: a string read from the store (an
    action id, a reason) must not move the cursor or recolour the verdict on screen."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def signed(body: str, signature: str | None, content_type: str) -> dict[str, str | None]:
    """A signed body as the proof shows it, with its COSE_Sign1 export (base64url): the same
    signature, which any COSE library checks with the public key."""
    out: dict[str, str | None] = {"body": body, "signature": signature}
    key_id = load_json(body).get("key_id")
    if signature is not None and isinstance(key_id, str):
        try:
            message = cose_sign1(body.encode(), signature, key_id, content_type)
        except ValueError:
            return out  # a stored signature that is not one: verify names it
        out["cose_sign1"] = base64.urlsafe_b64encode(message).decode()
    return out


def proof_data(store: Store, action_id: str, receipt: Receipt) -> dict[str, Any] | None:
    """The receipt with its place in the log, the latest signed tree head and the inclusion
    proof against it (what `proof` prints); None while the receipt is in no head yet."""
    found = inclusion(store, receipt.seq)
    if found is None:
        return None
    entry, stored, path = found
    return {
        "action_id": action_id,
        "receipt": signed(receipt.body_text, receipt.signature, RECEIPT_TYPE),
        "leaf_index": entry.leaf,
        # The RFC 9162 leaf hash, which a receipt written before the log does not store.
        "leaf_hash": leaf_hash(receipt.body_text.encode()).hex(),
        "tree_size": stored.size,
        "tree_head": signed(stored.body_text, stored.signature, HEAD_TYPE),
        "inclusion_proof": [h.hex() for h in path],
    }


# -- the command line --------------------------------------------------------------------


def add_parsers(sub: Any) -> None:
    """Add the four operator commands to `python -m interlock`'s subparsers."""

    def store_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "store",
            nargs="?",
            help="path of the SQLite store or a postgresql:// URL (or INTERLOCK_STORE)",
        )
        p.add_argument("--store", dest="store_option", metavar="PATH_OR_URL", help="the same")
        p.add_argument("--json", action="store_true", help="print the result as JSON")

    def writes(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--yes", action="store_true", help="do it without asking (needed without a terminal)"
        )

    p = sub.add_parser("pending", help="every unsettled action: why, since when, what evidence")
    store_args(p)
    p.add_argument(
        "--stripe",
        action="store_true",
        help="look each one up at Stripe too (key: STRIPE_SECRET_KEY, a test key)",
    )
    s = sub.add_parser("show", help="an action's journal records, receipt and inclusion proof")
    s.add_argument("action", help="the action's id")
    store_args(s)
    r = sub.add_parser(
        "resolve",
        help="settle an unknown action: adopt the send a Stripe lookup finds, or --refused",
    )
    r.add_argument("action", help="the action's id")
    store_args(r)
    r.add_argument(
        "--stripe",
        action="store_true",
        help="look the send up at Stripe (key: STRIPE_SECRET_KEY, a test key) and adopt it",
    )
    r.add_argument(
        "--refused",
        action="store_true",
        help="mark it refused: a person checked and no refund was made (with --reason)",
    )
    r.add_argument("--by", metavar="NAME", required=True, help="who resolves it (in the receipt)")
    r.add_argument("--reason", metavar="TEXT", help="why, in the receipt (required with --refused)")
    writes(r)
    v = sub.add_parser("revoke", help="revoke an approval: every later check refuses under it")
    v.add_argument("lease", help="the approval's (lease's) id")
    store_args(v)
    v.add_argument("--by", metavar="NAME", required=True, help="who revokes it (in the receipt)")
    v.add_argument("--reason", metavar="TEXT", help="why, in the receipt")
    writes(v)


def run(args: argparse.Namespace, location: str) -> int:
    """Run one operator command on the store at `location`; returns the exit code."""
    try:
        _check_key(os.environ.get("STRIPE_SECRET_KEY", ""))
        for name in ("by", "reason"):
            _check_words(name, getattr(args, name, None))
        with stop_signals_interrupt():
            if args.command == "pending":
                return _pending(location, args)
            if args.command == "show":
                return _show(location, args)
            if args.command == "resolve":
                return _resolve(location, args)
            return _revoke(location, args)
    except _Refused as e:
        print(f"{PROG} {args.command}: {e.words}", file=sys.stderr)
        return e.code
    except Interrupted as stop:
        print(
            f"{PROG} {args.command} stopped by {stop.words} before it finished; what it "
            "printed as done is done, nothing else was changed",
            file=sys.stderr,
        )
        return 3


def key_refusal(
    key: str,
    source: str = "STRIPE_SECRET_KEY",
    *,
    otherwise: str = "leave out --stripe to check the receipts alone",
) -> str | None:
    """Why these commands will not send `key` to Stripe, in words that never repeat it;
    None for a test key (`sk_test_...`, `rk_test_...`).

    The same rule as every `interlock-demo` command: a command run by hand against a live
    account is one typo from acting on real money, so it is refused before any request.
    """
    if is_test_key(key):
        return None
    kind = "not a Stripe test key"
    for prefix, words in (("sk_live_", "a live secret key"), ("rk_live_", "a live restricted key")):
        if key.startswith(prefix):
            kind = words
    return (
        f"refused the Stripe key from {source}: it is {kind}. This command reads Stripe only "
        "with test keys (sk_test_... or rk_test_...): set STRIPE_SECRET_KEY to a test key "
        f"from the Stripe dashboard (Developers > API keys, test mode), or {otherwise}."
    )


def _check_key(key: str) -> None:
    """Refuse any key but a test one, before anything is read: an operator's command changes
    money's records (the same rule and words as `verify --stripe`)."""
    refused = key_refusal(key, otherwise="unset it to work on the store alone") if key else None
    if refused is not None:
        raise _Refused(f"{refused} Nothing was read or changed.", 2)


def _check_words(name: str, value: str | None) -> None:
    if value is None:
        return
    most = MAX_WORDS[name]
    if not value.strip() or len(value) > most or not value.isprintable():
        raise _Refused(
            f"--{name} must be printable text of 1 to {most} characters; nothing was changed",
            2,
        )


def _key() -> str:
    key = os.environ.get("STRIPE_SECRET_KEY", "")
    if not key:
        raise _Refused("--stripe needs a Stripe test key: set STRIPE_SECRET_KEY", 2)
    return key


def _payments(key: str) -> StripePayments:
    """Stripe over the library's deadline client, sized by the gate's timing (the same
    client a gate sends with), at `INTERLOCK_STRIPE_BASE` when set."""
    from interlock._stripe.adapter import StripePayments, make_stripe_client

    base = os.environ.get("INTERLOCK_STRIPE_BASE") or None
    return StripePayments(
        make_stripe_client(key, timeout_s=Timing.from_env().stripe_timeout_s, base_url=base)
    )


def _effect(payments: Any, state: ActionState) -> Effect:
    """The Stripe effect that looks this action's kind up."""
    intent = state.intent
    if intent.kind == "refund":
        return StripeRefund(payments)
    if intent.kind == "transfer" and isinstance(payments, Transfers):
        return StripeTransfer(payments, currency=intent.currency or "usd")
    raise _Refused(
        f"action {shown(intent.action_id)} is a {shown(intent.kind)}: only refunds and "
        "transfers are looked up at Stripe here; its own gate's recover() settles it"
    )


def _open(location: str, *, read_only: bool) -> Store:
    try:
        return open_store(location, read_only=read_only)
    except StoreError as e:
        raise _Refused(str(e), 2) from e


def _when(t: float | None) -> str | None:
    """A store time as UTC text (to the second), as every command shows it."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(seconds: float) -> str:
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h"
    return f"{s // 86400} days"


def _confirm(args: argparse.Namespace, plan: list[str]) -> None:
    """Say what will be done, then ask (unless `--yes`); `_Refused` when not confirmed."""
    out = sys.stderr if args.json else sys.stdout
    for line in plan:
        print(line, file=out)
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise _Refused(
            "not confirmed: stdin is not a terminal; run it again with --yes to do it "
            "(nothing was changed)",
            2,
        )
    print("Go ahead? [y/N] ", end="", file=out, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise _Refused("declined; nothing was changed")


def _emit(args: argparse.Namespace, data: Mapping[str, Any], lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for line in lines:
            print(line)


# -- pending ------------------------------------------------------------------------------


def _state_of(state: ActionState, now: float) -> str:
    claim = state.claim
    if state.unknown is not None:
        return "unknown"
    if claim is not None and claim.sending:
        return "sending"
    if claim is not None and claim.live(now):
        return "claimed"
    return "journaled"


def _why(state: ActionState, word: str, sends: list[JournalRecord], now: float) -> str:
    claim = state.claim
    if word == "unknown":
        unknown = state.unknown or ""
        if unknown.startswith(CONFLICT_PREFIX):
            return (
                f"{unknown}; never adopted and never resent: a person decides "
                "(resolve --refused, or re-approve it as a new action)"
            )
        return (
            f"{unknown}: Stripe may have made it, so it is only looked up, never resent "
            "(resolve --stripe adopts what the lookup finds)"
        )
    if word == "sending":
        assert claim is not None
        at = _when(sends[-1].at) if sends else "?"
        if claim.live(now):
            return (
                f"a send started at {at} and no outcome is recorded yet: its worker is "
                "waiting for Stripe's answer, or died"
            )
        return (
            f"a send started at {at} and its claim ran out with no outcome recorded: its "
            "worker died or stalled; a gate's recover() looks it up before anything else "
            "(or resolve --stripe)"
        )
    if word == "claimed":
        return "a worker holds its claim and has not sent yet: it is checking it"
    if state.attempts == 0:
        return (
            "journaled without a claim: it waits for its target's turn (another action on "
            "the same target was running); a gate's recover() runs it"
        )
    return (
        "its claim ran out, or was released, before any send: its worker stopped; a "
        "gate's recover() runs it from its checks"
    )


def _claim_data(state: ActionState, now: float) -> dict[str, Any] | None:
    claim = state.claim
    if claim is None:
        return None
    return {
        "owner": claim.owner.label(),
        "host": claim.owner.host,
        "epoch": claim.epoch,
        "sending": claim.sending,
        "until": _when(claim.expires_at),
        "live": claim.live(now),
    }


def _evidence(state: ActionState, history: list[JournalRecord]) -> list[dict[str, Any]]:
    """What the journal holds about sends: each attempt (the gate sends every one under the
    action's id as its idempotency key) and the unknown mark."""
    found: list[dict[str, Any]] = []
    for r in history:
        if r.record == "sending":
            item: dict[str, Any] = {
                "kind": "send_attempt",
                "at": _when(r.at),
                "epoch": r.data.get("epoch"),
                "idempotency_key": state.intent.action_id,
            }
            if isinstance(r.data.get("evidence"), dict):
                item["metadata"] = dict(r.data["evidence"])
            found.append(item)
        elif r.record == "unknown":
            reason = r.data.get("reason")
            found.append({"kind": "unknown_mark", "at": _when(r.at), "reason": reason})
    return found


def _lookup(effect: Effect, state: ActionState) -> tuple[Found | None, Found | None]:
    """One read at Stripe: the action's own send (matching its intent) and one naming it
    that does not match (a conflict)."""
    intent = state.intent
    try:
        obs: Observation = effect.observe(intent)
    except PaymentsAuthError as e:
        raise _Refused(f"Stripe refused the key: {e}; nothing was changed", 2) from e
    except (PaymentsRejectedError, PaymentsUnsettledError) as e:
        raise _Refused(
            f"the lookup of action {shown(intent.action_id)} at Stripe settled nothing ({e}); "
            "nothing was changed: try again"
        ) from e
    own = obs.own if obs.own is not None and obs.own.mismatch(intent) is None else None
    conflict = None
    if own is None:
        conflict = obs.conflict or obs.own
    return own, conflict


def _found_data(f: Found | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"id": f.external_id, "amount": f.amount, "status": f.status, "counts": f.counts}


def _lookup_data(own: Found | None, conflict: Found | None) -> dict[str, Any]:
    return {
        "kind": "lookup",
        "own": _found_data(own),
        "conflict": _found_data(conflict),
        "words": _lookup_words(own, conflict),
    }


def _lookup_evidence(payments: Any, state: ActionState) -> dict[str, Any]:
    """`pending`'s lookup of one action: what it found, or why it found nothing (a kind
    not looked up here, an answer that settled nothing), which the listing goes on past."""
    try:
        return _lookup_data(*_lookup(_effect(payments, state), state))
    except _Refused as e:
        if e.code == 2:
            raise  # the key: every lookup would fail alike
        return {"kind": "lookup", "own": None, "conflict": None, "words": f"not looked up: {e}"}


def _lookup_words(own: Found | None, conflict: Found | None) -> str:
    if own is not None:
        return f"lookup: its own {own.external_id} ({own.amount}, {own.status}) is at Stripe"
    if conflict is not None:
        return (
            f"lookup: {conflict.external_id} names it but does not match it "
            f"({conflict.amount}, {conflict.status}): a conflict"
        )
    return "lookup: no send naming it at Stripe"


def _unsettled(store: Store, action_id: str, now: float, payments: Any) -> dict[str, Any] | None:
    """One unsettled action as `pending` reports it (None once it is settled); with
    `payments`, looked up at Stripe too."""
    state = store.action(action_id)
    if state is None or state.settlement is not None:
        return None
    history = store.history(action_id)
    intent = state.intent
    word = _state_of(state, now)
    sends = [r for r in history if r.record == "sending"]
    evidence = _evidence(state, history)
    if payments is not None:
        evidence.append(_lookup_evidence(payments, state))
    return {
        "action_id": intent.action_id,
        "kind": intent.kind,
        "target": intent.target,
        "amount": intent.amount,
        "currency": intent.currency,
        "lease_id": intent.lease_id,
        "state": word,
        "why": _why(state, word, sends, now),
        "since": _when(intent.created_at),
        "for_s": round(now - intent.created_at, 1),
        "attempts": state.attempts,
        "claim": _claim_data(state, now),
        "evidence": evidence,
    }


def _evidence_words(e: Mapping[str, Any]) -> str:
    if e["kind"] == "send_attempt":
        return (
            f"send attempt at {e['at']} (epoch {e['epoch']}), idempotency key "
            f"{shown(str(e['idempotency_key']))}"
        )
    if e["kind"] == "unknown_mark":
        return f"unknown mark at {e['at']}: {shown(str(e['reason']))}"
    return shown(str(e["words"]))


def _pending(location: str, args: argparse.Namespace) -> int:
    payments = _payments(_key()) if args.stripe else None
    store = _open(location, read_only=True)
    try:
        now = store.now()
        items = []
        for aid in store.pending():
            item = _unsettled(store, aid, now, payments)
            if item is not None:
                items.append(item)
    finally:
        store.close()
        if payments is not None:
            payments.close()
    where = PostgresStore.describe(location)
    lines = [f"{shown(where)}: {len(items)} unsettled actions (store clock {_when(now)})"]
    for i in items:
        amount = f"{i['amount']} {i['currency'] or ''}".rstrip()
        lines.append(
            f"{shown(i['action_id'])}  {shown(i['kind'])} {amount} on {shown(i['target'])}  "
            f"{i['state']}  since {i['since']} ({_ago(i['for_s'])})"
        )
        lines.append(f"  why: {shown(i['why'])}")
        c = i["claim"]
        if c is not None:
            held = "live" if c["live"] else "ran out"
            sending = ", sending" if c["sending"] else ""
            lines.append(
                f"  claim: {shown(c['owner'])} on {shown(c['host'])}, epoch {c['epoch']}"
                f"{sending}, until {c['until']} ({held})"
            )
        for e in i["evidence"]:
            lines.append(f"  evidence: {_evidence_words(e)}")
    _emit(args, {"store": where, "now": _when(now), "pending": items}, lines)
    return 0


# -- show ---------------------------------------------------------------------------------


def _show(location: str, args: argparse.Namespace) -> int:
    store = _open(location, read_only=True)
    try:
        state = store.action(args.action)
        if state is None:
            raise _Refused(f"action {shown(args.action)} is not in the store")
        now = store.now()
        history = store.history(args.action)
        receipt = state.receipt
        proof = None if receipt is None else proof_data(store, args.action, receipt)
        lease = store.lease(state.intent.lease_id)
        revocation = None if lease is None else _revocation(store, lease)
    finally:
        store.close()
    intent, s = state.intent, state.settlement
    word = s.status if s is not None else _state_of(state, now)
    data: dict[str, Any] = {
        "action_id": intent.action_id,
        "state": word,
        "intent": intent.to_dict(),
        "claim": _claim_data(state, now),
        "unknown": state.unknown,
        "settlement": None if s is None else s.to_dict(),
        "history": [
            {"seq": r.seq, "at": _when(r.at), "record": r.record, "data": dict(r.data)}
            for r in history
        ],
        "receipt": None
        if receipt is None
        else {"seq": receipt.seq, "hash": receipt.hash, "body": receipt.body_text},
        "proof": proof,
        "approval": _approval_data(lease, revocation),
    }
    amount = f"{intent.amount} {intent.currency or ''}".rstrip()
    head = (
        f"action {shown(intent.action_id)}: {shown(intent.kind)} {amount} on "
        f"{shown(intent.target)} under approval {shown(intent.lease_id)}: {word}"
    )
    if s is not None and s.external_id:
        head += f" ({shown(s.external_id)})"
    lines = [head]
    if lease is not None and lease.revoked:
        lines.append(
            f"approval {shown(lease.id)} revoked by {shown(lease.revoked_by or '?')} at "
            f"{_when(lease.revoked_at)}: "
            + (
                "no receipt (revoked through the library, or by an older version)"
                if revocation is None
                else f"receipt {revocation.seq} (hash {revocation.hash})"
            )
        )
    lines.append("history:")
    for r in history:
        text = json.dumps(dict(r.data), sort_keys=True)
        lines.append(f"  {r.seq:>6} {_when(r.at)} {r.record:<8} {shown(text)}")
    if receipt is None:
        lines.append("receipt: none (not settled)")
    else:
        lines.append(f"receipt {receipt.seq}, hash {receipt.hash}:")
        lines.append(f"  {shown(receipt.body_text)}")
        lines.append(f"  signature: {receipt.signature}")
    if proof is not None:
        lines.append(
            f"proof: leaf {proof['leaf_index']} of a tree of {proof['tree_size']}, leaf hash "
            f"{proof['leaf_hash']}"
        )
        lines.append(f"  tree head: {shown(str(proof['tree_head']['body']))}")
        lines.extend(f"  {h}" for h in proof["inclusion_proof"])
    elif receipt is not None:
        lines.append(
            "proof: not in a signed tree head yet (a gate puts it there at its next catch-up)"
        )
    _emit(args, data, lines)
    return 0


def _approval_data(lease: Lease | None, revocation: Receipt | None) -> dict[str, Any] | None:
    """The action's approval as `show --json` gives it: whether and by whom it was
    revoked, with the revocation's receipt."""
    if lease is None:
        return None
    return {
        "lease_id": lease.id,
        "revoked": lease.revoked,
        "revoked_by": lease.revoked_by,
        "revoked_at": _when(lease.revoked_at),
        "revocation_receipt": None
        if revocation is None
        else {"seq": revocation.seq, "hash": revocation.hash, "body": revocation.body_text},
    }


# -- resolve ------------------------------------------------------------------------------


class LookupOnly:
    """An effect that reads and never sends: `resolve` settles through the gate's recovery
    only on a send the lookup found, and this makes sure no path of it sends instead."""

    def __init__(self, effect: Effect) -> None:
        self.effect = effect
        self.kind = effect.kind

    def observe(self, intent: Any) -> Observation:
        """The wrapped effect's read."""
        return self.effect.observe(intent)

    def send(self, intent: Any, idempotency_key: str) -> Found:
        """Never: raises `ActionError`."""
        raise ActionError(
            intent.action_id,
            "was about to be sent by `resolve`, which never sends: stopped before the call",
        )

    def __getattr__(self, name: str) -> Any:
        effect = self.__dict__.get("effect")
        if effect is None:
            raise AttributeError(name)
        return getattr(effect, name)


def _resolvable(state: ActionState, history: list[JournalRecord]) -> None:
    """`_Refused` in words unless the action is unsettled and unknown or sent."""
    aid = shown(state.intent.action_id)
    s = state.settlement
    if s is not None:
        found = f" ({shown(s.external_id)})" if s.external_id else ""
        raise _Refused(
            f"action {aid} is already settled: {s.status}{found} at {_when(s.at)}; "
            "nothing to resolve (show it with: show ACTION STORE)"
        )
    if state.unknown is None and not any(r.record == "sending" for r in history):
        raise _Refused(
            f"action {aid} is not unknown and was never sent: nothing to resolve; a gate's "
            "recover() runs it from its checks (pending STORE says why it waits)"
        )


def _held(state: ActionState) -> str:
    claim = state.claim
    assert claim is not None
    sending = " (sending: a send may still be in flight)" if claim.sending else ""
    return (
        f"action {shown(state.intent.action_id)} is claimed by {shown(claim.owner.label())} "
        f"until {_when(claim.expires_at)}{sending}: run resolve again after that; nothing "
        "was changed"
    )


def _check_claim(state: ActionState, now: float, *, found_own: bool) -> None:
    """`_Refused` while another worker's claim keeps this one off (by the claim's own rule,
    which a found refund relaxes for a dead owner's `sending` claim), before any plan."""
    claim, grace = state.claim, Timing.from_env().grace_s
    operator = Owner.current("operator")
    if claim is not None and not claim.replaceable_by(
        operator, now, grace_s=grace, found_own=found_own
    ):
        raise _Refused(_held(state))


def _signing_key() -> SigningKey | None:
    try:
        return signing_key_from_env()
    except ConfigError as e:
        raise _Refused(str(e), 2) from e


def _resolve(location: str, args: argparse.Namespace) -> int:
    if args.refused and not args.reason:
        raise _Refused("--refused needs --reason TEXT: the receipt records why", 2)
    if not args.refused and not args.stripe:
        raise _Refused(
            "resolve adopts only what a lookup finds: give --stripe (a test key in "
            "STRIPE_SECRET_KEY), or --refused --reason TEXT when a person checked that no "
            "refund was made",
            2,
        )
    payments = _payments(_key()) if args.stripe else None
    try:
        return _resolve_with(location, args, payments)
    finally:
        if payments is not None:
            payments.close()


def _resolve_with(location: str, args: argparse.Namespace, payments: Any) -> int:
    aid = args.action
    store = _open(location, read_only=True)
    try:
        state = store.action(aid)
        if state is None:
            raise _Refused(f"action {shown(aid)} is not in the store")
        _resolvable(state, store.history(aid))
        now = store.now()
    finally:
        store.close()
    effect = None if payments is None else _effect(payments, state)
    own, conflict = (None, None) if effect is None else _lookup(effect, state)
    _check_claim(state, now, found_own=own is not None)
    key = _signing_key()
    receipt = (
        f"a receipt signed with key {key.key_id}"
        if key
        else "an UNSIGNED receipt (set INTERLOCK_SIGNING_KEY to the gate's key to sign it)"
    )
    intent = state.intent
    what = f"action {shown(aid)} ({shown(intent.kind)} {intent.amount} on {shown(intent.target)})"
    if args.refused:
        if own is not None:
            raise _Refused(
                f"{what}: its own {own.external_id} ({own.amount}, {own.status}) is at "
                "Stripe, so it was made: adopt it (resolve without --refused); nothing was "
                "changed"
            )
        if effect is None:
            looked = f"Stripe was NOT looked up: {shown(args.by)} vouches that no refund was made"
        else:
            looked = _lookup_words(own, conflict)
        plan = [
            f"{what} is {_state_of(state, now)}; {looked}.",
            f"resolve will mark it refused by {shown(args.by)} ({shown(args.reason)}), code "
            f"{CODE_REFUSED_BY_PERSON}: its reservation on approval {shown(intent.lease_id)} "
            f"is released and {receipt} records it. Nothing is sent.",
        ]
        _confirm(args, plan)
        return _refuse(location, args, state, effect is not None, conflict, key)
    if conflict is not None:
        raise _Refused(
            f"{what}: {_lookup_words(own, conflict)}; it is never adopted: a person decides "
            "(resolve --refused, or re-approve it as a new action); nothing was changed"
        )
    if own is None:
        raise _Refused(
            f"{what}: no send naming it at Stripe, so nothing is adopted and nothing was "
            f"changed; it stays {_state_of(state, now)}. When a person has checked Stripe: resolve "
            f"{shown(aid)} STORE --refused --by NAME --reason TEXT"
        )
    verdict = "adopted" if own.counts else f"failed (refund_failed: it is {own.status})"
    plan = [
        f"{what}: {_lookup_words(own, None)}.",
        f"resolve will settle it {verdict} through the gate's recovery, with {receipt} "
        f"whose owner is operator:{shown(args.by)}"
        + (f" and which records why ({shown(args.reason)})" if args.reason else "")
        + ". Nothing is sent.",
    ]
    _confirm(args, plan)
    return _adopt(location, args, effect, key)


class Vouched:
    """A store whose receipts also name the person who settles through it: `resolve`'s
    adoption goes through the gate's own recovery, and this adds the operator's name and
    reason to the receipt it seals (as `resolve --refused` records them), so that the
    signed receipt says who adopted the send and why, not only the machine's reasons."""

    def __init__(self, store: Store, by: str, reason: str | None, command: str) -> None:
        self.store = store
        self.operator = {"by": by, "reason": reason, "command": command}

    def settle(
        self,
        action_id: str,
        epoch: int,
        owner: Owner,
        settlement: Settlement,
        checks: list[Check],
        extra: Mapping[str, Any],
        key: SigningKey | None,
    ) -> Receipt | None:
        """The store's commit 3, with the person's check and the `operator` field added."""
        person = Check(
            "person",
            "a person's decision to settle an action by what a lookup found",
            {"by": self.operator["by"], "reason": self.operator["reason"]},
            True,
        )
        return self.store.settle(
            action_id,
            epoch,
            owner,
            settlement,
            [*checks, person],
            {**extra, "operator": dict(self.operator)},
            key,
        )

    def __getattr__(self, name: str) -> Any:
        store = self.__dict__.get("store")
        if store is None:
            raise AttributeError(name)
        return getattr(store, name)


def _adopt(location: str, args: argparse.Namespace, effect: Any, key: SigningKey | None) -> int:
    store = _open(location, read_only=False)
    gate = Gate(
        cast(Store, Vouched(store, args.by, args.reason, "resolve --stripe")),
        LookupOnly(effect),
        owner=Owner.current(f"operator:{args.by}"),
        signing_key=key,
        # The approval is checked only before a send, which resolve never reaches: the
        # gate's trust list is given so that it can be built where none is configured.
        approvers=Approvers.from_env() or UNSIGNED_APPROVALS,
    )
    try:
        try:
            outcome = gate.recover_action(args.action, wait=False)
        except InterlockError as e:
            raise _Refused(f"{e}; nothing was settled") from e
        gate.close()
    finally:
        store.close()
    data = {
        "action_id": outcome.action_id,
        "status": outcome.status,
        "reason": outcome.reason,
        "external_id": outcome.external_id,
        "receipt": None if outcome.receipt is None else outcome.receipt.hash,
        "operator": args.by,
    }
    if not outcome.settled:
        if args.json:
            print(json.dumps(data, indent=2))
        raise _Refused(
            f"action {shown(args.action)} is still pending: {shown(outcome.reason or '')}; "
            "nothing was settled"
        )
    receipt = outcome.receipt
    lines = [
        f"action {shown(args.action)}: {outcome.status} {outcome.external_id}, receipt "
        f"{receipt.seq if receipt else '?'} (hash {data['receipt']}) by operator:{shown(args.by)}"
    ]
    _emit(args, data, lines)
    return 0


def _refuse(
    location: str,
    args: argparse.Namespace,
    state: ActionState,
    looked: bool,
    conflict: Found | None,
    key: SigningKey | None,
) -> int:
    aid, by, why = args.action, args.by, args.reason
    owner = Owner.current(f"operator:{by}")
    timing = Timing.from_env()
    store = _open(location, read_only=False)
    try:
        attempt = store.take_claim(aid, owner, timing.claim_ttl_s, timing.grace_s)
        if attempt.status == "settled":
            raise _Refused(f"action {shown(aid)} was settled meanwhile; nothing was changed")
        if attempt.status == "held":
            raise _Refused(_held(attempt.state))
        if attempt.status == "busy":
            raise _Refused(
                f"another action on {shown(state.intent.target)} is running: run resolve "
                "again after it; nothing was changed"
            )
        checks = [
            Check(
                "person",
                "a person's decision on an action whose outcome is not known",
                {"by": by, "reason": why},
                True,
            )
        ]
        if looked:
            checks.append(
                Check(
                    "lookup",
                    "a refund at Stripe naming this action and matching it, if one exists",
                    "none" if conflict is None else f"conflict: {conflict.external_id}",
                    True,
                )
            )
        extra: dict[str, Any] = {
            "context": dict(state.intent.context),
            "unsettled_answers": [],
            "emulated": [],
            "idempotency_key": None,
            "operator": {"by": by, "reason": why, "command": "resolve --refused"},
        }
        verdict = Settlement("refused", f"refused by {by}: {why}", code=CODE_REFUSED_BY_PERSON)
        try:
            receipt = store.settle(aid, attempt.epoch, owner, verdict, checks, extra, key)
        except (ActionError, LeaseError) as e:
            store.release(aid, attempt.epoch)
            raise _Refused(f"{e}; nothing was settled") from e
        if receipt is None:
            raise _Refused(f"action {shown(aid)}: the claim was lost before it was settled")
        LogKeeper(store, key).catch_up()
    finally:
        store.close()
    data = {
        "action_id": aid,
        "status": "refused",
        "code": CODE_REFUSED_BY_PERSON,
        "reason": verdict.reason,
        "receipt": receipt.hash,
        "operator": by,
    }
    lines = [
        f"action {shown(aid)}: refused by {shown(by)}, receipt {receipt.seq} (hash {receipt.hash})"
    ]
    _emit(args, data, lines)
    return 0


# -- revoke -------------------------------------------------------------------------------


def _revocation(store: Store, lease: Lease) -> Receipt | None:
    """The receipt a revocation of `lease` wrote (None: revoked without one)."""
    seq = lease.revocation_receipt
    return None if seq is None else store.receipt(seq)


def _revoke(location: str, args: argparse.Namespace) -> int:
    store = _open(location, read_only=True)
    try:
        lease = store.lease(args.lease)
        earlier = None if lease is None else _revocation(store, lease)
    finally:
        store.close()
    if lease is None:
        raise _Refused(f"approval {shown(args.lease)} is not in the store; check the id")
    lid = shown(lease.id)
    if lease.revoked:
        data = {
            "lease_id": lease.id,
            "revoked_at": _when(lease.revoked_at),
            "revoked_by": lease.revoked_by,
            "receipt": None if earlier is None else earlier.hash,
            "changed": False,
        }
        lines = [
            f"approval {lid} was already revoked by {shown(lease.revoked_by or '?')} at "
            f"{_when(lease.revoked_at)}"
            + ("" if earlier is None else f" (receipt {earlier.seq}, hash {earlier.hash})")
            + "; nothing was changed"
        ]
        _emit(args, data, lines)
        return 0
    key = _signing_key()
    receipt_words = (
        f"a receipt signed with key {key.key_id}"
        if key
        else "an UNSIGNED receipt (set INTERLOCK_SIGNING_KEY to the gate's key to sign it)"
    )
    reserved = ", ".join(f"{shown(a)} ({n})" for a, n in sorted(lease.reservations.items()))
    why = f" ({shown(args.reason)})" if args.reason else ""
    plan = [
        f"approval {lid}: {shown(lease.kind)} on {shown(lease.target)}, cap {lease.cap}, "
        f"spent {lease.spent}, expires {_when(lease.expires_at)}, granted by "
        f"{shown(lease.granted_by)}" + (f"; reserved by {reserved}" if reserved else ""),
        f"revoke will record it revoked by {shown(args.by)}{why}, with {receipt_words} whose "
        f"owner is operator:{shown(args.by)}: every later check refuses under it (an action "
        "already sending is not stopped: its answer or lookup settles it).",
    ]
    _confirm(args, plan)
    operator = {"by": args.by, "reason": args.reason, "command": "revoke"}
    owner = Owner.current(f"operator:{args.by}")
    store = _open(location, read_only=False)
    try:
        try:
            revoked = store.revoke_lease(
                args.lease,
                args.by,
                owner=owner,
                reason=args.reason,
                extra={"operator": operator},
                key=key,
            )
        except LeaseError as e:
            raise _Refused(str(e)) from e
        receipt = _revocation(store, revoked)
        if receipt is None or receipt.body.get("owner") != owner.to_dict():
            # Revoked by someone else between the read and the write: theirs stands.
            raise _Refused(
                f"approval {lid} was revoked by {shown(revoked.revoked_by or '?')} meanwhile; "
                "nothing was changed"
            )
        LogKeeper(store, key).catch_up()
    finally:
        store.close()
    data = {
        "lease_id": revoked.id,
        "revoked_at": _when(revoked.revoked_at),
        "revoked_by": revoked.revoked_by,
        "reason": args.reason,
        "receipt": receipt.hash,
        "changed": True,
    }
    lines = [
        f"approval {lid}: revoked by {shown(args.by)} at {data['revoked_at']}, receipt "
        f"{receipt.seq} (hash {receipt.hash})"
    ]
    _emit(args, data, lines)
    return 0
