"""A mixed group: two Spark members writing one delta-group table and a plain consumer
service written with kafka-python, in one consumer group (range assignment).

Partitions move from Spark to the service and back several times (the service joins and
leaves), and a Spark member is killed with SIGKILL while the service runs, then restarted.
When a Spark member takes a partition back, it resumes where the service committed, past
the table's offset: the sink must account for the range the service handled instead of
halting every member (issue 13). In the end no record is lost (the table plus the
service's output hold every produced id), none is in the table twice, the table records
the ranges committed outside it, no member failed, and the group is caught up.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from spark_groups.offsets import commit_metadata

from kafka_python_service import KafkaPythonService
from support.broker import broker_kind, unique, wait_until
from support.members import Member, member_spec, stop_all
from support.producers import IdProducer
from support.tables import sink_commits, table_ids

PARTITIONS = 4

pytestmark = pytest.mark.skipif(
    broker_kind() != "kafka", reason="a kafka-python service in the group (Apache Kafka lane)"
)


def outside_ranges(table: Path) -> list[dict]:
    """The ``spark_groups.outside`` entries of the sink's commits (ranges another consumer
    of the group committed)."""
    out = []
    for c in sink_commits(table):
        value = json.loads(c.get("spark_groups.outside", "{}"))
        if value:
            out.append(value)
    return out


def committed_and_ends(servers: str, group: str, topic: str) -> tuple[dict, dict]:
    """The group's committed offsets (with metadata) and the log ends, per partition."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = {
            p.partition: (p.offset, p.metadata) for p in consumer.committed(tps, timeout=30)
        }
        ends = {p: consumer.get_watermark_offsets(tp, timeout=30)[1] for p, tp in enumerate(tps)}
        return committed, ends
    finally:
        consumer.close()


def test_a_plain_consumer_handing_partitions_back_and_forth_loses_and_duplicates_nothing(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(PARTITIONS)
    group, table = unique("mixed"), tmp_path / "table"
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "2 seconds")
    spec["source_options"] = {
        "partition.assignment.strategy": "range",  # as the service's: one assignor per group
        "sink.table": str(table),
    }
    a = Member("A", {**spec, "checkpoint": str(tmp_path / "cp-a")}, logs)
    b = Member("B", {**spec, "checkpoint": str(tmp_path / "cp-b")}, logs)
    producer = IdProducer(bootstrap_servers, topic, PARTITIONS, per_second=100)
    services: list[KafkaPythonService] = []

    def service_round(kill_a: bool) -> None:
        """The service joins, takes partitions, processes and commits; (A is killed and
        restarted meanwhile); the service leaves and Spark takes its partitions back."""
        service = KafkaPythonService(bootstrap_servers, topic, group)
        services.append(service)
        service.start()
        wait_until(lambda: service.commits >= 5, 120, "the service to process and commit")
        if kill_a:
            a.kill()
            wait_until(lambda: service.commits >= 15, 120, "the service to go on")
            a.start()  # restarted from its checkpoint
        seen = len(sink_commits(table))
        service.stop()
        # Spark resumes the service's partitions from its commits: the table gets past them.
        wait_until(lambda: len(sink_commits(table)) >= seen + 4, 180, "Spark to read on")

    producer.start()
    try:
        a.start()
        b.start()
        wait_until(lambda: a.commits(table) >= 1 and b.commits(table) >= 1, 180,
                   "both members to commit batches")  # fmt: skip
        service_round(kill_a=False)
        service_round(kill_a=False)
        service_round(kill_a=True)
        wait_until(lambda: len(outside_ranges(table)) >= 2, 120, "handovers in the table")
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000

        def handled() -> set[int]:
            return set(table_ids(table)) | {i for s in services for i in s.seen}

        wait_until(lambda: handled() >= produced, 180, "every produced id to be handled")

        def caught_up() -> bool:
            committed, ends = committed_and_ends(bootstrap_servers, group, topic)
            return all(committed[p][0] == ends[p] for p in range(PARTITIONS))

        wait_until(caught_up, 120, "the group to be caught up")
        stop_all((a, b), stop_file)
    finally:
        producer.stop_event.set()
        for s in services:
            s.stop_event.set()
        a.kill()
        b.kill()

    ids = table_ids(table)
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"written twice into the table: {twice[:20]}"
    missing = produced - set(ids) - {i for s in services for i in s.seen}
    assert not missing, f"lost: {sorted(missing)[:20]}"
    # The table says which ranges another consumer committed, and who: the service.
    for entry in outside_ranges(table):
        for parts in entry.values():
            for since, until, by in parts.values():
                assert since < until
                assert "another consumer" in by
    # Every Spark commit in Kafka says who made it.
    committed, _ = committed_and_ends(bootstrap_servers, group, topic)
    assert all(commit_metadata.read(md).ours for _, md in committed.values()), committed
    logs_text = a.log_text() + b.log_text()
    assert "SinkGapError" not in logs_text
    assert "Holding" not in logs_text


def test_an_unexplained_gap_holds_the_partition_until_accept_gap_and_fails_no_member(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """A gap nothing accounts for (here: the group reset forward past records the table
    never got) does not fail the query: the partition is held, the others are read, describe
    shows the gap, and ``spark-groups accept-gap`` releases it."""
    from click.testing import CliRunner

    from spark_groups.metrics import coordinator_metrics
    from spark_groups.offsets import TopicPartition
    from spark_groups.sink import committed_positions
    from spark_groups.tools.cli import main

    from support.broker import produce_ids
    from support.options import group_options
    from support.spark import ids_source, run_into_sink

    topic, group = make_topic(2), unique("held")
    table, ledger = tmp_path / "table", str(tmp_path / "ledger")
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    opts = group_options(bootstrap_servers, topic, group, ledger, **{"sink.table": str(table)})
    produce_ids(bootstrap_servers, topic, range(100), 2)
    error = run_into_sink(spark, ids_source(spark, opts), table, tmp_path / "cp1", group)
    assert error is None, error
    assert committed_positions(str(table), group, [p0, p1]) == {p0: 50, p1: 50}
    produce_ids(bootstrap_servers, topic, range(100, 200), 2)
    # An operator skips p0's records [50, 70): neither the table nor anyone else has them.
    runner = CliRunner()
    target = f'offsets-json:{{"{topic}": {{"0": 70}}}}'
    reset = runner.invoke(
        main, ["reset", group, "-b", bootstrap_servers, "--offsets-table", ledger, "--to", target]
    )
    assert reset.exit_code == 0, reset.output

    query = (
        ids_source(spark, opts)
        .writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(tmp_path / "cp2"))
        .trigger(processingTime="1 second")
        .start(str(table))
    )
    try:
        # p1 goes on; p0 is held: not read, not failed.
        wait_until(lambda: committed_positions(str(table), group, [p1]).get(p1) == 100, 120,
                   "p1 to be read on")  # fmt: skip
        wait_until(
            lambda: any(m.get("held_partitions") == 1
                        for m in coordinator_metrics(query.lastProgress)),
            60, "the held partition in the metrics",
        )  # fmt: skip
        assert query.exception() is None and query.isActive
        assert committed_positions(str(table), group, [p0]) == {p0: 50}
        described = runner.invoke(main, ["describe", group, "-b", bootstrap_servers,
                                         "--offsets-table", ledger,
                                         "--sink-table", str(table)])  # fmt: skip
        assert described.exit_code == 0, described.output
        assert "sink gap [50, 70)" in described.output

        accepted = runner.invoke(main, ["accept-gap", group, "--sink-table", str(table),
                                        "--partition", f"{topic}:0", "--until", "70",
                                        "--offsets-table", ledger])  # fmt: skip
        assert accepted.exit_code == 0, accepted.output
        wait_until(lambda: committed_positions(str(table), group, [p0]).get(p0) == 100, 120,
                   "p0 to be read on after accept-gap")  # fmt: skip
        assert query.exception() is None
    finally:
        query.stop()
    ids = table_ids(table)
    assert len(ids) == len(set(ids))
    skipped = {i for i in range(100, 200) if i % 2 == 0}
    skipped = set(sorted(skipped)[:20])  # p0's offsets 50..69 are ids 100, 102, ..., 138
    assert set(ids) == set(range(200)) - skipped
