"""Side by side with Spark's own kafka source (spark-sql-kafka, ``bash jars/fetch spark-kafka``):
the same options give the same rows and schema; the starting and trigger options of a user
switching over keep their meaning (docs/options.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from confluent_kafka import Producer

from support.broker import unique, wait_until
from support.options import group_options
from support.spark import needs_available_now, source

pytestmark = pytest.mark.timeout(300)

#: Record timestamps of the test topics: T0 + i seconds for record i. Recent, or the broker's
#: time-based retention would delete them (the log start would move under the test).
T0 = (int(time.time()) - 3600) * 1000
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def produce_timed(servers: str, topic: str, ids: range, partitions: int) -> None:
    """Record ``i``: key ``k<i>``, value ``<i>``, a header, timestamp ``T0 + i`` seconds, on
    partition ``i % partitions``."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": "20"})
    for i in ids:
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=str(i).encode(),
            partition=i % partitions,
            timestamp=T0 + i * 1000,
            headers=[("n", str(i).encode()), ("empty", None)],
        )
    assert producer.flush(30) == 0


def read_group(spark: Any, opts: dict, tmp_path: Path, name: str) -> Any:
    """Everything ``kafka-group`` reads with ``opts`` under Trigger.AvailableNow."""
    query = (
        source(spark, opts, tmp_path / name)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / name))
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    return spark.table(name)


def read_spark_kafka(spark: Any, servers: str, topic: str, **options: str) -> Any:
    """Everything Spark's kafka source reads (a batch read of the same topic)."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .options(**options)
        .load()
    )


def test_same_rows_and_schema_as_sparks_kafka_source(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    produce_timed(bootstrap_servers, topic, range(60), 3)
    theirs = read_spark_kafka(
        spark, bootstrap_servers, topic, startingOffsets="earliest", includeHeaders="true"
    )
    ours = read_group(
        spark,
        group_options(bootstrap_servers, topic, unique("g"), None, includeHeaders="true"),
        tmp_path,
        unique("ours"),
    )
    assert ours.columns == theirs.columns == COLUMNS
    assert_df_equality(ours, theirs, ignore_row_order=True)
    assert ours.count() == 60


def test_starting_timestamp_starts_where_sparks_kafka_source_does(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    produce_timed(bootstrap_servers, topic, range(60), 3)
    middle = str(T0 + 25_500)  # between records 25 and 26
    theirs = read_spark_kafka(
        spark, bootstrap_servers, topic, startingTimestamp=middle, includeHeaders="true"
    )
    opts = group_options(
        bootstrap_servers, topic, unique("g"), None, includeHeaders="true", startingTimestamp=middle
    )
    ours = read_group(spark, opts, tmp_path, unique("ours"))
    assert sorted(int(r.value) for r in ours.select("value").collect()) == list(range(26, 60))
    assert_df_equality(ours, theirs, ignore_row_order=True)


def test_by_timestamp_later_than_every_record(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Partition 1 has no record that late: ``latest`` starts it at the log end, ``error``
    (Spark's default) fails the query naming the partition and the way out."""
    topic = make_topic(2)
    produce_timed(bootstrap_servers, topic, range(20), 2)
    by_time = f'{{"{topic}": {{"0": {T0 + 10_000}, "1": {T0 + 99_000}}}}}'
    opts = group_options(
        bootstrap_servers,
        topic,
        unique("g"),
        None,
        startingOffsetsByTimestamp=by_time,
        startingOffsetsByTimestampStrategy="latest",
    )
    ours = read_group(spark, opts, tmp_path, unique("ours"))
    assert sorted(int(r.value) for r in ours.select("value").collect()) == [10, 12, 14, 16, 18]

    opts = group_options(
        bootstrap_servers, topic, unique("g"), None, startingOffsetsByTimestamp=by_time
    )
    query = (
        source(spark, opts, tmp_path / "fails")
        .writeStream.format("memory")
        .queryName(unique("fails"))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "fails"))
        .start()
    )
    with pytest.raises(Exception, match=rf"partition {topic}-1 has no record at or after"):
        query.awaitTermination(180)
    assert "startingOffsetsByTimestampStrategy=latest" in str(query.exception())


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_timed(bootstrap_servers, topic, range(10), 2)
    name = unique("min")
    opts = group_options(
        bootstrap_servers,
        topic,
        unique("g"),
        None,
        minOffsetsPerTrigger="10",
        maxTriggerDelay="4s",
    )
    query = (
        source(spark, opts, tmp_path / "cp")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        wait_until(lambda: spark.table(name).count() == 10, 120, "the first batch")
        produce_timed(bootstrap_servers, topic, range(10, 15), 2)  # 5 < minOffsetsPerTrigger
        wait_until(lambda: spark.table(name).count() == 15, 120, "the delayed batch")

        def batches_with_rows() -> list[Any]:
            return [p for p in query.recentProgress if p.numInputRows > 0]

        # The memory sink shows the rows before Spark posts the batch's progress.
        wait_until(lambda: len(batches_with_rows()) == 2, 30, "the delayed batch's progress")
        batches = batches_with_rows()
        assert [p.numInputRows for p in batches] == [10, 5]
        first, second = (p.timestamp for p in batches)
        waited = (_ms(second) - _ms(first)) / 1000.0
        # Without minOffsetsPerTrigger the 200 ms trigger would read the 5 at once.
        assert waited >= 3.5, f"the batch of 5 came {waited:.1f} s after the first"
    finally:
        query.stop()


def test_available_now_ignores_min_offsets_per_trigger(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_timed(bootstrap_servers, topic, range(20), 2)
    opts = group_options(bootstrap_servers, topic, unique("g"), None, minOffsetsPerTrigger="1000")
    assert read_group(spark, opts, tmp_path, unique("ours")).count() == 20


def _ms(timestamp: str) -> float:
    """Milliseconds of a progress timestamp (``2026-11-23T17:00:00.123Z``)."""
    from datetime import datetime

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000


@needs_available_now
def test_offsets_behind_latest_as_sparks_kafka_source_reports_them(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Both sources read 60 records 15 at a time; each batch's min/max/avg offsets behind
    latest must be the same (Spark's in ``sources[].metrics``, ours through
    ``kafka_source_metrics``, since a Python source cannot fill that map)."""
    from spark_groups.metrics import kafka_source_metrics

    topic = make_topic(3)
    produce_timed(bootstrap_servers, topic, range(60), 3)

    def batches(reader: Any, name: str) -> list[Any]:
        query = (
            reader.load()
            .writeStream.format("noop")
            .queryName(name)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / name))
            .start()
        )
        assert query.awaitTermination(180)
        return [p for p in query.recentProgress if p.numInputRows > 0]

    theirs = batches(
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "15"),
        unique("theirs"),
    )
    ours = batches(
        spark.readStream.format("kafka-group").options(
            **group_options(bootstrap_servers, topic, unique("g"), None, maxOffsetsPerTrigger="15")
        ),
        unique("ours"),
    )
    assert [p.numInputRows for p in ours] == [p.numInputRows for p in theirs] == [15] * 4
    expected = [dict(p.sources[0].metrics) for p in theirs]
    assert expected[0]["maxOffsetsBehindLatest"] == "15"
    assert [kafka_source_metrics(p.json)[0] for p in ours] == expected
