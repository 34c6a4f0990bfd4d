"""Spark sessions and timed reads: every side a scenario compares, measured one way
(docs/benchmarks.md, "How each figure is measured"): :func:`plain_read`, :func:`spark_read`
(kafka-group or Spark's ``kafka``), :func:`spark_delta_sink` (Spark's Delta sink in a
pyspark-4.2 process, :mod:`bench.harness.spark_delta_proc`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness.kafka import GROUP_TIMING

from support.broker import unique


@dataclass
class Run:
    """One measured read: rows and seconds; ``excluded_s``: left out (the group join);
    ``written``: rows in the sink table (delta-group); ``cpu``: CPU seconds by process group;
    ``phases``: seconds by phase of the micro-batches (``durationMs``, the join left out) and
    ``batches``; ``window``: the measured time as epoch seconds; ``whole_s``: plain loops,
    from creating the consumer to closing it."""

    rows: int
    seconds: float
    excluded_s: float = 0.0
    written: int | None = None
    cpu: dict[str, float] | None = None
    phases: dict[str, float] | None = None
    window: tuple[float, float] | None = None
    whole_s: float | None = None

    @property
    def rate(self) -> float:
        """Records per second."""
        return self.rows / self.seconds


#: The settings of every benchmark's local[2] session (Spark's Delta sink's process too).
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
}


def spark_session() -> Any:
    """The local[2] SparkSession every Spark figure uses, with Spark's own Kafka source."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_groups
    from spark_groups.tools.spark_jars import jar_conf

    builder = SparkSession.builder.master("local[2]").appName("spark-groups-bench")
    session = builder.config(map={**jar_conf("spark-kafka"), **SESSION_CONF}).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    spark_groups.register(session)
    return session


def plain_read(
    servers: str, topics: Sequence[str], partitions: int, total: int, tuned: bool = True
) -> Run:
    """Read ``total`` records of ``topics`` with one plain consumer (see the module doc)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from spark_groups.read.reader import READER_DEFAULTS

    settings = dict(READER_DEFAULTS) if tuned else {}
    started = time.perf_counter()
    consumer = Consumer(
        {**settings, "bootstrap.servers": servers, "group.id": unique("plain"),
         "enable.auto.commit": False}
    )  # fmt: skip
    t_assign = time.perf_counter()
    consumer.assign([KafkaTopicPartition(t, p, 0) for t in topics for p in range(partitions)])
    seen = value_bytes = 0
    deadline = time.monotonic() + 600
    try:
        while seen < total:
            for msg in consumer.consume(min(500, total - seen), 1.0):
                if msg.error() is not None:
                    continue
                value = msg.value()
                value_bytes += 0 if value is None else len(value)
                seen += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"plain consumer read {seen} of {total} records in 600 s")
        took = time.perf_counter() - t_assign
    finally:
        consumer.close()
    return Run(seen, took, whole_s=time.perf_counter() - started)


def source_options(servers: str, topics: Sequence[str], group: str = "", **extra: str) -> dict:
    """Options reading ``topics`` from the start: Spark's ``kafka`` source's or, with
    ``group``, kafka-group's in that group with ``GROUP_TIMING``; ``extra`` win."""
    in_group = {"group.id": group, **{f"kafka.{k}": v for k, v in GROUP_TIMING.items()}}
    return {"kafka.bootstrap.servers": servers, "subscribe": ",".join(topics),
            "startingOffsets": "earliest", **(in_group if group else {}), **extra}  # fmt: skip


def _window(reports: list[Any], skip_join: bool) -> tuple[float, float] | None:
    """The measured time of a finished query as epoch seconds (see :attr:`Run.window`)."""
    if not reports:
        return None
    first, last = reports[0], reports[-1]
    join = int(first["durationMs"].get("latestOffset", 0)) / 1000 if skip_join else 0.0
    end = datetime.fromisoformat(last["timestamp"]).timestamp()
    end += int(last["durationMs"].get("triggerExecution", 0)) / 1000
    return datetime.fromisoformat(first["timestamp"]).timestamp() + join, end


def timed_run(query: Any, what: str, skip_join: bool) -> Run:
    """Wait for an AvailableNow query; its rows and time from the progress reports (the sum
    of ``triggerExecution``, less the first ``latestOffset`` with ``skip_join``)."""
    try:
        query.awaitTermination(900)
        if query.isActive:
            raise TimeoutError(f"the {what} query did not finish within 900 s")
        if query.exception() is not None:
            raise RuntimeError(f"the {what} query failed: {query.exception()}")
        reports = [p for p in query.recentProgress if p is not None]
    finally:
        query.stop()
    rows = sum(int(p["numInputRows"]) for p in reports)
    total_ms = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in reports)
    join_ms = int(reports[0]["durationMs"].get("latestOffset", 0)) if reports and skip_join else 0
    phases: dict[str, float] = {"batches": float(len(reports))}
    for i, p in enumerate(reports):
        for phase, ms in p["durationMs"].items():
            if not (phase == "latestOffset" and i == 0 and skip_join):  # the group join
                phases[phase] = phases.get(phase, 0.0) + int(ms) / 1000.0
    return Run(
        rows, (total_ms - join_ms) / 1000.0, join_ms / 1000.0, phases=phases,
        window=_window(reports, skip_join),
    )  # fmt: skip


def stream(spark: Any, source: str, options: dict) -> Any:
    """A streaming DataFrame of ``source``: ``kafka-group`` or Spark's ``kafka``
    (``options``: :func:`source_options`), or ``const`` (no Kafka: ``options`` give the
    constant source's rows, partitions and size)."""
    if source == "const":
        from bench.harness.const_source import STREAM_FORMAT, ConstArrowStreamSource

        spark.dataSource.register(ConstArrowStreamSource)
        source = STREAM_FORMAT
    return spark.readStream.format(source).options(**options).load()


def spark_read(
    spark: Any, servers: str, topics: Sequence[str], sink: str, scratch: Path,
    source: str = "kafka-group", **extra: str,
) -> Run:  # fmt: skip
    """Read everything in ``topics`` from ``source`` (kafka-group or Spark's ``kafka``, with
    the source options ``extra``) into ``sink`` (``noop``, ``delta-group`` or another format,
    given section 1's columns: value, topic, partition, offset) with Trigger.AvailableNow;
    timed as the module doc says."""
    group = unique(f"bench-{sink}")
    work = scratch / group
    opts = source_options(servers, topics, group if source == "kafka-group" else "", **extra)
    df = stream(spark, source, opts)
    if sink != "noop":
        df = df.selectExpr("value", "topic", "partition", "offset")
    writer = df.writeStream.trigger(availableNow=True).format(sink)
    writer = writer.option("checkpointLocation", str(work / "checkpoint"))
    if sink == "delta-group":
        writer = writer.option("group.id", group)
    query = writer.start(str(work / "table") if sink == "delta-group" else None)
    try:
        run = timed_run(query, f"{source} -> {sink}", skip_join=source == "kafka-group")
        if sink == "delta-group":  # the rows in the table
            from deltalake import DeltaTable, QueryBuilder

            found = QueryBuilder().register("t", DeltaTable(str(work / "table")))
            n = found.execute("select count(*) as n from t").read_all().column("n")[0]
            run.written = int(n.as_py())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return run


def each_batch(spark: Any, options: dict, fn: Any, trigger_ms: int, checkpoint: Path) -> Any:
    """A started kafka-group query with ``options`` calling ``fn(df, batch_id)`` (its
    ``foreachBatch``) every ``trigger_ms``."""
    return (
        stream(spark, "kafka-group", options).writeStream.foreachBatch(fn)
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .option("checkpointLocation", str(checkpoint)).start()
    )  # fmt: skip


def spark_delta_sink(
    servers: str, topics: Sequence[str], scratch: Path, warmup: Sequence[str] = (), rounds: int = 1
) -> dict[str, Run]:
    """Spark's own Delta sink: ``format("kafka")`` -> ``noop`` and -> ``format("delta")``, in a
    pyspark-4.2 process with delta-spark, best of ``rounds``: ``{"noop": Run, "delta": Run}``."""
    from spark_groups.tools.spark_jars import DELTA_SQL_CONF, delta_spark_python, jar_conf

    work = scratch / unique("bench-spark-delta")
    work.mkdir(parents=True)
    out = work / "result.json"
    conf = {**jar_conf("delta-spark", "spark-kafka", line="4.2"), **DELTA_SQL_CONF, **SESSION_CONF}
    spec = {"conf": conf, "options": source_options(servers, topics),
            "warmup": source_options(servers, warmup) if warmup else None,
            "rounds": rounds, "work": str(work / "run"), "out": str(out)}  # fmt: skip
    script = Path(__file__).with_name("spark_delta_proc.py")
    log = work / "spark.log"
    try:
        with log.open("w") as sink:
            code = subprocess.run(
                [str(delta_spark_python()), str(script), json.dumps(spec)],
                stdout=sink, stderr=subprocess.STDOUT, timeout=1800,
            ).returncode  # fmt: skip
        if code != 0 or not out.exists():
            raise RuntimeError(f"spark_delta_proc failed ({code}): {log.read_text()[-2000:]}")
        found = json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {n: Run(r["rows"], r["seconds"], written=r.get("written")) for n, r in found.items()}


#: Lines of the reader process's log (``$SPARK_GROUPS_LOG_FILE`` at INFO) that mark
#: kafka-group's phases.
PHASES = {
    "subscribed": "group member subscribed: group={group} ",
    "assigned": "assigned ",
    "resumed": "resuming ",
}


def reader_log_times(log_file: Path | None, group: str, since: float = 0.0) -> dict[str, Any]:
    """From the reader processes' log: ``subscribed_all`` (every time a member of ``group``
    subscribed, sorted) and the first ``subscribed``, ``assigned`` and ``resumed`` after
    ``since`` (epoch seconds, the log's local time)."""
    found: dict[str, Any] = {"subscribed_all": []}
    if log_file is None or not log_file.exists():
        return found
    for line in log_file.read_text(errors="replace").splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if PHASES["subscribed"].format(group=group) in line:
            found["subscribed_all"].append(at)
        if at < since - 0.01:
            continue
        for phase, marker in PHASES.items():
            if phase not in found and marker.format(group=group) in line:
                if phase != "subscribed" and "subscribed" not in found:
                    continue
                found[phase] = at
    found["subscribed_all"].sort()
    return found


def log_file() -> Path | None:
    """The reader processes' log file, when they log to one."""
    path = os.environ.get("SPARK_GROUPS_LOG_FILE")
    return Path(path) if path else None
