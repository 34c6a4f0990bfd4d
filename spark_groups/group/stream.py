"""The driver side of one streaming query: the consumer-group protocol, step by step.

:class:`GroupStream` lives in Spark's long-lived reader process on the driver
(``python_streaming_source_runner``). Spark calls it from that process's main thread; the
group member calls it back (assignment changes) from the member's owner thread. It knows
nothing about Spark: ``spark_groups.source`` adapts it.

The protocol, as this module runs it:

1. **Join.** The first ``latest_offset`` joins the group (never ``__init__``: Spark builds
   readers in several processes) and waits for the first assignment
   (``group.member``); SIGTERM leaves the group.
2. **Assigned.** The group assigns partitions (owner thread): each becomes *owned*, with no
   position yet (``group.partitions``).
3. **Resume.** The next ``latest_offset`` finds where new partitions resume: the furthest of
   the ledger and the group's Kafka commit, the sink's table where it is ahead, else the
   checkpoint or ``startingOffsets`` (``group.arrivals``, ``group.resume``).
   A batch Spark replays after a restart (logged, never finished) is read only as far as it
   is still this member's: the group may have given its partitions to another consumer
   meanwhile (``group.replay``).
4. **Safe point.** ``latest_offset(start)``: every batch up to ``start`` has finished and is
   in Spark's commit log, so ``start``'s ranges are committed: Kafka, then the ledger
   (``group.commit``; the ledger's append lands behind, ``group.ledger_behind``).
5. **Plan.** One range per owned partition with new records, up to the log ends (cut at
   AvailableNow's targets, ``group.available_now``; bounded by admission control,
   ``group.planner``). A run of AvailableNow with nothing left commits and leaves here.
6. **Revoked.** Planning stops at once; the revocation waits at the barrier until the last
   batch that read the partitions has been committed, by the safe point or, once durable,
   by the barrier itself (``group.barrier``, ``group.durable``), so the next owner starts
   exactly where this member stopped. **Lost** partitions are dropped, never committed.
7. **Leave.** ``stop`` commits what Spark finished and leaves the group.

What the parts share (the partitions' states, the batches planned, one lock) is in
``group.bookkeeping``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from spark_groups import crash_points
from spark_groups.errors import BrokerUnreachableError
from spark_groups.group import first_assignment
from spark_groups.group.arbiter import Arbiter
from spark_groups.group.arrivals import Arrivals
from spark_groups.group.available_now import AvailableNowTargets
from spark_groups.group.barrier import RevocationBarrier
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.claims import Claims
from spark_groups.group.commit import BatchCommitter
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.history import RebalanceHistory
from spark_groups.group.idle import IdleNote
from spark_groups.group.log_ends import LogEnds
from spark_groups.group.member import GroupMember
from spark_groups.group.partitions import PartitionTable
from spark_groups.group.planner import plan_ranges, wait_for_more
from spark_groups.group.replay import Replays
from spark_groups.group.report import latest_report
from spark_groups.group.sigterm import leave_on_sigterm
from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, TopicPartition, partitions_text
from spark_groups.options import SourceOptions
from spark_groups.spark.worker_logging import log_to_stderr
from spark_groups.storage.delta import bound_allocator

log = logging.getLogger(__name__)


class GroupStream:
    """One query's consumer-group membership and offset bookkeeping on the driver.

    ``arbiter`` is the sink's table as the group asks it (``group.arbiter``), required with
    the source option ``sink.table`` and built for it by the sink
    (``spark_groups.sink.arbiter.for_source``)."""

    def __init__(self, options: SourceOptions, arbiter: Arbiter | None = None) -> None:
        if (options.sink_path is None) != (arbiter is None):
            raise ValueError(
                "GroupStream takes an arbiter exactly when the source has sink.table: "
                "spark_groups.sink.arbiter.for_source(options) builds it"
            )
        log_to_stderr()
        bound_allocator()  # this is the reader process: the ledger's delta-rs loads here
        self.options = options
        self.metrics = StreamMetrics()
        self._books = Bookkeeping()
        self._member: GroupMember | None = None
        ledger, self._history = _tables(options)
        self._durability = DurabilityWatch(options.checkpoint, arbiter, options.storage_options)
        self._committer = BatchCommitter(
            options, self._books, ledger, self._durability, self.metrics
        )
        self._claims = Claims(arbiter, self._books, self._committer, self.metrics)
        self._arrivals = Arrivals(options, self._books, self._committer, self.metrics, self._claims)
        self._replays = Replays(options, self._books, self._arrivals, self._durability)
        max_poll = int(options.kafka.get("max.poll.interval.ms", "300000"))
        self._barrier = RevocationBarrier(
            self._books,
            self._committer,
            self.metrics,
            timeout_s=max(1.0, max_poll / 1000.0 - 5.0),
            at_most_once=options.at_most_once,
            claims=self._claims,
        )
        self._available_now = AvailableNowTargets()
        self._log_ends = LogEnds(options, self._books, self._available_now)
        self._stop_lock = threading.RLock()
        self._idle = IdleNote(options.group_id)

    @property
    def _partitions(self) -> PartitionTable:
        """The partitions' states (for tests)."""
        return self._books.partitions

    # ------------------------------------------------------------------ 1. join, 7. leave
    def ensure_started(self) -> GroupMember:
        """Join the group on first use (never in ``__init__``: Spark builds readers in
        several processes, and only the long-lived reader process may be a member)."""
        if self._member is not None:
            return self._member
        member = GroupMember(
            self.options.member_config(),
            self.options.subscription,
            listener=self,
            broker_timeout_s=self.options.broker_timeout_ms / 1000.0,
        )
        # Known before start(): the first assignment may arrive before start() returns, and
        # its history row needs this member's id.
        self._member = member
        try:
            member.start()
        except BaseException:
            self._member = None
            raise
        # Spark ends the reader process with SIGTERM and may never call stop(): leave the
        # group first, so the others need not wait for the session to time out.
        leave_on_sigterm(self.stop, f"consumer group {self.options.group_id}")
        return member

    def stop(self) -> None:
        """Commit what is done, leave the group and release clients. Idempotent, from any
        thread (Spark's, or the one that leaves on SIGTERM): a second caller returns once
        the first has left, never while it is still leaving, so the process cannot end half
        way.

        With ``sink.table`` the claimed partitions are released first and their table
        positions committed, exactly (``group.claims``); the rest is committed as far as the
        durability signals say Spark finished it (``BatchCommitter.what_finished``)."""
        with self._stop_lock:
            if self._books.stopped:
                return
            member = self._member
            if self._committer.behind is not None:  # the safe point's ledger append lands first
                self._committer.behind.wait_quietly()
            if member is not None and not member.closed:
                settled = self._claims.release_all(member)
                self._committer.what_finished(member, settled)
                if self._committer.behind is not None:  # what_finished's append, landed
                    self._committer.behind.wait_quietly()
            with self._books.lock:
                self._books.stopped = True
                self._books.lock.notify_all()
            if self._member is not None:
                crash_points.reached("leave")
                self._member.close()
            self._log_ends.close()
            if self._history is not None:
                self._history.flush()

    # ------------------------------------------------------------------ Spark calls
    def latest_offset(self, start_json: Mapping[str, Any], max_records: int | None) -> Any:
        """Steps 1-5: commit the batch that ended at ``start`` (now durable), then plan the
        next one.

        Returns ``start_json`` itself when there is nothing new to read. Under
        Trigger.AvailableNow that ends the query, so the member leaves the group right here,
        after committing the last batch: it does not depend on Spark calling ``stop()`` or
        on the SIGTERM that ends the reader process arriving (and being handled) in time.
        """
        books = self._books
        if books.stopped:
            return start_json
        start = BatchOffset.from_json(start_json)
        with books.lock:
            books.batches.finished(start.batch)
        member = self.ensure_started()  # 1
        self._wait_for_first_assignment(member)
        member.check()
        self._idle.note(member.assignment)
        self._arrivals.resolve(member, self._log_ends.resolver, start)  # 3
        self._arrivals.recheck_held()
        self._durability.check_checkpoint(start)
        with books.lock:
            positions = books.partitions.plannable(member.assignment, held=False)
        # The log ends before the commit: the next plan's, and the ledger's log end at
        # commit time (lag at commit time = log end - committed offset). A broker that does
        # not answer must not hold back the commit of a durable batch: commit first, then
        # ask again (and fail as before if it still does not answer).
        ends: dict[TopicPartition, int] | None
        try:
            ends = self._log_ends.fetch(positions)
        except BrokerUnreachableError as exc:
            log.warning("log ends unknown before the commit of batch %d: %s", start.batch, exc)
            ends = None
        self.commit_durable(start)  # 4
        self._claims.claim_late(member, start.batch)
        self._barrier.warn_if_slow(start.batch, self._books.batches.took(start.batch))
        if self._history is not None:
            self._history.flush()
        if ends is None:
            ends = self._log_ends.fetch(positions)
        plan = plan_ranges(positions, ends, max_records)  # 5
        for tp, position, end in plan.went_backwards:
            self._log_ends.went_backwards(tp, position, end)
        if not self._available_now.active and wait_for_more(
            plan.available,
            self.options.min_offsets_per_trigger,
            None
            if books.batches.last_planned_at is None
            else time.monotonic() - books.batches.last_planned_at,
            self.options.max_trigger_delay_ms / 1000.0,
        ):
            log.debug(
                "minOffsetsPerTrigger: %d offsets available, waiting for %d",
                plan.available,
                self.options.min_offsets_per_trigger,
            )
            return start_json
        with books.lock:
            # Planning and the barrier meet here: a revocation that began while the ends were
            # fetched has made its partitions REVOKING, so they are left out; one that begins
            # after this block sees this batch as their last batch and waits for it.
            ranges = [
                r
                for r in plan.ranges
                if books.partitions.is_at(r.topic_partition, r.from_offset)
                and r.topic_partition in member.assignment
            ]
            outside = [h for h in map(books.partitions.handover_into, ranges) if h is not None]
            claims = books.partitions.claims()
            batch = (
                BatchOffset.of(start.batch + 1, ranges, outside, claims, self.options.pipeline)
                if ranges
                else None
            )
            if batch is not None:
                books.partitions.planned(batch.batch, batch.ranges)
                books.batches.add(batch)
        if batch is None:
            if self._available_now.active:
                log.info(
                    "Trigger.AvailableNow: every batch up to %s is committed; leaving group %s",
                    self._available_now.describe(),
                    self.options.group_id,
                )
                self.stop()  # 7
            return start_json
        crash_points.reached("planned")
        self.metrics.batches_planned += 1
        if log.isEnabledFor(logging.DEBUG):  # to_json: ~10 ms for 5,000 ranges
            log.debug("planned batch %d: %s", batch.batch, batch.to_json()["ranges"])
        if self.options.at_most_once:
            # Claim, then process: a crash from here on skips this batch's records.
            self.commit_durable(batch)
        return batch.to_json()

    def commit_durable(self, batch: BatchOffset) -> None:
        """Step 4: commit ``batch``, which Spark has finished (``group.commit``), as it was
        read (a replay may have read less than Spark logged)."""
        if self._member is not None:
            if batch.batch > self._books.batches.committed_through:
                crash_points.reached("spark.commit_log")
            with self._books.lock:
                batch = self._books.batches.get(batch.batch) or batch
            self._committer.safe_point(self._member, batch)

    def planned_here(self, batch: int) -> bool:
        """True when this process planned ``batch`` (False for a replay after a restart)."""
        return self._books.batches.planned_here(batch)

    def batch_to_read(self, logged: BatchOffset) -> BatchOffset:
        """What Spark's tasks read of ``logged``: the batch as planned here, or for a batch
        Spark replays after a restart, what of it is still this member's (``group.replay``)."""
        with self._books.lock:
            if self._books.batches.planned_here(logged.batch):
                return self._books.batches.get(logged.batch) or logged
        member = self.ensure_started()
        self._wait_for_first_assignment(member)
        member.check()
        return self._replays.read(member, self._log_ends.resolver, logged)

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: fix the end of every subscribed partition as of now."""
        member = self.ensure_started()
        self._available_now.fix(member.subscribed_partitions(), self._log_ends.resolver)

    def report_latest(self) -> dict[str, Any] | None:
        """The log ends seen by the last plan, in the JSON shape of Spark's kafka source, and
        the coordinator metrics under ``metrics.METRICS_KEY`` (docs/metrics.md)."""
        member = self._member
        return None if member is None else latest_report(member, self._books, self.metrics)

    # ------------------------------------------------------------------ internals
    def _wait_for_first_assignment(self, member: GroupMember) -> None:
        """Step 1's wait (``group.first_assignment.before_planning``)."""
        targets = self._available_now.partitions if self._available_now.active else None
        first_plan = self._books.batches.last_planned_at is None
        first_assignment.before_planning(member, self.options, targets, first_plan)

    # ------------------------------------------------------------------ 2, 6: RebalanceListener
    def _generation(self) -> int:
        return self._member.generation if self._member is not None else -1

    def _member_id(self) -> str:
        return self._member.member_id if self._member is not None else ""

    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        """Step 2: new partitions get their position at the next plan (step 3)."""
        self.metrics.last_rebalance_at = time.time()
        if self._history is not None:
            self._history.record("assigned", partitions, generation, self._member_id())

    def on_revoked(
        self, partitions: frozenset[TopicPartition], serve: Callable[[float], None]
    ) -> None:
        """Step 6: the barrier (``group.barrier``); returns once ``partitions``' last batch
        is committed, bounded by the rebalance timeout (``max.poll.interval.ms``)."""
        outcome = self._barrier.revoke(self._member, partitions, serve)
        self._arrivals.count_held()
        self.metrics.last_barrier_wait_s = outcome.waited_s
        if self._history is not None:
            self._history.record(
                "revoked",
                partitions,
                self._generation(),
                self._member_id(),
                barrier_wait_ms=outcome.waited_s * 1000,
                waited_for_batch=outcome.waited_for,
            )
        log.info(
            "revoked %s after a barrier wait of %.3f s (waited for batch %d: %s)",
            partitions_text(partitions),
            outcome.waited_s,
            outcome.waited_for,
            "durable, committed by the barrier" if outcome.committed_by_barrier else "committed",
        )
        if outcome.waited_s > 2.0 and not self._durability.enabled:
            log.info(
                "a revocation waits for Spark's next trigger to commit its batch; give the "
                "source the option checkpointLocation (the query's checkpoint) or sink.table "
                "(the delta-group sink's table) to end it as soon as the batch is durable"
            )

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """Step 6: lost partitions are dropped and never committed (another member owns them);
        a claim of them in flight lands first, none begins after (``group.claims``)."""
        with self._claims.settled(), self._books.lock:
            self._books.partitions.give_up(partitions, self._books.batches.highest)
        self._arrivals.count_held()
        self.metrics.lost_partitions += len(partitions)
        if self._history is not None:
            self._history.record("lost", partitions, self._generation(), self._member_id())


def _tables(options: SourceOptions) -> tuple[OffsetLedger | None, RebalanceHistory | None]:
    """The ledger (``offsets.table``) and the rebalance history (``rebalances.table``) of a
    source, where it has them."""
    retention = timedelta(milliseconds=options.retention_ms) or None
    ledger = (
        OffsetLedger(
            options.ledger_path,
            options.group_id,
            storage_options=dict(options.storage_options),
            retention=retention,
        )
        if options.ledger_path
        else None
    )
    history = (
        RebalanceHistory(
            options.history_path, options.group_id, options.storage_options, retention=retention
        )
        if options.history_path
        else None
    )
    return ledger, history
