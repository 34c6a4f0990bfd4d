"""Small files in the sink table: how many an hour, what they cost to read, what optimize does.

    python -m bench compaction --write-docs [--shapes 3:3:1200:60,1000:10:36:20]

A shape is ``partitions:trigger_s:batches:rows``: a table written the way the ``delta-group``
sink writes it, one Parquet file per Kafka partition per batch and one Delta commit per batch
with a transaction id per partition, for ``batches`` batches of ``rows`` rows per partition
(the sink's columns: key, value of 100 bytes, topic, partition, offset, timestamp,
timestampType). For each shape it reports the files a running query makes in an hour at
that trigger, then the time to read the whole table (a delta-rs ``COUNT``/``SUM`` scan,
best of three, and the time to open the table) before and after ``spark-groups optimize``
(``spark_groups.sink.maintenance.optimize``), and how long the compaction took. One round
per shape; no broker, no Spark.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SECTION = "compaction"
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)


def write_like_the_sink(path: Path, partitions: int, batches: int, rows: int) -> None:
    """A table of ``batches`` commits, each adding one file per partition with a txn id."""
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.transaction import AddAction

    DeltaTable.create(str(path), SCHEMA)
    table = DeltaTable(str(path))
    value = os.urandom(100)
    now = datetime.now(UTC)
    for batch in range(batches):
        adds, txns = [], []
        for p in range(partitions):
            first = batch * rows
            data = pa.table(
                {
                    "key": [b"k"] * rows,
                    "value": [value] * rows,
                    "topic": ["orders"] * rows,
                    "partition": pa.array([p] * rows, pa.int32()),
                    "offset": pa.array(range(first, first + rows), pa.int64()),
                    "timestamp": pa.array([now] * rows, SCHEMA.field("timestamp").type),
                    "timestampType": pa.array([0] * rows, pa.int32()),
                },
                schema=SCHEMA,
            )
            name = f"part-{batch:05d}-{p:04d}-{uuid.uuid4().hex}.parquet"
            pq.write_table(data, path / name)
            size = (path / name).stat().st_size
            adds.append(AddAction(name, size, {}, int(time.time() * 1000), True, None))
            txns.append(Transaction(f"bench:orders:{p}", first + rows))
        table.create_write_transaction(
            adds,
            "append",
            table.schema(),
            commit_properties=CommitProperties(app_transactions=txns),
        )
        table.update_incremental()


def read_seconds(path: Path) -> tuple[float, float, int]:
    """(open s, best-of-three full scan s, rows) of the table at ``path``."""
    from deltalake import DeltaTable, QueryBuilder

    started = time.perf_counter()
    table = DeltaTable(str(path))
    opened = time.perf_counter() - started
    best, rows = float("inf"), 0
    for _ in range(3):
        started = time.perf_counter()
        got = (
            QueryBuilder()
            .register("t", table)
            .execute('SELECT COUNT(*) AS n, SUM("offset") AS s FROM t')
            .read_all()
        )
        best = min(best, time.perf_counter() - started)
        rows = int(got.column("n")[0].as_py())
    return opened, best, rows


def one_shape(partitions: int, trigger_s: float, batches: int, rows: int, scratch: Path) -> dict:
    """Measure one shape (see the module doc)."""
    from deltalake import DeltaTable

    from spark_groups.sink.maintenance import optimize
    from spark_groups.storage.maintenance import active_files

    path = scratch / f"t{partitions}"
    path.mkdir()
    started = time.perf_counter()
    write_like_the_sink(path, partitions, batches, rows)
    written = time.perf_counter() - started
    files_before = active_files(DeltaTable(str(path))).files
    open_before, scan_before, rows_before = read_seconds(path)
    started = time.perf_counter()
    result = optimize(str(path), None, "bench")
    took = time.perf_counter() - started
    open_after, scan_after, rows_after = read_seconds(path)
    assert rows_before == rows_after == partitions * batches * rows
    return {
        "shape": f"{partitions} partitions, {trigger_s:g} s trigger, {batches} batches "
        f"of {rows} rows per partition",
        "files_per_hour": int(partitions * 3600 / trigger_s),
        "files_before": files_before,
        "files_after": result.after.files,
        "open": (open_before, open_after),
        "scan": (scan_before, scan_after),
        "optimize_s": took,
        "write_s": written,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--shapes", default="3:3:1200:60,1000:10:36:20")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every shape, in a scratch folder."""
    results = []
    with tempfile.TemporaryDirectory(prefix="compaction-") as scratch:
        for shape in args.shapes.split(","):
            partitions, trigger_s, batches, rows = shape.split(":")
            results.append(
                one_shape(int(partitions), float(trigger_s), int(batches), int(rows), Path(scratch))
            )
            print(results[-1], flush=True)
    return {"shapes": results}


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    lines = [
        "## Compaction",
        "",
        f"`{results['command']}` ({results['when'][:10]}; local disk, delta-rs, no Spark). Tables "
        "written the way the `delta-group` sink writes them: one file per Kafka partition per "
        "batch, one commit per batch with a transaction id per partition.",
        "",
        "| table | files a query makes per hour | active files before / after optimize "
        "| open before / after | full scan before / after | optimize took |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["shapes"]:
        lines.append(
            f"| {r['shape']} | {r['files_per_hour']:,} | {r['files_before']:,} / "
            f"{r['files_after']:,} | {r['open'][0] * 1000:.0f} / {r['open'][1] * 1000:.0f} ms "
            f"| {r['scan'][0] * 1000:.0f} / {r['scan'][1] * 1000:.0f} ms "
            f"| {r['optimize_s']:.1f} s |"
        )
    return "\n".join(lines)
