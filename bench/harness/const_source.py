"""Where Spark's Python data source path tops out: sources that read no Kafka.

:func:`const_arrow_rate` (a batch source yielding one prebuilt Arrow batch again and again:
only Spark's plumbing) and :class:`ConstArrowStreamSource` (the same as one streaming
micro-batch: the floor of a whole run of any Python streaming source).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from spark_groups.read.schema import spark_ddl
from spark_groups.spark.compat import SupportsTriggerAvailableNow

FORMAT = STREAM_FORMAT = "bench-const-arrow"


def _const_batches(rows: int, batch: int, size: int) -> Iterator[Any]:
    """``rows`` rows of the kafka-group schema (values of ``size`` bytes), as one prebuilt
    Arrow batch of ``batch`` rows yielded again and again (the last one sliced)."""
    import numpy as np
    import pyarrow as pa

    from spark_groups.read.schema import arrow_schema

    n = batch
    ts = pa.timestamp("us", tz="UTC")
    prebuilt = pa.RecordBatch.from_arrays(
        [
            pa.array([b"123456"] * n, pa.binary()),
            pa.array([b"v" * size] * n, pa.binary()),
            pa.array(["topic"] * n, pa.string()),
            pa.array(np.zeros(n, np.int32), pa.int32()),
            pa.array(np.arange(n, dtype=np.int64), pa.int64()),
            pa.array(np.zeros(n, np.int64), pa.int64()).cast(ts),
            pa.array(np.zeros(n, np.int32), pa.int32()),
        ],
        schema=arrow_schema(False),
    )
    left = rows
    while left > 0:
        yield prebuilt if left >= n else prebuilt.slice(0, left)
        left -= n


class _ConstRows:
    """What both constant readers share: ``rows`` rows in ``partitions`` tasks, each task
    yielding its share as :func:`_const_batches` (the first ``rows % partitions`` tasks one
    row more, so the tasks hold exactly ``rows``)."""

    def __init__(self, rows: int, partitions: int, batch: int, size: int) -> None:
        self.rows, self.parts, self.batch, self.size = rows, partitions, batch, size

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """One task's share of the rows."""
        share = self.rows // self.parts + (partition.value < self.rows % self.parts)
        return _const_batches(share, self.batch, self.size)


class _ConstReader(_ConstRows, DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]


class _ConstStreamReader(_ConstRows, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch (offset 0 -> 1) of ``rows`` rows in ``partitions`` tasks."""

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to pin: the one batch is all there is."""

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [] if start == end else [InputPartition(i) for i in range(self.parts)]

    def commit(self, end: dict) -> None:
        """Nothing to commit."""


class ConstArrowSource(DataSource):
    """``spark.read`` and ``spark.readStream`` ``.format("bench-const-arrow")``: rows,
    partitions, size and batch (10,000) options; the batch job yields the same Arrow batch
    until ``rows`` rows are out, the stream one micro-batch of them."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """The kafka-group schema without headers."""
        return spark_ddl(False)

    def _rows(self) -> tuple[int, int, int, int]:
        o = self.options
        return int(o["rows"]), int(o["partitions"]), int(o.get("batch", 10000)), int(o["size"])

    def reader(self, schema: Any) -> DataSourceReader:
        """The batch job's reader."""
        return _ConstReader(*self._rows())

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """One micro-batch of ``rows`` rows."""
        return _ConstStreamReader(*self._rows())


#: The same source under the name the streaming sides use.
ConstArrowStreamSource = ConstArrowSource


def const_arrow_rate(spark: Any, rows: int, partitions: int, size: int) -> tuple[int, float]:
    """(rows, seconds) of a warm batch job from the constant source into ``noop``."""
    spark.dataSource.register(ConstArrowSource)
    df = spark.read.format(FORMAT).options(rows=rows, partitions=partitions, size=size).load()
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return rows, time.perf_counter() - started
