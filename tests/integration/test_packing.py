"""Small ranges packed into fewer Spark tasks (recordsPerTask), in real Spark (local[2])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.broker import produce_ids, unique
from support.options import group_options

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


def run_split_tasks(spark: Any, opts: dict, checkpoint: Path) -> list[dict[int, list[int]]]:
    """Run a Trigger.AvailableNow query; per non-empty batch, each Spark task's offsets."""
    batches: list[dict[int, list[int]]] = []

    def each_batch(df: Any, batch_id: int) -> None:
        tasks: dict[int, list[int]] = {}
        for r in df.selectExpr("spark_partition_id() as task", "offset").collect():
            tasks.setdefault(r.task, []).append(r.offset)
        if tasks:
            batches.append({t: sorted(offsets) for t, offsets in tasks.items()})

    query = (
        spark.readStream.format("kafka-group")
        .options(**opts)
        .load()
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(each_batch)
        .start()
    )
    assert query.awaitTermination(300), "AvailableNow query did not end"
    assert query.exception() is None
    return batches


@pytest.mark.parametrize(
    "split, read_path",
    [({"minPartitions": "4"}, "native"), ({"maxRecordsPerPartition": "300"}, "python")],
    ids=["minPartitions-native", "maxRecordsPerPartition-python"],
)
def test_one_partition_is_read_by_several_tasks_each_record_once(
    spark,
    bootstrap_servers: str,
    make_topic,
    tmp_path: Path,
    split: dict[str, str],
    read_path: str,
) -> None:
    topic, total = make_topic(1), 2000
    produce_ids(bootstrap_servers, topic, range(total), 1)
    opts = group_options(bootstrap_servers, topic, unique("g"), None, readPath=read_path, **split)
    batches = run_split_tasks(spark, opts, tmp_path / "checkpoint")

    offsets = sorted(o for tasks in batches for offs in tasks.values() for o in offs)
    assert offsets == list(range(total))  # every record once
    for tasks in batches:
        # Each task read one contiguous piece of the partition.
        for offs in tasks.values():
            assert offs == list(range(offs[0], offs[0] + len(offs)))
        if "minPartitions" in split:
            assert len(tasks) == 4 or sum(map(len, tasks.values())) < 4, batches
        else:
            assert all(len(offs) <= 300 for offs in tasks.values())
            assert len(tasks) == -(-sum(map(len, tasks.values())) // 300)
