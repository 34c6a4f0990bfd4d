"""The kafka-share source into the delta-group sink, in Spark, on Apache Kafka's share groups:
every record in the table once, read by more tasks than the topic has partitions, also when a
batch is slower than the lock or a plain ShareConsumer reads the group beside the query, and
acknowledged (the group hands nothing out again). A shuffle between source and sink is
refused. (Member processes stopped at crash points: tests/crash/test_share_crash_points.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import AcknowledgeType
from deltalake import DeltaTable, QueryBuilder

from spark_groups.sink.share_commit import DUPLICATES_KEY

from support.broker import broker_kind, produce_ids, wait_until
from support.share import poll_until, share_consumer, share_group
from support.tables import table_ids

pytestmark = pytest.mark.skipif(broker_kind() != "kafka", reason="share groups: Apache Kafka")

#: The test groups' acquisition lock.
LOCK_MS = 10_000
#: The query's columns: the id, the Kafka columns, the delivery count and the Spark task.
COLUMNS = (
    "cast(cast(value as string) as long) as id", "topic", "partition", "offset",
    "deliveryCount", "spark_partition_id() as task",
)  # fmt: skip


def rows_of(table: Path, sql: str) -> list[dict]:
    """The rows of ``sql`` on the newest version of the Delta table (as ``t``)."""
    query = QueryBuilder().register("t", DeltaTable(str(table)))
    return pa.table(query.execute(sql).read_all()).to_pylist()


def share_source(
    spark: Any, servers: str, group: str, topic: str, tmp_path: Path, **extra: str
) -> Any:
    """kafka-share with 4 tasks of 25 records, into ``tmp_path / "table"``."""
    options = {
        "kafka.bootstrap.servers": servers, "group.id": group, "subscribe": topic,
        "sink.table": str(tmp_path / "table"), "tasks": "4", "maxRecordsPerTask": "25",
        "checkpointLocation": str(tmp_path / "cp"), **extra,
    }  # fmt: skip
    return spark.readStream.format("kafka-share").options(**options).load()


def start(rows: Any, tmp_path: Path) -> Any:
    """``rows`` into the delta-group sink every second."""
    return (
        rows.writeStream.format("delta-group")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )


def in_table(table: Path) -> set[int]:
    return set(table_ids(table)) if (table / "_delta_log").exists() else set()


def duplicates_left_out(table: Path) -> int:
    """How many redelivered records the share commits left out (their commit info)."""
    return sum(int(c.get(DUPLICATES_KEY, 0)) for c in DeltaTable(str(table)).history())


def assert_nothing_handed_out_again(servers: str, group: str, topic: str) -> None:
    """Every record was ACCEPTed: a consumer of the group gets nothing for 1.5 locks (a
    record acquired and never acknowledged comes back within one)."""
    consumer = share_consumer(servers, group, topic)
    try:
        got: list = []
        for _ in range(int(1.5 * LOCK_MS / 500)):
            polled = [m for m in consumer.poll(0.5) if m.error() is None]
            for m in polled:  # explicit mode: acknowledged before the next poll
                consumer.acknowledge(m, AcknowledgeType.RELEASE)
            got += [m.offset() for m in polled]
        assert got == [], f"offsets {got[:20]} handed out again: not acknowledged"
    finally:
        consumer.close()


def quiet_for(query: Any, seconds: float) -> bool:
    """True once the query's batches have read nothing for ``seconds`` (it still runs): a
    record whose lock ran out meanwhile came back to it, and its last ACCEPTs went out."""
    from datetime import datetime

    progress = query.recentProgress
    busy = [p for p in progress if p.numInputRows > 0]
    if not busy or progress[-1] is busy[-1]:
        return False
    ended = datetime.fromisoformat(busy[-1].timestamp.replace("Z", "+00:00")).timestamp()
    ended += busy[-1].durationMs.get("triggerExecution", 0) / 1000
    return time.time() - ended > seconds


def test_one_partition_read_by_four_tasks_lands_once_and_is_acknowledged(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, table = make_topic(1), tmp_path / "table"
    group = share_group(bootstrap_servers, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    query = start(
        share_source(spark, bootstrap_servers, group, topic, tmp_path).selectExpr(*COLUMNS),
        tmp_path,
    )
    try:
        for first in range(0, 400, 100):  # small record batches: the broker hands out batches
            produce_ids(bootstrap_servers, topic, range(first, first + 100), 1, [10] * 10)
            wait_until(lambda f=first: len(in_table(table)) >= f + 100, 120, f"ids < {first + 100}")
        wait_until(lambda: quiet_for(query, 1.5 * LOCK_MS / 1000), 180, "batches reading nothing")
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(table_ids(table)) == list(range(400)), "a record was lost or written twice"
    tasks = {r["task"] for r in rows_of(table, "SELECT DISTINCT task FROM t")}
    assert len(tasks) > 1, f"one partition, but only task(s) {tasks} read it"
    assert_nothing_handed_out_again(bootstrap_servers, group, topic)


def test_a_batch_slower_than_the_lock_lands_once(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """One task of the first batch sleeps past the lock: the broker gives its records out
    again while the batch still runs, the batch commits them, and a later batch reads them
    again and leaves them out of the table. (Whether they are all ACCEPTed by the time the
    query stops depends on the moment: some may still be on their way back.)"""
    from pyspark.sql.functions import udf

    topic, table, flag = make_topic(1), tmp_path / "table", tmp_path / "slow-once"
    lock_ms = 6000  # this group's lock: the sleep outlasts it; other batches fit in its half
    group = share_group(
        bootstrap_servers,
        **{"share.record.lock.duration.ms": str(lock_ms), "share.delivery.count.limit": "10"},
    )
    flag.touch()
    path = str(flag)

    @udf("long")
    def slow_once(value: int) -> int:
        import os
        import time

        try:
            os.rename(path, path + ".taken")  # one task of the whole query sleeps
        except OSError:
            return value
        time.sleep(lock_ms / 1000 + 2)
        return value

    produce_ids(bootstrap_servers, topic, range(100), 1, [10] * 10)
    rows = share_source(spark, bootstrap_servers, group, topic, tmp_path).selectExpr(*COLUMNS)
    query = start(rows.withColumn("id", slow_once("id")), tmp_path)
    try:
        wait_until(lambda: len(in_table(table)) >= 100, 180, "the 100 records")
        wait_until(lambda: duplicates_left_out(table) > 0, 120, "the redelivered records")
        assert query.exception() is None
    finally:
        query.stop()
    assert Path(path + ".taken").exists(), "no task slept"
    assert sorted(table_ids(table)) == list(range(100)), "a record was lost or written twice"


def test_a_plain_share_consumer_beside_the_query_every_record_handled_none_twice_in_the_table(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, table = make_topic(1), tmp_path / "table"
    group = share_group(bootstrap_servers, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    handled: list[int] = []
    stop = threading.Event()
    consumer = share_consumer(bootstrap_servers, group, topic)

    def plain_service() -> None:  # ACCEPTs what it gets, after "processing" it
        while not stop.is_set():
            for m in consumer.poll(0.5):
                if m.error() is None:
                    handled.append(int(m.value()))
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync(10)

    service = threading.Thread(target=plain_service, daemon=True)
    query = start(
        share_source(spark, bootstrap_servers, group, topic, tmp_path).selectExpr(*COLUMNS),
        tmp_path,
    )
    try:  # the query's consumers first (a new one takes seconds), then the service beside
        produce_ids(bootstrap_servers, topic, range(100), 1, [5] * 20)
        wait_until(lambda: len(in_table(table)) > 0, 120, "the query's first records")
        service.start()
        for first in range(100, 600, 100):
            produce_ids(bootstrap_servers, topic, range(first, first + 100), 1, [5] * 20)
        wait_until(
            lambda: in_table(table) | set(handled) >= set(range(600)), 180, "every id handled"
        )
        assert query.exception() is None
    finally:
        query.stop()
        stop.set()
        if service.is_alive():
            service.join(30)
        consumer.close()
    ids = table_ids(table)
    assert sorted(set(ids)) == sorted(ids), "a record is in the table twice"
    assert ids and handled, f"the query wrote {len(ids)}, the service handled {len(handled)}"


def test_a_shuffle_between_source_and_sink_is_refused_and_nothing_is_written(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic, table = make_topic(1), tmp_path / "table"
    group = share_group(bootstrap_servers)
    produce_ids(bootstrap_servers, topic, range(20), 1)
    rows = share_source(spark, bootstrap_servers, group, topic, tmp_path)
    query = start(rows.repartition(3).selectExpr(*COLUMNS[:5]), tmp_path)
    try:
        with pytest.raises(Exception, match="were not read by the same task"):
            query.awaitTermination(180)
    finally:
        query.stop()
    assert "shuffle" in str(query.exception())
    assert in_table(table) == set()


def test_last_deliveries_and_records_that_cannot_be_decoded_go_to_the_dead_letter_table(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], registry: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A group that gives a record out twice at most: ids 0-19 were delivered once already
    (a consumer RELEASEd them), so the query's delivery is their last; they go to the
    dead-letter table and are REJECTed. Ids 20-59, written by confluent-kafka's
    AvroSerializer, are decoded (value.format) into the sink's table; a plain record and one
    of an unknown schema id go to the dead-letter table with their schema id, REJECTed too."""
    import json

    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, table, dead = make_topic(1), tmp_path / "table", tmp_path / "dead"
    group = share_group(
        bootstrap_servers,
        **{"share.record.lock.duration.ms": str(LOCK_MS), "share.delivery.count.limit": "2"},
    )
    produce_ids(bootstrap_servers, topic, range(20), 1)
    released = share_consumer(bootstrap_servers, group, topic)
    try:
        got = poll_until(released, 20)
        for m in got:
            released.acknowledge(m, AcknowledgeType.RELEASE)
        released.commit_sync(30)
    finally:
        released.close()
    assert len(got) == 20
    schema = {
        "type": "record",
        "name": "Reading",
        "namespace": "plant",
        "fields": [{"name": "id", "type": "long"}, {"name": "site", "type": "string"}],
    }
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    for i in range(20, 60):
        producer.produce(topic, serializer({"id": i, "site": f"s{i % 3}"}, context))
        if i == 40:  # offsets 41 and 42
            producer.produce(topic, b"plain text")
            producer.produce(topic, b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x02")
    assert producer.flush(30) == 0
    rows = share_source(
        spark, bootstrap_servers, group, topic, tmp_path,
        **{"deadLetter.table": str(dead), "value.format": "avro-confluent",
           "schema.registry.url": registry.url},
    )  # fmt: skip
    assert rows.schema["value"].dataType.simpleString() == "struct<id:bigint,site:string>"
    query = start(
        rows.selectExpr("value.id as id", "value.site", "topic", "partition", "offset"), tmp_path
    )
    try:
        wait_until(lambda: len(in_table(table)) >= 40, 120, "ids 20-59 in the table")
        wait_until(lambda: quiet_for(query, 1.5 * LOCK_MS / 1000), 180, "batches reading nothing")
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(table_ids(table)) == list(range(20, 60))
    letters = sorted(
        DeltaTable(str(dead)).to_pyarrow_table().to_pylist(), key=lambda r: r["offset"]
    )
    last, undecoded = letters[:20], letters[20:]
    assert sorted(int(r["value"]) for r in last) == list(range(20))
    assert {(r["deliveryCount"], r["schemaId"]) for r in last} == {(2, None)}
    assert [(r["offset"], r["schemaId"], r["deliveryCount"]) for r in undecoded] == [
        (41, None, 1), (42, 2**31 - 7, 1)
    ]  # fmt: skip
    assert "Confluent header" in undecoded[0]["dead_letter_error"]
    assert "no schema with id" in undecoded[1]["dead_letter_error"]
    assert_nothing_handed_out_again(bootstrap_servers, group, topic)
