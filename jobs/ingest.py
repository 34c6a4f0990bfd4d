"""Ingest a Kafka topic into a Delta table through a consumer group.

    spark-submit jobs/ingest.py --conf conf/ingest.toml [--bootstrap-servers host:port]
        [--group-instance-id ID] [--checkpoint DIR] [--trigger T] [--spark-log-level LEVEL]

``conf/scheduled.toml`` configures the same job as a scheduled pipeline (Trigger.AvailableNow,
static membership; docs/jobs.md).

The source is ``kafka-group``; the sink is the exactly-once Delta sink ``delta-group``
(docs/sink.md): executors write the rows as Parquet files and the driver adds them in one
Delta commit that also records each Kafka partition's next offset (a Delta transaction id),
so a batch replayed by this query, or re-read by another member of the group after a crash,
is never written twice. The source is told the sink's table (option ``sink.table``), so a
partition that moves to this job resumes from the sink when the sink is ahead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("spark_groups.jobs.ingest")


#: A processing-time trigger interval, as Spark parses it ("10 seconds", "1 minute").
_INTERVAL = re.compile(r"^\d+\s*(ms|milliseconds?|s|seconds?|minutes?|hours?|days?)$")
#: What Kafka accepts as a group.instance.id (JoinGroupRequest.validateGroupInstanceId).
_INSTANCE_ID = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_INSTANCE_KEYS = ("group.instance.id", "kafka.group.instance.id")


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
    shared_mount: bool = False


def _static_id(path: str, source: dict[str, str], override: str | None) -> None:
    """Apply ``--group-instance-id`` (``""`` removes it) and check the static member id."""
    if override is not None:
        for key in [k for k in source if k.lower() in _INSTANCE_KEYS]:
            del source[key]
        if override.strip():
            source["group.instance.id"] = override.strip()
    found = [k for k in source if k.lower() in _INSTANCE_KEYS]
    for key in found:
        if not _INSTANCE_ID.match(source[key]):
            raise JobConfigError(
                f"{path}: [source] {key} {source[key]!r} is not a valid static member id: use "
                "1-249 characters from a-z A-Z 0-9 . _ - (e.g. the job's name), or remove it "
                "for dynamic membership"
            )


def load_config(
    path: str,
    bootstrap_servers: str | None = None,
    group_instance_id: str | None = None,
    sink_overrides: dict[str, str] | None = None,
) -> JobConfig:
    """Read and check a TOML job config; ``bootstrap_servers`` overrides the file's, and so
    do ``group_instance_id`` (the static member id; ``""`` means none) and ``sink_overrides``
    (``[sink]`` keys such as ``checkpoint`` and ``trigger``)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise JobConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"source", "sink"}
    if unknown:
        raise JobConfigError(f"{path}: unknown section(s) {sorted(unknown)}; use [source], [sink]")
    for section in ("source", "sink"):
        if not isinstance(raw.get(section), dict):
            raise JobConfigError(f"{path}: a [{section}] section is required")
    source = {str(k): str(v) for k, v in raw["source"].items()}
    sink = {**raw["sink"], **(sink_overrides or {})}
    if bootstrap_servers:
        source["kafka.bootstrap.servers"] = bootstrap_servers
    _static_id(path, source, group_instance_id)
    for key in ("path", "checkpoint"):
        if not str(sink.get(key, "")).strip():
            raise JobConfigError(f"{path}: [sink] {key} is required")
    extra = set(sink) - {
        "path",
        "checkpoint",
        "trigger",
        "spark_log_level",
        "partition_by",
        "shared_mount",
    }
    if extra:
        raise JobConfigError(f"{path}: unknown [sink] key(s) {sorted(extra)}")
    trigger = str(sink.get("trigger", "availableNow")).strip()
    if trigger != "availableNow" and not _INTERVAL.match(trigger):
        raise JobConfigError(
            f"{path}: [sink] trigger {trigger!r}: use 'availableNow' or an interval like "
            "'10 seconds'"
        )
    # Validate the source options now, with the library's own errors.
    from spark_groups.errors import OptionError
    from spark_groups.options import parse_options

    try:
        parse_options(source)
    except OptionError as exc:
        raise JobConfigError(f"{path}: [source] {exc}") from None
    level = str(sink.get("spark_log_level", "WARN")).upper()
    if level not in ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"):
        raise JobConfigError(f"{path}: [sink] spark_log_level {level!r} is not a log4j level")
    shared_mount = sink.get("shared_mount", False)
    if not isinstance(shared_mount, bool):
        raise JobConfigError(
            f"{path}: [sink] shared_mount must be true or false (TOML booleans), got "
            f"{shared_mount!r}"
        )
    return JobConfig(
        source,
        str(sink["path"]),
        str(sink["checkpoint"]),
        trigger,
        level,
        str(sink.get("partition_by", "")),
        shared_mount,
    )


def storage_options(source: dict[str, str]) -> dict[str, str]:
    """The ``storage.*`` options of ``[source]``, prefix kept: the sink takes them as they are."""
    return {k: v for k, v in source.items() if k.lower().startswith("storage.")}


@dataclass
class RunTotals:
    """What a run did, added up batch by batch (Spark keeps only its last progresses)."""

    records: int = 0
    batches: int = 0


def summary_line(totals: RunTotals, last: Any | None) -> str:
    """The end of a run in one short sentence: records and batches, the lag left, and the
    figures an operator checks (rebalances, revocations that waited at the barrier, barrier
    timeouts, failed commits) from the coordinator metrics of the last batch."""
    from spark_groups.metrics import coordinator_metrics

    line = f"run summary: {totals.records:,} records in {_n(totals.batches, 'batch')}"
    for source in last["sources"] if last is not None else []:
        for m in coordinator_metrics({"sources": [source]}):
            line += (
                f", lag {_lag_after(source, m['lag'])}; "
                f"{_n(m.get('rebalances', 0), 'rebalance')}, "
                f"{_n(m.get('revocations', 0), 'barrier wait')}, "
                f"{_n(m.get('barrier_timeouts', 0), 'barrier timeout')}, "
                f"{_n(m.get('failed_commits', 0), 'failed commit')}"
            )
    return line


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 'es' if what.endswith('ch') else 's'}"


def batch_line(progress: Any) -> str:
    """One line for one finished batch: records, and per ``kafka-group`` source its lag (the
    records between the batch's end and the log end seen when it was planned) and assignment
    (from the coordinator metrics in the progress)."""
    from spark_groups.metrics import coordinator_metrics

    line = f"batch {progress['batchId']}: {progress['numInputRows']} records"
    for source in progress["sources"]:
        for metrics in coordinator_metrics({"sources": [source]}):
            line += (
                f", lag {_lag_after(source, metrics['lag'])}, {metrics['assigned_partitions']} "
                f"partitions assigned (generation {metrics['generation']}, "
                f"{metrics['rebalances']} rebalances)"
            )
    return line + _took(progress.get("durationMs") or {})


#: Spark's phases of a micro-batch, in the order they run (``StreamingQueryProgress``'s
#: ``durationMs``): planning (the sources' offsets), the offset log, the batch's execution
#: (reading and the sink), the commit log.
PHASES = ("latestOffset", "walCommit", "addBatch", "commitOffsets")


def _took(durations: dict[str, int]) -> str:
    """``"; 312 ms (latestOffset 20, walCommit 15, addBatch 250, commitOffsets 12)"``: the
    trigger's wall time and its phases, from a progress's ``durationMs`` ("" without it)."""
    total = durations.get("triggerExecution")
    if total is None:
        return ""
    phases = ", ".join(f"{p} {durations[p]}" for p in PHASES if p in durations)
    return f"; {total} ms" + (f" ({phases})" if phases else "")


def _lag_after(source: Any, at_plan: int) -> int:
    """Records left after the batch of ``source`` (its ranges' ends against the log ends it
    reported); ``at_plan``, the coordinator's lag when it was planned, if that cannot be read."""
    from spark_groups.errors import SparkGroupsError
    from spark_groups.metrics import log_end_offsets
    from spark_groups.offsets import BatchOffset

    try:
        end = source["endOffset"]
        batch = BatchOffset.from_json(json.loads(end) if isinstance(end, str) else end)
        ends = log_end_offsets(source)
        return sum(
            max(0, int(ends[r.topic][str(r.partition)]) - r.until_offset) for r in batch.ranges
        )
    except (SparkGroupsError, AttributeError, KeyError, TypeError, ValueError):
        return at_plan


def log_new_batches(progresses: list[Any], last: int, totals: RunTotals) -> int:
    """Log :func:`batch_line` for every batch after ``last`` that ran (idle triggers report a
    progress too, without ``addBatch``) and add it to ``totals``; return the last batch id
    logged."""
    for progress in progresses:
        if progress["batchId"] > last and "addBatch" in (progress["durationMs"] or {}):
            log.info("%s", batch_line(progress))
            last = progress["batchId"]
            totals.records += progress["numInputRows"]
            totals.batches += 1
    return last


def run(config: JobConfig) -> None:
    """Run the ingest query until it ends (AvailableNow) or is stopped."""
    from pyspark.sql import SparkSession

    import spark_groups

    # spark.log.level sets Spark's level while the session starts, before most of its INFO
    # start-up lines (conf/log4j2.properties, loaded by spark-submit, hides the rest).
    spark = (
        SparkSession.builder.appName("spark-groups-ingest")
        .config("spark.log.level", config.spark_log_level)
        .getOrCreate()
    )
    spark_groups.register(spark)
    source = {"sink.table": config.table_path, **config.source}
    df = spark.readStream.format(spark_groups.FORMAT).options(**source).load()
    # The sink takes its table and group from the source (sink.table, group.id): said once.
    writer = df.writeStream.format(spark_groups.SINK_FORMAT).option("member", "spark-groups-ingest")
    # The source's storage.* options (credentials, endpoint, conditional put) reach the sink
    # too: its table is the source's sink.table, on the same store as the ledger.
    writer = writer.options(**storage_options(config.source))
    if config.partition_by:
        writer = writer.option("partitionBy", config.partition_by)
    if config.shared_mount:
        writer = writer.option("sharedMount", "true")
    writer = writer.option("checkpointLocation", config.checkpoint).queryName("spark-groups-ingest")
    if config.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger)
    query = writer.start()
    last, totals = -1, RunTotals()
    # One line per batch (records, lag, assignment) in place of Spark's INFO lines; the wait
    # raises when the query fails, as awaitTermination() does.
    while not query.awaitTermination(1):
        last = log_new_batches(query.recentProgress, last, totals)
    log_new_batches(query.recentProgress, last, totals)
    progress = query.recentProgress
    log.info("%s", summary_line(totals, progress[-1] if progress else None))
    if progress and log.isEnabledFor(logging.DEBUG):
        from spark_groups.metrics import coordinator_metrics

        for metrics in coordinator_metrics(progress[-1]):
            # Every counter, for machines; Spark reports a batch's metrics before it commits
            # that batch, so batches_committed counts the batches before it.
            log.debug("coordinator metrics at the last batch: %s", json.dumps(metrics))


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", required=True, help="TOML job config (see conf/ingest.toml)")
    parser.add_argument("--bootstrap-servers", help="override [source] kafka.bootstrap.servers")
    parser.add_argument(
        "--group-instance-id",
        help="override [source] group.instance.id, the static member id ('' for none)",
    )
    parser.add_argument("--checkpoint", help="override [sink] checkpoint (one per member)")
    parser.add_argument("--trigger", help="override [sink] trigger ('availableNow', '5 seconds')")
    parser.add_argument(
        "--spark-log-level",
        help="override [sink] spark_log_level, Spark's log4j level (INFO: Spark's start-up lines)",
    )
    args = parser.parse_args(argv)
    overrides = {
        key: value
        for key, value in (
            ("checkpoint", args.checkpoint),
            ("trigger", args.trigger),
            ("spark_log_level", args.spark_log_level),
        )
        if value is not None
    }
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # The driver's spark_groups lines at SPARK_GROUPS_LOG_LEVEL, as in Spark's Python workers.
    logging.getLogger("spark_groups").setLevel(
        os.environ.get("SPARK_GROUPS_LOG_LEVEL", "INFO").upper()
    )
    try:
        config = load_config(args.conf, args.bootstrap_servers, args.group_instance_id, overrides)
    except (JobConfigError, ValueError) as exc:
        print(f"ingest: {exc}", file=sys.stderr)
        return 2
    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
