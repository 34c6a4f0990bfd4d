"""Our Delta tables opened by delta-spark, the way Spark and Databricks users open them.

The writers stay ours: kafka-group members (delta-rs) in their own processes beside
delta-spark's maintenance, and kafka-group -> delta-group queries in delta-spark's own session
(the tables read back, the table-feature checks).
delta-spark runs in this process, in the tests' session (conftest.py's ``spark``), which
carries its jars and Delta's SQL extension and catalog where delta-spark runs: Spark 4.0 to
4.2, the compatibility lanes (``bash jars/spark-venv``, ``bash jars/fetch delta-spark@4.2``).
Elsewhere (pyspark 4.3) the module is skipped.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.tools.cli import main as cli

from support.broker import produce_ids, unique, wait_until
from support.members import Member, member_spec, stop_all
from support.options import group_options
from support.producers import IdProducer
from support.spark import delta_spark_here, ids_source
from support.tables import sink_commits, table_ids

if not delta_spark_here():
    pytest.skip(
        "delta-spark runs on Spark 4.0 to 4.2 only (its jars and its Python package for this "
        "pyspark are not here): run this module in a compatibility lane, "
        ".cache/venv/spark-4.2/bin/python -m pytest",
        allow_module_level=True,
    )

IDS_DDL = "id BIGINT, topic STRING, partition INT, offset BIGINT"

#: Delta's defaults size its jobs for clusters: 50 tasks to rebuild a snapshot's state, 10,000
#: to list a table for VACUUM. On local[2] (a 2-core machine) those take minutes; 2 each.
SMALL_DELTA_JOBS = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


@pytest.fixture(autouse=True, scope="module")
def small_delta_jobs(spark: Any) -> Iterator[None]:
    """:data:`SMALL_DELTA_JOBS` in the tests' session for this module's tests only."""
    for key, value in SMALL_DELTA_JOBS.items():
        spark.conf.set(key, value)
    yield
    for key in SMALL_DELTA_JOBS:
        spark.conf.unset(key)


def rows(spark: Any, path: Path | str) -> tuple[list[str], list[dict]]:
    """The columns and rows of the table's newest version, read by delta-spark."""
    df = spark.read.format("delta").load(str(path))
    return df.columns, [r.asDict(recursive=True) for r in df.collect()]


def history(spark: Any, path: Path | str) -> list[dict]:
    """``DESCRIBE HISTORY``, oldest first."""
    found = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [r.asDict(recursive=True) for r in found]


def transactions(spark: Any, path: Path | str) -> dict[str, int]:
    """{app id: version} of the table's newest snapshot, as delta-spark sees them."""
    jvm = spark._jvm
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(
        spark._jsparkSession, str(path)
    )
    txns = jvm.scala.jdk.javaapi.CollectionConverters.asJava(pair._2().setTransactions())
    return {t.appId(): int(t.version()) for t in txns}


def log_commits(table: Path, operation: str | None = None) -> list[tuple[int, dict]]:
    """(version, commitInfo) of the table's commits, oldest first (of ``operation`` only)."""
    out = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None and operation in (None, info.get("operation")):
                out.append((int(path.stem), info))
    return out


def concurrent_optimizes(table: Path) -> list[int]:
    """Versions of the OPTIMIZE commits that a sink commit landed inside (read < sink < own)."""
    sink_versions = [v for v, c in log_commits(table) if "spark_groups.ranges" in c]
    return [
        version
        for version, info in log_commits(table, "OPTIMIZE")
        if any(info["readVersion"] < v < version for v in sink_versions)
    ]


def into_delta_group(spark: Any, opts: dict, checkpoint: Path, table: Path) -> Any:
    """A kafka-group -> delta-group AvailableNow query into ``table`` in delta-spark's own
    session (this one), started."""
    return (
        ids_source(spark, opts, checkpoint)
        .writeStream.format("delta-group")
        .option("group.id", opts["group.id"])
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )


def test_delta_spark_reads_the_ledger_the_rebalance_history_and_the_sink_table(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[40, 100])
    group, table, ledger = unique("g"), tmp_path / "table", tmp_path / "ledger"
    # kafka-group -> delta-group in delta-spark's own session (this one), to its end. One task
    # per partition: a file each (a task's rows are one file), so that optimize has files to
    # compact and vacuum files to delete, on every Spark line.
    checkpoint = tmp_path / "cp"
    opts = group_options(bootstrap_servers, topic, group, str(ledger), recordsPerTask="0")
    query = into_delta_group(spark, opts, checkpoint, table)
    assert query.awaitTermination(300), "the AvailableNow query did not end in 300 s"
    assert query.exception() is None
    assert len(list(table.glob("*.parquet"))) >= 3
    # A copy of the table compacted and vacuumed by spark-groups (docs/cli.md#optimize).
    compacted = tmp_path / "compacted"
    shutil.copytree(table, compacted)
    DeltaTable(str(compacted)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 hours"}
    )
    for command in (["optimize"], ["vacuum", "--retain-hours", "0", "--members-stopped"]):
        done = CliRunner().invoke(cli, [*command, str(compacted)])
        assert done.exit_code == 0, done.output
    assert len(list(compacted.glob("*.parquet"))) == 1

    columns, sink_rows = rows(spark, table)
    assert columns == ["id", "topic", "partition", "offset"]
    assert sorted(r["id"] for r in sink_rows) == list(range(300))
    assert all(r["id"] % 3 == r["partition"] and r["topic"] == topic for r in sink_rows)
    # DESCRIBE HISTORY: every sink commit, written by delta-rs, as appends.
    sink_history = history(spark, table)
    sink_versions = {c["version"] for c in sink_history if c["operation"] == "WRITE"}
    assert sink_versions and all(c["engineInfo"].startswith("delta-rs") for c in sink_history), (
        sink_history
    )
    # It shows each sink commit's transaction versions (Delta's userMetadata).
    shown: dict[str, int] = {}
    for commit in sink_history:
        if commit["version"] in sink_versions:
            meta = json.loads(commit["userMetadata"])
            assert meta["group"] == group
            shown.update(meta["txns"][topic])
    assert shown == {str(p): n for p, n in counts.items()}
    # The sink's transaction ids, as delta-spark's snapshot has them: one per partition, at
    # the partition's end; the same positions the sink resumes from.
    table_id = DeltaTable(str(table)).metadata().id
    sink_txns = transactions(spark, table)
    assert sink_txns == {
        f"spark_groups:{table_id}:{topic}:{p}:{group}": n for p, n in counts.items()
    }
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert committed_positions(str(table), group, tps) == {
        TopicPartition(topic, p): n for p, n in counts.items()
    }
    # Compacted and vacuumed: the same rows and transaction ids (and the maintenance lease's).
    by_id = lambda found: sorted(found, key=lambda r: r["id"])  # noqa: E731
    assert by_id(rows(spark, compacted)[1]) == by_id(sink_rows)
    lease = f"spark_groups:{table_id}:maintenance"
    after = transactions(spark, compacted)
    assert {k: v for k, v in after.items() if k != lease} == sink_txns
    assert {"OPTIMIZE", "VACUUM END"} <= {c["operation"] for c in history(spark, compacted)}

    # The ledger: its newest row per partition is the partition's end.
    ledger_columns, ledger_rows = rows(spark, ledger)
    assert {"topic", "partition"} <= set(ledger_columns)
    newest: dict[int, dict] = {}
    for r in ledger_rows:
        if r["topic"] == topic and (
            r["partition"] not in newest or r["batch"] > newest[r["partition"]]["batch"]
        ):
            newest[r["partition"]] = r
    assert set(newest) == set(counts)
    assert {p: r["until_offset"] for p, r in newest.items()} == counts

    # The rebalance history: the member got the three partitions (the reader process
    # writes it as it leaves, which on Spark before 4.2 follows the query's end).
    everything = {(topic, p) for p in range(3)}

    def assigned() -> set[tuple[str, int]]:
        if not Path(f"{ledger}_rebalances").exists():
            return set()
        events = rows(spark, f"{ledger}_rebalances")[1]
        return {(e["topic"], e["partition"]) for e in events if e["event"] == "assigned"}

    wait_until(lambda: assigned() == everything, 60, lambda: f"the history: {assigned()}")


@pytest.mark.timeout(1200)  # delta-spark's first OPTIMIZE takes minutes on a busy machine
def test_optimize_vacuum_and_another_writer_beside_two_members_every_record_once(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(4)
    group, table = unique("g"), tmp_path / "table"
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "3 seconds")
    a = Member("A", {**spec, "checkpoint": str(tmp_path / "cp-a")}, logs)
    b = Member("B", {**spec, "checkpoint": str(tmp_path / "cp-b")}, logs)
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=200)
    appended = list(range(-10, 0))  # the other writer's rows
    producer.start()
    try:
        a.start()
        b.start()
        wait_until(lambda: a.commits(table) >= 1 and b.commits(table) >= 1, 240,
                   "both members to commit batches")  # fmt: skip
        at_start = len(sink_commits(table))
        # OPTIMIZE, an append by another writer and VACUUM (default retention), from this
        # process while both members go on committing. An OPTIMIZE is concurrent when a sink
        # commit lands between the version it read and the one it commits as; a quick one can
        # fall between two batches, so OPTIMIZE again (new small files keep arriving) until one
        # was concurrent.
        optimized: list[dict] = []
        deadline = time.monotonic() + 300
        while not concurrent_optimizes(table) and time.monotonic() < deadline:
            optimized.append(spark.sql(f"OPTIMIZE delta.`{table}`").collect()[0]["metrics"])
        other = spark.createDataFrame([(i, "external", None, None) for i in appended], IDS_DDL)
        other.write.format("delta").mode("append").save(str(table))
        spark.sql(f"VACUUM delta.`{table}`").collect()
        assert len(sink_commits(table)) > at_start, "the members stopped committing"
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000
        wait_until(lambda: {i for i in table_ids(table) if i >= 0} >= produced, 180,
                   "every produced id to land")  # fmt: skip
        stop_all((a, b), stop_file)
    finally:
        producer.stop_event.set()
        stop_file.touch()
        a.kill()
        b.kill()

    # An OPTIMIZE was truly concurrent: sink commits landed between the version it read and
    # the version it committed as, and it committed all the same, rewriting files.
    assert concurrent_optimizes(table), (log_commits(table, "OPTIMIZE"), len(optimized))
    assert optimized[0]["numFilesRemoved"] > 0, optimized
    assert [c["operation"] for _, c in log_commits(table, "VACUUM END")] == ["VACUUM END"]
    ids = [r["id"] for r in rows(spark, table)[1]]
    ours = [i for i in ids if i >= 0]
    twice = sorted(i for i, n in Counter(ours).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert set(ours) == produced, f"missing: {sorted(produced - set(ours))[:20]}"
    # The other writer's rows are all there too, once each.
    assert sorted(i for i in ids if i < 0) == appended
    # No batch lost: the sink's transaction versions are the ends of what the members read.
    assert committed_positions(str(table), group, [TopicPartition(topic, p) for p in range(4)])
    # What the sink met: commits made again after a concurrent commit (reported, not required).
    logs_text = a.log_text() + b.log_text()
    print("sink commits retried:", logs_text.count("met a concurrent commit"), optimized)


@pytest.mark.parametrize(
    ("properties", "refused"),
    [
        ({}, None),  # delta-spark's defaults: appendOnly, invariants
        ({"delta.enableDeletionVectors": "true"}, None),
        ({"delta.columnMapping.mode": "name"}, "columnMapping"),
    ],
    ids=["defaults", "deletion-vectors", "column-mapping"],
)
def test_a_table_created_by_delta_spark_is_accepted_or_refused_naming_the_feature(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path, properties, refused
) -> None:
    table = tmp_path / "table"
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(
        f"CREATE TABLE delta.`{table}` ({IDS_DDL}) USING delta"
        + (f" TBLPROPERTIES ({props})" if props else "")
    )
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0].asDict()
    features = set(detail.get("tableFeatures") or [])
    assert refused is None or refused in features, detail
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    # kafka-group -> delta-group in delta-spark's own session, as a user would run it.
    group, checkpoint = unique("g"), tmp_path / "cp"
    opts = group_options(bootstrap_servers, topic, group, str(tmp_path / "ledger"))
    query = into_delta_group(spark, opts, checkpoint, table)
    try:
        ended, failure = query.awaitTermination(240), ""
    except Exception as error:  # StreamingQueryException: the sink's error, by name
        ended, failure = True, str(error)
    finally:
        query.stop()
    assert ended, "the AvailableNow query did not end in 240 s"
    if refused is None:
        assert not failure and query.exception() is None, failure
        assert sorted(r["id"] for r in rows(spark, table)[1]) == list(range(100)), detail
    else:
        assert "SinkFeatureError" in failure or "Delta table feature" in failure, failure
        assert refused in failure
        assert DeltaTable(str(table)).version() == 0, "something was committed"
