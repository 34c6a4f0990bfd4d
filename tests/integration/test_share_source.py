"""The kafka-share source into the delta-group sink, in Spark, on Apache Kafka's share groups:
every record in the table once, read by more tasks than the topic has partitions, and
acknowledged (the group hands nothing out again)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from support.broker import produce_ids, wait_until
from support.share import share_consumer, share_group
from support.tables import table_ids


def rows_of(table: Path, sql: str) -> list[dict]:
    """The rows of ``sql`` on the newest version of the Delta table (as ``t``)."""
    query = QueryBuilder().register("t", DeltaTable(str(table)))
    return pa.table(query.execute(sql).read_all()).to_pylist()


#: The test groups' acquisition lock: short, so what is not acknowledged comes back soon.
LOCK_MS = 10_000


def share_query(
    spark: Any, servers: str, group: str, topic: str, tmp_path: Path, **extra: str
) -> Any:
    """kafka-share (4 tasks) into delta-group every second; the row's task in ``task``."""
    options = {
        "kafka.bootstrap.servers": servers, "group.id": group, "subscribe": topic,
        "sink.table": str(tmp_path / "table"), "tasks": "4", "maxRecordsPerTask": "25",
        "checkpointLocation": str(tmp_path / "cp"), **extra,
    }  # fmt: skip
    return (
        spark.readStream.format("kafka-share").options(**options).load()
        .selectExpr("cast(cast(value as string) as long) as id", "topic", "partition",
                    "offset", "deliveryCount", "spark_partition_id() as task")
        .writeStream.format("delta-group")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )  # fmt: skip


def test_one_partition_read_by_four_tasks_lands_once_and_is_acknowledged(
    spark: Any, bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(1)
    group = share_group(bootstrap_servers, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    table = tmp_path / "table"
    query = share_query(spark, bootstrap_servers, group, topic, tmp_path)
    try:
        for start in range(0, 400, 100):  # small record batches: the broker hands out batches
            produce_ids(bootstrap_servers, topic, range(start, start + 100), 1, [10] * 10)
            wait_until(
                lambda s=start: (
                    (table / "_delta_log").exists() and len(set(table_ids(table))) >= s + 100
                ),
                120,
                f"ids below {start + 100} in the table",
            )
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(table_ids(table)) == list(range(400)), "a record was lost or written twice"
    tasks = {row["task"] for row in rows_of(table, "SELECT DISTINCT task FROM t")}
    assert len(tasks) > 1, f"one partition, but only task(s) {tasks} read it"
    # Every record was ACCEPTed: a consumer of the group gets nothing, also after a lock.
    consumer = share_consumer(bootstrap_servers, group, topic)
    try:
        got: list = []
        deadline_polls = int(2 * LOCK_MS / 500)
        for _ in range(deadline_polls):
            got += [m for m in consumer.poll(0.5) if m.error() is None]
        assert got == [], f"{len(got)} record(s) were handed out again: not acknowledged"
    finally:
        consumer.close()
