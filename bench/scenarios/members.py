"""Members per table: many members of one group committing every batch into one delta-group table.

    python -m bench members                                  # 5, 10, 20, 40 members, disk and S3
    python -m bench members --counts 20 --stores local --seconds 60

Per store (:data:`STORES`: the local disk, S3 on S3Proxy) and member count: a topic of
``--partitions`` partitions, ids at ``--rate`` records/s throughout, and that many simulated
members (:mod:`._sim_group`: the product without Spark's JVM) on a ``--trigger``-second
trigger in one group, all writing one new table. Counted: the batches of the ``--seconds``
after the last member's first batch. Then the producer stops, the members drain and stop,
and the table is read back: every id once. Sink commit times are the sink's own
(``DeltaSink.commit``: snapshot, decision, Delta commit, clean-up); retried batches met a
concurrent commit of the same partitions or claims (delta-rs rebases the others itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness.kafka import GROUP_TIMING, Flow, broker, percentile
from bench.harness.procfs import BusySampler, machine_facts
from bench.scenarios._sim_group import (
    SimGroup,
    commit_figures,
    every_record_once,
    in_topics,
    log_facts,
    table_rows,
)
from spark_groups.tools.s3_server import S3Server

from support.broker import create_topic, unique, wait_until

SECTION = "members"
#: The stores a table is written to.
STORES = ("local", "s3")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--counts", default="5,10,20,40", help="member counts, comma-separated")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--partitions", type=int, default=80)
    parser.add_argument("--rate", type=int, default=2000, help="records/s into the topic")
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--seconds", type=int, default=60, help="counted seconds per run")
    parser.add_argument("--compact-every", type=int, default=0, help="the sink's compactEvery")


@contextlib.contextmanager
def store(kind: str, scratch: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A place for tables: a folder, or a bucket on a fresh S3Proxy; (root uri, options)."""
    if kind == "local":
        yield str(scratch), {}
        return
    with S3Server() as s3:
        s3.create_bucket("tables")
        yield "s3://tables", s3.storage_options()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every store and count, one run each, on one broker."""
    counts = [int(x) for x in args.counts.split(",")]
    results: list[dict[str, Any]] = []
    with broker("kafka") as kafka:
        for kind in args.stores.split(","):
            scratch = Path(tempfile.mkdtemp(prefix=f"members-{kind}-"))
            with store(kind, scratch) as (root, storage):
                for count in counts:
                    r = run_one(kafka.bootstrap_servers, root, storage, scratch, count, args)
                    results.append({"store": kind, "members": count, **r})
                    print(json.dumps(results[-1]), flush=True)
    keys = ("partitions", "rate", "trigger", "seconds", "compact_every")
    return {"runs": results, "machine": machine_facts("kafka"),
            "args": {k: vars(args)[k] for k in keys}}  # fmt: skip


def run_one(
    servers: str, root: str, storage: dict[str, str], scratch: Path, count: int,
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """``count`` members into a new table for ``args.seconds`` counted seconds."""
    topic = create_topic(servers, args.partitions, f"members-{count}")
    name = unique(f"t{count}")
    group = SimGroup(servers, topic, unique("members"), f"{root}/{name}", scratch / name, count,
                     storage, trigger_s=args.trigger, max_records=1_000_000, kafka=GROUP_TIMING,
                     compact_every=args.compact_every)  # fmt: skip
    flow = Flow(servers, topic, args.partitions, args.rate)
    flow.start()
    busy = BusySampler()
    try:
        group.start()
        wait_until(lambda: len(group.first_batch_s()) == count, 300, "every member's first batch",
                   poll_s=0.5)  # fmt: skip
        with busy:
            counted_from = time.time()
            time.sleep(args.seconds)  # the counted window: nothing to wait for, only time
            counted = (counted_from, time.time())
        flow.stop()
        sent = in_topics(servers, [topic], args.partitions)
        wait_until(lambda: table_rows(group.table, storage) >= sent, 300, "every record",
                   poll_s=1.0)  # fmt: skip
    finally:
        flow.stopping.set()
        exited = group.stop()
    window = [r for r in group.batches() if counted[0] <= r["t"] <= counted[1]]
    starts = group.first_batch_s()
    return {
        **commit_figures(window),
        "per_member_batches_per_s": round(len(window) / args.seconds / count, 2),
        "cores_busy": None if (b := busy.cores_busy(counted)) is None else round(b, 2),
        "first_batch_p50_s": round(percentile(starts, 0.5), 1),
        "first_batch_max_s": round(max(starts), 1),
        "failures": (exited + group.failures())[:20],
        "commit_errors_retried": group.commit_errors(),
        "records": every_record_once(group.table, storage, sent),
        "log": log_facts(group.table, storage),
    }


def render(results: dict[str, Any]) -> str:
    """The docs/benchmarks.md section."""
    a = results["args"]
    lines = [
        "## Members per table",
        "",
        f"`{results['command']}`, {results['when']}, load average {results['load_before']} "
        f"before, {results['machine']['cores']} cores. {a['partitions']} partitions, "
        f"{a['rate']:,} records/s, a {a['trigger']} s trigger, {a['seconds']} s counted per "
        "run, one new table per run; simulated members (the product without Spark's JVM, "
        "`tests/support/programs/sim_member.py`). *Member CPU*: the member process's CPU time "
        "per batch (p50). *Retried*: batches whose commit met a concurrent commit of the same "
        "ids / commits that failed, were not in the table and were tried again. "
        "*Checkpointing*: the commits whose version is a multiple of 100 (delta-rs writes the "
        "checkpoint in that call)." + (f" Note: {results['note']}" if results.get("note") else ""),
        "",
        "| store | members | batches/s (per member) | member CPU | commit p50 | p99 | "
        "checkpointing | retried | failed | join to first batch, max | cores busy | "
        "checkpoint (files) | an hour: log, checkpoint | every record once |",
        "| --- " + "| ---: " * 12 + "| --- |",
    ]
    for r in results["runs"]:
        if "aborted" in r:
            lines.append(f"| {r['store']} | {r['members']} | run aborted: {r['aborted']} |")
            continue
        rec, log = r["records"], r["log"]
        once = not any(rec[k] for k in ("missing", "duplicated", "unexpected", "offsets_twice"))
        files = log.get("checkpoint_files")
        lines.append(
            f"| {r['store']} | {r['members']} | {r['batches_per_s']} "
            f"({r['per_member_batches_per_s']}) | {r['cpu_p50_ms']:.0f} ms | "
            f"{r['commit_p50_ms']:,.0f} ms | {r['commit_p99_ms']:,.0f} ms | "
            f"{'' if (c := r.get('checkpointing_commit_p50_ms')) is None else f'{c:,.0f} ms'} | "
            f"{r['retried']} / "
            f"{r['commit_errors_retried']} | {len(r['failures'])} | {r['first_batch_max_s']} s | "
            f"{r['cores_busy']} | {log['checkpoint_bytes'] / 1e6:.2f} MB "
            f"({'?' if files is None else f'{files:,}'}) | {_hour(r, a)} | "
            f"{'yes' if once else 'NO: ' + json.dumps(rec)} |"
        )
    return "\n".join(lines)


def _hour(r: dict[str, Any], a: dict[str, Any]) -> str:
    """An hour at the run's rate, from its sizes: the commit files written, and the
    checkpoint's size without compaction (the live files the run's checkpoint had per
    version, for an hour of versions)."""
    log = r["log"]
    log_mb = r["batches_per_s"] * 3600 * log["commit_bytes_avg"] / 1e6
    files = log.get("checkpoint_files")
    if a.get("compact_every") and log.get("checkpoint_version"):
        # Compacted: few live files; the checkpoint grows by the removed files' tombstones.
        grows = log["checkpoint_bytes"] / log["checkpoint_version"] * r["batches_per_s"] * 3600
        return f"{log_mb:,.0f} MB, +{grows / 1e6:,.0f} MB/h of tombstones"
    if not files:
        return f"{log_mb:,.0f} MB,"
    per_file = log["checkpoint_bytes"] / files
    hour_files = files / log["checkpoint_version"] * r["batches_per_s"] * 3600
    return f"{log_mb:,.0f} MB, {per_file * hour_files / 1e6:,.0f} MB"
