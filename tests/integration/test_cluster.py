"""The main job on a Spark standalone cluster (a master and two workers on loopback).

Executors are other processes than the driver here, as on any real cluster: the sink's data
files must go to the object store (S3Proxy), and a sink table on the local disk is refused
(docs/storage.md, "On a cluster").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from spark_cluster import SPARK_HOME, SparkCluster

from spark_groups.ledger.offset_ledger import OffsetLedger
from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.tools.s3_server import S3Server

from support.broker import committed_offsets, produce_ids, unique
from support.options import FAST_GROUP

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
LOG4J2 = ROOT / "conf" / "log4j2.properties"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    """A standalone master with two workers (one core, 1 GB each), for this module."""
    with SparkCluster(workers=2) as running:
        yield running


def job_config(tmp_path: Path, source: dict[str, str], sink: dict[str, object]) -> Path:
    """A config file for jobs/ingest.py (docs/jobs.md)."""

    def section(name: str, values: dict) -> str:
        return f"[{name}]\n" + "".join(
            f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in values.items()
        )

    path = tmp_path / "cluster.toml"
    path.write_text(section("source", source) + section("sink", sink))
    path.chmod(0o600)  # it holds the test server's credentials
    return path


def submit(master: str, conf: Path, tmp_path: Path) -> tuple[int, str, Path]:
    """Run the main job with spark-submit on ``master``; its exit code, output and event log
    folder (Spark's record of which executor ran which task)."""
    events = tmp_path / "events"
    events.mkdir(exist_ok=True)
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", master,
        "--driver-memory", "1g",
        "--executor-memory", "512m",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.eventLog.enabled=true",
        "--conf", f"spark.eventLog.dir=file://{events}",
        "--conf", "spark.eventLog.rolling.enabled=false",  # Spark 4 rolls and compresses
        "--conf", "spark.eventLog.compress=false",
        # The first batch waits for both executors, so both get tasks.
        "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
        "--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2}",
        str(ROOT / "jobs" / "ingest.py"),
        "--conf", str(conf),
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=driver_dir, capture_output=True, text=True, timeout=480)
    return done.returncode, done.stdout + done.stderr, events


def tasks_by_executor(events: Path) -> tuple[str, dict[str, int]]:
    """The application's id, and the number of successful tasks each executor ran (from
    Spark's event log: ``SparkListenerTaskEnd`` events)."""
    (log,) = list(events.iterdir())  # one plain JSON-lines file, named by the app's id
    app = log.name.removesuffix(".inprogress")
    ran: dict[str, int] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        ended = event.get("Event") == "SparkListenerTaskEnd"
        if ended and event["Task End Reason"]["Reason"] == "Success":
            executor = event["Task Info"]["Executor ID"]
            ran[executor] = ran.get(executor, 0) + 1
    return app, ran


def executor_dirs(cluster: SparkCluster, app: str) -> dict[str, Path]:
    """Each executor of ``app`` that a worker launched, by id: its working directory."""
    found: dict[str, Path] = {}
    for i in range(cluster.workers):
        for folder in sorted((cluster.worker_dir(i) / app).glob("*")):
            found[folder.name] = folder
    return found


def source_options(
    servers: str, topic: str, group: str, ledger: str, storage: dict[str, str]
) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": servers,
        "subscribe": topic,
        "group.id": group,
        "offsets.table": ledger,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "150",  # a few batches
        # One task per partition: three tasks a batch keep both one-core executors busy in
        # every stage. Packed into one task a batch, four single-task stages land on one
        # executor one run in eight (seen in CI: {'0': 4}).
        "recordsPerTask": "0",
        **FAST_GROUP,
        **{f"storage.{k}": v for k, v in storage.items()},
    }


def ids_in(table: str, storage: dict[str, str] | None = None) -> list[int]:
    values = DeltaTable(table, storage_options=storage).to_pyarrow_table(columns=["value"])
    return sorted(int(v) for v in values.column("value").to_pylist())


def test_the_main_job_on_two_workers_writes_only_to_the_object_store(
    cluster: SparkCluster,
    bootstrap_servers: str,
    make_topic,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    topic, group = make_topic(3), unique("cluster")
    ledger, table = f"{s3_bucket}/_offsets/{group}", f"{s3_bucket}/tables/{group}"
    storage = s3_server.storage_options()  # aws_conditional_put=etag
    source = source_options(bootstrap_servers, topic, group, ledger, storage)
    conf = job_config(tmp_path, source, {"path": table, "checkpoint": str(tmp_path / "cp")})
    counts = produce_ids(bootstrap_servers, topic, range(600), 3)

    code, output, events = submit(cluster.master_url, conf, tmp_path)
    assert code == 0, output[-4000:]

    # Every record exactly once in the table on S3, read back with delta-rs; the sink's
    # positions, the ledger's (on S3) and Kafka's committed offsets are the log ends.
    assert ids_in(table, storage) == list(range(600)), "a record is missing or written twice"
    files = DeltaTable(table, storage_options=storage).file_uris()
    assert files and all(f.startswith(f"{table}/") for f in files)
    ends = {TopicPartition(topic, p): n for p, n in counts.items()}
    assert committed_positions(table, group, list(ends), storage) == ends
    assert OffsetLedger(ledger, group, storage_options=storage).latest_positions() == ends
    assert committed_offsets(bootstrap_servers, group, topic, 3) == counts

    # The tasks ran on the executors the two workers launched for this application, not in
    # the driver; both workers' executors ran some.
    app, ran = tasks_by_executor(events)
    executors = executor_dirs(cluster, app)
    workers_of = {name: folder.parents[1].name for name, folder in executors.items()}
    assert "driver" not in ran and ran, ran
    assert set(ran) <= set(executors), (ran, executors)
    assert {workers_of[e] for e in ran} == {"worker-0", "worker-1"}, (ran, workers_of)
    assert app in {a["id"] for a in cluster.state()["completedapps"]}

    # The executors wrote nothing beside their logs in their working directories, and no
    # data file or Delta log landed on the local disk (the driver keeps only the checkpoint).
    for folder in executors.values():
        assert sorted(p.name for p in folder.iterdir()) == ["stderr", "stdout"], folder
    local = [p for p in tmp_path.rglob("*") if p.suffix == ".parquet" or p.name == "_delta_log"]
    assert local == []
    assert not [p for p in Path(cluster.dir or "").rglob("*.parquet")]

    # The storage credentials are in no log: the job's output and the executors'.
    executor_logs = {e: (f / "stderr").read_text() for e, f in executors.items()}
    assert all("Running task" in executor_logs[e] for e in ran)  # Spark's INFO lines too
    assert s3_server.secret_key not in output + "".join(executor_logs.values())


def test_a_local_sink_table_on_the_cluster_is_refused_before_anything_is_committed(
    cluster: SparkCluster,
    bootstrap_servers: str,
    make_topic,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    topic, group = make_topic(3), unique("cluster")
    ledger, table = f"{s3_bucket}/_offsets/{group}", tmp_path / "table"
    storage = s3_server.storage_options()
    source = source_options(bootstrap_servers, topic, group, ledger, storage)
    conf = job_config(tmp_path, source, {"path": str(table), "checkpoint": str(tmp_path / "cp")})
    produce_ids(bootstrap_servers, topic, range(300), 3)

    code, output, _ = submit(cluster.master_url, conf, tmp_path)

    # The query fails with the sink's error, naming the option, the master and the way out.
    assert code != 0
    assert "LocalTableOnClusterError: option 'path'" in output, output[-4000:]
    assert f"the sink table '{table}' is a local path" in output
    assert f"spark.master '{cluster.master_url}'" in output and "sharedMount=true" in output
    # Nothing was committed anywhere, and no data file was written: the next run (with a
    # table on the object store) starts from the first record.
    assert committed_offsets(bootstrap_servers, group, topic, 3) == {}
    assert OffsetLedger(ledger, group, storage_options=storage).latest_positions() == {}
    assert not (table / "_delta_log").exists()
    assert not [p for p in tmp_path.rglob("*.parquet")]
    assert not [p for p in Path(cluster.dir or "").rglob("*.parquet")]


def test_local_mode_accepts_a_local_sink_table(spark, bootstrap_servers, make_topic, tmp_path):
    """On local[2] the executors are the driver's process: a local path is one place."""
    topic, group = make_topic(2), unique("local")
    table = tmp_path / "table"
    produce_ids(bootstrap_servers, topic, range(50), 2)
    query = (
        spark.readStream.format("kafka-group")
        .options(**source_options(bootstrap_servers, topic, group, str(tmp_path / "l"), {}))
        .load()
        .writeStream.format("delta-group")
        .option("group.id", group)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(240) and query.exception() is None
    assert spark.conf.get("spark.master").startswith("local")
    assert ids_in(str(table)) == list(range(50))
