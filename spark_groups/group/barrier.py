"""The revocation barrier: a revoked partition leaves only once its last batch is committed.

When the group takes partitions away, the member's owner thread calls
:meth:`RevocationBarrier.revoke` from the rebalance callback and the rebalance waits for it:

1. The partitions become REVOKING: no batch planned from now on reads them; the barrier
   waits for the last batch that did (``PartitionTable.begin_revoke``). A claim of them in
   the sink's table still in flight lands first (``Claims.settled``); none begins after. Under
   ``at-most-once`` there is nothing to wait for: offsets were committed at planning.
2. While it waits it keeps the member alive (``serve``: heartbeats, the commits Spark's
   thread asks the owner thread to make).
3. Spark's thread commits that batch at its next trigger (the safe point). The barrier does
   not wait for that commit once the batch is durable: every :data:`DURABLE_CHECK_INTERVAL_S`
   it asks whether it is (Spark has asked for a later batch, ``PlannedBatches.finished``;
   or a durability signal, ``checkpointLocation`` or ``sink.table``, says so: see
   ``group.durable``; with ``sink.table`` the table decides) and, once it is, commits the
   revoked partitions' ranges of it itself (``BatchCommitter.commit_ranges``, ownership
   checked with the commit on this thread). When the revocation arrived inside Spark's own
   commit (the poll of its Kafka commit request delivered it), Spark's thread holds the
   committer's lock and waits for this thread: the barrier commits in its place
   (``group.commit_lock``) rather than wait for a lock that stays held until it returns.
   Partitions this member released (it is leaving) are never committed by a batch: the
   barrier waits for their release instead, and when the revocation runs inside the
   release's own commit it commits the release's positions in its place
   (``group.releases``).
4. The wait is bounded by the rebalance timeout (``max.poll.interval.ms`` less 5 s). Past
   it, with ``sink.table``, the barrier releases the partitions' claims in the sink's table
   (``group.claims``): the batch can no longer land them, and the table's positions are
   committed exactly, so the next owner still starts where the table ends. Without it the
   partitions move uncommitted (counted, logged with what to raise).
5. However it ended, the partitions are given up: a batch that outlived the barrier must
   not commit them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_groups import crash_points
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.claims import Claims
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.member import GroupMember
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
    """The barrier of one stream's revocations (see the module doc)."""

    def __init__(
        self,
        books: Bookkeeping,
        committer: BatchCommitter,
        metrics: StreamMetrics,
        *,
        timeout_s: float,
        at_most_once: bool,
        claims: Claims | None = None,
    ) -> None:
        self.claims = claims
        self.books = books
        self.committer = committer
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.at_most_once = at_most_once

    def revoke(
        self,
        member: GroupMember | None,
        partitions: frozenset[TopicPartition],
        serve: Callable[[float], None],
    ) -> BarrierOutcome:
        """Steps 1-5 of the module doc for ``partitions``; return how it ended."""
        books = self.books
        started = time.monotonic()
        crash_points.reached("revocation")
        with self._no_claim_in_flight(serve), books.lock:
            wait_for = books.partitions.begin_revoke(partitions)
        if self.at_most_once:
            wait_for = -1
        self.metrics.revocations += 1
        deadline = started + self.timeout_s
        watch = wait_for >= 0
        next_check = started
        by_barrier = timed_out = False
        try:
            while books.batches.committed_through < wait_for and not books.stopped:
                if watch and time.monotonic() >= next_check:
                    next_check = time.monotonic() + DURABLE_CHECK_INTERVAL_S
                    done = self._commit_if_durable(member, partitions)
                    if done:
                        by_barrier = True
                        break
                    watch = done is not None
                if time.monotonic() >= deadline:
                    timed_out = True
                    self.metrics.barrier_timeouts += 1
                    released = self._release(member, partitions, serve)
                    left = partitions - released
                    what = (
                        f"{partitions_text(released)} released at the sink table's positions"
                        + (f"; {partitions_text(left)}" if left else "")
                        if released
                        else f"{partitions_text(partitions)} move to another member "
                        "uncommitted and may be read twice"
                    )
                    log.error(
                        "revocation barrier timed out after %.1f s waiting for batch %d "
                        "(committed: %d); %s. Raise max.poll.interval.ms above the longest "
                        "batch.",
                        time.monotonic() - started,
                        wait_for,
                        books.batches.committed_through,
                        what,
                    )
                    break
                serve(0.05)
        finally:
            with books.lock:
                books.partitions.give_up(partitions, books.batches.highest)
        return BarrierOutcome(wait_for, time.monotonic() - started, by_barrier, timed_out)

    def _no_claim_in_flight(
        self, serve: Callable[[float], None]
    ) -> contextlib.AbstractContextManager[None]:
        """Step 1's wait for a claim in flight (none without ``sink.table``)."""
        if self.claims is None:
            return contextlib.nullcontext()
        return self.claims.settled(serve)

    def _release(
        self,
        member: GroupMember | None,
        partitions: frozenset[TopicPartition],
        serve: Callable[[float], None],
    ) -> frozenset[TopicPartition]:
        """Step 4 with ``sink.table``: release the partitions' claims and commit the table's
        positions; return the partitions settled. The committer's lock is taken without
        blocking this thread (Spark's thread may hold it, waiting for this one to serve)."""
        if member is None or self.claims is None or not self.claims.enabled:
            return frozenset()
        give_up_at = time.monotonic() + 5.0
        while not (taken := self.committer.lock.acquire(blocking=False)):
            if self._in_place_of_holder(member):
                break
            if time.monotonic() >= give_up_at:
                return frozenset()
            serve(0.05)
        try:
            return frozenset(self.claims.release(member, partitions, "revocation timed out"))
        finally:
            if taken:
                self.committer.lock.release()

    def _in_place_of_holder(self, member: GroupMember) -> bool:
        """True when the committer's lock is held by a thread whose request to the member's
        owner thread this revocation interrupted (``group.commit_lock``): it waits for this
        thread, which commits in its place."""
        return self.committer.lock.held_by(member.waiting_callers())

    def _durable(self, batch: BatchOffset, ranges: list[OffsetRange]) -> list[OffsetRange]:
        """Step 3's question: which of ``ranges`` (of ``batch``) are durable now."""
        durability = self.committer.durability
        if durability.sink is None:  # with sink.table the table decides (group.durable)
            with self.books.lock:
                finished = batch.batch <= self.books.batches.finished_through
            if finished:
                return list(ranges)
        return durability.durable(batch, ranges)

    def warn_if_slow(self, batch: int, took: float | None) -> None:
        """A batch that ran (``took`` seconds) for most of the rebalance timeout would make a
        revocation during it time out (its partitions would move uncommitted): say so
        before that happens."""
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
        """Step 3: commit the ranges of ``partitions`` whose batch is durable; True once none
        of ``partitions`` is left uncommitted, False while some are, None when a commit failed
        (the barrier then leaves it to Spark's next trigger).

        Never blocks on Spark's thread: while that is committing (it needs this thread to
        serve its Kafka commit) this returns False at once, unless this revocation runs
        inside that very commit request (:meth:`_in_place_of_holder`): then it commits in
        its place.
        """
        committer = self.committer
        if member is None:
            return False
        taken = committer.lock.acquire(blocking=False)
        in_place = not taken and self._in_place_of_holder(member)
        if not taken and not in_place:
            return False
        try:
            if self.claims is not None:  # a release of them is on its way (group.releases)
                if in_place:
                    self.claims.commit_in_place(member, partitions)
                if self.claims.in_flight.pending(partitions):
                    return False
            pending = self._uncommitted(partitions)
            if pending is None:
                return None
            for batch, ranges in pending:
                durable = self._durable(batch, ranges)
                if not durable:
                    continue
                try:
                    committed = committer.commit_ranges(
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
                    len(committed),
                )
            return self._uncommitted(partitions) == []
        finally:
            if taken:
                committer.lock.release()

    def _uncommitted(
        self, partitions: frozenset[TopicPartition]
    ) -> list[tuple[BatchOffset, list[OffsetRange]]] | None:
        """Per batch planned here and not committed yet, the ranges of ``partitions`` it
        read that are not known committed and may still be (None: a batch that read them is
        not known). A released partition's batches never commit it: its release did."""
        by_batch: dict[int, list[OffsetRange]] = {}
        found: dict[int, BatchOffset] = {}
        books = self.books
        with books.lock:
            for tp in partitions:
                state = books.partitions.get(tp)
                if (
                    state is None
                    or state.last_batch <= books.batches.committed_through
                    or not books.partitions.may_commit(tp, state.last_batch)  # released
                ):
                    continue
                batch = books.batches.get(state.last_batch)
                if batch is None:
                    return None
                found[batch.batch] = batch
                for r in batch.ranges:
                    if r.topic_partition == tp and (
                        state.committed is None or state.committed < r.until_offset
                    ):
                        by_batch.setdefault(batch.batch, []).append(r)
            return [(found[b], ranges) for b, ranges in sorted(by_batch.items())]
