"""Share groups: kafka-share against kafka-group on one partition, throughput and latency.

    python -m bench share --write-docs

On one Apache Kafka broker with Kafka's own group settings, into the ``delta-group`` sink,
``local[2]``, trigger ``processingTime="0 seconds"``, one after another, each side on a fresh
1-partition topic:

* **throughput**: ``--records`` x ``--size`` B produced first; the side reads them all. Its
  rate: the records over the time of the batches that read any (Spark's ``triggerExecution``),
  so a share consumer's start (about 5 s) and a group's join are not in it; they are in "to
  the first row" (query start to the first commit that added rows);
* **latency**: a producer writes ``--rate`` records a second; from the first record visible,
  ``--warmup`` s not counted, then ``--counted`` s; a record's latency is the mtime of the
  ``_delta_log`` entry that added it less its CreateTime (as ``python -m bench latency``).

Sides: kafka-group (one partition is one task: its ceiling), and kafka-share with
``--tasks`` reading tasks (share consumers) a batch. The share groups keep Kafka's defaults
but ``share.auto.offset.reset=earliest`` and ``share.partition.max.record.locks`` (``--locks``,
Kafka's 2,000 by default): the records of a partition in flight, which a batch holds from its
poll to its commit, so they cap a batch's records per partition.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.kafka import PRODUCTION_GROUP_SETTINGS, broker, produce
from bench.harness.procfs import machine_facts
from bench.harness.spark import source_options, spark_session
from bench.scenarios import _latency_parts as parts

from support.broker import create_topic, unique, wait_until
from support.share import share_group

#: The section of docs/benchmarks.md this scenario writes.
SECTION = "share"
#: The group config that caps a partition's records in flight (acquired, not acknowledged).
LOCKS = "share.partition.max.record.locks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--tasks", default="1,2,4", help="kafka-share's tasks, comma-separated")
    parser.add_argument("--rate", type=int, default=2000, help="records/s of the latency runs")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--counted", type=float, default=45.0)
    parser.add_argument(
        "--locks", type=int, default=2000, help="the share groups' share.partition.max.record.locks"
    )
    parser.add_argument("--poll-budget-ms", type=int, default=1000,
                        help="kafka-share's pollBudgetMs (the source's default: 1000)")  # fmt: skip


def sides(tasks: list[int]) -> list[tuple[str, int]]:
    """(source, tasks) of every side; kafka-group's tasks: 0 (one per partition)."""
    return [("kafka-group", 0)] + [("kafka-share", n) for n in tasks]


def side_name(source: str, tasks: int) -> str:
    """How the report names a side."""
    return "kafka-group" if source == "kafka-group" else f"kafka-share, {tasks} tasks"


def start_side(
    spark: Any, servers: str, topic: str, source: str, tasks: int, args: Any, work: Path
) -> Any:
    """``source`` on ``topic`` into ``delta-group`` at ``work/table`` (a started side)."""
    if source == "kafka-group":
        options = source_options(servers, [topic], unique("share-bench"))
        options = {k: v for k, v in options.items() if not k.startswith("kafka.session")}
    else:
        options = {"kafka.bootstrap.servers": servers, "subscribe": topic, "tasks": str(tasks),
                   "pollBudgetMs": str(args.poll_budget_ms),
                   "group.id": share_group(servers, **{LOCKS: str(args.locks)})}  # fmt: skip
    side = parts.SessionSide(spark, source, "delta-group", options, work)
    wait_until(side.started, 180, "the query to start")
    return side


def throughput(spark: Any, servers: str, source: str, tasks: int, args: Any, work: Path) -> dict:
    """Read ``--records`` produced first (see the module doc)."""
    topic = create_topic(servers, 1, "share-bench")
    produce(servers, [topic], 1, args.records, args.size)
    started = time.time()
    side = start_side(spark, servers, topic, source, tasks, args, work)
    wait_until(lambda: side.rows() >= args.records, 900, f"{args.records:,} rows in the table")
    wait_until(  # the last batch's progress comes after its sink commit
        lambda: sum(p.numInputRows for p in side.query.recentProgress) >= args.records, 60,
        "the progress of every batch",
    )  # fmt: skip
    progress = side.stop()
    assert side.table is not None
    first = parts.visible_in_table(side.table)[0][0]
    working = [p for p in progress if p["numInputRows"]]
    busy_s = sum(p["durationMs"]["triggerExecution"] for p in working) / 1000
    busy_s -= progress[0]["durationMs"].get("latestOffset", 0) / 1000  # kafka-group's join
    batches = max(1, len(working))
    return {"rate": args.records / busy_s, "to_first_row_s": first - started,
            "batches": len(working), "rows_per_batch": args.records / batches}  # fmt: skip


def latency(spark: Any, servers: str, source: str, tasks: int, args: Any, work: Path) -> dict:
    """Under a producer at ``--rate`` (see the module doc)."""
    topic = create_topic(servers, 1, "share-latency")
    side = start_side(spark, servers, topic, source, tasks, args, work)
    window, _ = parts.under_producer(side, servers, topic, 1, args.rate, args)
    side.stop()
    assert side.table is not None
    created = parts.created_times(servers, topic, 1)
    return parts.measure(created, parts.visible_in_table(side.table), window)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every side, throughput then latency (see the module doc)."""
    tasks = [int(n) for n in args.tasks.split(",")]
    out: dict[str, Any] = {"records": args.records, "size": args.size, "rate": args.rate,
                           "locks": args.locks, "poll_budget_ms": args.poll_budget_ms,
                           "warmup": args.warmup, "counted": args.counted,
                           "throughput": {}, "latency": {},
                           "machine": machine_facts("kafka")}  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="bench-share-"))
    with broker("kafka", PRODUCTION_GROUP_SETTINGS) as kafka:
        spark = spark_session()
        servers = kafka.bootstrap_servers
        try:
            for source, n in sides(tasks):
                name = side_name(source, n)
                found = throughput(spark, servers, source, n, args, scratch / unique("t"))
                out["throughput"][name] = found
                print(f"throughput {name}: {found}", flush=True)
            for source, n in sides(tasks[:2]):
                name = side_name(source, n)
                found = latency(spark, servers, source, n, args, scratch / unique("l"))
                out["latency"][name] = found
                print(f"latency {name}: {found}", flush=True)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def _machine(results: dict[str, Any]) -> str:
    m = results["machine"]
    return f"{m['cores']} cores, pyspark {m['pyspark']}, librdkafka {m['librdkafka']}"


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    t, lat = results["throughput"], results["latency"]
    group = t["kafka-group"]["rate"]
    lines = [
        "## Share groups: kafka-share against kafka-group on one partition",
        "",
        f"Command: `{results['command']}`. Run on {results['when']} ({_machine(results)}). "
        f"{results['records']:,} records x {results['size']} B on one partition, read into "
        "`delta-group` after they were produced; then a producer at "
        f"{results['rate']:,} records/s, {results['counted']:.0f} s counted after a "
        f"{results['warmup']:.0f} s warm-up. Sides one after another, each on its own topic; "
        f"the share groups' `{LOCKS}`: {results['locks']:,}, kafka-share's `pollBudgetMs`: "
        f"{results['poll_budget_ms']:,}.",
        "",
        "| side | records/s | vs kafka-group | to the first row | batches | rows/batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in t.items():
        lines.append(
            f"| {name} | {r['rate']:,.0f} | {r['rate'] / group:.2f}x | "
            f"{r['to_first_row_s']:.1f} s | {r['batches']} | {r['rows_per_batch']:,.0f} |"
        )
    lines += ["", "| side (latency) | p50 | p99 | max | batches |",
              "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, r in lat.items():
        lines.append(
            f"| {name} | {r['p50']:,.0f} ms | {r['p99']:,.0f} ms | {r['max']:,.0f} ms | "
            f"{r['batches']} |"
        )
    lines += [
        "",
        "- One partition gives a batch at most about its records in flight: the broker "
        f"acquires whole record batches up to `{LOCKS}`, and a batch holds what it read "
        "from its poll until its commit, so every task after the first that polls the same "
        "partition finds nothing to acquire and waits out its `pollBudgetMs`. On one "
        "partition, more tasks make batches longer, not bigger: the rows per batch above.",
        "- Under the producer, a batch's records per partition over its duration is the most "
        "one partition can deliver; a side below the producer's rate falls behind and its "
        'latency grows with the run (docs/share-groups.md, "Sizing").',
        "- On a cluster each task is a share consumer on an executor core of its own, and "
        "what tasks add is partitions read at once (the broker spreads a group's partitions "
        "over its consumers), not records per partition.",
    ]
    return "\n".join(lines)
