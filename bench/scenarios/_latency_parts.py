"""The latency scenario's pieces: when each record was produced and when it became visible,
and the sides that run while a producer writes (``latency.py`` measures with them)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from array import array
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

#: A visible batch: when (epoch seconds) and, per partition, the offsets it made visible
#: (an array, from a table's files) or their range ``(from, until)`` (from Spark's progress).
Visible = tuple[float, dict[int, Any]]
#: Spark keeps this many progress reports (``recentProgress``): every batch of a run.
PROGRESS_KEPT = "spark.sql.streaming.numRecentProgressUpdates"


def created_times(servers: str, topic: str, partitions: int) -> dict[int, array]:
    """Every record's CreateTime (epoch ms) by partition and offset, read after the run."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "latency-created"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)}  # fmt: skip
    out = {p: array("q") for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 300
    try:
        while any(len(out[p]) < ends[p] for p in out) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None and msg.offset() == len(out[msg.partition()]):
                    out[msg.partition()].append(msg.timestamp()[1])
    finally:
        consumer.close()
    return out


def _adds(entry: Path) -> list[dict]:
    """The adds of new rows in one commit (a compaction's rewrites, ``dataChange`` false,
    are the same rows again)."""
    lines = entry.read_text().splitlines()
    adds = (json.loads(line)["add"] for line in lines if line.startswith('{"add"'))
    return [add for add in adds if add.get("dataChange", True)]


def rows_in_table(table: Path) -> int:
    """Rows the table's commits added so far (their files' ``numRecords``)."""
    adds = (add for entry in table.glob("_delta_log/*.json") for add in _adds(entry))
    return sum(json.loads(add["stats"])["numRecords"] for add in adds)


def visible_in_table(table: Path) -> list[Visible]:
    """Per Delta commit that added rows: its ``_delta_log`` JSON's mtime, and the
    ``partition`` and ``offset`` columns of the files it added."""
    out = []
    for entry in sorted(table.glob("_delta_log/*.json")):
        parts: dict[int, list] = {}
        for add in _adds(entry):
            columns = pq.read_table(table / add["path"], columns=["partition", "offset"])
            for p, o in zip(*columns.to_pydict().values(), strict=True):
                parts.setdefault(p, []).append(o)
        if parts:  # not the table's creation, a claim or a release
            out.append((entry.stat().st_mtime, {p: np.array(o) for p, o in parts.items()}))
    return out


def _json(value: Any) -> dict:  # Spark's progress parses an offset's JSON where it can
    return json.loads(value) if isinstance(value, str) else (value or {})


def visible_in_progress(progress: list[dict]) -> list[Visible]:
    """Per batch that ran (a sink without a table): its end (trigger start +
    ``triggerExecution``) and its ranges (kafka-group's own, or from Spark's kafka source's
    ``startOffset`` and ``endOffset``)."""
    out = []
    for p in progress:
        if "addBatch" not in p["durationMs"] or not p["numInputRows"]:
            continue  # an idle trigger
        end, start = (_json(p["sources"][0][k]) for k in ("endOffset", "startOffset"))
        ranges = ({int(n): tuple(b) for ps in end["ranges"].values() for n, b in ps.items()}
                  if "ranges" in end else
                  {int(n): (int(start.get(t, {}).get(n, 0)), int(e))
                   for t, ps in end.items() for n, e in ps.items()})  # fmt: skip
        at = datetime.fromisoformat(p["timestamp"]).timestamp()
        out.append((at + p["durationMs"]["triggerExecution"] / 1000, ranges))
    return out


def under_producer(
    side: Any, servers: str, topic: str, partitions: int, rate: int, args: Any
) -> tuple[tuple[float, float], int]:
    """Produce ``args.size`` B records at ``rate`` a second while ``side`` runs: from its first
    record visible, ``args.warmup`` s not counted, then ``args.counted`` s; wait until
    everything produced is visible. The counted window (epoch s) and how many were sent."""
    from bench.harness.kafka import Flow

    from support.broker import wait_until

    flow = Flow(servers, topic, partitions, rate, lambda i: (None, bytes(args.size)))
    flow.start()
    try:  # the warm-up counts from the first record visible: the group's join is not in it
        wait_until(lambda: side.rows() > 0, 180, "the first record to be visible")
        window = (time.time() + args.warmup, time.time() + args.warmup + args.counted)
        time.sleep(args.warmup + args.counted)  # the producer runs on its schedule meanwhile
    finally:
        flow.stop()
    wait_until(lambda: side.rows() >= flow.sent, 120, f"all {flow.sent:,} records visible")
    return window, flow.sent


def measure(
    created: dict[int, array], visible: list[Visible], window: tuple[float, float]
) -> dict[str, Any]:
    """Of the records produced within ``window`` (epoch s): p50/p95/p99/max milliseconds
    from produced to visible, how many never were, and the batches that ended in the window
    with their median spacing."""
    lo, hi = window[0] * 1000, window[1] * 1000
    stamps = {p: np.frombuffer(a, dtype=np.int64) for p, a in created.items()}
    found = [np.array([])]
    for at, parts in visible:
        for p, offsets in parts.items():
            if isinstance(offsets, tuple):
                offsets = np.arange(offsets[0], min(offsets[1], len(stamps[p])))
            made = stamps[p][offsets]
            found.append(at * 1000 - made[(made >= lo) & (made < hi)])
    ms = np.concatenate(found)
    wanted = sum(int(((s >= lo) & (s < hi)).sum()) for s in stamps.values())
    ends = sorted(at for at, _ in visible if window[0] <= at < window[1])
    q = np.percentile(ms, [50, 95, 99, 100]) if len(ms) else [float("nan")] * 4
    spacing = float(np.median(np.diff(ends) * 1000)) if len(ends) > 1 else 0.0
    return {"p50": q[0], "p95": q[1], "p99": q[2], "max": q[3], "records": len(ms),
            "missing": wanted - len(ms), "batches": len(ends), "spacing_ms": spacing}  # fmt: skip


def phases(progress: list[dict], window: tuple[float, float]) -> dict[str, float]:
    """Median ms of each ``durationMs`` phase of the batches that ran in ``window``."""
    at = datetime.fromisoformat
    ran = [p["durationMs"] for p in progress if "addBatch" in p["durationMs"]
           and window[0] <= at(p["timestamp"]).timestamp() < window[1]]  # fmt: skip
    return {k: float(np.median([d.get(k, 0) for d in ran])) for k in {k for d in ran for k in d}}


def compaction(table: Path, commits: int) -> dict[str, float]:
    """Compact ``table`` as ``compactEvery`` does after a run of ``commits`` batches."""
    from spark_groups.sink.live_maintenance import optimize
    from spark_groups.storage.delta import open_table
    from spark_groups.storage.maintenance_steps import active_files

    before = active_files(open_table(str(table))).files
    started = time.perf_counter()
    optimize(str(table), None, "bench")
    return {"seconds": time.perf_counter() - started, "files_before": before, "commits": commits,
            "files_after": active_files(open_table(str(table))).files}  # fmt: skip


class SessionSide:
    """``source`` into ``sink`` (``delta-group``: at ``work/table``), trigger 0 s, in this
    process's session. Both sides: ``started()``, ``rows()`` visible, ``stop()`` -> progress."""

    def __init__(self, spark: Any, source: str, sink: str, options: dict, work: Path) -> None:
        from bench.harness.spark import stream

        spark.conf.set(PROGRESS_KEPT, "99999")
        self.table = work / "table" if sink == "delta-group" else None
        if self.table is not None:
            options = {**options, "sink.table": str(self.table)}
            if source == "kafka-group":
                options["offsets.table"] = str(work / "l")
        df = stream(spark, source, options)
        if sink != "noop":
            df = df.selectExpr("value", "topic", "partition", "offset")
        writer = df.writeStream.format(sink).trigger(processingTime="0 seconds")
        self.query = writer.option("checkpointLocation", str(work / "checkpoint")).start()

    def started(self) -> bool:
        """True once the query runs."""
        return self.query.isActive

    def rows(self) -> int:
        """Records visible so far."""
        if self.table is not None:
            return rows_in_table(self.table)
        return sum(int(p.numInputRows) for p in self.query.recentProgress)

    def stop(self) -> list[dict]:
        """Stop the query; its progress reports."""
        self.query.stop()
        if self.query.exception() is not None:
            raise RuntimeError(f"the query failed: {self.query.exception()}")
        return [json.loads(p.json) for p in self.query.recentProgress]


class ProcessSide:
    """A query in a process of its own (``python`` running ``script`` with ``spec``): it
    touches ``work/started`` once the query runs, stops at ``work/stop`` and writes its
    progress to ``work/out.json``; its table is ``work/table``."""

    def __init__(self, python: str, script: Path, spec: dict, work: Path) -> None:
        self.table, self.work = work / "table", work
        spec = {**spec, "stop_file": str(work / "stop"), "out": str(work / "out.json")}
        self.log = (work / "spark.log").open("w")
        self.proc = subprocess.Popen([python, str(script), json.dumps(spec)],
                                     stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip

    def started(self) -> bool:
        """True once the query runs."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"the query's process ended early: see {self.log.name}")
        return (self.work / "started").exists()

    def rows(self) -> int:
        """Records visible so far."""
        return rows_in_table(self.table)

    def stop(self) -> list[dict]:
        """Stop the query; its progress reports."""
        (self.work / "stop").touch()
        if self.proc.wait(300) != 0:
            raise RuntimeError(f"the query's process failed: see {self.log.name}")
        self.log.close()
        return json.loads((self.work / "out.json").read_text())


def spark_delta_side(options: dict, work: Path) -> ProcessSide:
    """Spark's kafka source -> delta-spark at ``work/table``, trigger 0 s, in a pyspark-4.2
    process (:mod:`bench.harness.spark_delta_proc`)."""
    from bench.harness.spark import SESSION_CONF
    from spark_groups.tools.spark_jars import DELTA_SQL_CONF, delta_spark_python, jar_conf

    conf = {**jar_conf("delta-spark", "spark-kafka", line="4.2"), **DELTA_SQL_CONF,
            **SESSION_CONF, PROGRESS_KEPT: "99999"}  # fmt: skip
    work.mkdir(parents=True)
    spec = {"conf": conf, "options": options, "stream": str(work / "table")}
    script = Path(__file__).parents[1] / "harness" / "spark_delta_proc.py"
    return ProcessSide(str(delta_spark_python()), script, spec, work)


def own_process_side(options: dict, work: Path) -> ProcessSide:
    """kafka-group -> delta-group (``offsets.table`` and ``sink.table`` set), trigger 0 s, in
    a process of its own, as a user's job runs (:mod:`bench.harness.group_proc`)."""
    work.mkdir(parents=True)
    options = {**options, "sink.table": str(work / "table"), "offsets.table": str(work / "l")}
    spec = {"options": options, "checkpoint": str(work / "checkpoint")}
    script = Path(__file__).parents[1] / "harness" / "group_proc.py"
    return ProcessSide(sys.executable, script, spec, work)
