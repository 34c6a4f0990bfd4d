"""Hadoop's and Databricks' path schemes on real storage: ``s3a://`` and ``s3n://`` on a real
S3-compatible server (S3Proxy), ``dbfs:/`` on a local folder named as the DBFS mount
(``SPARK_GROUPS_DBFS_MOUNT``, docs/storage.md): delta-rs and pyarrow directly, and one
``kafka-group`` query into the ``delta-group`` sink with every path given as ``dbfs:/``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from confluent_kafka import Consumer
from deltalake import DeltaTable

from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import BatchOffset, TopicPartition
from spark_groups.sink.plan import read_batch_plan
from spark_groups.storage import checkpoint
from spark_groups.storage.delta import append, open_table
from spark_groups.storage.files import location
from spark_groups.storage.paths import DBFS_MOUNT_ENV
from spark_groups.tools.s3_server import S3Server

from support.broker import produce_ids, unique
from support.launch import ROOT
from support.members import Member

pytestmark = pytest.mark.timeout(120)

OFFSET_LOG = (
    "v1\n"
    '{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
    '{"v":1,"batch":0,"ranges":{"orders":{"0":[0,5]}}}\n'
)


def test_a_table_written_as_s3n_reads_back_as_s3a_and_s3(
    s3_server: S3Server, s3_bucket: str
) -> None:
    bucket = s3_bucket.removeprefix("s3://")
    options = s3_server.storage_options()  # conditional put on
    append(f"s3n://{bucket}/orders", pa.table({"id": [1, 2, 3]}), options)
    append(f"s3a://{bucket}/orders", pa.table({"id": [4]}), options)

    for uri in (f"s3a://{bucket}/orders", f"s3://{bucket}/orders"):
        table = open_table(uri, options)
        assert table is not None and table.version() == 1
        assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4]
    # pyarrow (the sink's data files) sees the same objects through s3a://
    where = location(f"s3a://{bucket}/orders", options)
    infos = where.fs.get_file_info(pafs.FileSelector(where.path, recursive=True))
    data = [i.path for i in infos if i.path.endswith(".parquet")]
    assert len(data) == 2
    assert len(DeltaTable(f"s3://{bucket}/orders", storage_options=options).file_uris()) == 2


def test_a_checkpoint_on_s3a_is_read_with_the_storage_options(
    s3_server: S3Server, s3_bucket: str
) -> None:
    bucket = s3_bucket.removeprefix("s3://")
    fs = s3_server.filesystem()
    with fs.open_output_stream(f"{bucket}/chk/offsets/0") as out:
        out.write(OFFSET_LOG.encode())
    with fs.open_output_stream(f"{bucket}/chk/commits/0") as out:
        out.write(b"v1\n{}\n")
    options = s3_server.storage_options()
    chk = f"s3a://{bucket}/chk"

    plan = read_batch_plan(chk, 0, options)
    assert [r.until_offset for r in plan.ranges.values()] == [5]
    assert list(plan.ranges) == [TopicPartition("orders", 0)]
    batch = BatchOffset.from_json(json.loads(OFFSET_LOG.splitlines()[2]))
    assert checkpoint.spark_batch_id(chk, batch, options) == 0
    assert checkpoint.is_committed(chk, 0, options)
    assert not checkpoint.is_committed(chk, 1, options)


def test_a_table_on_dbfs_lands_below_the_mount_with_the_single_writer_opt_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = tmp_path / "dbfs"
    mount.mkdir()
    monkeypatch.setenv(DBFS_MOUNT_ENV, str(mount))
    options = {"allow_unsafe_rename": "true"}  # delta-rs' mounted-storage commit

    append("dbfs:/pipelines/orders", pa.table({"id": [1, 2]}), options)
    append("dbfs:/pipelines/orders", pa.table({"id": [3]}), options)

    assert (mount / "pipelines" / "orders" / "_delta_log" / f"{1:020d}.json").is_file()
    table = open_table("dbfs:/pipelines/orders", options)
    assert table is not None and table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    assert open_table(str(mount / "pipelines" / "orders")) is not None  # the FUSE path


@pytest.mark.timeout(300)
def test_a_query_with_ledger_sink_and_checkpoint_given_as_dbfs_paths_lands_every_record_once(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """One member in its own process (so its Python workers see the mount setting), every
    path of spark_groups written ``dbfs:/...``; Spark's own checkpoint is the FUSE form of
    the same folder (Spark outside Databricks has no ``dbfs`` file system)."""
    mount = tmp_path / "dbfs"
    mount.mkdir()
    topic, group = make_topic(3), unique("dbfs")
    counts = produce_ids(bootstrap_servers, topic, range(200), 3)
    one_writer = {"storage.allow_unsafe_rename": "true"}
    spec = {
        "servers": bootstrap_servers,
        "topic": topic,
        "group": group,
        "member": "a",
        "ledger": "dbfs:/pipelines/_offsets",
        "table": "dbfs:/pipelines/orders",
        "checkpoint": str(mount / "pipelines" / "_checkpoints" / "a"),
        "source_options": {
            **one_writer,
            "sink.table": "dbfs:/pipelines/orders",
            "checkpointLocation": "dbfs:/pipelines/_checkpoints/a",
        },
        "sink_options": one_writer,
        "trigger": "availableNow",
    }
    member = Member("a", spec, tmp_path / "logs")
    assert member.run(240, {DBFS_MOUNT_ENV: str(mount)}) == 0, member.log_text()[-3000:]

    table = DeltaTable(str(mount / "pipelines" / "orders"))
    ids = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(200)), "a record is missing or written twice"
    ends = {TopicPartition(topic, p): counts[p] for p in range(3)}
    ledger = OffsetLedger("dbfs:/pipelines/_offsets", group)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DBFS_MOUNT_ENV, str(mount))
        assert ledger.latest_positions() == ends
    assert (mount / "pipelines" / "_offsets_rebalances" / "_delta_log").is_dir()
    assert not Path("dbfs:").exists() and not (ROOT / "dbfs:").exists()  # the member's cwd

    # A second member of the group (a user's plain consumer service): one writer only, so the
    # query run again is refused, having read and written nothing.
    produce_ids(bootstrap_servers, topic, range(200, 210), 3)
    version = table.version()
    other = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": group, "client.id": "service-b",
         "enable.auto.commit": False, "session.timeout.ms": 6000,
         "partition.assignment.strategy": "cooperative-sticky"}  # the query's
    )  # fmt: skip
    assigned, stop = threading.Event(), threading.Event()
    other.subscribe([topic], on_assign=lambda _, partitions: assigned.set())
    # A live member: it takes part in the rebalances the query's join makes. (Only this thread
    # calls the consumer: confluent-kafka serialises calls, and poll would starve the rest.)
    polling = threading.Thread(target=lambda: [other.poll(0.2) for _ in iter(stop.is_set, True)])
    polling.start()
    try:
        assert assigned.wait(60), "the consumer got no assignment"
        fast = {"kafka.session.timeout.ms": "2000", "kafka.heartbeat.interval.ms": "500"}
        again = {**spec, "source_options": {**spec["source_options"], **fast}}
        refused = Member("a", again, tmp_path / "logs-again")
        assert refused.run(240, {DBFS_MOUNT_ENV: str(mount)}) != 0
    finally:
        stop.set()
        polling.join(10)
        other.close()
    text = refused.log_text()
    assert "OneWriterError" in text and "service-b@" in text, text[-3000:]
    assert DeltaTable(str(mount / "pipelines" / "orders")).version() == version
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DBFS_MOUNT_ENV, str(mount))
        assert ledger.latest_positions() == ends
