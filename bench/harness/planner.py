"""One driver-side group member in a process of its own, for planning time and memory.

:func:`planner` runs this module in a fresh process (``python -m bench.harness.planner
SPEC_JSON``), which prints one JSON line: the join time, the per-batch driver times, the RSS.
``stream``: a ``GroupStream`` driven as Spark drives it (``latest_offset(previous)`` commits
the previous batch and plans the next); ``plain``: a plain Consumer listing the log ends and
committing synchronously. One record is produced to every partition before each timed batch.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.harness.kafka import GROUP_TIMING, percentile
from bench.harness.procfs import memory_breakdown_mb, rss_mb

from support.broker import unique, wait_until

ROOT = Path(__file__).resolve().parents[2]


def planner(
    mode: str, servers: str, topics: list[str], partitions: int, rounds: int, scratch: Path,
    **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """Run this module in a fresh process; its result, with ``batch_p50_s``. ``extra``:
    ``end_offsets``, ``ledger`` (False: no ``offsets.table``), ``profile``."""
    args = {**extra, "mode": mode, "servers": servers, "topics": topics,
            "partitions": partitions, "rounds": rounds, "scratch": str(scratch)}  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("SPARK_GROUPS_LOG_LEVEL", "WARNING")
    done = subprocess.run(
        [sys.executable, "-m", "bench.harness.planner", json.dumps(args)],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT), check=False,
    )  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"planner {mode} failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    result["batch_p50_s"] = percentile(result["batch_s"], 0.5)
    return result


def _produce_one_each(producer: Producer, topics: list[str], partitions: int) -> None:
    for topic in topics:
        for p in range(partitions):
            producer.produce(topic, value=b"x", partition=p)
    if producer.flush(60) != 0:
        raise RuntimeError("records still unsent after 60 s")


def run_stream(args: dict[str, Any], producer: Producer) -> dict[str, Any]:
    import pyspark.sql.datasource  # noqa: F401 - the reader process has it loaded

    from bench.harness.spark import source_options
    from spark_groups.group.stream import GroupStream
    from spark_groups.offsets import BatchOffset
    from spark_groups.options import parse_options

    imports_rss, _ = rss_mb()
    group = unique("plan-stream")
    opts = source_options(args["servers"], args["topics"], group)
    if args.get("ledger", True):
        opts["offsets.table"] = str(Path(args["scratch"]) / group / "ledger")
    opts["endOffsets"] = args.get("end_offsets", "auto")
    stream = GroupStream(parse_options(opts))
    try:
        started = time.perf_counter()
        offset = stream.latest_offset(BatchOffset.initial().to_json(), None)
        join_s = time.perf_counter() - started
        owned = len(stream.ensure_started().assignment)
        times = []
        profiler = cProfile.Profile()
        for _ in range(args["rounds"]):
            _produce_one_each(producer, args["topics"], args["partitions"])
            with profiler if args.get("profile") else contextlib.nullcontext():
                started = time.perf_counter()
                planned = stream.latest_offset(offset, None)
                times.append(time.perf_counter() - started)
            if planned == offset:
                raise RuntimeError("latest_offset planned nothing although records were added")
            offset = planned
        rss, peak = rss_mb()
        memory = memory_breakdown_mb()
    finally:
        stream.stop()
    out = io.StringIO()
    if args.get("profile"):
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    return {"profile": out.getvalue(), "join_s": join_s,
            "batch_s": times, "rss_mb": rss, "peak_mb": peak, "imports_rss_mb": imports_rss,
            "memory_mb": memory, "owned": owned}  # fmt: skip


def run_plain(args: dict[str, Any], producer: Producer) -> dict[str, Any]:
    servers, topics, partitions = args["servers"], args["topics"], args["partitions"]
    total = len(topics) * partitions
    consumer = Consumer({"bootstrap.servers": servers, "group.id": unique("plan-plain"),
                         "enable.auto.commit": False,
                         "partition.assignment.strategy": "cooperative-sticky",
                         **GROUP_TIMING})  # fmt: skip
    admin = AdminClient({"bootstrap.servers": servers})
    try:
        started = time.perf_counter()
        consumer.subscribe(topics)

        def joined() -> bool:
            consumer.poll(0.05)
            return len(consumer.assignment()) == total

        wait_until(joined, 120, "the plain consumer's assignment", poll_s=0.05)  # timed
        join_s = time.perf_counter() - started
        wanted = [KafkaTopicPartition(t, p) for t in topics for p in range(partitions)]
        ends: dict[tuple[str, int], int] = {}
        times = []
        for _ in range(args["rounds"]):
            _produce_one_each(producer, topics, partitions)
            consumer.poll(0)
            started = time.perf_counter()
            if ends:
                consumer.commit(
                    offsets=[KafkaTopicPartition(t, p, o) for (t, p), o in ends.items()],
                    asynchronous=False,
                )
            futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted})
            ends = {
                (tp.topic, tp.partition): f.result(timeout=60).offset for tp, f in futures.items()
            }
            times.append(time.perf_counter() - started)
        rss, peak = rss_mb()
    finally:
        consumer.close()
    return {"join_s": join_s, "batch_s": times, "rss_mb": rss, "peak_mb": peak, "owned": total}


def main() -> None:
    args = json.loads(sys.argv[1])
    producer = Producer({"bootstrap.servers": args["servers"], "linger.ms": 5})
    try:
        run = run_stream if args["mode"] == "stream" else run_plain
        result = run(args, producer)
    finally:
        producer.flush(10)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
