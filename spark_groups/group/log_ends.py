"""The log ends a plan reads up to, Trigger.AvailableNow's targets, and data loss.

The stream's probe consumer (``kafka.watermarks.EndOffsetResolver``, assign-only) answers
where each owned partition's log ends; Spark's thread asks it before every plan. Under
``Trigger.AvailableNow`` the ends are cut at the targets fixed when the query started (the log
end of every subscribed partition then: a partition assigned later in the run is read up to
the same point), and a plan with nothing left under them ends the run. An assigned topic
that no longer exists, or a log that ends below the group's position (the topic was
recreated, a broker lost its data), is data loss: :class:`~spark_groups.errors.DataLossError`,
or with ``failOnDataLoss=false`` nothing is planned for the topic until it comes back, and a
partition whose log went backwards continues from the new end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_groups.errors import DataLossError, TopicNotFoundError
from spark_groups.kafka.watermarks import EndOffsetResolver, EndOffsetsMode
from spark_groups.offsets import TopicPartition, positions_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ends:
    """The log ends of some partitions (``seen``: the coordinator metrics' and the ledger's)
    and how far a plan may read them (``readable``: cut at AvailableNow's targets)."""

    seen: dict[TopicPartition, int] = field(default_factory=dict)
    readable: dict[TopicPartition, int] = field(default_factory=dict)


class LogEnds:
    """The log ends of one stream's partitions (see the module doc). One thread at a time
    (the resolver's consumer): Spark's, or the owner thread in a request Spark's waits for."""

    def __init__(
        self,
        reader_config: Mapping[str, str],
        *,
        mode: EndOffsetsMode,
        timeout_s: float,
        fail_on_data_loss: bool,
    ) -> None:
        self._config = dict(reader_config)
        self._mode: EndOffsetsMode = mode
        self._timeout_s = timeout_s
        self.fail_on_data_loss = fail_on_data_loss
        self._resolver: EndOffsetResolver | None = None
        self._targets: dict[TopicPartition, int] | None = None

    @property
    def resolver(self) -> EndOffsetResolver:
        """The probe consumer's resolver, created on first use (in the reader process)."""
        if self._resolver is None:
            self._resolver = EndOffsetResolver(
                self._config, mode=self._mode, timeout_s=self._timeout_s
            )
        return self._resolver

    def close(self) -> None:
        """Release the probe consumer, if it was created."""
        if self._resolver is not None:
            self._resolver.close()

    # ------------------------------------------------------------------ AvailableNow
    @property
    def available_now(self) -> bool:
        """True in a Trigger.AvailableNow run (its targets are fixed)."""
        return self._targets is not None

    def fix_targets(self, partitions: list[TopicPartition]) -> None:
        """AvailableNow's start: the targets are the log ends of ``partitions`` now."""
        self._targets = self.resolver.end_offsets(partitions)
        log.info("Trigger.AvailableNow: reading up to %s", self.describe_targets())

    @property
    def target_partitions(self) -> list[TopicPartition]:
        """The partitions the run has targets for (every subscribed one at its start)."""
        return sorted(self._targets or {})

    def describe_targets(self) -> str:
        """The targets, for the log (``t-0 50, t-1 40``)."""
        return positions_text(self._targets or {})

    def cut(
        self, ends: Mapping[TopicPartition, int], positions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """``ends`` no further than the targets (a partition without a target, which appeared
        after the start, is read no further than ``positions``)."""
        if self._targets is None:
            return dict(ends)
        targets = self._targets
        return {tp: min(end, targets.get(tp, positions[tp])) for tp, end in ends.items()}

    # ------------------------------------------------------------------ ends
    def fetch(self, positions: Mapping[TopicPartition, int]) -> Ends:
        """The ends of ``positions``' partitions; none for a topic that is gone under
        ``failOnDataLoss=false``."""
        if not positions:
            return Ends()
        try:
            ends = self.resolver.end_offsets(positions.keys())
        except TopicNotFoundError as exc:
            if self.fail_on_data_loss:
                raise DataLossError(
                    f"{exc}: assigned partitions no longer exist; set failOnDataLoss=false to "
                    "wait for them instead"
                ) from exc
            log.warning("%s; failOnDataLoss=false: planning nothing for now", exc)
            return Ends()
        return Ends(dict(ends), self.cut(ends, positions))

    def went_backwards(self, tp: TopicPartition, position: int, end: int) -> None:
        """A partition whose log ends at ``end``, below ``position``: raise, or with
        ``failOnDataLoss=false`` log that it continues from ``end`` (the caller moves it)."""
        message = (
            f"{tp}: the log ends at {end} but the group's position is {position} "
            "(was the topic recreated or the broker's data lost?)"
        )
        if self.fail_on_data_loss:
            raise DataLossError(
                message + "; set failOnDataLoss=false to continue from the end",
                partition=tp,
                from_offset=end,
                until_offset=position,
            )
        log.warning("%s; failOnDataLoss=false: continuing from %d", message, end)
