"""Sets of Kafka offsets per partition, kept as ranges: what a share group's batch read.

A share group hands a partition's records to many consumers at once, so what one task, one
batch or one table commit holds of a partition is a *set* of offsets, not one range as in a
consumer group. The broker acquires whole record batches, so those sets are runs of
consecutive offsets with few holes: :class:`OffsetSet` keeps them as sorted, disjoint,
half-open ranges ``[from, until)``, and its size grows with the holes, not with the records.
:class:`PartitionOffsets` is one such set per partition, with the JSON form the sink's
commit info carries (``{topic: {partition: [[from, until], ...]}}``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from spark_groups.topic_partition import TopicPartition


class OffsetSet:
    """A set of offsets of one partition as sorted, disjoint, non-adjacent ranges."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        """The union of ``ranges`` (``(from, until)`` pairs, half-open, in any order)."""
        merged: list[tuple[int, int]] = []
        for start, end in sorted(r for r in ranges if r[0] < r[1]):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        self._starts = [s for s, _ in merged]
        self._ends = [e for _, e in merged]

    @classmethod
    def of(cls, offsets: Iterable[int]) -> OffsetSet:
        """The set of ``offsets``."""
        return cls((o, o + 1) for o in offsets)

    def ranges(self) -> list[tuple[int, int]]:
        """The ranges, in order."""
        return list(zip(self._starts, self._ends, strict=True))

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def __iter__(self) -> Iterator[int]:
        for s, e in zip(self._starts, self._ends, strict=True):
            yield from range(s, e)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetSet) and self.ranges() == other.ranges()

    def __hash__(self) -> int:
        return hash(tuple(self.ranges()))

    def __or__(self, other: OffsetSet) -> OffsetSet:
        return OffsetSet(self.ranges() + other.ranges())

    def __and__(self, other: OffsetSet) -> OffsetSet:
        out: list[tuple[int, int]] = []
        a, b = self.ranges(), other.ranges()
        i = j = 0
        while i < len(a) and j < len(b):
            start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if start < end:
                out.append((start, end))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return OffsetSet(out)

    def __sub__(self, other: OffsetSet) -> OffsetSet:
        out: list[tuple[int, int]] = []
        holes = other.ranges()
        j = 0
        for start, end in self.ranges():
            while j < len(holes) and holes[j][1] <= start:
                j += 1
            k = j
            while k < len(holes) and holes[k][0] < end:
                if holes[k][0] > start:
                    out.append((start, holes[k][0]))
                start = max(start, holes[k][1])
                k += 1
            if start < end:
                out.append((start, end))
        return OffsetSet(out)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __repr__(self) -> str:
        return f"OffsetSet({self})"

    def __str__(self) -> str:
        return ", ".join(f"[{s}, {e})" if e - s > 1 else str(s) for s, e in self.ranges())


class PartitionOffsets(Mapping[TopicPartition, OffsetSet]):
    """An :class:`OffsetSet` per partition (partitions with none are absent)."""

    __slots__ = ("_sets",)

    def __init__(self, sets: Mapping[TopicPartition, OffsetSet] | None = None) -> None:
        """The non-empty ones of ``sets``."""
        self._sets = {tp: s for tp, s in (sets or {}).items() if s}

    @classmethod
    def of(cls, offsets: Iterable[tuple[TopicPartition, int]]) -> PartitionOffsets:
        """The offsets of ``(partition, offset)`` pairs."""
        by: dict[TopicPartition, list[int]] = {}
        for tp, offset in offsets:
            by.setdefault(tp, []).append(offset)
        return cls({tp: OffsetSet.of(o) for tp, o in by.items()})

    def __getitem__(self, tp: TopicPartition) -> OffsetSet:
        return self._sets[tp]

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._sets)

    def __len__(self) -> int:
        return len(self._sets)

    def __or__(self, other: PartitionOffsets) -> PartitionOffsets:
        merged = dict(self._sets)
        for tp, s in other.items():
            merged[tp] = merged[tp] | s if tp in merged else s
        return PartitionOffsets(merged)

    def __and__(self, other: PartitionOffsets) -> PartitionOffsets:
        return PartitionOffsets({tp: s & other[tp] for tp, s in self._sets.items() if tp in other})

    def __sub__(self, other: PartitionOffsets) -> PartitionOffsets:
        return PartitionOffsets(
            {tp: s - other[tp] if tp in other else s for tp, s in self._sets.items()}
        )

    def records(self) -> int:
        """How many offsets, over all partitions."""
        return sum(len(s) for s in self._sets.values())

    def to_json(self) -> dict[str, dict[str, list[list[int]]]]:
        """``{topic: {partition: [[from, until], ...]}}``, partitions in order."""
        out: dict[str, dict[str, list[list[int]]]] = {}
        for tp in sorted(self._sets):
            out.setdefault(tp.topic, {})[str(tp.partition)] = [
                [s, e] for s, e in self._sets[tp].ranges()
            ]
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PartitionOffsets:
        """The inverse of :meth:`to_json`."""
        return cls(
            {
                TopicPartition(topic, int(p)): OffsetSet((int(s), int(e)) for s, e in ranges)
                for topic, parts in value.items()
                for p, ranges in parts.items()
            }
        )

    def __repr__(self) -> str:
        inner = "; ".join(f"{tp}: {s}" for tp, s in sorted(self.items()))
        return f"PartitionOffsets({{{inner}}})"
