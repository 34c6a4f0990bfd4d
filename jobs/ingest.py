"""Ingest a Kafka topic into a Delta table through a consumer group.

    spark-submit jobs/ingest.py --conf conf/ingest.toml [--bootstrap-servers host:port]

The source is ``kafka-group``; the sink is the exactly-once Delta sink ``delta-group``
(docs/sink.md): executors write the rows as Parquet files and the driver adds them in one
Delta commit that also records each Kafka partition's next offset (a Delta transaction id),
so a batch replayed by this query, or re-read by another member of the group after a crash,
is never written twice. The source is told the sink's table (option ``sink.table``), so a
partition that moves to this job resumes from the sink when the sink is ahead.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("spark_groups.jobs.ingest")


class JobConfigError(ValueError):
    """The job's config file is missing, unreadable or has a bad value."""


@dataclass(frozen=True)
class JobConfig:
    """The validated contents of a job config file."""

    source: dict[str, str]
    table_path: str
    checkpoint: str
    trigger: str
    spark_log_level: str = "WARN"
    partition_by: str = ""


def load_config(path: str, bootstrap_servers: str | None = None) -> JobConfig:
    """Read and check a TOML job config; ``bootstrap_servers`` overrides the file's."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise JobConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"source", "sink"}
    if unknown:
        raise JobConfigError(f"{path}: unknown section(s) {sorted(unknown)}; use [source], [sink]")
    source = {str(k): str(v) for k, v in raw.get("source", {}).items()}
    sink = raw.get("sink", {})
    if bootstrap_servers:
        source["kafka.bootstrap.servers"] = bootstrap_servers
    for key in ("path", "checkpoint"):
        if not str(sink.get(key, "")).strip():
            raise JobConfigError(f"{path}: [sink] {key} is required")
    extra = set(sink) - {
        "path",
        "checkpoint",
        "trigger",
        "spark_log_level",
        "partition_by",
    }
    if extra:
        raise JobConfigError(f"{path}: unknown [sink] key(s) {sorted(extra)}")
    trigger = str(sink.get("trigger", "availableNow"))
    if trigger != "availableNow" and not trigger.split()[0].isdigit():
        raise JobConfigError(
            f"{path}: [sink] trigger must be 'availableNow' or an interval like '10 seconds'"
        )
    # Validate the source options now, with the library's own errors.
    from spark_groups.options import parse_options

    parse_options(source)
    level = str(sink.get("spark_log_level", "WARN")).upper()
    if level not in ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"):
        raise JobConfigError(f"{path}: [sink] spark_log_level {level!r} is not a log4j level")
    return JobConfig(
        source,
        str(sink["path"]),
        str(sink["checkpoint"]),
        trigger,
        level,
        str(sink.get("partition_by", "")),
    )


def run(config: JobConfig) -> None:
    """Run the ingest query until it ends (AvailableNow) or is stopped."""
    from pyspark.sql import SparkSession

    import spark_groups

    spark = SparkSession.builder.appName("spark-groups-ingest").getOrCreate()
    spark.sparkContext.setLogLevel(config.spark_log_level)
    spark_groups.register(spark)
    source = {"sink.table": config.table_path, **config.source}
    df = spark.readStream.format(spark_groups.FORMAT).options(**source).load()
    group = config.source.get("group.id") or config.source["kafka.group.id"]
    writer = (
        df.writeStream.format(spark_groups.SINK_FORMAT)
        .option("path", config.table_path)
        .option("group.id", group)
        .option("member", "spark-groups-ingest")
    )
    if config.partition_by:
        writer = writer.option("partitionBy", config.partition_by)
    writer = writer.option("checkpointLocation", config.checkpoint).queryName("spark-groups-ingest")
    if config.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger)
    query = writer.start()
    query.awaitTermination()
    log.info("query ended after %d batches", len(query.recentProgress))


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", required=True, help="TOML job config (see conf/ingest.toml)")
    parser.add_argument("--bootstrap-servers", help="override [source] kafka.bootstrap.servers")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("spark_groups").setLevel(logging.INFO)
    try:
        config = load_config(args.conf, args.bootstrap_servers)
    except (JobConfigError, ValueError) as exc:
        print(f"ingest: {exc}", file=sys.stderr)
        return 2
    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
