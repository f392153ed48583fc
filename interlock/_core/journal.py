"""The journal: intents, claims, `sending`, outcomes, leases and receipts in one store.

`Store` is the protocol the gate uses. A first attempt makes two durable commits:
`begin_sending` (the intent, its claim, the target's turn, the lease reservation and
`sending` at once, after a `first_look` that writes nothing) and `settle`; every other
path makes three (`begin`, `mark_sending`, `settle`). The rules live once, in
`RuleStore`, over a small row-level transaction (`Tx`); the backends (`_stores/sqlite.py`,
`_stores/memory.py`) only store rows and read their clock inside the transaction, after
the write lock is taken, so that waiting for the lock never eats a claim's margin.

Every take of a claim gets a new epoch (the action's `attempts` counter); commit 2,
commit 3, renewals and releases compare it, never the owner's identity.

**One action at a time on a target.** A claim is taken together with its target's *turn*
(a row per target naming the action and epoch that hold it). While the turn names another
action that is unsettled and whose claim still keeps others off (`Claim.blocks`: live, or
`sending` until its expiry plus the grace), the claim is not taken: the answer is `busy`,
naming that action. The turn frees itself when its holder settles, releases its claim or
lets it expire; nothing has to clear it. Commit 2 is fenced on the turn too, so two
sibling actions (the same decision made twice in one turn of a model, run concurrently)
never both sit between their world read and their settlement: the second reads the world
after the first landed, as it would have run after it. On a backend that locks rows the
turn is locked after the action's own row, and the holder's row is read without a lock.

A first attempt reads the world before it holds the turn, so its one commit is fenced on
the turn as `first_look` saw it before that read (its action and epoch): every take of a
claim writes the turn with a new epoch, so an unchanged turn means no action took it in
between, and a turn that kept nobody off then keeps nobody off now. Otherwise nothing is
written and the gate takes the three-commit path, reading again under the turn.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol

from interlock._core.claims import Claim, Owner
from interlock._core.errors import UNREADABLE, ActionError, IntentError, LeaseError
from interlock._core.heads import TreeHead
from interlock._core.leases import Lease, approval_problem
from interlock._core.log import LoggedReceipt, StoredHead, integrate
from interlock._core.money import currency_problem
from interlock._core.receipts import Check, Receipt, canonical_json, load_json, seal
from interlock._core.signing import SigningKey

OutcomeStatus = Literal["sent", "adopted", "refused", "failed"]
OUTCOME_STATUSES: tuple[OutcomeStatus, ...] = ("sent", "adopted", "refused", "failed")

# Ids go into HTTP headers, Stripe metadata and SQL: printable ASCII without whitespace.
_ID_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation)
MAX_ID_LENGTH = 200
MAX_AMOUNT = 10**10
# The failed-refund code: the send happened and the money did not move.
CODE_REFUND_FAILED = "refund_failed"
# A found send that names the action and does not match its intent (or cannot be counted
# against its approval): never adopted, never resent. Its unknown mark starts with the
# prefix, so that it reads as a conflict wherever it is shown.
CODE_CONFLICT = "conflict"
CONFLICT_PREFIX = "conflict: "
# A person's refusal of an action whose outcome is unknown (`python -m interlock resolve
# --refused`): the one refusal an unknown action may take, since only a person who checked
# the provider can say that nothing was made; its receipt names them and their reason.
CODE_REFUSED_BY_PERSON = "refused_by_person"
# A revocation's receipt (`python -m interlock revoke`): its body's `record`. Its action
# column names the approval in words with a space, which no action id has, so no action
# ever claims it; `verify()` checks it against the approval's row instead.
REVOCATION = "revocation"


def revocation_label(lease_id: str) -> str:
    """What a revocation's receipt holds where an action's receipt holds its action id."""
    return f"{REVOCATION} of {lease_id}"


def _check_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise IntentError(name, "must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise IntentError(name, f"is {len(value)} characters long; at most {MAX_ID_LENGTH}")
    if _ID_CHARS.issuperset(value):
        return
    bad = next((c for c in value if c not in _ID_CHARS), None)
    if bad is not None:
        raise IntentError(
            name,
            f"contains {bad!r}; use printable ASCII without whitespace "
            "(it goes into HTTP headers and metadata)",
        )


@dataclass(frozen=True)
class Intent:
    """What the agent decided, and the state the decision was based on.

    `fingerprint` is the fingerprint of the target's state as the model saw it (for a
    refund: the payment's refunds shown by `get_payment`), not a fresh read at send time.
    `currency` is the lowercase ISO 4217 code of the amount (its smallest unit: cents,
    whole yen); a gate stamps its effect's when the intent has none and the effect has one
    (a transfer's). None only on an intent journaled by an older version, or a refund whose
    caller did not say (it is in its payment's currency, the only one it can be in).
    Checked when made: a bad field raises `IntentError` naming it, before anything is
    journaled.
    """

    action_id: str
    kind: str
    target: str
    amount: int
    lease_id: str
    fingerprint: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    currency: str | None = None

    def __post_init__(self) -> None:
        for name in ("action_id", "lease_id", "target"):
            _check_id(name, getattr(self, name))
        if not isinstance(self.kind, str) or not self.kind.strip():
            raise IntentError("kind", "must name the kind of action, such as 'refund'")
        amount = self.amount
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise IntentError("amount", f"must be an integer number of cents, got {amount!r}")
        if not 0 < amount < MAX_AMOUNT:
            raise IntentError("amount", f"must be positive and below {MAX_AMOUNT}, got {amount}")
        if not isinstance(self.fingerprint, str):
            raise IntentError("fingerprint", "must be a string")
        if self.currency is not None:
            problem = currency_problem(self.currency)
            if problem is not None:
                raise IntentError("currency", problem)

    def to_dict(self) -> dict[str, Any]:
        """The intent as JSON-ready data (`currency` only when it has one, so an older
        version's intent reads back and is written as it was)."""
        data: dict[str, Any] = {
            "action_id": self.action_id,
            "kind": self.kind,
            "target": self.target,
            "amount": self.amount,
            "lease_id": self.lease_id,
            "fingerprint": self.fingerprint,
            "metadata": dict(self.metadata),
            "context": dict(self.context),
            "created_at": self.created_at,
        }
        if self.currency is not None:
            data["currency"] = self.currency
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Intent:
        """An intent from `to_dict` data (no `currency`: an older version's, None)."""
        return cls(
            action_id=str(data["action_id"]),
            kind=str(data["kind"]),
            target=str(data["target"]),
            amount=int(data["amount"]),
            lease_id=str(data["lease_id"]),
            fingerprint=str(data["fingerprint"]),
            metadata={str(k): str(v) for k, v in dict(data.get("metadata") or {}).items()},
            context=dict(data.get("context") or {}),
            created_at=float(data.get("created_at", 0.0)),
            currency=None if data.get("currency") is None else str(data["currency"]),
        )

    def same_decision(self, other: Intent) -> bool:
        """Whether two intents record the same decision (creation time aside).

        An intent without a currency (journaled by an older version) is the same decision
        as its replay by this one, which a gate stamps with its effect's currency; two
        different currencies are two decisions."""
        mine, theirs = replace(self, created_at=0.0), replace(other, created_at=0.0)
        if mine.currency is None or theirs.currency is None:
            mine, theirs = replace(mine, currency=None), replace(theirs, currency=None)
        return mine.to_dict() == theirs.to_dict()


@dataclass(frozen=True)
class Settlement:
    """A recorded outcome: the status, why, Stripe's ids or error code, and the found
    send's amount and `currency` (as the provider gave them)."""

    status: OutcomeStatus
    reason: str | None = None
    external_id: str | None = None
    amount: int | None = None
    code: str | None = None
    at: float = 0.0
    currency: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The settlement as JSON-ready data (`currency` only when it has one)."""
        data: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "external_id": self.external_id,
            "amount": self.amount,
            "code": self.code,
            "at": self.at,
        }
        if self.currency is not None:
            data["currency"] = self.currency
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settlement:
        """A settlement from `to_dict` data."""
        status = next((s for s in OUTCOME_STATUSES if s == data["status"]), None)
        if status is None:
            raise ValueError(f"unknown outcome {data['status']!r}")
        return cls(
            status=status,
            reason=data.get("reason"),
            external_id=data.get("external_id"),
            amount=None if data.get("amount") is None else int(data["amount"]),
            code=data.get("code"),
            at=float(data.get("at", 0.0)),
            currency=None if data.get("currency") is None else str(data["currency"]),
        )


@dataclass(frozen=True)
class ActionState:
    """Everything the journal holds about one action.

    `unknown` is set, for good, when a create call got a 5xx: Stripe may have made the
    refund and replays that answer to every retry, so the action is only ever looked up.
    """

    intent: Intent
    claim: Claim | None
    settlement: Settlement | None
    attempts: int
    receipt: Receipt | None = None
    unknown: str | None = None


@dataclass(frozen=True)
class Turn:
    """Which action holds a target's turn: the one action on it allowed between its world
    read and its settlement, and the epoch of the claim it took the turn with."""

    target: str
    action_id: str
    epoch: int


@dataclass(frozen=True)
class ClaimAttempt:
    """The answer to a claim request: taken, held by someone else, busy (another action on
    the same target holds its turn: `holder`, that action as the store holds it), or
    already settled.

    `now` is the store's clock at the attempt, the clock the claim's times are in.
    """

    status: Literal["taken", "held", "busy", "settled"]
    state: ActionState
    now: float = 0.0
    holder: ActionState | None = None

    @property
    def epoch(self) -> int:
        """The epoch of the claim taken (0 when none was)."""
        claim = self.state.claim
        return claim.epoch if self.status == "taken" and claim is not None else 0


@dataclass(frozen=True)
class SendingAttempt:
    """The answer to `mark_sending`.

    `ok` (with the renewed claim and the seconds it has left by the store's clock),
    `claim_lost` (another take since, or it expired), `lease_refused` (with the reason),
    or `unknown` (a 5xx made the action unknown: it is never sent again).
    """

    status: Literal["ok", "claim_lost", "lease_refused", "unknown"]
    reason: str | None = None
    claim: Claim | None = None
    left_s: float = 0.0


@dataclass(frozen=True)
class FirstLook:
    """What a first attempt reads before the world: whether it may take the two-commit
    path (`free`: the action is not journaled and its target's turn keeps nobody off),
    the turn as seen (its action and epoch; None when no action ever held it), which the
    first commit must find unchanged, and the action's lease, read in the same
    transaction (None: no such lease)."""

    free: bool
    turn: tuple[str, int] | None = None
    lease: Lease | None = None


@dataclass(frozen=True)
class FirstSending:
    """The answer to `begin_sending`: `ok` (the intent, the claim and `sending` are one
    commit: `state`, and the claim's seconds left by the store's clock), or why nothing
    was written: `journaled` (the action id is in the journal now), `turn_moved` (another
    action took the target's turn since the first look), `lease_refused` (with the
    reason)."""

    status: Literal["ok", "journaled", "turn_moved", "lease_refused"]
    reason: str | None = None
    state: ActionState | None = None
    left_s: float = 0.0


@dataclass(frozen=True)
class JournalRecord:
    """One line of an action's history."""

    seq: int
    action_id: str
    at: float
    record: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class SettledAction:
    """A settled action as `verify()` checks it: its outcome and receipt's sequence number.

    `settlement` is None, with `problem` saying why, when the stored row cannot be read.
    """

    action_id: str
    settlement: Settlement | None
    receipt_seq: int | None
    problem: str | None = None

    @classmethod
    def parse(cls, action_id: str, text: object, receipt_seq: object) -> SettledAction:
        """From a stored row, never raising: a row that cannot be read names its problem."""
        seq = receipt_seq if isinstance(receipt_seq, int) else None
        try:
            data = load_json(text) if isinstance(text, str) else text
            if not isinstance(data, Mapping):
                raise ValueError("not a JSON object")
            return cls(action_id, Settlement.from_dict(data), seq)
        except UNREADABLE as e:
            return cls(action_id, None, seq, f"its recorded outcome cannot be read ({e})")


@dataclass(frozen=True)
class ActionHistory:
    """An action's row and its journal records, as `verify()` checks them.

    `row` is None when the stored row cannot be read, with `problem` saying why; a journal
    row that cannot be read is left out of `history` and its number is in `unreadable`.
    """

    action_id: str
    row: ActionRow | None
    history: list[JournalRecord]
    problem: str | None = None
    unreadable: tuple[object, ...] = ()


class Store(Protocol):
    """Durable storage for the gate. Each writing call is one atomic, durable commit.

    Times come from the store's own clock, read inside the transaction.
    """

    commits: int

    def now(self) -> float:
        """The store's clock: the clock claims are kept in."""
        ...

    def begin(self, intent: Intent, owner: Owner, ttl_s: float, grace_s: float) -> ClaimAttempt:
        """Commit 1: journal the intent (if new) and take its claim (if it may be taken), with
        its target's turn (`busy` while another action holds that: no claim is taken)."""
        ...

    def take_claim(
        self, action_id: str, owner: Owner, ttl_s: float, grace_s: float, *, found_own: bool = False
    ) -> ClaimAttempt:
        """Take the claim on a journaled action, if it may be taken (see `Claim`) and its
        target's turn is free (else `busy`)."""
        ...

    def first_look(self, intent: Intent, grace_s: float) -> FirstLook:
        """A first attempt's read before the world read, writing nothing: whether the action
        is new and its target's turn free, the turn as seen, and the intent's lease."""
        ...

    def begin_sending(
        self,
        intent: Intent,
        owner: Owner,
        ttl_s: float,
        seen: tuple[str, int] | None,
        *,
        approval: str | None,
        evidence: Mapping[str, str] | None = None,
    ) -> FirstSending:
        """A first attempt's one commit before its send: the intent, its claim (epoch 1,
        `ttl_s` from now), the target's turn, the lease reservation and `sending`, all or
        none; only for an action not journaled yet, while the target's turn is exactly
        `seen` (as `first_look` saw it: nobody took it since the world was read), and
        under the very lease the gate checked (`approval`, its digest)."""
        ...

    def mark_sending(
        self,
        action_id: str,
        epoch: int,
        ttl_s: float,
        *,
        approval: str | None = None,
        evidence: Mapping[str, str] | None = None,
    ) -> SendingAttempt:
        """Commit 2: `sending`, the lease reservation and the claim's renewal, all or none.

        `approval`: the `Lease.digest()` of the lease the gate checked; the lease stored
        now must be that one, or commit 2 is refused (a row swapped since the check).
        `evidence`: what the send's metadata carries besides the action (the approval's
        digest, the latest tree head's hash), journaled with `sending` so that every later
        attempt of the action sends the very same parameters under its key."""
        ...

    def mark_unknown(self, action_id: str, reason: str) -> None:
        """Record, unfenced and for good, that a create got an answer that may hide a send."""
        ...

    def release(self, action_id: str, epoch: int) -> None:
        """End a claim not marked `sending` now, so the next worker need not wait it out."""
        ...

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
        """Commit 3, fenced on `epoch`: outcome, receipt (signed with `key`) and lease
        spend; None if lost."""
        ...

    def integrate(self, key: SigningKey | None) -> TreeHead | None:
        """Number the receipts not yet in the log and sign a tree head over them with
        `key`; None when there are none, or another process is numbering them now."""
        ...

    def mark_anchored(self, size: int, at: float) -> None:
        """Record that the head of `size` was published to every anchor."""
        ...

    def heads(self, after: int = -1) -> Iterator[StoredHead]:
        """The tree heads of the receipt log larger than `after`, smallest first."""
        ...

    def latest_head(self) -> StoredHead | None:
        """The receipt log's largest tree head (None: none yet)."""
        ...

    def logged(self, start: int = 0) -> Iterator[LoggedReceipt]:
        """The receipts in the log from place `start` on, in leaf order."""
        ...

    def unlogged_count(self) -> int:
        """How many receipts are not in the log yet."""
        ...

    def action(self, action_id: str) -> ActionState | None:
        """The journal's view of one action."""
        ...

    def pending(self, kind: str | None = None) -> list[str]:
        """Action ids (of `kind`, if given) with an intent and no outcome, oldest first."""
        ...

    def actions(self, metadata: Mapping[str, str] | None = None) -> list[str]:
        """Action ids, oldest first, whose intent metadata has all these key/value pairs."""
        ...

    def receipts(self) -> Iterator[Receipt]:
        """Every receipt, in chain order, read a batch at a time."""
        ...

    def settled(self) -> Iterator[SettledAction]:
        """Every settled action with its receipt's sequence number, read a batch at a time."""
        ...

    def history(self, action_id: str) -> list[JournalRecord]:
        """An action's journal records, in order."""
        ...

    def histories(self) -> Iterator[ActionHistory]:
        """Every action's row with its journal records, ordered by action id, read a batch
        of actions at a time."""
        ...

    def integrity_problems(self) -> list[str]:
        """Damage to the store's storage itself (a corrupt file); empty when sound."""
        ...

    def grant_lease(self, lease: Lease) -> Lease:
        """Store a new lease."""
        ...

    def revoke_lease(
        self,
        lease_id: str,
        by: str,
        *,
        owner: Owner | None = None,
        reason: str | None = None,
        extra: Mapping[str, Any] | None = None,
        key: SigningKey | None = None,
    ) -> Lease:
        """Revoke a lease; later checks refuse under it. With `owner` (who writes it), a
        receipt of the revocation (signed with `key`; `reason` and `extra` in its body) is
        written in the same commit, and the lease names it (`revocation_receipt`)."""
        ...

    def receipt(self, seq: int) -> Receipt | None:
        """The receipt with id `seq` (None: there is none)."""
        ...

    def lease(self, lease_id: str) -> Lease | None:
        """One lease, with its spend and reservations."""
        ...

    def leases(self) -> Iterator[Lease]:
        """Every lease, ordered by its id, read a batch at a time."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


# -- rows and transactions ---------------------------------------------------------------

BATCH = 500
"""Rows a store's scan reads per statement: a page in memory at a time, few round trips."""


def pages(
    fetch: Callable[[Any, int], Sequence[Any]],
    after: Any,
    key: Callable[[Any], Any] = lambda r: r[0],
) -> Iterator[Sequence[Any]]:
    """A scan read a page at a time by its key (keyset pagination, so a page costs the same
    at the end of a large table as at its start): `fetch(after, limit)` returns at most
    `limit` rows past `after`, ordered by the key; the next page starts after the last
    row's key, until a page comes back short."""
    while True:
        rows = fetch(after, BATCH)
        if rows:
            yield rows
        if len(rows) < BATCH:
            return
        after = key(rows[-1])


def by_seq(row: Sequence[Any]) -> tuple[Any, Any]:
    """The key of a scan of settled actions in receipt order: (receipt_seq, row id), the
    row's fourth and first columns."""
    return (row[3], row[0])


def histories_of(
    actions: Sequence[Sequence[Any]], journal: Sequence[Sequence[Any]]
) -> Iterator[ActionHistory]:
    """A page of action rows (the action id, the intent's JSON text, then the columns
    `ActionRow.from_columns` takes) with their journal rows (seq, action id, at, record,
    data JSON), ordered by seq. Never raising: what an edit made unreadable is named, for
    `verify()` to report."""
    rows: dict[str, list[Sequence[Any]]] = {}
    for r in journal:
        rows.setdefault(str(r[1]), []).append(r)
    for r in actions:
        action_id, text = str(r[0]), r[1]
        # The intent and outcome records are journaled as the row stores them: their texts,
        # read once for the row, are not parsed again.
        known: dict[object, Any] = {}
        load = partial(_load_into, known)
        try:
            row = ActionRow.from_columns(Intent.from_dict(load(text)), *r[2:], load=load)
            problem = None
        except UNREADABLE as e:
            row, problem = None, f"its stored row cannot be read ({e})"
            known.clear()
        records: list[JournalRecord] = []
        unreadable: list[object] = []
        for j in rows.get(action_id, ()):
            try:
                data = known[j[4]] if j[4] in known else load_json(j[4])
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                records.append(JournalRecord(int(j[0]), action_id, float(j[2]), str(j[3]), data))
            except UNREADABLE:
                unreadable.append(j[0])
        yield ActionHistory(action_id, row, records, problem, tuple(unreadable))


def _load_into(known: dict[object, Any], text: str) -> Any:
    """`text` parsed, and kept in `known` under its text."""
    known[text] = data = load_json(text)
    return data


@dataclass
class ActionRow:
    """One action as a backend stores it."""

    intent: Intent
    claim: Claim | None = None
    settlement: Settlement | None = None
    attempts: int = 0
    receipt_seq: int | None = None
    unknown: str | None = None

    @classmethod
    def from_columns(
        cls,
        intent: Intent,
        claim: str | None,
        settlement: str | None,
        attempts: Any,
        receipt_seq: Any,
        unknown: str | None,
        *,
        load: Callable[[str], Any] = load_json,
    ) -> ActionRow:
        """A row from its stored columns (JSON text for the claim and the settlement, read
        with `load`)."""
        return cls(
            intent=intent,
            claim=None if claim is None else Claim.from_dict(load(claim)),
            settlement=None if settlement is None else Settlement.from_dict(load(settlement)),
            attempts=int(attempts),
            # As stored: a value that is not a number is the verifier's to report.
            receipt_seq=receipt_seq,
            unknown=unknown,
        )

    def columns(self) -> tuple[str | None, str | None, int, int | None, str | None]:
        """The columns that change after the intent is journaled: claim, settlement (JSON
        text), attempts, receipt_seq and the unknown mark, in that order."""
        return (
            None if self.claim is None else canonical_json(self.claim.to_dict()),
            None if self.settlement is None else canonical_json(self.settlement.to_dict()),
            self.attempts,
            self.receipt_seq,
            self.unknown,
        )


def keeps_off(holder: ActionRow | None, now: float, grace_s: float) -> bool:
    """Whether the action holding a target's turn keeps every other action off it at `now`:
    unsettled, with a claim that still blocks (`Claim.blocks`)."""
    return (
        holder is not None
        and holder.settlement is None
        and holder.claim is not None
        and holder.claim.blocks(now, grace_s=grace_s)
    )


class Tx(Protocol):
    """A backend's transaction: rows in, rows out, and the clock read inside it."""

    now: float

    def get_action(self, action_id: str) -> ActionRow | None: ...
    def peek_action(self, action_id: str) -> ActionRow | None:
        """Another action's row, read without taking its lock (a turn's holder)."""
        ...

    def put_action(self, row: ActionRow, *, new: bool) -> None: ...
    def get_turn(self, target: str) -> Turn | None:
        """The target's turn, locked for the rest of the transaction where rows are locked
        (`now` is then read after that lock)."""
        ...

    def put_turn(self, turn: Turn) -> None: ...
    def get_lease(self, lease_id: str) -> Lease | None: ...
    def put_lease(self, lease: Lease, *, new: bool) -> None: ...
    def journal(self, action_id: str, record: str, data: Mapping[str, Any]) -> None: ...
    def receipt_id(self) -> int:
        """A new receipt's id: unique, taken without a store-wide lock (a gap is allowed:
        a receipt's place in the log is given later, by `integrate`)."""
        ...

    def add_receipt(self, receipt: Receipt) -> None: ...
    def get_receipt(self, seq: int) -> Receipt | None: ...
    def lock_log(self) -> bool:
        """Take the receipt log's lock for the rest of the transaction, without waiting."""
        ...

    def latest_head(self) -> StoredHead | None: ...
    def unlogged(self, limit: int) -> list[tuple[int, str, str]]: ...
    def set_leaves(self, places: Sequence[tuple[int, int]]) -> None: ...
    def add_head(self, head: StoredHead) -> None: ...
    def mark_anchored(self, size: int, at: float) -> None: ...


class RuleStore:
    """The store's rules, written once over `Tx`; backends store the rows.

    A backend provides `_write()` (a serialized, durable transaction that reads its clock
    after taking its locks: a rule reads `tx.now` only after its first read, which takes
    the row's lock where a backend locks rows) and `_read()`, plus the scans of `Store`.
    """

    commits: int

    def _write(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def _state(self, tx: Tx, row: ActionRow) -> ActionState:
        receipt = tx.get_receipt(row.receipt_seq) if row.receipt_seq is not None else None
        return ActionState(
            row.intent, row.claim, row.settlement, row.attempts, receipt, row.unknown
        )

    def _claim(
        self,
        tx: Tx,
        row: ActionRow,
        owner: Owner,
        ttl_s: float,
        grace_s: float,
        found_own: bool,
        *,
        new: bool = False,
    ) -> ClaimAttempt:
        if row.settlement is not None:
            return ClaimAttempt("settled", self._state(tx, row), tx.now)
        # The turn is locked before the clock is read: waiting for it eats no margin.
        turn = tx.get_turn(row.intent.target)
        now = tx.now
        previous = row.claim
        if previous is not None and not previous.replaceable_by(
            owner, now, grace_s=grace_s, found_own=found_own
        ):
            return ClaimAttempt("held", self._state(tx, row), now)
        holder = self._turn_holder(tx, row, turn, now, grace_s)
        if holder is not None:
            if new:
                # Journaled without a claim: recovery (or this gate's wait) takes it later.
                tx.put_action(row, new=True)
            return ClaimAttempt(
                "busy",
                self._state(tx, row),
                now,
                ActionState(holder.intent, holder.claim, None, holder.attempts),
            )
        row.attempts += 1
        row.claim = Claim(owner, claimed_at=now, expires_at=now + ttl_s, epoch=row.attempts)
        tx.put_action(row, new=new)
        tx.put_turn(Turn(row.intent.target, row.intent.action_id, row.attempts))
        tx.journal(
            row.intent.action_id,
            "claim",
            {
                "owner": owner.to_dict(),
                "epoch": row.attempts,
                "expires_at": row.claim.expires_at,
                "took_over": previous.owner.to_dict()
                if previous is not None and previous.owner != owner
                else None,
                "early": bool(previous is not None and previous.live(now)),
            },
        )
        return ClaimAttempt("taken", self._state(tx, row), now)

    @staticmethod
    def _turn_holder(
        tx: Tx, row: ActionRow, turn: Turn | None, now: float, grace_s: float
    ) -> ActionRow | None:
        """The other action that holds `row`'s target's `turn`, or None when the turn is
        free: it names this action, or an action that is settled, gone, or whose claim no
        longer keeps others off (`Claim.blocks`). The turn is locked after the action's own
        row; the holder's row is read without its lock, so no two writes wait on each
        other."""
        if turn is None or turn.action_id == row.intent.action_id:
            return None
        holder = tx.peek_action(turn.action_id)
        return holder if keeps_off(holder, now, grace_s) else None

    def now(self) -> float:
        """The store's clock."""
        with self._read() as tx:
            return tx.now

    def begin(self, intent: Intent, owner: Owner, ttl_s: float, grace_s: float) -> ClaimAttempt:
        """Commit 1: journal the intent (if new) and take its claim (if it may be taken), with
        its target's turn (`busy` while another action holds that: no claim is taken)."""
        with self._write() as tx:
            row = tx.get_action(intent.action_id)
            if row is None:
                # A new action is written once, with its claim.
                tx.journal(intent.action_id, "intent", intent.to_dict())
                return self._claim(
                    tx, ActionRow(intent=intent), owner, ttl_s, grace_s, False, new=True
                )
            if not row.intent.same_decision(intent):
                raise ActionError(
                    intent.action_id,
                    "already journaled with a different decision; an action id names one "
                    "decision: use a new action id for a new decision",
                )
            return self._claim(tx, row, owner, ttl_s, grace_s, False)

    def take_claim(
        self, action_id: str, owner: Owner, ttl_s: float, grace_s: float, *, found_own: bool = False
    ) -> ClaimAttempt:
        """Take the claim on a journaled action, if it may be taken (see `Claim`) and its
        target's turn is free (else `busy`)."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal; nothing to recover")
            return self._claim(tx, row, owner, ttl_s, grace_s, found_own)

    def first_look(self, intent: Intent, grace_s: float) -> FirstLook:
        """See `Store.first_look`."""
        with self._read() as tx:
            lease = tx.get_lease(intent.lease_id)
            if tx.get_action(intent.action_id) is not None:
                return FirstLook(False, lease=lease)
            turn = tx.get_turn(intent.target)
            holder = self._turn_holder(tx, ActionRow(intent=intent), turn, tx.now, grace_s)
            seen = None if turn is None else (turn.action_id, turn.epoch)
            return FirstLook(holder is None, seen, lease)

    def begin_sending(
        self,
        intent: Intent,
        owner: Owner,
        ttl_s: float,
        seen: tuple[str, int] | None,
        *,
        approval: str | None,
        evidence: Mapping[str, str] | None = None,
    ) -> FirstSending:
        """See `Store.begin_sending`.

        The turn as seen is the whole fence: a take of a claim on the target writes its
        turn with a new epoch (epochs never repeat), so a turn unchanged since the first
        look means no action took it since, and one that kept nobody off then keeps nobody
        off now (a claim only expires, and a holder whose claim has lapsed can neither mark
        `sending` nor settle)."""
        aid = intent.action_id
        with self._write() as tx:
            if tx.get_action(aid) is not None:
                return FirstSending("journaled")
            # Locks in the one order every write takes them (the action's, its lease's,
            # the turn's), then the clock, so that waiting for them eats no margin.
            lease = tx.get_lease(intent.lease_id)
            turn = tx.get_turn(intent.target)
            now = tx.now
            if (None if turn is None else (turn.action_id, turn.epoch)) != seen:
                return FirstSending("turn_moved")
            problem = approval_problem(
                lease,
                kind=intent.kind,
                target=intent.target,
                amount=intent.amount,
                action_id=aid,
                now=now,
                currency=intent.currency,
            )
            if problem is None and lease is not None and lease.digest() != approval:
                problem = (
                    f"approval {lease.id} changed in the store after it was checked: "
                    "nothing is sent under an approval that was not checked"
                )
            if problem is not None or lease is None:
                return FirstSending("lease_refused", problem)
            claim = Claim(owner, claimed_at=now, expires_at=now + ttl_s, epoch=1, sending=True)
            row = ActionRow(intent=intent, claim=claim, attempts=1)
            tx.journal(aid, "intent", intent.to_dict())
            tx.put_action(row, new=True)
            tx.put_turn(Turn(intent.target, aid, 1))
            tx.journal(
                aid,
                "claim",
                {
                    "owner": owner.to_dict(),
                    "epoch": 1,
                    "expires_at": claim.expires_at,
                    "took_over": None,
                    "early": False,
                },
            )
            tx.put_lease(lease.with_reservation(aid, intent.amount), new=False)
            record: dict[str, Any] = {"expires_at": claim.expires_at, "epoch": 1}
            if evidence:
                record["evidence"] = dict(evidence)
            tx.journal(aid, "sending", record)
            return FirstSending("ok", state=self._state(tx, row), left_s=ttl_s)

    @staticmethod
    def _holds(row: ActionRow, epoch: int, now: float) -> bool:
        claim = row.claim
        return (
            row.settlement is None
            and claim is not None
            and claim.epoch == epoch
            and claim.live(now)
        )

    def mark_sending(
        self,
        action_id: str,
        epoch: int,
        ttl_s: float,
        *,
        approval: str | None = None,
        evidence: Mapping[str, str] | None = None,
    ) -> SendingAttempt:
        """Commit 2: `sending`, the lease reservation and the claim's renewal, all or none;
        with `approval`, only under the very lease the gate checked (see `Store`)."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal")
            # Locked before the clock is read, so that waiting for it eats no margin.
            turn = tx.get_turn(row.intent.target)
            now = tx.now
            if not self._holds(row, epoch, now):
                return SendingAttempt("claim_lost")
            if row.unknown is not None:
                return SendingAttempt("unknown", row.unknown)
            claim = row.claim
            assert claim is not None
            intent = row.intent
            # The turn fences commit 2 as the epoch does: a sibling that took the target's
            # turn since (this claim looked free to it) sends, this one does not.
            if turn is not None and (turn.action_id, turn.epoch) != (action_id, epoch):
                return SendingAttempt("claim_lost")
            if turn is None:
                # A claim taken before the store kept turns.
                tx.put_turn(Turn(intent.target, action_id, epoch))
            lease = tx.get_lease(intent.lease_id)
            problem = approval_problem(
                lease,
                kind=intent.kind,
                target=intent.target,
                amount=intent.amount,
                action_id=action_id,
                now=now,
                currency=intent.currency,
            )
            if problem is not None or lease is None:
                return SendingAttempt("lease_refused", problem)
            if approval is not None and lease.digest() != approval:
                return SendingAttempt(
                    "lease_refused",
                    f"approval {lease.id} changed in the store after it was checked: "
                    "nothing is sent under an approval that was not checked",
                )
            if lease.reservations.get(action_id) != intent.amount:
                tx.put_lease(lease.with_reservation(action_id, intent.amount), new=False)
            row.claim = replace(claim, expires_at=max(claim.expires_at, now + ttl_s), sending=True)
            tx.put_action(row, new=False)
            record: dict[str, Any] = {"expires_at": row.claim.expires_at, "epoch": epoch}
            if evidence:
                record["evidence"] = dict(evidence)
            tx.journal(action_id, "sending", record)
            return SendingAttempt("ok", claim=row.claim, left_s=row.claim.expires_at - now)

    def mark_unknown(self, action_id: str, reason: str) -> None:
        """Record, unfenced and for good, that a create got an answer that may hide a send."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None:
                raise ActionError(action_id, "not in the journal")
            if row.unknown is not None or row.settlement is not None:
                return
            row.unknown = reason
            tx.put_action(row, new=False)
            tx.journal(action_id, "unknown", {"reason": reason})

    def release(self, action_id: str, epoch: int) -> None:
        """End a claim not marked `sending` now, so the next worker need not wait it out."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            if row is None or not self._holds(row, epoch, tx.now):
                return
            claim = row.claim
            assert claim is not None
            if claim.sending:
                return
            row.claim = replace(claim, expires_at=tx.now)
            tx.put_action(row, new=False)

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
        """Commit 3, fenced on `epoch`: outcome, receipt (signed with `key`) and lease
        spend; None if lost."""
        with self._write() as tx:
            row = tx.get_action(action_id)
            now = tx.now
            if row is None:
                raise ActionError(action_id, "not in the journal")
            if not self._holds(row, epoch, now):
                return None
            claim = row.claim
            assert claim is not None
            if row.unknown is not None and not (
                settlement.status in ("sent", "adopted")
                or settlement.code == CODE_REFUND_FAILED
                or (settlement.status, settlement.code) == ("refused", CODE_REFUSED_BY_PERSON)
            ):
                raise ActionError(
                    action_id,
                    f"is unknown ({row.unknown}); only a lookup that finds its refund, or a "
                    "person's refusal, settles it",
                )
            settlement = replace(settlement, at=now)
            intent = row.intent
            lease = tx.get_lease(intent.lease_id)
            if lease is not None:
                released = lease.with_reservation(action_id, None)
                if settlement.status in ("sent", "adopted"):
                    spent = settlement.amount if settlement.amount is not None else intent.amount
                    # The cap holds in the store, not only in the checks before: this
                    # write is the one that counts the money, in the settle's transaction.
                    if lease.spent + spent > lease.cap:
                        raise LeaseError(
                            lease.id,
                            f"recording {spent} for action {action_id} would spend "
                            f"{lease.spent + spent} of its cap of {lease.cap}: refused, "
                            "nothing was recorded; a person must check Stripe",
                        )
                    released = replace(released, spent=lease.spent + spent)
                if released != lease:
                    tx.put_lease(released, new=False)
            fields = {
                "action_id": action_id,
                "kind": intent.kind,
                "target": intent.target,
                "amount": intent.amount,
                # The decision's; for an intent that records none, the found send's.
                "currency": intent.currency or settlement.currency,
                "lease_id": intent.lease_id,
                "decision_fingerprint": intent.fingerprint,
                "outcome": settlement.status,
                "reason": settlement.reason,
                "code": settlement.code,
                "external_id": settlement.external_id,
                "checks": [c.to_dict() for c in checks],
                "owner": owner.to_dict(),
                "attempt": row.attempts,
                "epoch": epoch,
                "at": now,
                **dict(extra),
            }
            receipt = seal(tx.receipt_id(), fields, key)
            tx.add_receipt(receipt)
            row.settlement = settlement
            row.claim = replace(claim, expires_at=now, sending=False)
            row.receipt_seq = receipt.seq
            tx.put_action(row, new=False)
            tx.journal(action_id, "outcome", settlement.to_dict())
            return receipt

    def integrate(self, key: SigningKey | None) -> TreeHead | None:
        """Number the receipts not yet in the log and sign a tree head over them with
        `key`; None when there are none, or another process is numbering them now."""
        # Most calls find nothing new: a read says so without a write transaction.
        with self._read() as tx:
            if not tx.unlogged(1):
                return None
        with self._write() as tx:
            return integrate(tx, key)

    def mark_anchored(self, size: int, at: float) -> None:
        """Record that the head of `size` was published to every anchor."""
        with self._write() as tx:
            tx.mark_anchored(size, at)

    def latest_head(self) -> StoredHead | None:
        """The receipt log's largest tree head (None: none yet)."""
        with self._read() as tx:
            return tx.latest_head()

    def grant_lease(self, lease: Lease) -> Lease:
        """Store a new lease."""
        with self._write() as tx:
            if tx.get_lease(lease.id) is not None:
                raise LeaseError(lease.id, "already exists; grant a new lease under a new id")
            tx.put_lease(lease, new=True)
            return lease

    def revoke_lease(
        self,
        lease_id: str,
        by: str,
        *,
        owner: Owner | None = None,
        reason: str | None = None,
        extra: Mapping[str, Any] | None = None,
        key: SigningKey | None = None,
    ) -> Lease:
        """Revoke a lease; later checks refuse under it. With `owner`, its receipt too, in
        the same commit (see `Store.revoke_lease`); a lease already revoked is returned as
        it is, with no second receipt."""
        with self._write() as tx:
            lease = tx.get_lease(lease_id)
            if lease is None:
                raise LeaseError(lease_id, "no such lease; check the id")
            if lease.damaged is not None:
                # Written back, its stored data would stand for it: the revocation lost.
                raise LeaseError(
                    lease_id,
                    f"is damaged in the store ({lease.damaged}): every action under it is "
                    "already refused; nothing was changed",
                )
            if lease.revoked:
                return lease
            now = tx.now
            lease = replace(lease, revoked_at=now, revoked_by=by)
            if owner is not None:
                fields = {
                    **dict(extra or {}),
                    "record": REVOCATION,
                    "action_id": revocation_label(lease_id),
                    "lease_id": lease_id,
                    # What was revoked, exactly: the digest a send's commit 2 compares.
                    "approval_digest": lease.digest(),
                    "revoked_by": by,
                    "reason": reason,
                    "owner": owner.to_dict(),
                    "at": now,
                }
                receipt = seal(tx.receipt_id(), fields, key)
                tx.add_receipt(receipt)
                lease = replace(lease, revocation_receipt=receipt.seq)
            tx.put_lease(lease, new=False)
            return lease

    def receipt(self, seq: int) -> Receipt | None:
        """The receipt with id `seq` (None: there is none)."""
        with self._read() as tx:
            return tx.get_receipt(seq)

    def lease(self, lease_id: str) -> Lease | None:
        """One lease, with its spend and reservations."""
        with self._read() as tx:
            return tx.get_lease(lease_id)

    def action(self, action_id: str) -> ActionState | None:
        """The journal's view of one action."""
        with self._read() as tx:
            row = tx.get_action(action_id)
            return None if row is None else self._state(tx, row)


Clock = Callable[[], float]
