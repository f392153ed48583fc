"""`verify()`: check the receipts and their log, the store against them, and the provider
against both.

It reports problems; it never repairs and never writes. The provider's list of what each
effect sent is the evidence (Stripe's refunds and transfers, or a `CustomEffect`'s own
listing, each through the effect's `sent_on`/`sent_since`, `ListsSends`): every
`sent`/`adopted` receipt must name a send that exists with that amount and metadata, and
every send that names one of the store's actions must be recorded by that action's
receipt (a send the receipts do not show is a problem). A send on a listed target that
names an action the store does not have is a problem too: rows deleted whole, or a `-wal`
lost after a crash, leave nothing else behind. Asked to (`account_wide`), it reads the
account's sends since the store's first action, so a lost action whose target no
remaining action names is seen as well (docs/design.md §4).
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock._core.anchors import AnchorError
from interlock._core.approvals import Approvers
from interlock._core.effects import ListsSends, Sent, StripeRefund, StripeTransfer
from interlock._core.errors import UNREADABLE, ConfigError, PaymentsError, StoreError
from interlock._core.journal import (
    BATCH,
    REVOCATION,
    ActionRow,
    ActionState,
    JournalRecord,
    SettledAction,
    Store,
)
from interlock._core.leases import Lease
from interlock._core.log import log_problems
from interlock._core.payments import Payments, Transfers
from interlock._core.receipts import ReceiptCheck, load_json, receipt_key
from interlock._core.signing import KeyList, key_list_from_env

if TYPE_CHECKING:
    from interlock._core.anchors import Anchor, AnchoredHead

# How far before the store's first action the account-wide listing starts. The intent is
# stamped by the gate host's wall clock, a refund's `created` by Stripe's (whole seconds):
# an hour covers any skew a host that keeps time at all can have, and costs one more hour
# of the account's refunds to read.
ACCOUNT_SKEW_MARGIN_S: Final = 3600


@dataclass(frozen=True)
class VerifyResult:
    """What `verify()` found: `ok` when there are no problems."""

    chain_length: int
    signed: bool
    problems: list[str] = field(default_factory=list)
    checked_refunds: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    """How many receipts of each kind: `ed25519` (signed with the gate's key, checked with
    the public key), `hmac` (written before signed receipts, checked with the secret),
    `unsigned`."""
    log_size: int = 0
    """How many receipts are in the receipt log."""
    unlogged: int = 0
    """How many receipts are not in the log yet (a gate numbers them after their commits)."""
    heads: int = 0
    """How many signed tree heads the store holds."""
    anchored: int = 0
    """How many anchored heads were compared with the log (`anchors=`)."""
    vouched: int | None = None
    """With `signatures="heads"`: how many receipts were checked by their signed tree head
    alone, not by their own signatures (None: every signature was checked)."""

    @property
    def ok(self) -> bool:
        """True when the chain holds and Stripe agrees with the receipts."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {
            "ok": self.ok,
            "chain_length": self.chain_length,
            "signed": self.signed,
            "problems": list(self.problems),
            "checked_refunds": self.checked_refunds,
            "formats": dict(self.formats),
            "log_size": self.log_size,
            "unlogged": self.unlogged,
            "heads": self.heads,
            "anchored": self.anchored,
        } | ({} if self.vouched is None else {"vouched": self.vouched})


@dataclass(frozen=True)
class _Words:
    """How the problems name one kind of send, where it lives, and what it is on."""

    noun: str
    plural: str
    provider: str
    targets: str

    @property
    def at(self) -> str:
        """Where a send is, in a problem's words: "at Stripe"."""
        return f"at {self.provider}"


def _words(effect: ListsSends) -> _Words:
    if isinstance(effect, StripeRefund):
        return _Words("refund", "refunds", "Stripe", "payments")
    if isinstance(effect, StripeTransfer):
        return _Words("transfer", "transfers", "Stripe", "accounts")
    return _Words(effect.kind, f"{effect.kind} sends", "its provider", "targets")


def _listers(payments: Payments | None, effects: Iterable[ListsSends]) -> dict[str, ListsSends]:
    """The effect that lists each kind of send: Stripe's refunds (and transfers, when the
    client lists them) from `payments`, then each effect given, by its `kind`."""
    by_kind: dict[str, ListsSends] = {}
    if payments is not None:
        by_kind["refund"] = StripeRefund(payments)
        if isinstance(payments, Transfers):
            by_kind["transfer"] = StripeTransfer(payments)
    for effect in effects:
        if not isinstance(effect, ListsSends):
            raise TypeError(
                f"verify reads what each effect sent through sent_on(target) and "
                f"sent_since(created_gte); the {getattr(effect, 'kind', effect)!r} effect has "
                "neither (CustomEffect takes sent_on= and sent_since=)"
            )
        by_kind[effect.kind] = effect
    return by_kind


@dataclass(frozen=True)
class _Facts:
    """What the checks need of one receipt (its body is not kept)."""

    seq: int
    outcome: object
    external_id: object
    amount: object
    reason: object

    @classmethod
    def of(cls, seq: int, body: Mapping[str, Any] | None) -> _Facts:
        """The facts of a receipt's parsed body (all None when it has none)."""
        b = body or {}
        return cls(seq, b.get("outcome"), b.get("external_id"), b.get("amount"), b.get("reason"))


def verify(
    store: Store,
    payments: Payments | None = None,
    *,
    actions: Iterable[str] | None = None,
    keys: KeyList | None = None,
    hmac_key: bytes | None = None,
    anchors: Iterable[Anchor] = (),
    account_wide: bool = False,
    effects: Iterable[ListsSends] = (),
    approvers: Approvers | None = None,
    signatures: Literal["every", "heads"] = "every",
) -> VerifyResult:
    """Check the receipts and their log, the store against them, and the provider against
    both.

    The receipts: each one's hash and Ed25519 signature under `keys` (the gate's public
    keys with when each was valid, a `KeyList`; default: the file `INTERLOCK_VERIFY_KEYS`
    names), so only the public key is needed; with keys, an unsigned receipt is a
    downgrade. Receipts written before signed receipts are read as the chain they are:
    order, gaps and HMAC signatures under `hmac_key` (default `INTERLOCK_RECEIPT_KEY`).
    The log: every receipt numbered into it without a gap, the Merkle tree recomputed and
    compared with every signed tree head, each head's signature; with `anchors`, each
    head and receipt they hold, so a receipt removed or rewritten after it was anchored
    is named even when the store's own heads were rebuilt. The store as a whole: every
    settled action has its receipt and the receipt records that outcome (a deleted tail
    shows here). A revocation's receipt (`python -m interlock revoke` writes one) is held
    to its approval's row: revoked, by the same person, at the same time, naming that
    receipt; an approval naming a revocation receipt the store lacks is a problem too
    (approvals revoked without one, through the library or before, are as before). Given
    `payments`, Stripe:
    every `sent`/`adopted` receipt names a refund that exists with that amount and
    metadata, every refund naming one of the actions is recorded by its receipt, and no
    refund on those payments names an action the store lacks. With `account_wide`, it
    also reads every refund on the account created since the store's first action (less
    `ACCOUNT_SKEW_MARGIN_S`): one naming an action the store lacks, or one of its actions
    on another payment, is a problem too. That reaches a lost action whose payment no
    remaining action names; it also reports the actions of any other interlock store on
    the same account, which the metadata cannot tell apart, so it is for a store that
    is the account's only one. `actions` limits the Stripe cross-check (a run's own); by
    default it covers every action in the store. The chain and the settled actions are
    read side by side, a batch at a time, both in receipt order; then the actions with
    their histories, and the leases, a batch at a time too: a bounded number of reads per
    batch, not per action, and memory bounded however large the store. Nothing is ever
    written. A store file that fails its integrity check is reported as that alone.

    Each action is checked against the effect of its kind: `payments` gives Stripe's
    refunds, and its transfers when it lists them (`StripePayments` does); `effects` adds
    or replaces any kind (a `CustomEffect` given `sent_on` and `sent_since`, see
    `ListsSends`). An action of a kind no effect lists is reported as not checked.
    Account-wide, it lists the refunds (when `payments` is given), every kind the store's
    actions have, and every kind in `effects`.
    Given `approvers` (default: the public keys `INTERLOCK_APPROVERS` names, if set), every
    approval must carry a signature that verifies under one of them: one that does not (a
    store writer's, or one altered after signing) is a problem, and so is every refund
    sent or adopted under it. Without approvers, signatures are not checked.

    `signatures="heads"` checks each receipt under a signed tree head by the head alone:
    the head's signature, and the receipt's leaf hash in the root recomputed from the
    log, which proves it is byte for byte what the store held when the gate signed the
    head. It does not prove that the gate wrote it: a receipt a store writer inserted or
    rewrote before the log took it in is under the next head all the same, and only its
    own signature (the default, `"every"`) tells. Receipts under no such head, and every
    receipt when the log check finds any problem, are checked signature by signature as
    by default (docs/receipts.md, "Checking a large store").
    """
    if signatures not in ("every", "heads"):
        raise ValueError(f"signatures must be 'every' or 'heads', not {signatures!r}")
    secret = hmac_key if hmac_key is not None else receipt_key()
    trusted = keys if keys is not None else key_list_from_env()
    damaged = store.integrity_problems()
    if damaged:
        # Nothing read from a damaged file can be trusted: report the damage alone.
        return VerifyResult(0, False, damaged, 0)
    held: list[AnchoredHead] = []
    unread: list[str] = []
    for anchor in anchors:
        try:
            held.extend(anchor.heads())
        except AnchorError as e:
            unread.append(f"the anchor {anchor.name} cannot be read: {e}")
    # The log first: with `signatures="heads"`, the receipts under the heads it vouches
    # for are checked by them. Its problems are reported after the chain's, as always.
    log = log_problems(store, trusted, held)
    sound = signatures == "heads" and not log.problems
    chain = ReceiptCheck(trusted, secret, vouched=log.vouched if sound else 0)
    problems = _store_problems(store, chain)
    problems.extend(unread)
    problems.extend(log.problems)
    trust = approvers if approvers is not None else Approvers.from_env()
    problems.extend(_record_problems(store, trust))
    signed = chain.length > 0 and chain.all_signed
    checked = 0
    effects = list(effects)
    listers = _listers(payments, effects)
    if listers:
        scope = list(actions) if actions is not None else store.actions()
        cross, checked = _cross_check(store, listers, scope)
        problems.extend(cross)
        if account_wide:
            given = {"refund"} | {e.kind for e in effects}
            wide, seen = _account_check(store, listers, set(scope), given)
            problems.extend(wide)
            checked += seen
    return VerifyResult(
        chain.length,
        signed,
        chain.problems + problems,
        checked,
        formats=dict(chain.formats),
        log_size=log.size,
        unlogged=store.unlogged_count(),
        heads=log.heads,
        anchored=len(held),
        vouched=chain.skipped if signatures == "heads" else None,
    )


def _store_problems(store: Store, chain: ReceiptCheck) -> list[str]:
    """Feed the chain its receipts and match each with the action settled by it.

    `store.settled()` comes in receipt order (actions without a receipt number first), so
    one pass over both streams pairs them; only a receipt that no action claims is looked
    up on its own.
    """
    problems: list[str] = []
    settled = store.settled()
    row = next(settled, None)
    for r in store.receipts():
        body = chain.feed(r)
        f = _Facts.of(r.seq, body)
        claimed = False
        # A number that cannot be read counts as none, wherever the store sorted it.
        while row is not None and (row.receipt_seq is None or row.receipt_seq <= r.seq):
            if row.receipt_seq is None or row.settlement is None:
                problems.append(_unreceipted(row))
                claimed = claimed or (row.receipt_seq == r.seq and row.action_id == r.action_id)
            elif row.receipt_seq < r.seq or row.action_id != r.action_id:
                problems.append(_gone(row.action_id, row.settlement.status, row.receipt_seq))
            else:
                claimed = True
                if f.outcome != row.settlement.status:
                    problems.append(
                        f"action {row.action_id}: settled {row.settlement.status}, but its "
                        f"receipt records {f.outcome}"
                    )
            row = next(settled, None)
        if claimed:
            continue
        if body is not None and body.get("record") == REVOCATION:
            # No action claims a revocation's receipt: the approval it revoked does.
            problem = _revocation_problem(store, r.seq, r.action_id, body)
            if problem is not None:
                problems.append(problem)
        else:
            problems.append(_unclaimed(store, r.seq, r.action_id))
    while row is not None:
        if row.receipt_seq is None or row.settlement is None:
            problems.append(_unreceipted(row))
        else:
            problems.append(_gone(row.action_id, row.settlement.status, row.receipt_seq))
        row = next(settled, None)
    return problems


def _record_problems(store: Store, approvers: Approvers | None = None) -> list[str]:
    """Each action's history and each approval against what the action's row records;
    given `approvers`, then each approval they did not sign and what was sent under it.

    A journal row deleted (or lost with a -wal) leaves the action's row, its receipt and
    the chain whole; its history then lacks a record every such row has: the intent, a
    claim for every epoch, the outcome, the unknown mark (a `sending` record is not
    required by the store's rules, so one lost is not seen). An approval deleted leaves
    its actions naming nothing; one replaced by a fresh grant has spent less than its
    actions' settled refunds. The actions with their histories, then the leases, stream
    a batch at a time; what each approval's actions spent is summed in lease order in a
    scratch file (`_LeaseTotals`), so nothing is kept per action or per approval. The
    approvers' check reads each approval in the same scan, so no approval is read twice.
    """
    bad: dict[str, str] = {}
    found: dict[str, str] = {}
    with _LeaseTotals() as totals:
        for entry in store.histories():
            row = entry.row
            if row is None:
                found[entry.action_id] = f"action {entry.action_id}: {entry.problem}"
                continue
            problem = _history_problem(entry.action_id, row, entry.history, entry.unreadable)
            if problem is not None:
                found[entry.action_id] = problem
            s = row.settlement
            due = 0
            if s is not None and s.status in ("sent", "adopted"):
                due = s.amount if s.amount is not None else row.intent.amount
            totals.spend(row.intent.lease_id, due)
        problems: list[str] = []
        if found:
            # Reported in the order the actions are settled in, then the pending ones, as
            # the chain's problems are, then those whose outcome cannot be read; a store
            # with none skips this second pass.
            settled = (row.action_id for row in store.settled() if row.settlement is not None)
            for aid in itertools.chain(settled, store.pending(), sorted(found)):
                problem = found.pop(aid, None)
                if problem is not None:
                    problems.append(problem)
        # Revocations with a receipt are few: their ids are kept to look each one up.
        receipted: list[tuple[str, int]] = []
        for lease in store.leases():
            totals.lease(lease)
            unsigned = None if approvers is None else approvers.problem(lease)
            if unsigned is not None:
                bad[lease.id] = unsigned
            if lease.revocation_receipt is not None:
                receipted.append((lease.id, lease.revocation_receipt))
        problems.extend(totals.problems())
    problems.extend(_revocation_gone(store, receipted))
    problems.extend(_approval_problems(store, bad))
    return problems


def _revocation_problem(store: Store, seq: int, label: str, body: Mapping[str, Any]) -> str | None:
    """A revocation's receipt against the approval's row: revoked, by the same person, at
    the same time, and naming this receipt. A revocation undone by a store writer (the
    approval usable again) or rewritten shows here."""
    where = f"receipt {seq} ({label})"
    lease_id = body.get("lease_id")
    said = f"records approval {lease_id} revoked by {body.get('revoked_by')} at {body.get('at')}"
    lease = store.lease(lease_id) if isinstance(lease_id, str) else None
    if lease is None:
        return f"{where}: {said}, which is not in the store (its row was deleted or lost)"
    if lease.damaged is not None:
        return None  # reported with the approvals
    if not lease.revoked:
        return (
            f"{where}: {said}, but the store holds it not revoked: its revocation was "
            "undone by a store writer, and checks pass under it again"
        )
    if (lease.revoked_by, lease.revoked_at) != (body.get("revoked_by"), body.get("at")):
        return (
            f"{where}: {said}, but the store records it revoked by {lease.revoked_by} at "
            f"{lease.revoked_at} (edited)"
        )
    # None: revoked again by an older version, which does not keep the receipt's id.
    if lease.revocation_receipt not in (None, seq):
        return (
            f"{where}: {said}, but the approval names receipt {lease.revocation_receipt} as "
            "its revocation's (a second receipt, inserted by a store writer)"
        )
    return None


def _revocation_gone(store: Store, receipted: list[tuple[str, int]]) -> list[str]:
    """Each approval whose revocation's receipt is not in the store (deleted)."""
    problems: list[str] = []
    for lease_id, seq in receipted:
        receipt = store.receipt(seq)
        try:
            body = None if receipt is None else load_json(receipt.body_text)
        except (ValueError, TypeError):
            body = None
        if not isinstance(body, dict) or body.get("record") != REVOCATION:
            problems.append(
                f"approval {lease_id}: revoked, but its revocation's receipt {seq} is gone "
                "(deleted, or another receipt is in its place)"
            )
        elif body.get("lease_id") != lease_id:
            problems.append(
                f"approval {lease_id}: names receipt {seq} as its revocation's, which "
                f"revokes approval {body.get('lease_id')} (edited)"
            )
    return problems


# Sums past this are kept in Python, not in the scratch file's 64-bit integers: only an
# amount edited by hand is ever this large (an intent's is below 10**10).
_LARGE = 2**60


class _LeaseTotals:
    """What each approval's actions spent, against what the approval records.

    The actions come in action order and the leases in lease order; a dict of every
    approval's total would grow with the store (about 250 MB at a million actions). So
    the pairs go into a private temporary SQLite database (never the store: verify does
    not write there), whose pages past its 2 MB cache live in a temporary file, and one
    sorted join gives each approval's total beside its row, in lease order. Ids are
    kept as UTF-8 bytes, so the order is Python's own.
    """

    def __init__(self) -> None:
        # "": a temporary database, deleted when closed.
        self._db = sqlite3.connect("", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("BEGIN")
        self._db.execute("CREATE TABLE spend (lease_id BLOB NOT NULL, due INTEGER NOT NULL)")
        self._db.execute(
            "CREATE TABLE leases (n INTEGER PRIMARY KEY, lease_id BLOB NOT NULL,"
            " spent INTEGER NOT NULL, damaged TEXT)"
        )
        self._spent: list[tuple[bytes, int]] = []
        self._leases: list[tuple[bytes, int, str | None]] = []
        self._large: dict[bytes, int] = {}

    def __enter__(self) -> _LeaseTotals:
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.close()

    def spend(self, lease_id: str, due: int) -> None:
        """An action under `lease_id` whose settled sends come to `due` (0: none)."""
        key = _key(lease_id)
        if not -_LARGE < due < _LARGE:
            self._large[key] = self._large.get(key, 0) + due
            due = 0
        self._spent.append((key, due))
        if len(self._spent) >= BATCH:
            self._db.executemany("INSERT INTO spend VALUES (?, ?)", self._spent)
            self._spent.clear()

    def lease(self, lease: Lease) -> None:
        """An approval as the store holds it (in the store's order)."""
        self._leases.append((_key(lease.id), lease.spent, lease.damaged))
        if len(self._leases) >= BATCH:
            self._flush_leases()

    def _flush_leases(self) -> None:
        self._db.executemany(
            "INSERT INTO leases (lease_id, spent, damaged) VALUES (?, ?, ?)", self._leases
        )
        self._leases.clear()

    def problems(self) -> list[str]:
        """Each approval that its actions name and the store lacks, is damaged, or records
        less spent than its actions' settled sends, in lease order; then each damaged
        approval no action names, in the store's order."""
        db = self._db
        db.executemany("INSERT INTO spend VALUES (?, ?)", self._spent)
        self._flush_leases()
        db.execute("CREATE INDEX leases_id ON leases (lease_id)")
        db.execute("CREATE INDEX spend_id ON spend (lease_id)")
        problems: list[str] = []
        named = db.execute(
            "SELECT s.lease_id, s.due, l.n, l.spent, l.damaged FROM"
            " (SELECT lease_id, sum(due) AS due FROM spend GROUP BY lease_id) s"
            " LEFT JOIN leases l ON l.lease_id = s.lease_id ORDER BY s.lease_id"
        )
        for key, due, row, spent, damaged in named:
            lease_id = key.decode("utf-8", "surrogatepass")
            due += self._large.get(key, 0)
            if row is None:
                problems.append(
                    f"approval {lease_id}: its actions act under it, but it is not in the store "
                    "(its row was deleted or lost)"
                )
            elif damaged is not None:
                problems.append(f"approval {lease_id}: damaged in the store ({damaged})")
            elif spent < due:
                problems.append(
                    f"approval {lease_id}: records {spent} spent, but its actions' settled "
                    f"refunds come to {due} (its row was replaced or edited)"
                )
        unnamed = db.execute(
            "SELECT lease_id, damaged FROM leases l WHERE damaged IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM spend s WHERE s.lease_id = l.lease_id) ORDER BY n"
        )
        for key, damaged in unnamed:
            lease_id = key.decode("utf-8", "surrogatepass")
            problems.append(f"approval {lease_id}: damaged in the store ({damaged})")
        return problems


def _key(lease_id: str) -> bytes:
    """An id as the scratch file keeps it: bytes in the order of Python's strings (any
    string, even one with a lone surrogate edited into the store)."""
    return lease_id.encode("utf-8", "surrogatepass")


def _approval_problems(store: Store, bad: Mapping[str, str]) -> list[str]:
    """The approvals whose signature does not verify (`bad`: each one's problem, by its
    id), and the refunds sent or adopted under them (the store's writer, not an approver,
    authorized those)."""
    problems = [bad[lease_id] for lease_id in sorted(bad)]
    if not bad:
        return problems
    for entry in store.histories():
        row, s = entry.row, entry.row.settlement if entry.row is not None else None
        if row is None or s is None or s.status not in ("sent", "adopted"):
            continue
        if row.intent.lease_id in bad:
            problems.append(
                f"action {entry.action_id}: {s.status} refund {s.external_id} under approval "
                f"{row.intent.lease_id}, which no trusted approver signed"
            )
    return problems


def _history_problem(
    action_id: str, row: ActionRow, history: list[JournalRecord], unreadable: tuple[object, ...]
) -> str | None:
    parts: list[str] = []
    if unreadable:
        numbers = ", ".join(map(str, unreadable))
        plural = "s" if len(unreadable) > 1 else ""
        parts.append(f"its journal record{plural} {numbers} cannot be read (edited)")
    kinds = [h.record for h in history]
    missing: list[str] = []
    if not kinds or kinds[0] != "intent":
        missing.append("its intent")
    elif history[0].data != row.intent.to_dict():
        # The gate journals the intent as it stores it: unequal, one of them was edited.
        parts.append("its journaled intent is not the one its row holds (edited)")
    # An epoch that is not a whole number names no claim.
    epochs = sorted(
        e for h in history if h.record == "claim" and type(e := h.data.get("epoch")) is int
    )
    if epochs != list(range(1, row.attempts + 1)):
        missing.append(f"a claim for each of its {row.attempts} epochs (has {epochs})")
    s = row.settlement
    if s is not None:
        outcomes = [h.data.get("status") for h in history if h.record == "outcome"]
        if not outcomes or outcomes[-1] != s.status:
            missing.append(f"its {s.status} outcome")
    if row.unknown is not None and "unknown" not in kinds:
        missing.append("its unknown mark")
    if missing:
        parts.append(f"its history lacks {', '.join(missing)} (journal rows were deleted or lost)")
    return f"action {action_id}: {'; '.join(parts)}" if parts else None


def _state(store: Store, action_id: str) -> tuple[ActionState | None, str | None]:
    """An action's state, or why its row cannot be read: a backend that reads the row's
    JSON in SQL reports that as a `StoreError`, one that parses it in Python as what the
    parse raised."""
    try:
        return store.action(action_id), None
    except (StoreError, *UNREADABLE) as e:
        return None, str(e)


def _unreceipted(row: SettledAction) -> str:
    if row.settlement is None:
        return f"action {row.action_id}: {row.problem}"
    return f"action {row.action_id}: settled {row.settlement.status} with no receipt"


def _gone(action_id: str, status: str, seq: int | None) -> str:
    return (
        f"action {action_id}: settled {status}, but its receipt {seq} is gone "
        "(deleted, or the chain's tail was cut)"
    )


def _unclaimed(store: Store, seq: int, action_id: str) -> str:
    """A receipt its action does not point to: a second one, or its action is not settled."""
    where = f"receipt {seq} ({action_id})"
    state, unreadable = _state(store, action_id)
    if unreadable is not None:
        return f"{where}: its action cannot be read ({unreadable})"
    if state is None or state.settlement is None:
        return f"{where}: its action is not settled in the journal"
    if state.receipt is not None:
        return f"{where}: a second receipt for one action (it is settled by {state.receipt.seq})"
    return f"{where}: its action is settled, but does not name this receipt"


def _cross_check(
    store: Store, listers: Mapping[str, ListsSends], scope: Iterable[str]
) -> tuple[list[str], int]:
    problems: list[str] = []
    targets: dict[tuple[str, str], list[str]] = {}
    for aid in sorted(set(scope)):
        state, unreadable = _state(store, aid)
        if unreadable is not None:
            problems.append(f"action {aid}: cannot be checked against Stripe ({unreadable})")
            continue
        if state is None:
            problems.append(f"action {aid}: not in the store")
            continue
        targets.setdefault((state.intent.target, state.intent.kind), []).append(aid)
    checked = 0
    vouched: list[tuple[Sent, _Words]] = []
    for (target, kind), aids in sorted(targets.items()):
        lister = listers.get(kind)
        if lister is None:
            problems.append(
                f"could not read the {kind} sends of {target}: verify was given no {kind} "
                "effect to list them (pass it to verify() in effects=; the command checks "
                "refunds and transfers)"
            )
            continue
        w = _words(lister)
        try:
            sends = lister.sent_on(target)
        except (PaymentsError, ConfigError) as e:
            problems.append(f"could not read the {w.plural} of {target}: {e}")
            continue
        checked += len(sends)
        by_id = {sent.external_id: sent for sent in sends}
        facts = {aid: _receipt_facts(store, aid) for aid in aids}
        for aid in aids:
            f = facts[aid]
            if f is not None:
                problems.extend(_receipt_matches(aid, f, by_id, w))
        for sent in sends:
            named = sent.action
            if named is None or not sent.counts:
                continue
            if sent.head is not None and named in facts:
                vouched.append((sent, w))
            if named in facts:
                problems.extend(_sent_recorded(sent, named, facts[named], w))
                continue
            other, unreadable = _state(store, named)
            if unreadable is not None:
                problems.append(
                    f"{w.noun} {sent.external_id} ({sent.amount}) {w.at} names action {named}, "
                    f"whose row cannot be read ({unreadable})"
                )
            elif other is None:
                # Rows deleted whole, or a lost -wal, leave no gap in what is left: only
                # the provider still remembers the action (docs/design.md §4).
                problems.append(
                    f"{w.noun} {sent.external_id} ({sent.amount}) {w.at} names action {named}, "
                    "which the store does not have: its rows were deleted or lost "
                    "(a -wal lost after a crash); restore the store from a backup"
                )
            elif other.intent.target != target:
                problems.append(_elsewhere(sent, named, other.intent.target, w))
    problems.extend(_heads_vouched(store, vouched))
    return problems, checked


def _heads_vouched(store: Store, vouched: list[tuple[Sent, _Words]]) -> list[str]:
    """Each tree head a send's metadata carries must be one the store's log still holds:
    the provider's list, in another trust domain, remembers the head the gate named when
    it sent, so heads rewritten after that send (even with the signing key) show here."""
    if not vouched:
        return []
    held = {hashlib.sha256(h.body_text.encode()).hexdigest() for h in store.heads()}
    return [
        f"{w.noun} {sent.external_id} ({sent.amount}) {w.at} names action {sent.action} and "
        f"the log's tree head {sent.head}, which the store's log no longer holds: its heads "
        "were rewritten after that send"
        for sent, w in vouched
        if sent.head not in held
    ]


def _account_check(
    store: Store, listers: Mapping[str, ListsSends], scope: set[str], given: set[str]
) -> tuple[list[str], int]:
    """The account's sends since the store's first action, beyond the listed targets: of
    every kind in `given` and every kind the store's actions have."""
    targets: dict[str, tuple[str, str]] = {}
    unreadable: set[str] = set()
    first: float | None = None
    for aid in store.actions():
        state, why = _state(store, aid)
        if why is not None:
            unreadable.add(aid)  # reported with its history
            continue
        if state is None:
            continue
        targets[aid] = (state.intent.target, state.intent.kind)
        first = state.intent.created_at if first is None else min(first, state.intent.created_at)
    if first is None:
        # No action to date the store by (a new store, or one emptied whole, which no
        # check can tell apart): the account's whole history is not this store's to judge.
        return [], 0
    since = max(0, int(first) - ACCOUNT_SKEW_MARGIN_S)
    kinds = given | {kind for _, kind in targets.values()}
    problems: list[str] = []
    checked = 0
    # Refunds first, as verify listed them before it knew other effects.
    for kind in sorted((k for k in kinds if k in listers), key=lambda k: (k != "refund", k)):
        lister = listers[kind]
        w = _words(lister)
        try:
            sends = lister.sent_since(since)
        except (PaymentsError, ConfigError) as e:
            problems.append(f"could not read the account's {w.plural} since {since}: {e}")
            continue
        checked += len(sends)
        # The targets the per-target pass listed were checked there, send by send.
        listed = {targets[aid][0] for aid in scope if aid in targets and targets[aid][1] == kind}
        for sent in sends:
            named = sent.action
            if named is None or not sent.counts or sent.target in listed:
                continue
            where = f"{w.noun} {sent.external_id} ({sent.amount}) on {sent.target} {w.at}"
            if named in unreadable:
                problems.append(f"{where} names action {named}, whose row cannot be read")
                continue
            target = targets.get(named)
            if target is None:
                problems.append(
                    f"{where} names action {named}, which the store does not have: its rows "
                    "were deleted or lost (a -wal lost after a crash), or it is another "
                    "interlock store's on this account; restore the store from a backup, or "
                    f"check only the {w.targets} this store names (without account-wide)"
                )
            elif target[0] != sent.target:
                problems.append(_elsewhere(sent, named, target[0], w))
    return problems, checked


def _elsewhere(sent: Sent, action_id: str, target: str, w: _Words) -> str:
    return (
        f"{w.noun} {sent.external_id} ({sent.amount}) on {sent.target} {w.at} names "
        f"action {action_id}, whose target is {target}: a send the receipts do not show"
    )


def _receipt_facts(store: Store, action_id: str) -> _Facts | None:
    """The facts of the receipt an action is settled by (None when it has none)."""
    state, _ = _state(store, action_id)
    receipt = None if state is None else state.receipt
    if receipt is None:
        return None
    try:
        body = load_json(receipt.body_text)
    except (ValueError, TypeError):
        body = None
    return _Facts.of(receipt.seq, body if isinstance(body, Mapping) else None)


def _receipt_matches(action_id: str, f: _Facts, sends: dict[str, Sent], w: _Words) -> list[str]:
    if f.outcome not in ("sent", "adopted"):
        return []
    where = f"receipt {f.seq} ({action_id}, {f.outcome})"
    sent = sends.get(str(f.external_id))
    if sent is None:
        return [f"{where}: names {w.noun} {f.external_id}, which {w.provider} does not have"]
    problems = []
    theirs = f"{w.provider}'s {w.noun} {sent.external_id}"
    if sent.amount != f.amount:
        problems.append(f"{where}: {theirs} is {sent.amount}, the receipt says {f.amount}")
    if sent.action != action_id:
        problems.append(f"{where}: {theirs} does not name this action in its metadata")
    if not sent.counts:
        problems.append(f"{where}: {theirs} is {sent.status}")
    return problems


def _sent_recorded(sent: Sent, action_id: str, f: _Facts | None, w: _Words) -> list[str]:
    named = f"{w.noun} {sent.external_id} ({sent.amount}) {w.at} names action {action_id}"
    if f is None:
        return [f"{named}, which has no receipt: a send the receipts do not show"]
    if f.outcome in ("sent", "adopted") and f.external_id == sent.external_id:
        return []
    return [
        f"{named}, whose receipt records {f.outcome}"
        + (f" ({f.reason})" if f.reason else "")
        + ": a send the receipts do not show"
    ]
