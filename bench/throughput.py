"""Throughput: a lean plain confluent-kafka loop, Spark's own Kafka source and the kafka-group
source (noop, delta-group).

All of them read the same topic(s) from offset 0 on the same broker, one after the other.

* plain: one Consumer in this process, assigned every partition, ``consume(500)`` in a loop
  that checks each record's error and touches its value; the reader's librdkafka settings
  (``READER_DEFAULTS``: on Tansu, ``fetch.queue.backoff.ms=10`` alone is worth 3x). 500 keeps
  the live Messages under the garbage collector's threshold: the fastest plain Python loop.
* spark noop / spark delta-group: a ``kafka-group`` query with ``Trigger.AvailableNow`` (one
  batch holds everything) in an already warm SparkSession. The time is the sum of the
  batches' ``triggerExecution`` less the first batch's ``latestOffset`` (that waits for the
  group join, which Tansu stretches to half the session timeout; joins are measured in
  the handover benchmark): the read itself, planning of later batches, and the sink.
* spark kafka: Spark's ``format("kafka")`` source (spark-sql-kafka, ``bash jars/fetch
  spark-kafka``) into ``noop`` the same way; it joins no group, so nothing is excluded: the
  time is the sum of the batches' ``triggerExecution``. It trusts ListOffsets, which Tansu
  under-reports, so it runs on Apache Kafka (the benchmark's default broker).
* spark delta: Spark's kafka source into Spark's own Delta sink (``format("delta")``) and into
  ``noop``, in a pyspark-4.2 process with delta-spark (its jars do not run on 4.3), timed the
  same way; compared per record with kafka-group -> delta-group less kafka-group -> noop.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.common import GROUP_TIMING, unique
from spark_groups.read.reader import READER_DEFAULTS


@dataclass
class Run:
    """One measured read: rows and seconds (and what was excluded, for the record)."""

    rows: int
    seconds: float
    excluded_s: float = 0.0
    #: Rows found in the sink table afterwards (delta-group only).
    written: int | None = None
    #: CPU seconds by process group during the whole call (see bench.common.cpu_seconds).
    cpu: dict[str, float] | None = None
    #: Seconds by phase of Spark's micro-batches (the progress reports' ``durationMs``, the
    #: first batch's group join left out) and the number of batches (``batches``).
    phases: dict[str, float] | None = None
    #: The measured time as wall-clock epoch seconds (start, end): from the first batch's
    #: start (after the group join, for kafka-group) to the last batch's end.
    window: tuple[float, float] | None = None

    @property
    def rate(self) -> float:
        """Records per second."""
        return self.rows / self.seconds


def plain_read(
    servers: str, topics: Sequence[str], partitions: int, total: int, chunk: int = 500
) -> Run:
    """Read ``total`` records of ``topics`` with one plain consumer (see the module doc)."""
    consumer = Consumer(
        {**READER_DEFAULTS, "bootstrap.servers": servers, "enable.auto.commit": False}
    )
    try:
        started = time.perf_counter()
        consumer.assign([KafkaTopicPartition(t, p, 0) for t in topics for p in range(partitions)])
        seen = 0
        value_bytes = 0
        deadline = time.monotonic() + 600
        while seen < total:
            for msg in consumer.consume(min(chunk, total - seen), 1.0):
                if msg.error() is not None:
                    continue
                value_bytes += len(msg.value())
                seen += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"plain consumer read {seen} of {total} records in 600 s")
        took = time.perf_counter() - started
    finally:
        consumer.close()
    return Run(seen, took)


def source_options(servers: str, topics: Sequence[str], group: str, **extra: str) -> dict:
    """Options of a kafka-group source reading ``topics`` from the start."""
    return {
        "kafka.bootstrap.servers": servers,
        "subscribe": ",".join(topics),
        "group.id": group,
        "startingOffsets": "earliest",
        **{f"kafka.{k}": v for k, v in GROUP_TIMING.items()},
        **extra,
    }


def _warm_time(query: Any) -> tuple[int, float, float]:
    """(rows, seconds, excluded seconds) from a finished query's progress reports."""
    progress = [p for p in query.recentProgress if p is not None]
    rows = sum(int(p["numInputRows"]) for p in progress)
    total_ms = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in progress)
    join_ms = int(progress[0]["durationMs"].get("latestOffset", 0)) if progress else 0
    return rows, (total_ms - join_ms) / 1000.0, join_ms / 1000.0


def _window(query: Any, skip_join: bool) -> tuple[float, float] | None:
    """The measured time of a finished query as epoch seconds (see :attr:`Run.window`)."""
    from datetime import datetime

    progress = [p for p in query.recentProgress if p is not None]
    if not progress:
        return None
    bounds = []
    for p in progress:
        start = datetime.fromisoformat(p["timestamp"]).timestamp()
        bounds.append((start, start + int(p["durationMs"].get("triggerExecution", 0)) / 1000))
    first = bounds[0][0]
    if skip_join:
        first += int(progress[0]["durationMs"].get("latestOffset", 0)) / 1000
    return first, bounds[-1][1]


def _phases(query: Any) -> dict[str, float]:
    """Seconds by phase over a finished query's batches (see :attr:`Run.phases`)."""
    progress = [p for p in query.recentProgress if p is not None]
    out: dict[str, float] = {"batches": float(len(progress))}
    for i, p in enumerate(progress):
        for phase, ms in p["durationMs"].items():
            if phase == "latestOffset" and i == 0:
                continue  # the group join
            out[phase] = out.get(phase, 0.0) + int(ms) / 1000.0
    return out


def spark_read(
    spark: Any, servers: str, topics: Sequence[str], sink: str, scratch: Path, **extra: str
) -> Run:
    """Read everything in ``topics`` with a kafka-group query into ``sink`` ("noop" or
    "delta-group"), Trigger.AvailableNow, with the source options ``extra``; return the warm
    time (see the module doc)."""
    group = unique(f"bench-{sink}")
    work = scratch / group
    opts = source_options(servers, topics, group, **extra)
    df = spark.readStream.format("kafka-group").options(**opts).load()
    writer = df.writeStream.trigger(availableNow=True).option(
        "checkpointLocation", str(work / "checkpoint")
    )
    if sink == "noop":
        query = writer.format("noop").start()
    elif sink == "delta-group":
        query = (
            df.selectExpr("value", "topic", "partition", "offset")
            .writeStream.trigger(availableNow=True)
            .option("checkpointLocation", str(work / "checkpoint"))
            .format("delta-group")
            .option("group.id", group)
            .start(str(work / "table"))
        )
    else:
        raise ValueError(f"unknown sink {sink!r}")
    try:
        query.awaitTermination(900)
        if query.isActive:
            raise TimeoutError(f"the {sink} query did not finish within 900 s")
        if query.exception() is not None:
            raise RuntimeError(f"the {sink} query failed: {query.exception()}")
        rows, seconds, excluded = _warm_time(query)
        phases = _phases(query)
        window = _window(query, skip_join=True)
        written = delta_rows(str(work / "table")) if sink == "delta-group" else None
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    return Run(rows, seconds, excluded, written, phases=phases, window=window)


def spark_kafka_read(
    spark: Any, servers: str, topics: Sequence[str], scratch: Path, **extra: str
) -> Run:
    """Read everything in ``topics`` with Spark's own Kafka source into ``noop``,
    Trigger.AvailableNow, with the source options ``extra`` (see the module doc)."""
    work = scratch / unique("bench-spark-kafka")
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .options(**extra)
        .load()
    )
    query = (
        df.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(work / "checkpoint"))
        .format("noop")
        .start()
    )
    try:
        query.awaitTermination(900)
        if query.isActive:
            raise TimeoutError("the spark kafka query did not finish within 900 s")
        if query.exception() is not None:
            raise RuntimeError(f"the spark kafka query failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p is not None]
        rows = sum(int(p["numInputRows"]) for p in progress)
        total_ms = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in progress)
        window = _window(query, skip_join=False)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    return Run(rows, total_ms / 1000.0, window=window)


def spark_delta_sink(
    servers: str,
    topics: Sequence[str],
    scratch: Path,
    warmup: Sequence[str] = (),
    rounds: int = 1,
) -> dict[str, Run]:
    """Spark's own Delta sink: ``format("kafka")`` -> ``noop`` and -> ``format("delta")``, in a
    separate pyspark-4.2 process with delta-spark (``bench/spark_delta_proc.py``), best of
    ``rounds``; returns ``{"noop": Run, "delta": Run}``."""
    import json
    import subprocess

    from spark_groups.tools.spark_jars import DELTA_SQL_CONF, delta_spark_python, jar_conf

    work = scratch / unique("bench-spark-delta")
    work.mkdir(parents=True)
    out = work / "result.json"
    spec = {
        "conf": {**jar_conf("delta-spark", "spark-kafka", line="4.2"), **DELTA_SQL_CONF},
        "servers": servers,
        "topics": list(topics),
        "warmup": list(warmup),
        "rounds": rounds,
        "work": str(work / "run"),
        "out": str(out),
    }
    script = Path(__file__).with_name("spark_delta_proc.py")
    log = work / "spark.log"
    try:
        with log.open("w") as sink:
            code = subprocess.run(
                [str(delta_spark_python()), str(script), json.dumps(spec)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=1800,
            ).returncode
        if code != 0 or not out.exists():
            raise RuntimeError(f"spark_delta_proc failed ({code}): {log.read_text()[-2000:]}")
        found = json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        name: Run(r["rows"], r["seconds"], written=r.get("written")) for name, r in found.items()
    }


def delta_rows(path: str) -> int:
    """Rows of a Delta table, read through deltalake's QueryBuilder."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(path)
    result = QueryBuilder().register("t", table).execute("select count(*) as n from t")
    return int(result.read_all().column("n")[0].as_py())
