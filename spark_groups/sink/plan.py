"""What a micro-batch was planned to read: its Kafka offset ranges, from Spark's checkpoint.

Rows alone cannot tell which offsets a batch covered (a filter may drop any of them), but the
``kafka-group`` source's Spark offset *is* the batch's plan, and Spark writes it to
``<checkpoint>/offsets/<batchId>`` before the batch runs: one line per source after Spark's
metadata. Lines of other sources are skipped; several ``kafka-group`` sources are merged, one
partition in only one of them. Reading the checkpoint's files is
``spark_groups.storage.checkpoint``'s. docs/sink.md, "How the sink learns a batch's offset
ranges".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark_groups.errors import SinkError, SparkGroupsError
from spark_groups.offsets import BatchOffset, Handover, OffsetRange, Pipeline, TopicPartition
from spark_groups.secrets import scrub
from spark_groups.storage.checkpoint import kafka_group_offset, offset_log_path
from spark_groups.storage.files import location
from spark_groups.storage.replays import read_notice


@dataclass(frozen=True)
class BatchPlan:
    """The Kafka offset ranges of one Spark micro-batch (``batch_id``), one per partition,
    and the :class:`~spark_groups.offsets.Handover` of each range that starts where another
    consumer of the group committed (``outside``), the claim token each partition was
    read under (``claims``, ``spark_groups.sink.claim_tokens``), and the group and table of the
    source that planned it (``pipeline``; None in offsets that do not record them), and the
    sources' offsets as logged (``offsets``, by which ``spark_groups.sink.strategy`` chooses
    the batch's commit; a ``kafka-share`` batch has no ranges)."""

    batch_id: int
    ranges: Mapping[TopicPartition, OffsetRange] = field(default_factory=dict)
    outside: Mapping[TopicPartition, Handover] = field(default_factory=dict)
    claims: Mapping[TopicPartition, int] = field(default_factory=dict)
    pipeline: Pipeline | None = None
    offsets: tuple[BatchOffset, ...] = field(default=(), compare=False)

    @classmethod
    def of(
        cls,
        batch_id: int,
        ranges: list[OffsetRange] | tuple[OffsetRange, ...],
        outside: list[Handover] | tuple[Handover, ...] = (),
        claims: Mapping[TopicPartition, int] | None = None,
        pipeline: Pipeline | None = None,
        offsets: tuple[BatchOffset, ...] = (),
    ) -> BatchPlan:
        """A plan from a list of ranges (one per partition), handovers and claims."""
        by_tp: dict[TopicPartition, OffsetRange] = {}
        for r in ranges:
            if r.topic_partition in by_tp:
                raise SinkError(f"batch {batch_id}: partition {r.topic_partition} planned twice")
            by_tp[r.topic_partition] = r
        handed = {h.topic_partition: h for h in outside}
        kept = {tp: t for tp, t in (claims or {}).items() if tp in by_tp}
        return cls(batch_id, by_tp, handed, kept, pipeline, offsets)


def parse_offset_log(
    text: str,
    batch_id: int,
    where: str = "the offset log",
    as_read: Callable[[BatchOffset], BatchOffset | None] | None = None,
) -> BatchPlan:
    """The plan of ``batch_id`` from the text of its offset-log file. ``as_read`` gives,
    for a logged offset the source replayed, what it read instead (its replay notice)."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise SinkError(f"{where}: not a Spark offset log file (it starts with {lines[:1]!r})")
    ranges: list[OffsetRange] = []
    outside: list[Handover] = []
    claims: dict[TopicPartition, int] = {}
    logged: list[BatchOffset] = []
    for line in lines[2:]:
        value = kafka_group_offset(line)
        if value is None:
            continue
        try:
            offset = BatchOffset.from_json(value)
        except SparkGroupsError as exc:
            raise SinkError(f"{where}: unreadable kafka-group offset: {exc}") from exc
        logged.append(offset)
        if as_read is not None:
            offset = as_read(offset) or offset
        ranges.extend(offset.ranges)
        outside.extend(offset.outside)
        claims.update(offset.claim_map())
    if not logged:
        raise SinkError(
            f"{where}: batch {batch_id} has no kafka-group source offset: the delta-group "
            "sink only takes queries that read a kafka-group source"
        )
    pipeline = pipeline_of([o.pipeline for o in logged], batch_id)
    if len({o.share for o in logged}) > 1:
        raise SinkError(
            f"{where}: batch {batch_id} reads a kafka-share and a kafka-group source: a "
            "delta-group sink writes one of them per query (a share group's records carry no "
            "offset ranges to fence with); write each through a query of its own"
        )
    return BatchPlan.of(batch_id, ranges, outside, claims, pipeline, tuple(logged))


def pipeline_of(pipelines: list[Pipeline | None], batch: int) -> Pipeline | None:
    """The one pipeline of a batch's ``kafka-group`` offsets (None when none records one).
    Raises :class:`~spark_groups.errors.SinkError` for sources of different groups or
    tables: one delta-group sink writes one group's partitions into one table."""
    known = {p for p in pipelines if p is not None}
    if len(known) > 1:
        shown = "; ".join(f"group {p.group}, sink.table {p.sink}" for p in sorted(known, key=str))
        raise SinkError(
            f"Spark batch {batch} reads kafka-group sources of different groups or tables "
            f"({shown}): a delta-group sink writes one group into one table. Give the sources "
            "one group.id and sink.table, or write each through a query of its own"
        )
    return next(iter(known), None)


def read_batch_plan(
    checkpoint: str,
    batch_id: int,
    storage_options: Mapping[str, str] | None = None,
    group_id: str | None = None,
) -> BatchPlan:
    """Read the plan of Spark batch ``batch_id`` from the query's ``checkpoint`` (on an
    object store with ``storage_options``, the sink's ``storage.*`` options). With
    ``group_id``, a batch the source replayed is planned as the source read it (its replay
    notice, ``spark_groups.storage.replays``), not as logged.

    Raises :class:`~spark_groups.errors.SinkError` when the file is missing (a wrong
    ``checkpointLocation`` option), cannot be read, or holds no kafka-group offset.
    """
    where = offset_log_path(checkpoint, batch_id)
    try:
        loc = location(where, storage_options, option="checkpointLocation")
        if not loc.exists(loc.path):
            raise SinkError(
                f"{where} does not exist: is checkpointLocation {checkpoint!r} this query's "
                "checkpoint? (the sink reads each batch's planned offsets there)"
            )
        text = loc.read_text(loc.path)
    except SinkError:
        raise
    except Exception as exc:
        detail = scrub(f"{type(exc).__name__}: {exc}", storage_options or {})
        raise SinkError(f"{where}: cannot read it: {detail}") from exc
    if group_id is None:
        return parse_offset_log(text, batch_id, where)

    def as_read(logged: BatchOffset) -> BatchOffset | None:
        try:
            return read_notice(checkpoint, group_id, logged, storage_options)
        except Exception as exc:
            detail = scrub(f"{type(exc).__name__}: {exc}", storage_options or {})
            raise SinkError(
                f"batch {batch_id}: cannot read the source's replay notice of batch "
                f"{logged.batch} in {checkpoint!r}: {detail}"
            ) from exc

    return parse_offset_log(text, batch_id, where, as_read)
