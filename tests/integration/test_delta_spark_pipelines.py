"""kafka-group into delta-spark's own writers: the pipelines users try before ``delta-group``.

* Spark's Delta sink (``format("delta")``) in one session: each record once; with the source
  option ``sink.table`` (the delta-group sink's table) the query stops before committing.
* Spark's Delta sink in two members of one group: it is idempotent per (query id, batch id)
  (Delta's ``txnAppId``/``txnVersion``), not per Kafka partition, so a member that takes over
  a killed member's partitions appends the killed member's last batch again.
* ``foreachBatch`` MERGE on (topic, partition, offset) (sink_member.py's ``merge_into``) in two
  members, one killed and restarted: each record once.

delta-spark runs on Spark 4.0 to 4.2 only; elsewhere the import of test_delta_spark below skips
this module (with its reason), as it skips that one.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from test_delta_spark import (  # skips this module where delta-spark cannot run
    IDS_DDL,
    SMALL_DELTA_JOBS,
    rows,
    small_delta_jobs,  # noqa: F401 (an autouse fixture)
    transactions,
)

from spark_groups.crash_points import ARM_ENV, CRASH_ENV
from spark_groups.tools.spark_jars import DELTA_SQL_CONF, jar_conf

from support.broker import committed_offsets, log_end_offsets, produce_ids, unique, wait_until
from support.members import Member, member_spec, stop_all
from support.options import group_options
from support.producers import IdProducer
from support.programs.sink_member import DEFAULT_SQL
from support.spark import ended_with, ids_source, needs_available_now
from support.tables import table_ids

#: A member's session with delta-spark (its jars for this Spark line, Delta's SQL).
DELTA_MEMBER_CONF = {**jar_conf("delta-spark"), **DELTA_SQL_CONF, **SMALL_DELTA_JOBS}

#: The log files of a table read so far: (version, actions), by path (they never change).
_LOG: dict[str, tuple[int, list[dict]]] = {}


def delta_log(table: Path) -> list[tuple[int, list[dict]]]:
    """Every commit in the table's log, oldest first: (version, its actions)."""
    out = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        if str(path) not in _LOG:
            _LOG[str(path)] = (
                int(path.stem),
                [json.loads(x) for x in path.read_text().split("\n") if x],
            )
        out.append(_LOG[str(path)])
    return out


def txn_commits(table: Path) -> list[tuple[str, int, bool]]:
    """(appId, version, whether it added files) of each transaction id in the log: Spark's
    Delta sink commits one per micro-batch, (query id, batch id), also for an empty batch."""
    out = []
    for _, actions in delta_log(table):
        added = any("add" in a for a in actions)
        out += [(a["txn"]["appId"], a["txn"]["version"], added) for a in actions if "txn" in a]
    return out


def merges(table: Path, member: str) -> list[dict]:
    """The commitInfo of each MERGE ``member`` committed (it sets Delta's userMetadata)."""
    return [
        a["commitInfo"]
        for _, actions in delta_log(table)
        for a in actions
        if a.get("commitInfo", {}).get("operation") == "MERGE"
        and a["commitInfo"].get("userMetadata") == member
    ]


def query_id(checkpoint: Path) -> str | None:
    """The id of the query whose checkpoint is ``checkpoint`` (None before it started)."""
    metadata = checkpoint / "metadata"
    return json.loads(metadata.read_text())["id"] if metadata.exists() else None


def batches(checkpoint: Path, log: str) -> set[int]:
    """The batch ids in the checkpoint's ``offsets`` or ``commits`` log."""
    folder = checkpoint / log
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def test_kafka_group_into_sparks_delta_sink_in_one_session_every_id_once(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(3)
    counts = produce_ids(bootstrap_servers, topic, range(3000), 3, chunk_sizes=[500] * 6)
    group, table, cp = unique("g"), tmp_path / "table", tmp_path / "cp"
    opts = group_options(bootstrap_servers, topic, group, None)
    query = (
        ids_source(spark, opts, cp)
        .writeStream.format("delta")
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(300), "AvailableNow query did not end"
    assert query.exception() is None

    found = rows(spark, table)[1]
    assert sorted(r["id"] for r in found) == list(range(3000))  # every id once
    assert all(r["id"] % 3 == r["partition"] and r["topic"] == topic for r in found)
    # Spark's Delta sink keeps one transaction id per query: (query id, its last batch).
    assert transactions(spark, table) == {query.id: max(batches(cp, "commits"))}
    # The group's offsets reach the log ends (on Spark 4.0/4.1 the reader process commits the
    # one batch a moment after the query ended).
    wait_until(
        lambda: committed_offsets(bootstrap_servers, group, topic, 3) == counts,
        60,
        "the group's offsets to reach the log ends",
    )


@needs_available_now  # before 4.2 AvailableNow is one batch, never handed back to the source
def test_sink_table_with_sparks_delta_sink_stops_before_committing(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """sink.table names the delta-group sink's table; a query that writes it with Spark's
    own Delta sink stops at the source's first safe point with SinkNotWrittenError, and
    nothing is committed to Kafka (issue 43)."""
    topic = make_topic(2)
    produce_ids(bootstrap_servers, topic, range(200), 2)
    group, table, cp = unique("g"), tmp_path / "table", tmp_path / "cp"
    opts = group_options(bootstrap_servers, topic, group, None, **{"sink.table": str(table)})
    writer = (
        ids_source(spark, opts, cp)
        .writeStream.format("delta")
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
    )
    error = ended_with(lambda: writer.start(str(table)), 300)
    assert error is not None
    assert "SinkNotWrittenError" in str(error) and "option 'sink.table'" in str(error)
    assert committed_offsets(bootstrap_servers, group, topic, 2) == {}


def test_sparks_delta_sink_in_two_members_appends_a_killed_members_last_batch_again(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """Spark's Delta sink skips a batch only when its own query committed it: a killed
    member's partitions resume, in the other member, where the group's offsets stood, and the
    other member's query appends that member's last batch again. Deterministic: A runs a
    batch every 30 s and is killed right after its first with rows, so its source (which commits a
    batch's offsets when it plans the next one) never commits it."""
    topic = make_topic(4)
    group, table = unique("g"), tmp_path / "table"
    spark.sql(f"CREATE TABLE delta.`{table}` ({IDS_DDL}, member STRING) USING delta")
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "3 seconds")
    cps = {m: tmp_path / f"cp-{m}" for m in "AB"}

    def member(name: str, trigger: str) -> Member:
        sql = DEFAULT_SQL.replace(" FROM source", f", '{name}' AS member FROM source")
        return Member(name, {**spec, "sink": "delta", "sql": sql, "trigger": trigger,
                             "checkpoint": str(cps[name]), "spark_conf": DELTA_MEMBER_CONF},
                      logs)  # fmt: skip

    def batches_of(name: str, with_rows: bool = False) -> list[int]:
        """The batch ids the member's query committed to the table (with rows only)."""
        qid = query_id(cps[name])
        return [v for app, v, added in txn_commits(table) if app == qid and added >= with_rows]

    def ids_of(name: str) -> set[int]:
        return {r["id"] for r in rows(spark, table)[1] if r["member"] == name}

    def all_twice(ids: set[int]) -> bool:
        counts = Counter(table_ids(table))  # delta-rs: cheap enough to poll
        return all(counts[i] > 1 for i in ids)

    a, b = member("A", "30 seconds"), member("B", "3 seconds")
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=150)
    producer.start()
    try:
        b.start()
        wait_until(lambda: batches_of("B", with_rows=True), 240, "B to commit a batch")
        a.start()
        wait_until(lambda: batches_of("A", with_rows=True), 240, "A to commit rows")
        a.kill()
        (killed_batch,) = batches_of("A", with_rows=True)
        assert max(batches(cps["A"], "offsets")) == killed_batch, "A planned its next batch"
        a_ids = ids_of("A")
        assert a_ids
        # B takes A's partitions over and appends A's batch again, under its own query id.
        # (A restarted with its checkpoint would replay that batch and Delta would skip it:
        # same query id, same batch id. That is Delta's own guarantee, not tested here.)
        wait_until(lambda: all_twice(a_ids), 120, "B to append A's batch again")
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        wait_until(lambda: set(table_ids(table)) >= produced, 120, "every produced id to land")
        stop_all((b,), stop_file)
    finally:
        producer.stop_event.set()
        a.kill()
        b.kill()

    txns = [(app, version) for app, version, _ in txn_commits(table)]
    assert batches_of("A").count(killed_batch) == 1, txns
    assert max(Counter(txns).values()) == 1  # no (query id, batch id) committed twice
    ids = Counter(r["id"] for r in rows(spark, table)[1])
    twice = {i for i, n in ids.items() if n > 1}
    assert a_ids <= twice  # every record of A's last batch is in the table twice,
    assert a_ids <= ids_of("B")  # appended again by B
    assert set(ids) == produced  # nothing lost
    print(f"Spark's Delta sink: {len(twice)} of {len(ids)} ids twice; A's batch {len(a_ids)}")


def test_foreach_batch_merge_in_two_members_one_killed_every_id_exactly_once(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """sink_member.py's ``merge_into`` (foreachBatch, MERGE ... WHEN NOT MATCHED INSERT on
    the Kafka position) in two members, a producer running, A killed right after a MERGE
    (crash point ``spark.commit_log``: Spark logged the batch, the source has not committed
    its offsets) and restarted."""
    topic = make_topic(4)
    group, table = unique("g"), tmp_path / "table"
    spark.sql(f"CREATE TABLE delta.`{table}` ({IDS_DDL}) USING delta PARTITIONED BY (partition)")
    spec, logs, stop_file = member_spec(bootstrap_servers, topic, group, tmp_path, "3 seconds")

    def member(name: str, trigger: str) -> Member:
        conf = {**DELTA_MEMBER_CONF, "spark.databricks.delta.commitInfo.userMetadata": name}
        return Member(name, {**spec, "sink": "delta-merge", "trigger": trigger,
                             "checkpoint": str(tmp_path / f"cp-{name}"), "spark_conf": conf},
                      logs)  # fmt: skip

    def deduplicated(merge: dict) -> int:
        """Rows of the MERGE's batch that were in the table already."""
        metrics = merge["operationMetrics"]
        return int(metrics["numSourceRows"]) - int(metrics["numTargetRowsInserted"])

    a, b = member("A", "3 seconds"), member("B", "3 seconds")
    arm = tmp_path / "arm-A"
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=150)
    producer.start()
    try:
        a.start({CRASH_ENV: "spark.commit_log:SIGKILL", ARM_ENV: str(arm)})
        b.start()
        wait_until(lambda: merges(table, "A") and merges(table, "B"), 300,
                   "both members to MERGE batches")  # fmt: skip
        # A dies when Spark next commits a batch of A's: its MERGE landed, its offsets not.
        arm.touch()
        wait_until(lambda: arm.with_name("arm-A.fired").exists(), 120, "A's crash point")
        a.wait(60)
        a.reap()
        killed_rows = int(merges(table, "A")[-1]["operationMetrics"]["numTargetRowsInserted"])
        b_seen = len(merges(table, "B"))
        # B takes A's partitions over from where the group's offsets stood: it reads A's last
        # batch again, and its MERGEs insert none of it.
        wait_until(
            lambda: sum(deduplicated(m) for m in merges(table, "B")[b_seen:]) >= killed_rows,
            120,
            "B to read A's last batch again",
        )
        a.start()  # restarted with its checkpoint
        restarted_from = len(merges(table, "A"))
        wait_until(lambda: len(merges(table, "A")) > restarted_from, 240,
                   "the restarted A to MERGE")  # fmt: skip
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)
        assert len(produced) > 1000
        wait_until(lambda: set(table_ids(table)) >= produced, 180, "every produced id to land")
        ends = log_end_offsets(bootstrap_servers, topic, 4)
        wait_until(lambda: committed_offsets(bootstrap_servers, group, topic, 4) == ends, 90,
                   "the group's offsets to reach the log ends")  # fmt: skip
        stop_all((a, b), stop_file)
    finally:
        producer.stop_event.set()
        a.kill()
        b.kill()

    ids = [r["id"] for r in rows(spark, table)[1]]
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"written twice: {twice[:20]}"
    assert set(ids) == produced, f"missing: {sorted(produced - set(ids))[:20]}"
    retried = (a.log_text() + b.log_text()).count("met a concurrent commit")
    dropped = sum(max(deduplicated(m), 0) for m in merges(table, "A") + merges(table, "B"))
    print(f"MERGE: {len(ids)} ids once, {dropped} rows read again not inserted, {retried} retries")
