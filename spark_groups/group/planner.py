"""Planning one micro-batch: from per-partition positions and log ends to offset ranges.

Pure functions, no Kafka and no Spark, so the rules are easy to test:

* every owned partition with new records gets one range ``[position, end)``;
* a read limit (``maxOffsetsPerTrigger``) is shared between partitions in proportion to how
  far behind each one is, as Spark's kafka source does;
* ``minOffsetsPerTrigger`` skips a trigger with too little to read, up to
  ``maxTriggerDelay`` (:func:`wait_for_more`);
* a partition whose end went below its position (the log was truncated or recreated) is
  reported, not silently re-read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spark_groups.offsets import OffsetRange, TopicPartition


@dataclass(frozen=True)
class Plan:
    """The ranges of the next batch, and partitions whose log end went backwards."""

    ranges: tuple[OffsetRange, ...]
    went_backwards: tuple[tuple[TopicPartition, int, int], ...] = ()
    #: Offsets available to read before any read limit (what ``minOffsetsPerTrigger`` counts).
    available: int = 0


def plan_ranges(
    positions: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    max_records: int | None = None,
) -> Plan:
    """Plan ranges for every partition in ``positions`` that has an end in ``ends``.

    ``max_records`` caps the total number of offsets in the batch (None: no cap). The cap is
    split in proportion to each partition's backlog (rounded down, but a partition's share of
    less than one offset rounds up to one, so a small limit still makes progress).
    """
    backlog: dict[TopicPartition, int] = {}
    backwards: list[tuple[TopicPartition, int, int]] = []
    for tp in sorted(positions):
        if tp not in ends:
            continue
        position, end = positions[tp], ends[tp]
        if end < position:
            backwards.append((tp, position, end))
        elif end > position:
            backlog[tp] = end - position
    total = sum(backlog.values())
    take = dict(backlog)
    if max_records is not None and total > max_records:
        for tp, size in backlog.items():
            share = max_records * size / total
            take[tp] = min(size, math.ceil(share) if share < 1 else math.floor(share))
    ranges = tuple(
        OffsetRange(tp.topic, tp.partition, positions[tp], positions[tp] + n)
        for tp, n in take.items()
        if n > 0
    )
    return Plan(ranges, tuple(backwards), total)


def wait_for_more(
    available: int,
    min_records: int | None,
    since_last_batch_s: float | None,
    max_delay_s: float,
) -> bool:
    """``minOffsetsPerTrigger``: skip this trigger while fewer than ``min_records`` offsets
    are available, unless ``max_delay_s`` (``maxTriggerDelay``) has passed since the last
    batch. The first batch of a query (``since_last_batch_s`` None) never waits, as in
    Spark's kafka source."""
    if min_records is None or since_last_batch_s is None:
        return False
    return available < min_records and since_last_batch_s < max_delay_s
