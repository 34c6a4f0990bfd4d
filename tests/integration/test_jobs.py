"""The scheduled ingest job, run through ``spark-submit`` as cron or an orchestrator would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
import pyspark
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_groups.ledger import OffsetLedger

from helpers import FAST_GROUP, produce_ids, unique

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


def scheduled_config(tmp_path: Path, servers: str, topic: str, group: str) -> Path:
    """conf/scheduled.toml pointed at this test's broker, topic, group and folders, with
    short session timeouts (the embedded broker joins in about half of it)."""
    raw = tomllib.loads((ROOT / "conf" / "scheduled.toml").read_text())
    source, sink = raw["source"], raw["sink"]
    source.pop("kafka.max.poll.interval.ms")
    source.update(
        {
            "kafka.bootstrap.servers": servers,
            "subscribe": topic,
            "group.id": group,
            "offsets.table": str(tmp_path / "ledger"),
            "maxOffsetsPerTrigger": "200",
            **FAST_GROUP,
        }
    )
    sink.update(path=str(tmp_path / "table"), checkpoint=str(tmp_path / "cp"))

    def section(name: str, values: dict) -> str:
        return f"[{name}]\n" + "".join(
            f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in values.items()
        )

    path = tmp_path / "scheduled.toml"
    path.write_text(section("source", source) + section("sink", sink))
    return path


def run_job(conf: Path) -> str:
    """One scheduled run. The embedded broker's static membership is broken (docs/brokers.md),
    so the run drops the static id with --group-instance-id ''."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    cmd = [
        str(SPARK_SUBMIT),
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--conf", "spark.ui.enabled=false",
        str(ROOT / "jobs" / "ingest.py"),
        "--conf", str(conf),
        "--group-instance-id", "",
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    # spark-submit merges the driver script's stderr (its log) into its own stdout.
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return output


def test_scheduled_runs_land_every_record_once_and_commit(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    from deltalake import DeltaTable, QueryBuilder

    topic, group = make_topic(3), unique("scheduled")
    conf = scheduled_config(tmp_path, bootstrap_servers, topic, group)
    first = produce_ids(bootstrap_servers, topic, range(300), 3)
    log = run_job(conf)
    assert "coordinator metrics at the last batch" in log
    # The next run reads only what arrived since.
    second = produce_ids(bootstrap_servers, topic, range(300, 450), 3)
    run_job(conf)

    query = QueryBuilder().register("t", DeltaTable(str(tmp_path / "table")))
    rows = pa.table(
        query.execute(
            'SELECT count(*) AS n, count(DISTINCT (partition, "offset")) AS d, '
            "count(DISTINCT value) AS v FROM t"
        ).read_all()
    ).to_pylist()[0]
    assert rows == {"n": 450, "d": 450, "v": 450}

    ends = {p: first[p] + second[p] for p in range(3)}
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])
    committed = admin.list_consumer_group_offsets([request])[group].result(30)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == ends
    ledger = OffsetLedger(str(tmp_path / "ledger"), group).latest_positions()
    assert {tp.partition: offset for tp, offset in ledger.items()} == ends
