"""Two members in one group: a Spark query beside a plain confluent-kafka consumer."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from support.broker import broker_kind, produce_ids, unique, wait_until
from support.options import assignment_options, group_options, plain_consumer_config
from support.spark import source


class PlainMember(threading.Thread):
    """A plain consumer-group member that commits after every record it processes."""

    def __init__(
        self, servers: str, topic: str, group: str, assignment: str = "cooperative-sticky"
    ) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                **plain_consumer_config(servers, group, assignment),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": "false",
            }
        )
        self.topic = topic
        self.seen: list[int] = []
        self.assigned: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        def on_assign(consumer: Consumer, parts: list) -> None:
            self.assigned |= {p.partition for p in parts}

        def on_revoke(consumer: Consumer, parts: list) -> None:
            self.assigned -= {p.partition for p in parts}

        try:
            self.consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
            while not self.stop_event.is_set():
                message = self.consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                self.seen.append(int(message.value()))
                self.consumer.commit(message=message, asynchronous=False)
                time.sleep(0.02)  # a slow service: leaves work for the query
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()  # commits nothing more; sends LeaveGroup


@pytest.mark.parametrize("assignment", ["cooperative-sticky", "consumer"])
def test_query_and_plain_consumer_share_a_group_and_hand_over(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path, assignment: str
) -> None:
    if assignment == "consumer" and broker_kind() == "tansu":
        pytest.skip("Tansu has no KIP-848 (group.protocol=consumer)")
    topic = make_topic(4)
    total = 400
    produce_ids(bootstrap_servers, topic, range(total), 4)
    group, table = unique("g"), unique("q")
    opts = group_options(
        bootstrap_servers, topic, group, str(tmp_path / "ledger"),
        maxOffsetsPerTrigger="20", **assignment_options(assignment),
    )  # fmt: skip
    df = source(spark, opts, tmp_path / "cp")
    query = (
        df.selectExpr("cast(value as string) as id", "partition")
        .writeStream.format("memory")
        .queryName(table)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        wait_until(lambda: spark.table(table).count() > 0, 90, "the query's first rows")
        plain = PlainMember(bootstrap_servers, topic, group, assignment)
        plain.start()
        # The group splits the partitions between the two members.
        wait_until(lambda: len(plain.assigned) == 2, 90, "the plain member to get 2 partitions")
        wait_until(lambda: len(plain.seen) >= 10, 60, "the plain member to process records")
        spark_partitions_during = {
            r.partition for r in spark.table(table).select("partition").distinct().collect()
        }
        assert len(spark_partitions_during) >= 2
        plain.stop_event.set()
        plain.join(30)
        assert plain.error is None
        # The query takes the plain member's partitions over from its committed offsets.
        spark_ids = lambda: [int(r.id) for r in spark.table(table).select("id").collect()]  # noqa: E731
        wait_until(
            lambda: len(set(spark_ids()) | set(plain.seen)) == total, 120, "every record read"
        )
        got = spark_ids()
        assert sorted(set(got) | set(plain.seen)) == list(range(total))  # nothing lost
        twice = sorted(i for i in set(got) if got.count(i) > 1)
        assert not twice, f"the query read {twice} twice (partitions {[i % 4 for i in twice]})"
        assert not set(got) & set(plain.seen), "a record was read by both members"
    finally:
        query.stop()
