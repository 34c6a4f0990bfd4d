"""Scheduled runs: AvailableNow queries that join, read and leave, on a production-like broker.

    PYTHONPATH=. python -m bench.scheduled            # 4 runs of each, 10,000 records each
    PYTHONPATH=. python -m bench.scheduled --runs 6 --records 10000 --partitions 3

A scheduled pipeline (Databricks job, cron, Airflow) starts the same query every few minutes
with ``Trigger.AvailableNow``: each run is a new query of the same group with the same
checkpoint, reads what arrived since the last run and ends. What the user feels is the
whole run, so each run is timed from ``start()``:

* to the first record: the start of the first ``foreachBatch`` call whose batch has rows (its
  records are about to be read);
* to the end: ``awaitTermination()`` returning.

The sink is ``foreachBatch`` writing into ``noop`` for every side, so the sides differ only
in the source. Before each run ``--records`` new records are written round-robin.

Sides, each its own group and checkpoint, in one SparkSession and on one broker that keeps
Kafka's default group settings (:data:`PRODUCTION_GROUP_SETTINGS`: the 3 s initial rebalance
delay, 45 s sessions, KIP-848's 5 s heartbeat):

* ``spark-kafka``: Spark's kafka source (no group);
* ``classic``: kafka-group, classic protocol, cooperative-sticky (the default);
* ``static``: the same with ``group.instance.id`` and ``session.timeout.ms`` above the
  schedule's interval (the member's assignment waits for it between runs);
* ``kip848``: kafka-group with ``group.protocol=consumer``;
* ``python-source``: a Python streaming data source that reads no Kafka (each run one batch of
  the same number of constant Arrow rows; ``bench.ceiling``'s rows): what any source built on
  Spark's Python data source API pays per run (its reader process starting, its imports),
  so ``kafka-group - python-source`` is what is ours.

The reader process's log (``$SPARK_GROUPS_LOG_FILE``, set here) gives kafka-group's time by
phase: to subscribe (the reader process is up and the member joins), to the first
assignment, to the first partitions resumed (just before the first batch is planned).
Results: bench/results/scheduled.json; the table is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import create_topics, machine_facts, produce, unique

ROOT = Path(__file__).resolve().parent.parent

#: Kafka's defaults for group coordination (the suite's broker shortens them for tests).
PRODUCTION_GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.heartbeat.interval.ms": "5000",
}

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

#: The page section this benchmark writes in docs/benchmarks.md (kept by bench.report).
MARKERS = ("<!-- scheduled:start -->", "<!-- scheduled:end -->")

#: What each side is, as the table says it.
LABELS = {
    "spark-kafka": 'Spark `format("kafka")` (no group)',
    "python-source": "a Python source that reads no Kafka",
    "classic": "kafka-group, classic protocol (cooperative-sticky)",
    "static": "kafka-group, classic + static membership (`conf/scheduled.toml`)",
    "kip848": "kafka-group, KIP-848 (`group.protocol=consumer`)",
}

#: Lines of the reader process's log that mark kafka-group's phases.
PHASES = {
    "subscribed": "group member subscribed: group={group} ",
    "assigned": "assigned ",
    "resumed": "resuming ",
}


class FirstRecord:
    """``foreachBatch`` into noop that notes when each batch started; after the query,
    :meth:`first_with_rows` picks the first batch that had rows (from the progress)."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.started.setdefault(batch_id, time.monotonic())
        df.write.format("noop").mode("append").save()

    def first_with_rows(self, query: Any) -> tuple[float | None, int]:
        """(when the first batch with rows started, rows over all batches)."""
        progress = [p for p in query.recentProgress if p is not None]
        with_rows = sorted(int(p["batchId"]) for p in progress if int(p["numInputRows"]) > 0)
        rows = sum(int(p["numInputRows"]) for p in progress)
        first = self.started.get(with_rows[0]) if with_rows else None
        return first, rows


class _ConstStreamReader:
    """One batch of ``rows`` constant rows per query (a fresh checkpoint each run)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict:
        return {"n": self.rows}

    def partitions(self, start: dict, end: dict) -> list:
        from pyspark.sql.datasource import InputPartition

        return [InputPartition(end["n"] - start["n"])]

    def read(self, partition: Any) -> Any:
        from bench.ceiling import _ConstReader

        yield from _ConstReader(partition.value, 1, 10_000, 100).read(partition)

    def commit(self, end: dict) -> None:
        pass


def _python_source(spark: Any, rows: int) -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader

    from spark_groups.read.schema import spark_ddl

    class Reader(_ConstStreamReader, DataSourceStreamReader):
        pass

    class ConstStream(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-const-stream"

        def schema(self) -> str:
            return spark_ddl(False)

        def streamReader(self, schema: Any) -> Any:
            return Reader(int(self.options["rows"]))

    spark.dataSource.register(ConstStream)
    return spark.readStream.format("bench-const-stream").option("rows", str(rows)).load()


def _reader(spark: Any, side: str, servers: str, topic: str, group: str, rows: int) -> Any:
    options = SIDES[side]
    if side == "python-source":
        return _python_source(spark, rows)
    if options is None:
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
    return (
        spark.readStream.format("kafka-group")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("group.id", group)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )


def _phase_times(log_file: Path, group: str, since: float) -> dict[str, float]:
    """Wall-clock times (epoch s) of kafka-group's phases for ``group`` after ``since``."""
    found: dict[str, float] = {}
    if not log_file.exists():
        return found
    for line in log_file.read_text(errors="replace").splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if at < since - 0.01:
            continue
        for phase, marker in PHASES.items():
            if phase not in found and marker.format(group=group) in line:
                if phase != "subscribed" and "subscribed" not in found:
                    continue
                found[phase] = at
    return found


def run_once(
    spark: Any,
    side: str,
    servers: str,
    topic: str,
    group: str,
    checkpoint: Path,
    log_file: Path,
    rows: int,
) -> dict[str, Any]:
    """One scheduled run of ``side``: new records, a new AvailableNow query, timed."""
    sink = FirstRecord()
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
    first, rows = sink.first_with_rows(query)
    result: dict[str, Any] = {
        "rows": rows,
        "to_first_record_s": None if first is None else first - t0,
        "to_end_s": end,
    }
    if side not in ("spark-kafka", "python-source"):
        phases = _phase_times(log_file, group, wall0)
        result.update({f"to_{k}_s": v - wall0 for k, v in phases.items()})
    return result


def measure(spark: Any, servers: str, runs: int, records: int, partitions: int) -> dict[str, Any]:
    """``runs`` scheduled runs of every side, interleaved (run i of every side, then i+1)."""
    log_file = Path(os.environ["SPARK_GROUPS_LOG_FILE"])
    scratch = Path(tempfile.mkdtemp(prefix="scheduled-"))
    topics = {side: create_topics(servers, partitions, prefix=side)[0] for side in SIDES}
    groups = {side: unique(f"sched-{side}") for side in SIDES}
    out: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for i in range(runs):
        for side in SIDES:
            produce(servers, [topics[side]], partitions, records, 100)
            # The constant source starts from nothing each run: a checkpoint of its own per run.
            checkpoint = scratch / (f"{side}-{i}" if side == "python-source" else side)
            r = run_once(
                spark, side, servers, topics[side], groups[side], checkpoint, log_file, records
            )
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


def render(results: dict[str, Any], command: str) -> str:
    """The docs/benchmarks.md section of ``results`` (medians of the runs after the first)."""
    summary, machine = results["summary"], results.get("machine", {})

    def cell(side: str, key: str) -> str:
        value = summary[side].get(f"median_{key}")
        return "" if value is None else f"{value:.2f}"

    base = summary["spark-kafka"].get("median_to_end_s")
    lines = [
        MARKERS[0],
        "## Scheduled runs: AvailableNow, one run after the other (issue 25)",
        "",
        f"`{command}`, {results['when']}, load average {results['load_before']} before and "
        f"{results['load_after']} after, {machine.get('cpu', '')}. Each run is a new "
        "AvailableNow query of the same group and checkpoint into `noop` (via `foreachBatch`), "
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
    lines += ["", MARKERS[1]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark on a broker of its own with Kafka's default group settings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scheduled.json"))
    parser.add_argument(
        "--write-docs", action="store_true", help="write the table into docs/benchmarks.md"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault(
        "SPARK_GROUPS_LOG_FILE", str(Path(tempfile.mkdtemp(prefix="sched-log-")) / "sg.log")
    )
    from bench.run import spark_session
    from spark_groups.tools.kafka_broker import KafkaBroker

    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with KafkaBroker(server_properties=PRODUCTION_GROUP_SETTINGS) as broker:
        spark = spark_session()
        results = measure(spark, broker.bootstrap_servers, args.runs, args.records, args.partitions)
        results["machine"] = machine_facts("kafka")
        results["broker_group_settings"] = PRODUCTION_GROUP_SETTINGS
        results["args"] = vars(args)
        spark.stop()
    results["when"] = when
    results["load_before"] = load_before
    results["load_after"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    Path(args.out).write_text(json.dumps(results, indent=2, default=str) + "\n")
    if args.write_docs:
        from bench.end_offsets import replace_section

        command = "PYTHONPATH=. python -m bench.scheduled " + " ".join(argv or sys.argv[1:])
        replace_section(ROOT / "docs" / "benchmarks.md", render(results, command.strip()), MARKERS)
    print(json.dumps(results["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
