"""Data faults in a real query: transactional offset gaps, and poison records routed to a
dead-letter Delta table (spark_groups.deadletter).

Out-of-range and vanished offsets are tests/integration/test_broker_faults.py (the log went
backwards) and tests/unit/test_reader.py (deleted below the log start). Partitions added
during a query cannot be tested here: neither Tansu nor librdkafka's mock cluster accepts
CreatePartitions (see docs/reliability.md).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import functions as F

from spark_groups import deadletter

from support.broker import create_topics, produce_values, unique, wait_until
from support.options import group_options
from support.spark import source

SCHEMA = "id long, name string"


def run_available_now(df: Any, table: Path, checkpoint: Path, group: str) -> None:
    query = (
        df.writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(180), "AvailableNow query did not end"
    assert query.exception() is None, query.exception()


def read_table(table: Path, sql: str) -> list[dict]:
    reader = QueryBuilder().register("t", DeltaTable(str(table))).execute(sql)
    return pa.table(reader.read_all()).to_pylist()


VALUES = [
    b'{"id": 1, "name": "a"}',
    b"not json",
    b'{"id": 2, "name": "b"}',
    b'{"name": "no id"}',
    b'{"id": "x"}',
    b'{"id": 3, "name": "c"}',
    b'{"id": 99999999999999999999999}',  # does not fit a long
]


def test_poison_records_go_to_the_dead_letter_table(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(1), unique("g")
    produce_values(bootstrap_servers, topic, VALUES)

    def to_record(value: bytes | None) -> dict:
        """The user's parser (defined here: Spark pickles it by value): JSON with a numeric
        id, else an exception."""
        data = json.loads(value or b"")
        if not isinstance(data.get("id"), int):
            raise ValueError(f"no numeric id in {data!r}")
        return data

    def records(group_id: str, checkpoint: Path) -> Any:
        opts = group_options(bootstrap_servers, topic, group_id, str(tmp_path / group_id))
        return source(spark, opts, checkpoint)

    good = deadletter.good_rows(
        deadletter.parse(records(group, tmp_path / "cp"), to_record, SCHEMA)
    )
    run_available_now(
        good.select("parsed.*", "topic", "partition", "offset"),
        tmp_path / "orders", tmp_path / "cp", group,
    )  # fmt: skip
    dlq_group = group + "-dlq"
    bad = deadletter.dead_letters(
        deadletter.parse(records(dlq_group, tmp_path / "cp-dlq"), to_record, SCHEMA)
    )
    run_available_now(bad, tmp_path / "dead", tmp_path / "cp-dlq", dlq_group)

    rows = read_table(tmp_path / "orders", 'SELECT id, name, "offset" FROM t ORDER BY "offset"')
    assert rows == [
        {"id": 1, "name": "a", "offset": 0},
        {"id": 2, "name": "b", "offset": 2},
        {"id": 3, "name": "c", "offset": 5},
    ]
    dead = read_table(tmp_path / "dead", 'SELECT * FROM t ORDER BY "offset"')
    assert [d["offset"] for d in dead] == [1, 3, 4, 6]
    assert all(d["topic"] == topic and d["partition"] == 0 for d in dead)
    assert [d["value"] for d in dead] == [VALUES[i] for i in (1, 3, 4, 6)]
    errors = [d[deadletter.ERROR_COLUMN] for d in dead]
    assert errors[0].startswith("JSONDecodeError")
    assert errors[1].startswith("ValueError: no numeric id")
    assert "does not fit the schema" in errors[3]


def test_a_column_parser_marks_nulls_as_dead_letters(spark: Any) -> None:
    df = spark.createDataFrame(
        [("t", 0, i, None, None, v) for i, v in enumerate(VALUES[:4])],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    parsed = deadletter.parse(df, F.try_parse_json(F.col("value").cast("string")))
    assert [r.offset for r in deadletter.dead_letters(parsed).collect()] == [1]
    assert deadletter.good_rows(parsed).count() == 3


def test_a_dead_letter_schema_with_a_timestamp(spark: Any) -> None:
    """Timestamps in the parsed schema (pyspark 4.2+ asserts on an Arrow timestamp type built
    without a time zone; 4.0 and 4.1 take another keyword): the instant survives, in UTC."""
    from datetime import UTC, datetime

    def to_record(value: bytes | None) -> dict:
        data = json.loads(value or b"")
        return {"id": data["id"], "at": datetime.fromisoformat(data["at"])}

    values = [
        b'{"id": 1, "at": "2026-11-25T10:00:00+00:00"}',
        b'{"id": 2, "at": "2026-11-25T12:30:00+02:00"}',
        b'{"id": 3}',
    ]
    df = spark.createDataFrame(
        [("t", 0, i, None, None, v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    parsed = deadletter.parse(df, to_record, "id long, at timestamp")
    good = deadletter.good_rows(parsed).select("parsed.*").orderBy("id").collect()
    assert [(r.id, r.at.replace(tzinfo=UTC)) for r in good] == [  # session time zone: UTC
        (1, datetime(2026, 11, 25, 10, 0, tzinfo=UTC)),
        (2, datetime(2026, 11, 25, 10, 30, tzinfo=UTC)),
    ]
    dead = deadletter.dead_letters(parsed).collect()
    assert [d.offset for d in dead] == [2]
    assert dead[0][deadletter.ERROR_COLUMN].startswith("KeyError")


def test_transaction_markers_and_aborted_records_leave_gaps_the_query_reads_past(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """A transactional producer leaves offsets that hold commit/abort markers (and aborted
    records under read_committed): the ranges must still end exactly, without waiting for a
    record at those offsets."""
    topic = make_topic(1)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    for n, commit in ((3, True), (2, False), (1, True), (4, True)):
        producer.begin_transaction()
        for i in range(n):
            producer.produce(topic, value=f"{'ok' if commit else 'aborted'}-{n}-{i}".encode())
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    producer.flush(30)
    for isolation in ("read_committed", "read_uncommitted"):
        group = unique("g")
        opts = group_options(
            bootstrap_servers, topic, group, None, **{"kafka.isolation.level": isolation}
        )
        df = spark.readStream.format("kafka-group").options(**opts).load()
        name = unique("q")
        query = (
            df.selectExpr("cast(value as string) AS v", "offset")
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"cp-{uuid.uuid4().hex}"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), f"{isolation}: the query waited for a marker"
        assert query.exception() is None
        got = [r.v for r in spark.table(name).orderBy("offset").collect()]
        committed = ["ok-3-0", "ok-3-1", "ok-3-2", "ok-1-0"] + [f"ok-4-{i}" for i in range(4)]
        if isolation == "read_committed":
            assert got == committed
        else:  # aborted records are visible to read_uncommitted, if the broker kept them
            assert [v for v in got if v.startswith("ok")] == committed


def test_partitions_that_appear_during_a_query_are_picked_up(
    spark: Any, bootstrap_servers: str, tmp_path: Path
) -> None:
    """New partitions reach a running query through a rebalance after librdkafka's next
    metadata refresh. Neither test broker can add partitions to a topic (CreatePartitions), so
    the new partitions come from a new topic matching subscribePattern: the same path (the
    subscription's partitions change, the group rebalances, the member resumes them)."""
    prefix = unique("grow")
    create_topics(bootstrap_servers, 2, [f"{prefix}-a"])
    produce_values(bootstrap_servers, f"{prefix}-a", [b"a0", b"a1"])
    opts = group_options(bootstrap_servers, "unused", unique("g"), str(tmp_path / "ledger"))
    del opts["subscribe"]
    opts.update(
        {"subscribePattern": f"{prefix}-.*", "kafka.topic.metadata.refresh.interval.ms": "2000"}
    )
    name = unique("q")
    df = spark.readStream.format("kafka-group").options(**opts).load()
    query = (
        df.selectExpr("cast(value as string) AS v", "topic", "partition")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:

        def seen() -> set[str]:
            return {r.v for r in spark.table(name).collect()}

        wait_until(lambda: seen() == {"a0", "a1"}, 120, "the first topic's records")
        create_topics(bootstrap_servers, 3, [f"{prefix}-b"])
        produce_values(bootstrap_servers, f"{prefix}-b", [b"b0", b"b1", b"b2"], 3)
        wait_until(lambda: seen() >= {"b0", "b1", "b2"}, 120, "the new partitions' records")
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.table(name).collect()
    assert sorted(r.v for r in rows) == ["a0", "a1", "b0", "b1", "b2"]
    assert {(r.topic, r.partition) for r in rows if r.v.startswith("b")} == {
        (f"{prefix}-b", p) for p in range(3)
    }
