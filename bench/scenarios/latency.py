"""Latency: how long after a record is produced a reader of the table can see it.

    python -m bench latency --write-docs

On one Apache Kafka broker with Kafka's own group settings, a fresh 4-partition topic per
side, a producer writing ``--size`` B records at each of ``--rates`` (2,000 and 20,000 a
second; librdkafka stamps CreateTime at ``produce()``): from the first record visible,
``--warmup`` s (15) not counted, then ``--counted`` s (45). The sides (:data:`SIDES`), one
after another, trigger ``processingTime="0 seconds"``, ``local[2]``; all but the last in this
process's pyspark, the last (delta-spark) in pyspark 4.2. A record's latency: the mtime of
the ``_delta_log`` JSON that added it, less its CreateTime; into a sink without a table, the
end of its batch (trigger start + ``triggerExecution``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.harness.kafka import PRODUCTION_GROUP_SETTINGS, broker
from bench.harness.procfs import machine_facts
from bench.harness.spark import source_options, spark_session
from bench.scenarios import _latency_parts as parts
from bench.scenarios.sink_cost import DiscardDataSource

from support.broker import create_topic, unique, wait_until

#: The section of docs/benchmarks.md this scenario writes.
SECTION = "latency"
#: The sides: (name, source, sink); sink "delta" is delta-spark's, in a pyspark-4.2 process.
SIDES = (
    ("kafka-group -> `delta-group` (`offsets.table` and `sink.table` set)", "kafka-group",
     "delta-group"),
    ("kafka-group -> `delta-group`, the query in its own process (as a user's job)",
     "kafka-group", "delta-group-proc"),
    ("kafka-group -> `noop`", "kafka-group", "noop"),
    ("kafka-group -> `discard-arrow` (a Python sink that drops its rows)", "kafka-group",
     "discard-arrow"),
    ("Spark's kafka source -> `noop` (Spark's floor)", "kafka", "noop"),
    ('Spark\'s kafka source -> delta-spark `format("delta")` (pyspark 4.2)', "kafka", "delta"),
)  # fmt: skip
#: The goals: (rate, percentile, at most ms), for kafka-group -> delta-group.
GOALS = ((2000, "p50", 250), (2000, "p99", 500), (20000, "p99", 1000))
#: The goal of the side whose query runs in its own process, as users run it.
OWN_PROCESS_GOALS = ((2000, "p99", 1000),)
PARTITIONS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--rates", default="2000,20000", help="records/s, comma-separated")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--counted", type=float, default=45.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--sides", default="", help="only the sides whose name has this text")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every side at every rate, one after another (see the module doc)."""
    out: dict[str, Any] = {"size": args.size, "warmup": args.warmup, "counted": args.counted,
                           "sides": {}, "machine": machine_facts("kafka")}  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    with broker("kafka", PRODUCTION_GROUP_SETTINGS) as kafka:
        spark = spark_session()
        spark.dataSource.register(DiscardDataSource)
        try:
            for rate in map(int, args.rates.split(",")):
                for name, source, sink in (s for s in SIDES if args.sides in s[0]):
                    found = one_side(spark, kafka.bootstrap_servers, source, sink, rate,
                                     args, scratch / unique("side"))  # fmt: skip
                    out["sides"].setdefault(name, {})[str(rate)] = found
                    print(f"{rate:>6} rec/s  {name}: {found['latency']}", flush=True)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def one_side(
    spark: Any, servers: str, source: str, sink: str, rate: int, args: Any, work: Path
) -> dict[str, Any]:
    """Run one side under the producer: its latencies, batches and phases."""
    topic = create_topic(servers, PARTITIONS, "latency")
    options = source_options(servers, [topic], unique("latency") if source == "kafka-group" else "")
    if source == "kafka-group":  # Kafka's default session, as users run it
        options = {k: v for k, v in options.items() if not k.startswith("kafka.session")}
    if sink == "delta":
        side: Any = parts.spark_delta_side(options, work)
    elif sink == "delta-group-proc":
        side = parts.own_process_side(options, work)
    else:
        side = parts.SessionSide(spark, source, sink, options, work)
    wait_until(side.started, 180, "the query to start")
    window, sent = parts.under_producer(side, servers, topic, PARTITIONS, rate, args)
    progress = side.stop()
    table = getattr(side, "table", None)
    visible = (parts.visible_in_table(table) if table is not None
               else parts.visible_in_progress(progress))  # fmt: skip
    found = {"latency": parts.measure(parts.created_times(servers, topic, PARTITIONS), visible,
                                      window),
             "phases": parts.phases(progress, window), "sent": sent}  # fmt: skip
    if sink.startswith("delta-group"):  # what compacting the run's small files costs
        found["compaction"] = parts.compaction(table, len(visible))
    return found


def _ms(x: float) -> str:
    return f"{x:,.0f} ms"


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    sides = results["sides"]
    rates = sorted({r for s in sides.values() for r in s}, key=int)
    lines = [
        "## Latency: produced -> visible in the table",
        "",
        f"Command: `{results['command']}`. Run on {results['when']} (load average before: "
        f"{results['load_before']}). One Apache Kafka broker with Kafka's default group "
        f"settings, a fresh {PARTITIONS}-partition topic per side, records of "
        f"{results['size']} B produced at a steady rate (librdkafka stamps CreateTime at "
        f"`produce()`); from the first record visible, {results['warmup']:.0f} s of warm-up "
        f"not counted, then {results['counted']:.0f} s counted; trigger "
        '`processingTime="0 seconds"`, `local[2]`, the sides one after another. A record\'s '
        "latency is the mtime of the `_delta_log` JSON that added it less its CreateTime; "
        "into a sink without a table, the end of its batch (trigger start + "
        "`triggerExecution`). Batches: commits (or batches) that ended in the counted "
        "window; spacing: their median distance.",
    ]
    lines += ["", "| pipeline | records/s | p50 | p95 | p99 | max | batches | spacing |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for rate in rates:
        for name, by_rate in sides.items():
            if rate in by_rate:
                lat = by_rate[rate]["latency"]
                lost = f" ({lat['missing']:,} never visible)" if lat["missing"] else ""
                cells = " | ".join(_ms(lat[q]) for q in ("p50", "p95", "p99", "max"))
                lines.append(f"| {name}{lost} | {int(rate):,} | {cells} | {lat['batches']} | "
                             f"{_ms(lat['spacing_ms'])} |")  # fmt: skip
    keys = ["latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
            "triggerExecution"]  # fmt: skip
    lines += ["", "Median milliseconds per batch of Spark's own phases (`durationMs` of the "
              "progress reports, the counted window's batches):", "",
              "| pipeline | records/s | " + " | ".join(f"`{k}`" for k in keys) + " |",
              "| --- | ---: |" + " ---: |" * len(keys)]  # fmt: skip
    for name, by_rate in sides.items():
        for rate in (r for r in rates if r in by_rate):
            cells = " | ".join(f"{by_rate[rate]['phases'].get(k, 0):,.0f}" for k in keys)
            lines.append(f"| {name} | {int(rate):,} | {cells} |")
    ours = sides.get(SIDES[0][0], {})
    goals = [f"{p} at {r:,} records/s <= {_ms(most)}: {_ms(ours[str(r)]['latency'][p])}, "
             + ("met" if ours[str(r)]["latency"][p] <= most else "**not met**")
             for r, p, most in GOALS if str(r) in ours]  # fmt: skip
    own = sides.get(SIDES[1][0], {})
    own_goals = [f"{p} at {r:,} records/s <= {_ms(most)}: {_ms(own[str(r)]['latency'][p])}, "
                 + ("met" if own[str(r)]["latency"][p] <= most else "**not met**")
                 for r, p, most in OWN_PROCESS_GOALS if str(r) in own]  # fmt: skip
    if goals:
        lines += ["", "Goals (kafka-group -> `delta-group`): " + "; ".join(goals) + "."]
    if own_goals:
        lines += ["", "Goal (the same in its own process): " + "; ".join(own_goals) + "."]
    compactions = []
    for rate, found in ours.items():
        spacing = found["latency"]["spacing_ms"]  # 0: fewer than two batches in the window
        if (c := found.get("compaction")) and c["commits"] and spacing:
            hourly_s = c["seconds"] / c["commits"] * 3600_000 / spacing
            compactions.append(
                f"at {int(rate):,} records/s the run left {c['files_before']:,} data files from "
                f"{c['commits']} commits, and the sink's `optimize` (what `compactEvery` runs) "
                f"made them {c['files_after']:,} in {c['seconds']:.1f} s: about "
                f"{hourly_s / 60:.1f} min of compaction an hour at this rate"
            )
    if compactions:
        lines += ["", "Compaction: " + "; ".join(compactions) + "."]
    return "\n".join(lines)
