"""Pieces of the core scenario (:mod:`bench.scenarios.core`): the handover, the ledger's
commits and the executor read path without Spark.

Handover (section 2; docs/benchmarks.md says what it measures): a second member joins a group
whose first member reads a steady flow (a fresh 4-partition topic, ``rate`` records/s, the
same ``GROUP_TIMING``), plain consumers or kafka-group queries (``foreachBatch``). B's
partitions come from its first ``on_assign`` (plain) or its first ``assigned`` row of the
rebalance history (kafka-group), its subscribe time from its reader process's log when
``$SPARK_GROUPS_LOG_FILE`` is set at INFO; A's batches show the gaps it had meanwhile.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.harness.kafka import GROUP_TIMING, Flow, percentile
from bench.harness.spark import each_batch, log_file, reader_log_times, source_options

from support.broker import create_topic, unique, wait_until


def _plain_config(servers: str, group: str, strategy: str) -> dict[str, Any]:
    return {"bootstrap.servers": servers, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy, "log.connection.close": False,
            **GROUP_TIMING}  # fmt: skip


def plain_handover(servers: str, strategy: str, rate: int, timeout_s: float = 120) -> dict:
    """Seconds from B's subscribe to its partitions and to its first record (plain clients)."""
    topic = create_topic(servers, 4, "handover")
    group = unique("plain-handover")
    flow = Flow(servers, topic, 4, rate)
    flow.start()
    stop_a = threading.Event()
    a_ready = threading.Event()

    def run_a() -> None:
        consumer = Consumer(_plain_config(servers, group, strategy))
        try:
            consumer.subscribe([topic], on_assign=lambda c, ps: ps and a_ready.set())
            while not stop_a.is_set():
                consumer.poll(0.1)
        finally:
            consumer.close()

    a = threading.Thread(target=run_a, daemon=True)
    a.start()
    b = Consumer(_plain_config(servers, group, strategy))
    got: dict[str, float] = {}
    try:
        if not a_ready.wait(timeout_s):
            raise TimeoutError("plain consumer A got no partitions")

        def on_assign(consumer: Consumer, partitions: list) -> None:
            if partitions and "assigned" not in got:
                got["assigned"] = time.time()

        t0 = time.time()
        b.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + timeout_s
        while "first_record" not in got:
            msg = b.poll(0.05)
            if msg is not None and msg.error() is None:
                got["first_record"] = time.time()
            if time.monotonic() > deadline:
                raise TimeoutError("plain consumer B read no record")
    finally:
        b.close()
        stop_a.set()
        a.join(30)
        flow.stop()
    return {"to_partitions_s": got["assigned"] - t0, "to_first_record_s": got["first_record"] - t0}


def spark_handover(
    spark: Any, servers: str, strategy: str, rate: int, scratch: Path, trigger_ms: int = 500,
    timeout_s: float = 180,
) -> dict:  # fmt: skip
    """The same with two kafka-group queries in ``spark`` (see the module doc)."""
    from spark_groups.group.history import history_path, read_history

    topic = create_topic(servers, 4, "handover")
    group = unique("spark-handover")
    work = scratch / group
    ledger = str(work / "ledger")
    opts = source_options(servers, [topic], group, **{"offsets.table": ledger,
                          "partition.assignment.strategy": strategy})  # fmt: skip
    a_batches: list[tuple[float, set[int]]] = []
    b_first: list[float] = []

    def on_a(df: Any, batch_id: int) -> None:
        started = time.time()
        a_batches.append((started, {r[0] for r in df.select("partition").collect()}))

    def on_b(df: Any, batch_id: int) -> None:
        if not b_first and df.count() > 0:
            b_first.append(time.time())

    def start(name: str, fn: Callable[[Any, int], None]) -> Any:
        return each_batch(spark, opts, fn, trigger_ms, work / f"cp-{name}")

    flow = Flow(servers, topic, 4, rate)
    flow.start()
    queries = []
    try:
        queries.append(start("a", on_a))
        wait_until(lambda: len(a_batches) >= 3, timeout_s, "query A's first batches")
        t0 = time.time()
        queries.append(start("b", on_b))
        wait_until(
            lambda: _alive(queries) and bool(b_first), timeout_s,
            lambda: f"query B's first record; {_status(queries, group)}", poll_s=0.05,
        )  # fmt: skip
        settle = time.time()
        wait_until(
            lambda: sum(1 for t, _ in a_batches if t > settle + 1.0) >= 3,
            timeout_s,
            "query A's batches after the handover",
        )
    finally:
        for query in queries:
            query.stop()
        flow.stop()
    history = read_history(history_path(ledger)).to_pylist()
    a_members = {row["member_id"] for row in history if row["at"].timestamp() < t0}
    b_assigned = [
        row["at"].timestamp()
        for row in history
        if row["event"] == "assigned" and row["member_id"] not in a_members
        and row["at"].timestamp() >= t0
    ]  # fmt: skip
    subscribed = reader_log_times(log_file(), group)["subscribed_all"]
    t_sub = subscribed[-1] if len(subscribed) >= 2 else float("nan")
    kept: set[int] = set().union(*(parts for t, parts in a_batches if t > settle + 1.0))
    window = [parts for t, parts in a_batches if t0 <= t <= b_first[0]]
    times = [t0] + [t for t, _ in a_batches if t0 <= t <= b_first[0]] + [b_first[0]]
    return {
        "to_partitions_s": min(b_assigned) - t0 if b_assigned else float("nan"),
        "to_first_record_s": b_first[0] - t0,
        "start_to_subscribe_s": t_sub - t0,
        "sub_to_partitions_s": min(b_assigned) - t_sub if b_assigned else float("nan"),
        "sub_to_first_record_s": b_first[0] - t_sub,
        "a_batches_in_window": len(window),
        "a_batches_missing_kept": sum(1 for parts in window if not kept <= parts),
        "a_longest_gap_s": max(b - a for a, b in itertools.pairwise(times)),
        "kept_partitions": len(kept),
    }


def _alive(queries: list[Any]) -> bool:
    """True while no query failed; raises the first failure (not a timeout after it)."""
    for query in queries:
        if query.exception() is not None:
            raise RuntimeError(f"query {query.id} failed: {query.exception()}")
    return True


def _status(queries: list[Any], group: str) -> str:
    """What each query is doing, and the reader log's last lines about ``group``, for a
    timeout's message."""
    path = log_file()
    lines = path.read_text(errors="replace").splitlines() if path and path.exists() else []
    mine = [line for line in lines if group in line or "revok" in line or "barrier" in line]
    status = [f"{q.id}: {q.status} batches={len(q.recentProgress)}" for q in queries]
    return "; ".join(status) + "\n" + "\n".join(mine[-30:])


def ledger_commits(servers: str, batches: int, partitions: int, window: int) -> dict[str, Any]:
    """Append ``batches`` batches to a ledger maintained as the source's is (its default
    ``compact_every``); interleaved, commit the same offsets to Kafka with a plain consumer
    (the baseline). The p50/p95 of both over the last ``window`` batches."""
    from spark_groups.ledger import LedgerRow, OffsetLedger

    topic = create_topic(servers, partitions, "ledger")
    root = Path(tempfile.mkdtemp(prefix="ledger-", dir=os.environ.get("BENCH_SCRATCH")))
    ledger = OffsetLedger(str(root / "ledger"), "bench-group")
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": unique("ledger-base"),
         "enable.auto.commit": False}
    )  # fmt: skip
    ledger_s: list[float] = []
    kafka_s: list[float] = []
    started = time.perf_counter()
    try:
        for batch in range(batches):
            now = datetime.now(UTC)
            ends = [(p, batch * 100 + 100) for p in range(partitions)]
            rows = [
                LedgerRow(topic, p, end - 100, end, "member-1", 1, batch, now) for p, end in ends
            ]
            t0 = time.perf_counter()
            ledger.append(rows)
            ledger_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            offsets = [KafkaTopicPartition(topic, p, end) for p, end in ends]
            consumer.commit(offsets=offsets, asynchronous=False)
            kafka_s.append(time.perf_counter() - t0)
    finally:
        consumer.close()
    window = max(1, min(window, batches))
    last_l, last_k = ledger_s[-window:], kafka_s[-window:]
    return {
        "batches": batches, "compact_every": ledger.compact_every, "partitions": partitions,
        "window": window, "total_s": time.perf_counter() - started,
        "ledger_p50_s": percentile(last_l, 0.5), "ledger_p95_s": percentile(last_l, 0.95),
        "kafka_p50_s": percentile(last_k, 0.5), "kafka_p95_s": percentile(last_k, 0.95),
    }  # fmt: skip


def read_range_rate(
    servers: str, topics: Sequence[str], partitions: int, ends: dict[tuple[str, int], int]
) -> tuple[int, float]:
    """(rows, seconds) of ``read_range`` over ``[0, end)`` of every partition, one after the
    other, in this process: the executor read path without Spark."""
    from spark_groups.offsets import OffsetRange
    from spark_groups.read.reader import close_cached_consumers, read_range

    config = {"bootstrap.servers": servers}
    rows = 0
    started = time.perf_counter()
    for topic in topics:
        for p in range(partitions):
            for batch in read_range(
                config, OffsetRange(topic, p, 0, ends[(topic, p)]), include_headers=False
            ):
                rows += batch.num_rows
    took = time.perf_counter() - started
    close_cached_consumers()
    return rows, took
