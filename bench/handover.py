"""Handover: a second member joins a group whose first member is reading a steady flow.

Both sides use the same broker, a fresh 4-partition topic, a producer writing ``rate``
records/s round-robin, and the same group timing (``GROUP_TIMING``: Tansu completes a join
after about half of session.timeout.ms, so it must match).

* plain: consumer A polls in a thread; consumer B ``subscribe()``s at t0 and polls.
  Partitions received = B's first non-empty ``on_assign``; first record = B's first record.
* spark: query A (``foreachBatch``, trigger ``trigger_ms``) is reading; query B is started at
  t0 (``start()``: this includes Spark starting the query and its reader process). When the
  reader processes log to ``$SPARK_GROUPS_LOG_FILE`` at INFO (``bench.run`` sets that up),
  B's subscribe time is read from its "group member subscribed" line, and the times are also
  given from there, like the plain consumer's.
  Partitions received = B's first ``assigned`` event in the rebalance history (its time is
  taken in B's reader process); first record = B's first non-empty batch in ``foreachBatch``.
  For A, every batch records which partitions produced rows, to count the batches between t0
  and B's first record in which a partition A kept (it still reads it afterwards) produced
  none, and the longest gap between A's batches in that window.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from bench.common import GROUP_TIMING, create_topics, unique, wait_until
from bench.throughput import source_options


def _subscribe_times(group: str) -> list[float]:
    """When members of ``group`` subscribed, from the reader processes' log file (if any)."""
    path = os.environ.get("SPARK_GROUPS_LOG_FILE")
    if not path or not os.path.exists(path):
        return []
    marker = f"group member subscribed: group={group} "
    times = []
    with open(path, errors="replace") as lines:
        for line in lines:
            if marker in line:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                times.append(stamp.timestamp())  # the log's local time
    return sorted(times)


class Flow(threading.Thread):
    """Produces small records round-robin at ``rate`` per second until stopped."""

    def __init__(self, servers: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic, self.partitions, self.rate = servers, topic, partitions, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": 5})
        try:
            step = max(1, self.rate // 50)  # 50 bursts a second
            while not self.stopping.is_set():
                for _ in range(step):
                    data = b"%d" % self.sent
                    producer.produce(self.topic, value=data, partition=self.sent % self.partitions)
                    self.sent += 1
                producer.poll(0)
                self.stopping.wait(step / self.rate)
        finally:
            producer.flush(10)

    def stop(self) -> None:
        """Stop producing and wait for the thread."""
        self.stopping.set()
        self.join(30)


def _plain_config(servers: str, group: str, strategy: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": servers,
        "group.id": group,
        "partition.assignment.strategy": strategy,
        "auto.offset.reset": "earliest",
        "log.connection.close": False,
        **GROUP_TIMING,
    }


def plain_handover(servers: str, strategy: str, rate: int, timeout_s: float = 120) -> dict:
    """Seconds from B's subscribe to its partitions and to its first record (plain clients)."""
    topic = create_topics(servers, 4, prefix="handover")[0]
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
    return {
        "to_partitions_s": got["assigned"] - t0,
        "to_first_record_s": got["first_record"] - t0,
    }


def spark_handover(
    spark: Any,
    servers: str,
    strategy: str,
    rate: int,
    scratch: Path,
    trigger_ms: int = 500,
    timeout_s: float = 180,
) -> dict:
    """The same with two kafka-group queries in ``spark`` (see the module doc)."""
    from spark_groups.group.history import history_path, read_history

    topic = create_topics(servers, 4, prefix="handover")[0]
    group = unique("spark-handover")
    work = scratch / group
    ledger = str(work / "ledger")
    opts = source_options(
        servers,
        [topic],
        group,
        **{"offsets.table": ledger, "partition.assignment.strategy": strategy},
    )
    a_batches: list[tuple[float, set[int]]] = []
    b_first: list[float] = []

    def on_a(df: Any, batch_id: int) -> None:
        started = time.time()
        a_batches.append((started, {r[0] for r in df.select("partition").collect()}))

    def on_b(df: Any, batch_id: int) -> None:
        if not b_first and df.count() > 0:
            b_first.append(time.time())

    def start(name: str, fn: Callable[[Any, int], None]) -> Any:
        return (
            spark.readStream.format("kafka-group")
            .options(**opts)
            .load()
            .writeStream.foreachBatch(fn)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .option("checkpointLocation", str(work / f"cp-{name}"))
            .start()
        )

    flow = Flow(servers, topic, 4, rate)
    flow.start()
    queries = []
    try:
        queries.append(start("a", on_a))
        wait_until(lambda: len(a_batches) >= 3, timeout_s, "query A's first batches")
        t0 = time.time()
        queries.append(start("b", on_b))
        wait_until(lambda: bool(b_first), timeout_s, "query B's first record")
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
    subscribed = _subscribe_times(group)
    t_sub = subscribed[-1] if len(subscribed) >= 2 else float("nan")
    kept: set[int] = set()
    for t, parts in a_batches:
        if t > settle + 1.0:
            kept |= parts
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
