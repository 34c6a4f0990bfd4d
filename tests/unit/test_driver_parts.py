"""The driver's parts on their own, without a broker: the batches planned, per-partition
handovers and holds, AvailableNow's targets, the commit path's generation retry and the
revocation barrier's wait. The same parts against a real broker: test_stream.py,
test_barrier_release.py, test_fencing.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from spark_groups.errors import CommitError, DataLossError, StaleGenerationError
from spark_groups.group.available_now import AvailableNowTargets
from spark_groups.group.barrier import RevocationBarrier
from spark_groups.group.bookkeeping import Bookkeeping, PlannedBatches
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.gaps import Held
from spark_groups.group.log_ends import LogEnds
from spark_groups.group.partitions import PartitionTable
from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, TopicPartition
from spark_groups.options import parse_options

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
OWNED = frozenset({T0, T1})


def rng(tp: TopicPartition, lo: int, hi: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, lo, hi)


# ---------------------------------------------------------------------- PlannedBatches


def test_planned_batches_keep_what_is_not_committed_and_time_each_once() -> None:
    batches = PlannedBatches()
    b0, b1 = BatchOffset.of(0, [rng(T0, 0, 5)]), BatchOffset.of(1, [rng(T0, 5, 9)])
    batches.saw(3)
    batches.add(b0)
    batches.add(b1)
    assert batches.highest == 3  # a batch Spark started from counts
    assert [b.batch for b in batches.pending()] == [0, 1]
    assert batches.planned_here(0) and batches.last_planned_at is not None
    batches.committed(0)
    assert batches.committed_through == 0
    assert [b.batch for b in batches.pending()] == [1] and batches.get(0) is None
    took = batches.took(1)
    assert took is not None and took >= 0
    assert batches.took(1) is None and not batches.planned_here(1)  # timed once
    batches.committed(-1)  # never backwards
    assert batches.committed_through == 0


# ---------------------------------------------------------------------- per-partition facts


def test_a_handover_rides_on_the_first_range_of_its_partition_only() -> None:
    table = PartitionTable()
    table.begin_resume([T0])
    table.resume(T0, 40, committed=40)
    handover = Handover("t", 0, since=10, until=40, by="a plain consumer")
    table.set_handover(T0, handover)
    assert table.handover_into(rng(T0, 40, 50)) == handover
    assert table.handover_into(rng(T0, 50, 60)) is None
    assert table.handover_into(rng(T1, 40, 50)) is None  # not owned


def test_a_held_partition_is_owned_not_read_and_goes_with_its_state() -> None:
    table = PartitionTable()
    table.begin_resume(OWNED)
    for tp in OWNED:
        table.resume(tp, 7)
    why = Held(T1, table_offset=3, position=7, committed_by="someone")
    table.hold({T1: why})
    assert table.plannable(OWNED) == {T0: 7, T1: 7}  # metrics still see its position
    assert table.plannable(OWNED, held=False) == {T0: 7}
    assert table.held() == {T1: why}
    table.release([T1])
    assert table.plannable(OWNED, held=False) == {T0: 7, T1: 7}
    table.hold({T1: why})
    table.set_handover(T1, Handover("t", 1, since=None, until=7, by="x"))
    table.give_up([T1], through_batch=4)
    assert table.held() == {} and table.get(T1) is None
    table.begin_resume([T1])
    table.resume(T1, 9)  # assigned again: no stale hold or handover
    assert table.held() == {} and table.handover_into(rng(T1, 7, 9)) is None


# ---------------------------------------------------------------------- AvailableNow


class Ends:
    """An end-offset resolver answering from a dict (the real one needs a broker)."""

    def __init__(self, ends: Mapping[TopicPartition, int]) -> None:
        self.ends = dict(ends)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in partitions}


def test_available_now_cuts_the_ends_at_the_targets_fixed_at_the_start() -> None:
    targets = AvailableNowTargets()
    assert not targets.active
    assert targets.cut({T0: 100}, {T0: 0}) == {T0: 100}  # not an AvailableNow run
    targets.fix([T0], Ends({T0: 50}))  # type: ignore[arg-type]
    assert targets.active and targets.describe() == "t-0 50"
    # T1 appeared after the start: read no further than where it stands.
    assert targets.cut({T0: 100, T1: 30}, {T0: 0, T1: 10}) == {T0: 50, T1: 10}


# ---------------------------------------------------------------------- the commit path


class Member:
    """The parts of a group member the commit path uses. ``refusals`` are raised by the next
    commits, one each; after a refusal the member is in the group's next generation (as
    when its owner thread has served the rebalance)."""

    def __init__(self, refusals: list[Exception] | None = None) -> None:
        self.assignment = OWNED
        self.member_id = "m-1"
        self.closed = False
        self.generation = 1
        self.refusals = list(refusals or [])
        self.commits: list[dict[TopicPartition, int]] = []

    def commit(
        self, offsets: Mapping[TopicPartition, int], *, owned_only: bool, metadata: str
    ) -> frozenset[TopicPartition]:
        assert owned_only and "m-1" in metadata
        if self.refusals:
            self.generation += 1
            raise self.refusals.pop(0)
        self.commits.append(dict(offsets))
        return frozenset(offsets)

    def on_owner_thread(self) -> bool:
        return False  # the commit path runs on Spark's thread here


def committer(tmp_path: Path, *, ledger: bool = True) -> tuple[BatchCommitter, Bookkeeping]:
    options = parse_options(
        {"kafka.bootstrap.servers": "unused:9092", "subscribe": "t", "group.id": "g"}
    )
    books = Bookkeeping()
    books.partitions.begin_resume(OWNED)
    for tp in OWNED:
        books.partitions.resume(tp, 0)
    made = BatchCommitter(
        options,
        books,
        OffsetLedger(str(tmp_path / "ledger"), "g") if ledger else None,
        DurabilityWatch(None, None),
        StreamMetrics(),
    )
    return made, books


def test_a_commit_refused_for_a_moved_on_generation_is_made_again_under_the_new_one(
    tmp_path: Path,
) -> None:
    commit, books = committer(tmp_path)
    refusal = StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)
    member = Member([refusal])
    batch = BatchOffset.of(0, [rng(T0, 0, 5), rng(T1, 0, 3)])
    books.batches.add(batch)
    commit.safe_point(member, batch)  # type: ignore[arg-type]
    assert member.commits == [{T0: 5, T1: 3}]
    assert commit.metrics.failed_commits == 0 and commit.metrics.batches_committed == 1
    assert books.batches.committed_through == 0 and books.batches.pending() == []
    assert books.partitions.committed_offsets() == {T0: 5, T1: 3}
    assert commit.ledger is not None and commit.behind is not None
    commit.behind.wait()  # the ledger's append lands behind the safe point
    assert commit.ledger.latest_positions([T0, T1]) == {T0: 5, T1: 3}
    commit.safe_point(member, batch)  # once only
    assert len(member.commits) == 1


def test_a_fence_commits_nothing_anywhere(tmp_path: Path) -> None:
    commit, books = committer(tmp_path)
    member = Member([StaleGenerationError("FENCED_INSTANCE_ID", generation=1, code=82)])
    batch = BatchOffset.of(0, [rng(T0, 0, 5)])
    commit.safe_point(member, batch)  # type: ignore[arg-type]
    assert member.commits == [] and commit.metrics.failed_commits == 1
    assert commit.ledger is not None and commit.ledger.latest_positions([T0]) == {}
    assert books.partitions.committed_offsets() == {}


def test_another_kafka_failure_still_records_the_batch_in_the_ledger(tmp_path: Path) -> None:
    commit, books = committer(tmp_path)
    member = Member([CommitError("broker down", code=7)])
    batch = BatchOffset.of(0, [rng(T0, 0, 5)])
    commit.safe_point(member, batch)  # type: ignore[arg-type]
    assert commit.metrics.failed_commits == 1 and commit.behind is not None
    commit.behind.wait()  # the ledger's append lands behind the safe point
    assert commit.ledger is not None and commit.ledger.latest_positions([T0]) == {T0: 5}
    assert books.partitions.committed_offsets() == {T0: 5}


def test_the_barriers_commits_raise_instead_of_waiting(tmp_path: Path) -> None:
    commit, _ = committer(tmp_path, ledger=False)
    member = Member([StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)])
    with pytest.raises(StaleGenerationError):
        commit.commit_ranges(member, BatchOffset.of(0, [rng(T0, 0, 5)]), from_barrier=True)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the barrier


def barrier(tmp_path: Path, timeout_s: float = 30.0) -> tuple[RevocationBarrier, Bookkeeping]:
    commit, books = committer(tmp_path, ledger=False)
    return (
        RevocationBarrier(books, commit, commit.metrics, timeout_s=timeout_s, at_most_once=False),
        books,
    )


def plan(books: Bookkeeping, batch: BatchOffset) -> None:
    books.partitions.planned(batch.batch, batch.ranges)
    books.batches.add(batch)


def test_the_barrier_waits_for_the_last_batch_that_read_the_partitions(tmp_path: Path) -> None:
    wall, books = barrier(tmp_path)
    plan(books, BatchOffset.of(0, [rng(T0, 0, 5), rng(T1, 0, 5)]))
    plan(books, BatchOffset.of(1, [rng(T1, 5, 9)]))
    served: list[int] = []

    def serve(_: float) -> None:  # the owner thread meanwhile; the safe point commits 0 then 1
        served.append(books.batches.committed_through)
        books.batches.committed(len(served) - 1)

    outcome = wall.revoke(None, frozenset({T1}), serve)
    assert outcome.waited_for == 1 and not outcome.timed_out
    assert served == [-1, 0]  # it did not return before batch 1 was committed
    assert books.partitions.get(T1) is None and books.partitions.get(T0) is not None
    # Batches planned before the revocation can never commit T1 again.
    assert books.partitions.committable(1, [rng(T1, 5, 9)], OWNED) == []


def test_a_barrier_past_the_rebalance_timeout_lets_go_and_counts_it(tmp_path: Path) -> None:
    wall, books = barrier(tmp_path, timeout_s=0.2)
    plan(books, BatchOffset.of(0, [rng(T0, 0, 5)]))
    outcome = wall.revoke(None, frozenset({T0}), lambda s: None)
    assert outcome.timed_out and outcome.waited_for == 0 and outcome.waited_s >= 0.2
    assert wall.metrics.barrier_timeouts == 1 and books.partitions.get(T0) is None


def test_nothing_to_wait_for_passes_at_once(tmp_path: Path) -> None:
    wall, books = barrier(tmp_path)
    outcome = wall.revoke(None, frozenset({T0}), lambda s: pytest.fail("waited"))
    assert outcome.waited_for == -1 and not outcome.timed_out
    assert wall.metrics.revocations == 1 and books.partitions.get(T0) is None


# ---------------------------------------------------------------------- log ends


def test_a_log_that_went_backwards_is_data_loss_or_with_the_option_the_new_start() -> None:
    base = {"kafka.bootstrap.servers": "unused:9092", "subscribe": "t", "group.id": "g"}
    books = Bookkeeping()
    books.partitions.begin_resume([T0])
    books.partitions.resume(T0, 50)
    strict = LogEnds(parse_options(base), books, AvailableNowTargets())
    with pytest.raises(DataLossError) as lost:
        strict.went_backwards(T0, 50, 20)
    assert lost.value.partition == T0 and "failOnDataLoss=false" in str(lost.value)
    assert books.partitions.plannable(OWNED) == {T0: 50}  # nothing moved
    lenient = LogEnds(
        parse_options({**base, "failOnDataLoss": "false"}), books, AvailableNowTargets()
    )
    lenient.went_backwards(T0, 50, 20)
    assert books.partitions.plannable(OWNED) == {T0: 20}
    assert lenient.fetch({}) == {}  # nothing to ask: no client is made


def test_a_batch_that_ran_past_half_the_rebalance_timeout_is_counted(tmp_path: Path) -> None:
    wall, _ = barrier(tmp_path, timeout_s=10.0)
    wall.warn_if_slow(3, 4.0)
    wall.warn_if_slow(4, None)  # not planned here
    assert wall.metrics.extra.get("slow_batches", 0) == 0
    wall.warn_if_slow(5, 6.0)
    assert wall.metrics.extra["slow_batches"] == 1
