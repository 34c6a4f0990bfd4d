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
from spark_groups.options.sink import parse_sink_options
from spark_groups.sink.plan import parse_offset_log, read_batch_plan
from spark_groups.sink.writer import (
    KafkaRows,
    TaskFileWriter,
    check_schema,
    escape_path_name,
    partition_value,
    rewrite_keeping,
)

from sink_support import SCHEMA, TOPIC, parquet_files, rows, write_task

# ---------------------------------------------------------------------- files


def test_one_file_per_task_with_each_kafka_partitions_offsets_and_stats(tmp_path: Path) -> None:
    table = tmp_path / "t"
    mixed = pa.concat_batches([rows(0, [5, 6]), rows(2, [40]), rows(0, [7])])
    (written,) = write_task(table, [mixed, rows(2, [41, 42])])

    assert written.topic_partitions == [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)]
    assert written.kafka == (KafkaRows(TOPIC, 0, 3, 5, 7), KafkaRows(TOPIC, 2, 3, 40, 42))
    assert written.rows == 6
    offsets = pq.read_table(table / written.path).column("offset").to_pylist()
    assert offsets == [5, 6, 40, 7, 41, 42]  # as the task's rows came
    assert written.size == (table / written.path).stat().st_size
    stats = json.loads(written.stats)
    assert stats["numRecords"] == 6
    assert stats["minValues"]["offset"] == 5 and stats["maxValues"]["offset"] == 42
    assert stats["nullCount"]["id"] == 0
    assert parquet_files(table) == {written.path}


def test_one_file_per_value_of_the_partition_columns(tmp_path: Path) -> None:
    schema = SCHEMA.append(pa.field("region", pa.string()))

    def with_region(batch: pa.RecordBatch, *regions: str) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([*batch.columns, pa.array(regions)], schema=schema)

    table = tmp_path / "t"
    first, second = (
        with_region(rows(0, [1, 2, 3]), "eu", "us", "eu"),
        with_region(rows(1, [9]), "us"),
    )
    files = write_task(table, [first, second], schema, ["region"])
    by_region = {f.partition_values["region"]: f for f in files}
    assert set(by_region) == {"eu", "us"}
    assert by_region["eu"].kafka == (KafkaRows(TOPIC, 0, 2, 1, 3),)
    assert by_region["us"].kafka == (KafkaRows(TOPIC, 0, 1, 2, 2), KafkaRows(TOPIC, 1, 1, 9, 9))
    assert by_region["us"].path.startswith("region=us/")
    assert "region" not in pq.read_table(table / by_region["us"].path).column_names


def test_a_table_partitioned_by_kafka_columns_keeps_their_offsets(tmp_path: Path) -> None:
    table = tmp_path / "t"
    files = write_task(table, [rows(0, [1, 2]), rows(1, [5])], SCHEMA, ["partition"])
    assert sorted((f.kafka for f in files), key=str) == [
        (KafkaRows(TOPIC, 0, 2, 1, 2),),
        (KafkaRows(TOPIC, 1, 1, 5, 5),),
    ]
    p0 = next(f for f in files if f.partition_values == {"partition": "0"})
    rewritten = rewrite_keeping(str(table), p0, {TopicPartition(TOPIC, 0): 2})
    assert rewritten is not None and rewritten.kafka == (KafkaRows(TOPIC, 0, 1, 2, 2),)


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


def test_rewrite_keeps_only_the_rows_of_each_partition_from_its_offset(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (original,) = write_task(table, [rows(0, range(10, 20)), rows(1, range(3)), rows(2, [7])])
    p0, p1, p2 = (TopicPartition(TOPIC, p) for p in range(3))
    rewritten = rewrite_keeping(str(table), original, {p0: 15, p2: 0})  # p1 left out
    assert rewritten is not None and rewritten.path != original.path
    assert rewritten.kafka == (KafkaRows(TOPIC, 0, 5, 15, 19), KafkaRows(TOPIC, 2, 1, 7, 7))
    got = pq.read_table(table / rewritten.path)
    assert got.column("offset").to_pylist() == [15, 16, 17, 18, 19, 7]  # in the file's order
    assert got.column("id").to_pylist()[-1] == 2_000_007
    assert rewrite_keeping(str(table), original, {p0: 20, p1: 3}) is None


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
