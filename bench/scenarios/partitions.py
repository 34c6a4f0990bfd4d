"""Many partitions: two members, one record per partition per batch, 1,000 against 10,000.

    python -m bench partitions                       # 1,000 and 10,000 partitions
    python -m bench partitions --counts 10000 --seconds 30 --trigger 5

Per count: that many partitions over ``--topics`` topics, one record per partition per
``--trigger`` seconds into each, and two simulated members (:mod:`._sim_group`: the product
without Spark's JVM) on that trigger writing one new delta-group table: one new record per
partition per batch while the members keep up. Counted: the batches
of ``--seconds`` once both read. Then member ``m01`` is stopped with SIGTERM (it leaves the
group) and started again: *resume* is the time from its start to its first batch with
records (imports, join, claim, resume), next to its first start's. Driver time per batch is
``latest_offset`` (plan) plus the safe point's commit (``commit_durable``); the sink's commit
is ``DeltaSink.commit``; memory is each member process's peak RSS (``VmHWM``). The broker
and the members keep Kafka's default group timings (45 s sessions), as users' do. The
checkpoint measured is one written at the end: every partition's transaction id and claim.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from bench.harness.kafka import PRODUCTION_GROUP_SETTINGS, Flow, broker, percentile
from bench.harness.procfs import machine_facts, rss_mb
from bench.scenarios._sim_group import (
    SimGroup,
    commit_figures,
    every_record_once,
    in_topics,
    log_facts,
    table_rows,
)

from support.broker import create_topics, unique, wait_until

SECTION = "partitions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--counts", default="1000,10000", help="partition counts")
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=30, help="counted seconds per count")
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between batches")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every count, one after the other, on one broker."""
    results = []
    with broker("kafka", PRODUCTION_GROUP_SETTINGS) as kafka:
        for count in [int(x) for x in args.counts.split(",")]:
            results.append({"partitions": count, **run_one(kafka.bootstrap_servers, count, args)})
            print(json.dumps(results[-1]), flush=True)
    return {"runs": results, "machine": machine_facts("kafka"),
            "args": {k: vars(args)[k] for k in ("topics", "seconds", "trigger")}}  # fmt: skip


def run_one(servers: str, count: int, args: argparse.Namespace) -> dict[str, Any]:
    """Two members over ``count`` partitions: counted batches, then a restart of one."""
    each = count // args.topics
    # One request per topic: KRaft refuses a request making 10,000 partitions at once
    # (POLICY_VIOLATION, "Unable to perform excessively large batch operation").
    topics = [
        create_topics(servers, each, [unique(f"p{count}-{i}")])[0] for i in range(args.topics)
    ]
    scratch = Path(tempfile.mkdtemp(prefix=f"partitions-{count}-"))
    group = SimGroup(servers, ",".join(topics), unique("parts"), str(scratch / "table"),
                     scratch, 2, trigger_s=args.trigger, max_records=10_000_000)  # fmt: skip
    flows = [Flow(servers, t, each, round(each / args.trigger)) for t in topics]
    for flow in flows:
        flow.start()
    try:
        group.start()
        wait_until(lambda: len(group.first_batch_s()) == 2, 600, "both members' first batch",
                   poll_s=0.5)  # fmt: skip
        first_starts = group.first_batch_s()
        counted_from = time.time()
        time.sleep(args.seconds)  # the counted window: nothing to wait for, only time
        counted = (counted_from, time.time())
        peaks = {m.name: round(rss_mb(m.pid)[1], 1) for m in group.members if m.pid}
        restarted = group.members[1]
        restarted.signal(signal.SIGTERM)
        restarted.wait(120)
        restarted.reap()
        before = len([r for r in group.batches() if r["member"] == restarted.name])
        group.started_at[restarted.name] = started = time.time()
        restarted.start()
        wait_until(lambda: _rows_since(group, restarted.name, before), 600,
                   "the restarted member's first batch", poll_s=0.2)  # fmt: skip
        resume_s = _rows_since(group, restarted.name, before) - started
        for flow in flows:
            flow.stop()
        sent = in_topics(servers, topics, each)
        wait_until(lambda: table_rows(group.table, {}) >= sent, 300,
                   "every record in the table", poll_s=1.0)  # fmt: skip
    finally:
        for flow in flows:
            flow.stopping.set()
        exited = group.stop()
    window = [r for r in group.batches() if counted[0] <= r["t"] <= counted[1]]
    DeltaTable(group.table).create_checkpoint()  # measured: every transaction id and claim
    driver = [r["plan_ms"] + r["durable_ms"] for r in window]
    return {
        **commit_figures(window),
        "driver_p50_ms": round(percentile(driver, 0.5), 1),
        "driver_p99_ms": round(percentile(driver, 0.99), 1),
        "driver_cpu_p50_ms": round(percentile([r["driver_cpu_ms"] for r in window], 0.5), 1),
        "rows_per_batch_p50": percentile([r["rows"] for r in window], 0.5),
        "first_batch_s": [round(x, 1) for x in first_starts],
        "resume_s": round(resume_s, 1),
        "peak_rss_mb": peaks,
        "failures": (exited + group.failures())[:20],
        "records": _once(group, sent, topics),
        "log": log_facts(group.table, {}),
    }


def _rows_since(group: SimGroup, member: str, before: int) -> float:
    """When ``member``'s first batch with rows after its first ``before`` batches ended (0:
    none yet)."""
    mine = [r for r in group.batches() if r["member"] == member][before:]
    return next((r["t"] for r in mine if r["rows"]), 0.0)


def _once(group: SimGroup, sent: int, topics: list[str]) -> dict[str, int]:
    """Each topic's flow numbers its records from 0, so ids repeat across topics: the check
    is the row count against what was sent and no (topic, partition, offset) twice."""
    facts = every_record_once(group.table, {}, 0)
    return {"sent": sent, "rows": facts["rows"], "offsets_twice": facts["offsets_twice"]}


def render(results: dict[str, Any]) -> str:
    """The docs/benchmarks.md section."""
    lines = [
        "## Many partitions",
        "",
        f"`{results['command']}`, {results['when']}, load average {results['load_before']} "
        f"before. {results['args']['topics']} topics, one record per partition per "
        f"{results['args'].get('trigger', 1)} s, two simulated members on that trigger, one table; "
        f"{results['args']['seconds']} s counted per count.",
        "",
        "| partitions | rows/batch | driver time/batch p50 (p99) | driver CPU/batch p50 | "
        "sink commit p50 (p99) | task p50 | peak RSS per member | resume after a restart | "
        "checkpoint | every record once |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results["runs"]:
        rss = max(v for v in r["peak_rss_mb"].values() if v is not None)
        once = r["records"]["rows"] == r["records"]["sent"] and not r["records"]["offsets_twice"]
        cpu = f"{r['driver_cpu_p50_ms']:.0f} ms" if "driver_cpu_p50_ms" in r else "-"
        lines.append(
            f"| {r['partitions']:,} | {r['rows_per_batch_p50']:,} | {r['driver_p50_ms']:.0f} ms "
            f"({r['driver_p99_ms']:.0f}) | {cpu} | "
            f"{r['commit_p50_ms']:.0f} ms ({r['commit_p99_ms']:.0f}) "
            f"| {r['task_p50_ms']:.0f} ms | {rss:.0f} MB | {r['resume_s']} s | "
            f"{r['log']['checkpoint_bytes'] / 1e6:.1f} MB | {'yes' if once else 'NO'} |"
        )
    return "\n".join(lines)
