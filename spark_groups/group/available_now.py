"""Trigger.AvailableNow: read up to the log ends as of the start, then leave.

1. When the query starts (``prepareForTriggerAvailableNow`` on Spark 4.2+; on 4.0/4.1 Spark
   runs one batch and this is not called), :meth:`AvailableNowTargets.fix` asks the log end
   of every subscribed partition, not only the assigned ones: a partition assigned later in
   the run (another member left) is read up to the same point.
2. Every plan cuts the log ends it sees at the targets (:meth:`AvailableNowTargets.cut`).
3. A plan with nothing left to read under the targets ends the run: the stream commits the
   last batch and leaves the group (``GroupStream.latest_offset``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spark_groups.kafka.watermarks import EndOffsetResolver
from spark_groups.offsets import TopicPartition, positions_text

log = logging.getLogger(__name__)


class AvailableNowTargets:
    """The log ends an AvailableNow run reads up to (none: not an AvailableNow run)."""

    def __init__(self) -> None:
        self._targets: dict[TopicPartition, int] | None = None

    @property
    def active(self) -> bool:
        """True when this is an AvailableNow run (its targets are fixed)."""
        return self._targets is not None

    def fix(self, partitions: list[TopicPartition], resolver: EndOffsetResolver) -> None:
        """Step 1: the targets are the log ends of ``partitions`` as of now."""
        self._targets = resolver.end_offsets(partitions)
        log.info("Trigger.AvailableNow: reading up to %s", self.describe())

    def cut(
        self, ends: Mapping[TopicPartition, int], positions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Step 2: ``ends`` no further than the targets (a partition without a target, which
        appeared after the start, is read no further than ``positions``)."""
        if self._targets is None:
            return dict(ends)
        targets = self._targets
        return {tp: min(end, targets.get(tp, positions[tp])) for tp, end in ends.items()}

    @property
    def partitions(self) -> list[TopicPartition]:
        """The partitions the run has targets for (every subscribed one at its start)."""
        return sorted(self._targets or {})

    def describe(self) -> str:
        """The targets, for the log (``t-0 50, t-1 40``)."""
        return positions_text(self._targets or {})
