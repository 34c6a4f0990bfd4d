"""The driver's parts on their own, without a broker: the batches planned, per-partition
handovers and holds, AvailableNow's targets, the commit path's generation retry and the
revocation barrier's wait. The same parts against a real broker: test_stream.py,
test_barrier_release.py, test_fencing.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from spark_groups.errors import CommitError, DataLossError, StaleGenerationError
from spark_groups.group.arbiter import Claimed
from spark_groups.group.barrier import RevocationBarrier
from spark_groups.group.claims import Claims
from spark_groups.group.committer import BatchCommitter, CommitMetadata
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.holds import Held
from spark_groups.group.log_ends import LogEnds
from spark_groups.group.partitions import PartitionTable
from spark_groups.group.state import DriverState, PlannedBatches
from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, TopicPartition

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


def log_ends(resolver: Ends | None = None, *, fail_on_data_loss: bool = True) -> LogEnds:
    made = LogEnds({}, mode="auto", timeout_s=1.0, fail_on_data_loss=fail_on_data_loss)
    made._resolver = resolver  # type: ignore[assignment]
    return made


def test_available_now_cuts_the_ends_at_the_targets_fixed_at_the_start() -> None:
    ends = log_ends(Ends({T0: 50, T1: 30}))
    assert not ends.available_now
    assert ends.cut({T0: 100}, {T0: 0}) == {T0: 100}  # not an AvailableNow run
    ends.fix_targets([T0])
    assert ends.available_now and ends.describe_targets() == "t-0 50"
    # T1 appeared after the start: read no further than where it stands.
    assert ends.cut({T0: 100, T1: 30}, {T0: 0, T1: 10}) == {T0: 50, T1: 10}
    fetched = ends.fetch({T0: 0, T1: 10})
    assert fetched.seen == {T0: 50, T1: 30} and fetched.readable == {T0: 50, T1: 10}


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
        self, offsets: Mapping[TopicPartition, int], *, metadata: str, owned_only: bool = False
    ) -> frozenset[TopicPartition]:
        assert "m-1" in metadata
        if self.refusals:
            self.generation += 1
            raise self.refusals.pop(0)
        self.commits.append(dict(offsets))
        return frozenset(offsets)


def committer(tmp_path: Path, *, ledger: bool = True) -> tuple[BatchCommitter, DriverState]:
    state = DriverState()
    state.partitions.begin_resume(OWNED)
    for tp in OWNED:
        state.partitions.resume(tp, 0)
    made = BatchCommitter(
        state,
        OffsetLedger(str(tmp_path / "ledger"), "g") if ledger else None,
        DurabilityWatch(None, None),
        StreamMetrics(),
        CommitMetadata(),
    )
    return made, state


def test_a_commit_refused_for_a_moved_on_generation_records_nothing_and_asks_for_a_retry(
    tmp_path: Path,
) -> None:
    commit, state = committer(tmp_path)
    refusal = StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)
    member = Member([refusal])
    batch = BatchOffset.of(0, [rng(T0, 0, 5), rng(T1, 0, 3)])
    state.batches.add(batch)
    refused = commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert refused.retry_under == 1 and refused.ranges == [] and refused.rows == []
    assert state.batches.committed_through == -1 and state.partitions.committed_offsets() == {}
    assert commit.metrics.failed_commits == 0
    # The caller waits for the new generation (GroupStream), then commits again.
    done = commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert done.retry_under is None and member.commits == [{T0: 5, T1: 3}]
    assert commit.metrics.failed_commits == 0 and commit.metrics.batches_committed == 1
    assert state.batches.committed_through == 0 and state.batches.pending() == []
    assert state.partitions.committed_offsets() == {T0: 5, T1: 3}
    assert [(r.partition, r.until_offset) for r in done.rows] == [(0, 5), (1, 3)]
    assert commit.safe_point(member, batch, may_retry=True).ranges == []  # once only  # type: ignore[arg-type]
    assert len(member.commits) == 1


def test_a_refusal_past_the_retries_is_a_failed_commit(tmp_path: Path) -> None:
    commit, state = committer(tmp_path)
    member = Member([StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)])
    batch = BatchOffset.of(0, [rng(T0, 0, 5)])
    done = commit.safe_point(member, batch, may_retry=False)  # type: ignore[arg-type]
    assert done.retry_under is None and done.ranges == [] and member.commits == []
    assert commit.metrics.failed_commits == 1 and state.partitions.committed_offsets() == {}


def test_a_fence_commits_nothing_anywhere(tmp_path: Path) -> None:
    commit, state = committer(tmp_path)
    member = Member([StaleGenerationError("FENCED_INSTANCE_ID", generation=1, code=82)])
    batch = BatchOffset.of(0, [rng(T0, 0, 5)])
    done = commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert done.retry_under is None and done.rows == []  # a fence is not retried
    assert member.commits == [] and commit.metrics.failed_commits == 1
    assert state.partitions.committed_offsets() == {}


def test_another_kafka_failure_still_records_the_batch_in_the_ledger(tmp_path: Path) -> None:
    commit, state = committer(tmp_path)
    member = Member([CommitError("broker down", code=7)])
    batch = BatchOffset.of(0, [rng(T0, 0, 5)])
    done = commit.safe_point(member, batch, may_retry=True)  # type: ignore[arg-type]
    assert commit.metrics.failed_commits == 1
    assert [(r.partition, r.until_offset) for r in done.rows] == [(0, 5)]
    assert state.partitions.committed_offsets() == {T0: 5}


def test_the_barriers_commits_raise_and_append_to_the_ledger_themselves(tmp_path: Path) -> None:
    commit, _ = committer(tmp_path)
    member = Member([StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)])
    with pytest.raises(StaleGenerationError):
        commit.commit(member, BatchOffset.of(0, [rng(T0, 0, 5)]), from_barrier=True)  # type: ignore[arg-type]
    done = commit.commit(member, BatchOffset.of(0, [rng(T0, 0, 5)]), from_barrier=True)  # type: ignore[arg-type]
    assert done.rows == [] and commit.ledger is not None
    assert commit.ledger.latest_positions([T0]) == {T0: 5}


# ---------------------------------------------------------------------- the barrier


def barrier(tmp_path: Path, timeout_s: float = 30.0) -> tuple[RevocationBarrier, DriverState]:
    commit, state = committer(tmp_path, ledger=False)
    claims = Claims(None, state, commit, commit.metrics)
    return (
        RevocationBarrier(
            state, commit, claims, commit.metrics, timeout_s=timeout_s, at_most_once=False
        ),
        state,
    )


def plan(state: DriverState, batch: BatchOffset) -> None:
    state.partitions.planned(batch.batch, batch.ranges)
    state.batches.add(batch)


def test_the_barrier_waits_for_the_last_batch_that_read_the_partitions(tmp_path: Path) -> None:
    wall, state = barrier(tmp_path)
    plan(state, BatchOffset.of(0, [rng(T0, 0, 5), rng(T1, 0, 5)]))
    plan(state, BatchOffset.of(1, [rng(T1, 5, 9)]))
    served: list[int] = []

    def serve(_: float) -> None:  # the owner thread meanwhile; the safe point commits 0 then 1
        served.append(state.batches.committed_through)
        state.batches.committed(len(served) - 1)

    outcome = wall.revoke(None, frozenset({T1}), serve)
    assert outcome.waited_for == 1 and not outcome.timed_out
    assert served == [-1, 0]  # it did not return before batch 1 was committed
    assert state.partitions.get(T1) is None and state.partitions.get(T0) is not None
    # Batches planned before the revocation can never commit T1 again.
    assert state.partitions.committable(1, [rng(T1, 5, 9)], OWNED) == []


def test_a_barrier_past_the_rebalance_timeout_lets_go_and_counts_it(tmp_path: Path) -> None:
    wall, state = barrier(tmp_path, timeout_s=0.2)
    plan(state, BatchOffset.of(0, [rng(T0, 0, 5)]))
    outcome = wall.revoke(None, frozenset({T0}), lambda s: None)
    assert outcome.timed_out and outcome.waited_for == 0 and outcome.waited_s >= 0.2
    assert wall.metrics.barrier_timeouts == 1 and state.partitions.get(T0) is None


def test_nothing_to_wait_for_passes_at_once(tmp_path: Path) -> None:
    wall, state = barrier(tmp_path)
    outcome = wall.revoke(None, frozenset({T0}), lambda s: pytest.fail("waited"))
    assert outcome.waited_for == -1 and not outcome.timed_out
    assert wall.metrics.revocations == 1 and state.partitions.get(T0) is None


# ---------------------------------------------------------------------- releases


class Arbiter:
    """A sink table that holds ``positions`` and releases whatever it is asked to."""

    path = "/tables/t"

    def __init__(self, positions: Mapping[TopicPartition, int]) -> None:
        self.positions = dict(positions)

    def release(self, tokens: Mapping[TopicPartition, int], **_: object) -> Claimed:
        return Claimed(2, {tp: self.positions[tp] for tp in tokens})


def test_a_release_kafka_refuses_for_a_moved_on_generation_waits_and_is_committed_once(
    tmp_path: Path,
) -> None:
    commit, state = committer(tmp_path)
    claims = Claims(Arbiter({T0: 7, T1: 9}), state, commit, commit.metrics)  # type: ignore[arg-type]
    for tp in OWNED:
        state.partitions.set_claim(tp, 5)
    member = Member([StaleGenerationError("ILLEGAL_GENERATION", generation=1, code=22)])
    released = claims.release_all(member, may_retry=True)  # type: ignore[arg-type]
    assert released.settled == OWNED and released.retry_under == 1
    assert state.releasing == {T0: 7, T1: 9} and member.commits == []
    # A revocation of T1 begins meanwhile: its barrier commits T1's position in place.
    claims.take_releasing(member, [T1])  # type: ignore[arg-type]
    assert member.commits == [{T1: 9}] and state.releasing == {T0: 7}
    # The releasing thread, under the new generation: the rest, once.
    assert claims.commit_releasing(member, may_retry=True) is None  # type: ignore[arg-type]
    assert member.commits == [{T1: 9}, {T0: 7}] and state.releasing == {}
    assert state.partitions.committed_offsets() == {T0: 7, T1: 9}
    assert commit.metrics.failed_commits == 0


# ---------------------------------------------------------------------- log ends


def test_a_log_that_went_backwards_is_data_loss_or_with_the_option_the_new_start() -> None:
    strict = log_ends()
    with pytest.raises(DataLossError) as lost:
        strict.went_backwards(T0, 50, 20)
    assert lost.value.partition == T0 and "failOnDataLoss=false" in str(lost.value)
    log_ends(fail_on_data_loss=False).went_backwards(T0, 50, 20)  # logged: the plan moves it
    table = PartitionTable()
    table.begin_resume([T0])
    table.resume(T0, 50, committed=50)
    table.moved_to_end(T0, 20)
    assert table.plannable(OWNED) == {T0: 20} and table.committed_offsets() == {T0: 20}
    assert log_ends().fetch({}).seen == {}  # nothing to ask: no client is made


def test_a_batch_that_ran_past_half_the_rebalance_timeout_is_counted(tmp_path: Path) -> None:
    wall, _ = barrier(tmp_path, timeout_s=10.0)
    wall.warn_if_slow(3, 4.0)
    wall.warn_if_slow(4, None)  # not planned here
    assert wall.metrics.extra.get("slow_batches", 0) == 0
    wall.warn_if_slow(5, 6.0)
    assert wall.metrics.extra["slow_batches"] == 1
