"""spark-submit job: ingest a Kafka topic into a Delta table as a consumer-group member.

    spark-submit jobs/ingest.py --conf conf/ingest.toml [--bootstrap-servers host:port]

The source is ``kafka-group``; the sink writes each micro-batch to Delta with deltalake
inside ``foreachBatch``, tagged with a Delta transaction id (app id from the checkpoint,
version = batch id), so a batch Spark replays after a crash is not written twice.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    extra = set(sink) - {"path", "checkpoint", "trigger", "spark_log_level"}
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
    return JobConfig(source, str(sink["path"]), str(sink["checkpoint"]), trigger, level)


def delta_batch_writer(table_path: str, app_id: str):
    """A foreachBatch function appending each batch to a Delta table exactly once."""

    def write(batch_df: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        try:
            done = DeltaTable(table_path).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            log.info("batch %d is already in %s; skipped (replay)", batch_id, table_path)
            return
        data = batch_df.toArrow()
        write_deltalake(
            table_path,
            data,
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)],
                custom_metadata={"spark_groups.batch": str(batch_id)},
            ),
        )
        log.info("batch %d: %d rows appended to %s", batch_id, data.num_rows, table_path)

    return write


def run(config: JobConfig) -> None:
    """Run the ingest query until it ends (AvailableNow) or is stopped."""
    from pyspark.sql import SparkSession

    import spark_groups

    spark = SparkSession.builder.appName("spark-groups-ingest").getOrCreate()
    spark.sparkContext.setLogLevel(config.spark_log_level)
    spark_groups.register(spark)
    df = spark.readStream.format(spark_groups.FORMAT).options(**config.source).load()
    app_id = "spark-groups-ingest-" + hashlib.sha256(config.checkpoint.encode()).hexdigest()[:16]
    writer = (
        df.writeStream.foreachBatch(delta_batch_writer(config.table_path, app_id))
        .option("checkpointLocation", config.checkpoint)
        .queryName("spark-groups-ingest")
    )
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
