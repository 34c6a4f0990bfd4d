"""Whole runs (issue 26): AvailableNow queries timed as a user's job pays them, cold and warm.

    PYTHONPATH=. python -m bench.whole_run --records 4000000 --size 100 --partitions 4
    PYTHONPATH=. python -m bench.whole_run --tune --records 1000000   # Spark kafka's options

One Apache Kafka broker (``spark_groups.tools.kafka_broker``, the suite's settings: no initial
rebalance delay), one topic of ``--partitions`` partitions, ``--records`` values of
``--size`` bytes produced once. Every side reads all of it from offset 0, into ``noop``:

* ``kafka-group``: a fresh group each run, ``startingOffsets=earliest``;
* ``spark-kafka``: Spark's ``format("kafka")`` at its defaults;
* ``spark-kafka-tuned``: the same with :data:`SPARK_TUNED` (Kafka consumer settings given
  with the ``kafka.`` prefix, as Spark's Kafka integration guide allows, and Spark's
  ``minPartitions``; chosen with ``--tune``, the trials are in docs/benchmarks.md);
* ``python-floor``: no Kafka: :class:`bench.ceiling.ConstArrowStreamSource`, a Python
  streaming source that yields the same number of rows as prebuilt Arrow batches in one
  micro-batch of ``--partitions`` tasks: what a whole run costs any source built on Spark's
  Python data source API (its reader process, its Python workers, Arrow into the JVM);
* ``plain-defaults``: one confluent-kafka Consumer, librdkafka's defaults, ``consume(500)``;
* ``plain-tuned``: the same with the reader's settings (``READER_DEFAULTS``), as the
  throughput section's plain loop.

The Spark sides are a ``Trigger.AvailableNow`` query into ``noop``, timed from ``start()`` to
the return of ``awaitTermination()``: the *whole run*. Each side runs in a fresh Python
process (this module with ``--child``) that builds a new SparkSession (local[2], as
``bench.run.spark_session``) and then runs the side ``1 + --warm-runs`` times:

* *cold* = the first run in that process: the SparkSession (its JVM) is up, but nothing has
  run in it yet; the run pays loading the source's classes and the JIT's first pass, Spark's
  Python worker daemon and workers (kafka-group), the reader process on the driver and its
  imports (kafka-group), the group join (kafka-group) and the consumers' first connections.
  The session's own start (JVM launch) is measured apart (``session_s``), not in the rate;
  ``readStream...load()`` before ``start()`` is measured apart too (``define_s``);
* *warm* = the later runs in the same process (new query, new checkpoint, new group).

The rounds alternate the sides (round ``r`` starts at side ``r``). Each run also gives the
*warm-only* time of the throughput section: the sum of the batches' ``triggerExecution``,
less the first batch's ``latestOffset`` for kafka-group (the group join); for the plain
loops, ``assign()`` to the last record (no consumer creation and close). Rates are the best
of the rounds (the median is in the JSON); ratios are given against Spark's kafka source at
its defaults and tuned, for the whole run (cold, warm) and the warm-only time; the plain
loop the ratios use is said in the table.

CPU: :class:`bench.common.CpuSampler` over the run's window, by process group: the driver
JVM, Spark's Python workers, the reader process (kafka-group's group member), this process
(the PySpark driver; for the plain loops, the loop itself) and the broker.
Results: bench/results/whole_run.json; the table is appended to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    GROUP_TIMING,
    PROCESS_KINDS,
    CpuSampler,
    broker_description,
    create_topics,
    load_average,
    machine_facts,
    produce,
    unique,
)

ROOT = Path(__file__).resolve().parent.parent

#: Spark's kafka source tuned for throughput (``--tune`` tried the candidates below; the
#: trials are recorded in docs/benchmarks.md, "Whole runs").
SPARK_TUNED: dict[str, str] = {
    "kafka.fetch.max.bytes": "104857600",
    "kafka.max.partition.fetch.bytes": "10485760",
    "kafka.max.poll.records": "10000",
    "kafka.fetch.min.bytes": "1048576",
    "kafka.fetch.max.wait.ms": "100",
    "kafka.receive.buffer.bytes": "1048576",
}

#: What ``--tune`` tries: Kafka consumer settings (``kafka.`` prefix) that set how much one
#: fetch and one poll return, and Spark's ``minPartitions`` (tasks per batch).
TUNING_CANDIDATES: dict[str, dict[str, str]] = {
    "defaults": {},
    "fetch sizes": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
    },
    "poll records": {"kafka.max.poll.records": "10000"},
    "fetch sizes + poll records": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
    },
    "fetch sizes + poll records + buffers": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
        "kafka.receive.buffer.bytes": "1048576",
    },
    "fetch sizes + poll records + fetch.min.bytes": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
        "kafka.fetch.min.bytes": "1048576",
        "kafka.fetch.max.wait.ms": "100",
    },
    "poll records + fetch.min.bytes": {
        "kafka.max.poll.records": "10000",
        "kafka.fetch.min.bytes": "1048576",
        "kafka.fetch.max.wait.ms": "100",
    },
    "fetch sizes + poll records + fetch.min.bytes + buffers": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
        "kafka.fetch.min.bytes": "1048576",
        "kafka.fetch.max.wait.ms": "100",
        "kafka.receive.buffer.bytes": "1048576",
    },
    "fetch sizes + poll records, minPartitions=2": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
        "minPartitions": "2",
    },
    "fetch sizes + poll records, minPartitions=8": {
        "kafka.fetch.max.bytes": "104857600",
        "kafka.max.partition.fetch.bytes": "10485760",
        "kafka.max.poll.records": "10000",
        "minPartitions": "8",
    },
}

SPARK_SIDES = ("kafka-group", "spark-kafka", "spark-kafka-tuned", "python-floor")
PLAIN_SIDES = ("plain-defaults", "plain-tuned")
SIDES = (*SPARK_SIDES, *PLAIN_SIDES)

LABELS = {
    "kafka-group": "**kafka-group** -> noop",
    "spark-kafka": 'Spark `format("kafka")` -> noop, defaults',
    "spark-kafka-tuned": 'Spark `format("kafka")` -> noop, tuned',
    "python-floor": "Python streaming source floor (constant Arrow batches, no Kafka) -> noop",
    "plain-defaults": "plain confluent-kafka loop, librdkafka defaults",
    "plain-tuned": "plain confluent-kafka loop, reader's settings (`READER_DEFAULTS`)",
}

#: The page section this benchmark writes in docs/benchmarks.md (kept by bench.report).
MARKERS = ("<!-- whole-run:start -->", "<!-- whole-run:end -->")


# --- one run (in the child process) -----------------------------------------------------------


def _progress_times(query: Any) -> dict[str, Any]:
    """Rows, the sum of ``triggerExecution``, the first batch's ``latestOffset`` and the
    seconds by phase over a finished query's batches."""
    progress = [p for p in query.recentProgress if p is not None]
    phases: dict[str, float] = {}
    for p in progress:
        for phase, ms in p["durationMs"].items():
            phases[phase] = round(phases.get(phase, 0.0) + int(ms) / 1000.0, 3)
    return {
        "rows": sum(int(p["numInputRows"]) for p in progress),
        "batches": len(progress),
        "triggers_s": phases.get("triggerExecution", 0.0),
        "first_latest_offset_s": (
            int(progress[0]["durationMs"].get("latestOffset", 0)) / 1000.0 if progress else 0.0
        ),
        "phases_s": phases,
    }


def _reader(spark: Any, spec: dict[str, Any], group: str) -> Any:
    side, servers, topic = spec["side"], spec["servers"], spec["topic"]
    if side == "python-floor":
        from bench.ceiling import STREAM_FORMAT, ConstArrowStreamSource

        spark.dataSource.register(ConstArrowStreamSource)
        return (
            spark.readStream.format(STREAM_FORMAT)
            .option("rows", spec["records"])
            .option("partitions", spec["partitions"])
            .option("size", spec["size"])
            .load()
        )
    if side == "kafka-group":
        return (
            spark.readStream.format("kafka-group")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("group.id", group)
            .option("startingOffsets", "earliest")
            .options(**{f"kafka.{k}": v for k, v in GROUP_TIMING.items()})
            .load()
        )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if side == "spark-kafka-tuned":
        reader = reader.options(**spec["tuned"])
    return reader.load()


def spark_run(spark: Any, spec: dict[str, Any], log_file: Path | None) -> dict[str, Any]:
    """One AvailableNow query of ``spec["side"]`` into noop, timed from ``start()`` to the
    end of ``awaitTermination()``."""
    from bench.scheduled import _phase_times

    side = spec["side"]
    group = unique("whole")
    work = Path(spec["scratch"]) / group
    t_define = time.perf_counter()
    df = _reader(spark, spec, group)
    define_s = time.perf_counter() - t_define
    sampler = CpuSampler(spec["extra_roots"]).start()
    wall0 = time.time()
    t0 = time.perf_counter()
    query = (
        df.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(work / "checkpoint"))
        .format("noop")
        .start()
    )
    start_returned_s = time.perf_counter() - t0
    query.awaitTermination(900)
    whole_s = time.perf_counter() - t0
    cpu = sampler.stop()
    try:
        if query.isActive:
            raise TimeoutError(f"{side}: the query did not finish within 900 s")
        if query.exception() is not None:
            raise RuntimeError(f"{side}: the query failed: {query.exception()}")
        times = _progress_times(query)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    excluded = times["first_latest_offset_s"] if side == "kafka-group" else 0.0
    out: dict[str, Any] = {
        **times,
        "define_s": round(define_s, 3),
        "start_returned_s": round(start_returned_s, 3),
        "whole_s": round(whole_s, 3),
        "warm_only_s": round(times["triggers_s"] - excluded, 3),
        "outside_triggers_s": round(whole_s - times["triggers_s"], 3),
        "cpu_s": cpu,
    }
    if side == "kafka-group" and log_file is not None:
        phases = _phase_times(log_file, group, wall0)
        out.update({f"to_{k}_s": round(v - wall0, 3) for k, v in phases.items()})
    return out


def plain_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One plain confluent-kafka read of the whole topic, ``consume(500)`` in a loop: timed
    from creating the Consumer to closing it (whole), and from ``assign()`` to the last
    record (warm-only)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from spark_groups.read.reader import READER_DEFAULTS

    settings = dict(READER_DEFAULTS) if spec["side"] == "plain-tuned" else {}
    total = spec["records"]
    sampler = CpuSampler(spec["extra_roots"]).start()
    t0 = time.perf_counter()
    consumer = Consumer(
        {
            **settings,
            "bootstrap.servers": spec["servers"],
            "group.id": unique("plain"),  # unused (assign), but librdkafka needs one
            "enable.auto.commit": False,
        }
    )
    t_assign = time.perf_counter()
    consumer.assign([KafkaTopicPartition(spec["topic"], p, 0) for p in range(spec["partitions"])])
    seen = 0
    value_bytes = 0
    deadline = time.monotonic() + 600
    while seen < total:
        for msg in consumer.consume(min(500, total - seen), 1.0):
            if msg.error() is not None:
                continue
            value = msg.value()
            value_bytes += 0 if value is None else len(value)
            seen += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"plain consumer read {seen} of {total} records in 600 s")
    t_read = time.perf_counter()
    consumer.close()
    whole_s = time.perf_counter() - t0
    cpu = sampler.stop()
    return {
        "rows": seen,
        "whole_s": round(whole_s, 3),
        "warm_only_s": round(t_read - t_assign, 3),
        "settings": settings,
        "cpu_s": cpu,
    }


def child_main(spec: dict[str, Any]) -> None:
    """Run one side ``spec["runs"]`` times in this (fresh) process; write the results."""
    from bench.run import spark_session

    log = os.environ.get("SPARK_GROUPS_LOG_FILE")
    log_file = Path(log) if log else None
    out: dict[str, Any] = {"side": spec["side"], "runs": []}
    spark = None
    if spec["side"] in SPARK_SIDES:
        t0 = time.perf_counter()
        spark = spark_session()
        out["session_s"] = round(time.perf_counter() - t0, 3)
    try:
        if "variants" in spec:
            out["variants"] = tune_child(spark, spec)
        for i in range(0 if "variants" in spec else spec["runs"]):
            run = spark_run(spark, spec, log_file) if spark is not None else plain_run(spec)
            if run["rows"] != spec["records"]:
                raise RuntimeError(f"{spec['side']} run {i}: {run['rows']} of {spec['records']}")
            run["kind"] = "cold" if i == 0 else "warm"
            out["runs"].append(run)
            print(
                f"  {spec['side']} {run['kind']}: whole {run['whole_s']:.2f} s, "
                f"{spec['records'] / run['whole_s']:,.0f} rec/s",
                flush=True,
            )
    finally:
        if spark is not None:
            spark.stop()
    Path(spec["out"]).write_text(json.dumps(out, indent=1) + "\n")


# --- the parent ----------------------------------------------------------------------------------


def broker_pids() -> list[int]:
    """This process's descendants that run the broker (their CPU is sampled by the children)."""
    from bench.common import _cmdline, _proc_stat

    parents: dict[str, str] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            stat = _proc_stat(pid)
            if stat is not None:
                parents[pid] = str(stat[0])
    me = str(os.getpid())
    found = []
    for pid, _ in parents.items():
        up, hops = pid, 0
        while up in parents and up != me and hops < 20:
            up, hops = parents[up], hops + 1
        if up == me and "kafka.kafka" in _cmdline(pid).lower():
            found.append(int(pid))
    return found


def run_child(spec: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Run ``spec`` in a fresh Python process (``--child``); return its results."""
    out = scratch / f"{unique(spec['side'])}.json"
    log = scratch / f"{out.stem}.log"
    spec = {**spec, "out": str(out), "scratch": str(scratch)}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.whole_run", "--child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=sink,
            env=env,
            cwd=ROOT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
        code = proc.wait(timeout=1800)
    if code != 0 or not out.exists():
        raise RuntimeError(f"{spec['side']} failed ({code}): {log.read_text()[-3000:]}")
    return json.loads(out.read_text())


def summarize(records: int, results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per side: best and median rates of cold and warm whole runs and of the warm-only
    time (from the warm runs), CPU per million records, and kafka-group's time split."""
    summary: dict[str, Any] = {}
    for side, children in results.items():
        cold = [c["runs"][0] for c in children]
        warm = [r for c in children for r in c["runs"][1:]]
        row: dict[str, Any] = {}
        for name, runs, key in (
            ("cold", cold, "whole_s"),
            ("warm", warm, "whole_s"),
            ("warm_only", warm, "warm_only_s"),
            ("cold_warm_only", cold, "warm_only_s"),
        ):
            rates = [records / r[key] for r in runs if r.get(key)]
            if rates:
                row[f"{name}_best"] = round(max(rates))
                row[f"{name}_median"] = round(statistics.median(rates))
        for name, runs in (("cold", cold), ("warm", warm)):
            if runs:
                row[f"{name}_cpu_s_per_m"] = {
                    k: round(statistics.median(r["cpu_s"][k] for r in runs) * 1e6 / records, 3)
                    for k in PROCESS_KINDS
                }
                for key in (
                    "whole_s",
                    "triggers_s",
                    "first_latest_offset_s",
                    "outside_triggers_s",
                    "define_s",
                    "start_returned_s",
                    "to_subscribed_s",
                    "to_assigned_s",
                    "to_resumed_s",
                ):
                    values = [r[key] for r in runs if r.get(key) is not None]
                    if values:
                        row[f"{name}_{key}"] = round(statistics.median(values), 3)
        sessions = [c["session_s"] for c in children if "session_s" in c]
        if sessions:
            row["session_s"] = round(statistics.median(sessions), 2)
        summary[side] = row
    return summary


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def _rate(x: float | None) -> str:
    return f"{x:,.0f}" if x else "n/a"


def render(results: dict[str, Any]) -> str:
    """The markdown section: the command, date, load, and the tables."""
    s = results["summary"]
    cfg = results["config"]
    base, tuned = s.get("spark-kafka", {}), s.get("spark-kafka-tuned", {})
    loads = results["load"]
    lines = [
        MARKERS[0],
        "## Whole runs (issue 26)",
        "",
        f"`{results['command']}` ({results['date']}; {results['machine']['broker']}; "
        f"{cfg['rounds']} rounds, {cfg['warm_runs']} warm run(s) per cold one; took "
        f"{results['seconds'] / 60:.1f} min). Load average before: {loads['before']}; after: "
        f"{loads['after']} (`uptime`, 1/5/15 min) on {results['machine']['cores']} cores. "
        "kafka-group's executor read path: "
        f"{results['machine'].get('executor read path', 'python (before the native one)')}.",
        "",
        f"{cfg['records']:,} records x {cfg['size']} B in {cfg['partitions']} partitions, "
        "read from offset 0 into `noop` with `Trigger.AvailableNow`. *Whole run*: `start()` to "
        "the end of `awaitTermination()`. *Cold*: the first run in a fresh Python process "
        "with a new SparkSession (JVM up, nothing run yet: the run pays class loading and "
        "JIT, Python workers, kafka-group's reader process and imports, the group join, the "
        "first connections; the session's own start is not in it, see below). *Warm*: later "
        "runs in the same session. *Warm-only*: the throughput section's time (the sum of "
        "`triggerExecution`, less kafka-group's first `latestOffset`, the group join; plain "
        "loop: `assign()` to the last record). Rates: best of the runs (median in brackets); "
        "ratios: of the best. Every run is in `bench/results/whole_run.json`.",
        "",
        "| side | cold whole run (rec/s) | warm whole run (rec/s) | warm-only (rec/s) |"
        " cold vs Spark default / tuned | warm vs Spark default / tuned |"
        " warm-only vs Spark default / tuned |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in SIDES:
        r = s.get(side)
        if not r:
            continue
        cells = [LABELS[side]]
        for key in ("cold", "warm", "warm_only"):
            cells.append(f"{_rate(r.get(f'{key}_best'))} ({_rate(r.get(f'{key}_median'))})")
        for key in ("cold_best", "warm_best", "warm_only_best"):
            cells.append(
                f"{_ratio(r.get(key), base.get(key))} / {_ratio(r.get(key), tuned.get(key))}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    kg, plain = s.get("kafka-group", {}), s.get("plain-tuned", {})
    plain_d = s.get("plain-defaults", {})
    lines += [
        "",
        "kafka-group vs the plain loops (warm whole run): "
        f"{_ratio(kg.get('warm_best'), plain.get('warm_best'))} of the loop with the reader's "
        f'settings (the throughput section\'s "plain"), '
        f"{_ratio(kg.get('warm_best'), plain_d.get('warm_best'))} of the loop with librdkafka's "
        'defaults. Ratios to "plain" elsewhere in this file use the reader\'s settings.',
    ]
    floor = s.get("python-floor", {})
    if floor:
        lines += [
            "",
            "The Python streaming source floor (no Kafka, the rows prebuilt) against Spark's "
            "kafka source at its defaults: cold "
            f"{_ratio(floor.get('cold_best'), base.get('cold_best'))}, warm "
            f"{_ratio(floor.get('warm_best'), base.get('warm_best'))}; no source on Spark's "
            "Python data source API can pass it. kafka-group is "
            f"{_ratio(kg.get('cold_best'), floor.get('cold_best'))} (cold) and "
            f"{_ratio(kg.get('warm_best'), floor.get('warm_best'))} (warm) of the floor.",
        ]
    lines += [
        "",
        "CPU seconds per million records (median of the runs) by process: driver JVM / Python "
        "workers / reader process (kafka-group's member) / the PySpark driver or the plain "
        "loop / broker.",
        "",
        "| side | cold | warm |",
        "| --- | --- | --- |",
    ]
    for side in SIDES:
        r = s.get(side)
        if not r:
            continue
        cells = [LABELS[side]]
        for kind in ("cold", "warm"):
            cpu = r.get(f"{kind}_cpu_s_per_m", {})
            total = sum(cpu.values())
            cells.append(
                " / ".join(f"{cpu.get(k, 0):.2f}" for k in PROCESS_KINDS) + f" = {total:.2f}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where the whole run's time goes (seconds, median): `define` is `readStream...load()` "
        "before `start()` (not in the rate); `outside triggers` is the whole run less the sum "
        "of `triggerExecution` (query start-up before the first batch, the end after the "
        "last); `first latestOffset` is kafka-group's group join (for Spark's source, its "
        "first offset lookup); the SparkSession's start (JVM launch) is paid once per process.",
        "",
        "| side | run | define | whole | triggers | first latestOffset | outside triggers |"
        " session start |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in SPARK_SIDES:
        r = s.get(side)
        if not r:
            continue
        for kind in ("cold", "warm"):
            cells = [LABELS[side], kind]
            for key in (
                "define_s",
                "whole_s",
                "triggers_s",
                "first_latest_offset_s",
                "outside_triggers_s",
            ):
                value = r.get(f"{kind}_{key}")
                cells.append("" if value is None else f"{value:.2f}")
            cells.append(f"{r['session_s']:.1f}" if kind == "cold" and "session_s" in r else "")
            lines.append("| " + " | ".join(cells) + " |")
    marks = [
        f"{kind} run: subscribed {kg.get(f'{kind}_to_subscribed_s', 'n/a')} s, assigned "
        f"{kg.get(f'{kind}_to_assigned_s', 'n/a')} s, first partitions resumed "
        f"{kg.get(f'{kind}_to_resumed_s', 'n/a')} s after `start()`"
        for kind in ("cold", "warm")
    ]
    lines += [
        "",
        "kafka-group's reader process log (median): " + "; ".join(marks) + ".",
        "",
        f"Spark's kafka source tuned: `{json.dumps(results['spark_tuned'])}`.",
    ]
    for i, trial in enumerate(results.get("tuning", [])):
        lines += [
            "",
            f"Tuning trial {i + 1}: `{trial['command']}` ({trial['method']}; "
            f"{trial['records']:,} records; load average {_load(trial['uptime'][0])} before, "
            f"{_load(trial['uptime'][1])} after). Whole-run rec/s, warm:",
            "",
            "| options | median | best | runs |",
            "| --- | ---: | ---: | --- |",
        ]
        for name, rates in trial["rates"].items():
            options = trial.get("candidates", {}).get(name, TUNING_CANDIDATES.get(name, {}))
            shown = ", ".join(f"`{k}={v}`" for k, v in options.items()) or "(defaults)"
            lines.append(
                f"| {shown} | {statistics.median(rates):,.0f} | {max(rates):,.0f} | "
                + ", ".join(f"{r / 1000:.0f}k" for r in rates)
                + " |"
            )
    if results.get("notes"):
        lines += ["", *results["notes"]]
    lines.append("<!-- whole-run:end -->")
    return "\n".join(lines) + "\n"


def write_section(section: str, doc: Path) -> None:
    """Put ``section`` in ``doc`` between its markers (appended the first time)."""
    text = doc.read_text()
    start, end = MARKERS
    if start in text and end in text:
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


def _load(uptime: str) -> str:
    """The load averages of an ``uptime`` line."""
    return uptime.split("average:")[-1].strip()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def tune_child(spark: Any, spec: dict[str, Any]) -> dict[str, list[float]]:
    """In one session: a warm-up run, then ``spec["runs"]`` rounds of every candidate in
    ``spec["variants"]``, alternating (round ``r`` starts at candidate ``r``); the whole-run
    rates by candidate."""
    variants: dict[str, dict[str, str]] = spec["variants"]
    spark_run(spark, {**spec, "tuned": {}}, None)
    names = list(variants)
    found: dict[str, list[float]] = {name: [] for name in names}
    for r in range(spec["runs"]):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            run = spark_run(spark, {**spec, "tuned": variants[name]}, None)
            found[name].append(round(spec["records"] / run["whole_s"]))
            print(f"  round {r + 1} {name}: {found[name][-1]:,} rec/s", flush=True)
    return found


def tune(
    servers: str,
    topic: str,
    records: int,
    partitions: int,
    rounds: int,
    scratch: Path,
    only: Sequence[str] = (),
) -> dict:
    """The :data:`TUNING_CANDIDATES` (or those named in ``only``) in one warm session,
    ``rounds`` warm whole runs each, interleaved (:func:`tune_child`)."""
    variants = {k: v for k, v in TUNING_CANDIDATES.items() if not only or k in only}
    spec = {
        "side": "spark-kafka-tuned",
        "variants": variants,
        "tuned": {},
        "servers": servers,
        "topic": topic,
        "records": records,
        "partitions": partitions,
        "runs": rounds,
        "extra_roots": broker_pids(),
    }
    found: dict[str, list[float]] = run_child(spec, scratch)["variants"]
    for name, rates in found.items():
        print(f"{name}: median {statistics.median(rates):,.0f}, best {max(rates):,.0f}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-runs", type=int, default=2, help="warm runs after each cold one")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset")
    parser.add_argument("--tuned", help="Spark kafka's tuned options as JSON")
    parser.add_argument("--tune", action="store_true", help="try TUNING_CANDIDATES instead")
    parser.add_argument("--candidates", help="--tune: only these (names, '|'-separated)")
    parser.add_argument("--note", action="append", default=[], help="a line for the section")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "whole_run.json"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--render", help="only write the section again from this results JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(json.loads(args.child))
        return 0
    if args.render:
        done = json.loads(Path(args.render).read_text())
        done["notes"] = args.note or done.get("notes", [])
        Path(args.render).write_text(json.dumps(done, indent=1, default=str) + "\n")
        write_section(render(done), Path(args.doc))
        return 0

    from spark_groups.tools.kafka_broker import KafkaBroker

    tuned = json.loads(args.tuned) if args.tuned else SPARK_TUNED
    sides = [s for s in args.sides.split(",") if s]
    command = "PYTHONPATH=. python -m bench.whole_run" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    scratch = Path(tempfile.mkdtemp(prefix="whole-run-"))
    # The reader processes' log gives kafka-group's phases (set it to keep the log).
    os.environ.setdefault("SPARK_GROUPS_LOG_FILE", str(scratch / "spark_groups.log"))
    os.environ.setdefault("SPARK_GROUPS_LOG_LEVEL", "INFO")
    started_at = datetime.now(UTC)
    load_before = _uptime()
    loads = [load_average()]
    t_start = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    try:
        with KafkaBroker() as broker:
            servers = broker.bootstrap_servers
            topic = create_topics(servers, args.partitions, prefix="whole")[0]
            t0 = time.perf_counter()
            produce(servers, [topic], args.partitions, args.records, args.size)
            print(f"produced {args.records:,} x {args.size} B in {time.perf_counter() - t0:.1f} s")
            base = {
                "servers": servers,
                "topic": topic,
                "records": args.records,
                "partitions": args.partitions,
                "size": args.size,
                "tuned": tuned,
                "extra_roots": broker_pids(),
            }
            if args.tune:
                found = tune(
                    servers,
                    topic,
                    args.records,
                    args.partitions,
                    args.rounds,
                    scratch,
                    args.candidates.split("|") if args.candidates else (),
                )
                tuning = Path(args.out).with_name("whole_run_tuning.json")
                passes = json.loads(tuning.read_text())["passes"] if tuning.exists() else []
                passes.append(
                    {
                        "command": command,
                        "method": "one warm session, candidates alternating",
                        "records": args.records,
                        "rounds": args.rounds,
                        "uptime": [load_before, _uptime()],
                        "candidates": {k: TUNING_CANDIDATES[k] for k in found},
                        "rates": found,
                    }
                )
                tuning.parent.mkdir(parents=True, exist_ok=True)
                tuning.write_text(json.dumps({"passes": passes}, indent=1) + "\n")
                return 0
            for round_no in range(args.rounds):
                order = sides[round_no % len(sides) :] + sides[: round_no % len(sides)]
                for side in order:
                    print(f"round {round_no + 1} {side}", flush=True)
                    spec = {**base, "side": side, "runs": 1 + args.warm_runs}
                    results[side].append(run_child(spec, scratch))
                    loads.append(load_average())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out = {
        "command": command,
        "date": started_at.strftime("%Y-%m-%d %H:%M UTC"),
        "config": {
            "records": args.records,
            "size": args.size,
            "partitions": args.partitions,
            "rounds": args.rounds,
            "warm_runs": args.warm_runs,
        },
        "spark_tuned": tuned,
        "load": {
            "before": load_before,
            "after": _uptime(),
            "1min": [round(x[0], 2) for x in loads],
        },
        "seconds": time.perf_counter() - t_start,
        "machine": machine_facts(broker_description("kafka")),
        "summary": summarize(args.records, results),
        "runs": results,
        "notes": args.note,
    }
    tuning = Path(args.out).with_name("whole_run_tuning.json")
    if tuning.exists():
        out["tuning"] = json.loads(tuning.read_text())["passes"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    section = render(out)
    print(section)
    if not args.no_doc:
        write_section(section, Path(args.doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
