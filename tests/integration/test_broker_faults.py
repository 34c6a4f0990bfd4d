"""Broker faults in a real query, on Apache Kafka: unreachable at start, restarted with its
data lost, restarted with its log kept, frozen past the session timeout.

(A member frozen past its session is tests/unit/test_fencing.py.)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_groups.embedded import free_port
from spark_groups.tools.kafka_broker import KafkaBroker

from support.broker import create_topics, produce_ids, unique, wait_until
from support.options import group_options
from support.producers import FlowingProducer
from support.tables import table_ids


def start_query(spark: Any, opts: dict, checkpoint: Path, table: str) -> Any:
    """A query reading the source into memory table ``table`` every second."""
    df = spark.readStream.format("kafka-group").options(**opts).load()
    return (
        df.selectExpr("cast(cast(value as string) as long) as id", "partition", "offset")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def ids(spark: Any, table: str) -> list[int]:
    return sorted(r.id for r in spark.table(table).select("id").collect())


def test_unreachable_broker_at_start_is_a_clear_error_within_broker_timeout(
    spark: Any, tmp_path: Path
) -> None:
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    opts = group_options(servers, "orders", unique("g"), None, brokerTimeoutMs="3000")
    started = time.monotonic()
    query = None
    try:
        query = start_query(spark, opts, tmp_path / "cp", unique("q"))
        query.awaitTermination(120)
        error: BaseException | None = query.exception()
    except Exception as exc:  # at start or when the query fails: either is fine
        error = exc
    finally:
        if query is not None:
            query.stop()
    elapsed = time.monotonic() - started
    assert error is not None, "the query did not fail"
    assert "BrokerUnreachableError" in str(error)
    assert servers in str(error)
    assert "3 s" in str(error)  # the bound it waited, from brokerTimeoutMs
    assert elapsed < 90, f"took {elapsed:.0f} s"


Broker = KafkaBroker


@pytest.fixture
def own_broker() -> Iterator[Broker]:
    """An Apache Kafka broker of this test alone (it gets restarted, wiped or frozen). The
    embedded Tansu broker is the demo's, not one users meet faults on: its storage is memory
    only (docs/brokers.md)."""
    broker: Broker = KafkaBroker()
    try:
        yield broker.start()
    finally:
        broker.stop()


def restart_with_data_lost(broker: Broker, topic: str, partitions: int) -> None:
    """Restart the broker on its port with an empty log; recreate the topic."""
    broker.restart(lose_data=True)
    create_topics(broker.bootstrap_servers, partitions, [topic])


def broker_pid(broker: Broker) -> int:
    process = broker._process
    assert process is not None, "the broker is not running"
    return process.pid


def latest_seen(query: Any, topic: str) -> list[dict[str, int]]:
    """The log ends the source reported (``latestOffset``) in each progress, oldest first.
    Idle queries report progress too, every 10 s."""
    out = []
    for p in query.recentProgress:
        if p.sources and p.sources[0].latestOffset:
            out.append(json.loads(p.sources[0].latestOffset).get(topic, {}))
    return out


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_broker_restarted_with_its_data_lost(
    spark: Any, own_broker: Broker, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """The log ends go below the group's position. failOnDataLoss=true: the query stops with
    DataLossError, reading nothing of the new log. false: it warns, continues from the new
    log end (skipping what is below the old position, as Spark's kafka source does) and reads
    what comes after."""
    servers, topic, table = own_broker.bootstrap_servers, unique("t"), unique("q")
    create_topics(servers, 2, [topic])
    produce_ids(servers, topic, range(100), 2)
    opts = group_options(
        servers, topic, unique("g"), str(tmp_path / "ledger"),
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )  # fmt: skip
    query = start_query(spark, opts, tmp_path / "cp", table)
    try:
        wait_until(lambda: len(ids(spark, table)) == 100, 120, "the first 100 records")
        restart_with_data_lost(own_broker, topic, 2)
        produce_ids(servers, topic, range(1000, 1010), 2)  # offsets 0..4: below position 50
        if fail_on_data_loss:
            with pytest.raises(Exception, match="DataLossError"):
                query.awaitTermination(180)
            error = str(query.exception())
            assert "DataLossError" in error
            # Planned against the new log: it went backwards; or planned in the moment before
            # the topic was recreated: the partitions were gone. Data loss either way.
            # (At 0 when the plan came between the topic's creation and the new records.)
            assert (
                re.search(r"the log ends at [05] but the group's position is 50", error)
                or "assigned partitions no longer exist" in error
            ), error
            assert "failOnDataLoss" in error
        else:
            wait_until(
                lambda: {"0": 5, "1": 5} in latest_seen(query, topic),
                180,
                "a plan against the new log",
            )
            produce_ids(servers, topic, range(2000, 2020), 2)
            wait_until(lambda: set(range(2000, 2020)) <= set(ids(spark, table)), 120, "new records")
            assert query.exception() is None
    finally:
        query.stop()
    got = ids(spark, table)
    assert sorted(set(got)) == got, "a record was read twice"
    assert got[:100] == list(range(100))
    new = {r.id: str(r.partition) for r in spark.table(table).collect() if 1000 <= r.id < 1010}
    if fail_on_data_loss:
        assert not new, "records of the new log were read"
        return
    # Each partition continues from the new log end its first plan saw: 5 skips the new
    # records below the old position; 0 (planned before they were produced) reads them once.
    first = {}
    for ends in latest_seen(query, topic):
        for p, end in ends.items():
            if end < 50:
                first.setdefault(p, end)
    assert set(first.values()) <= {0, 5}, first
    read_from_zero = {p for p, end in first.items() if end == 0}
    assert set(new.values()) <= read_from_zero, (new, first)


def test_broker_frozen_longer_than_the_session_timeout(
    spark: Any, own_broker: Broker, tmp_path: Path
) -> None:
    """A network cut to the broker (here: the broker frozen with SIGSTOP) for longer than the
    session timeout: the group expires the member; after the cut it rejoins and the query
    carries on from the committed offsets. Into the exactly-once sink every record lands once.

    (Into an at-least-once sink a batch planned before the member learnt of the expiry is
    written but never committed, so its records can come again: docs/guarantees.md, "a member
    is fenced or its session expires".)"""
    import os
    import signal

    servers, topic, group = own_broker.bootstrap_servers, unique("t"), unique("g")
    table = tmp_path / "table"
    create_topics(servers, 2, [topic])
    produce_ids(servers, topic, range(50), 2)
    opts = group_options(servers, topic, group, str(tmp_path / "ledger"))
    query = (
        spark.readStream.format("kafka-group").options(**opts).load()
        .selectExpr("cast(cast(value as string) as long) as id", "*")
        .writeStream.format("delta-group")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start(str(table))
    )  # fmt: skip

    def sink_ids() -> list[int]:
        return sorted(table_ids(table)) if (table / "_delta_log").exists() else []

    try:
        wait_until(lambda: len(sink_ids()) == 50, 120, "the first 50 records")
        pid = broker_pid(own_broker)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(10)  # the fault itself: longer than session.timeout.ms (6 s)
        finally:
            os.kill(pid, signal.SIGCONT)
        produce_ids(servers, topic, range(50, 100), 2)
        wait_until(lambda: len(sink_ids()) >= 100, 180, "the records after the cut")
        assert query.exception() is None
    finally:
        query.stop()
    assert sink_ids() == list(range(100)), "a record was lost or written twice"


def test_kafka_restarted_with_its_log_kept_loses_and_repeats_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """Apache Kafka keeps its log across a restart. Records flow into
    the exactly-once sink while the broker goes down for a few seconds and comes back: every
    record lands once, and the group carries on from its committed offsets."""
    with KafkaBroker() as broker:
        servers, topic, total = broker.bootstrap_servers, unique("t"), 600
        create_topics(servers, 3, [topic])
        # Idempotent, so the producer's own retries across the restart add no duplicates.
        producer = FlowingProducer(
            servers, topic, 3, total, per_s=100, config={"enable.idempotence": "true"}
        )
        table = str(tmp_path / "table")
        group = unique("g")
        opts = group_options(servers, topic, group, str(tmp_path / "ledger"))
        query = (
            spark.readStream.format("kafka-group").options(**opts).load()
            .selectExpr("cast(cast(value as string) as long) as id", "*")
            .writeStream.format("delta-group")
            .option("group.id", group)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="1 second")
            .start(table)
        )  # fmt: skip

        def sink_ids() -> list[int]:
            if not (tmp_path / "table" / "_delta_log").exists():
                return []
            return sorted(table_ids(tmp_path / "table"))

        try:
            producer.start()
            wait_until(lambda: len(sink_ids()) >= 150, 120, "records before the restart")
            broker.restart(down_s=5)
            producer.join(180)
            assert producer.done.is_set()
            wait_until(lambda: len(sink_ids()) >= total, 180, "every record after the restart")
            assert query.exception() is None
        finally:
            query.stop()
        assert sink_ids() == list(range(total)), "a record was lost or written twice"
