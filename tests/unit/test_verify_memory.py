"""verify() keeps no dict or set per approval: a store whose every action has its own
approval is checked in memory that does not grow with the approvals (issue 36)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

from interlock import Intent, Lease, Settlement
from interlock._core.journal import ActionHistory, ActionRow, JournalRecord, SettledAction
from interlock._core.verify import _record_problems
from tests.helpers.approvals import APPROVERS

NOW = 1_800_000_000.0


class _Approvals:
    """The part of a store `_record_problems` reads, made up as it is read: `n` settled
    actions, each sent under its own approval, with complete histories (nothing kept, so
    the peak is verify's own)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def histories(self) -> Iterator[ActionHistory]:
        for i in range(self.n):
            intent = Intent(f"act_{i:08d}", "refund", f"pi_{i:08d}", 100, f"lease-{i:08d}", "fp")
            sent = Settlement("sent", None, f"re_{i:08d}", 100)
            row = ActionRow(intent, None, sent, 1, i + 1)
            history = [
                JournalRecord(1, intent.action_id, NOW, "intent", intent.to_dict()),
                JournalRecord(2, intent.action_id, NOW, "claim", {"epoch": 1}),
                JournalRecord(3, intent.action_id, NOW, "outcome", sent.to_dict()),
            ]
            yield ActionHistory(intent.action_id, row, history)

    def leases(self) -> Iterator[Lease]:
        for i in range(self.n):
            yield Lease(f"lease-{i:08d}", "refund", f"pi_{i:08d}", 100, NOW + 60, "t", NOW, 100)

    def settled(self) -> Iterator[SettledAction]:
        return iter(())

    def pending(self) -> list[str]:
        return []


def _peak(n: int) -> int:
    tracemalloc.start()
    try:
        assert _record_problems(_Approvals(n)) == []  # type: ignore[arg-type]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_each_approval_s_spend_is_summed_without_a_dict_of_every_approval() -> None:
    """Five times the approvals cost about the same peak: the spend per approval is summed
    in lease order outside Python's heap, not in a dict and a set that grow with the store
    (about 250 MB at a million actions)."""
    small, large = _peak(600), _peak(3_000)
    assert large < 1.3 * small, (small, large)


def test_the_totals_still_find_each_approval_that_was_edited_deleted_or_damaged() -> None:
    """The same streams with one approval spent short, one deleted and one damaged that no
    action names: each is named, in lease order, the unnamed damaged one last."""

    class Edited(_Approvals):
        def leases(self) -> Iterator[Lease]:
            for lease in super().leases():
                if lease.id == "lease-00000001":
                    continue  # deleted
                if lease.id == "lease-00000002":
                    lease = Lease(lease.id, "refund", lease.target, 100, NOW + 60, "t", NOW, 40)
                yield lease
            yield Lease.from_text("lease-zz", "{")

    assert _record_problems(Edited(4)) == [  # type: ignore[arg-type]
        "approval lease-00000001: its actions act under it, but it is not in the store (its "
        "row was deleted or lost)",
        "approval lease-00000002: records 40 spent, but its actions' settled refunds come to "
        "100 (its row was replaced or edited)",
        "approval lease-zz: damaged in the store (its stored text is not JSON (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1)))",
    ]


def test_the_approvers_check_reads_each_approval_in_the_totals_scan() -> None:
    """Given approvers, each approval is read once (its JSON parsed and its fields checked
    once, about 16 us an approval here), not again in a second scan for its signature; an
    unsigned one is still named, after the totals' problems."""

    class Counted(_Approvals):
        scans = 0

        def leases(self) -> Iterator[Lease]:
            self.scans += 1
            return super().leases()

    store = Counted(3)
    problems = _record_problems(store, APPROVERS)  # type: ignore[arg-type]
    assert store.scans == 1
    assert problems == [
        f"approval lease-0000000{i} is not signed: only an approver's signed grant authorizes "
        "a send (a store writer could have written it)"
        for i in range(3)
    ] + [
        f"action act_0000000{i}: sent refund re_0000000{i} under approval lease-0000000{i}, "
        "which no trusted approver signed"
        for i in range(3)
    ]
