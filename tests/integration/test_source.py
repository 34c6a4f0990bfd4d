"""The kafka-group source in real Spark (local[2]) against a real broker."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import log_end_offsets
from spark_groups.offsets import TopicPartition as TP
from spark_groups.spark.compat import ADMISSION_CONTROL

from support.broker import committed_offsets, produce_ids, unique, wait_until
from support.options import group_options
from support.spark import needs_available_now, source


def run_available_now(
    spark: Any, opts: dict, checkpoint: Path, sink: str, table: str | None = None
):
    """Run one Trigger.AvailableNow query into a memory table (or a parquet folder)."""
    df = source(spark, opts, checkpoint)
    out = df.selectExpr("cast(value as string) as id", "topic", "partition", "offset")
    writer = out.writeStream.trigger(availableNow=True).option(
        "checkpointLocation", str(checkpoint)
    )
    if table is not None:
        writer = writer.format("memory").queryName(table)
    else:
        writer = writer.format("parquet").option("path", sink)
    query = writer.start()
    assert query.awaitTermination(180), "AvailableNow query did not end"
    assert query.exception() is None
    if not ADMISSION_CONTROL:
        await_left(opts)
    return query


def await_left(opts: dict) -> None:
    """Spark 4.0/4.1: the reader process commits the query's last batch as the query ends,
    a moment after ``awaitTermination`` returns, then leaves the group (docs/spark-versions.md)."""
    admin = AdminClient({"bootstrap.servers": opts["kafka.bootstrap.servers"]})
    group = opts["group.id"]
    wait_until(lambda: group_state(admin, group) in ("EMPTY", "DEAD"), 60, "the member to leave")


def ids_of(spark: Any, table: str) -> list[int]:
    return sorted(int(r.id) for r in spark.table(table).select("id").collect())


def group_state(admin: AdminClient, group: str) -> str:
    """The group's state as the coordinator reports it (STABLE, EMPTY, ...)."""
    return admin.describe_consumer_groups([group])[group].result(10).state.name


def test_available_now_reads_every_record_once_and_commits_everywhere(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    # Chunks of different sizes: the embedded broker under-reports the log end of
    # multi-record batches, so the tail of each partition is a real test.
    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[50, 50, 7, 1, 100])
    group, table = unique("g"), unique("q")
    ledger = str(tmp_path / "ledger")
    opts = group_options(bootstrap_servers, topic, group, ledger)
    run_available_now(spark, opts, tmp_path / "cp", "", table)

    got = spark.table(table).select("id").orderBy("id")
    expected = spark.createDataFrame([(str(i),) for i in range(300)], "id string").orderBy("id")
    assert_df_equality(got, expected, ignore_row_order=True)
    # Offsets: Kafka and the ledger both hold the log end of every partition.
    assert committed_offsets(bootstrap_servers, group, topic, 3) == counts
    positions = OffsetLedger(ledger, group).latest_positions()
    assert positions == {TP(topic, p): n for p, n in counts.items()}
    # The schema is Spark's kafka source's.
    df = source(spark, opts, tmp_path / "cp")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]  # fmt: skip


def test_restart_from_checkpoint_resumes_without_loss_or_duplicates(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    opts = group_options(bootstrap_servers, topic, unique("g"), str(tmp_path / "ledger"))
    sink = str(tmp_path / "sink")
    run_available_now(spark, opts, tmp_path / "cp", sink)
    produce_ids(bootstrap_servers, topic, range(100, 250), 2, chunk_sizes=[3, 60])
    run_available_now(spark, opts, tmp_path / "cp", sink)
    ids = sorted(int(r.id) for r in spark.read.parquet(sink).select("id").collect())
    assert ids == list(range(250))


def test_fresh_checkpoint_same_group_resumes_from_committed_offsets(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(80), 2)
    opts = group_options(bootstrap_servers, topic, unique("g"), str(tmp_path / "ledger"))
    first, second = unique("q"), unique("q")
    run_available_now(spark, opts, tmp_path / "cp1", "", first)
    produce_ids(bootstrap_servers, topic, range(80, 130), 2)
    run_available_now(spark, opts, tmp_path / "cp2", "", second)
    assert ids_of(spark, first) == list(range(80))
    assert ids_of(spark, second) == list(range(80, 130))


def test_resume_takes_the_ledger_when_it_is_ahead_of_kafka(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(40), 1)
    group, ledger = unique("g"), str(tmp_path / "ledger")
    opts = group_options(bootstrap_servers, topic, group, ledger)
    run_available_now(spark, opts, tmp_path / "cp1", "", unique("q"))
    # Move the group's Kafka offset back to 10: the ledger (40) is further and wins.
    # Offsets can only be altered once the query's member has left the group.
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    wait_until(lambda: group_state(admin, group) == "EMPTY", 30, "the group to be empty")
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 10)])
    admin.alter_consumer_group_offsets([request])[group].result(30)
    assert committed_offsets(bootstrap_servers, group, topic, 1) == {0: 10}
    produce_ids(bootstrap_servers, topic, range(40, 50), 1)
    table = unique("q")
    run_available_now(spark, opts, tmp_path / "cp2", "", table)
    assert ids_of(spark, table) == list(range(40, 50))
    assert committed_offsets(bootstrap_servers, group, topic, 1) == {0: 50}


def test_plain_consumer_in_the_group_continues_from_the_query(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(60), 2)
    group = unique("g")
    opts = group_options(bootstrap_servers, topic, group, None)  # Kafka offsets only
    run_available_now(spark, opts, tmp_path / "cp", "", unique("q"))
    produce_ids(bootstrap_servers, topic, range(60, 70), 2)
    # The query's member leaves when Spark ends its reader process (just after the query
    # ends); the embedded broker can wedge a join that races with that leave.
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    wait_until(lambda: group_state(admin, group) == "EMPTY", 30, "the group to be empty")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "6000",
            # Every member of a group must speak the same protocol as the query.
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    seen: list[int] = []
    errors: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(seen) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(str(message.error()))
            else:
                seen.append(int(message.value()))
    finally:
        consumer.close()
    assert sorted(seen) == list(range(60, 70)), errors[-3:]


def test_max_offsets_per_trigger_splits_the_backlog_into_batches(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    opts = group_options(
        bootstrap_servers,
        topic,
        unique("g"),
        None,
        maxOffsetsPerTrigger="25",
        includeHeaders="true",
    )
    table = unique("q")
    if not ADMISSION_CONTROL:
        # Spark 4.0/4.1 run AvailableNow as one batch (docs/spark-versions.md): each run
        # reads one batch of at most maxOffsetsPerTrigger, commits it as the query ends,
        # and the next run goes on from there.
        seen: list[int] = []
        for run in range(8):
            run_available_now(spark, opts, tmp_path / f"cp{run}", "", f"{table}_{run}")
            got = ids_of(spark, f"{table}_{run}")
            assert 0 < len(got) <= 25
            seen += got
            committed = committed_offsets(bootstrap_servers, opts["group.id"], topic, 2)
            assert sum(committed.values()) == len(seen)
            if len(seen) == 100:
                break
        assert sorted(seen) == list(range(100))
        return
    query = run_available_now(spark, opts, tmp_path / "cp", "", table)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert ids_of(spark, table) == list(range(100))
    assert max(sizes) <= 25
    assert len(sizes) >= 4
    last = query.recentProgress[-1]["sources"][0]
    assert log_end_offsets(last) == {topic: {"0": 50, "1": 50}}  # reported for lag


def test_headers_column(spark, bootstrap_servers: str, make_topic, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = make_topic(1)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    producer.produce(topic, value=b"v", headers=[("trace", b"abc"), ("n", None)])
    producer.produce(topic, value=None, key=None)
    producer.flush(10)
    opts = group_options(bootstrap_servers, topic, unique("g"), None, includeHeaders="true")
    df = source(spark, opts, tmp_path / "cp")
    table = unique("q")
    q = (
        df.writeStream.format("memory")
        .queryName(table)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    assert q.awaitTermination(120)
    rows = spark.table(table).orderBy("offset").collect()
    assert [(h.key, h.value) for h in rows[0].headers] == [("trace", b"abc"), ("n", None)]
    assert rows[1].value is None and rows[1].key is None
    assert rows[0].timestampType == 0 and rows[0].timestamp is not None


def test_query_stop_leaves_the_group_promptly(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Spark ends the reader process with SIGTERM; the member must send LeaveGroup so a
    newcomer gets the partitions at once, not after the 20 s session timeout."""
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(20), 2)
    group, table = unique("g"), unique("q")
    opts = group_options(
        bootstrap_servers, topic, group, None, **{"kafka.session.timeout.ms": "20000"}
    )
    df = source(spark, opts, tmp_path / "cp")
    query = (
        df.writeStream.format("memory")
        .queryName(table)
        .trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    wait_until(lambda: spark.table(table).count() == 20, 90, "the query to read 20 records")
    query.stop()
    stopped_at = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    wait_until(lambda: group_state(admin, group) == "EMPTY", 15, "the group to become empty")
    assert time.monotonic() - stopped_at < 10


def test_bad_options_fail_at_load_naming_the_option(spark, bootstrap_servers: str) -> None:
    with pytest.raises(Exception, match=r"option 'group\.id'"):
        spark.readStream.format("kafka-group").option(
            "kafka.bootstrap.servers", bootstrap_servers
        ).option("subscribe", "x").load()
    with pytest.raises(Exception, match=r"option 'kafka\.no\.such\.thing'"):
        spark.readStream.format("kafka-group").option(
            "kafka.bootstrap.servers", bootstrap_servers
        ).option("subscribe", "x").option("group.id", "g").option("kafka.no.such.thing", "1").load()


def test_missing_topic_fails_the_query_with_a_clear_error(
    spark, bootstrap_servers: str, tmp_path: Path
) -> None:
    opts = group_options(bootstrap_servers, "no-such-topic", unique("g"), None)
    df = source(spark, opts, tmp_path / "cp")
    query = (
        df.writeStream.format("memory")
        .queryName(unique("q"))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    with pytest.raises(Exception, match="TopicNotFoundError"):
        query.awaitTermination(120)
    assert "'no-such-topic' does not exist" in str(query.exception())


@needs_available_now
def test_at_most_once_skips_the_batch_spark_replays_after_a_failure(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """deliveryGuarantee=at-most-once in real Spark: a batch that failed is replayed by Spark
    from the checkpoint, and the source reads nothing for it (its offsets were committed when
    it was planned); every other record is read exactly once."""
    topic, group = make_topic(2), unique("amo")
    produce_ids(bootstrap_servers, topic, range(40), 2)
    opts = group_options(
        bootstrap_servers,
        topic,
        group,
        None,
        deliveryGuarantee="at-most-once",
        maxOffsetsPerTrigger="10",
    )
    checkpoint = tmp_path / "chk"
    seen: list[int] = []

    def run(fail_batch: int | None) -> Any:
        def write(df: Any, batch_id: int) -> None:
            if batch_id == fail_batch:
                raise RuntimeError(f"the sink fails batch {batch_id}")
            seen.extend(int(r.id) for r in df.collect())

        df = source(spark, opts, checkpoint)
        query = (
            df.selectExpr("cast(value as string) as id")
            .writeStream.foreachBatch(write)
            .trigger(availableNow=True)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        with pytest.raises(Exception) if fail_batch is not None else contextlib.nullcontext():
            query.awaitTermination(180)
        assert not query.isActive
        return query

    failed = run(fail_batch=1)
    assert "the sink fails batch 1" in str(failed.exception())
    assert len(seen) == 10  # batch 0 only
    lost = json.loads((checkpoint / "offsets" / "1").read_text().splitlines()[-1])["ranges"]
    lost_ids = {
        offset * 2 + int(p)
        for p, (start, until) in lost[topic].items()
        for offset in range(start, until)
    }
    assert len(lost_ids) == 10
    run(fail_batch=None)  # Spark replays batch 1 first, then goes on
    assert sorted(seen) == sorted(set(range(40)) - lost_ids)
    assert committed_offsets(bootstrap_servers, group, topic, 2) == {0: 20, 1: 20}


@needs_available_now
def test_the_ledger_records_the_log_end_at_each_commit(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """50 offsets per batch over 3 x 100 records: each commit's row carries the log end seen
    then (100), so the lag at commit time falls batch by batch to 0 (spark-groups lag-plot)."""
    from spark_groups.tools.lag import lag_at_commit

    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(300), 3)
    group, ledger = unique("g"), str(tmp_path / "ledger")
    opts = group_options(bootstrap_servers, topic, group, ledger, maxOffsetsPerTrigger="50")
    run_available_now(spark, opts, tmp_path / "cp", "", unique("q"))

    history = OffsetLedger(ledger, group).history()
    assert history.num_rows >= 3 * 6  # six batches of ~17 offsets per partition
    assert set(history.column("log_end").to_pylist()) == {100}
    for tp, points in lag_at_commit(history).items():
        lags = [lag for _, lag in points]
        assert lags == sorted(lags, reverse=True) and lags[0] > 50, (tp, lags)
        assert lags[-1] == 0 and counts[tp.partition] == 100
