"""The commit path: a finished batch's offsets go to Kafka, then to the ledger.

A batch is committed by the safe point, the revocation barrier or a leaving member; all three
run on the member's owner thread (``group.state``), one after the other. The order of one
commit and what each refusal means are in docs/architecture.md, "The commit path".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime

from spark_groups import crash_points
from spark_groups.errors import CommitError, SinkNotWrittenError, StaleGenerationError
from spark_groups.group import durable
from spark_groups.group.durable import DurabilityWatch
from spark_groups.group.member import GroupMember
from spark_groups.group.state import DriverState
from spark_groups.ledger import LedgerRow, OffsetLedger
from spark_groups.metrics import StreamMetrics
from spark_groups.offsets import (
    BatchOffset,
    OffsetRange,
    TopicPartition,
    commit_metadata,
    partitions_text,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitMetadata:
    """What every OffsetCommit of a query says about who made it (``client.id``, the
    delta-group table of ``sink.table``)."""

    client_id: str = ""
    sink: str | None = None

    def of(self, member: GroupMember, what: str) -> str:
        """The metadata of ``member``'s commit for ``what``."""
        return commit_metadata.make(member.member_id, what, self.client_id, self.sink)


@dataclass(frozen=True)
class Committed:
    """What one commit did: the ``ranges`` committed and, where the caller appends them to
    the ledger, their ``rows``. ``retry_under``: Kafka refused the commit for a generation a
    rebalance has moved past (nothing was recorded): commit again once the member has a new
    one."""

    ranges: list[OffsetRange] = field(default_factory=list)
    rows: list[LedgerRow] = field(default_factory=list)
    retry_under: int | None = None


NOTHING = Committed()


class BatchCommitter:
    """Commits one stream's batches: Kafka first, then the ledger. Owner thread only."""

    def __init__(
        self,
        state: DriverState,
        ledger: OffsetLedger | None,
        durability: DurabilityWatch,
        metrics: StreamMetrics,
        metadata: CommitMetadata,
        *,
        at_most_once: bool = False,
    ) -> None:
        self.state = state
        self.ledger = ledger
        self.durability = durability
        self.metrics = metrics
        self.metadata = metadata
        self.at_most_once = at_most_once

    def safe_point(self, member: GroupMember, batch: BatchOffset, *, may_retry: bool) -> Committed:
        """Commit ``batch``, which Spark has finished (and every batch before it), as far as
        the sink's table holds it (with ``sink.table``). The rows are the caller's to append.
        With ``may_retry`` a refusal for a moved-on generation returns ``retry_under``."""
        batches = self.state.batches
        if batch.batch <= batches.committed_through:
            return NOTHING
        started = time.monotonic()
        done = self.commit(member, self._held_by_sink(member, batch), may_retry=may_retry)
        if done.retry_under is not None:
            return done
        batches.committed(batch.batch)
        self.durability.forget(batch.batch)
        self.metrics.batches_committed += 1
        self.metrics.last_commit_ms = (time.monotonic() - started) * 1000
        log.info(
            "committed batch %d: %d partitions in %.1f ms",
            batch.batch,
            len(done.ranges),
            self.metrics.last_commit_ms,
        )
        return done

    def _held_by_sink(self, member: GroupMember, batch: BatchOffset) -> BatchOffset:
        """``batch`` without the ranges the sink's table does not hold (``sink.table``): the
        sink leaves a range out when its claim moved on, and Kafka never gets past the table.
        Such a partition still assigned here under the batch's claim resumes again from the
        table. A range missing under a claim that did not move on, or no table at all, means
        the query's sink does not write the table: :class:`SinkNotWrittenError`."""
        sink = self.durability.sink
        if sink is None or self.at_most_once:
            return batch
        holdings = self.durability.sink_holdings(batch.ranges)
        if holdings is None:
            log.warning(
                "batch %d: the sink table cannot be read; nothing of the batch is committed "
                "now (later batches commit past it)",
                batch.batch,
            )
            return BatchOffset.of(batch.batch, [])
        unwritten = durable.not_written(batch, holdings)
        if unwritten:
            raise SinkNotWrittenError(sink.path, batch.batch, unwritten)
        tokens = batch.claim_map()
        held = durable.held(batch.ranges, holdings)
        kept = set(held)
        missing = [r for r in batch.ranges if r not in kept]
        if missing:
            partitions = self.state.partitions
            claimed = [r for r in missing if r.topic_partition in tokens]
            again = partitions.committable(batch.batch, claimed, member.assignment, tokens)
            for r in again:
                partitions.fenced(r.topic_partition)
            log.warning(
                "batch %d: the sink table %s does not hold %s (the sink left them out: their "
                "claim moved on since the batch was planned); not committed%s",
                batch.batch,
                sink.path,
                ", ".join(map(str, missing)),
                f"; {partitions_text([r.topic_partition for r in again])} resume again from the "
                "table's position"
                if again
                else "",
            )
        return BatchOffset.of(batch.batch, held, batch.outside, tokens)

    def finished(self, settled: Collection[TopicPartition]) -> list[BatchOffset]:
        """The batches planned here and not committed, without the ``settled`` partitions
        (released with their claims): what a leaving member may still commit."""
        out = []
        for planned in self.state.batches.pending():
            kept = [r for r in planned.ranges if r.topic_partition not in settled]
            if kept:
                out.append(planned)
        return out

    def commit_finished(
        self,
        member: GroupMember,
        planned: BatchOffset,
        settled: Collection[TopicPartition],
        *,
        may_retry: bool,
    ) -> Committed:
        """Before leaving: commit what Spark finished of ``planned`` as the durability
        signals see it (the commit log, or the sink's table), without the ``settled``
        partitions. Spark never hands a query's last batch back to its source."""
        if member.closed or not self.durability.enabled:
            return NOTHING
        batch = BatchOffset.of(
            planned.batch,
            [r for r in planned.ranges if r.topic_partition not in settled],
            planned.outside,
            planned.claim_map(),
        )
        found = self.durability.durable(batch, batch.ranges)
        if len(found) == len(batch.ranges) == len(planned.ranges):
            return self.safe_point(member, planned, may_retry=may_retry)
        if found:
            return self.commit(member, BatchOffset.of(batch.batch, found), may_retry=may_retry)
        if self.durability.finished_but_not_written(batch):
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
        return NOTHING

    def commit(
        self,
        member: GroupMember,
        batch: BatchOffset,
        *,
        may_retry: bool = False,
        from_barrier: bool = False,
    ) -> Committed:
        """Commit the committable ranges of ``batch`` to Kafka, then record them: the ledger
        rows are returned, or appended here ``from_barrier`` (whose refusals raise: the batch
        is left to Spark's next trigger)."""
        partitions = self.state.partitions
        ranges = partitions.committable(
            batch.batch, batch.ranges, member.assignment, batch.claim_map()
        )
        if not ranges:
            return NOTHING
        offsets = {r.topic_partition: r.until_offset for r in ranges}
        try:
            done = member.commit(offsets, metadata=self.metadata.of(member, f"batch {batch.batch}"))
        except StaleGenerationError as exc:
            if from_barrier:
                raise
            if exc.transient and may_retry:
                log.info("batch %d: %s (a rebalance moved on)", batch.batch, exc.code)
                return Committed(retry_under=exc.generation)
            self.metrics.failed_commits += 1
            log.error(
                "batch %d: %s; nothing committed (the partitions' next owner resumes "
                "from the group's last accepted offsets)",
                batch.batch,
                exc,
            )
            return NOTHING
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
            done = frozenset(offsets)
        ranges = [r for r in ranges if r.topic_partition in done]
        rows: list[LedgerRow] = []
        if ranges:
            crash_points.reached("kafka.committed")
            if self.ledger is None:  # nothing to write: the ledger is "written" already
                crash_points.reached("ledger.written")
            else:
                rows = self.ledger_rows(member, ranges, batch.batch)
                if from_barrier:
                    self.append(rows)
                    crash_points.reached("ledger.written")
                    rows = []
        partitions.record_commit({tp: o for tp, o in offsets.items() if tp in done})
        return Committed(ranges, rows)

    def append(self, rows: list[LedgerRow]) -> None:
        """Append ``rows`` to the ledger here and now (none without ``offsets.table``)."""
        if self.ledger is not None and rows:
            self.ledger.append(rows)

    def ledger_rows(
        self, member: GroupMember, ranges: list[OffsetRange], batch: int
    ) -> list[LedgerRow]:
        """One ledger row per range, all committed by ``member`` for ``batch``, with the log
        end the last plan saw (lag at commit)."""
        now = datetime.now(UTC)
        log_ends = self.state.log_ends
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
