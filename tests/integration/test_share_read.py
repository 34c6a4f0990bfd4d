"""One kafka-share reading task, without Spark: what it yields and what it hands over."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_groups.errors import SparkGroupsError
from spark_groups.share import consumers
from spark_groups.share.acks import Outcome
from spark_groups.share.attempts import TaskAttempt, commit_info
from spark_groups.share.read import DELIVERY_COUNT, ShareTask, read_share_task

from support.broker import produce_ids, wait_until
from support.share import share_group


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
