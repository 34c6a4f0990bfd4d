"""Where a record's time goes in the delta-group sink, piece by piece.

    python -m bench sink_cost --write-docs

In one warm ``local[2]`` session (``--records`` x ``--size`` B, 4 partitions, best of
``--rounds``, alternating): kafka-group -> ``noop``, -> ``discard-arrow``
(:class:`DiscardArrowWriter`) and -> ``delta-group``; then, without Spark, the sink's
``TaskFileWriter`` and pyarrow's ``ParquetWriter`` alone on 10,000-row batches.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness.kafka import broker, produce
from bench.harness.spark import spark_read, spark_session
from spark_groups.sink.writer import TaskFileWriter

from support.broker import create_topic

#: The section of docs/benchmarks.md this scenario writes.
SECTION = "sink-cost"

SCHEMA = pa.schema([("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
                    ("offset", pa.int64())])  # fmt: skip
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


def timed(fn: Callable[[], object], records: int) -> float:
    """Run ``fn``; return µs per record."""
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) / records * 1e6


def in_process(records: int, size: int, compression: str) -> dict[str, Any]:
    """The writer's pieces without Spark (see the module doc): µs per record, bytes."""
    prebuilt = list(batches(records, size))
    out: dict[str, Any] = {"arrow": timed(lambda: list(batches(records, size)), records)}
    work = Path(tempfile.mkdtemp(prefix="sink-cost-"))
    try:
        table = work / "table"
        table.mkdir()

        def parquet_alone() -> None:
            with pq.ParquetWriter(str(work / "p.parquet"), SCHEMA, compression=compression) as w:
                for b in prebuilt:
                    w.write_batch(b)

        files: list = []

        def writer() -> None:
            files.extend(
                TaskFileWriter(str(table), SCHEMA, compression=compression).write(iter(prebuilt))
            )

        out["parquet"] = timed(parquet_alone, records)
        out["writer"] = timed(writer, records)
        out["bytes_per_record"] = sum(f.size for f in files) / records
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    ip, sides = results["in_process"], results["spark"]
    best = {k: min(v) for k, v in sides.items()}
    transfer = best["discard-arrow"] - best["noop"]
    sink = best["delta-group"] - best["noop"]
    lines = [
        "## The delta-group sink's cost, piece by piece",
        "",
        f"Command: `{results['command']}`. Run on {results['when']}. In one warm `local[2]` "
        f"session on its own Apache Kafka broker: {results['records']:,} records x "
        f"{results['size']} B in 4 partitions, kafka-group -> `noop`, -> `discard-arrow` (a "
        "Python stream writer that takes each task's Arrow batches and drops them: Spark moving "
        "the rows to a Python sink, no sink work) and -> `delta-group` (the same columns as "
        f"section 1's run: value, topic, partition, offset); best of {len(sides['noop'])} "
        "rounds, sides alternating. Then the sink's Python writer alone, in one process without "
        "Spark, on batches of 10,000 rows of one partition.",
        "",
        "| piece | µs per record |",
        "| --- | ---: |",
        f"| kafka-group -> `noop` (reading, Arrow into Spark's rows) | {best['noop']:.2f} |",
        f"| kafka-group -> `discard-arrow` | {best['discard-arrow']:.2f} |",
        f"| kafka-group -> `delta-group` | {best['delta-group']:.2f} |",
        f"| **the sink's cost** (`delta-group` less `noop`) | **{sink:.2f}** |",
        f"| of it, Spark moving rows to a Python sink (`discard-arrow` less `noop`) | "
        f"{transfer:.2f} |",
        f"| the sink's writer alone, no Spark (`TaskFileWriter`: split, Parquet, stats) | "
        f"{ip['writer']:.2f} |",
        f"| of it, pyarrow's `ParquetWriter` alone ({results['compression']}) | "
        f"{ip['parquet']:.2f} |",
        "",
        f"- The sink costs what Spark charges any Python sink to receive the rows: "
        f"`delta-group` is within {abs(sink - transfer):.2f} µs of dropping them unwritten "
        f"({sink:.2f} vs {transfer:.2f} µs). The writing itself ({ip['writer']:.2f} µs per "
        f"record, {ip['parquet'] / ip['writer']:.0%} of it Parquet encoding) runs in the "
        "Python worker while the JVM converts the next rows to Arrow, on the other core, "
        "so it adds next to nothing to the wall time. The commit is one Delta commit per "
        "batch (section 1's run is one batch): nothing per record.",
        "- What is left is on Spark's side of the Python data source API: rows -> Arrow in "
        "the JVM, a socket, Arrow -> Python. Spark's own Delta sink writes Parquet from its "
        "rows in the JVM and pays none of it. No setting of this sink moves that cost; a "
        "smaller row does (every column crosses: select only the columns the table needs).",
        f"- Files: {ip['bytes_per_record']:.1f} B per record in the writer's run "
        "(this scenario's values differ in 8 of their bytes, so Parquet's dictionary and "
        "snappy shrink them; real values cost more bytes, not more calls).",
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--compression", default="snappy")
    parser.add_argument("--rounds", type=int, default=3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure each piece (see the module doc)."""
    return {"records": args.records, "size": args.size, "compression": args.compression,
            "spark": spark_sides(args.records, args.size, 4, args.rounds),
            "in_process": in_process(args.records, args.size, args.compression)}  # fmt: skip


# --- In Spark: what the transfer to the sink's Python workers costs, beside the sink ---

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

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
    out: dict[str, list[float]] = {"noop": [], "discard-arrow": [], "delta-group": []}
    with broker("kafka") as kafka:
        servers = kafka.bootstrap_servers
        spark = spark_session()
        spark.dataSource.register(DiscardDataSource)
        topics = [create_topic(servers, partitions, "bench")]
        produce(servers, topics, partitions, records, size)
        warm = [create_topic(servers, partitions, "warm")]
        produce(servers, warm, partitions, 20_000, size)
        scratch = Path(tempfile.mkdtemp(prefix="sink-cost-spark-"))
        try:
            for round_ in range(rounds + 1):  # round 0 warms up
                for sink in out:
                    run = spark_read(spark, servers, warm if round_ == 0 else topics, sink, scratch)
                    if round_ > 0:
                        out[sink].append(run.seconds / run.rows * 1e6)
                        if run.rows != records:
                            raise RuntimeError(f"{sink} read {run.rows:,} of {records:,} records")
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    return out
