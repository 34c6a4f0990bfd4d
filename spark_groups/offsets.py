"""Offset ranges and the JSON form of the source's Spark offsets.

A Spark offset of this source is the exact plan of one micro-batch: for every partition the
batch reads, the half-open range ``[from, until)``. Spark writes it to the checkpoint's
offset log, so replaying a batch after a crash reads exactly the same records, whatever the
group's assignment is by then. The JSON form is::

    {"v": 1, "batch": 7, "ranges": {"orders": {"0": [100, 250], "3": [80, 90]}}}

``batch`` is the source's own sequence number of planned batches (-1 before the first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_groups.errors import SparkGroupsError

FORMAT_VERSION = 1


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of one topic (a plain, hashable value; not confluent_kafka's class)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``[from_offset, until_offset)`` of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this range belongs to."""
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """How many offsets the range spans (records, plus gaps from compaction/markers)."""
        return self.until_offset - self.from_offset


@dataclass(frozen=True)
class BatchOffset:
    """The plan of one micro-batch: its sequence number and one range per partition read."""

    batch: int
    ranges: tuple[OffsetRange, ...] = field(default_factory=tuple)

    @classmethod
    def initial(cls) -> BatchOffset:
        """The offset before any batch: nothing planned yet."""
        return cls(batch=-1, ranges=())

    @classmethod
    def of(cls, batch: int, ranges: Iterable[OffsetRange]) -> BatchOffset:
        """Build a batch offset with its ranges in a canonical (sorted) order."""
        return cls(batch=batch, ranges=tuple(sorted(ranges)))

    def to_json(self) -> dict[str, Any]:
        """The dict Spark stores in its offset log."""
        topics: dict[str, dict[str, list[int]]] = {}
        for r in self.ranges:
            topics.setdefault(r.topic, {})[str(r.partition)] = [r.from_offset, r.until_offset]
        return {"v": FORMAT_VERSION, "batch": self.batch, "ranges": topics}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BatchOffset:
        """Parse the dict written by :meth:`to_json`; raise on any other shape."""
        try:
            if value.get("v") != FORMAT_VERSION:
                raise ValueError(f"unsupported offset format version {value.get('v')!r}")
            ranges = [
                OffsetRange(topic, int(part), int(bounds[0]), int(bounds[1]))
                for topic, parts in value["ranges"].items()
                for part, bounds in parts.items()
            ]
            return cls.of(int(value["batch"]), ranges)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise SparkGroupsError(
                f"not a spark_groups offset (was the checkpoint written by another source?): "
                f"{value!r}: {exc}"
            ) from exc

    def ends(self) -> dict[TopicPartition, int]:
        """The next offset to read for every partition in this batch."""
        return {r.topic_partition: r.until_offset for r in self.ranges}


def positions_to_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Per-partition offsets in the JSON shape of Spark's kafka source: ``{topic: {p: off}}``."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(positions):
        out.setdefault(tp.topic, {})[str(tp.partition)] = positions[tp]
    return out
