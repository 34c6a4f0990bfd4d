"""A member of a kafka-group -> delta-group pipeline with every piece of the product but Spark.

    python sim_member.py SPEC_JSON

It runs what Spark would run, in Spark's order, in one small process: the source's driver
(``GroupStream``: the group protocol, planning, safe points, the barrier, leaving, SIGTERM),
the executors' read (``read_ranges`` against the real broker), the sink's task files
(``TaskFileWriter``) and the sink's driver commit (``DeltaSink``, real Delta tables), with
Spark's checkpoint as Spark writes it (``offsets/<id>`` before a batch runs, ``commits/<id>``
after its sink committed, a replay of the last logged batch after a restart). Spark adds
nothing to what the crash-point matrix checks, and without its JVM a member starts in a
second, so the matrix runs every cell.

SPEC keys: ``servers``, ``topic``, ``group``, ``table``, ``checkpoint``, ``member`` (its name),
``stop_file``, ``kafka`` (librdkafka settings of the member), ``max_records``; for the
benchmarks also ``storage`` (delta-rs storage options of the table, an S3 server's say),
``trigger_s`` (Spark's ``processingTime``: a batch starts at most that often), ``stats`` (a
file to which each batch appends one JSON line of its timings), ``compact_every`` (the
sink's ``compactEvery``), ``source_options`` (more kafka-group options: the protocol, the
ledger) and ``reader`` (a name: every row also gets the record's ``produced_at``, when it
was read, ``read_ms``, and this ``reader``, as the rolling benchmark's Spark members'
pipeline gives them). The crash points
(``spark_groups.crash_points``) fire from the environment the test sets.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_groups.group.stream import GroupStream
from spark_groups.offsets import BatchOffset
from spark_groups.options import parse_options
from spark_groups.read.reader import read_ranges
from spark_groups.sink.delta_arbiter import for_source
from spark_groups.sink.group_commit import DeltaSink
from spark_groups.sink.plan import read_batch_plan
from spark_groups.sink.upkeep import TableUpkeep, upkeep_for
from spark_groups.sink.writer import TaskFileWriter
from spark_groups.storage.checkpoint import is_committed, latest_logged, spark_batch_id

SCHEMA = pa.schema(
    [("id", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
)
#: The columns a member with a ``reader`` adds.
READS = [("produced_at", pa.timestamp("us", tz="UTC")), ("read_ms", pa.int64()),
         ("reader", pa.string())]  # fmt: skip
#: Spark's trigger: how long an empty plan waits before the next.
TRIGGER_S = 0.05


class Checkpoint:
    """Spark's offset and commit logs, as Spark writes them."""

    def __init__(self, path: str) -> None:
        self.path = path
        Path(path, "offsets").mkdir(parents=True, exist_ok=True)
        Path(path, "commits").mkdir(parents=True, exist_ok=True)

    def log(self, spark_id: int, batch: BatchOffset) -> None:
        text = "v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(batch.to_json())
        _atomic(Path(self.path, "offsets", str(spark_id)), text)

    def commit(self, spark_id: int) -> None:
        _atomic(Path(self.path, "commits", str(spark_id)), 'v1\n{"nextBatchWatermarkMs":0}')

    def last(self) -> tuple[int, BatchOffset] | None:
        """The newest logged batch and its Spark id."""
        logged = latest_logged(self.path)
        if logged is None:
            return None
        spark_id = spark_batch_id(self.path, logged)
        assert spark_id is not None
        return spark_id, logged


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_batch(
    spec: dict,
    stream: GroupStream,
    sink: DeltaSink,
    spark_id: int,
    read: BatchOffset,
    upkeep: TableUpkeep,
) -> dict:
    """The batch's task (every range in one, as Spark packs small ranges: read, write the
    sink's files), then the sink's commit on the driver, planned from the checkpoint as the
    real sink plans it; the batch's timings and the commit's outcome."""
    options = stream.options
    files = []
    started = time.perf_counter()
    batches = list(read_ranges(options.reader_config(), read.ranges, include_headers=False))
    schema = pa.schema([*SCHEMA, *(READS if spec.get("reader") else [])])
    if batches:
        table = pa.Table.from_batches(batches)
        columns = {
            "id": pc.cast(pc.cast(table["value"], pa.string()), pa.int64()),
            "topic": table["topic"],
            "partition": table["partition"],
            "offset": table["offset"],
        }
        if spec.get("reader"):
            columns["produced_at"] = table["timestamp"]
            columns["read_ms"] = pa.array([int(time.time() * 1000)] * table.num_rows, pa.int64())
            columns["reader"] = pa.array([spec["reader"]] * table.num_rows, pa.string())
        rows = pa.table(columns).cast(schema)
        writer = TaskFileWriter(spec["table"], schema, (), storage_options=spec.get("storage"))
        files = writer.write(rows.to_batches())
    plan = read_batch_plan(spec["checkpoint"], spark_id, group_id=spec["group"])
    committing = time.perf_counter()
    result = sink.commit(plan, files, schema)
    upkeep.after_commit(result.version)
    return {
        "batch": spark_id,
        "task_ms": (committing - started) * 1000,
        "commit_ms": (time.perf_counter() - committing) * 1000,
        "attempts": result.attempts,
        "version": result.version,
        "rows": result.rows,
    }


class Stats:
    """The batches' timings, one JSON line each in ``path`` (nothing without one)."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def write(self, row: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps({"t": time.time(), **row}) + "\n")
            self.file.flush()


def main() -> None:
    spec = json.loads(sys.argv[1])
    # SIGUSR1 writes every thread's stack to the log, also while the main thread is in a
    # native call: what a test sends a member that did not exit in time.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(
        level=os.environ.get("SPARK_GROUPS_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s {spec['member']} %(levelname)s %(name)s %(message)s",
    )
    options = parse_options(
        {
            "kafka.bootstrap.servers": spec["servers"],
            "subscribe": spec["topic"],
            "group.id": spec["group"],
            "startingOffsets": "earliest",
            "sink.table": spec["table"],
            "checkpointLocation": spec["checkpoint"],
            "maxOffsetsPerTrigger": str(spec.get("max_records", 20)),
            **{f"kafka.{k}": v for k, v in spec.get("kafka", {}).items()},
            **{f"storage.{k}": v for k, v in spec.get("storage", {}).items()},
            **spec.get("source_options", {}),
        }
    )
    stream = GroupStream(options, for_source(options))
    sink = DeltaSink(
        spec["table"], spec["group"], member=spec["member"], storage_options=spec.get("storage")
    )
    stats = Stats(spec.get("stats"))
    upkeep = upkeep_for(
        spec["table"], spec.get("storage"), spec["member"], spec.get("compact_every", 0)
    )
    trigger_s = float(spec.get("trigger_s", 0))
    checkpoint = Checkpoint(spec["checkpoint"])
    start, spark_id = BatchOffset.initial(), -1
    last = checkpoint.last()
    if last is not None:
        spark_id, start = last
        if not is_committed(spec["checkpoint"], spark_id):  # a replay, as Spark runs it
            read = stream.batch_to_read(start)
            run_batch(spec, stream, sink, spark_id, read, upkeep)
            checkpoint.commit(spark_id)
            stream.commit_durable(start)
    stop_file = Path(spec["stop_file"])
    trigger_at, cpu_s = time.monotonic(), time.process_time()
    while True:
        time.sleep(max(0.0, trigger_at - time.monotonic()))
        if stop_file.exists():  # looked at after the wait, as before the trigger existed
            break
        trigger_at = time.monotonic() + trigger_s
        planning, planning_cpu = time.perf_counter(), time.thread_time()
        planned = stream.latest_offset(start.to_json(), options.max_offsets_per_trigger)
        plan_ms = (time.perf_counter() - planning) * 1000
        plan_cpu_ms = (time.thread_time() - planning_cpu) * 1000
        if planned == start.to_json():
            trigger_at = max(trigger_at, time.monotonic() + TRIGGER_S)
            continue
        batch = BatchOffset.from_json(planned)
        spark_id += 1
        checkpoint.log(spark_id, batch)
        row = run_batch(spec, stream, sink, spark_id, stream.batch_to_read(batch), upkeep)
        checkpoint.commit(spark_id)
        durable, durable_cpu = time.perf_counter(), time.thread_time()
        stream.commit_durable(batch)  # Spark's commit() of 4.2+
        durable_ms = (time.perf_counter() - durable) * 1000
        # The driver's own CPU (this thread's): what the wall time is, less waiting for the
        # broker, the disk and the other threads of a busy machine.
        driver_cpu_ms = plan_cpu_ms + (time.thread_time() - durable_cpu) * 1000
        cpu_ms, cpu_s = (time.process_time() - cpu_s) * 1000, time.process_time()
        stats.write({"plan_ms": plan_ms, "durable_ms": durable_ms, "cpu_ms": cpu_ms,
                     "driver_cpu_ms": driver_cpu_ms, **row})  # fmt: skip
        start = batch
    stream.stop()
    print("STOPPED", flush=True)


if __name__ == "__main__":
    if os.environ.get("SIM_MEMBER_PROFILE"):  # cProfile's stats of the whole run: PATH.PID
        import cProfile

        cProfile.run("main()", f"{os.environ['SIM_MEMBER_PROFILE']}.{os.getpid()}")
    else:
        main()
