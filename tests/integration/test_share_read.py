"""One kafka-share reading task, without Spark: what it yields and what it hands over."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups import crash_points
from spark_groups.errors import SparkGroupsError
from spark_groups.offsets import TopicPartition
from spark_groups.offsets.offset_sets import PartitionOffsets
from spark_groups.share import consumers, dead_letters
from spark_groups.share.acks import Outcome
from spark_groups.share.read import DELIVERY_COUNT, ShareTask, read_share_task
from spark_groups.sink.share_info import commit_info, commit_offsets_info
from spark_groups.spark.task_context import TaskAttempt

from support.broker import produce_ids, wait_until
from support.share import poll_until, share_consumer, share_group


def task_for(servers: str, group: str, topic: str, table: str, **extra: object) -> ShareTask:
    """A reading task of ``group`` on ``topic`` whose batches go into ``table``."""
    spec: dict = {
        "config": {"bootstrap.servers": servers, "group.id": group},
        "topics": [topic], "table": table, "poll_budget_s": 30.0,
        **extra,
    }  # fmt: skip
    return ShareTask(**spec)


def test_a_task_yields_its_records_and_accepts_them_once_the_table_names_it(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(10), 1)
    group = share_group(bootstrap_servers)
    table = str(tmp_path / "sink")
    write_deltalake(table, pa.table({"id": pa.array([], pa.int64())}))
    attempt = TaskAttempt("run-a", 0, 17)
    (batch,) = list(read_share_task(task_for(bootstrap_servers, group, topic, table), attempt))
    assert batch.column("offset").to_pylist() == list(range(10))
    assert [int(v) for v in batch.column("value").to_pylist()] == list(range(10))
    assert set(batch.column(DELIVERY_COUNT).to_pylist()) == {1}
    assert set(batch.column("timestampType").to_pylist()) == {0}
    acks = consumers.acknowledger(table)
    assert acks.waiting() == [attempt]
    dt = DeltaTable(table)
    dt.create_write_transaction(
        [], "append", dt.schema(),
        commit_properties=CommitProperties(custom_metadata=commit_info([attempt])),
    )  # fmt: skip
    wait_until(lambda: acks.settled.get(attempt) is Outcome.ACCEPTED, what="the ACCEPT")
    # The consumer is back in the pool: the next task of this worker takes it again.
    config = {"bootstrap.servers": bootstrap_servers, "group.id": group}
    again = consumers.checkout(config, [topic])
    try:
        produce_ids(bootstrap_servers, topic, [10], 1)
        polled = []
        wait_until(lambda: polled.extend(m for m in again.consumer.poll(0.5)) or bool(polled))
        assert [(m.offset(), m.delivery_count()) for m in polled] == [(10, 1)]
    finally:
        consumers.close_quietly(again)


def test_a_read_outside_a_streaming_task_is_refused(bootstrap_servers: str, tmp_path: Path) -> None:
    task = task_for(bootstrap_servers, "g", "t", str(tmp_path / "sink"))
    with pytest.raises(SparkGroupsError, match="outside a streaming batch's task"):
        list(read_share_task(task, None))


def delivered_once_already(servers: str, group: str, topic: str, ids: range) -> None:
    """``ids`` (produced now, one partition) acquired by a plain consumer and RELEASEd: the
    group's next delivery of them is their second."""
    from confluent_kafka import AcknowledgeType

    produce_ids(servers, topic, ids, 1)
    consumer = share_consumer(servers, group, topic)
    try:
        got = poll_until(consumer, len(ids))
        assert [m.offset() for m in got] == list(ids)
        for m in got:
            consumer.acknowledge(m, AcknowledgeType.RELEASE)
        consumer.commit_sync(30)
    finally:
        consumer.close()


def only_new_records_come(servers: str, group: str, topic: str, offset: int) -> list[int]:
    """Produce one more record (``offset``) and poll a fresh consumer of the group until it
    arrives: the offsets it got on the way (REJECTed records are never among them)."""
    produce_ids(servers, topic, [offset], 1)
    consumer = share_consumer(servers, group, topic)
    try:
        got: list[int] = []
        wait_until(
            lambda: (
                got.extend(m.offset() for m in consumer.poll(0.5) if m.error() is None)
                or offset in got
            ),
            60,
            f"offset {offset}",
        )
        return got
    finally:
        consumer.close()


def test_records_on_their_last_delivery_go_to_the_dead_letter_table_and_are_rejected(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(1)
    group = share_group(bootstrap_servers, **{"share.delivery.count.limit": "2"})
    delivered_once_already(bootstrap_servers, group, topic, range(2))
    produce_ids(bootstrap_servers, topic, [2], 1)  # a record on its first delivery beside
    table, dead = str(tmp_path / "sink"), str(tmp_path / "dead")
    write_deltalake(table, pa.table({"id": pa.array([], pa.int64())}))
    dead_letters.ensure_table(dead)
    attempt = TaskAttempt("run-d", 0, 3)
    task = task_for(
        bootstrap_servers, group, topic, table, delivery_limit=2, dead_letter_table=dead
    )
    (batch,) = list(read_share_task(task, attempt))
    assert batch.column("offset").to_pylist() == [2]
    rows = DeltaTable(dead).to_pyarrow_table().to_pylist()
    assert [(r["offset"], r["deliveryCount"], r["group"]) for r in rows] == [
        (0, 2, group), (1, 2, group)
    ]  # fmt: skip
    assert {int(r["value"]) for r in rows} == {0, 1}
    assert all("share.delivery.count.limit is 2" in r["dead_letter_error"] for r in rows)
    # The batch lands: the record read is ACCEPTed, and the REJECTs went with it.
    dt = DeltaTable(table)
    dt.create_write_transaction(
        [], "append", dt.schema(),
        commit_properties=CommitProperties(custom_metadata=commit_info([attempt])),
    )  # fmt: skip
    acks = consumers.acknowledger(table)
    wait_until(lambda: acks.settled.get(attempt) is Outcome.ACCEPTED, what="the ACCEPT")
    assert only_new_records_come(bootstrap_servers, group, topic, 3) == [3]


def test_a_task_stopped_after_the_dead_letter_write_leaves_them_in_the_table_once(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Stopped at ``share.dead_letters`` (its consumer closed, nothing acknowledged): the
    records were on their last delivery, so the broker archives them; the dead-letter table
    has them once, and the group never gives them out again."""
    topic = make_topic(1)
    group = share_group(bootstrap_servers, **{"share.delivery.count.limit": "2"})
    delivered_once_already(bootstrap_servers, group, topic, range(3))
    dead = str(tmp_path / "dead")
    dead_letters.ensure_table(dead)
    task = task_for(
        bootstrap_servers, group, topic, str(tmp_path / "sink"), delivery_limit=2,
        dead_letter_table=dead,
    )  # fmt: skip

    def stop(point: str) -> None:
        if point == "share.dead_letters":
            raise KeyboardInterrupt(point)  # as a kill: nothing after it runs

    with crash_points.installed(stop), pytest.raises(KeyboardInterrupt):
        list(read_share_task(task, TaskAttempt("run-k", 0, 1)))
    assert sorted(DeltaTable(dead).to_pyarrow_table().column("offset").to_pylist()) == [0, 1, 2]
    assert only_new_records_come(bootstrap_servers, group, topic, 3) == [3]


def test_without_a_dead_letter_table_the_last_delivery_is_read_into_the_batch(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(1)
    group = share_group(bootstrap_servers, **{"share.delivery.count.limit": "2"})
    delivered_once_already(bootstrap_servers, group, topic, range(2))
    task = task_for(bootstrap_servers, group, topic, str(tmp_path / "sink"), delivery_limit=2)
    (batch,) = list(read_share_task(task, TaskAttempt("run-n", 0, 1)))
    assert batch.column("offset").to_pylist() == [0, 1]
    assert batch.column(DELIVERY_COUNT).to_pylist() == [2, 2]


def test_a_last_delivery_the_table_has_already_is_accepted_not_dead_lettered(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Offset 0 was committed by an earlier delivery's batch (its ACCEPT was lost): on its
    last delivery it is ACCEPTed; offset 1 goes to the dead-letter table."""
    topic = make_topic(1)
    group = share_group(bootstrap_servers, **{"share.delivery.count.limit": "2"})
    delivered_once_already(bootstrap_servers, group, topic, range(2))
    table, dead = str(tmp_path / "sink"), str(tmp_path / "dead")
    write_deltalake(
        table, pa.table({"id": pa.array([0], pa.int64())}),
        commit_properties=CommitProperties(custom_metadata=commit_offsets_info(
            PartitionOffsets.of([(TopicPartition(topic, 0), 0)])
        )),
    )  # fmt: skip
    dead_letters.ensure_table(dead)
    task = task_for(
        bootstrap_servers, group, topic, table, delivery_limit=2, dead_letter_table=dead
    )
    (batch,) = list(read_share_task(task, TaskAttempt("run-l", 0, 1)))
    assert batch.num_rows == 0
    assert DeltaTable(dead).to_pyarrow_table().column("offset").to_pylist() == [1]
    assert only_new_records_come(bootstrap_servers, group, topic, 2) == [2]
