"""One member of a consumer group feeding a sink, as a separate process.

    python sink_member.py SPEC_JSON

Run through :class:`support.members.Member` by the tests (tests/integration/test_sink.py:
two of these share one group and one table; test_member_kill.py: into a parquet sink) and by
bench/scenarios/rolling.py. SPEC is a JSON object: servers, topic, group, table, ledger,
checkpoint, member, and optionally ``master`` (default ``local[1]``), ``driver_memory``
(default 512m), ``sql`` (the pipeline, over the view ``source``), ``source_options`` (added
to the source's), ``sink_options``, ``spark_conf`` (settings for the member's Spark session:
jars, Hadoop's ``spark.hadoop.fs.s3a.*`` for a checkpoint on ``s3a://``), ``trigger``,
``stop_file``, ``source`` ("kafka-group", the default, or "kafka-share": the spec's group is
then a share group, read into ``table``), ``spark_log_level`` (default ERROR) and
``log4j_config`` (a log4j2 properties file for Spark's own log), and ``sink``: "delta-group"
(the default), "parquet" (Spark's file sink, at ``table``), "delta" (Spark's own Delta sink,
``format("delta")``, plain append) or "delta-merge" (``foreachBatch`` with
:func:`merge_into`); the last two need delta-spark in the session (``spark_conf``:
``{**jar_conf("delta-spark"), **DELTA_SQL_CONF}``, Spark 4.0 to 4.2). With ``trigger``
"availableNow" the query reads what is there and the process exits; otherwise it runs until
``stop_file`` exists. Exit status 0, or 1 if the query failed. ``source_options`` may set
the classic protocol's settings (:data:`CLASSIC_DEFAULTS` otherwise) or
``group.protocol=consumer`` (KIP-848: none of them then).

The process installs no SIGTERM handler: SIGTERM to its process group (a deployment stopping
it, :meth:`support.launch.MemberProcess.terminate`) ends this Python driver at once, Spark's
JVM runs its shutdown hooks, and the source's reader process leaves the group
(``spark_groups.group.sigterm``) after committing what is durable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The default pipeline: the record's id (its value) and the Kafka columns.
DEFAULT_SQL = (
    "SELECT cast(cast(value AS string) AS long) AS id, topic, partition, offset FROM source"
)


#: The classic protocol's settings unless the spec's ``source_options`` give others: a fast
#: session, and cooperative-sticky.
CLASSIC_DEFAULTS = {
    "kafka.session.timeout.ms": "6000",
    "kafka.heartbeat.interval.ms": "500",
    "partition.assignment.strategy": "cooperative-sticky",
}


def merge_into(table: str) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function that MERGEs each micro-batch into the Delta table at
    ``table`` (partitioned by ``partition``) on the record's Kafka position, inserting only
    rows not there yet: a batch read again (a replay, or another member resuming behind a
    killed one) inserts nothing twice. The batch's partitions, named in the condition, keep
    members' MERGEs apart (each owns its partitions); two that meet on a partition (at a
    handover) conflict, and the one refused is made again on the new snapshot."""
    from delta.exceptions import ConcurrentAppendException
    from delta.tables import DeltaTable

    def merge(batch: Any, batch_id: int) -> None:
        batch = batch.persist()  # read from Kafka once, whatever the attempts
        parts = ",".join(str(r.partition) for r in batch.select("partition").distinct().collect())
        if not parts:  # an empty batch
            batch.unpersist()
            return
        on = f"t.partition IN ({parts}) AND t.topic = s.topic AND t.partition = s.partition"
        for attempt in range(1, 21):
            try:
                DeltaTable.forPath(batch.sparkSession, table).alias("t").merge(
                    batch.alias("s"), f"{on} AND t.offset = s.offset"
                ).whenNotMatchedInsertAll().execute()
                break
            except ConcurrentAppendException:
                sys.stderr.write(f"MERGE of batch {batch_id} met a concurrent commit\n")
                if attempt == 20:
                    raise
        batch.unpersist()

    return merge


def main() -> int:
    spec = json.loads(sys.argv[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_groups

    spark = (
        SparkSession.builder.master(spec.get("master", "local[1]"))
        .appName(f"sink-member-{spec['member']}")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", spec.get("driver_memory", "512m"))
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config(map=spec.get("spark_conf", {}))
        .config("spark.log.level", spec.get("spark_log_level", "ERROR"))
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile={spec['log4j_config']}" if "log4j_config" in spec else "",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(spec.get("spark_log_level", "ERROR"))
    spark_groups.register(spark)
    source_format = spec.get("source", "kafka-group")
    source = {
        "kafka.bootstrap.servers": spec["servers"],
        "subscribe": spec["topic"],
        "group.id": spec["group"],
        "startingOffsets": "earliest",
        "offsets.table": spec["ledger"],
        **spec.get("source_options", {}),
    }
    if source_format == "kafka-share":  # a share group: no offsets, the table decides
        source = {
            "kafka.bootstrap.servers": spec["servers"], "subscribe": spec["topic"],
            "group.id": spec["group"], "sink.table": spec["table"],
            **spec.get("source_options", {}),
        }  # fmt: skip
    elif "consumer" not in (source.get("group.protocol"), source.get("kafka.group.protocol")):
        # The classic protocol's member settings (KIP-848 takes them from the broker and
        # refuses them here): fast by default, the spec's source_options win.
        for key, value in CLASSIC_DEFAULTS.items():
            source.setdefault(key, value)
    from spark_groups.spark.compat import ADMISSION_CONTROL

    if not ADMISSION_CONTROL:  # Spark before 4.2: the source needs the query's checkpoint
        source.setdefault("checkpointLocation", spec["checkpoint"])
    spark.readStream.format(source_format).options(**source).load().createOrReplaceTempView(
        "source"
    )
    rows = spark.sql(spec.get("sql", DEFAULT_SQL))
    sink = spec.get("sink", "delta-group")
    table: str | None = spec["table"]
    if sink == "delta-merge":
        writer = rows.writeStream.foreachBatch(merge_into(spec["table"]))
        table = None
    elif sink in ("delta", "parquet"):
        writer = rows.writeStream.format(sink).outputMode("append")
    else:
        writer = (
            rows.writeStream.format("delta-group")
            .option("group.id", spec["group"])
            .option("member", spec["member"])
        )
    writer = writer.option("checkpointLocation", spec["checkpoint"]).options(
        **spec.get("sink_options", {})
    )
    trigger = spec.get("trigger", "3 seconds")
    if trigger == "availableNow":
        query = writer.trigger(availableNow=True).start(table)
        try:
            query.awaitTermination()
            return 0
        except Exception as exc:
            sys.stderr.write(f"query failed: {exc}\n")
            return 1
        finally:
            spark.stop()
    query = writer.trigger(processingTime=trigger).start(table)
    stop_file = Path(spec["stop_file"])
    try:
        while not stop_file.exists():
            if query.exception() is not None:
                sys.stderr.write(f"query failed: {query.exception()}\n")
                return 1
            time.sleep(0.2)
        query.stop()
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
