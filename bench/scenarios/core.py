"""Sections 1 to 4: throughput, handover, scale and cost growth, in one run.

    python -m bench core --write-docs     # the documented run (under 15 minutes on 2 cores)
    python -m bench core --quick          # smaller: a few minutes

Every figure next to a baseline on the same machine and broker (Apache Kafka; ``--broker
tansu``, ``--bootstrap-servers``); the sides, records and rounds are :class:`Config` and the
section's text (:mod:`._core_report`).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import math
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import const_source
from bench.harness.kafka import broker, broker_description, partition_counts, produce
from bench.harness.planner import planner
from bench.harness.procfs import CpuSampler, machine_facts
from bench.harness.spark import Run, plain_read, spark_delta_sink, spark_read, spark_session
from bench.scenarios import _core_parts
from bench.scenarios._core_report import render, write_plot

from support.broker import create_topic, create_topics, unique

__all__ = ["SECTION", "add_arguments", "render", "run", "run_all"]

#: The section of docs/benchmarks.md this scenario writes (sections 1 to 4).
SECTION = "core"
PLOT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.png"


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


QUICK = Config(records=300_000, rounds=1, plan_rounds=5, ledger_batches=1000,
               growth_records=50_000, growth_max_bytes=50_000_000)  # fmt: skip

#: For the smoke test: everything runs, nothing is big.
TINY = Config(records=5_000, rounds=1, strategies=("range",), scale_partitions=4,
              plan_rounds=2, ledger_batches=20, growth_records=2000, growth_max_bytes=4_000_000,
              growth_partitions=(4,), growth_sizes=(100, 1000), warmup=False)  # fmt: skip


def _topics_for(partitions: int, max_topics: int) -> tuple[int, int]:
    """(topics, partitions per topic) for ``partitions`` in all: one topic up to 256."""
    topics = 1 if partitions <= 256 else max_topics
    return topics, partitions // topics


def _cpu_groups(cpu: dict[str, float]) -> dict[str, float]:
    """:class:`CpuSampler`'s seconds as section 1 shows them: bench, Spark, broker."""
    spark = cpu["jvm"] + cpu["workers"] + cpu["reader"]
    return {"bench": cpu["bench"], "spark": round(spark, 3), "broker": cpu["broker"]}


def run_throughput(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable) -> dict:
    """Section 1: plain vs read_range vs Spark's ceiling vs Spark's kafka source vs kafka-group
    (noop, delta-group)."""
    topics = [create_topic(servers, cfg.partitions, "bench")]
    started = time.perf_counter()
    produce(servers, topics, cfg.partitions, cfg.records, cfg.size)
    say(f"produced {cfg.records:,} x {cfg.size} B in {time.perf_counter() - started:.1f} s")
    ends = partition_counts(cfg.records, topics, cfg.partitions)
    warm: list[str] = []
    if cfg.warmup:  # Python workers, imports, the sink's first table
        warm = [create_topic(servers, cfg.partitions, "warm")]
        produce(servers, warm, cfg.partitions, 2000, cfg.size)
        for sink in ("noop", "delta-group"):
            spark_read(spark, servers, warm, sink, scratch)
        spark_read(spark, servers, warm, "noop", scratch, "kafka")
        const_source.const_arrow_rate(spark, 20_000, cfg.partitions, cfg.size)

    read = functools.partial(spark_read, spark, servers, topics)
    measured = {
        "plain": lambda: plain_read(servers, topics, cfg.partitions, cfg.records),
        "read_range": lambda: Run(
            *_core_parts.read_range_rate(servers, topics, cfg.partitions, ends)
        ),
        "spark_ceiling": lambda: Run(
            *const_source.const_arrow_rate(spark, cfg.records, cfg.partitions, cfg.size)
        ),
        "spark_kafka": lambda: read("noop", scratch, "kafka"),
        "noop": lambda: read("noop", scratch),
        "delta-group": lambda: read("delta-group", scratch),
    }
    runs: dict[str, list[Run]] = {}
    for round_no in range(cfg.rounds):
        for name, fn in measured.items():
            sampler = CpuSampler().start()
            run = fn()
            run.cpu = _cpu_groups(sampler.stop())
            say(f"round {round_no + 1} {name}: {run.rows:,} rows, {run.rate:,.0f} rec/s")
            runs.setdefault(name, []).append(run)
    sampler = CpuSampler().start()
    delta = spark_delta_sink(servers, topics, scratch, warm, cfg.rounds)
    delta_cpu = _cpu_groups(sampler.stop())
    for name, run in delta.items():
        say(f"spark delta-spark process, kafka -> {name}: {run.rows:,} rows, {run.rate:,.0f} rec/s")
    best = {name: max(rs, key=lambda r: r.rate) for name, rs in runs.items()}
    profiler = cProfile.Profile()
    profiler.runcall(_core_parts.read_range_rate, servers, topics, cfg.partitions, ends)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(10)
    return {
        "records": cfg.records, "size": cfg.size, "partitions": cfg.partitions,
        "rounds": cfg.rounds,
        "runs": {name: asdict(run) | {"rate": run.rate} for name, run in best.items()},
        "all_rates": {name: [r.rate for r in rs] for name, rs in runs.items()},
        "spark_delta": {name: asdict(run) | {"rate": run.rate} for name, run in delta.items()}
        | {"cpu": delta_cpu},
        "read_range_profile": text.getvalue(),
    }  # fmt: skip


def run_handover(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable) -> dict:
    """Section 2: the second member's wait, plain vs kafka-group, per strategy."""
    out = {}
    for strategy in cfg.strategies:
        plain = _core_parts.plain_handover(servers, strategy, cfg.handover_rate)
        say(f"handover {strategy} plain: {plain}")
        ours = _core_parts.spark_handover(
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
        topics = create_topics(servers, per_topic, [unique("growth") for _ in range(n_topics)])
        records = max(partitions, min(cfg.growth_records, cfg.growth_max_bytes // size))
        produce(servers, topics, per_topic, records, size)
        plain = plain_read(servers, topics, per_topic, records)
        noop = spark_read(spark, servers, topics, "noop", scratch)
        spark_kafka = spark_read(spark, servers, topics, "noop", scratch, "kafka")
        # What any Python data source could reach with rows of this size (no Kafka at all);
        # section 1 has it for its own record size, from ten times the records.
        ceiling_rate = math.nan
        if size != cfg.size:
            got, took = const_source.const_arrow_rate(spark, records, cfg.partitions, size)
            ceiling_rate = got / took
        row = {"partitions": partitions, "topics": n_topics, "size": size, "records": records,
               "plain_rate": plain.rate, "noop_rate": noop.rate, "noop_rows": noop.rows,
               "noop_phases_s": noop.phases, "spark_kafka_rate": spark_kafka.rate,
               "spark_kafka_rows": spark_kafka.rows, "ceiling_rate": ceiling_rate}  # fmt: skip
        if size == 100:
            for mode in ("stream", "plain"):
                res = planner(mode, servers, topics, per_topic, cfg.plan_rounds, scratch)
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
    topics = create_topics(servers, per_topic, [unique("scale") for _ in range(n_topics)])
    produce(servers, topics, per_topic, biggest, 100)
    stream = functools.partial(planner, "stream", servers, topics, per_topic)
    scale_result["stream_fetch"] = stream(cfg.plan_rounds, scratch, end_offsets="fetch")
    scale_result["stream_no_ledger"] = stream(cfg.plan_rounds, scratch, ledger=False)
    scale_result["stream_profiled"] = stream(max(2, cfg.plan_rounds // 3), scratch, profile=True)
    for res in scale_result.values():
        res.pop("batch_s", None)
    scale_result["partitions"] = biggest
    scale_result["topics"] = n_topics
    return growth, scale_result


def run_all(cfg: Config, spark: Any, servers: str, scratch: Path, say: Callable = print) -> dict:
    """Run every section; return the results (JSON-able)."""
    loads = [os.getloadavg()]
    started = time.perf_counter()
    results: dict[str, Any] = {"config": asdict(cfg), "section_s": {}}

    def section(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args)
        results["section_s"][name] = round(time.perf_counter() - t0, 1)
        loads.append(os.getloadavg())
        say(f"-- {name} done in {results['section_s'][name]} s, load {loads[-1][0]:.2f}")
        return out

    common = (cfg, spark, servers, scratch, say)
    results["throughput"] = section("throughput", run_throughput, *common)
    results["handover"] = section("handover", run_handover, *common)
    results["growth"], results["scale"] = section("growth+scale", run_growth_and_scale, *common)
    ledger = (servers, cfg.ledger_batches, cfg.ledger_partitions, min(1000, cfg.ledger_batches))
    results["ledger"] = section("ledger", _core_parts.ledger_commits, *ledger)
    say(f"ledger {results['ledger']}")
    results["load_1min"] = [round(x[0], 2) for x in loads]
    results["seconds"] = time.perf_counter() - started
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options (the defaults are the documented run)."""
    parser.add_argument("--quick", action="store_true", help="a smaller run (a few minutes)")
    parser.add_argument("--bootstrap-servers", help="use this broker instead of starting one")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the broker (unless given) and the session; every section; the plot."""
    cfg = QUICK if args.quick else Config()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    scratch = Path(tempfile.mkdtemp(prefix="spark-groups-bench-"))
    # The reader processes log to a file (the handover reads the subscribe times there).
    os.environ.setdefault("SPARK_GROUPS_LOG_FILE", str(scratch / "spark_groups.log"))
    os.environ.setdefault("SPARK_GROUPS_LOG_LEVEL", "INFO")
    kind = None if args.bootstrap_servers else args.broker
    try:
        with broker(args.broker) if kind else nullcontext() as started:
            spark = spark_session()
            try:
                servers = args.bootstrap_servers or started.bootstrap_servers
                results = run_all(cfg, spark, servers, scratch, lambda s: print(s, flush=True))
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["date"] = date
    results["machine"] = machine_facts(broker_description(kind))
    write_plot(results, PLOT)
    return results
