"""The revocation barrier: a revoked partition leaves only once its last batch is committed.

:meth:`RevocationBarrier.revoke` runs on the member's owner thread, inside librdkafka's
revocation callback, and the rebalance waits for it. While it waits it serves the requests of
other threads (Spark's safe point among them), so the commit it waits for can arrive; every
:data:`DURABLE_CHECK_INTERVAL_S` it commits the partitions itself once their batch is
durable. The steps, the bound and what happens past it: docs/architecture.md, "The
revocation barrier".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_groups import crash_points
from spark_groups.group.claims import Claims
from spark_groups.group.committer import BatchCommitter
from spark_groups.group.member import GroupMember
from spark_groups.group.state import DriverState
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition, partitions_text

log = logging.getLogger(__name__)

#: How often a waiting revocation looks for its batch in the checkpoint or the sink table.
DURABLE_CHECK_INTERVAL_S = 0.2


@dataclass(frozen=True)
class BarrierOutcome:
    """How one revocation's barrier ended."""

    #: The batch it waited for (-1: none).
    waited_for: int
    #: Seconds it waited.
    waited_s: float
    #: True when the barrier committed the partitions itself (their batch was durable).
    committed_by_barrier: bool
    #: True when the wait timed out (the partitions moved uncommitted).
    timed_out: bool


class RevocationBarrier:
    """The barrier of one stream's revocations. Owner thread only."""

    def __init__(
        self,
        state: DriverState,
        committer: BatchCommitter,
        claims: Claims,
        metrics: StreamMetrics,
        *,
        timeout_s: float,
        at_most_once: bool,
    ) -> None:
        self.state = state
        self.committer = committer
        self.claims = claims
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.at_most_once = at_most_once

    def revoke(
        self,
        member: GroupMember | None,
        partitions: frozenset[TopicPartition],
        serve: Callable[[float], None],
    ) -> BarrierOutcome:
        """Wait until ``partitions``' last batch is committed (or commit it once durable),
        bounded by the rebalance timeout; then give the partitions up."""
        state = self.state
        started = time.monotonic()
        crash_points.reached("revocation")
        wait_for = state.partitions.begin_revoke(partitions)
        if self.at_most_once:  # offsets were committed at planning: nothing to wait for
            wait_for = -1
        if member is not None:
            self.claims.take_releasing(member, partitions)
        self.metrics.revocations += 1
        deadline = started + self.timeout_s
        watch = wait_for >= 0
        next_check = started
        by_barrier = timed_out = False
        try:
            while state.batches.committed_through < wait_for and not state.stopped:
                if watch and time.monotonic() >= next_check:
                    next_check = time.monotonic() + DURABLE_CHECK_INTERVAL_S
                    done = self._commit_if_durable(member, partitions)
                    if done:
                        by_barrier = True
                        break
                    watch = done is not None
                if time.monotonic() >= deadline:
                    timed_out = True
                    self._timed_out(member, partitions, wait_for, started)
                    break
                serve(0.05)
        finally:
            state.partitions.give_up(partitions, state.batches.highest)
        return BarrierOutcome(wait_for, time.monotonic() - started, by_barrier, timed_out)

    def _timed_out(
        self,
        member: GroupMember | None,
        partitions: frozenset[TopicPartition],
        wait_for: int,
        started: float,
    ) -> None:
        """Past the bound, with ``sink.table``: release the partitions' claims, so the table's
        positions are committed exactly; without it they move uncommitted."""
        self.metrics.barrier_timeouts += 1
        released: frozenset[TopicPartition] = frozenset()
        if member is not None and self.claims.enabled:
            released = self.claims.release(member, partitions, "revocation timed out").settled
        left = partitions - released
        what = (
            f"{partitions_text(released)} released at the sink table's positions"
            + (f"; {partitions_text(left)}" if left else "")
            if released
            else f"{partitions_text(partitions)} move to another member "
            "uncommitted and may be read twice"
        )
        log.error(
            "revocation barrier timed out after %.1f s waiting for batch %d (committed: %d); "
            "%s. Raise max.poll.interval.ms above the longest batch.",
            time.monotonic() - started,
            wait_for,
            self.state.batches.committed_through,
            what,
        )

    def _durable(self, batch: BatchOffset, ranges: list[OffsetRange]) -> list[OffsetRange]:
        """Which of ``ranges`` (of ``batch``) are durable now."""
        durability = self.committer.durability
        if durability.sink is None and batch.batch <= self.state.batches.finished_through:
            return list(ranges)  # with sink.table the table decides (group.durable)
        return durability.durable(batch, ranges)

    def warn_if_slow(self, batch: int, took: float | None) -> None:
        """A batch that ran (``took`` seconds) for most of the rebalance timeout would make a
        revocation during it time out: say so before that happens."""
        if took is None or took <= self.timeout_s / 2:
            return
        log.warning(
            "batch %d took %.1f s, more than half of the rebalance timeout "
            "(kafka.max.poll.interval.ms = %.0f s): a revocation during such a batch would "
            "time out and its partitions would be re-read by their next owner. Raise "
            "kafka.max.poll.interval.ms or lower maxOffsetsPerTrigger.",
            batch,
            took,
            self.timeout_s + 5,
        )
        self.metrics.extra["slow_batches"] = self.metrics.extra.get("slow_batches", 0) + 1

    def _commit_if_durable(
        self, member: GroupMember | None, partitions: frozenset[TopicPartition]
    ) -> bool | None:
        """Commit the ranges of ``partitions`` whose batch is durable; True once none of
        ``partitions`` is left uncommitted, False while some are, None when a commit failed
        (the barrier then leaves it to Spark's next trigger)."""
        if member is None:
            return False
        pending = self._uncommitted(partitions)
        if pending is None:
            return None
        for batch, ranges in pending:
            durable = self._durable(batch, ranges)
            if not durable:
                continue
            try:
                committed = self.committer.commit(
                    member, BatchOffset.of(batch.batch, durable), from_barrier=True
                )
            except Exception as exc:  # Spark's thread commits it, and reports a failure
                log.warning(
                    "the barrier could not commit batch %d's durable ranges of %s (%s); "
                    "waiting for Spark's next trigger to commit it",
                    batch.batch,
                    partitions_text(partitions),
                    exc,
                )
                return None
            log.info(
                "batch %d is durable: the barrier committed %d of its ranges",
                batch.batch,
                len(committed.ranges),
            )
        return self._uncommitted(partitions) == []

    def _uncommitted(
        self, partitions: frozenset[TopicPartition]
    ) -> list[tuple[BatchOffset, list[OffsetRange]]] | None:
        """Per batch planned here and not committed yet, the ranges of ``partitions`` it
        read that are not known committed and may still be (None: a batch that read them is
        not known). A released partition's batches never commit it: its release did."""
        by_batch: dict[int, list[OffsetRange]] = {}
        found: dict[int, BatchOffset] = {}
        partition_table, batches = self.state.partitions, self.state.batches
        for tp in partitions:
            state = partition_table.get(tp)
            if (
                state is None
                or state.last_batch <= batches.committed_through
                or not partition_table.may_commit(tp, state.last_batch)  # released
            ):
                continue
            batch = batches.get(state.last_batch)
            if batch is None:
                return None
            found[batch.batch] = batch
            for r in batch.ranges:
                if r.topic_partition == tp and (
                    state.committed is None or state.committed < r.until_offset
                ):
                    by_batch.setdefault(batch.batch, []).append(r)
        return [(found[b], ranges) for b, ranges in sorted(by_batch.items())]
