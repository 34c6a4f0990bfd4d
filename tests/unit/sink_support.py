"""Helpers of the sink unit tests: write a batch's files as executors would, read a table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from spark_groups.offsets import OffsetRange
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.writer import DataFile, KafkaRows, TaskFileWriter

#: The query schema of most tests: the source's Kafka columns and a payload.
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)
TOPIC = "orders"


def rows(partition: int, offsets: Iterable[int], topic: str = TOPIC) -> pa.RecordBatch:
    """Rows of one Kafka partition; ``id`` is ``partition * 1_000_000 + offset``."""
    offs = list(offsets)
    return pa.record_batch(
        [
            pa.array([partition * 1_000_000 + o for o in offs], pa.int64()),
            pa.array([topic] * len(offs), pa.string()),
            pa.array([partition] * len(offs), pa.int32()),
            pa.array(offs, pa.int64()),
        ],
        schema=SCHEMA,
    )


def data_file(
    partition: int, first: int, last: int, topic: str = TOPIC, *more: tuple[int, int, int]
) -> DataFile:
    """A :class:`DataFile` of rows ``first..last`` of one partition (and of each
    ``(partition, first, last)`` in ``more``), never written (for the parts of the sink that
    only look at files' offsets)."""
    spans = [(partition, first, last), *more]
    return DataFile(
        path=f"part-{topic}-{partition}-{first}.parquet",
        size=1,
        rows=sum(hi - lo + 1 for _, lo, hi in spans),
        kafka=tuple(KafkaRows(topic, p, hi - lo + 1, lo, hi) for p, lo, hi in sorted(spans)),
    )


def write_task(
    table: Path,
    batches: Sequence[pa.RecordBatch],
    schema: pa.Schema = SCHEMA,
    partition_by: Sequence[str] = (),
) -> list[DataFile]:
    """Write one task's rows as the executor side does."""
    return TaskFileWriter(str(table), schema, partition_by).write(batches)


def plan(batch_id: int, ranges: dict[int, tuple[int, int]], topic: str = TOPIC) -> BatchPlan:
    """A batch plan: ``{partition: (from, until)}`` of ``topic``."""
    return BatchPlan.of(batch_id, [OffsetRange(topic, p, lo, hi) for p, (lo, hi) in ranges.items()])


def sql(table: Path, text: str) -> list[dict]:
    """Run SQL against the newest version of the table (registered as ``t``)."""
    query = QueryBuilder().register("t", DeltaTable(str(table)))
    return pa.table(query.execute(text).read_all()).to_pylist()


def offsets_in(table: Path, partition: int = 0) -> list[int]:
    """Every offset of ``partition`` in the table, sorted (duplicates kept)."""
    got = sql(table, f'SELECT "offset" FROM t WHERE "partition" = {partition}')
    return sorted(r["offset"] for r in got)


def parquet_files(table: Path) -> set[str]:
    """Every Parquet file below the table's directory (relative paths)."""
    return {str(p.relative_to(table)) for p in table.rglob("*.parquet")}
