"""Whole runs: AvailableNow queries timed as a user's job pays them, cold and warm.

    python -m bench whole_run --records 4000000 --size 100 --partitions 4 --write-docs

Every side (:data:`._whole_run_report.LABELS`; :data:`SPARK_TUNED` from the tuning trials
made with ``--tune`` of ``bench/whole_run.py`` at commit f0fc54c) reads the same topic from
offset 0 into ``noop``; ``--rounds`` rounds, sides alternating, each in a fresh process
(``--child``) with a new session: one cold run and ``--warm-runs`` warm ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.docs import ROOT
from bench.harness.kafka import broker, broker_description, produce
from bench.harness.procfs import CpuSampler, broker_pids, machine_facts, uptime
from bench.harness.spark import (
    log_file,
    plain_read,
    reader_log_times,
    source_options,
    spark_session,
    stream,
    timed_run,
)
from bench.scenarios._whole_run_report import SIDES, SPARK_SIDES, render, summarize

from support.broker import create_topic, unique

__all__ = ["SECTION", "add_arguments", "child", "render", "run", "spark_run"]

SECTION = "whole-run"

#: Spark's kafka source tuned for throughput (the trials are in docs/benchmarks.md, "Whole
#: runs").
SPARK_TUNED: dict[str, str] = {
    "kafka.fetch.max.bytes": "104857600",
    "kafka.max.partition.fetch.bytes": "10485760",
    "kafka.max.poll.records": "10000",
    "kafka.fetch.min.bytes": "1048576",
    "kafka.fetch.max.wait.ms": "100",
    "kafka.receive.buffer.bytes": "1048576",
}


def _reader(spark: Any, spec: dict[str, Any], group: str) -> Any:
    side, servers, topics = spec["side"], spec["servers"], [spec["topic"]]
    if side == "python-floor":
        const = {"rows": spec["records"], "partitions": spec["partitions"], "size": spec["size"]}
        return stream(spark, "const", const)
    if side == "kafka-group":
        return stream(spark, side, source_options(servers, topics, group))
    tuned = spec["tuned"] if "tuned" in side else {}
    return stream(spark, "kafka", source_options(servers, topics, **tuned))


def spark_run(spark: Any, spec: dict[str, Any], log: Path | None) -> dict[str, Any]:
    """One AvailableNow query of ``spec["side"]`` into noop, timed from ``start()`` to the
    end of ``awaitTermination()``."""
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
        run = timed_run(query, side, skip_join=True)  # the first latestOffset apart
    finally:
        shutil.rmtree(work, ignore_errors=True)
    triggers_s = run.seconds + run.excluded_s
    times = {"triggers_s": triggers_s, "first_latest_offset_s": run.excluded_s,
             "define_s": define_s, "start_returned_s": start_returned_s, "whole_s": whole_s,
             "warm_only_s": run.seconds if side == "kafka-group" else triggers_s,
             "outside_triggers_s": whole_s - triggers_s}  # fmt: skip
    out: dict[str, Any] = {"rows": run.rows, "batches": int((run.phases or {}).get("batches", 0)),
                           "phases_s": run.phases, "cpu_s": cpu}  # fmt: skip
    out.update({k: round(v, 3) for k, v in times.items()})
    if side == "kafka-group" and log is not None:
        phases = reader_log_times(log, group, wall0)
        phases.pop("subscribed_all")
        out.update({f"to_{k}_s": round(v - wall0, 3) for k, v in phases.items()})
    return out


def plain_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One plain confluent-kafka read of the whole topic (:func:`plain_read`): whole = from
    creating the Consumer to closing it, warm-only = ``assign()`` to the last record."""
    sampler = CpuSampler(spec["extra_roots"]).start()
    run = plain_read(spec["servers"], [spec["topic"]], spec["partitions"], spec["records"],
                     tuned=spec["side"] == "plain-tuned")  # fmt: skip
    cpu = sampler.stop()
    assert run.whole_s is not None
    return {"rows": run.rows, "whole_s": round(run.whole_s, 3),
            "warm_only_s": round(run.seconds, 3), "cpu_s": cpu}  # fmt: skip


def child(spec: dict[str, Any]) -> None:
    """Run one side ``spec["runs"]`` times in this (fresh) process; write the results."""
    log = log_file()
    out: dict[str, Any] = {"side": spec["side"], "runs": []}
    spark = None
    if spec["side"] in SPARK_SIDES:
        t0 = time.perf_counter()
        spark = spark_session()
        out["session_s"] = round(time.perf_counter() - t0, 3)
    try:
        for i in range(spec["runs"]):
            run = spark_run(spark, spec, log) if spark is not None else plain_run(spec)
            if run["rows"] != spec["records"]:
                raise RuntimeError(f"{spec['side']} run {i}: {run['rows']} of {spec['records']}")
            run["kind"] = "cold" if i == 0 else "warm"
            out["runs"].append(run)
            line = f"  {spec['side']} {run['kind']}: whole {run['whole_s']:.2f} s, "
            print(f"{line}{spec['records'] / run['whole_s']:,.0f} rec/s", flush=True)
    finally:
        if spark is not None:
            spark.stop()
    Path(spec["out"]).write_text(json.dumps(out, indent=1) + "\n")


def run_child(spec: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Run ``spec`` in a fresh Python process (``--child``); return its results."""
    out = scratch / f"{unique(spec['side'])}.json"
    log = scratch / f"{out.stem}.log"
    spec = {**spec, "out": str(out), "scratch": str(scratch)}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", "whole_run", "--child", json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=sink, env=env, cwd=ROOT, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
        code = proc.wait(timeout=1800)
    if code != 0 or not out.exists():
        raise RuntimeError(f"{spec['side']} failed ({code}): {log.read_text()[-3000:]}")
    return json.loads(out.read_text())


#: The options the section names.
CONFIG_KEYS = ("records", "size", "partitions", "rounds", "warm_runs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-runs", type=int, default=2, help="warm runs after each cold one")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset")
    parser.add_argument("--note", action="append", default=[], help="a line for the section")
    parser.add_argument("--keep-trials", default=str(ROOT / "bench" / "results" / "whole_run.json"),
                        help="the saved results whose tuning trials the section keeps")  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every side ``--rounds`` times, each in a fresh process (see the module doc)."""
    sides = [s for s in args.sides.split(",") if s]
    scratch = Path(tempfile.mkdtemp(prefix="whole-run-"))
    # The reader processes' log gives kafka-group's phases (set it to keep the log).
    os.environ.setdefault("SPARK_GROUPS_LOG_FILE", str(scratch / "spark_groups.log"))
    os.environ.setdefault("SPARK_GROUPS_LOG_LEVEL", "INFO")
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = uptime()
    loads = [os.getloadavg()]
    t_start = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    try:
        with broker("kafka") as kafka:
            servers = kafka.bootstrap_servers
            topic = create_topic(servers, args.partitions, "whole")
            produce(servers, [topic], args.partitions, args.records, args.size)
            base = {"servers": servers, "topic": topic, "records": args.records,
                    "partitions": args.partitions, "size": args.size, "tuned": SPARK_TUNED,
                    "extra_roots": broker_pids()}  # fmt: skip
            for round_no in range(args.rounds):
                for side in sides[round_no % len(sides) :] + sides[: round_no % len(sides)]:
                    print(f"round {round_no + 1} {side}", flush=True)
                    spec = {**base, "side": side, "runs": 1 + args.warm_runs}
                    results[side].append(run_child(spec, scratch))
                    loads.append(os.getloadavg())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    kept = Path(args.keep_trials)
    return {
        "date": date,
        "config": {k: vars(args)[k] for k in CONFIG_KEYS},
        "spark_tuned": SPARK_TUNED,
        "load": {"before": load_before, "after": uptime(), "1min": [round(x[0], 2) for x in loads]},
        "seconds": time.perf_counter() - t_start,
        "machine": machine_facts(broker_description("kafka")),
        "summary": summarize(args.records, results),
        "runs": results,
        "notes": args.note,
        "tuning": json.loads(kept.read_text()).get("tuning", []) if kept.exists() else [],
    }
