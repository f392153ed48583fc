"""A gate's receipt log published to all three anchors at once, over real sockets.

A file elsewhere, the loopback HTTP witness and the loopback RFC 3161 timestamp authority
(its tokens checked by `rfc3161-client`) each take every head the gate signs; `verify`
with any one of them alone holds on the whole store, and names the rewritten receipt once
a writer holding the key has rebuilt the store's tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import HttpWitness, SQLiteStore, TimestampAnchor, verify
from interlock.testing import TimestampAuthority, WitnessServer
from tests.unit.test_receipt_log import KEY, World, _keys


def test_every_anchor_takes_every_head_and_each_alone_catches_a_rebuilt_tree(
    tmp_path: Path,
) -> None:
    """Three anchors, one gate: each holds the five heads; each alone names the receipt."""
    (tmp_path / "tsa").mkdir()
    with WitnessServer() as witness, TimestampAuthority() as authority:
        anchors = [
            HttpWitness(witness.url),
            TimestampAnchor(authority.url, tmp_path / "tsa", certificates=authority.certificates),
        ]
        world = World(tmp_path, others=anchors)
        everyone = (world.anchor, *anchors)
        for anchor in everyone:
            assert [a.head.size for a in anchor.heads()] == [1, 2, 3, 4, 5], anchor.name
        assert all(a.evidence for a in anchors[1].heads())  # each head has its token
        for anchor in everyone:
            result = verify(world.store, world.payments, keys=_keys(), anchors=[anchor])
            assert result.ok, (anchor.name, result.problems)

        world.rewrite(3, KEY, amount=1)
        world.rebuild_heads(KEY)
        for anchor in everyone:
            store = SQLiteStore.open_read_only(world.path)
            try:
                problems = verify(store, keys=_keys(), anchors=[anchor]).problems
            finally:
                store.close()
            assert any(
                f"receipt of action {world.actions[3]} at log position 3 was altered" in p
                for p in problems
            ), (anchor.name, problems)
        world.store.close()


@pytest.mark.parametrize("anchor_kind", ["witness", "timestamp"])
def test_an_unreachable_anchor_never_fails_the_refund_and_is_caught_up_later(
    tmp_path: Path, anchor_kind: str
) -> None:
    """With its anchor down, the gate's sends still settle (the log keeps the heads
    unanchored and says so in an event); once the anchor is back, the next catch-up
    publishes every head it missed."""
    (tmp_path / "tsa").mkdir()
    with WitnessServer() as witness, TimestampAuthority() as authority:
        if anchor_kind == "witness":
            up: object = HttpWitness(witness.url)
        else:
            up = TimestampAnchor(
                authority.url, tmp_path / "tsa", certificates=authority.certificates
            )
    # The servers are stopped now: the same anchors point at nothing.
    world = World(tmp_path, sends=0, others=[up])  # type: ignore[list-item]
    events: list[str] = []
    world.gate._emit_to = lambda e: events.append(str(e.data.get("problem") or ""))
    for _ in range(2):
        world.send()
    assert any("was not anchored" in p for p in events), events
    assert all(h.anchored_at is None for h in world.store.heads())
    with WitnessServer() as witness2, TimestampAuthority() as authority2:
        if anchor_kind == "witness":
            back: object = HttpWitness(witness2.url)
        else:
            back = TimestampAnchor(
                authority2.url, tmp_path / "tsa", certificates=authority2.certificates
            )
        # The worker restarted with its anchor reachable again.
        world.others = (back,)  # type: ignore[assignment]
        status = world._gate(KEY).catch_up_log()
        assert status.problem is None and status.published == 2, status
        assert [a.head.size for a in back.heads()] == [1, 2]  # type: ignore[attr-defined]
    world.store.close()
