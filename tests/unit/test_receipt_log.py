"""The receipt log: signed receipts, the Merkle log, its heads and anchors, on every store.

The log's contract runs on memory and SQLite here, and on PostgreSQL in
`tests/e2e/test_store_contract_e2e.py` (which collects these tests too). Then the attacks
of the threat model's rows for the receipt key, the store's writers and the anchor, each
done the way its attacker would: on the stored rows (SQL on the file), with or without
the gate's private key, never through the library's own write path.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import pytest

from interlock import (
    UNSIGNED_APPROVALS,
    Event,
    Gate,
    Intent,
    KeyList,
    Lease,
    SigningKey,
    SQLiteStore,
    Store,
    StripeRefund,
    Timing,
    VerifyResult,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._core.anchors import Anchor, FileAnchor
from interlock._core.effects import GRANT_METADATA_KEY, HEAD_METADATA_KEY
from interlock._core.log import make_head
from interlock._core.merkle import Frontier, leaf_hash, verify_inclusion
from interlock._core.receipts import canonical_json
from interlock._core.signing import RECEIPT_TYPE
from interlock.testing import InProcessPayments
from tests.helpers.gate_rig import Clock, remote_owner
from tests.unit.test_store_contract import (
    BACKENDS,
    CHECKS,
    GRACE,
    TTL,
    Backend,
    _intent,
    _lease,
    _sent,
    open_backend,
)

DATA = Path(__file__).resolve().parents[1] / "data"
KEY = SigningKey.generate()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each store kind of this tier in turn (PostgreSQL's in the e2e tier)."""
    yield from open_backend(request, tmp_path)


def _keys(*keys: SigningKey) -> KeyList:
    trusted = KeyList()
    for key in keys or (KEY,):
        trusted.add(key.public)
    return trusted


def _settle_one(store: Store, clock: Clock, key: SigningKey | None = KEY) -> str:
    """Journal a decision, mark it sending and settle it: one receipt, not yet logged."""
    intent = _intent(_lease(store, clock()))
    owner = remote_owner()
    epoch = store.begin(intent, owner, TTL, GRACE).epoch
    assert store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
    assert store.settle(intent.action_id, epoch, owner, _sent(), CHECKS, {}, key) is not None
    return intent.action_id


# -- the log's contract, on every store --------------------------------------------------


def test_a_settle_writes_a_signed_receipt_outside_the_log(backend: Backend) -> None:
    """Commit 3 signs the receipt with the gate's key and leaves its place to `integrate`:
    the receipt verifies under the public key alone, and is counted as not in the log."""
    clock = Clock()
    store = backend.make(clock)
    aid = _settle_one(store, clock)
    state = store.action(aid)
    assert state is not None and state.receipt is not None
    receipt = state.receipt
    body = json.loads(receipt.body_text)
    assert (body["v"], body["signed"], body["key_id"]) == (2, True, KEY.key_id)
    assert "prev_hash" not in body and "seq" not in body
    assert receipt.hash == leaf_hash(receipt.body_text.encode()).hex()
    assert KEY.public.verify(receipt.body_text.encode(), RECEIPT_TYPE, str(receipt.signature))
    assert store.unlogged_count() == 1 and list(store.logged()) == [] and list(store.heads()) == []


def test_integrate_numbers_receipts_in_id_order_and_signs_a_head(backend: Backend) -> None:
    """`integrate` gives every unlogged receipt the next place, oldest id first, and signs
    a head over the new size whose root is the RFC 9162 root of their leaf hashes."""
    clock = Clock()
    store = backend.make(clock)
    aids = [_settle_one(store, clock) for _ in range(3)]

    head = store.integrate(KEY)

    assert head is not None and head.size == 3 and head.key_id == KEY.key_id
    logged = list(store.logged())
    assert [e.leaf for e in logged] == [0, 1, 2]
    assert [e.action_id for e in logged] == aids
    frontier = Frontier()
    for e in logged:
        frontier.append(leaf_hash(e.body_text.encode()))
    assert head.root == frontier.root().hex()
    assert store.integrate(KEY) is None  # nothing new: no empty head
    aids.append(_settle_one(store, clock))
    second = store.integrate(KEY)
    assert second is not None and second.size == 4
    assert [h.size for h in store.heads()] == [3, 4]
    assert store.unlogged_count() == 0
    assert [e.action_id for e in store.logged(3)] == aids[3:]
    result = verify(store, keys=_keys())
    assert result.ok, result.problems
    assert (result.log_size, result.heads, result.unlogged) == (4, 2, 0)
    assert result.formats == {"ed25519": 4}


def test_mark_anchored_is_kept_per_head(backend: Backend) -> None:
    """A head is marked anchored alone; the others stay unanchored for the next publish."""
    clock = Clock()
    store = backend.make(clock)
    _settle_one(store, clock)
    store.integrate(KEY)
    _settle_one(store, clock)
    store.integrate(KEY)

    store.mark_anchored(1, 123.0)

    assert [(h.size, h.anchored_at) for h in store.heads()] == [(1, 123.0), (2, None)]


def test_the_gate_logs_and_anchors_after_its_settles(backend: Backend, tmp_path: Path) -> None:
    """A gate with `log_every=2` leaves the first receipt unlogged and logs both at the
    second settle, publishing the head to its anchor; verify with the anchor holds."""
    clock = Clock()
    store = backend.make(clock)
    payments = InProcessPayments()
    (tmp_path / "elsewhere").mkdir()
    anchor = FileAnchor(tmp_path / "elsewhere" / "heads.jsonl")
    events: list[str] = []
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        signing_key=KEY,
        approvers=UNSIGNED_APPROVALS,
        anchors=[anchor],
        log_every=2,
        log_interval_s=3600,
        clock=clock,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        on_event=lambda e: events.append(e.kind.value),
    )

    def send() -> None:
        pi = payments.create_payment(5000).id
        lease = Lease(
            f"lease_{uuid.uuid4().hex[:8]}", "refund", pi, 1000, clock() + 3600, "t", clock()
        )
        store.grant_lease(lease)
        fingerprint = refunds_fingerprint(payments.list_refunds(pi))
        intent = Intent(new_action_id(), "refund", pi, 1000, lease.id, fingerprint)
        assert gate.submit(intent).status == "sent"

    send()
    assert store.unlogged_count() == 1 and "logged" not in events
    send()
    assert store.unlogged_count() == 0 and events.count("logged") == 1
    assert [(h.head.size, h.anchored_at is not None) for h in store.heads()] == [(2, True)]
    assert [a.head.size for a in anchor.heads()] == [2]
    result = verify(store, payments, keys=_keys(), anchors=[anchor])
    assert result.ok, result.problems
    assert (result.log_size, result.anchored) == (2, 1)


def _idle_gate(
    store: Store,
    payments: InProcessPayments,
    interval_s: float,
    on_event: Callable[[Event], None] | None = None,
    anchors: Sequence[Anchor] = (),
) -> Gate:
    """A gate on real clocks whose log waits for 100 receipts or `interval_s` seconds."""
    return Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        signing_key=KEY,
        approvers=UNSIGNED_APPROVALS,
        anchors=anchors,
        log_interval_s=interval_s,
        on_event=on_event,
    )


def _refund(store: Store, payments: InProcessPayments, gate: Gate) -> str:
    """A $10 refund of a new $50 payment under an approval of its own, sent."""
    pi = payments.create_payment(5000).id
    now = time.time()
    lease = Lease(f"lease_{uuid.uuid4().hex[:8]}", "refund", pi, 1000, now + 3600, "t", now)
    store.grant_lease(lease)
    intent = Intent(
        new_action_id(),
        "refund",
        pi,
        1000,
        lease.id,
        refunds_fingerprint(payments.list_refunds(pi)),
    )
    assert gate.submit(intent).status == "sent"
    return intent.action_id


def _log_timers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "interlock-receipt-log"}


def test_a_lone_receipt_enters_the_log_while_the_gate_is_idle(
    backend: Backend, tmp_path: Path
) -> None:
    """One refund and then nothing: the receipt does not wait for a 100th settle or the
    next `recover()`; the gate's timer logs it and anchors the head after `log_interval_s`,
    and `on_event` hears of it from the timer's thread."""
    store = backend.make()
    payments = InProcessPayments()
    (tmp_path / "elsewhere").mkdir()
    anchor = FileAnchor(tmp_path / "elsewhere" / "heads.jsonl")
    logged = threading.Event()
    seen: list[tuple[Event, str]] = []

    def on_event(event: Event) -> None:
        if event.kind.value == "logged":
            seen.append((event, threading.current_thread().name))
            logged.set()

    gate = _idle_gate(store, payments, 0.2, on_event, anchors=[anchor])
    _refund(store, payments, gate)
    assert logged.wait(60), "no tree head while the gate was idle"

    ((event, thread),) = seen
    assert thread == "interlock-receipt-log"
    assert (event.data["size"], event.data["published"], event.data["problem"]) == (1, 1, None)
    assert store.unlogged_count() == 0
    assert [a.head.size for a in anchor.heads()] == [1]
    result = verify(store, payments, keys=_keys(), anchors=[anchor])
    assert result.ok and (result.log_size, result.anchored) == (1, 1), result.problems


def test_close_logs_the_receipts_the_timer_waited_for_and_stops_it(backend: Backend) -> None:
    """`gate.close()` before the interval is up: the waiting receipts go into the log at
    once, and the timer's thread is gone (it logs nothing after, and holds no store)."""
    store = backend.make()
    payments = InProcessPayments()
    before = _log_timers()
    gate = _idle_gate(store, payments, 3600)
    _refund(store, payments, gate)
    _refund(store, payments, gate)
    (timer,) = _log_timers() - before
    assert store.unlogged_count() == 2

    gate.close()

    timer.join(60)
    assert not timer.is_alive()
    assert store.unlogged_count() == 0
    assert [h.head.size for h in store.heads()] == [2]
    # Still a working gate: its later receipts are logged by `recover()`, not by a timer.
    _refund(store, payments, gate)
    assert _log_timers() - before == set()
    gate.recover()
    assert [h.head.size for h in store.heads()] == [2, 3]


@pytest.mark.parametrize("interval_s", [float("inf"), 1e12])
def test_an_interval_no_thread_can_wait_means_no_timer(backend: Backend, interval_s: float) -> None:
    """`log_interval_s=inf` (never by time) or past what a thread can wait: no timer is
    armed, nothing breaks in a thread, and the receipt waits for `log_every` or
    `recover()`."""
    store = backend.make()
    payments = InProcessPayments()
    broken: list[BaseException | None] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: broken.append(args.exc_value)
    try:
        before = _log_timers()
        gate = _idle_gate(store, payments, interval_s)
        _refund(store, payments, gate)
        assert _log_timers() - before == set()
    finally:
        threading.excepthook = hook
    assert broken == [] and store.unlogged_count() == 1
    gate.recover()
    assert store.unlogged_count() == 0


@pytest.mark.parametrize("interval_s", [0, -1, float("nan")])
def test_an_interval_that_is_not_a_positive_number_is_refused(
    backend: Backend, interval_s: float
) -> None:
    """A zero, negative or NaN `log_interval_s` is refused in words at the gate's start."""
    with pytest.raises(ValueError, match="log_interval_s must be a number of seconds above 0"):
        _idle_gate(backend.make(), InProcessPayments(), interval_s)


def test_timers_and_settles_of_two_gates_at_once_log_every_receipt_once(
    backend: Backend,
) -> None:
    """Two gates on one store, each driven by four threads, their timers firing every few
    milliseconds between and during settles: after close, every receipt is in the log
    exactly once, the heads only grow, and verify finds nothing wrong."""
    store = backend.make()
    payments = InProcessPayments()
    problems: list[str] = []

    def on_event(event: Event) -> None:
        if event.kind.value == "logged" and event.data["problem"]:
            problems.append(str(event.data["problem"]))

    gates = [_idle_gate(store, payments, 0.005, on_event) for _ in range(2)]
    actions: list[str] = []
    errors: list[BaseException] = []

    def drive(gate: Gate) -> None:
        try:
            for _ in range(6):
                actions.append(_refund(store, payments, gate))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=drive, args=(g,)) for g in gates for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for gate in gates:
        gate.close()

    assert problems == []
    assert store.unlogged_count() == 0
    places = sorted(e.leaf for e in store.logged())
    assert places == list(range(len(actions))) == list(range(48))
    assert sorted(e.action_id for e in store.logged()) == sorted(actions)
    sizes = [h.head.size for h in store.heads()]
    assert sizes == sorted(set(sizes)) and sizes[-1] == 48
    result = verify(store, payments, keys=_keys())
    assert result.ok and result.log_size == 48, result.problems


# -- the attacks: a store writer, with and without the gate's key --------------------------


class World:
    """A gate over a SQLite store with its log anchored in a file elsewhere, five refunds
    sent through it; `sql` edits the store's file the way a writer of it would."""

    def __init__(
        self,
        tmp_path: Path,
        key: SigningKey = KEY,
        sends: int = 5,
        clock: Clock | None = None,
        others: Sequence[Anchor] = (),
    ) -> None:
        """`others`: anchors the gate publishes to beside the file (`anchor`)."""
        self.path = tmp_path / "journal.sqlite3"
        self.payments = InProcessPayments()
        self.clock = clock
        self.store = (
            SQLiteStore(self.path) if clock is None else SQLiteStore(self.path, clock=clock)
        )
        (tmp_path / "elsewhere").mkdir()
        self.anchor = FileAnchor(tmp_path / "elsewhere" / "heads.jsonl")
        self.others = tuple(others)
        self.key = key
        self.gate = self._gate(key)
        self.actions = [self.send() for _ in range(sends)]

    def _gate(self, key: SigningKey) -> Gate:
        return Gate(
            self.store,
            StripeRefund(self.payments),
            timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
            signing_key=key,
            approvers=UNSIGNED_APPROVALS,
            anchors=[self.anchor, *self.others],
            log_every=1,
            **(
                {}
                if self.clock is None
                else {
                    "clock": self.clock,
                    "sleep": self.clock.sleep,
                    "monotonic": self.clock.monotonic,
                }
            ),
        )

    def decide(self) -> Intent:
        """A $10 refund decided on a new $50 payment, under an approval of its own."""
        pi = self.payments.create_payment(5000).id
        now = time.time() if self.clock is None else self.clock()
        lease = Lease(f"lease_{uuid.uuid4().hex[:8]}", "refund", pi, 1000, now + 3600, "t", now)
        self.store.grant_lease(lease)
        fingerprint = refunds_fingerprint(self.payments.list_refunds(pi))
        return Intent(new_action_id(), "refund", pi, 1000, lease.id, fingerprint)

    def send(self) -> str:
        intent = self.decide()
        assert self.gate.submit(intent).status == "sent"
        return intent.action_id

    def sql(self, statement: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                return conn.execute(statement, args).fetchall()
        finally:
            conn.close()

    def verify(self, keys: KeyList | None = None, *, anchored: bool = True) -> list[str]:
        return self.result(keys, anchored=anchored).problems

    def result(
        self,
        keys: KeyList | None = None,
        *,
        anchored: bool = True,
        signatures: Literal["every", "heads"] = "every",
    ) -> VerifyResult:
        store = SQLiteStore.open_read_only(self.path)
        try:
            return verify(
                store,
                keys=keys or _keys(),
                anchors=[self.anchor] if anchored else [],
                signatures=signatures,
            )
        finally:
            store.close()

    def body(self, leaf: int) -> dict[str, object]:
        ((text,),) = self.sql("SELECT body FROM receipts WHERE leaf=?", (leaf,))
        body: dict[str, object] = json.loads(str(text))
        return body

    def rewrite(self, leaf: int, key: SigningKey | None, **fields: object) -> None:
        """Put new fields in the receipt at `leaf`, its hash recomputed, re-signed with
        `key` (None: the old signature stays)."""
        body = {**self.body(leaf), **fields}
        text = canonical_json(body)
        digest = leaf_hash(text.encode()).hex()
        if key is None:
            self.sql("UPDATE receipts SET body=?, hash=? WHERE leaf=?", (text, digest, leaf))
        else:
            signature = key.sign(text.encode(), RECEIPT_TYPE)
            self.sql(
                "UPDATE receipts SET body=?, hash=?, signature=? WHERE leaf=?",
                (text, digest, signature, leaf),
            )

    def rebuild_heads(self, key: SigningKey) -> None:
        """What a writer holding the key does after editing: every head signed again over
        the leaves as they now are, so the store agrees with itself."""
        rows = self.sql("SELECT body FROM receipts WHERE leaf IS NOT NULL ORDER BY leaf")
        sizes = [int(str(r[0])) for r in self.sql("SELECT size FROM heads ORDER BY size")]
        frontier = Frontier()
        self.sql("DELETE FROM heads")
        for i, (text,) in enumerate(rows):
            frontier.append(leaf_hash(str(text).encode()))
            if i + 1 in sizes:
                head = make_head(i + 1, frontier.root(), time.time(), key)
                self.sql(
                    "INSERT INTO heads (size, body, signature, frontier, anchored_at)"
                    " VALUES (?,?,?,?,?)",
                    (head.size, head.body_text, head.signature, frontier.to_text(), time.time()),
                )


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    assert w.verify() == []
    return w


def test_a_receipt_edited_without_the_key_fails_its_signature(world: World) -> None:
    """A store writer who holds no key changes a receipt's amount and fixes its hash: the
    signature no longer matches, and the log's heads no longer hash to their roots."""
    world.rewrite(2, None, amount=1)
    problems = world.verify()
    assert any(
        world.actions[2] in p and "its signature does not match its body" in p for p in problems
    ), problems
    assert any("no longer hash to its root" in p for p in problems), problems


def test_a_receipt_forged_with_another_key_is_named(world: World) -> None:
    """A writer signs a receipt with a key of their own: the key list does not name it."""
    forger = SigningKey.generate()
    world.rewrite(1, forger, amount=1, key_id=forger.key_id)
    problems = world.verify()
    assert any("which the key list does not name" in p for p in problems), problems


def test_a_dropped_tail_is_caught_by_the_heads_and_by_the_anchor(world: World) -> None:
    """Receipts removed from the end: the store's own head signs more than it holds; and
    when the writer removes those heads and the actions too, the anchor names them."""
    world.sql("DELETE FROM receipts WHERE leaf >= 3")
    assert any(
        "signs more receipts than the log holds (3)" in p for p in world.verify(anchored=False)
    )

    world.sql("DELETE FROM heads WHERE size > 3")
    world.sql("DELETE FROM actions WHERE action_id IN (?, ?)", (world.actions[3], world.actions[4]))
    world.sql("DELETE FROM journal WHERE action_id IN (?, ?)", (world.actions[3], world.actions[4]))
    assert world.verify(anchored=False) == []  # the store now agrees with itself
    problems = world.verify()
    dropped = [p for p in problems if "were removed after they were anchored" in p]
    assert len(dropped) == 1, problems
    assert world.actions[3] in dropped[0] and world.actions[4] in dropped[0]


def test_a_middle_rewritten_with_the_key_breaks_the_heads(world: World) -> None:
    """A writer holding the gate's key rewrites a receipt in the middle and signs it again:
    the receipt verifies, but every head above it no longer hashes to its root."""
    world.rewrite(2, KEY, outcome="refused")
    problems = world.verify(anchored=False)
    assert problems and all(
        "no longer hash to its root" in p or "records refused" in p for p in problems
    ), problems


def test_a_tree_rebuilt_with_the_key_is_caught_by_the_anchor_alone(world: World) -> None:
    """The same writer also rebuilds every head: the store agrees with itself and only the
    anchor, which the writer cannot rewrite, names the receipt and the root."""
    world.rewrite(2, KEY, amount=999)
    world.rebuild_heads(KEY)
    assert world.verify(anchored=False) == []
    problems = world.verify()
    assert any(
        f"receipt of action {world.actions[2]} at log position 2 was altered after it was anchored"
        in p
        for p in problems
    ), problems
    assert any("the log was rewritten after it was anchored" in p for p in problems), problems


def test_heads_only_vouches_for_the_logged_receipts_and_checks_every_one_when_it_breaks(
    world: World,
) -> None:
    """With `signatures="heads"` a sound log's receipts are checked by their signed heads
    (all five, none by its own signature); a receipt edited without the key breaks the
    heads, and then every signature is checked: the same problems as by default."""
    sound = world.result(signatures="heads")
    assert sound.ok and sound.vouched == 5 and world.result().vouched is None

    world.rewrite(2, None, amount=1)
    every, heads = world.result(), world.result(signatures="heads")
    assert heads.problems == every.problems and heads.vouched == 0
    assert any("its signature does not match its body" in p for p in heads.problems)


def test_heads_only_checks_the_signature_of_a_receipt_under_no_head(world: World) -> None:
    """A receipt the log has not taken in is vouched for by no head: its signature,
    swapped for another receipt's, is named with heads only as by default."""
    world.sql("DELETE FROM heads WHERE size = 5")
    world.sql("UPDATE receipts SET leaf = NULL WHERE leaf = 4")
    ((other,),) = world.sql("SELECT signature FROM receipts WHERE leaf = 0")
    world.sql("UPDATE receipts SET signature = ? WHERE leaf IS NULL", (other,))

    every, heads = world.result(anchored=False), world.result(anchored=False, signatures="heads")
    assert heads.vouched == 4
    assert (
        heads.problems
        == every.problems
        == [
            f"receipt 5 ({world.actions[4]}): its signature does not match its body under key "
            f"{KEY.key_id} (altered, or signed by someone else)"
        ]
    )


def test_heads_only_does_not_look_at_the_signature_of_a_receipt_under_a_head(
    world: World,
) -> None:
    """What heads only does not prove, as docs/receipts.md says: a logged receipt's own
    signature is not checked, so one that does not match its body (swapped here; a receipt
    a store writer put in before the log took it in is the same case) is named by default
    only."""
    ((other,),) = world.sql("SELECT signature FROM receipts WHERE leaf = 0")
    world.sql("UPDATE receipts SET signature = ? WHERE leaf = 3", (other,))

    assert world.verify() == [
        f"receipt 4 ({world.actions[3]}): its signature does not match its body under key "
        f"{KEY.key_id} (altered, or signed by someone else)"
    ]
    assert world.result(signatures="heads").problems == []


def test_a_reused_head_is_named(world: World) -> None:
    """An old signed head filed under a later size, or a head signed before the one below
    it, is refused: a head says which size it signs, and heads only move forward."""
    ((body, signature),) = world.sql("SELECT body, signature FROM heads WHERE size=2")
    world.sql("UPDATE heads SET body=?, signature=? WHERE size=5", (body, signature))
    assert any(
        "tree head of size 5: its body says size 2" in p for p in world.verify(anchored=False)
    )


def _redate_last_head(world: World, at: float) -> None:
    """The latest head signed again with the key, over the same root, dated `at`."""
    root = bytes.fromhex(json.loads(world.sql("SELECT body FROM heads WHERE size=5")[0][0])["root"])
    head = make_head(5, root, at, KEY)
    world.sql("UPDATE heads SET body=?, signature=? WHERE size=5", (head.body_text, head.signature))


def test_a_head_signed_before_the_one_below_it_is_an_old_head_reused(world: World) -> None:
    """A writer with the key signs a head for the latest size dated long before the head
    under it (a retired key's holder passing it off as old): refused."""
    _redate_last_head(world, 1.0)
    assert any("an old head reused" in p for p in world.verify(anchored=False))


def test_a_head_behind_the_one_below_it_by_a_clock_step_is_not_an_old_head(world: World) -> None:
    """A host whose wall clock stepped back a few seconds (NTP) between two heads signs the
    later one earlier: not reported (a head dated into the past is, by minutes or more)."""
    ((body,),) = world.sql("SELECT body FROM heads WHERE size=4")
    _redate_last_head(world, json.loads(str(body))["at"] - 30)
    assert world.verify(anchored=False) == []


def test_a_rotated_key_keeps_old_receipts_valid_and_refuses_it_after(tmp_path: Path) -> None:
    """Receipts signed by a retired key before its retirement verify; one it signs after
    (someone who kept the old key) is named; the new key's receipts verify."""
    old, new = SigningKey.generate(), SigningKey.generate()
    world = World(tmp_path, key=old, sends=2)
    retired_at = time.time()
    trusted = KeyList()
    trusted.add(old.public)
    trusted.retire(old.key_id, retired_at)
    trusted.add(new.public, valid_from=retired_at)
    world.gate = world._gate(new)
    world.send()
    assert world.verify(trusted) == []

    world.gate = world._gate(old)
    late = world.send()
    problems = world.verify(trusted)
    assert any(late in p and "retired" in p for p in problems), problems
    assert len([p for p in problems if "retired" in p]) >= 1


def test_a_store_written_before_the_log_is_read_then_migrated(tmp_path: Path) -> None:
    """A version 4 store, written by the code before the log (its receipts chained and
    HMAC-signed), is read as it is, then migrated: its receipts join the log first, new
    ones are signed with the Ed25519 key, and verify says which is which."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript((DATA / "store-v4-hmac.sql").read_text())
    conn.close()
    hmac_key = b"key-of-the-old-stores"

    read_only = SQLiteStore.open_read_only(path)
    before = verify(read_only, hmac_key=hmac_key)
    read_only.close()
    assert before.ok, before.problems
    assert (before.formats, before.log_size, before.unlogged) == ({"hmac": 4}, 0, 4)
    without_secret = verify(SQLiteStore.open_read_only(path))
    assert any("HMAC-signed (written before signed receipts)" in p for p in without_secret.problems)

    world = World.__new__(World)
    world.path, world.payments, world.store = path, InProcessPayments(), SQLiteStore(path)
    world.clock, world.others = None, ()
    (tmp_path / "elsewhere").mkdir()
    world.anchor = FileAnchor(tmp_path / "elsewhere" / "heads.jsonl")
    world.gate = world._gate(KEY)
    world.actions = [world.send()]
    after = verify(SQLiteStore.open_read_only(path), keys=_keys(), hmac_key=hmac_key)
    assert after.ok, after.problems
    assert (after.formats, after.log_size, after.unlogged) == ({"hmac": 4, "ed25519": 1}, 5, 0)
    logged = list(world.store.logged())
    assert [json.loads(e.body_text)["v"] for e in logged] == [1, 1, 1, 1, 2]


def test_proof_of_inclusion_checks_with_sha256_alone(world: World) -> None:
    """An action's inclusion proof against the latest head recomputes its root."""
    from interlock._core.log import inclusion

    state = world.store.action(world.actions[1])
    assert state is not None and state.receipt is not None
    found = inclusion(world.store, state.receipt.seq)
    assert found is not None
    entry, stored, path = found
    head = stored.head
    leaf = leaf_hash(state.receipt.body_text.encode())
    assert verify_inclusion(leaf, entry.leaf, head.size, path, bytes.fromhex(head.root))
    assert not verify_inclusion(leaf, entry.leaf + 1, head.size, path, bytes.fromhex(head.root))


# -- Stripe vouches for the log ------------------------------------------------------------


def test_each_send_carries_the_grant_and_the_latest_head_and_verify_reads_them(
    world: World,
) -> None:
    """Every refund after the first head carries the approval's digest and the latest
    head's hash in its metadata; when a writer holding the key rebuilds the heads, Stripe's
    list names the heads the store no longer holds (no anchor needed)."""
    targets = [_target(world.store, aid) for aid in world.actions]
    refunds = [r for pi in targets for r in world.payments.list_refunds(pi)]
    heads = [r.metadata.get(HEAD_METADATA_KEY) for r in refunds]
    assert heads.count(None) == 1, heads  # the first send: no head existed yet
    assert all(len(r.metadata.get(GRANT_METADATA_KEY, "")) == 64 for r in refunds)
    result = verify(world.store, world.payments, keys=_keys(), anchors=[world.anchor])
    assert result.ok, result.problems

    world.rewrite(2, KEY, amount=999)
    world.rebuild_heads(KEY)
    store = SQLiteStore.open_read_only(world.path)
    try:
        problems = verify(store, world.payments, keys=_keys()).problems
    finally:
        store.close()
    vouched = [p for p in problems if "which the store's log no longer holds" in p]
    assert len(vouched) == 4, problems


def _target(store: Store, action_id: str) -> str:
    state = store.action(action_id)
    assert state is not None
    return state.intent.target


class _Crash(BaseException):
    """A worker dying at an event (BaseException: nothing in the gate catches it)."""


def test_a_resend_carries_the_evidence_of_the_first_attempt(tmp_path: Path) -> None:
    """A worker dies after commit 2, before its call; meanwhile the log gets a new head.
    The recovering worker sends with the evidence the first attempt journaled, not the new
    head: a key never meets two sets of parameters."""
    # The dead worker's `sending` claim is waited out on a fake clock, in no real time.
    clock = Clock()
    world = World(tmp_path, sends=2, clock=clock)
    intent = world.decide()
    pi = intent.target

    def die_before_send(event: Event) -> None:
        if event.kind == "before-send":
            raise _Crash()

    dying = world._gate(KEY)
    dying._emit_to = die_before_send
    with pytest.raises(_Crash):
        dying.submit(intent)
    ((first,),) = [
        [h.data["evidence"] for h in world.store.history(intent.action_id) if h.record == "sending"]
    ]
    world.send()  # another action settles: the log's latest head moves on
    assert world.gate.log.latest_hash() != first[HEAD_METADATA_KEY]

    recovered = world._gate(KEY).recover_action(intent.action_id, wait=True)

    assert recovered.status == "sent"
    (refund,) = world.payments.list_refunds(pi)
    assert {k: refund.metadata[k] for k in first} == first


def test_a_resend_of_an_action_an_older_version_marked_sending_carries_no_evidence(
    tmp_path: Path,
) -> None:
    """An action whose commit 2 an older version wrote (its `sending` record has no
    evidence, and neither had its send) is resent with none: the same parameters under
    its key as the first attempt may have carried."""
    clock = Clock()
    world = World(tmp_path, sends=1, clock=clock)
    intent = world.decide()
    pi = intent.target
    old = remote_owner("older-version")
    epoch = world.store.begin(intent, old, TTL, GRACE).epoch
    assert world.store.mark_sending(intent.action_id, epoch, TTL).status == "ok"
    clock.sleep(TTL + GRACE + 1)

    recovered = world._gate(KEY).recover_action(intent.action_id, wait=True)

    assert recovered.status == "sent"
    (refund,) = world.payments.list_refunds(pi)
    assert GRANT_METADATA_KEY not in refund.metadata
    assert HEAD_METADATA_KEY not in refund.metadata


def test_a_log_that_cannot_be_extended_never_fails_the_refund(world: World) -> None:
    """A frontier damaged in the store (nested past the parser's limit) stops the log from
    growing: the next refund is still sent and reported, the receipt is committed outside
    the log, the gate says why in its `logged` event, and verify names the head."""
    deep = "[" * 100_000 + "]" * 100_000
    world.sql("UPDATE heads SET frontier=? WHERE size=5", (deep,))
    problems: list[str] = []
    world.gate._emit_to = lambda e: problems.append(str(e.data.get("problem") or ""))

    aid = world.send()

    assert any("the receipt log was not extended" in p for p in problems), problems
    state = world.store.action(aid)
    assert state is not None and state.receipt is not None
    assert world.store.unlogged_count() == 1
    assert any("frontier" in p for p in world.verify(anchored=False))
