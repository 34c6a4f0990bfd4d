"""The kafka-group source and the delta-group sink driven from a Spark Connect client.

Databricks serverless compute and shared clusters run notebooks through Spark Connect: the
notebook's Python is a client; the queries, the source's reader process and the sink's
tasks run in the server's Python workers. Here one Connect server per module
(:class:`connect_server.ConnectServer`: local[2], this interpreter for its Python workers, so
they import the same spark_groups) and one client session for its tests, the ``spark``
fixture below (it stands in for conftest.py's classic session in this module).

What a Connect user sees differently from a classic session (each asserted below):

* ``load()`` does not check the options: Connect builds plans lazily, so a bad option fails
  at the first analysis (``start()``, ``df.schema``), as ``pyspark.errors.AnalysisException``
  (``PYTHON_DATA_SOURCE_ERROR``) whose message names spark_groups' error and the option.
* ``spark_groups.register(spark)`` registers with that Connect session only: another session
  of the same server gets ``[DATA_SOURCE_NOT_FOUND] Failed to find the data source:
  kafka-group`` (a ``SparkConnectGrpcException``, not an ``AnalysisException``).

The rest works as in a classic session: exactly-once into Delta, Kafka and ledger commits,
two members of one group, ``coordinator_metrics`` of ``query.lastProgress`` and of a
listener's events (Spark 4.2+; nothing on 4.0 and 4.1, as in a classic session), and
``spark_groups.deadletter`` (``mapInArrow``, pickled by the client).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from connect_server import ConnectServer
from deltalake import DeltaTable
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql.streaming import StreamingQueryListener

import spark_groups
from spark_groups import deadletter
from spark_groups.ledger import OffsetLedger
from spark_groups.metrics import coordinator_metrics
from spark_groups.offsets import TopicPartition
from spark_groups.sink.spark import read_table
from spark_groups.spark.compat import ADMISSION_CONTROL

from support.broker import (
    committed_offsets,
    log_end_offsets,
    produce_ids,
    produce_values,
    unique,
    wait_until,
)
from support.options import group_options
from support.producers import FlowingProducer

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def connect_server() -> Iterator[ConnectServer]:
    """One Spark Connect server for this module's tests."""
    with ConnectServer() as server:
        yield server


@pytest.fixture(scope="module")
def spark(connect_server: ConnectServer) -> Iterator[Any]:
    """A Connect client session with kafka-group and delta-group registered, as a notebook on
    serverless compute has it. The process is marked as a Connect client for the module
    (``SPARK_CONNECT_MODE_ENABLED``, what ``builder.remote()`` sets, so that
    ``pyspark.sql.functions`` build Connect columns) and unmarked afterwards, for the classic
    session of the tests that follow in the same run."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    marked = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    if SparkSession._instantiatedSession is None and not _classic_context_running():
        session = SparkSession.builder.remote(connect_server.url).getOrCreate()
    else:
        # conftest.py's classic session runs in this process (an earlier module used it):
        # the public builder refuses a remote session beside it ([SESSION_ALREADY_EXIST]).
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        session = ConnectSession.builder.remote(connect_server.url).getOrCreate()
    assert isinstance(session, ConnectSession)
    spark_groups.register(session)
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
        if marked is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = marked


def _classic_context_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


# ------------------------------------------------------------------------------ helpers


def group_source(spark: Any, opts: dict, checkpoint: Path) -> Any:
    """``spark.readStream.format("kafka-group")`` as a Connect user writes it: Spark 4.0 and
    4.1 need the query's checkpoint as a source option too (docs/spark-versions.md)."""
    reader = spark.readStream.format("kafka-group").options(**opts)
    if not ADMISSION_CONTROL:
        reader = reader.option("checkpointLocation", str(checkpoint))
    return reader.load()


def ids_of(df: Any) -> Any:
    """The record's id (its value) as a long, and the Kafka columns the sink needs."""
    return df.selectExpr(
        "cast(cast(value as string) as long) as id", "topic", "partition", "offset"
    )


def table_ids(table: Path) -> list[int]:
    """Every id in the newest version of the Delta table (duplicates kept); [] before the
    table exists."""
    if not DeltaTable.is_deltatable(str(table)):
        return []
    return DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()


def members(admin: AdminClient, group: str) -> dict[str, set[int]]:
    """The group's members as the coordinator describes them: member id -> partitions."""
    described = admin.describe_consumer_groups([group])[group].result(10)
    return {
        m.member_id: {tp.partition for tp in m.assignment.topic_partitions}
        for m in described.members
    }


def group_state(admin: AdminClient, group: str) -> str:
    return admin.describe_consumer_groups([group])[group].result(10).state.name


def written_by(table: Path, member: str) -> set[int]:
    """The Kafka partitions the sink commits of ``member`` (sink option ``member``) wrote
    rows of, from the table's commit history."""
    parts: set[int] = set()
    for commit in DeltaTable(str(table)).history():
        if commit.get("spark_groups.member") == member:
            for ranges in json.loads(commit["spark_groups.ranges"]).values():
                parts |= {int(p) for p in ranges}
    return parts


class Collect(StreamingQueryListener):
    """A listener in the client: the coordinator metrics of every progress event."""

    def __init__(self) -> None:
        self.events = 0
        self.metrics: list[dict[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.events += 1
        self.metrics.extend(coordinator_metrics(event.progress))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


# ------------------------------------------------------------------------------ tests


def test_available_now_into_delta_writes_every_id_once_and_commits_everywhere(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[50, 50, 7, 1])
    group, ledger = unique("g"), str(tmp_path / "ledger")
    table, checkpoint = tmp_path / "table", tmp_path / "cp"
    df = group_source(spark, group_options(bootstrap_servers, topic, group, ledger), checkpoint)
    query = (
        ids_of(df)
        .writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(180), "AvailableNow query did not end"
    assert query.exception() is None

    ids = table_ids(table)
    assert sorted(ids) == list(range(300)), (
        f"twice: {[i for i, n in Counter(ids).items() if n > 1]}"
    )
    # Read back through the Connect session too (the notebook's way: Parquet files of the
    # newest version when the server has no delta-spark).
    back = read_table(spark, str(table)).select("id").collect()
    assert sorted(r.id for r in back) == list(range(300))
    # Kafka and the ledger hold the log ends. Spark 4.2+ commits the last batch before an
    # AvailableNow query ends; 4.0/4.1's reader process a moment after (docs/spark-versions.md).
    positions = {TopicPartition(topic, p): n for p, n in counts.items()}
    if ADMISSION_CONTROL:
        assert committed_offsets(bootstrap_servers, group, topic, 3) == counts
    wait_until(
        lambda: committed_offsets(bootstrap_servers, group, topic, 3) == counts,
        60,
        "the group's Kafka offsets to reach the log ends",
    )
    assert OffsetLedger(ledger, group).latest_positions() == positions


def test_two_members_started_from_one_client_share_the_group_and_write_each_id_once(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic, total = make_topic(4), 1200
    group, ledger, table = unique("g"), str(tmp_path / "ledger"), tmp_path / "table"
    opts = group_options(bootstrap_servers, topic, group, ledger)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})

    def start(member: str) -> Any:
        checkpoint = tmp_path / f"cp-{member}"
        return (
            ids_of(group_source(spark, opts, checkpoint))
            .writeStream.format("delta-group")
            .option("group.id", group)
            .option("member", member)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start(str(table))
        )

    producer = FlowingProducer(bootstrap_servers, topic, 4, total, per_s=150)
    queries = [start("A")]
    try:
        wait_until(lambda: list(members(admin, group).values()) == [set(range(4))], 90,
                   "member A to own the 4 partitions")  # fmt: skip
        producer.start()  # records flow while B joins and the partitions move
        queries.append(start("B"))
        wait_until(
            lambda: (
                len(assigned := members(admin, group)) == 2
                and all(assigned.values())
                and set().union(*assigned.values()) == set(range(4))
            ),
            90,
            "two members, each with partitions",
        )
        producer.join(60)
        assert producer.done.is_set()
        wait_until(lambda: set(table_ids(table)) == set(range(total)), 120, "every id to land")
        ends = log_end_offsets(bootstrap_servers, topic, 4)
        wait_until(
            lambda: committed_offsets(bootstrap_servers, group, topic, 4) == ends,
            60,
            "the group's Kafka offsets to reach the log ends",
        )
        for query in queries:
            assert query.isActive, query.exception()
    finally:
        for query in queries:
            query.stop()
    ids = table_ids(table)
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert len(ids) == total
    # Both members wrote rows into the table, and between them every partition.
    a, b = written_by(table, "A"), written_by(table, "B")
    assert a and b and a | b == set(range(4)), (a, b)
    wait_until(lambda: group_state(admin, group) in ("EMPTY", "DEAD"), 60, "both to leave")


def test_coordinator_metrics_reach_the_client_in_progress_and_listener_events(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    opts = group_options(bootstrap_servers, topic, unique("g"), None, maxOffsetsPerTrigger="30")
    listener = Collect()
    spark.streams.addListener(listener)
    try:
        query = (
            group_source(spark, opts, tmp_path / "cp")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), "AvailableNow query did not end"
        assert query.exception() is None
        # p.numInputRows: through Connect, p["numInputRows"] is None (the server's JSON has
        # it per source only); the property sums the sources'.
        progresses = [p for p in query.recentProgress if p.numInputRows]
        assert progresses and query.lastProgress is not None
        # The listener runs in this process, fed by the server.
        wait_until(lambda: listener.events >= len(query.recentProgress), 60, "listener events")
    finally:
        spark.streams.removeListener(listener)
    metrics = [m for p in progresses for m in coordinator_metrics(p)]
    if not ADMISSION_CONTROL:
        # Spark 4.0/4.1 never ask a Python source for its progress: nothing to find, as in a
        # classic session (docs/spark-versions.md); one batch of at most 30 records.
        assert metrics == [] and listener.metrics == []
        assert coordinator_metrics(query.lastProgress) == []
        assert sum(p.numInputRows for p in progresses) == 30
        return
    assert len(metrics) == len(progresses) >= 4  # 100 records, at most 30 per batch
    assert [m["batches_planned"] for m in metrics] == list(range(1, len(metrics) + 1))
    last = coordinator_metrics(query.lastProgress)[-1]
    assert last["assigned_partitions"] == 2 and last["member_id"].startswith("rdkafka-")
    assert last["failed_commits"] == last["lost_partitions"] == 0
    assert [m["batches_planned"] for m in listener.metrics][-1] == len(metrics)


def test_dead_letters_through_connect(
    spark: Any, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """``deadletter.parse`` with a Python parser (``mapInArrow``: the client pickles it, the
    server's workers run it) into two delta-group tables, and with a Column parser."""
    from pyspark.sql import functions as F

    topic = make_topic(1)
    values = [b'{"id": 1, "name": "a"}', b"not json", b'{"id": 2}', b'{"name": "no id"}']
    produce_values(bootstrap_servers, topic, values)

    def to_record(value: bytes | None) -> dict:
        """The user's parser (nested: pickled by value, as a notebook's function is)."""
        data = json.loads(value or b"")
        if not isinstance(data.get("id"), int):
            raise ValueError(f"no numeric id in {data!r}")
        return data

    def run(df: Any, name: str, group: str) -> Path:
        table = tmp_path / name
        query = (
            df.writeStream.format("delta-group")
            .option("group.id", group)
            .option("checkpointLocation", str(tmp_path / f"cp-{name}"))
            .trigger(availableNow=True)
            .start(str(table))
        )
        assert query.awaitTermination(180), "AvailableNow query did not end"
        assert query.exception() is None, query.exception()
        return table

    def records(group: str, name: str) -> Any:
        opts = group_options(bootstrap_servers, topic, group, None)
        return group_source(spark, opts, tmp_path / f"cp-{name}")

    good_group, bad_group = unique("g"), unique("dlq")
    parsed = deadletter.parse(records(good_group, "good"), to_record, "id long, name string")
    good = deadletter.good_rows(parsed).select("parsed.*", "topic", "partition", "offset")
    bad = deadletter.dead_letters(
        deadletter.parse(records(bad_group, "bad"), to_record, "id long, name string")
    )
    good_rows = DeltaTable(str(run(good, "good", good_group))).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["name"]) for r in good_rows) == [(1, "a"), (2, None)]
    dead = DeltaTable(str(run(bad, "bad", bad_group))).to_pyarrow_table().to_pylist()
    assert sorted(r["offset"] for r in dead) == [1, 3]
    errors = {r["offset"]: r[deadletter.ERROR_COLUMN] for r in dead}
    assert errors[1].startswith("JSONDecodeError: ")
    assert errors[3] == "ValueError: no numeric id in {'name': 'no id'}"

    # A Column parser: null means a dead letter.
    name = unique("dl")
    column = F.try_parse_json(F.col("value").cast("string"))
    query = (
        deadletter.dead_letters(deadletter.parse(records(unique("g"), name), column))
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"cp-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "AvailableNow query did not end"
    assert query.exception() is None, query.exception()
    assert [r.offset for r in spark.table(name).collect()] == [1]


def test_errors_a_connect_user_gets(
    spark: Any, connect_server: ConnectServer, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Where Connect differs from a classic session, and what the errors say."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    topic = make_topic(1)
    # 1. A bad option: load() returns (Connect analyses lazily; a classic session raises
    #    there, test_source.py); the query's start() raises, naming spark_groups' error.
    df = (
        spark.readStream.format("kafka-group")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .load()
    )
    with pytest.raises(AnalysisException) as caught:
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp1")).start()
    assert caught.value.getCondition() == "PYTHON_DATA_SOURCE_ERROR"
    assert "spark_groups.errors.OptionError: option 'group.id': is required" in str(caught.value)
    assert not isinstance(caught.value, spark_groups.SparkGroupsError)  # a message, not a class

    # 2. A query that fails in the source: StreamingQueryException, with spark_groups' error.
    opts = group_options(bootstrap_servers, "no-such-topic", unique("g"), None)
    query = (
        group_source(spark, opts, tmp_path / "cp2")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp2"))
        .start()
    )
    with pytest.raises(StreamingQueryException, match="TopicNotFoundError"):
        query.awaitTermination(120)
    assert "topic 'no-such-topic' does not exist" in str(query.exception())

    # 3. Registration is per Connect session: another session of the same server (another
    #    notebook, a job's own session) must call spark_groups.register itself.
    other = ConnectSession.builder.remote(connect_server.url).create()
    try:
        unregistered = other.readStream.format("kafka-group").options(**opts).load()
        with pytest.raises(SparkConnectGrpcException) as caught_other:
            unregistered.schema  # noqa: B018 -- the first analysis
        assert not isinstance(caught_other.value, AnalysisException)
        assert caught_other.value.getCondition() == "DATA_SOURCE_NOT_FOUND"
        assert "Failed to find the data source: kafka-group." in str(caught_other.value)
        spark_groups.register(other)
        fields = group_source(other, opts, tmp_path / "cp3").schema.fieldNames()
        assert fields[:3] == ["key", "value", "topic"]
    finally:
        other.stop()


def test_avro_records_decoded_through_connect_and_a_registry_error_a_connect_user_gets(
    spark: Any, bootstrap_servers: str, make_topic, registry: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(2)
    fields = [{"name": "id", "type": "long"}, {"name": "celsius", "type": ["null", "double"]}]
    schema = {"type": "record", "name": "Reading", "fields": fields}
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(50):
        value = serializer({"id": i, "celsius": None if i % 5 else i / 2},
                           SerializationContext(topic, MessageField.VALUE))  # fmt: skip
        producer.produce(topic, value, partition=i % 2)
    assert producer.flush(30) == 0
    group, table, checkpoint = unique("g"), tmp_path / "table", tmp_path / "cp"
    opts = {**group_options(bootstrap_servers, topic, group, str(tmp_path / "ledger")),
            "value.format": "avro-confluent",
            "schema.registry.url": registry.url}  # fmt: skip
    df = group_source(spark, opts, checkpoint)
    assert [f.name for f in df.schema["value"].dataType.fields] == ["id", "celsius"]
    query = (
        df.select("value.*", "topic", "partition", "offset")
        .writeStream.format("delta-group").option("group.id", group)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
        .start(str(table))
    )  # fmt: skip
    assert query.awaitTermination(180) and query.exception() is None
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(50))
    assert {r["id"]: r["celsius"] for r in rows}[10] == 5.0

    # A subject the registry does not have: the first analysis fails, naming it and the URL.
    missing = {**opts, "value.subject": "no-such-subject"}
    with pytest.raises(AnalysisException) as err:
        group_source(spark, missing, tmp_path / "cp2").schema  # noqa: B018
    assert "SchemaRegistryError" in str(err.value) and "no-such-subject" in str(err.value)
