"""The scheduled ingest job, run through ``spark-submit`` as cron or an orchestrator would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest

from spark_groups.group.member import GroupMember
from spark_groups.ledger import OffsetLedger

from support.broker import broker_kind, committed_offsets, produce_ids, unique, wait_until
from support.options import FAST_GROUP

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
LOG4J2 = ROOT / "conf" / "log4j2.properties"


def scheduled_config(
    tmp_path: Path, servers: str, topic: str, group: str, **source_overrides: str
) -> Path:
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
            **source_overrides,
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
    """One scheduled run, with the static id of its config. The embedded broker's static
    membership is broken (docs/brokers.md): there the run drops it (--group-instance-id '')."""
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
        # The job's log4j2 config, as docs/jobs.md runs it: Spark at WARN.
        "--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2}",
        str(ROOT / "jobs" / "ingest.py"),
        "--conf", str(conf),
    ]  # fmt: skip
    if broker_kind() == "tansu":
        cmd += ["--group-instance-id", ""]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    except subprocess.TimeoutExpired as exc:  # what the run said before it was stopped
        said = [x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                for x in (exc.stdout, exc.stderr)]  # fmt: skip
        raise AssertionError(f"the run did not end in 400 s:\n{''.join(said)[-6000:]}") from None
    # spark-submit merges the driver script's stderr (its log) into its own stdout.
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return output


class RevocationCounter:
    """A rebalance listener that counts what a member had taken away."""

    def __init__(self) -> None:
        self.revocations = 0

    def on_assigned(self, partitions: frozenset, generation: int) -> None:
        pass

    def on_revoked(self, partitions: frozenset, serve: object) -> None:
        self.revocations += 1

    def on_lost(self, partitions: frozenset) -> None:
        self.revocations += 1


@pytest.mark.skipif(broker_kind() == "tansu", reason="Tansu has no static membership")
def test_scheduled_runs_land_every_record_once_commit_and_rejoin_without_a_rebalance(
    bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Two runs of the scheduled job (conf/scheduled.toml: AvailableNow, a static id) beside
    another member of the group. Each run reads its own partitions to their ends, every record
    once, commits to Kafka and the ledger, and ends with one short line; the second reads only
    what arrived since, and, starting within the session timeout of the first, gets its
    partitions back: the other member sees no rebalance at all."""
    from deltalake import DeltaTable, QueryBuilder

    topic, group = make_topic(3), unique("scheduled")
    # Outlives the gap between the two runs: the end of one spark-submit to the next one's
    # join took over 60 s on this 2-core machine under load (the second run then rebalanced).
    session = {"kafka.session.timeout.ms": "180000"}
    conf = scheduled_config(tmp_path, bootstrap_servers, topic, group, **session)
    counter = RevocationCounter()
    other = GroupMember(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group,
            "session.timeout.ms": "60000",
            "heartbeat.interval.ms": "500",
            "partition.assignment.strategy": "cooperative-sticky",
        },
        [topic],
        counter,
    ).start()
    try:
        wait_until(lambda: len(other.assignment) == 3, 60, "the other member to own the topic")
        first = produce_ids(bootstrap_servers, topic, range(900), 3)
        log = run_job(conf)  # joins (one rebalance for the other member), reads, stays a member
        kept = other.assignment
        revocations = counter.revocations
        assert 0 < len(kept) < 3 and revocations >= 1
        mine = sorted({0, 1, 2} - {tp.partition for tp in kept})
        read = sum(first[p] for p in mine)
        # The end of the run as one short sentence (the full metrics only at DEBUG).
        (summary,) = [ln for ln in log.splitlines() if "run summary:" in ln]
        assert re.search(
            rf"run summary: {read} records in \d+ batch(es)?, lag 0; \d+ rebalances?, \d+ "
            r"barrier waits?, 0 barrier timeouts, 0 failed commits$",
            summary,
        ), summary
        assert len(summary) < 200 and "coordinator metrics" not in log, summary
        # Quiet: none of Spark's INFO start-up wall, one line of ours per batch (200 records at
        # most each, the partitions assigned to it).
        assert " INFO SparkContext:" not in log and " INFO BlockManager" not in log, log[:3000]
        found = rf"batch \d+: (\d+) records, lag \d+, {len(mine)} partitions? assigned"
        batches = re.findall(found, log)
        assert len(batches) >= 2 and sum(map(int, batches)) == read, log[-3000:]
        # The next run reads only what arrived since, with no rebalance for the other member.
        second = produce_ids(bootstrap_servers, topic, range(900, 1050), 3)
        run_job(conf)
        assert counter.revocations == revocations, "the second run rebalanced the group"
        assert other.assignment == kept
    finally:
        other.close()

    query = QueryBuilder().register("t", DeltaTable(str(tmp_path / "table")))
    rows = pa.table(
        query.execute(
            'SELECT count(*) AS n, count(DISTINCT (partition, "offset")) AS d, '
            "count(DISTINCT value) AS v, count(DISTINCT partition) AS p FROM t"
        ).read_all()
    ).to_pylist()[0]
    landed = sum(first[p] + second[p] for p in mine)
    assert rows == {"n": landed, "d": landed, "v": landed, "p": len(mine)}
    # The runs read their own partitions to their ends, and nothing of the other member's.
    ends = {p: first[p] + second[p] for p in mine}
    assert committed_offsets(bootstrap_servers, group, topic, 3) == ends
    ledger = OffsetLedger(str(tmp_path / "ledger"), group).latest_positions()
    assert {tp.partition: offset for tp, offset in ledger.items()} == ends
