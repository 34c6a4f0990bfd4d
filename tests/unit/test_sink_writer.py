"""The sink's executor side (Parquet files per Kafka partition), its options and batch plans."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_groups.errors import OptionError, SinkError
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.sink.options import parse_sink_options
from spark_groups.sink.plan import parse_offset_log, read_batch_plan
from spark_groups.sink.writer import (
    TaskFileWriter,
    check_schema,
    escape_path_name,
    partition_value,
    rewrite_from,
)

from sink_support import SCHEMA, TOPIC, parquet_files, rows, write_task

# ---------------------------------------------------------------------- files


def test_one_file_per_kafka_partition_with_offsets_and_stats(tmp_path: Path) -> None:
    table = tmp_path / "t"
    mixed = pa.concat_batches([rows(0, [5, 6]), rows(2, [40]), rows(0, [7])])
    files = write_task(table, [mixed, rows(2, [41, 42])])

    by_tp = {f.topic_partition: f for f in files}
    assert set(by_tp) == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)}
    p0, p2 = by_tp[TopicPartition(TOPIC, 0)], by_tp[TopicPartition(TOPIC, 2)]
    assert (p0.rows, p0.min_offset, p0.max_offset) == (3, 5, 7)
    assert (p2.rows, p2.min_offset, p2.max_offset) == (3, 40, 42)
    assert pq.read_table(table / p0.path).column("offset").to_pylist() == [5, 6, 7]
    assert p0.size == (table / p0.path).stat().st_size
    stats = json.loads(p2.stats)
    assert stats["numRecords"] == 3
    assert stats["minValues"]["offset"] == 40 and stats["maxValues"]["offset"] == 42
    assert stats["nullCount"]["id"] == 0
    assert parquet_files(table) == {p0.path, p2.path}


def test_a_failing_task_deletes_what_it_wrote(tmp_path: Path) -> None:
    table = tmp_path / "t"

    def batches():
        yield rows(0, [1, 2])
        yield rows(1, [1])
        raise RuntimeError("executor lost its input")

    with pytest.raises(RuntimeError, match="executor lost"):
        TaskFileWriter(str(table), SCHEMA).write(batches())
    assert parquet_files(table) == set()


def test_rows_without_kafka_coordinates_are_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    batch = rows(0, [1, 2])
    broken = batch.set_column(3, SCHEMA.field("offset"), pa.array([1, None], pa.int64()))
    with pytest.raises(SinkError, match="null 'offset'"):
        write_task(table, [rows(0, [0]), broken])
    assert parquet_files(table) == set()


def test_a_schema_without_the_source_columns_is_refused() -> None:
    projected = pa.schema([("id", pa.int64()), ("partition", pa.int32())])
    with pytest.raises(SinkError, match="missing: topic, offset"):
        check_schema(projected, ())
    renamed = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int32())])
    with pytest.raises(SinkError, match="column 'offset'"):
        check_schema(renamed, ())
    with pytest.raises(SinkError, match="partition column 'day' is not a column"):
        check_schema(SCHEMA, ("day",))
    with pytest.raises(SinkError, match="string, integer, boolean or date"):
        check_schema(SCHEMA.append(pa.field("x", pa.float64())), ("x",))


def test_partition_values_and_directories_follow_spark() -> None:
    assert partition_value(None) is None and partition_value("") is None
    assert partition_value(True) == "true" and partition_value(7) == "7"
    assert partition_value(dt.date(2026, 11, 2)) == "2026-11-02"
    assert escape_path_name("a b:c/d=e%") == "a b%3Ac%2Fd%3De%25"


def test_rewrite_keeps_only_the_rows_from_an_offset(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (original,) = write_task(table, [rows(0, range(10, 20))])
    rewritten = rewrite_from(str(table), original, 15)
    assert rewritten is not None and rewritten.path != original.path
    assert (rewritten.rows, rewritten.min_offset, rewritten.max_offset) == (5, 15, 19)
    assert pq.read_table(table / rewritten.path).column("offset").to_pylist() == list(range(15, 20))
    assert rewrite_from(str(table), original, 20) is None


# ---------------------------------------------------------------------- options


BASE = {"path": "/t", "group.id": "g", "checkpointlocation": "/cp"}


def test_sink_options() -> None:
    o = parse_sink_options(
        {**BASE, "partitionby": "day, region", "mergeschema": "TRUE", "storage.aws_region": "x"}
    )
    assert o.partition_by == ("day", "region") and o.merge_schema and o.fail_on_gap
    assert o.storage_options == {"aws_region": "x"}
    assert parse_sink_options(BASE).partition_by is None
    assert parse_sink_options({**BASE, "member": "job-7"}).member == "job-7"
    # Spark adds the query's name to the options of a named query.
    assert parse_sink_options({**BASE, "queryname": "ingest"}).group_id == "g"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"path": "/t", "group.id": "g"}, "checkpointLocation"),
        ({**BASE, "failongap": "maybe"}, "failOnGap"),
        ({**BASE, "compression": "brotli9"}, "compression"),
        ({**BASE, "partitonby": "x"}, "partitonby"),
    ],
)
def test_bad_sink_options_name_the_option(options: dict, option: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_sink_options(options)
    assert info.value.option == option


def test_storage_option_values_are_never_shown() -> None:
    with pytest.raises(OptionError) as info:
        parse_sink_options({**BASE, "storage.aws_secret_access_key": "hunter2", "oops": "1"})
    assert "hunter2" not in str(info.value)


# ---------------------------------------------------------------------- plans

OFFSET_LOG = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
    '{"v":1,"batch":7,"ranges":{"orders":{"0":[100,250],"3":[80,90]}}}\n'
)


def test_the_plan_comes_from_the_checkpoint_offset_log(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "12").write_text(OFFSET_LOG)
    plan = read_batch_plan(str(tmp_path), 12)
    assert plan.batch_id == 12
    assert plan.ranges == {
        TopicPartition("orders", 0): OffsetRange("orders", 0, 100, 250),
        TopicPartition("orders", 3): OffsetRange("orders", 3, 80, 90),
    }
    assert read_batch_plan(f"file://{tmp_path}", 12) == plan
    with pytest.raises(SinkError, match="offsets/13 does not exist"):
        read_batch_plan(str(tmp_path), 13)


def test_offset_logs_of_several_sources() -> None:
    text = OFFSET_LOG + '{"logOffset":3}\n-\n{"v":1,"batch":2,"ranges":{"users":{"1":[0,5]}}}\n'
    plan = parse_offset_log(text, 0)
    assert set(plan.ranges) == {
        TopicPartition("orders", 0),
        TopicPartition("orders", 3),
        TopicPartition("users", 1),
    }
    with pytest.raises(SinkError, match="planned twice"):
        parse_offset_log(OFFSET_LOG + OFFSET_LOG.splitlines()[2], 0)
    with pytest.raises(SinkError, match="no kafka-group source offset"):
        parse_offset_log('v1\n{}\n{"logOffset":3}\n', 0)
    # Keys the source does not write are ignored.
    extra = parse_offset_log('v1\n{}\n{"v":1,"batch":1,"ranges":{},"member":"m-1"}\n', 0)
    assert extra.ranges == {}
