"""Soak: the main job for a long time at a steady rate; memory and table sizes over time.

    PYTHONPATH=. python -m bench.soak [--minutes 60] [--rate 2000] [--partitions 6]
        [--trigger "1 second"] [--sample-s 10] [--optimize-every-min 0]

Not part of CI. Starts Apache Kafka itself (``bash jars/fetch kafka``), a producer thread at
``--rate`` records/s (the demo's JSON orders), and ``jobs/ingest.py`` through
``spark-submit --master local[2]`` with the ``delta-group`` sink, the ledger and the
rebalance history in a scratch directory. Every ``--sample-s`` seconds it records:

* the memory (proportional set size, PSS) of the driver JVM, of the reader process
  (``python_streaming_source_runner``) and of the Python workers together, and the reader
  process's resident set size (RSS);
* the files and bytes of the sink table, the ledger and the rebalance history (the sink's
  ``sink_files`` counts every file on disk, ``sink_active_files`` only those of the table's
  current version: compaction removes files from the table, ``vacuum`` from the disk);
* records produced and committed (the ledger's positions).

``--optimize-every-min N`` runs ``spark-groups optimize`` on the sink table every N minutes
beside the running job (0: never). At the end the producer stops, the job catches up and
is stopped with SIGTERM, and the sink table is checked: every record exactly once. The
summary (start, end, peak and the slope over the second half, which leaves warm-up out)
replaces the section between this module's markers in ``docs/benchmarks.md``; every sample
goes to ``bench/results/soak-<time>.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Producer

from bench.common import create_topics, unique
from bench.end_offsets import replace_section

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ("<!-- soak:start -->", "<!-- soak:end -->")
PROCESSES = ("jvm", "reader", "workers")


class SteadyProducer(threading.Thread):
    """Produces the demo's orders round-robin over the partitions at ``rate`` records/s."""

    def __init__(self, servers: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        from spark_groups.tools.demo import sample_order

        self._sample = sample_order
        self._producer = Producer({"bootstrap.servers": servers, "linger.ms": 50})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.produced = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopped.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.produced < due:
                key, value = self._sample(self.produced)
                try:
                    self._producer.produce(
                        self.topic, key=key, value=value, partition=self.produced % self.partitions
                    )
                except BufferError:
                    self._producer.poll(0.1)
                    continue
                self.produced += 1
            self._producer.poll(0)
            self.stopped.wait(0.05)
        assert self._producer.flush(60) == 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _memory_mb(pid: int) -> tuple[str, float, float] | None:
    """(kind, proportional set size in MB, resident set size in MB) of one process of the
    job, or None. Summed per kind as PSS, not RSS: the Python workers are forked from one
    daemon and share pages, which RSS counts in each of them. The reader process is one
    process, so its RSS (what issue 26's target is about) is recorded too."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = {line.split()[0]: line.split()[1] for line in rollup.splitlines()[1:]}
    pss, rss = fields.get("Pss:"), fields.get("Rss:")
    if pss is None or rss is None:
        return None
    if b"python_streaming_source_runner" in cmdline:
        kind = "reader"
    elif b"java" in cmdline.split(b" ")[0]:
        kind = "jvm"
    elif b"pyspark" in cmdline:
        kind = "workers"
    else:
        return None
    return kind, int(pss) / 1024.0, int(rss) / 1024.0


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
    for pid in _descendants(job.pid):
        got = _memory_mb(pid)
        if got is not None:
            memory[got[0]] += got[1]
            if got[0] == "reader":
                reader_rss += got[2]
    row.update({f"{k}_mb": round(v, 1) for k, v in memory.items()})
    row["reader_rss_mb"] = round(reader_rss, 1)
    for name, path in (("sink", work / "table"), ("ledger", work / "ledger")):
        count, size = _files(path)
        row[f"{name}_files"], row[f"{name}_mb"] = count, round(size / 1e6, 2)
    row["sink_active_files"] = _active_files(work / "table")
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
    return (
        0.0
        if spread == 0
        else sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / spread
    )


def write_config(
    path: Path, servers: str, topic: str, group: str, work: Path, trigger: str
) -> None:
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
trigger = "{trigger}"
"""
    )


def verify(table: Path, produced: int) -> tuple[int, int]:
    """(rows, distinct (partition, offset)) of the sink table, counted per partition (a
    distinct over tuples took minutes on 1.5 million rows)."""
    from deltalake import DeltaTable, QueryBuilder

    qb = QueryBuilder().register("t", DeltaTable(str(table)))
    got = pa.table(
        qb.execute(
            'SELECT COUNT(*) AS n, COUNT(DISTINCT "offset") AS d FROM t GROUP BY "partition"'
        ).read_all()
    )
    return sum(got.column("n").to_pylist()), sum(got.column("d").to_pylist())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--optimize-every-min", type=float, default=0.0)
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args()

    from spark_groups.tools.demo import spark_log_options
    from spark_groups.tools.kafka_broker import KafkaBroker

    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    rows: list[dict] = []
    with KafkaBroker() as broker, tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        servers, work = broker.bootstrap_servers, Path(scratch)
        topic, group = create_topics(servers, args.partitions, prefix="soak")[0], unique("soak")
        config = work / "ingest.toml"
        write_config(config, servers, topic, group, work, args.trigger)
        producer = SteadyProducer(servers, topic, args.partitions, args.rate)
        producer.start()
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        job = subprocess.Popen(
            [
                "spark-submit",
                "--master",
                "local[2]",
                "--driver-memory",
                "1g",
                "--conf",
                "spark.ui.enabled=false",
                *spark_log_options(),
                str(ROOT / "jobs" / "ingest.py"),
                "--conf",
                str(config),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(work / "job.log", "w"),  # noqa: SIM115
        )
        started = time.monotonic()
        next_optimize = started + args.optimize_every_min * 60
        try:
            while time.monotonic() - started < args.minutes * 60:
                if job.poll() is not None:
                    text = (work / "job.log").read_text().splitlines()
                    errors = [line for line in text if "Error" in line or "Exception" in line]
                    raise SystemExit("the job ended early:\n" + "\n".join(errors[:30]))
                rows.append(sample(job, work, group, producer.produced))
                print(rows[-1], flush=True)
                if args.optimize_every_min and time.monotonic() >= next_optimize:
                    next_optimize += args.optimize_every_min * 60
                    subprocess.run(["spark-groups", "optimize", str(work / "table")], check=False)
                time.sleep(args.sample_s)  # the sampling period itself, not a synchronisation
            producer.stopped.set()
            producer.join()
            deadline = time.monotonic() + 300
            while sample(job, work, group, producer.produced)["committed"] < producer.produced:
                assert time.monotonic() < deadline, "the job did not catch up within 5 minutes"
                time.sleep(1)
            rows.append(sample(job, work, group, producer.produced))
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
        total, distinct = verify(work / "table", producer.produced)
    with open(results / f"soak-{stamp}.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = render(rows, args, total, distinct, producer.produced, stamp)
    print(summary)
    if not args.no_docs:
        text = f"{MARKERS[0]}\n{summary}\n{MARKERS[1]}"
        replace_section(ROOT / "docs" / "benchmarks.md", text, markers=MARKERS)


def render(
    rows: list[dict],
    args: argparse.Namespace,
    total: int,
    distinct: int,
    produced: int,
    stamp: str,
) -> str:
    """The markdown section for docs/benchmarks.md."""
    lines = [
        "## Soak",
        "",
        f"Soak of {stamp}: `PYTHONPATH=. python -m bench.soak --minutes {args.minutes:g} "
        f"--rate {args.rate} --partitions {args.partitions} --trigger '{args.trigger}' "
        f"--optimize-every-min {args.optimize_every_min:g}` (the ingest job, `local[2]`, "
        f"Apache Kafka, samples every {args.sample_s:g} s; all samples in "
        f"`bench/results/soak-{stamp}.csv`).",
        "",
        f"Records produced {produced:,}; in the sink table {total:,}, distinct "
        f"(partition, offset) {distinct:,}: "
        + ("every record exactly once." if total == distinct == produced else "**MISMATCH**."),
        "",
        "| measure | start | end | peak | slope, 2nd half (per hour) |",
        "| --- | --- | --- | --- | --- |",
    ]
    keys = [f"{k}_mb" for k in PROCESSES] + [
        "reader_rss_mb", "sink_files", "sink_active_files", "sink_mb",
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


if __name__ == "__main__":
    main()
