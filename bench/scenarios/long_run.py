"""Months of commits into one sink table: commit time, a reader's load and scan, file counts.

    python -m bench long-run                                      # local, S3Proxy, Azurite
    python -m bench long-run --stores local --milestones 1000,10000

Per store (the local disk, S3 on S3Proxy, Azure Blob on Azurite) and policy, one table is
brought to each milestone's number of commits by :mod:`._long_log` (the history of one member
on a ``--trigger``-second trigger, written in delta-rs' format, the newest commit now) and
measured there: ``--batches`` real batches of the sink back to back (``DeltaSink.commit`` of
``--files`` files of 10 rows each, the upkeep after each as the Spark sink runs it), then a
fresh reader's ``DeltaTable`` load (best and worst of 5) and a full scan (a sum over one
column through delta-rs' ``QueryBuilder``). Policies: **today**, what the sink did before
its defaults (Delta's properties, no compaction, delta-rs' post-commit hooks in every commit:
a checkpoint every 100 versions, the expired-log clean-up); **new**, a table the sink
creates now (``spark_groups.sink.upkeep.TABLE_DEFAULTS``, ``compactEvery=100``, the upkeep).
After the timed batches every partition's position in the table must be the last batch's
end, and a replay of that batch must be dropped (every record once), or the run stops.
The goal: on the new defaults, commit p99 and the load at 1,000,000 commits within 1.5x of
their values at 1,000.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from bench.harness import docs
from bench.harness.kafka import percentile
from bench.harness.procfs import machine_facts
from bench.scenarios import _long_log as fab
from spark_groups.offsets import OffsetRange, TopicPartition
from spark_groups.sink import sink_table
from spark_groups.sink.group_commit import DeltaSink, committed_positions
from spark_groups.sink.live_maintenance import optimize
from spark_groups.sink.plan import BatchPlan
from spark_groups.sink.upkeep import (
    DEFAULT_COMPACT_EVERY,
    DELTA_DEFAULTS,
    TABLE_DEFAULTS,
    TableUpkeep,
)
from spark_groups.sink.writer import TaskFileWriter
from spark_groups.storage.maintenance_steps import duration_hours
from spark_groups.tools.s3_server import S3Server

#: The section of docs/benchmarks.md this scenario writes.
SECTION = "long-run"
STORES = ("local", "s3", "azure")
GROUP = "g1"
ROWS = 10


def policies() -> dict[str, fab.Policy]:
    """Today's policy and the new defaults (see the module doc)."""

    def hours(props: dict[str, str], key: str) -> float:
        return duration_hours(props[key], 0) * 3600

    return {
        "today": fab.Policy("today", hours(DELTA_DEFAULTS, "delta.logRetentionDuration"),
                            hours(DELTA_DEFAULTS, "delta.deletedFileRetentionDuration"), 0,
                            dict(DELTA_DEFAULTS)),
        "new": fab.Policy("new", hours(TABLE_DEFAULTS, "delta.logRetentionDuration"),
                          hours(TABLE_DEFAULTS, "delta.deletedFileRetentionDuration"),
                          DEFAULT_COMPACT_EVERY, dict(TABLE_DEFAULTS)),
    }  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--policies", default="today,new")
    parser.add_argument("--milestones", default="1000,10000,100000,1000000")
    parser.add_argument(
        "--today-up-to",
        type=int,
        default=100_000,
        help="the largest milestone of today's policy on the local disk (its "
        "commits list the whole log: at 1,000,000 each takes seconds)",
    )
    parser.add_argument("--today-up-to-remote", type=int, default=10_000,
                        help="the same on an object store (every file of it is a PUT)")  # fmt: skip
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--files", type=int, default=4, help="data files per batch")
    parser.add_argument("--batches", type=int, default=200, help="real batches timed each time")
    parser.add_argument("--threads", type=int, default=16, help="writers of the history")
    parser.add_argument("--log-retention", default="",
                        help="the new policy with this delta.logRetentionDuration instead "
                             "(e.g. 'interval 15 minutes'), to weigh another default")  # fmt: skip


@contextlib.contextmanager
def store(kind: str, scratch: Path) -> Iterator[tuple[str, dict[str, str] | None]]:
    """A place for tables: a folder, a bucket on S3Proxy, a container on Azurite."""
    if kind == "local":
        yield str(scratch), None
    elif kind == "s3":
        with S3Server(heap="1g") as s3:
            s3.create_bucket("tables")
            yield "s3://tables", s3.storage_options()
    elif kind == "azure":
        from support.azure import Azurite

        with Azurite() as azure:
            yield f"az://{azure.container()}", azure.storage_options()
    else:
        raise SystemExit(f"unknown store {kind!r}: use {', '.join(STORES)}")


def batch_files(uri: str, storage: dict[str, str] | None, batch: int, files: int) -> list[Any]:
    """One batch's data files as its tasks write them: ``ROWS`` rows of each partition."""
    out = []
    for p in range(files):  # one task a partition, as the source plans them
        writer = TaskFileWriter(uri, fab.SCHEMA, (), storage_options=storage)
        offsets = list(range(batch * ROWS, (batch + 1) * ROWS))
        rows = pa.record_batch(
            [pa.array([p * 10**9 + o for o in offsets], pa.int64()),
             pa.array([fab.TOPIC] * ROWS, pa.string()), pa.array([p] * ROWS, pa.int32()),
             pa.array(offsets, pa.int64())],
            schema=fab.SCHEMA,
        )  # fmt: skip
        out += writer.write([rows])
    return out


def batch_plan(batch: int, files: int) -> BatchPlan:
    """The plan of ``batch``: ``ROWS`` offsets of each of ``files`` partitions."""
    return BatchPlan.of(batch, [OffsetRange(fab.TOPIC, p, batch * ROWS, (batch + 1) * ROWS)
                                for p in range(files)])  # fmt: skip


def template_of(uri: str, storage: dict[str, str] | None, files: int) -> fab.Template:
    """The sink's commit shapes: batch 0 committed into the new table at ``uri``; a lease
    and a compaction from a local scratch table, their table id made the real one's."""
    sink = DeltaSink(uri, GROUP, member="m1", storage_options=storage)
    sink.commit(batch_plan(0, files), batch_files(uri, storage, 0, files), fab.SCHEMA)
    where = fab.TableFiles(uri, storage, 1)
    batch = [json.loads(x) for x in where.read("_delta_log/00000000000000000001.json").splitlines()]
    create = [
        json.loads(x) for x in where.read("_delta_log/00000000000000000000.json").splitlines()
    ]
    data = [(a["add"]["path"], where.read(a["add"]["path"])) for a in batch if "add" in a]
    table_id = DeltaTable(uri, storage_options=storage).metadata().id
    with tempfile.TemporaryDirectory(prefix="long-run-shapes-") as scratch:
        DeltaSink(scratch, GROUP, member="m1").commit(
            batch_plan(0, files), batch_files(scratch, None, 0, files), fab.SCHEMA
        )
        optimize(scratch, None, "sink:m1")
        scratch_id = DeltaTable(scratch).metadata().id
        log = sorted(Path(scratch, "_delta_log").glob("*.json"))
        commits = [[json.loads(x.replace(scratch_id, table_id)) for x in p.read_text().splitlines()]
                   for p in log]  # fmt: skip
    lease = next(
        c for c in commits if any("txn" in a for a in c) and not any("add" in a for a in c)
    )
    compaction = next(c for c in commits if any("remove" in a for a in c))
    return fab.Template(batch, compaction, lease, data, create)


def timed_batches(uri: str, storage: dict[str, str] | None, policy: fab.Policy, first: int,
                  count: int, files: int) -> dict[str, Any]:  # fmt: skip
    """``count`` real batches from ``first``, each committed as the Spark sink commits it (the
    first, which loads the table afresh, not timed)."""
    hooks = sink_table.batch_commit_hooks
    if policy.name == "today":  # before the upkeep: delta-rs' own hooks in every commit
        sink_table.batch_commit_hooks = lambda: None  # type: ignore[assignment]
    try:
        sink = DeltaSink(uri, GROUP, member="m1", storage_options=storage)
        upkeep = TableUpkeep(uri, storage, "m1", policy.compact_every)
        times, alone = [], []
        # The first commit loads the table afresh (once per process): timed apart.
        warm = sink.commit(batch_plan(first, files), batch_files(uri, storage, first, files),
                           fab.SCHEMA)  # fmt: skip
        upkeep.after_commit(warm.version if policy.name != "today" else None)
        for b in range(first + 1, first + count):
            written = batch_files(uri, storage, b, files)
            busy = upkeep.busy()
            started = time.perf_counter()
            result = sink.commit(batch_plan(b, files), written, fab.SCHEMA)
            times.append((time.perf_counter() - started) * 1000)
            if not (busy or upkeep.busy()):  # no upkeep beside it, from start to end
                alone.append(times[-1])
            if result.version is None:
                raise SystemExit(f"batch {b} was not committed: {result}")
            if policy.name != "today":
                upkeep.after_commit(result.version)
        # Every record once: each partition's position is the last batch's end, and a replay
        # of the last batch is dropped.
        tps = [TopicPartition(fab.TOPIC, p) for p in range(files)]
        held = committed_positions(uri, GROUP, tps, storage)
        if held != {tp: (first + count) * ROWS for tp in tps}:
            raise SystemExit(f"the table holds {held} after batch {first + count - 1}")
        last = first + count - 1
        again = sink.commit(batch_plan(last, files), batch_files(uri, storage, last, files),
                            fab.SCHEMA)  # fmt: skip
        if again.version is not None:
            raise SystemExit(f"batch {last} replayed was committed again: {again}")
        waited = time.perf_counter()
        upkeep.wait_idle(1800)
        return {"p50": percentile(times, 0.5), "p99": percentile(times, 0.99),
                "max": max(times), "upkeep_wait_s": time.perf_counter() - waited,
                "alone_p99": percentile(alone, 0.99) if alone else None,
                "upkeep": dict(upkeep.counts)}  # fmt: skip
    finally:
        sink_table.batch_commit_hooks = hooks  # type: ignore[assignment]


def reader(uri: str, storage: dict[str, str] | None, live_files: int) -> dict[str, Any]:
    """A fresh reader's load (5 times) and one full scan (skipped past 200,000 files)."""
    loads = []
    for _ in range(5):
        started = time.perf_counter()
        table = DeltaTable(uri, storage_options=storage)
        loads.append((time.perf_counter() - started) * 1000)
    out: dict[str, Any] = {"load_best": min(loads), "load_worst": max(loads),
                           "load_median": statistics.median(loads),
                           "files": len(table.file_uris())}  # fmt: skip
    if live_files <= 200_000:
        started = time.perf_counter()
        QueryBuilder().register("t", table).execute('select sum("offset") from t').read_all()
        out["scan_ms"] = (time.perf_counter() - started) * 1000
    return out


def one_table(kind: str, root: str, storage: dict[str, str] | None, policy: fab.Policy,
              args: argparse.Namespace) -> list[dict[str, Any]]:  # fmt: skip
    """Every milestone of one policy on one store, one table brought from one to the next."""
    uri = f"{root.rstrip('/')}/{policy.name}"
    template = template_of(uri, storage, args.files)
    table = DeltaTable(uri, storage_options=storage)
    if table.metadata().configuration != policy.properties:
        table.alter.set_table_properties(policy.properties)
    version, next_batch, live = DeltaTable(uri, storage_options=storage).version(), 1, fab.Live()
    rows = []
    for milestone in [int(m) for m in args.milestones.split(",")]:
        most = args.today_up_to if kind == "local" else args.today_up_to_remote
        if policy.name == "today" and milestone > most:
            continue
        built = fab.build(uri, storage, template, policy, version, next_batch,
                          milestone - version, args.trigger, live, threads=args.threads,
                          checkpoint_every=max(10_000, (milestone - version) // 10))  # fmt: skip
        print(
            f"{kind} {policy.name} {milestone}: built in {built.seconds:.0f} s, "
            f"{built.log_entries} log entries, {built.live_files} live files",
            flush=True,
        )
        commits = timed_batches(uri, storage, policy, built.next_batch, args.batches, args.files)
        read = reader(uri, storage, built.live_files)
        rows.append({"store": kind, "policy": policy.name, "commits": milestone,
                     "build_s": built.seconds, "log_entries": built.log_entries,
                     "live_files": read["files"], "tombstones": built.tombstones,
                     "commit": commits, "read": read})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        version = DeltaTable(uri, storage_options=storage).version()
        next_batch = built.next_batch + args.batches
        live.small += [(fab.small_name(b, p), 1400, b) for b in range(built.next_batch, next_batch)
                       for p in range(args.files)]  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every store and policy."""
    chosen = policies()
    if args.log_retention:
        key = "delta.logRetentionDuration"
        new = chosen["new"]
        props = {**new.properties, key: args.log_retention}
        chosen["new"] = fab.Policy("new", duration_hours(args.log_retention, 0) * 3600,
                                   new.deleted_retention_s, new.compact_every, props)  # fmt: skip
    rows: list[dict[str, Any]] = []
    for kind in args.stores.split(","):
        scratch = Path(tempfile.mkdtemp(prefix=f"long-run-{kind}-"))
        try:
            with store(kind, scratch) as (root, storage):
                for name in args.policies.split(","):
                    rows += one_table(kind, root, storage, chosen[name], args)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "rows": rows, "trigger": args.trigger, "files": args.files, "batches": args.batches,
        "machine": machine_facts("none: no broker"), "defaults": chosen["new"].properties,
        "compact_every": DEFAULT_COMPACT_EVERY,
    }  # fmt: skip


def machine(results: dict[str, Any]) -> str:
    """The machine in a few words."""
    facts = results.get("machine", {})
    return ", ".join(f"{k} {facts[k]}" for k in ("cores", "deltalake") if k in facts)


def alone(row: dict[str, Any]) -> str:
    """The p99 of the commits no upkeep ran beside, in parentheses (when measured)."""
    p99 = row["commit"].get("alone_p99")
    return f" ({p99:,.0f} ms)" if p99 is not None and row["policy"] != "today" else ""


def render(results: dict[str, Any]) -> str:
    """The section: one table a store, the goal checked for the new defaults."""
    out = [
        "## Long run",
        "",
        " and ".join(f"`{c}`" for c in results.get("commands") or [results["command"]])
        + f" ({results['when']}; {machine(results)}). One member "
        f"on a {results['trigger']:g} s trigger, {results['files']} data files of {ROWS} rows a "
        f"batch; at each number of commits, {results['batches']} real batches of the sink timed "
        "back to back, then a fresh reader. *today*: Delta's properties, no compaction, "
        "delta-rs' hooks in every commit (the sink before); *new*: "
        + ", ".join(f"`{k}={v}`" for k, v in results["defaults"].items())
        + f", `compactEvery={results['compact_every']}`, the upkeep off the commit path."
        + (
            " In parentheses: the p99 of the commits no upkeep work ran beside."
            if any(r["commit"].get("alone_p99") for r in results["rows"])
            else ""
        ),
        "",
    ]
    for kind in dict.fromkeys(r["store"] for r in results["rows"]):
        out += [
            f"**{kind}**", "",
            "| policy | commits | log entries | live files | tombstones | commit p50 | "
            "commit p99 | load | scan |",
            "| --- |" + " ---: |" * 8,
        ]  # fmt: skip
        for r in (r for r in results["rows"] if r["store"] == kind):
            scan = r["read"].get("scan_ms")
            out.append(
                f"| {r['policy']} | {r['commits']:,} | {r['log_entries']:,} "
                f"| {r['live_files']:,} | {r['tombstones']:,} "
                f"| {r['commit']['p50']:,.0f} ms | {r['commit']['p99']:,.0f} ms{alone(r)}"
                f" | {r['read']['load_median']:,.0f} ms | "
                + (f"{scan:,.0f} ms" if scan is not None else "not run")
                + " |"
            )
        new = {
            r["commits"]: r for r in results["rows"] if r["store"] == kind and r["policy"] == "new"
        }
        if 1000 in new and max(new) > 1000:
            base, top = new[1000], new[max(new)]
            p99 = top["commit"]["p99"] / base["commit"]["p99"]
            load = top["read"]["load_median"] / base["read"]["load_median"]
            out += ["", f"New defaults, {max(new):,} against 1,000 commits: commit p99 "
                        f"{p99:.2f}x, load {load:.2f}x "
                        f"({docs.met(p99 <= 1.5 and load <= 1.5)} the goal of 1.5x)."]  # fmt: skip
        out.append("")
    return "\n".join(out).rstrip() + "\n"
