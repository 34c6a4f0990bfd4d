"""Say it once (issue 43): a kafka-group -> delta-group pipeline names its table and group
once, on the source, and a source and sink that disagree fail at the first batch with an
error naming both values, before anything is written or committed. Real Spark (local[2]),
Apache Kafka, Trigger.AvailableNow, a fresh checkpoint each time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from support.broker import committed_offsets, log_end_offsets, produce_ids, unique, wait_until
from support.options import group_options
from support.spark import ended_with, ids_source, needs_available_now
from support.tables import table_ids

RECORDS, PARTITIONS = 2_000, 2


def run(
    df: Any, checkpoint: Path, path: Path | None = None, fmt: str = "delta-group", **options: str
) -> BaseException | None:
    """One AvailableNow query into ``fmt`` until it ends; the error it failed with, or None."""
    writer = (
        df.writeStream.format(fmt)
        .option("checkpointLocation", str(checkpoint))
        .options(**options)
        .trigger(availableNow=True)
    )
    return ended_with(lambda: writer.start(str(path)) if path is not None else writer.start())


def topic_with_records(bootstrap_servers: str, make_topic: Any, records: int = RECORDS) -> str:
    topic = make_topic(PARTITIONS)
    produce_ids(bootstrap_servers, topic, range(records), PARTITIONS)
    return topic


def nothing_written(*tables: Path) -> bool:
    return not any(t.exists() and any(t.rglob("*")) for t in tables)


def test_said_once_the_sink_takes_the_table_and_the_group_from_the_source(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = topic_with_records(bootstrap_servers, make_topic)
    group, table = unique("once"), tmp_path / "table"
    opts = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(table)})
    # The sink is given neither a path nor a group.id.
    assert run(ids_source(spark, opts, tmp_path / "cp"), tmp_path / "cp") is None
    assert Counter(table_ids(table)) == Counter(range(RECORDS))
    ends = log_end_offsets(bootstrap_servers, topic, PARTITIONS)
    # Before Spark 4.2 the run's one batch is committed as the query ends, by the reader
    # process, a moment after the query returned (docs/spark-versions.md): poll.
    wait_until(lambda: committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == ends)


def test_a_sink_path_other_than_the_sources_sink_table_fails_before_anything_is_written(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = topic_with_records(bootstrap_servers, make_topic)
    group, a, b = unique("path"), tmp_path / "a", tmp_path / "b"
    opts = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(a)})
    error = run(ids_source(spark, opts, tmp_path / "cp"), tmp_path / "cp", b, **{"group.id": group})
    assert error is not None
    text = str(error)
    assert "PipelineMismatchError" in text and "option 'path'" in text
    assert str(a) in text and str(b) in text
    assert nothing_written(a, b)
    assert committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == {}


def test_a_sink_group_other_than_the_sources_fails_before_anything_is_written(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = topic_with_records(bootstrap_servers, make_topic)
    g2, g3, table = unique("g2"), unique("g3"), tmp_path / "table"
    opts = group_options(bootstrap_servers, topic, g2, None, **{"sink.table": str(table)})
    error = run(
        ids_source(spark, opts, tmp_path / "cp"), tmp_path / "cp", table, **{"group.id": g3}
    )
    assert error is not None
    text = str(error)
    assert "PipelineMismatchError" in text and "option 'group.id'" in text
    assert repr(g2) in text and repr(g3) in text
    assert nothing_written(table)
    for group in (g2, g3):
        assert committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == {}


def test_a_delta_group_sink_fed_by_another_source_fails_before_anything_is_written(
    spark, tmp_path: Path
) -> None:
    files, table = tmp_path / "in", tmp_path / "table"
    files.mkdir()
    rows = pa.table(
        {
            "id": pa.array(range(10), pa.int64()),
            "topic": ["t"] * 10,
            "partition": pa.array([0] * 10, pa.int32()),
            "offset": pa.array(range(10), pa.int64()),
        }
    )
    pq.write_table(rows, files / "part-0.parquet")
    df = spark.readStream.schema(spark.read.parquet(str(files)).schema).parquet(str(files))
    error = run(df, tmp_path / "cp", table, **{"group.id": "g"})
    assert error is not None
    assert "only takes queries that read a kafka-group source" in str(error)
    assert nothing_written(table)


def test_two_queries_of_one_group_writing_two_tables_fail_naming_both(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = topic_with_records(bootstrap_servers, make_topic, 200)
    group, a, b = unique("two"), tmp_path / "a", tmp_path / "b"
    first = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(a)})
    assert run(ids_source(spark, first, tmp_path / "cp-a"), tmp_path / "cp-a") is None
    ends = log_end_offsets(bootstrap_servers, topic, PARTITIONS)  # 200 records
    wait_until(lambda: committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == ends)
    committed = ends
    produce_ids(bootstrap_servers, topic, range(200, 300), PARTITIONS)
    second = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(b)})
    error = run(ids_source(spark, second, tmp_path / "cp-b"), tmp_path / "cp-b")
    assert error is not None
    text = str(error)
    assert "GroupTableMismatchError" in text and "One group feeds one delta-group table" in text
    assert str(a) in text and str(b) in text
    assert nothing_written(b)
    assert committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == committed
    assert Counter(table_ids(a)) == Counter(range(200))


@needs_available_now  # before 4.2 AvailableNow is one batch, never handed back to the source
def test_sink_table_with_a_query_that_writes_elsewhere_stops_before_committing(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = topic_with_records(bootstrap_servers, make_topic, 200)
    group, table = unique("noop"), tmp_path / "table"
    opts = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(table)})
    error = run(ids_source(spark, opts, tmp_path / "cp"), tmp_path / "cp", fmt="noop")
    assert error is not None
    text = str(error)
    assert "SinkNotWrittenError" in text and "option 'sink.table'" in text and str(table) in text
    assert committed_offsets(bootstrap_servers, group, topic, PARTITIONS) == {}
