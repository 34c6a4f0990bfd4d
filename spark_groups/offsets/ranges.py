"""Offset ranges and the JSON form of the source's Spark offsets.

A Spark offset of this source is the exact plan of one micro-batch (:class:`BatchOffset`): for
every partition it reads, the half-open range ``[from, until)``, so a batch replayed from the
checkpoint's offset log reads the same records whatever the assignment is by then::

    {"v": 1, "batch": 7, "ranges": {"orders": {"0": [100, 250], "3": [80, 90]}}}

Besides, only when present: ``outside``, the :class:`Handover` of a range that starts where
another consumer committed (``[since, until, by]``; the sink accepts the gap it explains);
``claims``, the claim token each partition was read under (the sink writes a partition only
while the table's claim is that token); ``group``, ``sink`` and the rest of the
:class:`Pipeline`, which the sink takes its table and group from. docs/offsets.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from spark_groups.errors import SparkGroupsError
from spark_groups.topic_partition import TopicPartition

FORMAT_VERSION = 1


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``[from_offset, until_offset)`` of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @cached_property
    def topic_partition(self) -> TopicPartition:
        """The partition this range belongs to (made once: planning and committing ask for it
        many times a batch)."""
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """How many offsets the range spans (records, plus gaps from compaction/markers)."""
        return self.until_offset - self.from_offset

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})"


@dataclass(frozen=True, order=True)
class Handover:
    """Offsets ``[since, until)`` of a partition committed in Kafka by another consumer of
    the group (``by``: who, from the commit's metadata), not by spark_groups.

    ``since`` is where spark_groups itself last stood (its ledger, or the exactly-once sink's
    table), ``None`` when it knows of no position of its own; ``until`` is the offset the
    other consumer committed, where the partition resumed. Built from what Kafka says is
    committed (OffsetFetch, with metadata), which a stale spark_groups member cannot write.
    """

    topic: str
    partition: int
    since: int | None
    until: int
    by: str

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this handover belongs to."""
        return TopicPartition(self.topic, self.partition)

    def explains(self, table_offset: int, range_start: int) -> bool:
        """True when this handover accounts for every record a table holding offsets up to
        ``table_offset`` misses before a range starting at ``range_start``: the other
        consumer committed up to exactly ``range_start``, from no later than
        ``table_offset``."""
        return self.until == range_start and (self.since is None or self.since <= table_offset)


@dataclass(frozen=True)
class Pipeline:
    """Who planned a batch, and the settings its source shares with the sink: the consumer
    group (``group``, the source's ``group.id``), the ``delta-group`` table it claims
    partitions in (``sink``, the source's ``sink.table`` as resolved; None without it), the
    query's checkpoint as the source was given it (``checkpoint``, ``checkpointLocation``;
    None without it) and the source's ``storage.*`` options that hold no secret
    (``storage``, sorted pairs, without the prefix). No secret: ids, paths and plain
    settings (credentials never leave the options)."""

    group: str
    sink: str | None = None
    checkpoint: str | None = None
    storage: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BatchOffset:
    """The plan of one micro-batch: its sequence number and one range per partition read,
    the :class:`Handover` of each range that starts where another consumer committed, and
    the claim token each partition was read under (``claims``, sorted pairs)."""

    batch: int
    ranges: tuple[OffsetRange, ...] = field(default_factory=tuple)
    outside: tuple[Handover, ...] = field(default_factory=tuple)
    claims: tuple[tuple[TopicPartition, int], ...] = field(default_factory=tuple)
    #: Who planned it (None in offsets written before it was added, and in internal copies); not
    #: part of a batch's identity: two offsets of one batch compare equal with or without it.
    pipeline: Pipeline | None = field(default=None, compare=False)
    #: A ``kafka-share`` batch: no ranges (a share group hands out records, not offsets);
    #: the sink deduplicates its records instead (``spark_groups.sink.share_commit``).
    share: bool = False

    @classmethod
    def initial(cls, pipeline: Pipeline | None = None) -> BatchOffset:
        """The offset before any batch: nothing planned yet (by ``pipeline``'s source)."""
        return cls(batch=-1, ranges=(), pipeline=pipeline)

    @classmethod
    def of(
        cls,
        batch: int,
        ranges: Iterable[OffsetRange],
        outside: Iterable[Handover] = (),
        claims: Mapping[TopicPartition, int] | None = None,
        pipeline: Pipeline | None = None,
        share: bool = False,
    ) -> BatchOffset:
        """Build a batch offset with its ranges (handovers, claims) in a canonical (sorted)
        order; only the claims of partitions it reads are kept."""
        # A key of plain tuples: the dataclasses' own ordering builds two tuples per
        # comparison, in every batch's planning.
        ranges = tuple(sorted(ranges, key=_range_key))
        kept: tuple[tuple[TopicPartition, int], ...] = ()
        if claims:
            kept = tuple(
                (tp, claims[tp])
                for tp in sorted({r.topic_partition for r in ranges})
                if claims.get(tp) is not None
            )
        return cls(
            batch=batch,
            ranges=ranges,
            outside=tuple(sorted(outside, key=_handover_key)),
            claims=kept,
            pipeline=pipeline,
            share=share,
        )

    def claim_map(self) -> dict[TopicPartition, int]:
        """The claim token of every partition read under one."""
        return dict(self.claims)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark stores in its offset log."""
        topics: dict[str, dict[str, list[int]]] = {}
        for r in self.ranges:
            topics.setdefault(r.topic, {})[str(r.partition)] = [r.from_offset, r.until_offset]
        value: dict[str, Any] = {"v": FORMAT_VERSION, "batch": self.batch, "ranges": topics}
        if self.outside:
            outside: dict[str, dict[str, list[Any]]] = {}
            for h in self.outside:
                outside.setdefault(h.topic, {})[str(h.partition)] = [h.since, h.until, h.by]
            value["outside"] = outside
        if self.claims:
            claims: dict[str, dict[str, int]] = {}
            for tp, token in self.claims:
                claims.setdefault(tp.topic, {})[str(tp.partition)] = token
            value["claims"] = claims
        if self.pipeline is not None:
            value["group"] = self.pipeline.group
            if self.pipeline.sink is not None:
                value["sink"] = self.pipeline.sink
            if self.pipeline.checkpoint is not None:
                value["checkpoint"] = self.pipeline.checkpoint
            if self.pipeline.storage:
                value["storage"] = dict(self.pipeline.storage)
        if self.share:
            value["share"] = True
        return value

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
            outside = [
                Handover(
                    topic,
                    int(part),
                    None if h[0] is None else int(h[0]),
                    int(h[1]),
                    str(h[2]),
                )
                for topic, parts in value.get("outside", {}).items()
                for part, h in parts.items()
            ]
            claims = {
                TopicPartition(topic, int(part)): int(token)
                for topic, parts in value.get("claims", {}).items()
                for part, token in parts.items()
            }
            group, sink, cp = value.get("group"), value.get("sink"), value.get("checkpoint")
            pipeline = None
            if group is not None:
                pipeline = Pipeline(
                    str(group),
                    None if sink is None else str(sink),
                    None if cp is None else str(cp),
                    tuple(sorted((str(k), str(v)) for k, v in value.get("storage", {}).items())),
                )
            share = value.get("share", False)
            if not isinstance(share, bool):
                raise ValueError(f"share must be true or false, not {share!r}")
            return cls.of(int(value["batch"]), ranges, outside, claims, pipeline, share)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise SparkGroupsError(
                f"not a spark_groups offset (was the checkpoint written by another source?): "
                f"{value!r}: {exc}"
            ) from exc

    def ends(self) -> dict[TopicPartition, int]:
        """The next offset to read for every partition in this batch."""
        return {r.topic_partition: r.until_offset for r in self.ranges}


def _range_key(r: OffsetRange) -> tuple[str, int, int, int]:
    return (r.topic, r.partition, r.from_offset, r.until_offset)


def _handover_key(h: Handover) -> tuple[str, int, int, int, str]:
    return (h.topic, h.partition, -1 if h.since is None else h.since, h.until, h.by)


def positions_text(positions: Mapping[TopicPartition, int]) -> str:
    """Per-partition offsets for a log line or an error: ``orders-0 989, orders-1 1051``."""
    return ", ".join(f"{tp} {offset}" for tp, offset in sorted(positions.items()))


def partitions_text(partitions: Iterable[TopicPartition]) -> str:
    """Partitions for a log line, topic by topic, runs of numbers joined:
    ``orders 0-3, 7; payments 0-999``. Bounded by the topics and runs, not the partitions, so
    a member of a thousand partitions logs one short line."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = []
    for topic in sorted(by_topic):
        numbers = sorted(set(by_topic[topic]))
        runs: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        parts.append(f"{topic} {', '.join(runs)}")
    return "; ".join(parts) or "none"


def positions_to_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Per-partition offsets in the JSON shape of Spark's kafka source: ``{topic: {p: off}}``."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(positions):
        out.setdefault(tp.topic, {})[str(tp.partition)] = positions[tp]
    return out
