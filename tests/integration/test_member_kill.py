"""A member killed with SIGKILL while records flow: the survivor takes over."""

from __future__ import annotations

import logging
import signal
from collections import Counter
from pathlib import Path

from support.broker import unique, wait_until
from support.members import Member, member_spec
from support.options import group_options
from support.producers import IdProducer

log = logging.getLogger(__name__)
MAX_PER_BATCH = 40
#: The victim's pipeline, as the survivor's.
VICTIM_SQL = "SELECT cast(value as string) as id, partition, offset FROM source"


def sink_ids(spark, path: Path) -> list[int]:
    """Ids in a file sink, as its own metadata log says (committed batches only)."""
    if not (path / "_spark_metadata").exists():
        return []
    try:
        return [int(r.id) for r in spark.read.parquet(str(path)).select("id").collect()]
    except Exception:  # the sink's first batch is being committed right now
        return []


def test_survivor_takes_over_with_nothing_lost(
    spark, bootstrap_servers: str, make_topic, tmp_path: Path
) -> None:
    """A member writing Spark's parquet file sink is killed (SIGKILL: no leave, no commit)
    while records flow; the survivor, a query in this session, takes its partitions over
    once its session times out. At most the killed member's uncommitted batch is read
    twice. (SIGTERM of Spark members: the rolling restart and the Spark crash points.)"""
    how = signal.SIGKILL
    # Records flow until the survivor has read some produced after the kill, however long the
    # two drivers take to start (a fixed amount ran out on a busy machine before the victim
    # had been seen to keep going beside the survivor).
    topic, group = make_topic(4), unique("g")
    ledger = str(tmp_path / "ledger")
    victim_sink, survivor_sink = tmp_path / "victim", tmp_path / "survivor"
    producer = IdProducer(bootstrap_servers, topic, 4, per_second=60)
    spec, logs, _ = member_spec(bootstrap_servers, topic, group, tmp_path, "0 seconds")
    # A query into Spark's parquet file sink until it is killed, as the survivor's below, in a
    # driver of the survivor's size.
    victim = Member(
        "victim",
        {
            **spec, "sink": "parquet", "table": str(victim_sink), "ledger": ledger,
            "checkpoint": str(tmp_path / "cp-victim"), "sql": VICTIM_SQL,
            "master": "local[2]", "driver_memory": "768m",
            "source_options": {"maxOffsetsPerTrigger": "40"},
        },
        logs,
    )  # fmt: skip
    survivor = None
    try:
        victim.start()
        producer.start()
        wait_until(lambda: sink_ids(spark, victim_sink), 120, "the victim's first rows")
        opts = group_options(bootstrap_servers, topic, group, ledger, maxOffsetsPerTrigger="40")
        survivor = (
            spark.readStream.format("kafka-group")
            .options(**opts)
            .load()
            .selectExpr("cast(value as string) as id", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(survivor_sink))
            .option("checkpointLocation", str(tmp_path / "cp-survivor"))
            .start()
        )
        wait_until(lambda: sink_ids(spark, survivor_sink), 120, "the survivor's first rows")
        before = len(sink_ids(spark, victim_sink))
        wait_until(
            lambda: len(sink_ids(spark, victim_sink)) > before, 60, "the victim to keep going"
        )
        victim.signal(how)  # the whole driver: Python, JVM, Spark's Python workers
        victim.wait(60)
        after_kill = len(producer.acked)
        wait_until(
            lambda: max(sink_ids(spark, survivor_sink), default=-1) >= after_kill,
            120,
            "the survivor to read records produced after the kill",
        )
        producer.stop_event.set()
        producer.join(60)
        assert producer.error is None, producer.error
        produced = set(producer.acked)

        def everything() -> bool:
            seen = set(sink_ids(spark, victim_sink)) | set(sink_ids(spark, survivor_sink))
            return produced <= seen

        wait_until(everything, 180, "the survivor to read every record")
    finally:
        producer.stop_event.set()
        if survivor is not None:
            survivor.stop()
        victim.kill()
        victim.reap()
    counts = Counter(sink_ids(spark, victim_sink) + sink_ids(spark, survivor_sink))
    assert set(counts) == produced, "records were lost, or read that were never produced"
    duplicates = sum(n - 1 for n in counts.values())
    log.info("%s: %d duplicates (bound: one batch, %d)", how.name, duplicates, MAX_PER_BATCH)
    # At most the batch that had run but was not committed yet is read again.
    assert duplicates <= MAX_PER_BATCH
