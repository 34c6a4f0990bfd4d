"""The per-partition state machine and the resume decision: no broker, no JVM."""

from __future__ import annotations

from spark_groups.group.partitions import PartitionTable, Status
from spark_groups.group.resume import Start, choose, start_rule
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.offsets.starting import EARLIEST, LATEST, StartingOffsets

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
OWNED = frozenset({T0, T1})


def rng(tp: TopicPartition, lo: int, hi: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, lo, hi)


def active(position: int = 0, committed: int | None = None) -> PartitionTable:
    table = PartitionTable()
    table.begin_resume(OWNED)
    for tp in (T0, T1):
        table.resume(tp, position, committed)
    return table


def test_a_new_partition_needs_a_resume_then_is_planned_from_its_position() -> None:
    table = PartitionTable()
    assert table.resume(T0, 5) is None  # not assigned (begin_resume) yet
    assert table.begin_resume(OWNED) == [T0, T1]
    assert table.resume(T0, 5) == 5
    assert table.begin_resume(OWNED) == [T1]
    assert table.plannable(OWNED) == {T0: 5}
    table.planned(0, [rng(T0, 5, 9)])
    state = table.get(T0)
    assert state is not None and state.status is Status.ACTIVE
    assert (state.position, state.last_batch) == (9, 0)
    assert table.is_at(T0, 9) and not table.is_at(T0, 5)


def test_resume_from_a_commit_takes_the_furthest_commit_seen() -> None:
    table = PartitionTable()
    table.record_commit({T0: 20})  # a replay committed before the partition was resumed
    assert table.get(T0).status is Status.AWAITING_RESUME  # type: ignore[union-attr]
    assert table.begin_resume(OWNED) == [T0, T1]
    assert table.resume(T0, 10, committed=10) == 20


def test_never_commit_below_what_is_committed() -> None:
    table = active(committed=10)
    ranges = [rng(T0, 5, 10), rng(T1, 5, 12)]
    assert table.committable(3, ranges, OWNED) == [rng(T1, 5, 12)]
    table.record_commit({T1: 12})
    assert table.committable(4, [rng(T1, 8, 11)], OWNED) == []
    assert table.committed_offsets() == {T0: 10, T1: 12}


def test_a_commit_moves_the_position_past_a_replayed_batch_but_never_back() -> None:
    table = active(position=3)
    table.record_commit({T0: 8})
    assert table.plannable(OWNED)[T0] == 8
    table.record_commit({T0: 5})
    assert table.get(T0).committed == 8  # type: ignore[union-attr]
    assert table.plannable(OWNED)[T0] == 8


def test_never_commit_a_partition_given_up_by_a_batch_planned_before() -> None:
    table = active()
    table.planned(4, [rng(T0, 0, 10), rng(T1, 0, 10)])
    table.give_up([T0], through_batch=4)  # lost
    assert table.get(T0) is None
    batch4 = [rng(T0, 0, 10), rng(T1, 0, 10)]
    assert table.committable(4, batch4, OWNED) == [rng(T1, 0, 10)]
    # Assigned here again: a batch planned after that may commit it.
    table.begin_resume([T0])
    table.resume(T0, 10)
    assert table.committable(5, [rng(T0, 10, 12)], OWNED) == [rng(T0, 10, 12)]
    assert table.committable(4, [rng(T0, 10, 12)], OWNED) == []


def test_never_commit_a_partition_not_owned() -> None:
    table = active()
    assert table.committable(0, [rng(T0, 0, 3)], frozenset({T1})) == []


def test_revoking_stops_planning_and_waits_for_the_last_batch_that_read_it() -> None:
    table = active()
    table.planned(2, [rng(T0, 0, 4)])
    table.planned(3, [rng(T1, 0, 4)])
    assert table.begin_revoke([T0]) == 2
    assert table.plannable(OWNED) == {T1: 4}
    assert table.begin_resume(OWNED) == []  # being revoked is not new
    assert table.resume(T0, 0) is None  # and gets no position back
    table.record_commit({T0: 4})  # the barrier's batch commits during the revocation
    assert table.get(T0).committed == 4  # type: ignore[union-attr]
    table.give_up([T0], through_batch=3)
    assert table.get(T0) is None and table.committed_offsets() == {}
    assert table.begin_revoke([T1]) == 3


def test_a_partition_never_planned_revokes_without_waiting() -> None:
    assert active().begin_revoke([T0, T1]) == -1


def test_a_log_that_went_backwards_moves_position_and_committed_to_its_end() -> None:
    table = active(position=50, committed=50)
    table.moved_to_end(T0, 30)
    assert table.plannable(OWNED)[T0] == 30
    assert table.committable(0, [rng(T0, 30, 40)], OWNED) == [rng(T0, 30, 40)]
    table.begin_revoke([T1])
    table.moved_to_end(T1, 10)  # not active: left alone
    assert table.get(T1).position is None  # type: ignore[union-attr]


def test_resume_order_committed_then_checkpoint_then_start() -> None:
    t2 = TopicPartition("t", 2)
    chosen = choose([T0, T1, t2], {T0: 7}, {T1: 3}, {t2: 0}, False)
    assert chosen == {
        T0: Start(7, "committed"),
        T1: Start(3, "checkpoint"),
        t2: Start(0, "startingOffsets"),
    }
    later = choose([T0], {}, {}, {T0: 0}, True)
    assert later == {T0: Start(0, "earliest: a new partition")}


def test_start_rule_new_partitions_default_to_earliest() -> None:
    starting = StartingOffsets(LATEST, {T1: 42})
    assert start_rule(starting, T0, discovered_later=False) == LATEST
    assert start_rule(starting, T0, discovered_later=True) == EARLIEST
    assert start_rule(starting, T1, discovered_later=True) == 42


def test_a_range_read_under_another_claim_is_never_committed() -> None:
    """A batch logged before a restart carries the old process's claim token; the sink left
    those partitions out of it, so the restarted member's safe point must not commit them:
    the next batch reads them from where the table stands."""
    table = PartitionTable()
    table.begin_resume([T0])
    table.resume(T0, 20, committed=20)
    table.set_claim(T0, 7)
    logged = [rng(T0, 20, 30)]
    assert table.committable(2, logged, OWNED, {T0: 3}) == []  # read under the old claim
    assert table.committable(2, logged, OWNED, {T0: 7}) == logged  # under this one
    assert table.committable(2, logged, OWNED) == logged  # no claim: as before claims
    table.released([T0], through_batch=2)
    assert table.committable(3, [rng(T0, 30, 40)], OWNED, {T0: 7}) == []


def test_a_partition_revoked_while_its_resume_is_searched_does_not_come_back() -> None:
    """Where a partition resumes is searched outside the lock (Kafka, the ledger, a claim in
    the sink's table); a revocation that ends meanwhile must not be undone by the answer
    (found in a mixed-group test: the stale answer brought the partition back, and a later
    assignment planned it from an old position)."""
    table = PartitionTable()
    assert table.begin_resume(OWNED) == [T0, T1]
    assert table.resuming(OWNED) == [T0, T1]
    assert table.begin_revoke([T0]) == -1  # the search goes on outside the lock
    assert table.resuming(OWNED) == [T1]  # no claim for T0 now
    table.give_up([T0], through_batch=-1)
    assert table.resume(T0, 5) is None and table.get(T0) is None
    assert table.resume(T1, 5) == 5
    assert table.begin_resume(OWNED) == [T0]  # assigned again later: searched afresh


def test_a_fenced_partition_is_resumed_again() -> None:
    table = active(position=10, committed=10)
    table.set_claim(T0, 7)
    table.planned(3, [rng(T0, 10, 20)])
    table.fenced(T0)
    state = table.get(T0)
    assert state is not None and state.status is Status.AWAITING_RESUME
    assert (state.position, state.claim, state.last_batch) == (None, None, 3)
    assert table.begin_resume(OWNED) == [T0]
    assert table.committable(3, [rng(T0, 10, 20)], OWNED, {T0: 7}) == []
