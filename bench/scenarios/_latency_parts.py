"""The latency scenario's pieces: when each record was produced, when it became visible, and
the sides that run while a producer writes (``latency.py`` measures with them)."""

from __future__ import annotations

import json
import subprocess
import time
from array import array
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

#: A visible batch: when (epoch seconds) and, per partition, the offsets ``[from, until)``
#: it made visible, or the offsets themselves (an array) where a table's files list them.
Visible = tuple[float, dict[int, Any]]
#: Spark keeps this many progress reports (``recentProgress``): every batch of a run.
PROGRESS_KEPT = "spark.sql.streaming.numRecentProgressUpdates"


def created_times(servers: str, topic: str, partitions: int) -> dict[int, array]:
    """Every record's CreateTime (epoch ms), per partition, indexed by offset: read after the
    run with a plain consumer, so nothing is timed while the sides run."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "latency-created",
                         "enable.auto.commit": False})  # fmt: skip
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


def visible_in_table(table: Path) -> list[Visible]:
    """One entry per Delta commit that added rows: the mtime of its ``_delta_log`` JSON, and
    the ``partition`` and ``offset`` columns of the files it added."""
    out = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        files = [json.loads(line)["add"]["path"] for line in entry.read_text().splitlines()
                 if line.startswith('{"add"')]  # fmt: skip
        if not files:
            continue  # the table's creation, a claim or a release: no rows
        parts: dict[int, list] = {}
        for name in files:
            t = pq.read_table(table / name, columns=["partition", "offset"])
            for p, o in zip(*t.to_pydict().values(), strict=True):
                parts.setdefault(p, []).append(o)
        out.append((entry.stat().st_mtime, {p: np.array(o) for p, o in parts.items()}))
    return out


def rows_in_table(table: Path) -> int:
    """Rows the table's commits added so far, from their files' statistics (``numRecords``)."""
    rows = 0
    for entry in (table / "_delta_log").glob("*.json"):
        for line in entry.read_text().splitlines():
            if line.startswith('{"add"'):
                rows += json.loads(json.loads(line)["add"]["stats"])["numRecords"]
    return rows


def _offsets(value: Any) -> dict:
    return json.loads(value) if isinstance(value, str) else (value or {})


def visible_in_progress(progress: list[dict]) -> list[Visible]:
    """One entry per batch that ran (a ``noop`` sink's records are "visible" when its batch
    ends): its end time (trigger start + ``triggerExecution``) and its ranges, from the
    batch's ``startOffset``/``endOffset`` (kafka-group's own ranges, or Spark's kafka
    source's per-partition ends)."""
    out = []
    for p in progress:
        if "addBatch" not in p["durationMs"] or not p["numInputRows"]:
            continue  # an idle trigger
        source = p["sources"][0]
        end, start = _offsets(source["endOffset"]), _offsets(source["startOffset"])
        if "ranges" in end:
            ranges = {int(n): tuple(b) for ps in end["ranges"].values() for n, b in ps.items()}
        else:
            ranges = {int(n): (int(start.get(t, {}).get(n, 0)), int(e))
                      for t, parts in end.items() for n, e in parts.items()}  # fmt: skip
        at = datetime.fromisoformat(p["timestamp"]).timestamp()
        out.append((at + p["durationMs"]["triggerExecution"] / 1000, ranges))
    return out


def latencies(
    created: dict[int, array], visible: list[Visible], window: tuple[float, float]
) -> tuple[np.ndarray, int]:
    """Milliseconds from produced to visible of every record produced within ``window``
    (epoch seconds), and how many of those never became visible."""
    lo, hi = window[0] * 1000, window[1] * 1000
    stamps = {p: np.frombuffer(a, dtype=np.int64) for p, a in created.items()}
    wanted = sum(int(((s >= lo) & (s < hi)).sum()) for s in stamps.values())
    found = []
    for at, parts in visible:
        for p, offsets in parts.items():
            if isinstance(offsets, tuple):
                offsets = np.arange(offsets[0], min(offsets[1], len(stamps[p])))
            made = stamps[p][offsets]
            found.append(at * 1000 - made[(made >= lo) & (made < hi)])
    got = np.concatenate(found) if found else np.array([])
    return got, wanted - len(got)


def summary(ms: np.ndarray, visible: list[Visible], window: tuple[float, float]) -> dict:
    """p50/p95/p99/max of ``ms`` and the batch cadence (batches that ended within
    ``window``, their median spacing)."""
    ends = sorted(at for at, _ in visible if window[0] <= at < window[1])
    gaps = np.diff(ends) * 1000 if len(ends) > 1 else np.array([0.0])
    q = np.percentile(ms, [50, 95, 99, 100]) if len(ms) else [float("nan")] * 4
    return {"p50": q[0], "p95": q[1], "p99": q[2], "max": q[3], "records": len(ms),
            "batches": len(ends), "spacing_ms": float(np.median(gaps))}  # fmt: skip


def phases(progress: list[dict], window: tuple[float, float]) -> dict[str, float]:
    """Median milliseconds of each ``durationMs`` phase over the batches that ran in
    ``window``."""
    at = datetime.fromisoformat
    ran = [p["durationMs"] for p in progress if "addBatch" in p["durationMs"]
           and window[0] <= at(p["timestamp"]).timestamp() < window[1]]  # fmt: skip
    keys = {k for d in ran for k in d}
    return {k: float(np.median([d.get(k, 0) for d in ran])) for k in sorted(keys)}


def compaction(table: Path, commits: int) -> dict[str, float]:
    """Compact ``table`` (the sink's own ``optimize``, as ``compactEvery`` runs it) after a
    run of ``commits`` batches: seconds, and the data files before and after."""
    from spark_groups.sink.maintenance import optimize
    from spark_groups.storage.delta import open_table
    from spark_groups.storage.maintenance import active_files

    before = active_files(open_table(str(table))).files
    started = time.perf_counter()
    optimize(str(table), None, "bench")
    took = time.perf_counter() - started
    after = active_files(open_table(str(table))).files
    return {"seconds": took, "files_before": before, "files_after": after, "commits": commits}


class SessionSide:
    """A side in the bench's own session: ``source`` (kafka-group or Spark's kafka) into
    ``sink`` (``noop`` or ``delta-group`` at ``work/table``), trigger 0 s."""

    def __init__(self, spark: Any, source: str, sink: str, options: dict, work: Path) -> None:
        from bench.harness.spark import stream

        spark.conf.set(PROGRESS_KEPT, "99999")
        self.table = work / "table" if sink == "delta-group" else None
        if self.table is not None:
            options = {**options, "sink.table": str(self.table),
                       "offsets.table": str(work / "ledger")}  # fmt: skip
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
            return rows_in_table(self.table) if self.table.exists() else 0
        return sum(int(p.numInputRows) for p in self.query.recentProgress)

    def stop(self) -> list[dict]:
        """Stop the query; its progress reports as dicts."""
        self.query.stop()
        if self.query.exception() is not None:
            raise RuntimeError(f"the query failed: {self.query.exception()}")
        return [json.loads(p.json) for p in self.query.recentProgress]


class SparkDeltaSide:
    """Spark's kafka source -> delta-spark ``format("delta")`` at ``work/table``, trigger 0 s,
    in a pyspark-4.2 process (:mod:`bench.harness.spark_delta_proc`, its ``stop_file``)."""

    def __init__(self, options: dict, work: Path) -> None:
        from bench.harness.spark import SESSION_CONF
        from spark_groups.tools.spark_jars import DELTA_SQL_CONF, delta_spark_python, jar_conf

        conf = {**jar_conf("delta-spark", "spark-kafka", line="4.2"), **DELTA_SQL_CONF,
                **SESSION_CONF, PROGRESS_KEPT: "99999"}  # fmt: skip
        work.mkdir(parents=True)
        self.table, self.out, self.stop_file = work / "table", work / "out.json", work / "stop"
        spec = {"conf": conf, "options": options, "stream": str(self.table),
                "stop_file": str(self.stop_file), "out": str(self.out)}  # fmt: skip
        script = Path(__file__).parents[1] / "harness" / "spark_delta_proc.py"
        self.log = (work / "spark.log").open("w")
        self.proc = subprocess.Popen([str(delta_spark_python()), str(script), json.dumps(spec)],
                                     stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip

    def started(self) -> bool:
        """True once the query runs (the process says so with a file ``started``)."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"spark_delta_proc ended early: see {self.log.name}")
        return (self.out.parent / "started").exists()

    def rows(self) -> int:
        """Records visible so far."""
        return rows_in_table(self.table) if (self.table / "_delta_log").exists() else 0

    def stop(self) -> list[dict]:
        """Stop the query; its progress reports."""
        self.stop_file.touch()
        if self.proc.wait(300) != 0:
            raise RuntimeError(f"spark_delta_proc failed: see {self.log.name}")
        self.log.close()
        return json.loads(self.out.read_text())
