"""Scheduled runs: AvailableNow queries that join, read and leave, on a production-like broker.

    python -m bench scheduled --runs 4 --records 10000 --write-docs

Each run: ``--records`` new records, then a new AvailableNow query of the same group and
checkpoint into ``noop`` (``foreachBatch``), timed from ``start()``. The sides
(:data:`SIDES`) in one session on a broker with ``PRODUCTION_GROUP_SETTINGS``; ``--runs``
runs of each, interleaved; the table gives the median of all but the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.kafka import PRODUCTION_GROUP_SETTINGS, broker, produce
from bench.harness.procfs import machine_facts
from bench.harness.spark import log_file, reader_log_times, source_options, spark_session, stream

from support.broker import create_topic, unique

SECTION = "scheduled"

#: kafka-group's options per side (``None``: Spark's kafka source).
SIDES: dict[str, dict[str, str] | None] = {
    "spark-kafka": None,
    "classic": {},
    # As conf/scheduled.toml: the session outlives the gap between runs.
    "static": {
        "kafka.group.instance.id": "scheduled-1",
        "kafka.session.timeout.ms": "900000",
        "kafka.max.poll.interval.ms": "900000",
    },
    "kip848": {"kafka.group.protocol": "consumer"},
    "python-source": None,
}

#: What each side is, as the table says it.
LABELS = {
    "spark-kafka": 'Spark `format("kafka")` (no group)',
    "python-source": "a Python source that reads no Kafka",
    "classic": "kafka-group, classic protocol (cooperative-sticky)",
    "static": "kafka-group, classic + static membership (`conf/scheduled.toml`)",
    "kip848": "kafka-group, KIP-848 (`group.protocol=consumer`)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """On a broker of its own with Kafka's default group settings."""
    os.environ.setdefault(
        "SPARK_GROUPS_LOG_FILE", str(Path(tempfile.mkdtemp(prefix="sched-log-")) / "sg.log")
    )
    with broker("kafka", PRODUCTION_GROUP_SETTINGS) as kafka:
        spark = spark_session()
        try:
            results = measure(spark, kafka.bootstrap_servers, args.runs, args.records,
                              args.partitions)  # fmt: skip
        finally:
            spark.stop()
    results["machine"] = machine_facts("kafka")
    results["broker_group_settings"] = PRODUCTION_GROUP_SETTINGS
    results["args"] = {k: vars(args)[k] for k in ("runs", "records", "partitions")}
    print(json.dumps(results["summary"], indent=2))
    return results


def _reader(spark: Any, side: str, servers: str, topic: str, group: str, rows: int) -> Any:
    options = SIDES[side]
    if side == "python-source":
        return stream(spark, "const", {"rows": rows, "partitions": 1, "size": 100})
    if options is None:
        return stream(spark, "kafka", source_options(servers, [topic]))
    # In the group with Kafka's own timing (not GROUP_TIMING), as a scheduled job.
    return stream(spark, "kafka-group", {**source_options(servers, [topic]), "group.id": group,
                                         **options})  # fmt: skip


def run_once(
    spark: Any, side: str, servers: str, topic: str, group: str, checkpoint: Path,
    log: Path | None, rows: int,
) -> dict[str, Any]:  # fmt: skip
    """One scheduled run of ``side``: new records, a new AvailableNow query, timed."""
    started: dict[int, float] = {}  # when each batch started

    def sink(df: Any, batch_id: int) -> None:
        started.setdefault(batch_id, time.monotonic())
        df.write.format("noop").mode("append").save()

    wall0 = time.time()
    t0 = time.monotonic()
    query = (
        _reader(spark, side, servers, topic, group, rows)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    end = time.monotonic() - t0
    if query.exception() is not None:
        raise RuntimeError(f"{side}: {query.exception()}")
    progress = [p for p in query.recentProgress if p is not None]
    with_rows = sorted(int(p["batchId"]) for p in progress if int(p["numInputRows"]) > 0)
    first = started.get(with_rows[0]) if with_rows else None  # the first record's batch
    result: dict[str, Any] = {
        "rows": sum(int(p["numInputRows"]) for p in progress),
        "to_first_record_s": None if first is None else first - t0,
        "to_end_s": end,
    }
    if side not in ("spark-kafka", "python-source"):
        phases = reader_log_times(log, group, wall0)
        phases.pop("subscribed_all")
        result.update({f"to_{k}_s": v - wall0 for k, v in phases.items()})
    return result


def measure(spark: Any, servers: str, runs: int, records: int, partitions: int) -> dict[str, Any]:
    """``runs`` scheduled runs of every side, interleaved (run i of every side, then i+1)."""
    log = log_file()
    scratch = Path(tempfile.mkdtemp(prefix="scheduled-"))
    topics = {side: create_topic(servers, partitions, side) for side in SIDES}
    groups = {side: unique(f"sched-{side}") for side in SIDES}
    out: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for i in range(runs):
        for side in SIDES:
            produce(servers, [topics[side]], partitions, records, 100)
            # The constant source starts from nothing each run: a checkpoint of its own per run.
            checkpoint = scratch / (f"{side}-{i}" if side == "python-source" else side)
            r = run_once(spark, side, servers, topics[side], groups[side], checkpoint, log, records)
            if r["rows"] != records:
                raise RuntimeError(f"{side} run {i}: read {r['rows']} of {records} records")
            out[side].append(r)
            print(f"run {i} {side}: {json.dumps({k: v for k, v in r.items()}, default=str)}")
    return {"runs": out, "summary": summarize(out)}


def summarize(out: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per side: the first run, and the median of the later runs, of each time."""
    summary: dict[str, dict[str, float]] = {}
    for side, runs in out.items():
        row: dict[str, float] = {}
        for key in runs[0]:
            if not key.endswith("_s"):
                continue
            values = [r[key] for r in runs[1:] if r.get(key) is not None]
            if runs[0].get(key) is not None:
                row[f"first_{key}"] = round(runs[0][key], 3)
            if values:
                row[f"median_{key}"] = round(statistics.median(values), 3)
        summary[side] = row
    return summary


def render(results: dict[str, Any]) -> str:
    """The docs/benchmarks.md section of ``results`` (medians of the runs after the first)."""
    summary, machine = results["summary"], results.get("machine", {})

    def cell(side: str, key: str) -> str:
        value = summary[side].get(f"median_{key}")
        return "" if value is None else f"{value:.2f}"

    base = summary["spark-kafka"].get("median_to_end_s")
    lines = [
        "## Scheduled runs: AvailableNow, one run after the other",
        "",
        f"`{results['command']}`, {results['when']}, load average {results['load_before']} before "
        f"and {results['load_after']} after, on {machine['cores']} cores ({machine['CPU']}). "
        "Each run is a new AvailableNow query of the same group and checkpoint into `noop` (via "
        "`foreachBatch`), "
        f"after {results['args']['records']:,} new records on {results['args']['partitions']} "
        "partitions; Apache Kafka with Kafka's default group settings "
        "(`group.initial.rebalance.delay.ms=3000`, 45 s sessions, KIP-848's 5 s heartbeat). "
        f"Seconds from `start()`, median of runs 2 to {results['args']['runs']} (the first "
        "run, cold, is in bench/results/scheduled.json).",
        "",
        "| side | to the end | vs Spark kafka | to the first record | member subscribed | "
        "first assignment | partitions resumed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in SIDES:
        end = summary[side].get("median_to_end_s")
        diff = "" if end is None or base is None else f"{end - base:+.2f}"
        lines.append(
            f"| {LABELS[side]} | {cell(side, 'to_end_s')} | {diff} | "
            f"{cell(side, 'to_first_record_s')} | {cell(side, 'to_subscribed_s')} | "
            f"{cell(side, 'to_assigned_s')} | {cell(side, 'to_resumed_s')} |"
        )
    return "\n".join(lines)
