"""Where Spark's Python data source path tops out, and the executor read path alone.

* :func:`const_arrow_rate`: a Python data source whose ``read()`` yields one prebuilt Arrow
  batch (the ``kafka-group`` schema, 100 B values) again and again: no Kafka and no
  conversion, only Spark's plumbing (Python worker -> Arrow IPC -> JVM rows -> noop). No
  source built on Spark's Python data source API can be faster than this.
* :func:`read_range_rate`: ``spark_groups.read.reader.read_range`` over every partition, one after
  the other, in this process: the executor read path without Spark.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spark_groups.read.schema import spark_ddl

FORMAT = "bench-const-arrow"


class _ConstReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, batch: int, size: int) -> None:
        self.rows, self.parts, self.batch, self.size = rows, partitions, batch, size

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from spark_groups.read.schema import arrow_schema

        n = self.batch
        ts = pa.timestamp("us", tz="UTC")
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([b"123456"] * n, pa.binary()),
                pa.array([b"v" * self.size] * n, pa.binary()),
                pa.array(["topic"] * n, pa.string()),
                pa.array(np.zeros(n, np.int32), pa.int32()),
                pa.array(np.arange(n, dtype=np.int64), pa.int64()),
                pa.array(np.zeros(n, np.int64), pa.int64()).cast(ts),
                pa.array(np.zeros(n, np.int32), pa.int32()),
            ],
            schema=arrow_schema(False),
        )
        left = self.rows // self.parts
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n


class ConstArrowSource(DataSource):
    """``spark.read.format("bench-const-arrow")``: rows, partitions, batch, size options."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """The kafka-group schema without headers."""
        return spark_ddl(False)

    def reader(self, schema: Any) -> DataSourceReader:
        """Yields the same Arrow batch until ``rows`` rows are out."""
        o = self.options
        return _ConstReader(
            int(o["rows"]), int(o["partitions"]), int(o.get("batch", 10000)), int(o["size"])
        )


def const_arrow_rate(spark: Any, rows: int, partitions: int, size: int) -> tuple[int, float]:
    """(rows, seconds) of a warm batch job from the constant source into ``noop``."""
    spark.dataSource.register(ConstArrowSource)
    df = (
        spark.read.format(FORMAT)
        .option("rows", rows)
        .option("partitions", partitions)
        .option("size", size)
        .load()
    )
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    took = time.perf_counter() - started
    return rows // partitions * partitions, took


def read_range_rate(
    servers: str, topics: Sequence[str], partitions: int, ends: dict[tuple[str, int], int]
) -> tuple[int, float]:
    """(rows, seconds) of read_range over ``[0, end)`` of every partition, sequentially."""
    from spark_groups.offsets import OffsetRange
    from spark_groups.read.reader import close_cached_consumers, read_range

    config = {"bootstrap.servers": servers}
    rows = 0
    started = time.perf_counter()
    for topic in topics:
        for p in range(partitions):
            rng = OffsetRange(topic, p, 0, ends[(topic, p)])
            for batch in read_range(config, rng, include_headers=False):
                rows += batch.num_rows
    took = time.perf_counter() - started
    close_cached_consumers()
    return rows, took
