"""Soak: the main job for a long time at a steady rate; memory and table sizes over time.

    python -m bench soak --minutes 60 --rate 2000 --partitions 6 --trigger '1 second' \
        --optimize-every-min 10 --write-docs

One round of ``jobs/ingest.py`` (``spark-submit``, ``delta-group``) on its own Apache Kafka,
the demo's orders at ``--rate``, ``spark-groups optimize`` every ``--optimize-every-min``;
every ``--sample-s`` the processes' memory and every table's files (all samples in
``bench/results/soak-<time>.csv``) and the batches since (``_soak_watch``); at the end,
every record once in the table, and the first five minutes against the last five: batch
duration, latency (produced to visible), files, log entries, memory. The first minute (the
JVM's warm-up and the backlog produced before the first batch) is left out of the first five.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.harness.docs import RESULTS, ROOT
from bench.harness.kafka import Flow, broker
from bench.harness.procfs import cmdline, descendants, process_kind
from bench.scenarios._soak_watch import BatchWatch, batch_lines, quantile, window

from support.broker import create_topic, unique

SECTION = "soak"
PROCESSES = ("jvm", "reader", "workers")
#: The windows compared (seconds): five minutes, the first after a minute of warm-up.
WINDOW_S, WARM_UP_S = 300.0, 60.0
#: The goal: the last five minutes within this of the first.
GOAL = 1.2
#: What the windows compare, and how the section names it.
WINDOW_MEASURES = (
    ("batches", "batches"),
    ("batch_p50_ms", "batch duration p50 (ms)"),
    ("batch_p99_ms", "batch duration p99 (ms)"),
    ("latency_p50_ms", "latency p50 (ms)"),
    ("latency_p99_ms", "latency p99 (ms)"),
    ("records_per_s", "records a second into the table"),
    ("sink_active_files", "the table's live files"),
    ("sink_log_entries", "the table's log entries (commit files)"),
    ("memory_mb", "memory (MB)"),
)

#: The job's own line of each batch: Spark's trigger and its phases (``durationMs``).
PHASE_MEASURES = (
    ("trigger", "trigger, Spark's wall time"),
    ("latestOffset", "latestOffset (planning)"),
    ("walCommit", "walCommit (offset log)"),
    ("addBatch", "addBatch (read and sink)"),
    ("commitOffsets", "commitOffsets (commit log)"),
)


def _memory_mb(pid: int) -> tuple[str, float, float] | None:
    """(kind, PSS in MB, RSS in MB) of one process of the job (jvm, reader or workers), or
    None. Summed per kind as PSS: the workers are forked from one daemon and share pages."""
    kind = process_kind(cmdline(pid))
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = {line.split()[0]: line.split()[1] for line in rollup.splitlines()[1:]}
    if kind not in PROCESSES or "Pss:" not in fields or "Rss:" not in fields:
        return None
    return kind, int(fields["Pss:"]) / 1024.0, int(fields["Rss:"]) / 1024.0


def _files(path: Path) -> tuple[int, int]:
    """Data and log files under ``path`` and their bytes."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def _active_files(table: Path) -> int:
    """Files in the sink table's current version (what a reader opens); ``_files`` also
    counts the files that compaction removed but ``vacuum`` has not yet deleted."""
    from deltalake import DeltaTable

    try:
        return len(DeltaTable(str(table)).file_uris())
    except Exception:  # no table before the first commit
        return 0


def sample(job: subprocess.Popen, work: Path, group: str, produced: int) -> dict:
    """One row of measurements."""
    from spark_groups.ledger import OffsetLedger

    row: dict = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "produced": produced}
    memory = dict.fromkeys(PROCESSES, 0.0)
    reader_rss = 0.0
    for pid in descendants(job.pid):
        got = _memory_mb(pid)
        if got is not None:
            memory[got[0]] += got[1]
            if got[0] == "reader":
                reader_rss += got[2]
    row["at_s"] = time.time()
    row.update({f"{k}_mb": round(v, 1) for k, v in memory.items()})
    row["reader_rss_mb"] = round(reader_rss, 1)
    for name, path in (("sink", work / "table"), ("ledger", work / "ledger")):
        count, size = _files(path)
        row[f"{name}_files"], row[f"{name}_mb"] = count, round(size / 1e6, 2)
    row["sink_active_files"] = _active_files(work / "table")
    log = work / "table" / "_delta_log"
    row["sink_log_entries"] = len(list(log.glob("*.json"))) if log.exists() else 0
    count, size = _files(Path(str(work / "ledger") + "_rebalances"))
    row["history_files"], row["history_mb"] = count, round(size / 1e6, 2)
    try:
        row["committed"] = sum(
            OffsetLedger(str(work / "ledger"), group).latest_positions().values()
        )
    except Exception:  # the ledger may not exist before the first commit
        row["committed"] = 0
    return row


def slope_per_hour(rows: list[dict], key: str) -> float:
    """Least-squares slope of ``key`` over the second half of ``rows``, per hour."""
    half = rows[len(rows) // 2 :]
    if len(half) < 3:
        return 0.0
    ts = [datetime.fromisoformat(r["at"]).timestamp() / 3600.0 for r in half]
    ys = [float(r[key]) for r in half]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    spread = sum((t - mt) ** 2 for t in ts)
    covariance = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True))
    return 0.0 if spread == 0 else covariance / spread


def write_config(path: Path, servers: str, topic: str, group: str, work: Path, trig: str) -> None:
    """The ingest job's TOML, every table in ``work``."""
    path.write_text(
        f"""[source]
"kafka.bootstrap.servers" = "{servers}"
subscribe = "{topic}"
"group.id" = "{group}"
"offsets.table" = "{work / "ledger"}"
startingOffsets = "earliest"

[sink]
path = "{work / "table"}"
checkpoint = "{work / "checkpoint"}"
trigger = "{trig}"
"""
    )


def verify(table: Path) -> tuple[int, int]:
    """(rows, distinct (partition, offset)) of the sink table, counted per partition (a
    distinct over tuples took minutes on 1.5 million rows)."""
    from deltalake import DeltaTable, QueryBuilder

    query = 'SELECT COUNT(*) AS n, COUNT(DISTINCT "offset") AS d FROM t GROUP BY "partition"'
    got = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute(query).read_all())
    return sum(got.column("n").to_pylist()), sum(got.column("d").to_pylist())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options."""
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--optimize-every-min", type=float, default=0.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The job for ``--minutes``; the samples go to a CSV of their own."""
    from spark_groups.tools.demo import sample_order, spark_log_options

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    rows: list[dict] = []
    with broker("kafka") as kafka, tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        servers, work = kafka.bootstrap_servers, Path(scratch)
        topic, group = create_topic(servers, args.partitions, "soak"), unique("soak")
        config = work / "ingest.toml"
        write_config(config, servers, topic, group, work, args.trigger)
        producer = Flow(servers, topic, args.partitions, args.rate, record=sample_order)
        producer.start()
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        command = ["spark-submit", "--master", "local[2]", "--driver-memory", "1g", "--conf",
                   "spark.ui.enabled=false", *spark_log_options(),
                   str(ROOT / "jobs" / "ingest.py"), "--conf", str(config)]  # fmt: skip
        with (work / "job.log").open("w") as log:  # the job keeps its own descriptor of it
            job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        watch = BatchWatch(work / "table", work / "checkpoint")
        next_optimize = started + args.optimize_every_min * 60
        try:
            while time.monotonic() - started < args.minutes * 60:
                if job.poll() is not None:
                    text = (work / "job.log").read_text().splitlines()
                    errors = [line for line in text if "Error" in line or "Exception" in line]
                    raise SystemExit("the job ended early:\n" + "\n".join(errors[:30]))
                rows.append(sample(job, work, group, producer.sent))
                watch.poll()
                print(rows[-1], flush=True)
                if args.optimize_every_min and time.monotonic() >= next_optimize:
                    next_optimize += args.optimize_every_min * 60
                    subprocess.run(["spark-groups", "optimize", str(work / "table")], check=False)
                time.sleep(args.sample_s)  # the sampling period itself, not a synchronisation
            producer.stop()
            stopped_s = time.time()
            deadline = time.monotonic() + 300
            while sample(job, work, group, producer.sent)["committed"] < producer.sent:
                assert time.monotonic() < deadline, "the job did not catch up within 5 minutes"
                time.sleep(1)
            rows.append(sample(job, work, group, producer.sent))
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
        watch.poll()
        total, distinct = verify(work / "table")
        logged = batch_lines((work / "job.log").read_text())
    first_s = min((c["at_s"] for c in watch.commits), default=stopped_s) + WARM_UP_S
    spans = {"first": (first_s, first_s + WINDOW_S), "last": (stopped_s - WINDOW_S, stopped_s)}
    samples = RESULTS / f"soak-{stamp}.csv"
    with open(samples, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    per_batch = RESULTS / f"soak-{stamp}-batches.csv"  # the job's line of every batch
    with open(per_batch, "w", newline="") as out:
        names = sorted({k for r in logged for k in r}, key=lambda k: (k != "at_s", k))
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        writer.writerows(logged)
    return {"stamp": stamp, "samples": str(samples.relative_to(ROOT)), "sample_s": args.sample_s,
            "produced": producer.sent, "in_table": total, "distinct": distinct,
            "batches_csv": str(per_batch.relative_to(ROOT)),
            "windows": {k: figures(watch, rows, *v) | phases(logged, *v)
                        for k, v in spans.items()}}  # fmt: skip


def phases(logged: list[dict[str, float]], start_s: float, end_s: float) -> dict[str, float]:
    """The window's p50 and p99 of the trigger's wall time and of each of Spark's phases, from
    the job's batch lines (``trigger_p50_ms``, ``addBatch_p99_ms``, ...)."""
    rows = window(logged, start_s, end_s)
    out = {}
    for key in sorted({k for r in rows for k in r if k.endswith("_ms")}):
        values = [r[key] for r in rows if key in r]
        for q in (50, 99):
            out[f"{key[:-3]}_p{q}_ms"] = quantile(values, q / 100)
    return out


def figures(watch: BatchWatch, rows: list[dict], start_s: float, end_s: float) -> dict:
    """The window's batches (duration), commits (latency of their oldest and newest record)
    and the samples' last values in it."""
    batches = [b["duration_ms"] for b in window(watch.batches, start_s, end_s)]
    commits = window(watch.commits, start_s, end_s)
    oldest = [c["oldest_ms"] for c in commits]
    samples = [r for r in rows if start_s <= r["at_s"] < end_s] or rows[-1:]
    last = samples[-1]
    return {
        "batches": len(batches),
        "batch_p50_ms": quantile(batches, 0.5),
        "batch_p99_ms": quantile(batches, 0.99),
        "latency_p50_ms": quantile(oldest, 0.5),
        "latency_p99_ms": quantile(oldest, 0.99),
        "records_per_s": sum(c["records"] for c in commits) / (end_s - start_s),
        "sink_active_files": max(int(r["sink_active_files"]) for r in samples),
        "sink_log_entries": max(int(r["sink_log_entries"]) for r in samples),
        "memory_mb": sum(float(last[f"{k}_mb"]) for k in PROCESSES),
    }


def render(results: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md (the samples from the run's CSV)."""
    with open(ROOT / results["samples"], newline="") as samples:
        rows = list(csv.DictReader(samples))
    total, distinct, produced = results["in_table"], results["distinct"], results["produced"]
    lines = [
        "## Soak",
        "",
        f"Soak of {results['stamp']}: `{results['command']}` (the ingest job, `local[2]`, "
        f"Apache Kafka, samples every {results['sample_s']:g} s; all samples in "
        f"`{results['samples']}`).",
        "",
        f"Records produced {produced:,}; in the sink table {total:,}, distinct "
        f"(partition, offset) {distinct:,}: "
        + ("every record exactly once." if total == distinct == produced else "**MISMATCH**."),
        "",
    ]
    windows = results.get("windows")
    if windows:
        first, last = windows["first"], windows["last"]
        lines += [
            "The first five minutes (after the first minute: the JVM's warm-up and the backlog "
            "produced before the first batch) against the last five, before the producer "
            "stopped. Latency: from a record's Kafka timestamp to the commit that made it "
            "visible, per commit its oldest record's. Files and log entries: the most in the "
            "window (compaction every 100 commits makes the live files a saw; the log keeps "
            "15 minutes, so it grows through the first quarter hour by design). Memory: the "
            f"job's processes' PSS at the window's end. Goal: batch duration and latency in "
            f"the last within {GOAL:g}x of the first.",
            "",
            "| measure | first 5 min | last 5 min | last / first |",
            "| --- | ---: | ---: | ---: |",
        ]
        phase_rows = [
            (f"{name}_p{q}_ms", f"{what} p{q} (ms)")
            for name, what in PHASE_MEASURES
            for q in (50, 99)
            if f"{name}_p{q}_ms" in first and f"{name}_p{q}_ms" in last
        ]
        for key, what in [*WINDOW_MEASURES, *phase_rows]:
            a, b = float(first[key]), float(last[key])
            ratio = f"{b / a:.2f}x" if a else "-"
            lines.append(f"| {what} | {a:,.0f} | {b:,.0f} | {ratio} |")
        lines.append("")
    lines += [
        "Every sample's start, end, peak and slope:",
        "",
        "| measure | start | end | peak | slope, 2nd half (per hour) |",
        "| --- | --- | --- | --- | --- |",
    ]
    keys = [f"{k}_mb" for k in PROCESSES] + [
        "reader_rss_mb", "sink_files", "sink_active_files", "sink_log_entries", "sink_mb",
        "ledger_files", "ledger_mb", "history_files", "history_mb",
    ]  # fmt: skip
    # Samples taken before the job's processes existed say nothing of their memory.
    measured = [r for r in rows if float(r["jvm_mb"]) > 0] or rows
    for key in keys:
        values = [float(r[key]) for r in measured]
        lines.append(
            f"| {key} | {values[0]:g} | {values[-1]:g} | {max(values):g} | "
            f"{slope_per_hour(measured, key):+.1f} |"
        )
    return "\n".join(lines)
