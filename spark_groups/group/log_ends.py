"""The log ends a plan reads up to, and what it means when a log ends before the group.

The stream's probe consumer (``kafka.watermarks.EndOffsetResolver``, assign-only, owned by
Spark's thread) answers where each owned partition's log ends. Here:

1. The ends are asked for the partitions about to be planned and kept for the metrics and
   the ledger's lag at commit (``Bookkeeping.log_ends``), then cut at AvailableNow's targets.
2. An assigned topic that no longer exists is data loss: :class:`~spark_groups.errors.
   DataLossError`, or with ``failOnDataLoss=false`` nothing is planned until the group
   rebalances or the topic comes back.
3. A log that ends below the group's position (the topic was recreated, a broker lost its
   data) is data loss too: the error names the partition and the range, or with
   ``failOnDataLoss=false`` the partition continues from the new end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spark_groups.errors import DataLossError, TopicNotFoundError
from spark_groups.group.available_now import AvailableNowTargets
from spark_groups.group.bookkeeping import Bookkeeping
from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.offsets import TopicPartition
from spark_groups.options import SourceOptions

log = logging.getLogger(__name__)


class LogEnds:
    """The log ends of one stream's partitions (see the module doc)."""

    def __init__(
        self, options: SourceOptions, books: Bookkeeping, available_now: AvailableNowTargets
    ) -> None:
        self.options = options
        self.books = books
        self.available_now = available_now
        self._resolver: EndOffsetResolver | None = None

    @property
    def resolver(self) -> EndOffsetResolver:
        """The probe consumer's resolver, created on first use (in the reader process)."""
        if self._resolver is None:
            self._resolver = EndOffsetResolver(
                self.options.reader_config(),
                mode=self.options.end_offsets_mode,
                timeout_s=self.options.broker_timeout_ms / 1000.0,
            )
        return self._resolver

    def close(self) -> None:
        """Release the probe consumer, if it was created."""
        if self._resolver is not None:
            self._resolver.close()

    def fetch(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Steps 1 and 2: the ends of ``positions``' partitions, as far as a plan may read."""
        if not positions:
            return {}
        try:
            ends = self.resolver.end_offsets(positions.keys())
        except TopicNotFoundError as exc:
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"{exc}: assigned partitions no longer exist; set failOnDataLoss=false to "
                    "wait for them instead"
                ) from exc
            log.warning("%s; failOnDataLoss=false: planning nothing for now", exc)
            return {}
        self.books.log_ends = dict(ends)
        return self.available_now.cut(ends, positions)

    def went_backwards(self, tp: TopicPartition, position: int, end: int) -> None:
        """Step 3, for a partition whose log ends at ``end``, below ``position``."""
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
        with self.books.lock:
            self.books.partitions.moved_to_end(tp, end)
