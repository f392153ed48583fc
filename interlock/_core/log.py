"""The receipt log: receipts as leaves of an RFC 9162 Merkle tree, with signed tree heads.

A settle writes its receipt with an id and no place in the log, taking no store-wide lock.
`integrate` numbers the receipts not yet in the log, in id order, after their commits (as
Certificate Transparency logs and Trillian sequence submitted entries in batches): under
the log's own lock, taken without waiting (a second sequencer leaves the batch to the
first), it appends their leaf hashes to the tree's compact frontier and signs a tree head
over the new size and root. A head is the log's statement "these first `size` receipts,
exactly": a receipt removed or rewritten after a head was signed no longer hashes to its
root, and after the head was anchored outside the store (`interlock._core.anchors`) not
even a writer who holds the signing key can make them agree again.

`log_problems` is `verify()`'s part: every leaf in place, the tree recomputed and compared
with every head, each head's signature, and heads that only grow. `inclusion` gives an
action's receipt with its proof against the latest head, for `python -m interlock proof`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from interlock._core.errors import InterlockError
from interlock._core.heads import LogLeaf, TreeHead, head_body, parse_head
from interlock._core.merkle import Frontier, inclusion_proof, leaf_hash
from interlock._core.signing import ENV_VERIFY_KEYS, HEAD_TYPE, KeyList, SigningKey

if TYPE_CHECKING:
    from interlock._core.anchors import Anchor, AnchoredHead

# The place a store gives a leaf or a head whose stored number cannot be read.
UNREADABLE_PLACE = -1

# How far a head's time may fall behind the head below it before verify calls it an old
# head reused: a host's wall clock stepped back (NTP) moves a head back by seconds; a head
# dated into the past (a retired key's holder signing under an earlier date) by far more.
HEAD_CLOCK_SLACK_S = 300.0

# How many receipts one integration numbers at most: a bounded transaction, however long
# the log went without one (the next call takes the rest).
BATCH = 10_000


@dataclass(frozen=True)
class StoredHead:
    """A tree head as the store keeps it: the size it is filed under, its body and
    signature, the frontier it was computed from, and when it was published to the
    anchors (None: not yet)."""

    size: int
    body_text: str
    signature: str | None
    frontier: str
    anchored_at: float | None

    @property
    def head(self) -> TreeHead:
        """The head its body states; `ValueError` in words when it states none."""
        return parse_head(self.body_text, self.signature)

    @classmethod
    def of(cls, head: TreeHead, frontier: str) -> StoredHead:
        """A new head to store, not yet anchored."""
        return cls(head.size, head.body_text, head.signature, frontier, None)


@dataclass(frozen=True)
class LoggedReceipt:
    """A receipt in the log: its place, id, action and body text."""

    leaf: int
    seq: int
    action_id: str
    body_text: str


class LogTx(Protocol):
    """What `integrate` needs of a store's write transaction."""

    now: float

    def lock_log(self) -> bool:
        """Take the log's lock for the rest of the transaction without waiting: False
        when another integration holds it."""
        ...

    def latest_head(self) -> StoredHead | None: ...
    def unlogged(self, limit: int) -> list[tuple[int, str, str]]:
        """Up to `limit` receipts not in the log: (id, action id, body), oldest id first."""
        ...

    def set_leaves(self, places: Sequence[tuple[int, int]]) -> None:
        """Give receipts their places: (leaf, id) pairs."""
        ...

    def add_head(self, head: StoredHead) -> None: ...


def make_head(size: int, root: bytes, at: float, key: SigningKey | None) -> TreeHead:
    """A tree head over `size` leaves with this root, signed with `key` (None: unsigned)."""
    body = head_body(size, root.hex(), at, None if key is None else key.key_id)
    signature = None if key is None else key.sign(body.encode(), HEAD_TYPE)
    return TreeHead(size, root.hex(), at, None if key is None else key.key_id, body, signature)


def integrate(tx: LogTx, key: SigningKey | None, limit: int = BATCH) -> TreeHead | None:
    """Number the receipts not yet in the log and sign a head over them, in `tx`; None when
    there are none, or another integration holds the log."""
    if not tx.lock_log():
        return None
    rows = tx.unlogged(limit)
    if not rows:
        return None
    latest = tx.latest_head()
    frontier = Frontier() if latest is None else Frontier.from_text(latest.frontier)
    places = []
    for seq, _action_id, body in rows:
        places.append((frontier.size, seq))
        frontier.append(leaf_hash(body.encode()))
    tx.set_leaves(places)
    head = make_head(frontier.size, frontier.root(), tx.now, key)
    tx.add_head(StoredHead.of(head, frontier.to_text()))
    return head


class LogReader(Protocol):
    """What `log_problems` and `inclusion` read of a store."""

    def heads(self, after: int = -1) -> Iterator[StoredHead]:
        """The tree heads larger than `after`, smallest first."""
        ...

    def logged(self) -> Iterator[LoggedReceipt]:
        """Every receipt in the log, in leaf order."""
        ...


@dataclass
class LogReport:
    """What the log check found: its size, heads, and problems in words."""

    size: int = 0
    heads: int = 0
    anchored: int = 0
    checked_anchored: int = 0
    problems: list[str] = field(default_factory=list)
    vouched: int = 0
    """The size of the largest head whose signature verified under the keys and whose root
    the leaves recomputed, the leaves below it in place (0: none, or no keys)."""


def _head_problem(
    stored: StoredHead, keys: KeyList | None, previous: TreeHead | None
) -> str | None:
    try:
        head = stored.head
    except ValueError as e:
        return str(e)
    if head.size != stored.size:
        return f"its body says size {head.size} (a head moved to another place)"
    if previous is not None and head.at < previous.at - HEAD_CLOCK_SLACK_S:
        return (
            f"signed at {_when(head.at)}, before the smaller head of size {previous.size} "
            f"({_when(previous.at)}): an old head reused"
        )
    if keys is None:
        if head.signature is not None:
            return (
                f"signed by key {head.key_id}, but no key list was given to check it (set "
                f"{ENV_VERIFY_KEYS} or pass keys=)"
            )
        return None
    if head.signature is None:
        return "unsigned, but the log is signed: a downgrade (written without the key)"
    return keys.problem(head.key_id, head.at, head.body_text.encode(), HEAD_TYPE, head.signature)


def log_problems(
    store: LogReader, keys: KeyList | None, anchored: Sequence[AnchoredHead] = ()
) -> LogReport:
    """Check the log: leaves numbered from 0 without a gap, the tree they make against every
    head (so nothing under a head was removed or rewritten), and each head's signature.
    With `anchored` (what anchors hold), also each anchored head's root at its size and
    each anchored receipt's leaf hash at its place: what changed after it was anchored is
    named, receipt by receipt, whatever the store's own heads now say."""
    report = LogReport()
    problems = report.problems
    heads = iter(store.heads())
    pending = next(heads, None)
    previous: TreeHead | None = None
    frontier = Frontier()
    gap = False
    outside = _Anchored(anchored, keys)

    def check(stored: StoredHead) -> None:
        nonlocal previous
        report.heads += 1
        report.anchored += stored.anchored_at is not None
        where = f"tree head of size {stored.size}"
        problem = _head_problem(stored, keys, previous)
        if problem is not None:
            problems.append(f"{where}: {problem}")
            return
        head = stored.head
        if not gap and frontier.root().hex() != head.root:
            problems.append(
                f"{where}: the log's first {stored.size} receipts no longer hash to its root "
                "(a receipt under it was removed or rewritten after it was signed)"
            )
        elif not gap and stored.frontier != frontier.to_text():
            # The next head is computed from the latest head's frontier, not the leaves.
            problems.append(
                f"{where}: its stored frontier is not the one of the log's first "
                f"{stored.size} receipts (edited by hand: a head computed from it is wrong)"
            )
        elif not gap and keys is not None and head.size == frontier.size:
            report.vouched = head.size
        previous = head

    while pending is not None and pending.size <= 0:
        if pending.size == UNREADABLE_PLACE:
            problems.append("a tree head's size cannot be read (edited by hand)")
            report.heads += 1
        else:
            check(pending)
        pending = next(heads, None)
    for entry in store.logged():
        if entry.leaf == UNREADABLE_PLACE:
            problems.append(
                f"receipt {entry.seq} ({entry.action_id}): its place in the log cannot be read "
                "(edited by hand)"
            )
            gap = True
            continue
        if entry.leaf != frontier.size and not gap:
            problems.append(
                f"receipt {entry.seq} ({entry.action_id}) is at log position {entry.leaf}, "
                f"where position {frontier.size} was expected: receipts were removed from "
                "the log"
            )
            gap = True
        leaf = leaf_hash(entry.body_text.encode())
        outside.leaf(entry.leaf, leaf, problems)
        frontier.append(leaf)
        outside.size(frontier, problems, gap)
        while pending is not None and pending.size <= frontier.size:
            check(pending)
            pending = next(heads, None)
    report.size = frontier.size
    if pending is not None:
        dropped = sum(1 for _ in heads) + 1
        problems.append(
            f"tree head of size {pending.size} signs more receipts than the log holds "
            f"({frontier.size}): receipts at log positions {frontier.size} to "
            f"{pending.size - 1} were removed after it was signed"
            + (f" ({dropped} heads above the log)" if dropped > 1 else "")
        )
        report.heads += dropped
    outside.beyond(frontier.size, problems)
    report.checked_anchored = len(anchored)
    return report


class _Anchored:
    """What the anchors hold, walked beside the store's log in leaf order."""

    def __init__(self, anchored: Sequence[AnchoredHead], keys: KeyList | None) -> None:
        self.heads = sorted(anchored, key=lambda a: a.head.size)
        self.leaves: dict[int, tuple[LogLeaf, AnchoredHead]] = {}
        self.problems_of_heads: list[str] = []
        for a in self.heads:
            for leaf in a.leaves:
                self.leaves.setdefault(leaf.index, (leaf, a))
            if keys is not None:
                problem = (
                    "unsigned"
                    if a.head.signature is None
                    else keys.problem(
                        a.head.key_id,
                        a.head.at,
                        a.head.body_text.encode(),
                        HEAD_TYPE,
                        a.head.signature,
                    )
                )
                if problem is not None:
                    self.problems_of_heads.append(
                        f"the head of size {a.head.size} held by {a.where}: {problem} (not "
                        "the log's: the anchor's record is not evidence)"
                    )
        self._next = 0

    def leaf(self, index: int, leaf: bytes, problems: list[str]) -> None:
        held = self.leaves.get(index)
        if held is not None and held[0].leaf_hash != leaf.hex():
            anchored_leaf, a = held
            problems.append(
                f"receipt of action {anchored_leaf.action_id} at log position {index} was "
                f"altered after it was anchored in {a.where} at {_when(a.anchored_at)} "
                "(its leaf hash differs)"
            )

    def size(self, frontier: Frontier, problems: list[str], gap: bool) -> None:
        while self._next < len(self.heads) and self.heads[self._next].head.size <= frontier.size:
            a = self.heads[self._next]
            self._next += 1
            if a.head.size == frontier.size and not gap and frontier.root().hex() != a.head.root:
                problems.append(
                    f"the log's first {a.head.size} receipts no longer hash to the root "
                    f"anchored in {a.where} at {_when(a.anchored_at)}: the log was rewritten "
                    "after it was anchored"
                )

    def beyond(self, size: int, problems: list[str]) -> None:
        problems.extend(self.problems_of_heads)
        largest = self.heads[-1] if self.heads else None
        if largest is None or largest.head.size <= size:
            return
        gone = sorted(
            (leaf for leaf, _ in self.leaves.values() if leaf.index >= size),
            key=lambda leaf: leaf.index,
        )
        names = ", ".join(f"{leaf.action_id} (position {leaf.index})" for leaf in gone[:10])
        more = f" and {len(gone) - 10} more" if len(gone) > 10 else ""
        problems.append(
            f"{largest.where} holds a head of size {largest.head.size}, anchored at "
            f"{_when(largest.anchored_at)}, but the log holds {size} receipts: receipts at "
            f"log positions {size} to {largest.head.size - 1} were removed after they were "
            "anchored" + (f": {names}{more}" if names else "")
        )


def _error(e: Exception) -> str:
    """An error in words: a library's own as it says itself, any other with its kind."""
    return str(e) if isinstance(e, InterlockError) else f"{type(e).__name__}: {e}"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def inclusion(store: LogReader, seq: int) -> tuple[LoggedReceipt, StoredHead, list[bytes]] | None:
    """The receipt with id `seq`, the latest head and the receipt's inclusion proof against
    it; None when the receipt is not in a head yet."""
    latest: StoredHead | None = None
    for stored in store.heads():
        latest = stored
    if latest is None:
        return None
    hashes: list[bytes] = []
    found: LoggedReceipt | None = None
    for entry in store.logged():
        if entry.leaf >= latest.size:
            break
        hashes.append(leaf_hash(entry.body_text.encode()))
        if entry.seq == seq:
            found = entry
    if found is None:
        return None
    return found, latest, inclusion_proof(found.leaf, hashes)


class LogStore(LogReader, Protocol):
    """What a `LogKeeper` needs of a store."""

    def integrate(self, key: SigningKey | None) -> TreeHead | None: ...
    def mark_anchored(self, size: int, at: float) -> None: ...
    def latest_head(self) -> StoredHead | None: ...
    def logged(self, start: int = 0) -> Iterator[LoggedReceipt]: ...


@dataclass(frozen=True)
class LogStatus:
    """What one catch-up did: the head it signed (None: nothing new), how many heads it
    published to the anchors, and what went wrong (None: nothing)."""

    head: TreeHead | None
    published: int
    problem: str | None


class LogKeeper:
    """A gate's part in the receipt log. Once `every` receipts have settled, or
    `interval_s` seconds after the first receipt not yet in the log, it numbers the
    receipts not in the log, signs a head and publishes every head not yet anchored;
    `catch_up()` does it at once (`recover()` calls it). While no action settles, a
    one-shot timer thread, armed by the first receipt left out of the log, does it when
    its `interval_s` are up, and reports the result to `report` from that thread; `close()`
    stops the timer and catches up what is left, so no receipt waits for the next settle.

    The order keeps the log and its anchors honest across a crash at any point: a head is
    committed in the store before any anchor sees it (an anchor never holds a head the
    store lacks), and marked anchored only after every anchor took it (a head published
    but not marked is published again: anchors take the same head twice as once). A
    failure here never fails the action whose settle came first: its receipt is already
    committed; the next catch-up carries on, and `verify` counts what is not in the log.
    """

    def __init__(
        self,
        store: LogStore,
        key: SigningKey | None,
        anchors: Sequence[Anchor] = (),
        *,
        every: int = 100,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        report: Callable[[LogStatus], None] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"log_every must be at least 1 receipt, not {every}")
        if not interval_s > 0:
            raise ValueError(
                f"log_interval_s must be a number of seconds above 0, not {interval_s}"
            )
        self.store = store
        self.key = key
        self.anchors = tuple(anchors)
        self.every = every
        self.interval_s = interval_s
        self._clock = clock
        self._monotonic = monotonic
        self._since = 0
        self._last = monotonic()
        self._lock = threading.Lock()
        # The size of the last head this keeper saw anchored: heads are scanned from it.
        self._anchored = -1
        # The latest head's hash as this keeper last saw it (read once, then its own).
        self._latest: str | None = None
        self._read_latest = False
        self._report = report
        # An interval past what a thread can wait (inf: "never by time") has no timer.
        self._timed_too = interval_s <= threading.TIMEOUT_MAX
        self._timer: threading.Timer | None = None
        self._closed = False

    def latest_hash(self) -> str | None:
        """The hash of the latest signed tree head this keeper knows of, for a send's
        metadata (None: the log has no head yet, or it cannot be read now)."""
        if not self._read_latest:
            try:
                stored = self.store.latest_head()
                latest = None if stored is None else stored.head.hash
            except (InterlockError, ValueError):
                return self._latest
            with self._lock:
                self._read_latest = True
                self._latest = self._latest or latest
        return self._latest

    def settled(self) -> LogStatus | None:
        """A receipt was committed: catch up if it is time (None: not yet; the timer will)."""
        with self._lock:
            self._since += 1
            waited = self._monotonic() - self._last
            due = self._since >= self.every or waited >= self.interval_s
            if not due and self._timer is None and not self._closed and self._timed_too:
                # Real seconds whatever clock the gate was given: the timer bounds how
                # long a receipt waits, in the world, to enter the log.
                timer = threading.Timer(self.interval_s, self._timed)
                timer.daemon = True
                timer.name = "interlock-receipt-log"
                self._timer = timer
                timer.start()
        return self.catch_up() if due else None

    def close(self) -> LogStatus | None:
        """Stop the timer and put the receipts it was waiting for into the log now (None:
        there were none). Later settles catch up only when `every` receipts have come."""
        with self._lock:
            self._closed = True
            pending = self._since > 0
        return self.catch_up() if pending else None

    def _timed(self) -> None:
        with self._lock:
            # Cancelled too late: a catch-up or close() came first and took its receipts.
            if self._timer is not threading.current_thread() or self._closed:
                return
        status = self.catch_up()
        if self._report is not None:
            self._report(status)

    def catch_up(self) -> LogStatus:
        """Number the receipts not in the log, sign a head, publish unanchored heads."""
        with self._lock:
            self._since = 0
            self._last = self._monotonic()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        # The refund before it stands, whatever breaks here: reported, tried again next time.
        try:
            head = self.store.integrate(self.key)
        except Exception as e:
            return LogStatus(None, 0, f"the receipt log was not extended: {_error(e)}")
        if head is not None:
            with self._lock:
                self._latest, self._read_latest = head.hash, True
        published, problem = self._publish()
        return LogStatus(head, published, problem)

    def _publish(self) -> tuple[int, str | None]:
        if not self.anchors:
            return 0, None
        published = 0
        previous = max(self._anchored, 0)
        try:
            for stored in list(self.store.heads(self._anchored)):
                if stored.anchored_at is None:
                    head = stored.head
                    leaves = []
                    for e in self.store.logged(previous):
                        if e.leaf >= stored.size:
                            break
                        leaves.append(
                            LogLeaf(e.leaf, e.action_id, leaf_hash(e.body_text.encode()).hex())
                        )
                    for anchor in self.anchors:
                        anchor.publish(head, leaves)
                    self.store.mark_anchored(stored.size, self._clock())
                    published += 1
                previous = self._anchored = stored.size
        except Exception as e:
            return published, f"a tree head was not anchored: {_error(e)}"
        return published, None
