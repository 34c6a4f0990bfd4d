"""Our Delta tables opened by delta-spark, the way Spark and Databricks users open them.

The writers stay ours: kafka-group members (pyspark 4.3, delta-rs) in their own processes.
delta-spark runs in a separate process, ``delta_spark_process.py``, with pyspark 4.2 (its jars
do not run on 4.3: docs/sink.md, "delta-spark"), from ``bash jars/fetch delta-spark`` and
``bash jars/delta-spark-python``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from test_sink import IdProducer, Member, member_spec, sink_commits, table_ids

from spark_groups.offsets import TopicPartition
from spark_groups.sink import committed_positions
from spark_groups.tools.cli import main as cli
from spark_groups.tools.spark_jars import (
    DELTA_SQL_CONF,
    JarsMissingError,
    delta_spark_python,
    jar_conf,
)

from broker_support import produce_ids, wait_until
from helpers import unique

SIDE_SCRIPT = Path(__file__).with_name("delta_spark_process.py")
IDS_DDL = "id BIGINT, topic STRING, partition INT, offset BIGINT"


@pytest.fixture(scope="module")
def delta_spark() -> tuple[Path, dict[str, str]]:
    """delta-spark's Python and the Spark settings that load its jars."""
    try:
        return delta_spark_python(), {**jar_conf("delta-spark"), **DELTA_SQL_CONF}
    except JarsMissingError as exc:
        pytest.skip(str(exc))


class Side:
    """One run of delta_spark_process.py; ``result()`` is what it found."""

    def __init__(self, tool: tuple[Path, dict[str, str]], tmp_path: Path, **spec: object) -> None:
        python, conf = tool
        self.out = tmp_path / f"side-{unique('run')}.json"
        self.log = self.out.with_suffix(".log")
        spec = {**spec, "conf": conf, "out": str(self.out)}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [str(python), str(SIDE_SCRIPT), json.dumps(spec)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def result(self, timeout_s: float = 300) -> dict:
        code = self.proc.wait(timeout_s)
        assert self.out.exists(), self.log.read_text(errors="replace")[-3000:]
        found = json.loads(self.out.read_text())
        assert code == 0 and found["ok"], found.get("trace") or found
        return found

    def ops(self) -> list[dict]:
        path = Path(str(self.out) + ".ops")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def log_commits(table: Path, operation: str | None = None) -> list[tuple[int, dict]]:
    """(version, commitInfo) of the table's commits, oldest first (of ``operation`` only)."""
    out = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None and operation in (None, info.get("operation")):
                out.append((int(path.stem), info))
    return out


def run_member(name: str, spec: dict, tmp_path: Path) -> Member:
    """Run one availableNow member to its end (it is gone from the group afterwards)."""
    member = Member(name, spec, tmp_path)
    member.start()
    assert member.proc is not None
    assert member.proc.wait(300) == 0, member.log_text()[-3000:]
    member.reap()
    return member


def test_delta_spark_reads_the_ledger_the_rebalance_history_and_the_sink_table(
    delta_spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(300), 3, chunk_sizes=[40, 100])
    group, table, ledger = unique("g"), tmp_path / "table", tmp_path / "ledger"
    spec = {
        "servers": bootstrap_servers, "topic": topic, "group": group, "table": str(table),
        "ledger": str(ledger), "checkpoint": str(tmp_path / "cp"), "trigger": "availableNow",
    }  # fmt: skip
    run_member("A", spec, tmp_path)
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

    history_table = f"{ledger}_rebalances"
    found = Side(
        delta_spark, tmp_path, mode="read",
        tables={"sink": str(table), "ledger": str(ledger), "history": history_table,
                "compacted": str(compacted)},
    ).result()  # fmt: skip

    sink = found["sink"]
    assert sink["columns"] == ["id", "topic", "partition", "offset"]
    assert sorted(r["id"] for r in sink["rows"]) == list(range(300))
    assert all(r["id"] % 3 == r["partition"] and r["topic"] == topic for r in sink["rows"])
    # DeltaTable.forPath(...).history(): every sink commit, written by delta-rs, as appends.
    sink_versions = {c["version"] for c in sink["history"] if c["operation"] == "WRITE"}
    assert sink_versions and all(c["engineInfo"].startswith("delta-rs") for c in sink["history"]), (
        sink["history"]
    )
    # history() shows each sink commit's transaction versions (Delta's userMetadata).
    shown: dict[str, int] = {}
    for commit in sink["history"]:
        if commit["version"] in sink_versions:
            meta = json.loads(commit["userMetadata"])
            assert meta["group"] == group
            shown.update(meta["txns"][topic])
    assert shown == {str(p): n for p, n in counts.items()}
    # The sink's transaction ids, as delta-spark's snapshot has them: one per partition, at
    # the partition's end; the same positions the sink resumes from.
    table_id = DeltaTable(str(table)).metadata().id
    assert sink["transactions"] == {
        f"spark_groups:{table_id}:{topic}:{p}:{group}": n for p, n in counts.items()
    }
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert committed_positions(str(table), group, tps) == {
        TopicPartition(topic, p): n for p, n in counts.items()
    }
    # Compacted and vacuumed: the same rows and transaction ids (and the maintenance lease's).
    after = found["compacted"]
    by_id = lambda rows: sorted(rows, key=lambda r: r["id"])  # noqa: E731
    assert by_id(after["rows"]) == by_id(sink["rows"])
    lease = f"spark_groups:{table_id}:maintenance"
    assert {k: v for k, v in after["transactions"].items() if k != lease} == sink["transactions"]
    assert {"OPTIMIZE", "VACUUM END"} <= {c["operation"] for c in after["history"]}

    # The ledger: its newest row per partition is the partition's end.
    rows = found["ledger"]["rows"]
    assert {"topic", "partition"} <= set(found["ledger"]["columns"])
    newest: dict[int, dict] = {}
    for r in rows:
        if r["topic"] == topic and (
            r["partition"] not in newest or r["batch"] > newest[r["partition"]]["batch"]
        ):
            newest[r["partition"]] = r
    assert set(newest) == set(counts)
    assert {p: r["until_offset"] for p, r in newest.items()} == counts

    # The rebalance history: the member got the three partitions.
    events = found["history"]["rows"]
    assigned = {(e["topic"], e["partition"]) for e in events if e["event"] == "assigned"}
    assert assigned == {(topic, p) for p in range(3)}, events


@pytest.mark.timeout(1800)  # delta-spark's first OPTIMIZE alone takes minutes on a busy machine
def test_optimize_vacuum_and_another_writer_beside_two_members_every_record_once(
    delta_spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(4)
    group, table = unique("g"), tmp_path / "table"
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "3 seconds")
    a = Member("A", {**spec, "checkpoint": str(tmp_path / "cp-a")}, logs)
    b = Member("B", {**spec, "checkpoint": str(tmp_path / "cp-b")}, logs)
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=200)
    side_stop = tmp_path / "side-stop"
    side: Side | None = None
    producer.start()
    try:
        a.start()
        b.start()
        wait_until(lambda: a.commits(table) >= 1 and b.commits(table) >= 1, 240,
                   "both members to commit batches")  # fmt: skip
        at_start = len(sink_commits(table))
        side = Side(delta_spark, tmp_path, mode="maintain", table=str(table),
                    stop_file=str(side_stop))  # fmt: skip
        # One round of OPTIMIZE, append and VACUUM while both members go on committing.
        wait_until(lambda: len(side.ops()) >= 3, 900, "a round of maintenance")
        assert len(sink_commits(table)) > at_start, "the members stopped committing"
        side_stop.touch()
        maintained = side.result(900)  # the operation under way when told to stop
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000
        wait_until(lambda: {i for i in table_ids(table) if i >= 0} >= produced, 180,
                   "every produced id to land")  # fmt: skip
        stop_file.touch()
        for member in (a, b):
            assert member.proc is not None
            assert member.proc.wait(90) == 0, member.log_text()[-3000:]
    finally:
        producer.stop_event.set()
        side_stop.touch()
        stop_file.touch()
        if side is not None:
            side.kill()
        a.kill()
        b.kill()

    # The OPTIMIZE was truly concurrent: sink commits landed between the version it read and
    # the version it committed as, and it committed all the same.
    optimizes = log_commits(table, "OPTIMIZE")
    assert optimizes
    version, info = optimizes[0]
    sink_versions = [v for v, c in log_commits(table) if "spark_groups.member" in c]
    assert any(info["readVersion"] < v < version for v in sink_versions), (info, sink_versions)
    ops = side.ops()
    failed = [o for o in ops if not o["ok"]]
    assert not failed, failed
    compacted = [o for o in ops if o["op"] == "optimize" and o["detail"]["removed"] > 0]
    assert compacted, "OPTIMIZE never rewrote a file"
    ids = table_ids(table)
    ours = [i for i in ids if i >= 0]
    twice = sorted(i for i, n in Counter(ours).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert set(ours) == produced, f"missing: {sorted(produced - set(ours))[:20]}"
    # The other writer's rows are all there too, once each.
    theirs = [i for i in ids if i < 0]
    assert sorted(theirs) == list(range(-maintained["appended"], 0))
    # No batch lost: the sink's transaction versions are the ends of what the members read.
    assert committed_positions(str(table), group, [TopicPartition(topic, p) for p in range(4)])
    # What the sink met: commits made again after a concurrent commit (reported, not required).
    logs_text = a.log_text() + b.log_text()
    print("sink commits retried:", logs_text.count("met a concurrent commit"), "ops:", ops)


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
    delta_spark, bootstrap_servers: str, make_topic, tmp_path: Path, properties, refused
) -> None:
    table = tmp_path / "table"
    created = Side(delta_spark, tmp_path, mode="create", table=str(table), ddl=IDS_DDL,
                   properties=properties).result()  # fmt: skip
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(100), 2)
    spec = {
        "servers": bootstrap_servers, "topic": topic, "group": unique("g"), "table": str(table),
        "ledger": str(tmp_path / "ledger"), "checkpoint": str(tmp_path / "cp"),
        "trigger": "availableNow",
    }  # fmt: skip
    member = Member("A", spec, tmp_path)
    member.start()
    assert member.proc is not None
    code = member.proc.wait(300)
    member.reap()
    if refused is None:
        assert code == 0, member.log_text()[-3000:]
        assert sorted(table_ids(table)) == list(range(100)), created
    else:
        assert code == 1
        text = member.log_text()
        assert "SinkFeatureError" in text or "Delta table feature" in text, text[-3000:]
        assert refused in text
        assert DeltaTable(str(table)).version() == 0, "something was committed"
