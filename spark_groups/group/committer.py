"""The commit path: a finished batch's offsets go to Kafka, then to the ledger.

A batch is committed from one of three places, never two at once (:attr:`BatchCommitter.lock`):

* the **safe point**: Spark's ``latestOffset(start)`` says every batch up to ``start`` has
  finished (:meth:`BatchCommitter.safe_point`);
* the **revocation barrier**, for the ranges of revoked partitions whose batch is already
  durable (``group.barrier``, through :meth:`BatchCommitter.commit_ranges`);
* **leaving**: before the member leaves the group, what Spark finished as the durability
  signals see it (:meth:`BatchCommitter.what_finished`).

The order of one commit (:meth:`BatchCommitter.commit_ranges`):

0. At the safe point, with ``sink.table``: only the ranges the sink's table holds (the sink
   leaves out a partition whose claim moved on; Kafka never gets past the table). A range
   missing under a claim that did not move on, or no table at all, means the query's sink
   does not write the table: the query stops (``SinkNotWrittenError``).
1. Take the committable ranges (``PartitionTable.committable``: owned, not given up since the
   batch was planned, past what is known committed).
2. Commit them to Kafka (OffsetCommit) on the member's thread, only partitions still owned
   there, with metadata naming this member and the batch.
3. A refusal meaning "a rebalance moved on while the commit was in flight"
   (``ILLEGAL_GENERATION`` from a member still in the group, typically between the two
   rebalances of a cooperative revocation) is not a fence: wait for the member's new
   generation and go back to 1, within ``brokerTimeoutMs``.
4. A fence (or 3 timing out): nothing is committed, not even to the ledger; the partitions'
   next owner resumes from the last accepted offsets.
5. Any other Kafka failure: the ledger still records the batch; a new owner resumes from the
   furthest of the two.
6. Append one ledger row per committed range (with the log end seen, for lag at commit): from
   the safe point on a thread of its own while Spark's thread goes on
   (``group.ledger_behind``; a crash before it lands is one at ``kafka.committed``), from the
   barrier and the other callers here and now.
7. Record the offsets as committed in the partitions' states (a replayed batch moves a
   freshly resumed position past what it read).

The barrier runs on the member's owner thread, which cannot wait for a new generation: with
``from_barrier`` every refusal raises, nothing is recorded, and the batch is left to Spark's
next trigger, which commits it by the steps above.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from datetime import UTC, datetime

from spark_groups import crash_points
from spark_groups.errors import CommitError, SinkNotWrittenError, StaleGenerationError
from spark_groups.group import durable
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.group.commit_lock import CommitLock
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.ledger_behind import LedgerBehind
from spark_groups.group.member import GroupMember
from spark_groups.ledger import LedgerRow, OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import (
    BatchOffset,
    OffsetRange,
    TopicPartition,
    commit_metadata,
    partitions_text,
)
from spark_groups.options import SourceOptions

log = logging.getLogger(__name__)


class BatchCommitter:
    """Commits batches of one stream: Kafka first, then the ledger (see the module doc)."""

    def __init__(
        self,
        options: SourceOptions,
        books: Bookkeeping,
        ledger: OffsetLedger | None,
        durability: DurabilityWatch,
        metrics: StreamMetrics,
    ) -> None:
        self.options = options
        self.books = books
        self.ledger = ledger
        self.durability = durability
        self.metrics = metrics
        #: One commit at a time: Spark's thread (safe point) or the barrier (owner thread).
        self.lock = CommitLock()
        #: The safe point's ledger appends, behind Spark's thread (``group.ledger_behind``).
        self.behind = LedgerBehind(ledger) if ledger is not None else None

    def safe_point(self, member: GroupMember, batch: BatchOffset) -> None:
        """Commit ``batch``, which Spark has finished (and every batch before it).

        Only partitions this member has owned without a break since the batch was planned
        are committed, checked on the member's thread together with the commit itself, and
        never below what is already known committed (a replayed batch must not move the
        group backwards). A stale generation is logged and counted, and the ledger is not
        written either; a ledger failure raises.
        """
        if batch.batch <= self.books.batches.committed_through:
            return
        with self.lock:  # the barrier may be committing some of it: wait for it
            if batch.batch <= self.books.batches.committed_through:
                return
            started = time.monotonic()
            held = self._held_by_sink(member, batch)
            ranges = self.commit_ranges(member, held, from_barrier=False)
            with self.books.lock:
                self.books.batches.committed(batch.batch)
                self.books.lock.notify_all()
            self.durability.forget(batch.batch)
        self.metrics.batches_committed += 1
        self.metrics.last_commit_ms = (time.monotonic() - started) * 1000
        log.info(
            "committed batch %d: %d partitions in %.1f ms",
            batch.batch,
            len(ranges),
            self.metrics.last_commit_ms,
        )

    def _held_by_sink(self, member: GroupMember, batch: BatchOffset) -> BatchOffset:
        """Step 0 of the safe point, with ``sink.table``: ``batch`` without the ranges the
        sink's table does not hold. The sink leaves a range out when the partition's claim
        there moved on after the batch was planned (``sink.decision``: fenced); committing
        it would put Kafka past the table, and the partition's next owner would find a gap
        nothing explains. A partition the group still gives this member under the batch's
        claim is searched again (``PartitionTable.fenced``): the next plan claims it anew and
        reads it from the table's position.

        A range missing while its claim did not move on (still the batch's token, or no
        claim at all) cannot be the sink's doing (the delta-group sink writes such a range
        or fails the batch), nor can a table that does not exist after Spark finished a
        batch: the query's sink does not write this table through delta-group, and
        :class:`~spark_groups.errors.SinkNotWrittenError` stops the query before anything
        is committed."""
        if self.durability.sink is None or self.options.at_most_once:
            return batch
        holdings = self.durability.sink_holdings(batch.ranges)
        if holdings is None:
            log.warning(
                "batch %d: the sink table cannot be read; nothing of the batch is committed "
                "now (later batches commit past it)",
                batch.batch,
            )
            return BatchOffset.of(batch.batch, [])
        tokens = batch.claim_map()
        held = durable.held(batch.ranges, holdings)
        kept = set(held)  # thousands of ranges: no list lookups (issue 45)
        missing = [r for r in batch.ranges if r not in kept]
        unwritten = durable.not_written(batch, holdings)
        if unwritten:
            raise SinkNotWrittenError(self.durability.sink.path, batch.batch, unwritten)
        if missing:
            claimed = [r for r in missing if r.topic_partition in tokens]
            with self.books.lock:
                again = self.books.partitions.committable(
                    batch.batch, claimed, member.assignment, tokens
                )
                for r in again:
                    self.books.partitions.fenced(r.topic_partition)
            log.warning(
                "batch %d: the sink table %s does not hold %s (the sink left them out: their "
                "claim moved on since the batch was planned); not committed%s",
                batch.batch,
                self.durability.sink.path,
                ", ".join(map(str, missing)),
                f"; {partitions_text([r.topic_partition for r in again])} resume again from the "
                "table's position"
                if again
                else "",
            )
        return BatchOffset.of(batch.batch, held, batch.outside, tokens)

    def what_finished(
        self, member: GroupMember, settled: Collection[TopicPartition] = frozenset()
    ) -> None:
        """Before leaving: commit what Spark finished of the batches planned here, as the
        durability signals see it (``checkpointLocation``: the batch is in Spark's commit log;
        ``sink.table``: its ranges are in the table), leaving out the ``settled`` partitions
        (released with their claims, ``group.claims``). Spark never commits a query's last
        batch to its source, and on Spark 4.0/4.1 ``Trigger.AvailableNow`` is one such batch:
        without this its records would be read again by the group's next member."""
        if member.closed or not self.durability.enabled:
            return
        with self.books.lock:
            pending = self.books.batches.pending()
        for planned in pending:
            batch = BatchOffset.of(
                planned.batch,
                [r for r in planned.ranges if r.topic_partition not in settled],
                planned.outside,
                planned.claim_map(),
            )
            if not batch.ranges:
                continue
            try:
                durable = self.durability.durable(batch, batch.ranges)
                if len(durable) == len(batch.ranges) == len(planned.ranges):
                    self.safe_point(member, planned)
                elif durable:
                    with self.lock:
                        self.commit_ranges(
                            member, BatchOffset.of(batch.batch, durable), from_barrier=False
                        )
                elif self.durability.finished_but_not_written(batch):
                    log.error(  # nothing to stop: the query ended; the next run fails too
                        "leaving with batch %d not committed: %s",
                        batch.batch,
                        SinkNotWrittenError(
                            self.durability.sink.path if self.durability.sink else "",
                            batch.batch,
                            [r.topic_partition for r in batch.ranges],
                        ),
                    )
                else:
                    log.info("leaving with batch %d unfinished: not committed", batch.batch)
            except Exception as exc:  # leaving the group matters more; the next owner re-reads
                log.warning("could not commit batch %d before leaving: %s", batch.batch, exc)

    def commit_ranges(
        self, member: GroupMember, batch: BatchOffset, *, from_barrier: bool
    ) -> list[OffsetRange]:
        """Steps 1-7 of the module doc for ``batch``; return the ranges committed. The caller
        holds :attr:`lock`."""
        ranges, offsets = self._to_kafka(member, batch, from_barrier=from_barrier)
        if ranges:
            crash_points.reached("kafka.committed")
            if self.behind is not None and not from_barrier:  # 6, behind Spark's thread
                self.behind.append(self.ledger_rows(member, ranges, batch.batch), batch.batch)
            else:
                self.record_in_ledger(member, ranges, batch.batch)
                crash_points.reached("ledger.written")
        with self.books.lock:
            self.books.partitions.record_commit(offsets)
        return ranges

    def _to_kafka(
        self, member: GroupMember, batch: BatchOffset, *, from_barrier: bool
    ) -> tuple[list[OffsetRange], dict[TopicPartition, int]]:
        """Steps 1-5: the ranges the ledger records and the offsets now known committed."""
        deadline = time.monotonic() + self.options.broker_timeout_ms / 1000.0
        while True:
            owned = member.assignment
            with self.books.lock:
                ranges = self.books.partitions.committable(
                    batch.batch, batch.ranges, owned, batch.claim_map()
                )
            if not ranges:
                return [], {}
            offsets = {r.topic_partition: r.until_offset for r in ranges}
            try:
                done = member.commit(
                    offsets, owned_only=True, metadata=self.metadata(member, f"batch {batch.batch}")
                )
            except StaleGenerationError as exc:
                if from_barrier:
                    raise
                if exc.transient and self.await_new_generation(member, exc.generation, deadline):
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

    def await_new_generation(self, member: GroupMember, refused: int, deadline: float) -> bool:
        """Wait until ``member`` has a generation other than ``refused``; False when the
        member ended, the stream stopped or ``deadline`` passed first, or at once on the
        member's owner thread (the generation moves on there only)."""
        if member.on_owner_thread():
            return False
        while member.generation == refused:
            if member.closed or self.books.stopped or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def record_in_ledger(self, member: GroupMember, ranges: list[OffsetRange], batch: int) -> None:
        """Step 6, here and now: one ledger row per range, all committed by ``member`` for
        ``batch``."""
        if self.ledger is not None:
            self.ledger.append(self.ledger_rows(member, ranges, batch))

    def ledger_rows(
        self, member: GroupMember, ranges: list[OffsetRange], batch: int
    ) -> list[LedgerRow]:
        """Step 6's rows: one per range, all committed by ``member`` for ``batch``."""
        now = datetime.now(UTC)
        log_ends = self.books.log_ends  # seen at (or, for the barrier's commits, before) now
        return [
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

    def metadata(self, member: GroupMember, what: str) -> str:
        """The metadata of this member's OffsetCommit for ``what`` (who committed)."""
        return commit_metadata.make(
            member.member_id, what, self.options.kafka.get("client.id", ""), self.options.sink_path
        )
