"""Revocation wait by trigger interval, with and without a durability signal (issue 14).

    python -m bench barrier_wait --write-docs [--triggers 0.5,30,300] [--modes ...]

Starts Apache Kafka itself (``bash jars/fetch kafka``) and a local[2] Spark session. For every
trigger interval and mode: a fresh 4-partition topic with a steady flow (200 records/s),
query A (``foreachBatch``, cooperative-sticky) reads it; right after A's first batch with
records, query B joins the group with the same trigger (t0). Measured:

* **barrier wait**: A's revocation, from the rebalance history (``barrier_wait_ms``);
* **next trigger**: how far A's next trigger was at t0 (Spark fires processing-time
  triggers at multiples of the interval since the epoch), the wait without a signal;
* **to B's first record**: from t0 to B's first non-empty batch.

Modes: ``next-trigger`` is the source without ``checkpointLocation`` (the barrier waits for
Spark's next trigger, as before issue 14); ``durable`` gives it the query's checkpoint. One
round per (trigger, mode). A 5-minute trigger makes a run last up to ten minutes.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.kafka import Flow, broker, create_topics, unique, wait_until
from bench.harness.spark import each_batch, source_options, spark_session

SECTION = "barrier-wait"
MODES = ("next-trigger", "durable")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--triggers", default="0.5,30,300", help="seconds, comma-separated")
    parser.add_argument("--modes", default=",".join(MODES))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every (trigger, mode) run, on a broker and Spark session of their own."""
    results = []
    spark = spark_session()
    try:
        with broker("kafka") as kafka, tempfile.TemporaryDirectory() as scratch:
            for trigger_s in [float(t) for t in args.triggers.split(",")]:
                for mode in args.modes.split(","):
                    results.append(
                        one_run(spark, kafka.bootstrap_servers, trigger_s, mode, Path(scratch))
                    )
                    print(results[-1], flush=True)
    finally:
        spark.stop()
    return {"runs": results}


def one_run(spark: Any, servers: str, trigger_s: float, mode: str, scratch: Path) -> dict:
    """Measure one handover (see the module doc)."""
    from spark_groups.group.history import history_path, read_history

    topic = create_topics(servers, 4, prefix="barrier")[0]
    group = unique("barrier")
    work = scratch / group
    ledger = str(work / "ledger")
    opts = source_options(servers, [topic], group, **{"offsets.table": ledger})
    a_batches: list[float] = []
    b_first: list[float] = []

    def on_a(df: Any, batch_id: int) -> None:
        if df.count() > 0:
            a_batches.append(time.time())

    def on_b(df: Any, batch_id: int) -> None:
        if not b_first and df.count() > 0:
            b_first.append(time.time())

    def start(name: str, fn: Any) -> Any:
        checkpoint = work / f"cp-{name}"
        durable = {"checkpointLocation": str(checkpoint)} if mode == "durable" else {}
        return each_batch(spark, {**opts, **durable}, fn, int(trigger_s * 1000), checkpoint)

    timeout_s = 2 * trigger_s + 180
    flow = Flow(servers, topic, 4, 200)
    flow.start()
    queries = []
    try:
        queries.append(start("a", on_a))
        wait_until(lambda: bool(a_batches), timeout_s, "query A's first batch")
        t0 = time.time()
        queries.append(start("b", on_b))
        wait_until(lambda: bool(b_first), timeout_s, "query B's first record")
        # A's revocation is in the history once A flushes it (its next batch, or its stop).
    finally:
        for query in queries:
            query.stop()
        flow.stop()
    period_ms = int(trigger_s * 1000)
    next_trigger_s = (period_ms - int(t0 * 1000) % period_ms) / 1000
    revoked = [r for r in read_history(history_path(ledger)).to_pylist() if r["event"] == "revoked"]
    waits = [r["barrier_wait_ms"] / 1000 for r in revoked if r["barrier_wait_ms"] is not None]
    timeouts = sum(1 for w in waits if w >= 294)
    return {
        "trigger_s": trigger_s,
        "mode": mode,
        "barrier_wait_s": max(waits) if waits else math.nan,
        "next_trigger_s": next_trigger_s,
        "to_first_record_s": b_first[0] - t0,
        "barrier_timeouts": timeouts,
    }


def _s(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    lines = [
        "## Revocation wait by trigger interval",
        "",
        "A second member joins a group whose first member has just finished a batch (4 "
        "partitions, 200 records/s, cooperative-sticky, `foreachBatch`, local[2] Spark, "
        "Apache Kafka 4.3.1). *next-trigger*: the source without `checkpointLocation` (the "
        "barrier waits for Spark's next trigger, as before); *durable*: with the query's "
        "checkpoint, the barrier ends when the batch is in Spark's commit log. *Next trigger* "
        "is how far the first member's next trigger was when the second joined (Spark aligns "
        "triggers to multiples of the interval). Measured "
        f"{results['when'][:10]} with `{results['command']}`.",
        "",
        "| trigger (s) | mode | barrier wait (s) | next trigger (s) | to new owner's first "
        "record (s) | barrier timeouts |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["runs"]:
        lines.append(
            f"| {r['trigger_s']:g} | {r['mode']} | {_s(r['barrier_wait_s'])} | "
            f"{_s(r['next_trigger_s'])} | {_s(r['to_first_record_s'])} | "
            f"{r['barrier_timeouts']} |"
        )
    return "\n".join(lines)
