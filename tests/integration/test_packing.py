"""Small ranges packed into fewer Spark tasks (recordsPerTask), in real Spark (local[2])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_support import produce_ids
from helpers import group_options, unique

PARTITIONS = 64
PER_PARTITION = 30


def run_counting_tasks(
    spark: Any, opts: dict, checkpoint: Path
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """Run a Trigger.AvailableNow query; return every row's (id, partition, offset) and, per
    non-empty batch, (Spark tasks of its scan, Kafka partitions it read)."""
    rows: list[tuple[int, int, int]] = []
    batches: list[tuple[int, int]] = []

    def each_batch(df: Any, batch_id: int) -> None:
        got = [
            (int(r.id), r.partition, r.offset)
            for r in df.selectExpr("cast(value as string) as id", "partition", "offset").collect()
        ]
        if got:
            batches.append((df.rdd.getNumPartitions(), len({p for _, p, _ in got})))
        rows.extend(got)

    df = spark.readStream.format("kafka-group").options(**opts).load()
    query = (
        df.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(each_batch)
        .start()
    )
    assert query.awaitTermination(300), "AvailableNow query did not end"
    assert query.exception() is None
    return rows, batches


@pytest.fixture
def topic_of_many_partitions(bootstrap_servers: str, make_topic) -> str:
    topic = make_topic(PARTITIONS)
    counts = produce_ids(bootstrap_servers, topic, range(PARTITIONS * PER_PARTITION), PARTITIONS)
    assert set(counts.values()) == {PER_PARTITION}
    return topic


def test_small_ranges_share_tasks_and_every_record_is_read_once(
    spark, bootstrap_servers: str, topic_of_many_partitions: str, tmp_path: Path
) -> None:
    topic = topic_of_many_partitions
    opts = group_options(bootstrap_servers, topic, unique("g"), None, recordsPerTask="500")
    rows, batches = run_counting_tasks(spark, opts, tmp_path / "checkpoint")

    assert sorted(i for i, _, _ in rows) == list(range(PARTITIONS * PER_PARTITION))
    assert {(p, o) for i, p, o in rows} == {
        (i % PARTITIONS, i // PARTITIONS) for i in range(PARTITIONS * PER_PARTITION)
    }
    assert batches
    for tasks, partitions in batches:
        # 30-record ranges, 500 records per task: 16 ranges a task.
        assert tasks == -(-partitions // 16), batches
    assert sum(partitions for _, partitions in batches) == PARTITIONS


def test_records_per_task_zero_is_one_task_per_partition(
    spark, bootstrap_servers: str, topic_of_many_partitions: str, tmp_path: Path
) -> None:
    topic = topic_of_many_partitions
    opts = group_options(bootstrap_servers, topic, unique("g"), None, recordsPerTask="0")
    rows, batches = run_counting_tasks(spark, opts, tmp_path / "checkpoint")

    assert sorted(i for i, _, _ in rows) == list(range(PARTITIONS * PER_PARTITION))
    assert batches
    assert all(tasks == partitions for tasks, partitions in batches), batches
