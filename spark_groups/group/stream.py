"""The driver side of one streaming query: the consumer-group protocol, step by step.

:class:`GroupStream` lives in Spark's long-lived reader process on the driver. Spark calls it
from that process's main thread, and the thread SIGTERM starts calls :meth:`GroupStream.stop`;
every step that reads or changes the driver's state is a request to the group member's owner
thread (``group.state``), which also runs librdkafka's callbacks: assigned, revoked (the
barrier) and lost. It knows nothing about Spark: ``spark_groups.sources.kafka_group`` adapts
it. The steps, in order: docs/architecture.md, "The driver, step by step".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from spark_groups import crash_points
from spark_groups import metrics as coordinator_metrics
from spark_groups.errors import BrokerUnreachableError
from spark_groups.group import first_assignment, refresh
from spark_groups.group.arbiter import Arbiter
from spark_groups.group.arrivals import Arrivals, ResumeSettings
from spark_groups.group.barrier import RevocationBarrier
from spark_groups.group.claims import Claims, Released
from spark_groups.group.committer import BatchCommitter, CommitMetadata, Committed
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.history import RebalanceHistory
from spark_groups.group.ledger_behind import LedgerBehind
from spark_groups.group.log_ends import Ends, LogEnds
from spark_groups.group.member import GroupMember
from spark_groups.group.one_writer import guard_for
from spark_groups.group.partitions import PartitionTable
from spark_groups.group.planner import plan_ranges, wait_for_more
from spark_groups.group.replay import Replays
from spark_groups.group.sigterm import leave_on_sigterm
from spark_groups.group.state import DriverState, OnOwner
from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition, partitions_text
from spark_groups.options import SourceOptions
from spark_groups.spark.worker_logging import log_to_stderr
from spark_groups.storage.delta import bound_allocator

log = logging.getLogger(__name__)

#: The requests other threads send to the owner thread (``GroupStream``'s methods of these
#: names); each runs there to its end, and no rebalance callback runs inside one.
REQUESTS = (
    "_first_plan_pending",
    "_resume",
    "_uncommitted",
    "_safe_point",
    "_after_commit",
    "_moved_to_end",
    "_record_plan",
    "_planned_here",
    "_planned",
    "_replay",
    "_report",
    "_release_all",
    "_commit_releasing",
    "_finished",
    "_commit_finished",
    "_stopped",
)


@dataclass(frozen=True)
class _Resumed:
    """What a plan starts from: the positions of the partitions a batch may read, and when
    the last batch was planned."""

    positions: dict[TopicPartition, int]
    last_planned_at: float | None


class GroupStream:
    """One query's consumer-group membership and offset bookkeeping on the driver.

    ``arbiter`` is the sink's table as the group asks it (``group.arbiter``), required with
    the source option ``sink.table`` and built for it by the sink
    (``spark_groups.sink.delta_arbiter.for_source``)."""

    def __init__(self, options: SourceOptions, arbiter: Arbiter | None = None) -> None:
        if (options.sink_path is None) != (arbiter is None):
            raise ValueError(
                "GroupStream takes an arbiter exactly when the source has sink.table: "
                "spark_groups.sink.delta_arbiter.for_source(options) builds it"
            )
        log_to_stderr()
        bound_allocator()  # this is the reader process: the ledger's delta-rs loads here
        self.options = options
        self.metrics = StreamMetrics()
        max_poll_s = int(options.kafka.get("max.poll.interval.ms", "300000")) / 1000.0
        self._broker_timeout_s = options.broker_timeout_ms / 1000.0
        self._state = state = DriverState()
        self._on_owner = OnOwner(timeout_s=max_poll_s + self._broker_timeout_s)
        self._member: GroupMember | None = None
        self._member_config = options.member_config()
        self._pipeline = options.pipeline
        self._one_writer = guard_for(options.tables, options.storage_options, self._member_config)
        ledger, self._history = _tables(options)
        self._behind = LedgerBehind(ledger) if ledger is not None else None
        self._durability = DurabilityWatch(options.checkpoint, arbiter, options.storage_options)
        self._committer = BatchCommitter(
            state,
            ledger,
            self._durability,
            self.metrics,
            CommitMetadata(options.kafka.get("client.id", ""), options.sink_path),
            at_most_once=options.at_most_once,
        )
        self._claims = Claims(arbiter, state, self._committer, self.metrics)
        settings = ResumeSettings(
            options.group_id,
            options.starting_offsets,
            options.sink_path,
            options.ledger_path,
            refresh.of(
                options.flow_refresh, options.checkpoint, options.group_id, options.sink_path
            ),
        )
        self._arrivals = Arrivals(settings, state, self._committer, self.metrics, self._claims)
        self._replays = Replays(
            options.checkpoint,
            options.group_id,
            options.storage_options,
            state,
            self._arrivals,
            self._durability,
        )
        self._barrier = RevocationBarrier(
            state,
            self._committer,
            self._claims,
            self.metrics,
            timeout_s=max(1.0, max_poll_s - 5.0),
            at_most_once=options.at_most_once,
        )
        self._log_ends = LogEnds(
            options.reader_config(),
            mode=options.end_offsets_mode,
            timeout_s=self._broker_timeout_s,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        # The one lock of the driver's side: a second stop() (Spark's, or SIGTERM's) waits
        # for the first. It is never held by the owner thread.
        self._stop_lock = threading.RLock()
        self._left = threading.Event()
        self._idle = False

    @property
    def _partitions(self) -> PartitionTable:
        """The partitions' states (for tests)."""
        return self._state.partitions

    # ------------------------------------------------------------------ 1. join, 7. leave
    def ensure_started(self) -> GroupMember:
        """Join the group on first use (never in ``__init__``: Spark builds readers in
        several processes, and only the long-lived reader process may be a member)."""
        if self._member is not None:
            return self._member
        member = GroupMember(
            self._member_config,
            self.options.subscription,
            listener=self,
            broker_timeout_s=self._broker_timeout_s,
        )
        # Known before start(): the first assignment may arrive before start() returns, and
        # its history row needs this member's id.
        self._member = member
        try:
            member.start()
        except BaseException:
            self._member = None
            raise
        self._on_owner.member = member
        # Spark ends the reader process with SIGTERM and may never call stop(): leave the
        # group first, so the others need not wait for the session to time out.
        leave_on_sigterm(self.stop, f"consumer group {self.options.group_id}")
        return member

    def stop(self) -> None:
        """Commit what is done, leave the group and release clients. Idempotent, from any
        thread (Spark's, or the one that leaves on SIGTERM): a second caller returns once
        the first has left, never while it is still leaving."""
        with self._stop_lock:
            if self._left.is_set():
                return
            member = self._member
            if self._behind is not None:  # the safe point's ledger append lands first
                self._behind.wait_quietly()
            if member is not None and not member.closing:
                settled = self._release_claims(member)
                self._leave_committed(member, settled)
                if self._behind is not None:
                    self._behind.wait_quietly()
            self._on_owner(self._stopped)
            if member is not None:
                crash_points.reached("leave")
                member.close()
            self._left.set()
            self._log_ends.close()
            if self._history is not None:
                self._history.flush()

    def _release_claims(self, member: GroupMember) -> frozenset[TopicPartition]:
        """With ``sink.table``: release every claim and commit the table's positions
        exactly (``group.claims``); return the partitions settled."""
        if not self._claims.enabled:
            return frozenset()
        released = self._on_owner(self._release_all, member, may_retry=True)
        retry, deadline = released.retry_under, time.monotonic() + self._broker_timeout_s
        while retry is not None:
            again = self._await_new_generation(member, retry, deadline)
            retry = self._on_owner(self._commit_releasing, member, may_retry=again)
        return released.settled

    def _leave_committed(self, member: GroupMember, settled: frozenset[TopicPartition]) -> None:
        """Commit what Spark finished of the batches planned here, as the durability signals
        see it: Spark never hands a query's last batch back to its source."""
        for planned in self._on_owner(self._finished, settled):
            try:
                self._commit(member, planned.batch, self._commit_finished, member, planned, settled)
            except Exception as exc:  # leaving the group matters more; the next owner re-reads
                log.warning("could not commit batch %d before leaving: %s", planned.batch, exc)

    # ------------------------------------------------------------------ Spark calls
    def latest_offset(self, start_json: Mapping[str, Any], max_records: int | None) -> Any:
        """Commit the batch that ended at ``start`` (now durable), then plan the next one.

        Returns ``start_json`` itself when there is nothing new to read. Under
        Trigger.AvailableNow that ends the query, so the member leaves the group right here,
        after committing the last batch."""
        if self._left.is_set():
            return start_json
        start = BatchOffset.from_json(start_json)
        member = self._join()  # 1
        resumed = self._on_owner(self._resume, member, start)  # 3
        # The log ends before the commit: the next plan's, and the ledger's log end at
        # commit time. A broker that does not answer must not hold back the commit of a
        # durable batch: commit first, then ask again (and fail if it still does not answer).
        ends: Ends | None
        try:
            ends = self._log_ends.fetch(resumed.positions)
        except BrokerUnreachableError as exc:
            log.warning("log ends unknown before the commit of batch %d: %s", start.batch, exc)
            ends = None
        self.commit_durable(start, ends)  # 4
        self._on_owner(self._after_commit, member, start.batch)
        if self._history is not None:
            self._history.flush()
        if ends is None:
            ends = self._log_ends.fetch(resumed.positions)
        plan = plan_ranges(resumed.positions, ends.readable, max_records)  # 5
        if plan.went_backwards:
            for tp, position, end in plan.went_backwards:
                self._log_ends.went_backwards(tp, position, end)
            moved = {tp: end for tp, _, end in plan.went_backwards}
            self._on_owner(self._moved_to_end, moved)
        if not self._log_ends.available_now and wait_for_more(
            plan.available,
            self.options.min_offsets_per_trigger,
            None if resumed.last_planned_at is None else time.monotonic() - resumed.last_planned_at,
            self.options.max_trigger_delay_ms / 1000.0,
        ):
            log.debug(
                "minOffsetsPerTrigger: %d offsets available, waiting for %d",
                plan.available,
                self.options.min_offsets_per_trigger,
            )
            return start_json
        batch = self._on_owner(self._record_plan, member, start, plan.ranges, ends)
        if batch is None:
            if self._log_ends.available_now:
                log.info(
                    "Trigger.AvailableNow: every batch up to %s is committed; leaving group %s",
                    self._log_ends.describe_targets(),
                    self.options.group_id,
                )
                self.stop()  # 7
            return start_json
        crash_points.reached("planned")
        if log.isEnabledFor(logging.DEBUG):  # to_json: ~10 ms for 5,000 ranges
            log.debug("planned batch %d: %s", batch.batch, batch.to_json()["ranges"])
        if self.options.at_most_once:
            # Claim, then process: a crash from here on skips this batch's records.
            self.commit_durable(batch)
        return batch.to_json()

    def commit_durable(self, batch: BatchOffset, ends: Ends | None = None) -> None:
        """Commit ``batch``, which Spark has finished, as it was read (a replay may have read
        less than Spark logged); ``ends``: the log ends seen just before (lag at commit)."""
        member = self._member
        if member is None or member.closing:
            return
        if self._on_owner(self._uncommitted, batch.batch):
            crash_points.reached("spark.commit_log")
        self._commit(member, batch.batch, self._safe_point, member, batch, ends)

    def planned_here(self, batch: int) -> bool:
        """True when this process planned ``batch`` (False for a replay after a restart)."""
        return self._on_owner(self._planned_here, batch)

    def batch_to_read(self, logged: BatchOffset) -> BatchOffset:
        """What Spark's tasks read of ``logged``: the batch as planned here, or for a batch
        Spark replays after a restart, what of it is still this member's (``group.replay``)."""
        found = self._on_owner(self._planned, logged)
        if found is not None:
            return found
        member = self._join()
        return self._on_owner(self._replay, member, logged)

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: fix the end of every subscribed partition as of now."""
        member = self.ensure_started()
        self._log_ends.fix_targets(member.subscribed_partitions())

    def report_latest(self) -> dict[str, Any] | None:
        """The log ends seen by the last plan, in the JSON shape of Spark's kafka source, and
        the coordinator metrics under ``metrics.METRICS_KEY`` (docs/metrics.md)."""
        member = self._member
        return None if member is None else self._on_owner(self._report, member)

    # ------------------------------------------------------------------ Spark's thread
    def _join(self) -> GroupMember:
        """Join (step 1) and wait for the first assignment
        (``group.first_assignment.before_planning``)."""
        member = self.ensure_started()
        log_ends = self._log_ends
        targets = log_ends.target_partitions if log_ends.available_now else None
        first_plan = self._on_owner(self._first_plan_pending)
        first_assignment.before_planning(
            member, self._member_config, self.options.join_timeout_ms, targets, first_plan
        )
        if self._one_writer is not None:
            self._one_writer.check(member)
        member.check()
        return member

    def _commit(
        self,
        member: GroupMember,
        batch: int,
        request: Callable[..., Committed],
        *args: Any,
    ) -> None:
        """Run the commit ``request(*args, may_retry=...)`` of ``batch`` on the owner thread;
        when Kafka refused it for a generation a rebalance moved past, wait for the new one
        and commit again, within ``brokerTimeoutMs``. The ledger rows it returns are appended
        behind this thread."""
        deadline = time.monotonic() + self._broker_timeout_s
        done = self._on_owner(request, *args, may_retry=True)
        while done.retry_under is not None:
            again = self._await_new_generation(member, done.retry_under, deadline)
            if again:
                log.info("batch %d: committing again under generation %d", batch, member.generation)
            done = self._on_owner(request, *args, may_retry=again)
        if done.rows and self._behind is not None:
            self._behind.append(done.rows, batch)

    def _await_new_generation(self, member: GroupMember, refused: int, deadline: float) -> bool:
        """Wait until ``member`` has a generation other than ``refused``; False when the
        member is closing or ``deadline`` passed first."""
        while member.generation == refused:
            if member.closing or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # ------------------------------------------------------------------ owner thread
    # Every method below is a request (REQUESTS) or runs inside one: Spark's thread or
    # SIGTERM's sends it to the owner thread through OnOwner, which runs it to its end.
    def _first_plan_pending(self) -> bool:
        return self._state.batches.last_planned_at is None

    def _resume(self, member: GroupMember, start: BatchOffset) -> _Resumed:
        """Step 3: Spark finished ``start``; newly assigned partitions get their position."""
        state = self._state
        state.batches.finished(start.batch)
        self._note_idle(member.assignment)
        self._arrivals.resolve(member, self._log_ends.resolver, start)
        self._arrivals.recheck_held()
        self._durability.check_checkpoint(start)
        return _Resumed(
            state.partitions.plannable(member.assignment, held=False),
            state.batches.last_planned_at,
        )

    def _uncommitted(self, batch: int) -> bool:
        return batch > self._state.batches.committed_through

    def _safe_point(
        self, member: GroupMember, batch: BatchOffset, ends: Ends | None, *, may_retry: bool
    ) -> Committed:
        """Step 4: commit ``batch`` as planned here (``ends``: the log ends seen before)."""
        state = self._state
        if ends is not None and ends.seen:
            state.log_ends = ends.seen
        planned = state.batches.get(batch.batch) or batch
        return self._committer.safe_point(member, planned, may_retry=may_retry)

    def _after_commit(self, member: GroupMember, batch: int) -> None:
        """After the safe point of ``batch``: a late claim, and the slow-batch warning."""
        self._claims.claim_late(member, batch)
        self._barrier.warn_if_slow(batch, self._state.batches.took(batch))

    def _moved_to_end(self, moved: Mapping[TopicPartition, int]) -> None:
        for tp, end in moved.items():
            self._state.partitions.moved_to_end(tp, end)

    def _record_plan(
        self,
        member: GroupMember,
        start: BatchOffset,
        planned: tuple[OffsetRange, ...],
        ends: Ends,
    ) -> BatchOffset | None:
        """Step 5: the batch after ``start`` reads those of ``planned`` whose partition is
        still owned at the planned position; a revocation that began since made its
        partitions REVOKING, so they are left out, and one that begins after sees this batch
        as their last. None when nothing is left (or the stream stopped)."""
        state = self._state
        if ends.seen:
            state.log_ends = ends.seen
        partitions, assignment = state.partitions, member.assignment
        ranges = [
            r
            for r in planned
            if partitions.is_at(r.topic_partition, r.from_offset)
            and r.topic_partition in assignment
        ]
        if state.stopped or not ranges:
            return None
        outside = [h for h in map(partitions.handover_into, ranges) if h is not None]
        batch = BatchOffset.of(
            start.batch + 1, ranges, outside, partitions.claims(), self._pipeline
        )
        partitions.planned(batch.batch, batch.ranges)
        state.batches.add(batch)
        self.metrics.batches_planned += 1
        return batch

    def _planned_here(self, batch: int) -> bool:
        return self._state.batches.planned_here(batch)

    def _planned(self, logged: BatchOffset) -> BatchOffset | None:
        """``logged`` as planned here, None for a batch this process did not plan."""
        batches = self._state.batches
        if not batches.planned_here(logged.batch):
            return None
        return batches.get(logged.batch) or logged

    def _replay(self, member: GroupMember, logged: BatchOffset) -> BatchOffset:
        return self._replays.read(member, self._log_ends.resolver, logged)

    def _release_all(self, member: GroupMember, *, may_retry: bool) -> Released:
        return self._claims.release_all(member, may_retry=may_retry)

    def _commit_releasing(self, member: GroupMember, *, may_retry: bool) -> int | None:
        return self._claims.commit_releasing(member, may_retry=may_retry)

    def _finished(self, settled: frozenset[TopicPartition]) -> list[BatchOffset]:
        return self._committer.finished(settled)

    def _commit_finished(
        self,
        member: GroupMember,
        planned: BatchOffset,
        settled: frozenset[TopicPartition],
        *,
        may_retry: bool,
    ) -> Committed:
        return self._committer.commit_finished(member, planned, settled, may_retry=may_retry)

    def _stopped(self) -> None:
        self._state.stopped = True

    def _note_idle(self, assignment: frozenset[TopicPartition]) -> None:
        """Log once when this member becomes idle (no partitions: more members than
        partitions; healthy), and once when it is not any more."""
        idle = not assignment
        if idle == self._idle:
            return
        self._idle = idle
        group = self.options.group_id
        if idle:
            log.info(
                "this member of group %s owns no partitions (more members than partitions): "
                "idle until the group gives it some",
                group,
            )
        else:
            log.info("this member of group %s owns partitions again", group)

    def _report(self, member: GroupMember) -> dict[str, Any]:
        state = self._state
        counters = coordinator_metrics.snapshot(
            self.metrics,
            member_id=member.member_id,
            generation=member.generation,
            assignment=member.assignment,
            rebalances=member.rebalances,
            log_ends=state.log_ends,
            committed=state.partitions.committed_offsets(),
            planned=state.partitions.plannable(member.assignment),
        )
        return coordinator_metrics.latest_offset_json(state.log_ends, counters)

    # ------------------------------------------------------------------ RebalanceListener
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
        """Step 6: lost partitions are dropped and never committed (another member owns
        them)."""
        self._state.partitions.give_up(partitions, self._state.batches.highest)
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
