"""The exactly-once Delta sink ``delta-group`` in real Spark (local[2]) with a real broker."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F

from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.sink.spark import has_delta, read_delta, read_table
from spark_groups.tools.s3_server import S3Server
from spark_groups.tools.spark_jars import jar_conf

from support.broker import committed_offsets, log_end_offsets, produce_ids, unique, wait_until
from support.members import Member, member_spec, stop_all
from support.options import group_options
from support.producers import IdProducer
from support.spark import delta_spark_here, ids_source, needs_available_now, run_into_sink, source
from support.tables import sink_commits, table_ids


def parquet_files(table: Path) -> set[str]:
    return {p.relative_to(table).as_posix() for p in table.rglob("*.parquet")}


def active_files(table: Path) -> set[str]:
    return {Path(u).relative_to(table).as_posix() for u in DeltaTable(str(table)).file_uris()}


PIPELINE = """
    SELECT id, topic, partition, offset, id * 2 AS doubled, id % 2 AS bucket {extra}
    FROM (SELECT cast(cast(value AS string) AS long) AS id, topic, partition, offset
          FROM source)
    WHERE id % 7 != 3 AND id % 100 < 90
"""


@needs_available_now
def test_filtered_mapped_pipeline_lands_each_record_once_also_when_a_batch_is_replayed(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[50, 7, 100])
    group, table, cp = unique("g"), tmp_path / "table", tmp_path / "cp"
    ledger = str(tmp_path / "ledger")
    # The first run is its own Spark application, so its group member is certainly gone when
    # it ends. (In this session's Spark, the reader process of an ended query sometimes
    # vanishes without LeaveGroup; the embedded broker then shows the group STABLE until the
    # next join, which is fine for the join but not for tests that wait for EMPTY.)
    first = Member(
        "first",
        {
            "servers": bootstrap_servers, "topic": topic, "group": group, "table": str(table),
            "ledger": ledger, "checkpoint": str(cp), "trigger": "availableNow",
            "sql": PIPELINE.format(extra=""), "sink_options": {"partitionBy": "bucket"},
        },
        tmp_path,
    )  # fmt: skip
    # run: no process of it may stay a member of the group
    assert first.run(240) == 0, first.log_text()[-3000:]

    expected = {i for i in range(300) if i % 7 != 3 and i % 100 < 90}
    got = read_delta(spark, str(table))
    assert [f.name for f in got.schema.fields] == [
        "id", "topic", "partition", "offset", "doubled", "bucket",
    ]  # fmt: skip
    rows = got.select("id", "doubled", "partition", "offset").collect()
    assert sorted(r.id for r in rows) == sorted(expected)  # each once
    assert all(r.doubled == 2 * r.id for r in rows)
    assert all(r.id % 3 == r.partition for r in rows)
    # The transaction versions are the planned ends, even where the filter dropped the tail.
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert committed_positions(str(table), group, tps) == {
        TopicPartition(topic, p): n for p, n in counts.items()
    }
    assert DeltaTable(str(table)).metadata().partition_columns == ["bucket"]
    commits_before = len(DeltaTable(str(table)).history())

    # Make Spark replay the last batch: drop its entry from the checkpoint's commit log, as
    # a crash between the sink's commit and Spark's commit log would.
    last = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    produce_ids(bootstrap_servers, topic, range(300, 360), 3)
    source(
        spark, group_options(bootstrap_servers, topic, group, ledger), cp
    ).createOrReplaceTempView("source")
    pipeline = spark.sql(PIPELINE.format(extra=", 'v2' AS note"))  # a new column
    error = run_into_sink(
        spark, pipeline, table, cp, group, partitionBy="bucket", mergeSchema="true"
    )
    assert error is None

    new = {i for i in range(300, 360) if i % 7 != 3 and i % 100 < 90}
    expected |= new
    got = read_delta(spark, str(table))
    ids = [r.id for r in got.select("id").collect()]
    assert sorted(ids) == sorted(expected), "a record is missing or written twice"
    assert len(ids) == len(set(ids))
    history = DeltaTable(str(table)).history()
    # The replayed batch committed nothing; the new batch added the column (mergeSchema).
    assert [h.get("spark_groups.batch") for h in history].count(str(last)) == 1
    assert len(history) > commits_before
    notes = {(r.id, r.note) for r in got.select("id", "note").collect()}
    assert {i for i, n in notes if n == "v2"} == new
    assert {n for i, n in notes if i < 300} == {None}


def test_a_pipeline_without_the_kafka_columns_fails_clearly(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(1)
    produce_ids(bootstrap_servers, topic, range(10), 1)
    group = unique("g")
    opts = group_options(bootstrap_servers, topic, group, None)
    df = source(spark, opts, tmp_path / "cp")
    projected = df.selectExpr("cast(value as string) as id", "partition")
    table = tmp_path / "table"
    error = run_into_sink(spark, projected, table, tmp_path / "cp", group)
    assert error is not None
    text = str(error)
    assert "SinkError" in text and "missing: topic, offset" in text
    assert not (table / "_delta_log").exists()


@needs_available_now
def test_a_failed_task_leaves_the_table_unchanged_and_no_files(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(80), 2)
    group, table, cp = unique("g"), tmp_path / "table", tmp_path / "cp"
    # Two batches of 40 records: ids 0..39, then 40..79.
    opts = group_options(
        bootstrap_servers, topic, group, str(tmp_path / "ledger"), maxOffsetsPerTrigger="40"
    )

    # In the second batch, the task of partition 1 fails late (after partition 0's task has
    # written its file): one of its rows loses its offset, which the sink's writer refuses.
    @F.udf("long")
    def lose_offset(record_id, offset):  # no type hints: Spark would read them as a UDF kind
        if record_id == 61:
            time.sleep(4)
            return None
        return offset

    df = ids_source(spark, opts, cp).withColumn("offset", lose_offset("id", "offset"))
    error = run_into_sink(spark, df, table, cp, group)
    assert error is not None and "null 'offset'" in str(error)

    # The first batch is in the table, nothing of the second.
    assert DeltaTable(str(table)).version() == 1  # 0: created, 1: the first batch
    tps = [TopicPartition(topic, p) for p in range(2)]
    assert committed_positions(str(table), group, tps) == {tp: 20 for tp in tps}
    assert sorted(table_ids(table)) == list(range(40))
    # Spark's abort deleted partition 0's file; the failed task deleted its own.
    assert parquet_files(table) == active_files(table)


def test_read_delta_reads_exactly_the_files_of_one_version(spark, tmp_path: Path) -> None:
    table = tmp_path / "table"
    first = pa.table({"id": list(range(10)), "region": ["a b:c/d"] * 5 + [None] * 5})
    write_deltalake(str(table), first, partition_by=["region"])
    for start in (10, 20, 30):
        more = pa.table({"id": list(range(start, start + 10)), "region": ["eu"] * 10})
        write_deltalake(str(table), more, mode="append", partition_by=["region"])
    DeltaTable(str(table)).optimize.compact()  # removes the small files, adds compacted ones

    # The folder still holds the removed files: reading it directly counts rows twice.
    assert spark.read.parquet(str(table)).count() > 40
    df = read_delta(spark, str(table))
    assert df.count() == 40
    assert sorted(r.id for r in df.select("id").collect()) == list(range(40))
    regions = {(r.region, r.n) for r in df.groupBy("region").agg(F.count("*").alias("n")).collect()}
    assert regions == {("a b:c/d", 5), (None, 5), ("eu", 30)}
    # A pinned version sees its own files only.
    assert read_delta(spark, str(table), version=0).count() == 10
    assert read_delta(spark, str(table), version=1).count() == 20
    # read_table: spark.read.format("delta") where the session has delta-spark (the lanes of
    # Spark 4.0 to 4.2), else read_delta; the same rows either way.
    assert has_delta(spark) == delta_spark_here()
    assert read_table(spark, str(table), version=1).count() == 20


# ---------------------------------------------------------------------- two member processes


def partitions_written(commits: list[dict], member: str) -> set[str]:
    """The Kafka partitions (``topic-p``) that ``member``'s sink commits wrote rows for."""
    out = set()
    for c in commits:
        if c["spark_groups.member"] == member:
            ranges = json.loads(c["spark_groups.ranges"])
            out |= {f"{topic}-{p}" for topic, parts in ranges.items() for p in parts}
    return out


def on_s3(spec: dict, s3: S3Server, bucket: str) -> tuple[dict, dict[str, str], dict[str, str]]:
    """``spec`` with the sink table and the ledger (and so the history) on S3 in ``bucket``
    (``s3://NAME``, conditional put), the members' checkpoints (by member name) on
    ``s3a://NAME/`` (Hadoop's S3A in their Spark, ``bash jars/fetch hadoop-aws``), and the
    storage options that reach the bucket."""
    name = bucket.removeprefix("s3://")
    options = s3.storage_options()
    storage = {f"storage.{k}": v for k, v in options.items()}
    s3a = {f"spark.hadoop.{k}": v for k, v in s3.hadoop_conf(name).items()}
    spec = {
        **spec,
        "table": f"{bucket}/table",
        "ledger": f"{bucket}/_offsets/{spec['group']}",
        "source_options": storage,
        "sink_options": storage,
        "spark_conf": {**jar_conf("hadoop-aws"), **s3a},
    }
    return spec, {m: f"s3a://{name}/_checkpoints/{m}" for m in "AB"}, options


def on_azure(spec: dict, azure: Any, container: str) -> tuple[dict, dict[str, str]]:
    """``spec`` with the sink table and the ledger (and so the history) on Azure (Azurite)
    in ``container`` (``az://NAME``), and the storage options that reach it; the members'
    checkpoints stay local (Spark would need hadoop-azure for ``abfss://``)."""
    options = azure.storage_options()
    storage = {f"storage.{k}": v for k, v in options.items()}
    spec = {
        **spec,
        "table": f"{container}/table",
        "ledger": f"{container}/_offsets/{spec['group']}",
        "source_options": storage,
        "sink_options": storage,
    }
    return spec, options


@pytest.mark.parametrize("store", ["local", "s3", "azure"])
def test_two_member_processes_one_killed_mid_batch_every_id_exactly_once(
    bootstrap_servers: str, make_topic, tmp_path: Path, store: str, request
) -> None:
    """Two member processes, a producer running, one member SIGKILLed and restarted: every
    record lands once, and the table's, the ledger's and Kafka's positions reach the log
    ends. ``s3``: every table on S3 (S3Proxy, conditional put), checkpoints on ``s3a://``;
    ``azure``: every table on Azure (Azurite), checkpoints local."""
    topic = make_topic(4)
    group = unique("g")
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "3 seconds")
    checkpoints = {"A": str(tmp_path / "cp-a"), "B": str(tmp_path / "cp-b")}
    options: dict[str, str] | None = None
    if store == "s3":
        s3 = request.getfixturevalue("s3_server")
        spec, checkpoints, options = on_s3(spec, s3, request.getfixturevalue("s3_bucket"))
    elif store == "azure":
        azure = request.getfixturevalue("azure_server")
        spec, options = on_azure(spec, azure, request.getfixturevalue("azure_container"))
    table = spec["table"]
    a = Member("A", {**spec, "checkpoint": checkpoints["A"]}, logs)
    b = Member("B", {**spec, "checkpoint": checkpoints["B"]}, logs)
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=150)
    producer.start()
    try:
        a.start()
        b.start()
        wait_until(lambda: a.commits(table, options) >= 2 and b.commits(table, options) >= 1,
                   240, "both members to commit batches")  # fmt: skip
        # Kill A right after its next sink commit: the sink holds that batch, but A's ledger
        # and Kafka commits (at its next trigger) never happen, so whoever takes A's
        # partitions resumes one batch behind the sink.
        seen = a.commits(table, options)
        wait_until(lambda: a.commits(table, options) > seen, 60, "A's next commit")
        a.kill()
        a_partitions = partitions_written(sink_commits(table, options), "A")
        killed_at = len(sink_commits(table, options))
        # B takes A's partitions over after the session timeout and commits them.
        wait_until(
            lambda: (
                partitions_written(sink_commits(table, options)[killed_at:], "B") & a_partitions
            ),
            90,
            "B to take over A's partitions",
        )
        a.start()  # restarted with its checkpoint: Spark replays its unfinished batch
        restarted_from = a.commits(table, options)
        wait_until(
            lambda: a.commits(table, options) > restarted_from, 180, "the restarted A to commit"
        )
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000
        wait_until(
            lambda: set(table_ids(table, options)) >= produced, 120, "every produced id to land"
        )
        # The table's, the ledger's and Kafka's positions reach the log ends (the ledger and
        # Kafka at the trigger after the sink's commit).
        ends = log_end_offsets(bootstrap_servers, topic, 4)
        positions = {TopicPartition(topic, p): end for p, end in ends.items()}
        ledger = OffsetLedger(spec["ledger"], group, storage_options=options)
        wait_until(
            lambda: (
                committed_positions(table, group, list(positions), options) == positions
                and ledger.latest_positions() == positions
                and committed_offsets(bootstrap_servers, group, topic, 4) == ends
            ),
            90,
            "the sink's, the ledger's and Kafka's positions to reach the log ends",
        )
        stop_all((a, b), stop_file)
    finally:
        producer.stop_event.set()
        a.kill()
        b.kill()

    ids = table_ids(table, options)
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert set(ids) == produced, f"missing: {sorted(produced - set(ids))[:20]}"
    assert len(ids) == len(produced)
    # The sink did fence: rows read again after the kill were dropped, not written.
    fenced = a.log_text() + b.log_text()
    assert "already in the table" in fenced or "straddles" in fenced
    if options is not None:
        secrets = [v for k, v in options.items() if k.endswith(("_key", "_key_id"))]
        assert secrets and not any(s in fenced for s in secrets), "a credential in a log"
