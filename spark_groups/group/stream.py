"""The driver side of one streaming query: membership, planning, commits and the barrier.

:class:`GroupStream` lives in Spark's long-lived reader process on the driver
(``python_streaming_source_runner``). Spark calls it from that process's main thread; the
group member calls it back (assignment changes) from the member's owner thread. It knows
nothing about Spark: ``spark_groups.spark.source`` adapts it.

The life of a partition here:

1. The group assigns it (owner thread): it becomes *owned* but has no position yet.
2. The next ``latest_offset`` resolves where it resumes (``resume``): the furthest of the
   ledger's last ``until`` and the group's committed offset in Kafka; with neither,
   ``startingOffsets``.
3. Each ``latest_offset`` plans one range per owned partition with new records.
4. ``latest_offset(start)`` is the *safe point*: every batch up to ``start`` has finished
   and is in Spark's commit log, so ``start``'s ranges are committed (ledger, then Kafka).
5. When the group revokes it, planning stops at once and the revocation waits (the
   barrier) until the last batch that read it has been committed, so the next owner starts
   exactly where this member stopped. With a durability signal (``checkpointLocation``,
   ``sink.table``; see ``durable``) the barrier commits the partition itself as soon as
   that batch is durable, instead of waiting for Spark's next trigger. Lost partitions are
   dropped and never committed.

Each partition's state and its transitions are in ``partitions`` (:class:`PartitionTable`);
this module is the sequence of the protocol's steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from spark_groups import commit_metadata
from spark_groups import metrics as coordinator_metrics
from spark_groups.errors import (
    BrokerUnreachableError,
    CommitError,
    DataLossError,
    GroupMembershipError,
    StaleGenerationError,
    TopicNotFoundError,
)
from spark_groups.group import gaps, resume
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.history import RebalanceHistory
from spark_groups.group.member import GroupMember
from spark_groups.group.partitions import PartitionTable
from spark_groups.group.planner import plan_ranges, wait_for_more
from spark_groups.group.sigterm import leave_on_sigterm
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.ledger import CATCH_UP_BATCH, OUTSIDE_BATCH, LedgerRow, OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import (
    BatchOffset,
    Handover,
    OffsetRange,
    TopicPartition,
    positions_to_json,
)
from spark_groups.options import SourceOptions
from spark_groups.starting import LATEST
from spark_groups.worker_logging import log_to_stderr

log = logging.getLogger(__name__)

#: How often a waiting revocation looks for its batch in the checkpoint or the sink table.
DURABLE_CHECK_INTERVAL_S = 0.2


class GroupStream:
    """One query's consumer-group membership and offset bookkeeping on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        log_to_stderr()
        self.options = options
        self.metrics = StreamMetrics()
        self._lock = threading.Condition()
        self._member: GroupMember | None = None
        self._resolver: EndOffsetResolver | None = None
        self._ledger = (
            OffsetLedger(
                options.ledger_path,
                options.group_id,
                storage_options=dict(options.storage_options),
                retention=timedelta(milliseconds=options.retention_ms) or None,
            )
            if options.ledger_path
            else None
        )
        self._history = (
            RebalanceHistory(
                options.history_path,
                options.group_id,
                options.storage_options,
                retention=timedelta(milliseconds=options.retention_ms) or None,
            )
            if options.history_path
            else None
        )
        # When each batch was planned in this process (for replays and slow-batch warnings).
        self._planned_at: dict[int, float] = {}
        # Every owned partition's state (guarded by _lock).
        self._partitions = PartitionTable()
        self._committed_batch = -1
        # The batches planned here and not committed yet (the barrier commits from them).
        self._batches: dict[int, BatchOffset] = {}
        # One commit at a time: Spark's thread (safe point) or the barrier (owner thread).
        self._commit_lock = threading.Lock()
        self._durability = DurabilityWatch(
            options.checkpoint, options.sink_path, options.group_id, options.storage_options
        )
        self._targets: dict[TopicPartition, int] | None = None
        self._latest_ends: dict[TopicPartition, int] = {}
        self._stopped = False
        self._stop_lock = threading.RLock()
        # Partitions assigned after the first plan with no committed offset anywhere are new
        # partitions (a topic grew, a pattern matched a new topic): they start at earliest.
        self._first_plan_done = False
        self._highest_batch = -1  # the highest batch number this stream has seen
        self._last_batch_at: float | None = None  # when the last batch was planned
        # Ranges another consumer of the group committed, where partitions resumed (the
        # first batch of each carries it for the sink), and partitions held back because the
        # sink's table would get a gap nothing explains (group.gaps). Guarded by _lock.
        self._handovers: dict[TopicPartition, Handover] = {}
        self._held: dict[TopicPartition, gaps.Held] = {}
        self._held_checked = 0.0
        max_poll = int(options.kafka.get("max.poll.interval.ms", "300000"))
        self._barrier_timeout_s = max(1.0, max_poll / 1000.0 - 5.0)

    # ------------------------------------------------------------------ lifecycle
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
        self._resolver = EndOffsetResolver(
            self.options.reader_config(),
            mode=self.options.end_offsets_mode,
            timeout_s=self.options.broker_timeout_ms / 1000.0,
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
        """Leave the group and release clients. Idempotent, from any thread (Spark's, or
        the one that leaves on SIGTERM): a second caller returns once the first has left,
        never while it is still leaving, so the process cannot end half way."""
        with self._stop_lock:
            if self._stopped:
                return
            self._commit_what_finished()
            self._stopped = True
            with self._lock:
                self._lock.notify_all()
            if self._member is not None:
                self._member.close()
            if self._resolver is not None:
                self._resolver.close()
            if self._history is not None:
                self._history.flush()

    def _commit_what_finished(self) -> None:
        """Before leaving: commit what Spark finished of the batches planned here, as the
        durability signals see it (``checkpointLocation``: the batch is in Spark's commit log;
        ``sink.table``: its ranges are in the table). Spark never commits a query's last
        batch to its source, and on Spark 4.0/4.1 ``Trigger.AvailableNow`` is one such batch:
        without this its records would be read again by the group's next member."""
        member = self._member
        if member is None or member.closed or not self._durability.enabled:
            return
        with self._lock:
            pending = [b for n, b in sorted(self._batches.items()) if n > self._committed_batch]
        for batch in pending:
            try:
                durable = self._durability.durable(batch, batch.ranges)
                if len(durable) == len(batch.ranges):
                    self.commit_durable(batch)
                elif durable:
                    with self._commit_lock:
                        self._commit_ranges(
                            member, BatchOffset.of(batch.batch, durable), from_barrier=False
                        )
                else:
                    log.info("leaving with batch %d unfinished: not committed", batch.batch)
            except Exception as exc:  # leaving the group matters more; the next owner re-reads
                log.warning("could not commit batch %d before leaving: %s", batch.batch, exc)

    # ------------------------------------------------------------------ Spark calls
    def latest_offset(self, start_json: Mapping[str, Any], max_records: int | None) -> Any:
        """Commit the batch that ended at ``start`` (now durable), then plan the next one.

        Returns ``start_json`` itself when there is nothing new to read. Under
        Trigger.AvailableNow that ends the query, so the member leaves the group right here,
        after committing the last batch: it does not depend on Spark calling ``stop()`` or
        on the SIGTERM that ends the reader process arriving (and being handled) in time.
        """
        if self._stopped:
            return start_json
        start = BatchOffset.from_json(start_json)
        with self._lock:
            self._highest_batch = max(self._highest_batch, start.batch)
        member = self.ensure_started()
        self._wait_for_first_assignment(member)
        member.check()
        self._resolve_new_partitions(member, start)
        self._recheck_held()
        self._durability.check_checkpoint(start)
        with self._lock:
            positions = self._partitions.plannable(member.assignment)
            positions = {tp: o for tp, o in positions.items() if tp not in self._held}
        # The log ends before the commit: the next plan's, and the ledger's log end at
        # commit time (lag at commit time = log end - committed offset). A broker that does
        # not answer must not hold back the commit of a durable batch: commit first, then
        # ask again (and fail as before if it still does not answer).
        ends: dict[TopicPartition, int] | None
        try:
            ends = self._end_offsets(positions)
        except BrokerUnreachableError as exc:
            log.warning("log ends unknown before the commit of batch %d: %s", start.batch, exc)
            ends = None
        self.commit_durable(start)
        self._warn_if_slow(start.batch)
        if self._history is not None:
            self._history.flush()
        if ends is None:
            ends = self._end_offsets(positions)
        plan = plan_ranges(positions, ends, max_records)
        for tp, position, end in plan.went_backwards:
            self._log_went_backwards(tp, position, end)
        if self._targets is None and wait_for_more(
            plan.available,
            self.options.min_offsets_per_trigger,
            None if self._last_batch_at is None else time.monotonic() - self._last_batch_at,
            self.options.max_trigger_delay_ms / 1000.0,
        ):
            log.debug(
                "minOffsetsPerTrigger: %d offsets available, waiting for %d",
                plan.available,
                self.options.min_offsets_per_trigger,
            )
            return start_json
        with self._lock:
            # Planning and the barrier meet here: a revocation that began while the ends were
            # fetched has made its partitions REVOKING, so they are left out; one that begins
            # after this block sees this batch as their last batch and waits for it.
            ranges = [
                r
                for r in plan.ranges
                if self._partitions.is_at(r.topic_partition, r.from_offset)
                and r.topic_partition in member.assignment
            ]
            outside = [
                self._handovers[r.topic_partition]
                for r in ranges
                if r.topic_partition in self._handovers
                and self._handovers[r.topic_partition].until == r.from_offset
            ]
            batch = BatchOffset.of(start.batch + 1, ranges, outside) if ranges else None
            if batch is not None:
                self._highest_batch = max(self._highest_batch, batch.batch)
                self._partitions.planned(batch.batch, batch.ranges)
                self._batches[batch.batch] = batch
        if batch is None:
            if self._targets is not None:
                log.info(
                    "Trigger.AvailableNow: every batch up to %s is committed; leaving group %s",
                    positions_to_json(self._targets),
                    self.options.group_id,
                )
                self.stop()
            return start_json
        self._planned_at[batch.batch] = self._last_batch_at = time.monotonic()
        self.metrics.batches_planned += 1
        log.debug("planned batch %d: %s", batch.batch, batch.to_json()["ranges"])
        if self.options.at_most_once:
            # Claim, then process: a crash from here on skips this batch's records.
            self.commit_durable(batch)
        return batch.to_json()

    def planned_here(self, batch: int) -> bool:
        """True when this process planned ``batch`` (False for a replay after a restart)."""
        return batch in self._planned_at

    def _warn_if_slow(self, batch: int) -> None:
        """A batch that runs for most of the rebalance timeout would make a revocation time
        out (and its partitions move uncommitted): say so before that happens."""
        planned = self._planned_at.pop(batch, None)
        if planned is None:
            return
        took = time.monotonic() - planned
        if took > self._barrier_timeout_s / 2:
            log.warning(
                "batch %d took %.1f s, more than half of the rebalance timeout "
                "(kafka.max.poll.interval.ms = %.0f s): a revocation during such a batch would "
                "time out and its partitions would be re-read by their next owner. Raise "
                "kafka.max.poll.interval.ms or lower maxOffsetsPerTrigger.",
                batch,
                took,
                self._barrier_timeout_s + 5,
            )
            self.metrics.extra["slow_batches"] = self.metrics.extra.get("slow_batches", 0) + 1

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: fix the end of every subscribed partition as of now."""
        member = self.ensure_started()
        partitions = member.subscribed_partitions()
        assert self._resolver is not None
        self._targets = self._resolver.end_offsets(partitions)
        log.info("Trigger.AvailableNow: reading up to %s", positions_to_json(self._targets))

    def report_latest(self) -> dict[str, Any] | None:
        """The log ends seen by the last plan, in the JSON shape of Spark's kafka source, and
        the coordinator metrics under ``metrics.METRICS_KEY`` (docs/metrics.md)."""
        member = self._member
        if member is None:
            return None
        with self._lock:
            committed = self._partitions.committed_offsets()
            planned = self._partitions.plannable(member.assignment)
        counters = coordinator_metrics.snapshot(
            self.metrics,
            member_id=member.member_id,
            generation=member.generation,
            assignment=member.assignment,
            rebalances=member.rebalances,
            log_ends=self._latest_ends,
            committed=committed,
            planned=planned,
        )
        return coordinator_metrics.latest_offset_json(self._latest_ends, counters)

    # ------------------------------------------------------------------ internals
    def _wait_for_first_assignment(self, member: GroupMember) -> None:
        timeout_s = self.options.join_timeout_ms / 1000.0
        if not member.wait_for_assignment(timeout_s):
            raise GroupMembershipError(
                f"no partition assignment from consumer group '{self.options.group_id}' "
                f"within joinTimeoutMs={self.options.join_timeout_ms}",
                group=self.options.group_id,
            )

    def _end_offsets(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not positions:
            return {}
        assert self._resolver is not None
        try:
            ends = self._resolver.end_offsets(positions.keys())
        except TopicNotFoundError as exc:
            # An assigned topic vanished (deleted, or a broker lost its data): like the log
            # going backwards, data loss, unless failOnDataLoss=false, which waits for the
            # group to rebalance or the topic to come back, planning nothing meanwhile.
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"{exc}: assigned partitions no longer exist; set failOnDataLoss=false to "
                    "wait for them instead"
                ) from exc
            log.warning("%s; failOnDataLoss=false: planning nothing for now", exc)
            return {}
        self._latest_ends = dict(ends)
        if self._targets is not None:
            ends = {tp: min(end, self._targets.get(tp, positions[tp])) for tp, end in ends.items()}
        return ends

    def _log_went_backwards(self, tp: TopicPartition, position: int, end: int) -> None:
        message = (
            f"{tp}: the log ends at {end} but the group's position is {position} "
            "(was the topic recreated or the broker's data lost?)"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                message + "; set failOnDataLoss=false to continue from the end",
                partition=tp,
                from_offset=end,
                until_offset=position,
            )
        log.warning("%s; failOnDataLoss=false: continuing from %d", message, end)
        with self._lock:
            self._partitions.moved_to_end(tp, end)

    def _resolve_new_partitions(self, member: GroupMember, start: BatchOffset) -> None:
        """Find where newly assigned partitions resume: ledger, Kafka, sink, else the
        checkpoint or startingOffsets (see ``spark_groups.group.resume``)."""
        with self._lock:
            new = self._partitions.needs_resume(member.assignment)
        if not new:
            return
        # A partition assigned anew may have a new log (broker restarted, topic recreated):
        # confirm its end afresh, so a log that went backwards is seen.
        assert self._resolver is not None
        self._resolver.forget(new)
        committed = resume.committed(new, self._ledger, member)
        known = committed.known()
        sink: dict[TopicPartition, int] = {}
        if self.options.sink_path is not None:
            sink = resume.sink_positions(
                self.options.sink_path, self.options.group_id, new, self.options.storage_options
            )
            self._catch_up_with_sink(member, sink, known)
        handovers = resume.handovers(committed.kafka, resume.furthest(committed.ledger_own, sink))
        self._record_handovers(handovers, committed.ledger)
        replayed = start.ends()
        discovered_later, self._first_plan_done = self._first_plan_done, True
        rules = {
            tp: resume.start_rule(self.options.starting_offsets, tp, discovered_later)
            for tp in new
            if tp not in known and tp not in replayed
        }
        starts = (
            resume.starting_offsets(rules, self._resolver, self.options.starting_offsets)
            if rules
            else {}
        )
        self._pin(member, {tp: v for tp, v in starts.items() if rules[tp] == LATEST})
        chosen = resume.choose(new, known, replayed, starts, discovered_later)
        sources: dict[str, tuple[int | None, str]] = {}
        resumed: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, first in chosen.items():
                position = self._partitions.resume(
                    tp, first.offset, first.offset if first.origin == "committed" else None
                )
                sources[str(tp)] = (position, first.origin)
                if position is not None:
                    resumed[tp] = position
                self._handovers.pop(tp, None)
                if tp in handovers:
                    self._handovers[tp] = handovers[tp]
        log.info("resuming %d partitions (offset, from): %s", len(new), sources)
        if self.options.sink_path is not None:
            who = {tp: commit_metadata.read(md).text for tp, (_, md) in committed.kafka.items()}
            self._hold(gaps.unexplained(resumed, sink, handovers, who))

    def _record_handovers(
        self, handovers: Mapping[TopicPartition, Handover], ledger: Mapping[TopicPartition, int]
    ) -> None:
        """Log the ranges other consumers of the group committed and record them in the
        ledger (``batch`` :data:`OUTSIDE_BATCH`), once: a range the ledger already reaches
        was recorded by an earlier owner."""
        for h in handovers.values():
            log.info(
                "%s resumes at %d, committed by %s (spark_groups stood at %s): the range was "
                "processed outside this query",
                h.topic_partition,
                h.until,
                h.by,
                h.since,
            )
        rows = [
            LedgerRow(
                topic=h.topic,
                partition=h.partition,
                from_offset=h.until if h.since is None else h.since,
                until_offset=h.until,
                member_id=h.by,
                generation=-1,
                batch=OUTSIDE_BATCH,
                committed_at=datetime.now(UTC),
            )
            for tp, h in sorted(handovers.items())
            if ledger.get(tp, -1) < h.until
        ]
        if self._ledger is not None and rows:
            self._ledger.append(rows)

    def _hold(self, held: Mapping[TopicPartition, gaps.Held]) -> None:
        """Hold back partitions the sink's table would get an unexplained gap in."""
        if not held:
            return
        assert self.options.sink_path is not None
        with self._lock:
            self._held.update(held)
            self.metrics.extra["held_partitions"] = len(self._held)
        for h in held.values():
            log.error(
                "%s",
                h.message(self.options.group_id, self.options.sink_path, self.options.ledger_path),
            )

    def _recheck_held(self) -> None:
        """Every few seconds, release the held partitions the sink's table has reached (an
        operator ran ``spark-groups accept-gap``), and drop those no longer owned."""
        with self._lock:
            held = dict(self._held)
        if not held or time.monotonic() - self._held_checked < gaps.RECHECK_S:
            return
        self._held_checked = time.monotonic()
        assert self.options.sink_path is not None
        table = resume.sink_positions(
            self.options.sink_path,
            self.options.group_id,
            list(held),
            self.options.storage_options,
        )
        done = list(gaps.released(held, table))
        with self._lock:
            for tp in done:
                self._held.pop(tp, None)
            self.metrics.extra["held_partitions"] = len(self._held)
        for tp in done:
            log.info("%s: the sink table reaches %d now; reading it again", tp, table[tp])

    def _catch_up_with_sink(
        self,
        member: GroupMember,
        sink: Mapping[TopicPartition, int],
        known: dict[TopicPartition, int],
    ) -> None:
        """Resume from the exactly-once sink (option ``sink.table``) where it is ahead of the
        ledger and Kafka, and bring both up to its position. The sink commits a batch before
        the source's safe point does, so after a crash it can be one batch ahead; without this
        the next owner would re-read that batch only for the sink to drop it."""
        ahead = {tp: v for tp, v in sink.items() if v > known.get(tp, -1)}
        if not ahead:
            return
        log.info("the sink %s is ahead; resuming from it: %s", self.options.sink_path, ahead)
        prior = dict(known)
        known.update(ahead)
        try:
            member.commit(ahead, metadata=self._commit_metadata(member, "sink catch-up"))
        except CommitError as exc:  # includes a stale generation: the next owner does this
            self.metrics.failed_commits += 1
            log.warning("could not bring Kafka up to the sink's offsets: %s", exc)
            return
        ranges = [
            OffsetRange(tp.topic, tp.partition, prior.get(tp, until), until)
            for tp, until in sorted(ahead.items())
        ]
        self._record_in_ledger(member, ranges, CATCH_UP_BATCH)

    def _record_in_ledger(self, member: GroupMember, ranges: list[OffsetRange], batch: int) -> None:
        """Append one ledger row per range, all committed by ``member`` for ``batch``."""
        if self._ledger is None:
            return
        now = datetime.now(UTC)
        log_ends = self._latest_ends  # seen at (or, for the barrier's commits, before) now
        self._ledger.append(
            [
                LedgerRow(
                    topic=r.topic,
                    partition=r.partition,
                    from_offset=r.from_offset,
                    until_offset=r.until_offset,
                    member_id=member.member_id,
                    generation=member.generation,
                    batch=batch,
                    committed_at=now,
                    log_end=log_ends.get(r.topic_partition),
                )
                for r in ranges
            ]
        )

    def _commit_metadata(self, member: GroupMember, what: str) -> str:
        """The metadata of this member's OffsetCommit for ``what`` (who committed)."""
        return commit_metadata.make(member.member_id, what, self.options.kafka.get("client.id", ""))

    def _pin(self, member: GroupMember, starts: Mapping[TopicPartition, int]) -> None:
        """Commit where partitions that started at ``latest`` start (to Kafka, like a plain
        consumer's first commit after ``auto.offset.reset``), so the group agrees on it: a
        partition that moves before its first batch resumes there instead of resolving
        ``latest`` again later and skipping what arrived in between."""
        if not starts:
            return
        try:
            member.commit(starts, metadata=self._commit_metadata(member, "starting offset"))
        except CommitError as exc:
            log.warning("could not commit the starting offsets %s: %s", dict(starts), exc)

    def commit_durable(self, batch: BatchOffset) -> None:
        """Commit a batch Spark has finished: Kafka (OffsetCommit), then one ledger row per range.

        Only partitions this member has owned without a break since the batch was planned
        are committed (a partition lost or revoked and assigned again since then may have
        moved on under another owner), checked on the member's thread together with the
        commit itself, and never below what is already known committed (a replayed batch
        must not move the group backwards).
        Kafka refusing the commit for a stale generation is logged and counted, and the
        ledger is not written either; a ledger failure raises.
        """
        if batch.batch <= self._committed_batch or self._member is None:
            return
        member = self._member
        with self._commit_lock:  # the barrier may be committing some of it: wait for it
            if batch.batch <= self._committed_batch:
                return
            started = time.monotonic()
            ranges = self._commit_ranges(member, batch, from_barrier=False)
            with self._lock:
                self._committed_batch = max(self._committed_batch, batch.batch)
                for done in [b for b in self._batches if b <= batch.batch]:
                    del self._batches[done]
                self._lock.notify_all()
            self._durability.forget(batch.batch)
        self.metrics.batches_committed += 1
        self.metrics.last_commit_ms = (time.monotonic() - started) * 1000
        log.info(
            "committed batch %d: %d partitions in %.1f ms",
            batch.batch,
            len(ranges),
            self.metrics.last_commit_ms,
        )

    def _commit_ranges(
        self, member: GroupMember, batch: BatchOffset, *, from_barrier: bool
    ) -> list[OffsetRange]:
        """Commit ``batch`` to Kafka, then the ledger; return the ranges committed."""
        ranges, offsets = self._commit_to_kafka(member, batch, from_barrier=from_barrier)
        if ranges:
            self._record_in_ledger(member, ranges, batch.batch)
        with self._lock:
            # A replayed batch moves a freshly resumed position past what it read.
            self._partitions.record_commit(offsets)
        return ranges

    def _commit_to_kafka(
        self, member: GroupMember, batch: BatchOffset, *, from_barrier: bool
    ) -> tuple[list[OffsetRange], dict[TopicPartition, int]]:
        """Commit ``batch`` to Kafka; return the ranges the ledger records and the offsets
        now known committed.

        1. Take the committable ranges (``PartitionStates.committable``: owned, not given up
           since the batch was planned, past what is known committed).
        2. Commit them on the member's thread, only partitions still owned there.
        3. A refusal that means "a rebalance moved on while the commit was in flight"
           (``ILLEGAL_GENERATION`` from a member that is still in the group, typically between
           the two rebalances of a cooperative revocation) is not a fence: wait for the
           member's new generation and go back to 1, within ``brokerTimeoutMs``. Partitions
           revoked or lost meanwhile drop out in 1 and 2.
        4. A fence (or step 3 timing out): nothing is committed, not even to the ledger; the
           partitions' next owner resumes from the last accepted offsets.
        5. Any other Kafka failure: the ledger still records the batch, and a new owner
           resumes from the furthest of the two.

        ``from_barrier`` (the revocation barrier, on the member's thread, which cannot wait
        for a new generation): every refusal raises, nothing is recorded, and the barrier
        leaves the batch to Spark's next trigger, which commits it by the steps above.
        """
        deadline = time.monotonic() + self.options.broker_timeout_ms / 1000.0
        while True:
            owned = member.assignment
            with self._lock:
                ranges = self._partitions.committable(batch.batch, batch.ranges, owned)
            if not ranges:
                return [], {}
            offsets = {r.topic_partition: r.until_offset for r in ranges}
            try:
                done = member.commit(
                    offsets,
                    owned_only=True,
                    metadata=self._commit_metadata(member, f"batch {batch.batch}"),
                )
            except StaleGenerationError as exc:
                if from_barrier:
                    raise
                if exc.transient and self._await_new_generation(member, exc.generation, deadline):
                    log.info(
                        "batch %d: %s (a rebalance moved on); committing again under generation %d",
                        batch.batch,
                        exc.code,
                        member.generation,
                    )
                    continue
                self.metrics.failed_commits += 1
                log.error(
                    "batch %d: %s; nothing committed (the partitions' next owner resumes "
                    "from the group's last accepted offsets)",
                    batch.batch,
                    exc,
                )
                return [], {}
            except CommitError as exc:
                if from_barrier:
                    raise
                self.metrics.failed_commits += 1
                log.error(
                    "batch %d: Kafka offset commit failed: %s (the ledger still records the "
                    "batch; a new owner resumes from the furthest of the two)",
                    batch.batch,
                    exc,
                )
                return ranges, offsets
            return (
                [r for r in ranges if r.topic_partition in done],
                {tp: o for tp, o in offsets.items() if tp in done},
            )

    def _await_new_generation(self, member: GroupMember, refused: int, deadline: float) -> bool:
        """Wait until ``member`` has a generation other than ``refused``; False when the
        member ended or ``deadline`` passed first."""
        while member.generation == refused:
            if member.closed or self._stopped or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # ------------------------------------------------------------------ RebalanceListener
    def _member_id(self) -> str:
        return self._member.member_id if self._member is not None else ""

    def on_assigned(self, partitions: frozenset[TopicPartition], generation: int) -> None:
        """New partitions get their position at the next plan (see ``latest_offset``)."""
        self.metrics.last_rebalance_at = time.time()
        if self._history is not None:
            self._history.record("assigned", partitions, generation, self._member_id())

    def on_revoked(
        self, partitions: frozenset[TopicPartition], serve: Callable[[float], None]
    ) -> None:
        """The barrier: stop planning ``partitions`` now, return once their last batch is
        committed (bounded by the rebalance timeout, ``max.poll.interval.ms``).

        Spark's thread commits that batch at its next trigger. With a durability signal
        (``durable``) the barrier does not wait for that: as soon as the batch is durable it
        commits ``partitions``' ranges of it itself (Kafka, then the ledger, ownership
        checked with the commit on this thread) and returns.
        """
        started = time.monotonic()
        with self._lock:
            wait_for = self._partitions.begin_revoke(partitions)
        if self.options.at_most_once:
            wait_for = -1  # offsets were committed when the batch was planned
        self.metrics.revocations += 1
        deadline = started + self._barrier_timeout_s
        watch = self._durability.enabled and wait_for >= 0
        next_check = started
        released = "committed"
        try:
            while self._committed_batch < wait_for and not self._stopped:
                if watch and time.monotonic() >= next_check:
                    next_check = time.monotonic() + DURABLE_CHECK_INTERVAL_S
                    done = self._commit_if_durable(partitions)
                    if done:
                        released = "durable"
                        break
                    watch = done is not None
                if time.monotonic() >= deadline:
                    self.metrics.barrier_timeouts += 1
                    log.error(
                        "revocation barrier timed out after %.1f s waiting for batch %d "
                        "(committed: %d); %s move to another member uncommitted and may be read "
                        "twice. Raise max.poll.interval.ms above the longest batch.",
                        time.monotonic() - started,
                        wait_for,
                        self._committed_batch,
                        sorted(str(tp) for tp in partitions),
                    )
                    break
                serve(0.05)
        finally:
            with self._lock:
                # After the barrier: a batch that outlived it must not commit these.
                self._partitions.give_up(partitions, self._highest_batch)
                self._forget(partitions)
        self.metrics.last_barrier_wait_s = time.monotonic() - started
        if self._history is not None:
            generation = self._member.generation if self._member is not None else -1
            self._history.record(
                "revoked",
                partitions,
                generation,
                self._member_id(),
                barrier_wait_ms=self.metrics.last_barrier_wait_s * 1000,
                waited_for_batch=wait_for,
            )
        log.info(
            "revoked %s after a barrier wait of %.3f s (waited for batch %d: %s)",
            sorted(str(tp) for tp in partitions),
            self.metrics.last_barrier_wait_s,
            wait_for,
            "durable, committed by the barrier" if released == "durable" else "committed",
        )
        if self.metrics.last_barrier_wait_s > 2.0 and not self._durability.enabled:
            log.info(
                "a revocation waits for Spark's next trigger to commit its batch; give the "
                "source the option checkpointLocation (the query's checkpoint) or sink.table "
                "(the delta-group sink's table) to end it as soon as the batch is durable"
            )

    def _commit_if_durable(self, partitions: frozenset[TopicPartition]) -> bool | None:
        """Barrier (owner thread): commit the ranges of ``partitions`` whose batch is durable
        (``durable``); True once none of ``partitions`` is left uncommitted, False while some
        are, None when a commit failed (the barrier then leaves it to Spark's next trigger).

        Never blocks on Spark's thread: while that is committing (it needs this thread to
        serve its Kafka commit) this returns False at once.
        """
        member = self._member
        if member is None or not self._commit_lock.acquire(blocking=False):
            return False
        try:
            pending = self._uncommitted(partitions)
            if pending is None:
                return None
            for batch, ranges in pending:
                durable = self._durability.durable(batch, ranges)
                if not durable:
                    continue
                try:
                    committed = self._commit_ranges(
                        member, BatchOffset.of(batch.batch, durable), from_barrier=True
                    )
                except Exception as exc:  # Spark's thread commits it, and reports a failure
                    log.warning(
                        "the barrier could not commit batch %d's durable ranges of %s (%s); "
                        "waiting for Spark's next trigger to commit it",
                        batch.batch,
                        sorted(str(tp) for tp in partitions),
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
            self._commit_lock.release()

    def _uncommitted(
        self, partitions: frozenset[TopicPartition]
    ) -> list[tuple[BatchOffset, list[OffsetRange]]] | None:
        """Per batch planned here and not committed yet, the ranges of ``partitions`` it
        read that are not known committed (None: a batch that read them is not known)."""
        by_batch: dict[int, list[OffsetRange]] = {}
        with self._lock:
            for tp in partitions:
                state = self._partitions.get(tp)
                if state is None or state.last_batch <= self._committed_batch:
                    continue
                batch = self._batches.get(state.last_batch)
                if batch is None:
                    return None
                for r in batch.ranges:
                    if r.topic_partition == tp and (
                        state.committed is None or state.committed < r.until_offset
                    ):
                        by_batch.setdefault(batch.batch, []).append(r)
            return [(self._batches[b], ranges) for b, ranges in sorted(by_batch.items())]

    def _forget(self, partitions: frozenset[TopicPartition]) -> None:
        """Drop the handovers and holds of partitions given up (caller holds ``_lock``)."""
        for tp in partitions:
            self._handovers.pop(tp, None)
            self._held.pop(tp, None)
        self.metrics.extra["held_partitions"] = len(self._held)

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """Lost partitions are dropped and never committed (another member owns them)."""
        with self._lock:
            self._partitions.give_up(partitions, self._highest_batch)
            self._forget(partitions)
        self.metrics.lost_partitions += len(partitions)
        if self._history is not None:
            generation = self._member.generation if self._member is not None else -1
            self._history.record("lost", partitions, generation, self._member_id())
