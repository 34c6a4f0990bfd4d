"""Whether a planned batch is durable, seen without waiting for Spark's next trigger.

Spark tells the source that a batch finished only at the next trigger (``latestOffset``), which
under ``trigger(processingTime="5 minutes")`` comes minutes after the batch did. A revocation
waiting at the barrier asks here instead, with one of two signals the user can turn on:

* **the checkpoint** (source option ``checkpointLocation``, the query's own): Spark writes
  ``<checkpoint>/commits/<id>`` once batch ``id`` and its sink finished (see
  ``spark_groups.storage.checkpoint``; on S3 it is read with the source's ``storage.*`` options).
  Any sink.
* **the sink** (source option ``sink.table``, the ``delta-group`` sink's table, asked through
  its :class:`~spark_groups.group.arbiter.Arbiter`): a partition's position there at or past
  a range's end means the range's records are in the table.

Either says "durable" only for what is: a commit-log entry of the Spark batch whose logged
offsets are exactly this batch, or records already in the sink table. With ``sink.table`` the
table alone decides, and the safe point too commits only what it holds
(``BatchCommitter.safe_point``). Anything it cannot read counts as not durable (the barrier
then waits for Spark's next trigger, as without these options). Owner thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from spark_groups.errors import OptionError
from spark_groups.group.arbiter import Arbiter, Holdings
from spark_groups.offsets import BatchOffset, OffsetRange, TopicPartition
from spark_groups.storage import checkpoint

log = logging.getLogger(__name__)


class DurabilityWatch:
    """The durability signals of one query: its checkpoint and/or its sink table (``sink``,
    the table's arbiter)."""

    def __init__(
        self,
        checkpoint_path: str | None,
        sink: Arbiter | None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.checkpoint = checkpoint_path
        self.sink = sink
        self.storage_options = dict(storage_options) if storage_options else None
        self._checked = False
        self._reachable = False
        # Our batch number -> the Spark batch id that ran it (found in the offset log).
        self._spark_ids: dict[int, int] = {}
        # Batches a replay read less of than Spark logged: their entry has the logged offsets.
        self._logged: dict[int, BatchOffset] = {}
        self._warned: set[str] = set()

    @property
    def enabled(self) -> bool:
        """True when there is a signal to watch."""
        return self.checkpoint is not None or self.sink is not None

    def check_checkpoint(self, start: BatchOffset) -> None:
        """At every safe point (``latestOffset(start)``, ``start`` a finished batch) until
        it passed once per process: make sure ``checkpointLocation`` is this query's
        checkpoint, and that this process reads it.

        Raises :class:`~spark_groups.errors.OptionError` naming the option when the
        checkpoint cannot be read (on S3: no ``storage.*`` credentials or endpoint that
        reach it), at the query's first safe point already, or when its offset log does not
        hold ``start``: watching a commit log that cannot be read, or another query's,
        would never release a revocation early, or release one before this query's batch is
        durable.
        """
        if self.checkpoint is None or self._checked:
            return
        if not self._reachable:
            checkpoint.check_readable(self.checkpoint, self.storage_options)
            self._reachable = True
        if start.batch < 0:
            return
        try:
            found = checkpoint.spark_batch_id(self.checkpoint, start, self.storage_options)
        except Exception as exc:
            raise checkpoint.unreadable(self.checkpoint, exc, self.storage_options) from exc
        if found is None:
            raise OptionError(
                "checkpointLocation",
                f"{checkpoint.offset_log_path(self.checkpoint, start.batch)} and the entries "
                f"after it do not hold this source's batch {start.batch}: {self.checkpoint!r} "
                "is not this query's checkpoint. Give the query's own checkpoint (the "
                "writeStream option checkpointLocation) or remove the option (revocations "
                "then wait for Spark's next trigger)",
            )
        self._spark_ids[start.batch] = found
        self._checked = True

    def replayed(self, logged: BatchOffset) -> None:
        """Batch ``logged.batch`` is a replay that may read less than ``logged``: its
        offset-log entry is found by the logged offsets (``group.replay``)."""
        self._logged[logged.batch] = logged

    def durable(self, batch: BatchOffset, ranges: Sequence[OffsetRange]) -> list[OffsetRange]:
        """The ``ranges`` (of ``batch``, planned here) whose records are durable now. With
        ``sink.table`` the table decides, whatever the checkpoint says: a batch Spark
        finished may still have ranges the sink left out (their claim moved on)."""
        if self.sink is not None:
            return self.in_sink(ranges) or []
        if self.checkpoint is not None and self._in_commit_log(batch):
            return list(ranges)
        return []

    def _in_commit_log(self, batch: BatchOffset) -> bool:
        assert self.checkpoint is not None
        try:
            spark_id = self._spark_ids.get(batch.batch)
            if spark_id is None:
                logged = self._logged.get(batch.batch, batch)
                spark_id = checkpoint.spark_batch_id(self.checkpoint, logged, self.storage_options)
                if spark_id is None:
                    return False  # not logged yet: Spark logs a batch just after planning it
                self._spark_ids[batch.batch] = spark_id
            return checkpoint.is_committed(self.checkpoint, spark_id, self.storage_options)
        except Exception as exc:
            self._warn_once("checkpoint", f"cannot read the checkpoint {self.checkpoint}: {exc}")
            return False

    def in_sink(self, ranges: Sequence[OffsetRange]) -> list[OffsetRange] | None:
        """The ``ranges`` whose records the sink's table holds (``sink.table``); None when
        the table cannot be read."""
        holdings = self.sink_holdings(ranges)
        if holdings is None:
            return None
        return held(ranges, holdings)

    def sink_holdings(self, ranges: Sequence[OffsetRange]) -> Holdings | None:
        """The sink table's positions and claims for the partitions of ``ranges``; None
        (logged once) when the table cannot be read."""
        assert self.sink is not None
        try:
            return self.sink.holdings([r.topic_partition for r in ranges])
        except Exception as exc:
            self._warn_once("sink", f"cannot read the sink table {self.sink.path}: {exc}")
            return None

    def finished_but_not_written(self, batch: BatchOffset) -> bool:
        """With both signals: Spark's commit log has ``batch`` (planned here), yet the sink's
        table holds none of it while its claims are still the batch's tokens, or there is no
        table: the query's sink does not write the table (:func:`not_written`)."""
        if self.sink is None or self.checkpoint is None or not self._in_commit_log(batch):
            return False
        holdings = self.sink_holdings(batch.ranges)
        return holdings is not None and bool(not_written(batch, holdings))

    def _warn_once(self, signal: str, message: str) -> None:
        level = logging.DEBUG if signal in self._warned else logging.WARNING
        self._warned.add(signal)
        log.log(level, "%s; the revocation waits for Spark's next trigger instead", message)

    def forget(self, through_batch: int) -> None:
        """Batches up to ``through_batch`` are committed: their ids are no longer needed."""
        for batch in [b for b in self._spark_ids if b <= through_batch]:
            del self._spark_ids[batch]
        for batch in [b for b in self._logged if b <= through_batch]:
            del self._logged[batch]


def held(ranges: Sequence[OffsetRange], holdings: Holdings) -> list[OffsetRange]:
    """The ``ranges`` whose records the table (``holdings``) holds."""
    return [r for r in ranges if _holds(holdings, r)]


def _holds(holdings: Holdings, r: OffsetRange) -> bool:
    """Whether the table (``holdings``) holds the records of ``r``."""
    return holdings.positions.get(r.topic_partition, -1) >= r.until_offset


def not_written(batch: BatchOffset, holdings: Holdings) -> list[TopicPartition]:
    """The partitions of ``batch`` (which Spark finished) whose range the table does not hold
    although their claim there did not move on since the batch was planned: the claim is
    still the batch's token, or the partition has no claim at all (the batch read it before
    the table existed, or the table was made anew); all of them when there is no table. The
    delta-group sink writes such a range or fails the batch (it leaves out only ranges whose
    claim moved on), so these prove the query's sink does not write the table."""
    tokens = batch.claim_map()
    out = []
    for r in batch.ranges:
        if _holds(holdings, r):
            continue
        claim = holdings.claims.get(r.topic_partition)
        if not holdings.exists or claim is None or claim == tokens.get(r.topic_partition):
            out.append(r.topic_partition)
    return out
