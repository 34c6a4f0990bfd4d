"""Run the whole benchmark suite and write docs/benchmarks.md and docs/benchmarks.png.

    PYTHONPATH=. python -m bench.run            # defaults: under 15 minutes on 2 cores
    PYTHONPATH=. python -m bench.run --quick    # smaller: a few minutes

Every figure is measured in this one run next to a baseline on the same machine and broker
(Apache Kafka from ``bash jars/fetch kafka``; ``--broker tansu`` for the embedded Tansu,
``--bootstrap-servers`` for your own), and reported as absolute and as a ratio. Spark's own
Kafka source needs ``bash jars/fetch spark-kafka``.
See docs/benchmarks.md for what each line measures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import math
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import ceiling, handover, scale, throughput
from bench.common import (
    broker_description,
    cpu_delta,
    cpu_seconds,
    create_topics,
    load_average,
    machine_facts,
    partition_counts,
    produce,
)

log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Config:
    """What to run; the defaults are the documented full run."""

    records: int = 2_000_000
    size: int = 100
    partitions: int = 4
    rounds: int = 2
    handover_rate: int = 400
    strategies: tuple[str, ...] = ("range", "cooperative-sticky")
    trigger_ms: int = 500
    scale_topics: int = 4
    scale_partitions: int = 1000
    plan_rounds: int = 10
    ledger_batches: int = 10_000
    ledger_partitions: int = 4
    growth_records: int = 200_000
    growth_max_bytes: int = 200_000_000
    growth_partitions: tuple[int, ...] = (4, 64, 1000)
    growth_sizes: tuple[int, ...] = (100, 1000, 10_000)
    #: Run a small query of each kind first, so Spark is warm for the measured ones.
    warmup: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


QUICK = Config(
    records=300_000,
    rounds=1,
    plan_rounds=5,
    ledger_batches=1000,
    growth_records=50_000,
    growth_max_bytes=50_000_000,
)

#: For the smoke test: everything runs, nothing is big.
TINY = Config(
    records=20_000,
    rounds=1,
    strategies=("range",),
    scale_partitions=4,
    plan_rounds=2,
    ledger_batches=20,
    growth_records=4000,
    growth_max_bytes=4_000_000,
    growth_partitions=(4,),
    growth_sizes=(100, 1000),
    warmup=False,
)


def _topics_for(partitions: int, max_topics: int) -> tuple[int, int]:
    """(topics, partitions per topic) for ``partitions`` in all: one topic up to 256."""
    topics = 1 if partitions <= 256 else max_topics
    return topics, partitions // topics


def run_throughput(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable) -> dict:
    """Section 1: plain vs read_range vs Spark's ceiling vs Spark's kafka source vs kafka-group
    (noop, delta-group)."""
    topics = create_topics(servers, cfg.partitions)
    started = time.perf_counter()
    produce(servers, topics, cfg.partitions, cfg.records, cfg.size)
    say(f"produced {cfg.records:,} x {cfg.size} B in {time.perf_counter() - started:.1f} s")
    ends = partition_counts(cfg.records, topics, cfg.partitions)
    warm: list[str] = []
    if cfg.warmup:  # Python workers, imports, the sink's first table
        warm = create_topics(servers, cfg.partitions, prefix="warm")
        produce(servers, warm, cfg.partitions, 2000, cfg.size)
        for sink in ("noop", "delta-group"):
            throughput.spark_read(spark, servers, warm, sink, scratch)
        throughput.spark_kafka_read(spark, servers, warm, scratch)
        ceiling.const_arrow_rate(spark, 20_000, cfg.partitions, cfg.size)

    runs: dict[str, list[throughput.Run]] = {}
    for round_no in range(cfg.rounds):
        measured = {
            "plain": lambda: throughput.plain_read(servers, topics, cfg.partitions, cfg.records),
            "read_range": lambda: throughput.Run(
                *ceiling.read_range_rate(servers, topics, cfg.partitions, ends)
            ),
            "spark_ceiling": lambda: throughput.Run(
                *ceiling.const_arrow_rate(spark, cfg.records, cfg.partitions, cfg.size)
            ),
            "spark_kafka": lambda: throughput.spark_kafka_read(spark, servers, topics, scratch),
            "noop": lambda: throughput.spark_read(spark, servers, topics, "noop", scratch),
        }
        measured["delta-group"] = lambda: throughput.spark_read(
            spark, servers, topics, "delta-group", scratch
        )
        for name, fn in measured.items():
            before = cpu_seconds()
            run = fn()
            run.cpu = cpu_delta(before, cpu_seconds())
            say(f"round {round_no + 1} {name}: {run.rows:,} rows, {run.rate:,.0f} rec/s")
            runs.setdefault(name, []).append(run)
    before = cpu_seconds()
    delta = throughput.spark_delta_sink(servers, topics, scratch, warm, cfg.rounds)
    for name, run in delta.items():
        say(f"spark delta-spark process, kafka -> {name}: {run.rows:,} rows, {run.rate:,.0f} rec/s")
    best = {name: max(rs, key=lambda r: r.rate) for name, rs in runs.items()}
    profiler = cProfile.Profile()
    profiler.enable()
    ceiling.read_range_rate(servers, topics, cfg.partitions, ends)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(10)
    return {
        "records": cfg.records,
        "size": cfg.size,
        "partitions": cfg.partitions,
        "rounds": cfg.rounds,
        "runs": {name: asdict(run) | {"rate": run.rate} for name, run in best.items()},
        "all_rates": {name: [r.rate for r in rs] for name, rs in runs.items()},
        "spark_delta": {name: asdict(run) | {"rate": run.rate} for name, run in delta.items()}
        | {"cpu": cpu_delta(before, cpu_seconds())},
        "read_range_profile": text.getvalue(),
    }


def run_handover(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable) -> dict:
    """Section 2: the second member's wait, plain vs kafka-group, per strategy."""
    out = {}
    for strategy in cfg.strategies:
        plain = handover.plain_handover(servers, strategy, cfg.handover_rate)
        say(f"handover {strategy} plain: {plain}")
        ours = handover.spark_handover(
            spark, servers, strategy, cfg.handover_rate, scratch, cfg.trigger_ms
        )
        say(f"handover {strategy} kafka-group: {ours}")
        out[strategy] = {"plain": plain, "spark": ours}
    return out


def run_growth_and_scale(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable):
    """Sections 3 and 4: throughput and planning time by partitions and record size; the
    largest partition count is the scale case (planning, memory, listOffsets variant)."""
    configs = [(p, 100) for p in cfg.growth_partitions] + [
        (cfg.partitions, s) for s in cfg.growth_sizes if s != 100
    ]
    growth = []
    scale_result: dict[str, Any] = {}
    for partitions, size in configs:
        n_topics, per_topic = _topics_for(partitions, cfg.scale_topics)
        topics = create_topics(servers, per_topic, n_topics, prefix="growth")
        records = max(partitions, min(cfg.growth_records, cfg.growth_max_bytes // size))
        produce(servers, topics, per_topic, records, size)
        plain = throughput.plain_read(servers, topics, per_topic, records)
        noop = throughput.spark_read(spark, servers, topics, "noop", scratch)
        spark_kafka = throughput.spark_kafka_read(spark, servers, topics, scratch)
        # What any Python data source could reach with rows of this size (no Kafka at all);
        # section 1 has it for its own record size, from ten times the records.
        ceiling_rate = math.nan
        if size != cfg.size:
            ceiling_rows, ceiling_s = ceiling.const_arrow_rate(spark, records, cfg.partitions, size)
            ceiling_rate = ceiling_rows / ceiling_s
        row = {
            "partitions": partitions,
            "topics": n_topics,
            "size": size,
            "records": records,
            "plain_rate": plain.rate,
            "noop_rate": noop.rate,
            "noop_rows": noop.rows,
            "noop_phases_s": noop.phases,
            "spark_kafka_rate": spark_kafka.rate,
            "spark_kafka_rows": spark_kafka.rows,
            "ceiling_rate": ceiling_rate,
        }
        if size == 100:
            for mode in ("stream", "plain"):
                res = scale.planner(
                    mode, servers, topics, per_topic, cfg.plan_rounds, scratch, profile=False
                )
                row[f"plan_{mode}_s"] = res["batch_p50_s"]
                row[f"rss_{mode}_mb"] = res["rss_mb"]
                if partitions == max(cfg.growth_partitions):
                    scale_result[mode] = res
        say(f"growth {row}")
        growth.append(row)
    biggest = max(cfg.growth_partitions)
    if biggest != cfg.scale_partitions:
        say(f"note: scale measured at {biggest} partitions")
    n_topics, per_topic = _topics_for(biggest, cfg.scale_topics)
    topics = create_topics(servers, per_topic, n_topics, prefix="scale")
    produce(servers, topics, per_topic, biggest, 100)
    scale_result["stream_fetch"] = scale.planner(
        "stream", servers, topics, per_topic, cfg.plan_rounds, scratch, end_offsets="fetch"
    )
    scale_result["stream_no_ledger"] = scale.planner(
        "stream", servers, topics, per_topic, cfg.plan_rounds, scratch, ledger=False
    )
    scale_result["stream_profiled"] = scale.planner(
        "stream", servers, topics, per_topic, max(2, cfg.plan_rounds // 3), scratch, profile=True
    )
    for res in scale_result.values():
        res.pop("batch_s", None)
    scale_result["partitions"] = biggest
    scale_result["topics"] = n_topics
    return growth, scale_result


def run_all(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable = print) -> dict:
    """Run every section; return the results (JSON-able)."""
    loads = [load_average()]
    started = time.perf_counter()
    results: dict[str, Any] = {"config": asdict(cfg), "section_s": {}}

    def section(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        results["section_s"][name] = round(time.perf_counter() - t0, 1)
        loads.append(load_average())
        say(f"-- {name} done in {results['section_s'][name]} s, load {loads[-1][0]:.2f}")
        return out

    results["throughput"] = section(
        "throughput", lambda: run_throughput(cfg, spark, servers, scratch, say)
    )
    results["handover"] = section(
        "handover", lambda: run_handover(cfg, spark, servers, scratch, say)
    )
    results["growth"], results["scale"] = section(
        "growth+scale", lambda: run_growth_and_scale(cfg, spark, servers, scratch, say)
    )
    results["ledger"] = section(
        "ledger",
        lambda: scale.ledger_commits(
            servers, cfg.ledger_batches, cfg.ledger_partitions, min(1000, cfg.ledger_batches)
        ),
    )
    say(f"ledger {results['ledger']}")
    results["load_1min"] = [round(x[0], 2) for x in loads]
    results["seconds"] = time.perf_counter() - started
    return results


def spark_session() -> Any:
    """The local[2] SparkSession every Spark figure uses, with Spark's own Kafka source."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_groups
    from spark_groups.tools.spark_jars import jar_conf

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-groups-bench")
        .config(map=jar_conf("spark-kafka"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_groups.register(session)
    return session


def _start_broker(kind: str) -> Any:
    """Apache Kafka (``bash jars/fetch kafka``), or the embedded Tansu; started."""
    if kind == "tansu":
        from spark_groups.embedded import EmbeddedBroker

        return EmbeddedBroker().start()
    from spark_groups.tools.kafka_broker import KafkaBroker

    return KafkaBroker().start()


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (a few minutes)")
    parser.add_argument("--records", type=int, help="records for the throughput section")
    parser.add_argument("--size", type=int, help="value size in bytes (throughput section)")
    parser.add_argument("--partitions", type=int, help="partitions (throughput section)")
    parser.add_argument("--ledger-batches", type=int, help="ledger commits (scale section)")
    parser.add_argument("--bootstrap-servers", help="use this broker instead of starting one")
    parser.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help="the broker to start: Apache Kafka (default) or the embedded Tansu",
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--plot", default=str(ROOT / "docs" / "benchmarks.png"))
    parser.add_argument("--json", default=str(ROOT / "docs" / "benchmarks.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    cfg = QUICK if args.quick else Config()
    overrides = {
        k: v
        for k, v in {
            "records": args.records,
            "size": args.size,
            "partitions": args.partitions,
            "ledger_batches": args.ledger_batches,
        }.items()
        if v is not None
    }
    cfg = replace(cfg, **overrides)
    command = "PYTHONPATH=. python -m bench.run" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    scratch = Path(tempfile.mkdtemp(prefix="spark-groups-bench-"))
    if "SPARK_GROUPS_LOG_FILE" not in os.environ:
        # The reader processes log to a file (the handover reads the subscribe times there).
        os.environ["SPARK_GROUPS_LOG_FILE"] = str(scratch / "spark_groups.log")
        os.environ["SPARK_GROUPS_LOG_LEVEL"] = "INFO"
    broker = None
    servers = args.bootstrap_servers
    started_at = datetime.now(UTC)
    try:
        if not servers:
            broker = _start_broker(args.broker)
            servers = broker.bootstrap_servers
        spark = spark_session()
        try:
            results = run_all(cfg, spark, servers, scratch, lambda s: print(s, flush=True))
        finally:
            spark.stop()
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    results["command"] = command
    results["date"] = started_at.strftime("%Y-%m-%d %H:%M UTC")
    results["machine"] = machine_facts(
        broker_description(None if args.bootstrap_servers else args.broker)
    )
    from bench.report import write_plot, write_report

    Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    write_plot(results, Path(args.plot))
    write_report(results, Path(args.out), Path(args.plot))
    print(f"wrote {args.out}, {args.plot}, {args.json} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
