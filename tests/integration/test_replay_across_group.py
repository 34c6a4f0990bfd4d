"""A batch Spark replays after a restart, in a group a plain consumer shares (real Spark,
real broker, the delta-group sink): the replay reads only what is still this member's, and
the sink's table claims no offset it did not get (``spark_groups.group.replay``). The query
splits its ranges (``minPartitions``): the replay reads what is left of the logged pieces,
several sink files per partition."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from pyspark.sql import functions as F

from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions

from support.broker import committed_offsets, produce_ids, unique, wait_until
from support.options import FAST_GROUP, group_options
from support.spark import needs_available_now
from support.tables import table_ids


def run(spark: Any, opts: dict, table: Path, checkpoint: Path, group: str, fail_from: int | None):
    """One AvailableNow query into delta-group; records at ``fail_from`` or later fail their
    batch (Spark has logged it, the sink never commits it). Returns the query's error."""
    df = spark.readStream.format("kafka-group").options(**opts).load()
    ids = df.selectExpr("cast(cast(value as string) as long) as id", "topic", "partition", "offset")
    if fail_from is not None:
        fails = F.raise_error(F.lit("the batch fails"))
        ids = ids.where(F.when(F.col("offset") >= fail_from, fails).otherwise(F.lit(True)))
    query = (
        ids.writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    with contextlib.suppress(Exception):  # the failed run's error is returned below
        query.awaitTermination(180)
    assert not query.isActive
    return query.exception()


def plain_consumer_processes(
    servers: str, topic: str, group: str, until: dict[int, int]
) -> list[int]:
    """A plain confluent-kafka member of the group processes each partition up to
    ``until[p]``, commits exactly that, and leaves; returns the ids it processed."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "session.timeout.ms": FAST_GROUP["kafka.session.timeout.ms"],
            "heartbeat.interval.ms": FAST_GROUP["kafka.heartbeat.interval.ms"],
        }
    )
    consumer.subscribe([topic])
    processed: list[int] = []
    reached = {p: -1 for p in until}
    try:

        def done() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                p, offset = msg.partition(), msg.offset()
                reached[p] = max(reached[p], offset + 1)
                if offset < until[p]:
                    processed.append(int(msg.value()))
            return all(reached[p] >= until[p] for p in until)

        wait_until(done, timeout_s=120, what="the plain consumer to reach its offsets")
        consumer.commit(
            offsets=[
                KafkaPartition(topic, p, o, metadata="orders-service") for p, o in until.items()
            ],
            asynchronous=False,
        )
    finally:
        consumer.close()
    return processed


@needs_available_now
def test_a_replayed_batch_leaves_out_what_a_plain_consumer_processed_while_spark_was_down(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, group = make_topic(2), unique("replay")
    produce_ids(bootstrap_servers, topic, range(40), 2)  # 20 per partition
    table, checkpoint = tmp_path / "table", tmp_path / "cp"
    # The recommended setting for a group shared with other consumers: the source knows the
    # query's checkpoint, so a replay can tell the sink what it left out.
    opts = group_options(
        bootstrap_servers,
        topic,
        group,
        None,
        maxOffsetsPerTrigger="20",
        checkpointLocation=str(checkpoint),
        minPartitions="6",  # [10, 20) of each partition in pieces [10, 13), [13, 16), [16, 20)
    )

    # 1. Batch 0 reads offsets [0, 10) of both partitions; batch 1 ([10, 20)) fails.
    assert "the batch fails" in str(run(spark, opts, table, checkpoint, group, fail_from=10))
    assert committed_offsets(bootstrap_servers, group, topic, 2) == {0: 10, 1: 10}
    # 2. While the query is down, a plain consumer of the group processes partition 0 to its
    #    end and partition 1 up to 14.
    by_consumer = plain_consumer_processes(bootstrap_servers, topic, group, {0: 20, 1: 14})
    # 3. The query starts again: Spark replays batch 1 first.
    assert run(spark, opts, table, checkpoint, group, fail_from=None) is None

    in_table = table_ids(table)
    assert Counter(in_table).most_common(1)[0][1] == 1, "an id twice in the table"
    assert not set(in_table) & set(by_consumer), "processed by both"
    assert sorted(in_table + by_consumer) == list(range(40))
    assert committed_offsets(bootstrap_servers, group, topic, 2) == {0: 20, 1: 20}
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    # The table claims only what it holds: partition 0 up to 10, partition 1 to its end.
    assert committed_positions(str(table), group, [tp0, tp1]) == {tp0: 10, tp1: 20}

    # 4. New records: partition 0 is read from where the plain consumer stopped; the table
    #    accepts the gap [10, 20) as the plain consumer's, and nothing is refused.
    produce_ids(bootstrap_servers, topic, range(40, 44), 2)
    assert run(spark, opts, table, checkpoint, group, fail_from=None) is None
    in_table = table_ids(table)
    assert sorted(in_table + by_consumer) == list(range(44))
    assert committed_positions(str(table), group, [tp0, tp1]) == {tp0: 22, tp1: 22}
