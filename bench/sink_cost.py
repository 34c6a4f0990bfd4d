"""Where a record's time goes in the delta-group sink, piece by piece (issue 34).

    PYTHONPATH=. python -m bench.sink_cost [--records 2000000] [--profile]

Without Spark, in this process, over Arrow batches shaped as a kafka-group task hands them to
the sink (``value``, ``topic``, ``partition``, ``offset``; 10,000 rows a batch, one partition
per task as section 1's tasks read them, values of ``--size`` bytes, distinct per record):

* ``arrow``: building the batches (not the sink's cost; the floor of the loop);
* ``writer``: :class:`spark_groups.sink.writer.TaskFileWriter` writing them as one task does
  (schema check, split by partition, Parquet with the sink's compression, statistics);
* ``parquet``: pyarrow's ``ParquetWriter`` alone on the same batches, with the same
  compression: what the writer adds on top of Parquet encoding;
* ``commit``: :class:`spark_groups.sink.commit.DeltaSink` committing the files of one batch
  per ``--batches`` (the driver's part, per record).

Prints µs per record for each, the files' sizes, and with ``--profile`` the writer's profile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_groups.sink.writer import TaskFileWriter

SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)
ROWS_PER_BATCH = 10_000


def batches(records: int, size: int, partition: int = 0) -> Iterator[pa.RecordBatch]:
    """``records`` rows of one partition in batches of 10,000, values distinct per record."""
    base = os.urandom(size)
    for start in range(0, records, ROWS_PER_BATCH):
        n = min(ROWS_PER_BATCH, records - start)
        values = [i.to_bytes(8, "little") + base[8:] for i in range(start, start + n)]
        yield pa.record_batch(
            [
                pa.array(values, pa.binary()),
                pa.array(["bench"] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(range(start, start + n), pa.int64()),
            ],
            schema=SCHEMA,
        )


def timed(label: str, fn, records: int) -> float:  # type: ignore[no-untyped-def]
    """Run ``fn``; print and return µs per record."""
    started = time.perf_counter()
    fn()
    us = (time.perf_counter() - started) / records * 1e6
    print(f"{label:<44} {us:6.3f} µs/record")
    return us


def main(argv: list[str] | None = None) -> int:
    """Measure each piece (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--compression", default="snappy")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--spark", action="store_true", help="the sides in Spark (see below)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.spark:
        sides = spark_sides(args.records, args.size, 4, args.rounds)
        for sink, per in sides.items():
            print(f"{sink:<14} best {min(per):.3f} µs/record")
        return 0
    n = args.records
    prebuilt = list(batches(n, args.size))
    timed("arrow: build the batches", lambda: list(batches(n, args.size)), n)
    work = Path(tempfile.mkdtemp(prefix="sink-cost-"))
    try:
        table = work / "table"
        table.mkdir()

        def parquet_alone() -> None:
            with pq.ParquetWriter(
                str(work / "alone.parquet"), SCHEMA, compression=args.compression
            ) as w:
                for b in prebuilt:
                    w.write_batch(b)

        def writer() -> None:
            files = TaskFileWriter(str(table), SCHEMA, compression=args.compression).write(
                iter(prebuilt)
            )
            print(f"  {len(files)} file(s), {sum(f.size for f in files) / n:.1f} B per record")

        timed(f"parquet: ParquetWriter alone ({args.compression})", parquet_alone, n)
        print(f"  {os.path.getsize(work / 'alone.parquet') / n:.1f} B per record")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            timed("writer: TaskFileWriter (profiled)", writer, n)
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
            print(out.getvalue())
        else:
            timed("writer: TaskFileWriter", writer, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# --- In Spark: what the transfer to the sink's Python workers costs, beside the sink ---

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )

    class _Discarded(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class DiscardArrowWriter(DataSourceStreamArrowWriter):
        """A Python stream writer that takes a task's Arrow batches and drops them: what
        moving the rows from Spark's JVM to a Python sink costs, with no sink work."""

        def write(self, iterator: Iterator[pa.RecordBatch]) -> _Discarded:
            return _Discarded(sum(b.num_rows for b in iterator))

        def commit(self, messages: list, batchId: int) -> None:
            """Nothing to commit."""

        def abort(self, messages: list, batchId: int) -> None:
            """Nothing to abort."""

    class DiscardDataSource(DataSource):
        """``format("discard-arrow")``: :class:`DiscardArrowWriter`."""

        @classmethod
        def name(cls) -> str:
            return "discard-arrow"

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return DiscardArrowWriter()

except ImportError:  # pyspark 4.0: no Arrow stream writer
    DiscardDataSource = None  # type: ignore[assignment,misc]


def spark_sides(records: int, size: int, partitions: int, rounds: int) -> dict[str, list[float]]:
    """µs per record of kafka-group -> noop, -> discard-arrow, -> delta-group, in one warm
    session on a broker of its own, sides alternating."""
    from bench import throughput
    from bench.common import create_topics, produce
    from bench.run import spark_session
    from spark_groups.tools.kafka_broker import KafkaBroker

    out: dict[str, list[float]] = {"noop": [], "discard-arrow": [], "delta-group": []}
    with KafkaBroker() as broker:
        servers = broker.bootstrap_servers
        spark = spark_session()
        spark.dataSource.register(DiscardDataSource)
        topics = create_topics(servers, partitions)
        produce(servers, topics, partitions, records, size)
        warm = create_topics(servers, partitions, prefix="warm")
        produce(servers, warm, partitions, 20_000, size)
        scratch = Path(tempfile.mkdtemp(prefix="sink-cost-spark-"))
        for round_ in range(rounds + 1):  # round 0 warms up
            for sink in out:
                used = warm if round_ == 0 else topics
                if sink == "discard-arrow":
                    run = _discard_run(spark, servers, used, scratch)
                else:
                    run = throughput.spark_read(spark, servers, used, sink, scratch)
                if round_ > 0:
                    out[sink].append(run.seconds / run.rows * 1e6)
                    print(f"{sink:<14} {out[sink][-1]:.3f} µs/record ({run.rows:,} rows)")
        spark.stop()
    return out


def _discard_run(spark, servers, topics, scratch):  # type: ignore[no-untyped-def]
    """kafka-group -> discard-arrow with the columns the delta-group run writes."""
    from bench import throughput
    from bench.common import unique

    group = unique("bench-discard")
    opts = throughput.source_options(servers, topics, group)
    query = (
        spark.readStream.format("kafka-group")
        .options(**opts)
        .load()
        .selectExpr("value", "topic", "partition", "offset")
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(scratch / group))
        .format("discard-arrow")
        .start()
    )
    query.awaitTermination(900)
    rows, seconds, excluded = throughput._warm_time(query)
    query.stop()
    return throughput.Run(rows, seconds, excluded)


if __name__ == "__main__":
    raise SystemExit(main())
